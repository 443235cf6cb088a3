//! The etcd key layout, and the checks that keep names from steering keys.
//!
//! Everything of one network lives under `<prefix>/<network>/`
//! (`prefix` defaults to `/cluster-ipam`), so an operator reads a pool with
//! `etcdctl get --prefix /cluster-ipam/<network>/`:
//!
//! ```text
//! <prefix>/<network>/pool                     {"blockSize":26,"blockSize6":122}
//!     The block grid, written by the first claim. Every claim compares it,
//!     so nodes configured with another grid (whose blocks would overlap
//!     these) cannot claim at all.
//! <prefix>/<network>/blocks/<cidr>            {"node":"gpu-node-7"}
//!     One per claimed block, e.g. `blocks/10.20.0.64/26`: the node that
//!     owns it allocates every address of it on its own disk.
//! <prefix>/<network>/ips/<address>            {"node":..,"containerId":..,"ifname":..}
//!     A requested address outside the requesting node's blocks, reserved
//!     for the whole cluster. Written with fixed-width address text
//!     (`010.020.000.005`, IPv6 fully expanded) so that the addresses of a
//!     block are one key range.
//! <prefix>/<network>/nodes/<node>             {"leases":3,"blocks":1,"updated":1764633600}
//!     What the node reported when it last talked to etcd (block claims,
//!     GC, and its heartbeat every minute): the operator command reads it;
//!     `updated` is the node's last sign of life once it is silent.
//! <prefix>/<network>/alive/<node>             {"since":1764633600,"ttl":30}
//!     Attached to an etcd lease the node's heartbeat (`liveness`) keeps
//!     refreshed: present exactly while the node is known alive.
//! ```
//!
//! Network and node names are checked before any key is built from them:
//! a `/` would move a key under another network, and `..` is refused too
//! so that keys read as paths never climb.

use std::fmt::Write as _;
use std::net::IpAddr;

use ipnetwork::IpNetwork;
use libcni::plugin_conf::is_valid_cni_name;

/// The key prefix unless `etcd.prefix` says otherwise.
pub const DEFAULT_PREFIX: &str = "/cluster-ipam";

/// Longest node name: a Kubernetes node name is a DNS subdomain.
const MAX_NODE_NAME: usize = 253;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("invalid network name {0:?}: it must match ^[a-zA-Z0-9][a-zA-Z0-9_.-]*$ without '..'")]
    Network(String),
    #[error("invalid node name {0:?}: it must match ^[a-zA-Z0-9][a-zA-Z0-9_.-]*$ without '..', at most 253 characters")]
    Node(String),
    #[error("invalid etcd.prefix {0:?}: it must start with '/' and hold segments of [a-zA-Z0-9_.-], none empty or '..'")]
    Prefix(String),
}

fn is_valid_name(name: &str) -> bool {
    is_valid_cni_name(name) && !name.contains("..")
}

/// A network name fit for a key.
pub fn check_network(name: &str) -> Result<(), NameError> {
    if is_valid_name(name) {
        Ok(())
    } else {
        Err(NameError::Network(name.to_string()))
    }
}

/// A node name fit for a key.
pub fn check_node(name: &str) -> Result<(), NameError> {
    if is_valid_name(name) && name.len() <= MAX_NODE_NAME {
        Ok(())
    } else {
        Err(NameError::Node(name.to_string()))
    }
}

/// `prefix` as the pool's keys use it: one trailing slash dropped, so
/// `/cluster-ipam/` (as etcd users often write it) is `/cluster-ipam`.
pub fn normalize_prefix(prefix: &str) -> &str {
    match prefix.strip_suffix('/') {
        Some(rest) if !rest.is_empty() => rest,
        _ => prefix,
    }
}

/// A key prefix: `/a/b`, no trailing slash (a lone `/` is refused too: it
/// would put the pools at the root of the keyspace).
pub fn check_prefix(prefix: &str) -> Result<(), NameError> {
    let bad = || NameError::Prefix(prefix.to_string());
    let rest = prefix.strip_prefix('/').ok_or_else(bad)?;
    for segment in rest.split('/') {
        let ok = !segment.is_empty()
            && segment != "."
            && segment != ".."
            && segment
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
        if !ok {
            return Err(bad());
        }
    }
    Ok(())
}

/// The keys of one network. Built only from checked names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolKeys {
    /// `<prefix>/<network>/`
    root: String,
}

impl PoolKeys {
    pub fn new(prefix: &str, network: &str) -> Result<PoolKeys, NameError> {
        check_prefix(prefix)?;
        check_network(network)?;
        Ok(PoolKeys {
            root: format!("{prefix}/{network}/"),
        })
    }

    /// Every key of the network (a prefix).
    pub fn root(&self) -> &str {
        &self.root
    }

    pub fn pool(&self) -> String {
        format!("{}pool", self.root)
    }

    /// The prefix of every block key.
    pub fn blocks(&self) -> String {
        format!("{}blocks/", self.root)
    }

    pub fn block(&self, cidr: IpNetwork) -> String {
        format!("{}blocks/{}/{}", self.root, cidr.network(), cidr.prefix())
    }

    /// The block a block key names, `None` for a foreign key.
    pub fn parse_block(&self, key: &[u8]) -> Option<IpNetwork> {
        let key = std::str::from_utf8(key).ok()?;
        let cidr = key.strip_prefix(&self.blocks())?;
        let net: IpNetwork = cidr.parse().ok()?;
        (net.network() == net.ip()).then_some(net)
    }

    /// The prefix of every reserved-address key.
    pub fn ips(&self) -> String {
        format!("{}ips/", self.root)
    }

    pub fn ip(&self, ip: IpAddr) -> String {
        format!("{}ips/{}", self.root, sortable_ip(ip))
    }

    /// The address an address key names.
    pub fn parse_ip(&self, key: &[u8]) -> Option<IpAddr> {
        let key = std::str::from_utf8(key).ok()?;
        parse_sortable_ip(key.strip_prefix(&self.ips())?)
    }

    /// `[start, end)` over the address keys of `block`.
    pub fn ip_range(&self, block: IpNetwork) -> (String, String) {
        let start = self.ip(block.network());
        let last = match block {
            IpNetwork::V4(n) => IpAddr::V4(n.broadcast()),
            IpNetwork::V6(n) => {
                let host_bits = u128::MAX.checked_shr(u32::from(n.prefix())).unwrap_or(0);
                IpAddr::V6((u128::from(n.network()) | host_bits).into())
            }
        };
        // Keys of one family all have the same length, so the key right
        // after the last address's is that key with a zero byte appended.
        let mut end = self.ip(last);
        end.push('\0');
        (start, end)
    }

    /// The prefix of every node report.
    pub fn nodes(&self) -> String {
        format!("{}nodes/", self.root)
    }

    pub fn node(&self, node: &str) -> String {
        format!("{}nodes/{node}", self.root)
    }

    /// The prefix of every liveness key.
    pub fn alive_prefix(&self) -> String {
        format!("{}alive/", self.root)
    }

    /// The node's liveness key: attached to the lease its heartbeat keeps
    /// refreshed, so it exists exactly while the node is known alive.
    pub fn alive(&self, node: &str) -> String {
        format!("{}alive/{node}", self.root)
    }
}

/// Fixed-width text of an address whose byte order is the address order:
/// `010.020.000.005`, or eight groups of four hex digits for IPv6. IPv4
/// keys have a `.` where IPv6 keys have a hex digit, so the families never
/// interleave.
pub fn sortable_ip(ip: IpAddr) -> String {
    let mut text = String::with_capacity(39);
    match ip.to_canonical() {
        IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().iter().enumerate() {
                if i > 0 {
                    text.push('.');
                }
                let _ = write!(text, "{octet:03}");
            }
        }
        IpAddr::V6(v6) => {
            for (i, group) in v6.segments().iter().enumerate() {
                if i > 0 {
                    text.push(':');
                }
                let _ = write!(text, "{group:04x}");
            }
        }
    }
    text
}

/// The inverse of [`sortable_ip`].
pub fn parse_sortable_ip(text: &str) -> Option<IpAddr> {
    if text.len() == 15 && text.contains('.') {
        let mut octets = [0u8; 4];
        let mut parts = text.split('.');
        for octet in &mut octets {
            *octet = parts.next()?.parse().ok()?;
        }
        parts.next().is_none().then(|| IpAddr::from(octets))
    } else {
        text.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_would_steer_keys_are_refused() {
        for bad in ["", "a/b", "..", "a..b", "-a", "a b", "ä"] {
            assert!(check_network(bad).is_err(), "{bad:?}");
            assert!(check_node(bad).is_err(), "{bad:?}");
        }
        for good in ["fabric", "rdma.rail-0", "node_7"] {
            check_network(good).unwrap();
            check_node(good).unwrap();
        }
        assert!(check_node(&"n".repeat(254)).is_err());
        for bad in ["", "/", "x", "/a/", "/a//b", "/a/../b", "/a/./b", "/a b"] {
            assert!(check_prefix(bad).is_err(), "{bad:?}");
        }
        check_prefix("/cluster-ipam").unwrap();
        assert_eq!(normalize_prefix("/cluster-ipam/"), "/cluster-ipam");
        assert_eq!(normalize_prefix("/cluster-ipam"), "/cluster-ipam");
        assert_eq!(normalize_prefix("/"), "/");
        assert!(check_prefix(normalize_prefix("/a//")).is_err());
        check_prefix("/k8s/cluster-ipam.v1").unwrap();
    }

    #[test]
    fn layout() {
        let keys = PoolKeys::new("/p", "fabric").unwrap();
        let block: IpNetwork = "10.20.0.64/26".parse().unwrap();
        assert_eq!(keys.pool(), "/p/fabric/pool");
        assert_eq!(keys.block(block), "/p/fabric/blocks/10.20.0.64/26");
        assert_eq!(keys.parse_block(keys.block(block).as_bytes()), Some(block));
        assert_eq!(keys.parse_block(b"/p/fabric/blocks/10.20.0.65/26"), None);
        assert_eq!(keys.parse_block(b"/p/other/blocks/10.20.0.64/26"), None);
        let ip: IpAddr = "10.20.0.5".parse().unwrap();
        assert_eq!(keys.ip(ip), "/p/fabric/ips/010.020.000.005");
        assert_eq!(keys.parse_ip(keys.ip(ip).as_bytes()), Some(ip));
        assert_eq!(keys.node("n1"), "/p/fabric/nodes/n1");
        assert!(PoolKeys::new("/p", "a/b").is_err());
    }

    #[test]
    fn address_keys_sort_like_addresses_and_a_block_is_one_range() {
        let keys = PoolKeys::new("/p", "n").unwrap();
        let block: IpNetwork = "10.0.1.0/26".parse().unwrap();
        let (start, end) = keys.ip_range(block);
        let inside = |s: &str| {
            let k = keys.ip(s.parse().unwrap());
            k >= start && k < end
        };
        assert!(inside("10.0.1.0"));
        assert!(inside("10.0.1.63"));
        assert!(!inside("10.0.1.64"));
        assert!(!inside("10.0.0.255"));
        assert!(!inside("9.255.255.255"));
        assert!(!inside("100:0:1::"));
        assert!(!inside("::a00:140"));

        let v6: IpNetwork = "2001:db8::40/122".parse().unwrap();
        let (start, end) = keys.ip_range(v6);
        let inside = |s: &str| {
            let k = keys.ip(s.parse().unwrap());
            k >= start && k < end
        };
        assert!(inside("2001:db8::40"));
        assert!(inside("2001:db8::7f"));
        assert!(!inside("2001:db8::80"));
        assert!(!inside("2001:db8::3f"));
        assert!(!inside("10.0.0.1"));

        let mut ips: Vec<IpAddr> = ["10.0.0.10", "10.0.0.9", "9.0.0.200", "10.0.1.0"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let mut by_key = ips.clone();
        by_key.sort_by_key(|ip| sortable_ip(*ip));
        ips.sort();
        assert_eq!(ips, by_key);
        for ip in &ips {
            assert_eq!(parse_sortable_ip(&sortable_ip(*ip)), Some(*ip));
        }
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(parse_sortable_ip(&sortable_ip(v6)), Some(v6));
    }
}
