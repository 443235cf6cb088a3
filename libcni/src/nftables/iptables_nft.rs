//! The nf_tables expressions iptables-nft writes for the iptables rules the
//! plugins use, so that a plugin can write iptables rules in-process where
//! `iptables` is iptables-nft (Debian's and most distributions' default):
//! `iptables-save` then prints them, and `iptables -D` (the reference
//! plugins' DEL) deletes them, exactly as if `iptables-restore` had made
//! them. Checked against iptables-nft 1.8.9 by comparing the kernel's dump
//! of rules made both ways (the bridge and portmap tests).
//!
//! A rule is laid out in iptables-nft's order: protocol, source, then
//! destination address, then the matches in the order of their `-m`, a
//! counter, and the target:
//!
//! ```text
//! -p tcp|udp         meta l4proto, cmp           (Expr::l4proto_is)
//! -s/-d <net>        payload load <prefix/8>b @ network header + <offset>, cmp eq|neq
//!                    (a prefix that is not whole bytes loads the whole
//!                    address and masks it first; /0 writes nothing)
//! --dport <port>     payload load 2b @ transport header + 2, cmp
//!                    (Expr::destination_port_is)
//! -m comment         xt match comment rev 0 (the text in 256 bytes)
//! -m multiport       xt match multiport rev 1
//! -m addrtype        xt match addrtype rev 1
//! -m mark            meta mark, bitwise, cmp
//! -m conntrack --ctstate   xt match conntrack rev 3
//!                    (crate::iptables::nft_save::conntrack_state_info)
//! (every rule)       counter
//! -j ACCEPT/<chain>  immediate verdict
//! -j MASQUERADE      xt target MASQUERADE rev 0
//! -j MARK            xt target MARK rev 2
//! -j DNAT            xt target DNAT rev 2
//! ```
//!
//! The info structs of the x_tables extensions are in the host's byte
//! order except where the kernel header says `__be`.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use ipnetwork::IpNetwork;

use crate::IpFamily;

pub use super::AddressField;
use super::{
    AddressMatch, BaseChain, CmpOp, Expr, Hook, MetaKey, HOOK_OUTPUT, HOOK_POSTROUTING,
    HOOK_PREROUTING,
};

/// The table every plugin rule goes in.
pub const NAT_TABLE: &str = "nat";
/// `XT_MAX_COMMENT_LEN`: the comment match's info is this many bytes, the
/// text NUL-terminated inside it.
pub const COMMENT_INFO_LEN: usize = 256;
/// How many ports one multiport match holds (`XT_MULTI_PORTS`).
pub const MULTIPORT_MAX: usize = 15;
const HOOK_INPUT: u32 = 1;
/// Where the iptables programs live when PATH does not say (runtimes may
/// run plugins with an empty or short PATH).
pub const FALLBACK_DIRS: [&str; 6] = [
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

/// Whether `program` (e.g. `iptables-save`), found on PATH or in the usual
/// directories, is iptables-nft. Anything else (legacy, a wrapper script,
/// not installed) is not.
pub fn is_iptables_nft(program: &str) -> bool {
    let Some(path) = find_program(program) else {
        return false;
    };
    std::fs::canonicalize(&path)
        .ok()
        .and_then(|real| real.file_name().map(|n| n.to_string_lossy().into_owned()))
        .is_some_and(|name| name == "xtables-nft-multi")
}

/// `program` found on PATH, then in [`FALLBACK_DIRS`]; a path with a `/`
/// is taken as it is.
pub fn find_program(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    let from_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    from_path
        .into_iter()
        .chain(FALLBACK_DIRS.iter().map(PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The built-in chain `name` of `nat` as iptables-nft creates it.
pub fn nat_base_chain(name: &str) -> Option<BaseChain> {
    let (number, priority) = match name {
        "PREROUTING" => (HOOK_PREROUTING, -100),
        "INPUT" => (HOOK_INPUT, 100),
        "OUTPUT" => (HOOK_OUTPUT, -100),
        "POSTROUTING" => (HOOK_POSTROUTING, 100),
        _ => return None,
    };
    Some(BaseChain {
        chain_type: "nat",
        hook: Hook { number, priority },
        policy_accept: true,
    })
}

/// The table of firewall's rules.
pub const FILTER_TABLE: &str = "filter";
const HOOK_FORWARD: u32 = 2;

/// The built-in chain `name` of `filter` as iptables-nft creates it (only
/// when a rule first goes into it; `iptables-save` prints the built-in
/// chains of a table whether they exist or not).
pub fn filter_base_chain(name: &str) -> Option<BaseChain> {
    let number = match name {
        "INPUT" => HOOK_INPUT,
        "FORWARD" => HOOK_FORWARD,
        "OUTPUT" => HOOK_OUTPUT,
        _ => return None,
    };
    Some(BaseChain {
        chain_type: "filter",
        hook: Hook {
            number,
            priority: 0,
        },
        policy_accept: true,
    })
}

/// The built-in chain `name` of iptables table `table` (`nat` or
/// `filter`); `None` for a user chain or another table.
pub fn base_chain(table: &str, name: &str) -> Option<BaseChain> {
    match table {
        NAT_TABLE => nat_base_chain(name),
        FILTER_TABLE => filter_base_chain(name),
        _ => None,
    }
}

fn octets(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// `-s`/`-d` (`!` when `negated`) of `net`, masked to its prefix; a `/0`
/// matches everything, and iptables-nft writes nothing for it.
pub fn address(field: AddressField, negated: bool, net: &IpNetwork) -> Vec<Expr> {
    if net.prefix() == 0 {
        return Vec::new();
    }
    let op = if negated { CmpOp::Neq } else { CmpOp::Eq };
    AddressMatch::new(field, op, *net).expressions()
}

/// The network a payload load (and mask) and comparison of `len` bytes
/// match, for an address `address_len` bytes long.
pub fn network_of(
    data: &[u8],
    mask: Option<&[u8]>,
    len: u32,
    address_len: usize,
) -> Option<IpNetwork> {
    let len = usize::try_from(len).ok()?;
    if data.len() != len || len > address_len {
        return None;
    }
    let prefix = match mask {
        None => len * 8,
        Some(mask) => {
            if mask.len() != address_len || len != address_len {
                return None;
            }
            let ones: usize = mask.iter().map(|b| b.count_ones() as usize).sum();
            // Only contiguous prefixes are networks.
            let expected: Vec<u8> = (0..address_len)
                .map(|i| (0xff00u16 >> ones.saturating_sub(i * 8).min(8)) as u8)
                .collect();
            if expected != mask {
                return None;
            }
            ones
        }
    };
    let mut bytes = data.to_vec();
    bytes.resize(address_len, 0);
    let addr: IpAddr = if address_len == 4 {
        <[u8; 4]>::try_from(bytes.as_slice()).ok()?.into()
    } else {
        <[u8; 16]>::try_from(bytes.as_slice()).ok()?.into()
    };
    IpNetwork::new(addr, u8::try_from(prefix).ok()?).ok()
}

/// `-m comment --comment <text>`; `None` for a text iptables refuses
/// (256 bytes or more, or a NUL).
pub fn comment(text: &str) -> Option<Expr> {
    let bytes = text.as_bytes();
    if bytes.len() >= COMMENT_INFO_LEN || bytes.contains(&0) {
        return None;
    }
    let mut info = bytes.to_vec();
    info.resize(COMMENT_INFO_LEN, 0);
    Some(Expr::XtMatch {
        name: "comment".into(),
        revision: 0,
        info,
    })
}

/// The text of a comment match's info.
pub fn comment_text(info: &[u8]) -> Option<String> {
    if info.len() != COMMENT_INFO_LEN {
        return None;
    }
    let text = info.split(|b| *b == 0).next().unwrap_or_default();
    String::from_utf8(text.to_vec()).ok()
}

/// `-m multiport --destination-ports <ports>` (`xt_multiport_v1`: flags,
/// count, 15 ports, 15 range flags, invert); `None` for 0 or more than 15.
pub fn multiport_destination(ports: &[u16]) -> Option<Expr> {
    if ports.is_empty() || ports.len() > MULTIPORT_MAX {
        return None;
    }
    const XT_MULTIPORT_DESTINATION: u8 = 1;
    let mut info = vec![XT_MULTIPORT_DESTINATION, ports.len() as u8];
    for slot in 0..MULTIPORT_MAX {
        let port = ports.get(slot).copied().unwrap_or(0);
        info.extend_from_slice(&port.to_ne_bytes());
    }
    // Range flags and invert: none.
    info.resize(info.len() + MULTIPORT_MAX + 1, 0);
    Some(Expr::XtMatch {
        name: "multiport".into(),
        revision: 1,
        info,
    })
}

/// `-m addrtype --dst-type LOCAL` (`xt_addrtype_info_v1`).
pub fn addrtype_destination_local() -> Expr {
    const XT_ADDRTYPE_LOCAL: u16 = 1 << 2;
    let mut info = vec![0u8; 8];
    info[2..4].copy_from_slice(&XT_ADDRTYPE_LOCAL.to_ne_bytes());
    Expr::XtMatch {
        name: "addrtype".into(),
        revision: 1,
        info,
    }
}

/// `-m mark --mark <mark>/<mask>`: iptables-nft writes it natively.
pub fn mark(mark: u32, mask: u32) -> Vec<Expr> {
    let mut exprs = vec![Expr::Meta(MetaKey::Mark)];
    if mask != u32::MAX {
        exprs.push(Expr::Mask(mask.to_ne_bytes().to_vec()));
    }
    exprs.push(Expr::Cmp {
        op: CmpOp::Eq,
        data: (mark & mask).to_ne_bytes().to_vec(),
    });
    exprs
}

/// `-j MARK --set-xmark <mark>/<mask>` (`xt_mark_tginfo2`).
pub fn set_xmark(mark: u32, mask: u32) -> Expr {
    let mut info = mark.to_ne_bytes().to_vec();
    info.extend_from_slice(&mask.to_ne_bytes());
    Expr::XtTarget {
        name: "MARK".into(),
        revision: 2,
        info,
    }
}

/// `-j MASQUERADE`: IPv4 takes `nf_nat_ipv4_multi_range_compat` with one
/// empty range (24 bytes with alignment), IPv6 an empty `nf_nat_range`.
pub fn masquerade(family: IpFamily) -> Expr {
    let info = if family == IpFamily::V4 {
        let mut info = vec![0u8; 24];
        info[..4].copy_from_slice(&1u32.to_ne_bytes());
        info
    } else {
        vec![0u8; 40]
    };
    Expr::XtTarget {
        name: "MASQUERADE".into(),
        revision: 0,
        info,
    }
}

/// `-j DNAT --to-destination <ip>:<port>` (`nf_nat_range2`: flags, min
/// and max address, min and max port, base port; 48 bytes aligned).
pub fn dnat(ip: IpAddr, port: u16) -> Expr {
    const NF_NAT_RANGE_MAP_IPS: u32 = 1;
    const NF_NAT_RANGE_PROTO_SPECIFIED: u32 = 2;
    let mut address = octets(ip);
    address.resize(16, 0);
    let mut info = (NF_NAT_RANGE_MAP_IPS | NF_NAT_RANGE_PROTO_SPECIFIED)
        .to_ne_bytes()
        .to_vec();
    info.extend_from_slice(&address);
    info.extend_from_slice(&address);
    info.extend_from_slice(&port.to_be_bytes());
    info.extend_from_slice(&port.to_be_bytes());
    info.resize(48, 0);
    Expr::XtTarget {
        name: "DNAT".into(),
        revision: 2,
        info,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_structs_match_iptables_nft() {
        // Bytes as the kernel dumped them for rules iptables-nft 1.8.9 made.
        let Expr::XtMatch { info, .. } = multiport_destination(&[8080, 8081]).unwrap() else {
            panic!()
        };
        assert_eq!(info.len(), 48);
        assert_eq!(info[..6], [0x01, 0x02, 0x90, 0x1f, 0x91, 0x1f]);
        let Expr::XtMatch { info, .. } = addrtype_destination_local() else {
            panic!()
        };
        assert_eq!(info, [0, 0, 4, 0, 0, 0, 0, 0]);
        let Expr::XtTarget { info, .. } = set_xmark(0x2000, 0x2000) else {
            panic!()
        };
        assert_eq!(info, [0, 0x20, 0, 0, 0, 0x20, 0, 0]);
        let Expr::XtTarget { info, .. } = dnat("10.88.0.2".parse().unwrap(), 80) else {
            panic!()
        };
        let mut expected = vec![3, 0, 0, 0, 10, 88, 0, 2];
        expected.resize(20, 0);
        expected.extend_from_slice(&[10, 88, 0, 2]);
        expected.resize(36, 0);
        expected.extend_from_slice(&[0, 0x50, 0, 0x50]);
        expected.resize(48, 0);
        assert_eq!(info, expected);
        let Expr::XtTarget { info, .. } = masquerade(IpFamily::V4) else {
            panic!()
        };
        assert_eq!(info[..4], [1, 0, 0, 0]);
        assert_eq!(info.len(), 24);
    }

    #[test]
    fn limits() {
        assert!(multiport_destination(&[]).is_none());
        assert!(multiport_destination(&[1; 16]).is_none());
        assert!(comment(&"x".repeat(255)).is_some());
        assert!(comment(&"x".repeat(256)).is_none());
        assert!(comment("a\0b").is_none());
        assert_eq!(
            comment_text(&{
                let Some(Expr::XtMatch { info, .. }) = comment("hello") else {
                    panic!()
                };
                info
            })
            .as_deref(),
            Some("hello")
        );
    }

    #[test]
    fn networks_read_back() {
        for text in [
            "10.88.0.0/16",
            "10.88.16.0/20",
            "224.0.0.0/4",
            "10.0.0.2/32",
        ] {
            let net: IpNetwork = text.parse().unwrap();
            let exprs = address(AddressField::Destination, false, &net);
            let (len, mask, data) = match exprs.as_slice() {
                [Expr::Payload { len, .. }, Expr::Cmp { data, .. }] => (*len, None, data.clone()),
                [Expr::Payload { len, .. }, Expr::Mask(m), Expr::Cmp { data, .. }] => {
                    (*len, Some(m.clone()), data.clone())
                }
                other => panic!("{other:?}"),
            };
            assert_eq!(network_of(&data, mask.as_deref(), len, 4), Some(net));
        }
        assert!(address(AddressField::Source, false, &"0.0.0.0/0".parse().unwrap()).is_empty());
        assert_eq!(
            network_of(&[10, 0, 1, 0], Some(&[0xff, 0, 0xff, 0]), 4, 4),
            None
        );
    }

    #[test]
    fn nat_base_chains() {
        assert_eq!(base_chain("filter", "FORWARD").unwrap().hook.number, 2);
        assert!(base_chain("filter", "CNI-FORWARD").is_none());
        assert!(base_chain("mangle", "FORWARD").is_none());
        assert_eq!(nat_base_chain("PREROUTING").unwrap().hook.priority, -100);
        assert_eq!(nat_base_chain("POSTROUTING").unwrap().hook.priority, 100);
        assert!(nat_base_chain("CNI-HOSTPORT-DNAT").is_none());
    }
}
