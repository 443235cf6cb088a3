//! Who holds an address: attachments and the content of lease files.
//!
//! A lease file `<dataDir>/<network>/<ip>` names its holder. Three formats
//! exist on real nodes and all are read:
//! - `<containerID>\r\n<ifname>`: what current reference versions and this
//!   plugin write;
//! - `<containerID>\n<ifname>`: reported from some packaged builds;
//! - `<containerID>`: versions before per-interface leases; such a lease
//!   belongs to every interface of the container.
//!
//! Surrounding whitespace is ignored, as the reference trims before
//! comparing.

use std::fmt;

use libcni::plugin_conf::is_valid_cni_name;

/// The line break between the container ID and the interface name.
pub const LINE_BREAK: &str = "\r\n";

/// Longest interface name the kernel accepts (IFNAMSIZ − 1).
const MAX_IFNAME_LEN: usize = 15;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttachmentError {
    #[error("missing containerID")]
    MissingContainerId,
    /// Also what keeps an ID from naming a path outside the store.
    #[error("invalid characters in containerID {0:?}")]
    InvalidContainerId(String),
    #[error("invalid interface name {0:?}")]
    InvalidIfName(String),
}

/// One (container ID, interface) pair: what ADD, DEL and CHECK act for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Attachment {
    container_id: String,
    ifname: String,
}

impl Attachment {
    /// Validates both parts. The container ID is trimmed first (the
    /// reference trims it before writing); after that it must match the
    /// spec's ID pattern, which also rules out `/`, `.`, `..` and
    /// whitespace, so neither part can steer a path out of the store.
    pub fn new(container_id: &str, ifname: &str) -> Result<Attachment, AttachmentError> {
        let container_id = container_id.trim();
        if container_id.is_empty() {
            return Err(AttachmentError::MissingContainerId);
        }
        if !is_valid_cni_name(container_id) {
            return Err(AttachmentError::InvalidContainerId(
                container_id.to_string(),
            ));
        }
        if !is_valid_ifname(ifname) {
            return Err(AttachmentError::InvalidIfName(ifname.to_string()));
        }
        Ok(Attachment {
            container_id: container_id.to_string(),
            ifname: ifname.to_string(),
        })
    }

    pub fn container_id(&self) -> &str {
        &self.container_id
    }

    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// The lease file content for this attachment.
    pub fn lease_content(&self) -> String {
        format!("{}{}{}", self.container_id, LINE_BREAK, self.ifname)
    }
}

impl fmt::Display for Attachment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.container_id, self.ifname)
    }
}

/// The kernel's rules for interface names, as the spec's skeleton checks
/// them.
pub fn is_valid_ifname(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_IFNAME_LEN
        && name != "."
        && name != ".."
        && !name
            .chars()
            .any(|c| c == '/' || c == ':' || c == '\0' || c.is_whitespace())
}

/// The holder named by a lease file.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LeaseOwner {
    /// `<containerID>` + line break + `<ifname>`.
    Attachment {
        container_id: String,
        ifname: String,
    },
    /// The legacy form: the container ID alone.
    Container(String),
}

impl LeaseOwner {
    /// Reads lease file content; `None` for an empty (or blank) file, which
    /// names nobody.
    pub fn parse(content: &[u8]) -> Option<LeaseOwner> {
        let text = String::from_utf8_lossy(content);
        let text = text.trim();
        if text.is_empty() {
            return None;
        }
        Some(match text.split_once('\n') {
            Some((id, ifname)) => LeaseOwner::Attachment {
                container_id: id.trim().to_string(),
                ifname: ifname.trim().to_string(),
            },
            None => LeaseOwner::Container(text.to_string()),
        })
    }

    pub fn container_id(&self) -> &str {
        match self {
            LeaseOwner::Attachment { container_id, .. } => container_id,
            LeaseOwner::Container(id) => id,
        }
    }

    /// The interface, or `None` for a legacy container-only lease.
    pub fn ifname(&self) -> Option<&str> {
        match self {
            LeaseOwner::Attachment { ifname, .. } => Some(ifname),
            LeaseOwner::Container(_) => None,
        }
    }

    /// True when this is exactly `attachment`'s lease.
    pub fn is_exactly(&self, attachment: &Attachment) -> bool {
        matches!(self, LeaseOwner::Attachment { container_id, ifname }
            if *container_id == attachment.container_id && *ifname == attachment.ifname)
    }

    /// True when this is a legacy lease of `attachment`'s container.
    pub fn is_legacy_of(&self, attachment: &Attachment) -> bool {
        matches!(self, LeaseOwner::Container(id) if *id == attachment.container_id)
    }

    pub fn for_attachment(attachment: &Attachment) -> LeaseOwner {
        LeaseOwner::Attachment {
            container_id: attachment.container_id.clone(),
            ifname: attachment.ifname.clone(),
        }
    }

    pub fn legacy_for(attachment: &Attachment) -> LeaseOwner {
        LeaseOwner::Container(attachment.container_id.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn att(id: &str, ifname: &str) -> Attachment {
        Attachment::new(id, ifname).unwrap()
    }

    #[test]
    fn writes_the_reference_format() {
        assert_eq!(att("dummy", "eth0").lease_content(), "dummy\r\neth0");
        // The reference trims the container ID before writing.
        assert_eq!(att("   dummy\n ", "eth0").lease_content(), "dummy\r\neth0");
    }

    #[test]
    fn reads_all_three_formats() {
        let expected = LeaseOwner::Attachment {
            container_id: "abc".into(),
            ifname: "eth0".into(),
        };
        assert_eq!(LeaseOwner::parse(b"abc\r\neth0"), Some(expected.clone()));
        assert_eq!(LeaseOwner::parse(b"abc\neth0"), Some(expected.clone()));
        assert_eq!(
            LeaseOwner::parse(b"  abc\r\neth0\n\n"),
            Some(expected.clone())
        );
        assert_eq!(
            LeaseOwner::parse(b"abc"),
            Some(LeaseOwner::Container("abc".into()))
        );
        assert_eq!(
            LeaseOwner::parse(b" abc \n"),
            Some(LeaseOwner::Container("abc".into()))
        );
        assert_eq!(LeaseOwner::parse(b""), None);
        assert_eq!(LeaseOwner::parse(b" \r\n\t"), None);
        assert!(expected.is_exactly(&att("abc", "eth0")));
        assert!(!expected.is_exactly(&att("abc", "eth1")));
        assert!(LeaseOwner::Container("abc".into()).is_legacy_of(&att("abc", "eth1")));
        assert!(!LeaseOwner::Container("abc".into()).is_exactly(&att("abc", "eth1")));
    }

    #[test]
    fn garbage_content_does_not_panic() {
        for content in [&b"\xff\xfe\n\x00"[..], b"\n", b"a\nb\nc", b"\r\n\r\n"] {
            let _ = LeaseOwner::parse(content);
        }
        assert_eq!(
            LeaseOwner::parse(b"a\nb\nc").and_then(|o| o.ifname().map(str::to_string)),
            Some("b\nc".into())
        );
    }

    #[test]
    fn ids_that_leave_the_store_are_refused() {
        for bad in [
            "..", ".", "../etc", "a/b", "/abs", ".hidden", "a b", "a:b", "a\0b",
        ] {
            assert!(
                matches!(
                    Attachment::new(bad, "eth0"),
                    Err(AttachmentError::InvalidContainerId(_))
                ),
                "{bad:?}"
            );
        }
        assert_eq!(
            Attachment::new("  ", "eth0"),
            Err(AttachmentError::MissingContainerId)
        );
        for bad in ["", ".", "..", "a/b", "eth:0", "eth 0", "abcdefghijklmnop"] {
            assert!(
                matches!(
                    Attachment::new("id", bad),
                    Err(AttachmentError::InvalidIfName(_))
                ),
                "{bad:?}"
            );
        }
        assert!(Attachment::new("a-b_c.1", "eth0.100").is_ok());
        assert!(Attachment::new("x", "abcdefghijklmno").is_ok());
    }
}
