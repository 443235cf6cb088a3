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
