//! Table, chain and rule userdata: libnftnl's records (type, length,
//! value), where `nft` keeps comments.
//!
//! `nft` reads the record types it knows and skips the others, so this
//! suite keeps its own bookkeeping in records of types far above
//! libnftnl's (0 and 1 today): [`NETWORK`] and [`FINGERPRINT`]. `nft list`
//! and the reference plugins show such rules exactly like rules without
//! them.

use sha2::{Digest, Sha512};

/// `NFTNL_UDATA_{TABLE,CHAIN,RULE}_COMMENT`: all three are 0.
pub const COMMENT: u8 = 0;
/// The network (CNI configuration name) that made a rule.
pub const NETWORK: u8 = 0xc0;
/// A short hash of what a rule says ([`fingerprint`]): a rule carrying the
/// fingerprint of the rule a plugin would write needs no rewriting.
pub const FINGERPRINT: u8 = 0xc1;
/// `NFT_USERDATA_MAXLEN`.
pub const MAX_LEN: usize = 256;

/// A userdata blob built record by record, never longer than the kernel
/// accepts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Userdata(Vec<u8>);

impl Userdata {
    pub fn new() -> Userdata {
        Userdata::default()
    }

    /// Appends a record holding `text` and its NUL, as `nft` writes text.
    /// Returns false, and appends nothing, when it does not fit.
    pub fn push_text(&mut self, kind: u8, text: &str) -> bool {
        let mut value = text.as_bytes().to_vec();
        value.push(0);
        self.push(kind, &value)
    }

    /// Appends a record; false, and nothing appended, when the value is
    /// longer than a record holds or the blob would exceed [`MAX_LEN`].
    pub fn push(&mut self, kind: u8, value: &[u8]) -> bool {
        let Ok(len) = u8::try_from(value.len()) else {
            return false;
        };
        if self.0.len() + 2 + value.len() > MAX_LEN {
            return false;
        }
        self.0.push(kind);
        self.0.push(len);
        self.0.extend_from_slice(value);
        true
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }
}

/// A userdata blob holding only a comment, as `nft` writes `comment "…"`:
/// the text and its NUL, cut to the 255 bytes a record holds.
pub fn comment(text: &[u8]) -> Vec<u8> {
    let mut value = text.to_vec();
    value.push(0);
    value.truncate(usize::from(u8::MAX));
    let mut blob = vec![COMMENT, value.len() as u8];
    blob.extend_from_slice(&value);
    blob
}

/// The records of a blob, in order, up to the first truncated one.
pub fn records(mut blob: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    std::iter::from_fn(move || {
        let [kind, len, rest @ ..] = blob else {
            return None;
        };
        let value = rest.get(..usize::from(*len))?;
        blob = rest.get(usize::from(*len)..).unwrap_or_default();
        Some((*kind, value))
    })
}

/// The value of the first record of type `kind`, without its trailing NUL.
pub fn find(blob: &[u8], kind: u8) -> Option<&[u8]> {
    records(blob)
        .find(|(k, _)| *k == kind)
        .map(|(_, value)| value.strip_suffix(&[0]).unwrap_or(value))
}

/// A text record's value (up to its first NUL), lossily decoded.
pub fn text(value: &[u8]) -> String {
    let end = value.iter().position(|b| *b == 0).unwrap_or(value.len());
    String::from_utf8_lossy(value.get(..end).unwrap_or_default()).into_owned()
}

/// The fingerprint of a rule described by `description` (its chain and
/// `nft` text, say): 32 hex digits of its SHA-512.
pub fn fingerprint(description: &str) -> String {
    let digest = Sha512::digest(description.as_bytes());
    digest.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comment_like_nft_and_read_back() {
        let blob = comment(b"macspoofchk-dummy-0-eth0");
        assert_eq!(blob[0], COMMENT);
        assert_eq!(blob[1], 25);
        assert_eq!(blob.last(), Some(&0));
        assert_eq!(find(&blob, COMMENT), Some(&b"macspoofchk-dummy-0-eth0"[..]));
        // Too long: cut to one record's worth, never a panic.
        let long = comment(&[b'x'; 400]);
        assert_eq!(long.len(), 2 + 255);
        assert_eq!(find(&long, COMMENT).map(<[u8]>::len), Some(255));
    }

    #[test]
    fn records_and_limits() {
        let mut data = Userdata::new();
        assert!(data.push_text(COMMENT, "ctr1"));
        assert!(data.push_text(NETWORK, "test"));
        let blob = data.clone().into_bytes();
        assert_eq!(blob, b"\x00\x05ctr1\x00\xc0\x05test\x00");
        assert_eq!(find(&blob, NETWORK).map(text).as_deref(), Some("test"));
        assert_eq!(find(&blob, FINGERPRINT), None);
        // A record over 255 bytes, or a blob over 256, is refused whole.
        assert!(!data.push(FINGERPRINT, &[0; 256]));
        assert!(!data.push(FINGERPRINT, &[0; 241]));
        assert_eq!(data.into_bytes(), blob);
    }

    #[test]
    fn truncated_or_foreign_blobs_never_panic() {
        assert_eq!(records(b"\x00\x40abc").count(), 0);
        assert_eq!(records(b"").count(), 0);
        assert_eq!(records(b"\x00").count(), 0);
        assert_eq!(find(&[0, 9, b'a'], COMMENT), None);
        assert_eq!(find(&[1, 1, 0], COMMENT), None);
        // What nft writes for `comment "icee6giejonei6so"`.
        assert_eq!(
            find(b"\x00\x11icee6giejonei6so\x00", COMMENT)
                .map(text)
                .as_deref(),
            Some("icee6giejonei6so")
        );
    }

    #[test]
    fn fingerprints_are_pinned() {
        // Rules written by an older version are found by these values, so a
        // change of the hash or its cut shows here. The first 16 bytes of
        // SHA-512 of "a" and "b" (`printf a | sha512sum | cut -c1-32`).
        assert_eq!(fingerprint("a"), "1f40fc92da241694750979ee6cf582f2");
        assert_eq!(fingerprint("b"), "5267768822ee624d48fce15ec5ca79cb");
    }
}
