//! Link names: the checks every name from outside goes through before a
//! kernel call, and random names.
//!
//! [`check`] is the one rule for a Linux interface name, the reference's
//! `ValidateInterfaceName` (1-15 bytes, not `.` or `..`, no `/`, `:` or
//! whitespace) plus no control characters, which the kernel would take
//! and every log line and `ip` listing would then carry. The skeleton
//! applies it to `CNI_IFNAME` (code 4); [`check_key`] to the
//! configuration's keys that name a link (`master`, `device`, `bridge`,
//! `vrfname`, ...; code 7), so that no value reaches netlink, sysfs or a
//! rule unchecked: a 70,000-byte `master` made the netlink encoder panic.
//!
//! Random link names: a prefix and 8 random hex digits. With the `veth`
//! prefix this is the reference's `ip.RandomVethName`, which names bridge's
//! host veth ends and the temporary name a link crosses namespaces under
//! (macvlan, ipvlan, vlan, host-device); rdma-sriov gives its VFs a prefix
//! of its own for the crossing.
//!
//! 32 random bits make a clash in one namespace unlikely, not impossible:
//! callers that create or rename a link under such a name draw again when
//! the kernel answers EEXIST.

use std::fs::File;
use std::io::{self, Read};

use crate::error::{CniError, ErrorCode, ToCniError};

/// `IFNAMSIZ` less its NUL.
pub const MAX_NAME_BYTES: usize = 15;

/// The rule a name breaks. The texts are the reference's, so that
/// `CNI_IFNAME` errors read as the Go plugins' do; the reference has no
/// [`NameRule::Control`] (it takes control characters other than
/// whitespace).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NameRule {
    #[error("interface name is empty")]
    Empty,
    #[error("interface name is too long")]
    TooLong,
    #[error("interface name is . or ..")]
    Dots,
    #[error("interface name contains / or : or whitespace characters")]
    Separator,
    #[error("interface name contains control characters")]
    Control,
}

/// Whether the kernel takes `name` as an interface name, and it can be
/// printed as it is.
pub fn check(name: &str) -> Result<(), NameRule> {
    if name.is_empty() {
        return Err(NameRule::Empty);
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(NameRule::TooLong);
    }
    if name == "." || name == ".." {
        return Err(NameRule::Dots);
    }
    // Whitespace first: `\t` and `\n` are both, and the reference calls
    // them whitespace.
    if name
        .chars()
        .any(|c| c == '/' || c == ':' || c.is_whitespace())
    {
        return Err(NameRule::Separator);
    }
    if name.chars().any(char::is_control) {
        return Err(NameRule::Control);
    }
    Ok(())
}

/// A configuration key whose value cannot name a link.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {key} {}: {rule}{}", shown(.name), limit(*.rule))]
pub struct InvalidLinkName {
    /// The key as the configuration spells it (`master`, `prevResult.interfaces[0].name`).
    pub key: String,
    pub name: String,
    pub rule: NameRule,
}

impl ToCniError for InvalidLinkName {
    fn to_cni_error(&self) -> CniError {
        CniError::new(ErrorCode::InvalidNetworkConfig, self.to_string())
    }
}

/// The name for a message: quoted with its control characters escaped,
/// or only its size when it is too long to be worth printing.
fn shown(name: &str) -> String {
    if name.len() > 4 * MAX_NAME_BYTES {
        format!("of {} bytes", name.len())
    } else {
        format!("{name:?}")
    }
}

fn limit(rule: NameRule) -> String {
    match rule {
        NameRule::TooLong => format!(" (at most {MAX_NAME_BYTES} bytes)"),
        _ => String::new(),
    }
}

/// Checks the value of configuration key `key` as a link name.
pub fn check_key(key: &str, name: &str) -> Result<(), InvalidLinkName> {
    check(name).map_err(|rule| InvalidLinkName {
        key: key.to_string(),
        name: name.to_string(),
        rule,
    })
}

/// The reference plugins' prefix.
pub const VETH_PREFIX: &str = "veth";

/// `veth` + 8 random hex digits (12 bytes).
pub fn random_veth_name() -> io::Result<String> {
    random_name(VETH_PREFIX)
}

/// `prefix` + 8 random hex digits, read from `/dev/urandom`. A name fits
/// in IFNAMSIZ (15 bytes) when `prefix` has at most 7.
pub fn random_name(prefix: &str) -> io::Result<String> {
    let mut bytes = [0u8; 4];
    File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(name_from(prefix, bytes))
}

fn name_from(prefix: &str, bytes: [u8; 4]) -> String {
    format!("{prefix}{:08x}", u32::from_be_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_kernel_takes_and_the_rule_each_other_breaks() {
        let table: &[(&str, Result<(), NameRule>)] = &[
            ("eth0", Ok(())),
            ("lo", Ok(())),
            ("a", Ok(())),
            ("abcdefghijklmno", Ok(())),
            ("eth0.100", Ok(())),
            ("net-1_x@y", Ok(())),
            ("...", Ok(())),
            ("é", Ok(())),
            ("", Err(NameRule::Empty)),
            ("abcdefghijklmnop", Err(NameRule::TooLong)),
            // 15 characters, 16 bytes: the limit is in bytes.
            ("abcdefghijklmné", Err(NameRule::TooLong)),
            (".", Err(NameRule::Dots)),
            ("..", Err(NameRule::Dots)),
            ("eth/0", Err(NameRule::Separator)),
            ("eth:0", Err(NameRule::Separator)),
            ("eth 0", Err(NameRule::Separator)),
            ("eth\t0", Err(NameRule::Separator)),
            ("eth\n", Err(NameRule::Separator)),
            ("eth\u{a0}0", Err(NameRule::Separator)),
            ("eth\u{3000}0", Err(NameRule::Separator)),
            ("eth\u{0}0", Err(NameRule::Control)),
            ("eth\u{1b}[31m", Err(NameRule::Control)),
            ("eth\u{7f}", Err(NameRule::Control)),
            ("eth\u{9b}", Err(NameRule::Control)),
        ];
        for (name, expected) in table {
            assert_eq!(check(name), *expected, "{name:?}");
        }
    }

    #[test]
    fn key_errors_name_the_key_and_rule_without_raw_control_characters() {
        let e = check_key("master", "eth\u{1b}[31m").unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"invalid master "eth\u{1b}[31m": interface name contains control characters"#
        );
        assert_eq!(e.to_cni_error().code, ErrorCode::InvalidNetworkConfig);
        assert_eq!(
            check_key("device", "abcdefghijklmnop")
                .unwrap_err()
                .to_string(),
            r#"invalid device "abcdefghijklmnop": interface name is too long (at most 15 bytes)"#
        );
        assert_eq!(
            check_key("bridge", &"b".repeat(70_000))
                .unwrap_err()
                .to_string(),
            "invalid bridge of 70000 bytes: interface name is too long (at most 15 bytes)"
        );
        assert_eq!(
            check_key("vrfname", "").unwrap_err().to_string(),
            r#"invalid vrfname "": interface name is empty"#
        );
        check_key("master", "eth0").unwrap();
    }

    #[test]
    fn prefix_and_eight_hex_digits() {
        assert_eq!(name_from("veth", [0, 0, 0, 1]), "veth00000001");
        assert_eq!(name_from("rsv", [0xde, 0xad, 0xbe, 0xef]), "rsvdeadbeef");
        let name = random_veth_name().unwrap();
        assert_eq!(name.len(), 12, "{name}");
        assert!(name.starts_with("veth"), "{name}");
        assert!(name[4..].chars().all(|c| c.is_ascii_hexdigit()), "{name}");
        crate::skel::validate_interface_name(&name).unwrap();
        // 32 random bits: two draws in a row differ.
        assert_ne!(random_veth_name().unwrap(), random_veth_name().unwrap());
    }
}
