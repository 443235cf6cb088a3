//! The nftables masquerade backend, laid out exactly as the reference lays
//! it out (`nft list ruleset` prints the same text):
//!
//! ```text
//! table inet cni_plugins_masquerade {
//!     comment "Masquerading for plugins from github.com/containernetworking/plugins"
//!     chain masq_checks {
//!         comment "Masquerade traffic from certain IPs to any (non-multicast) IP outside their subnet"
//!         ip saddr 10.0.0.5 ip daddr != 10.0.0.0/24 masquerade comment "<h(net)>-<h(if:id)>, net: …, if: …, id: …"
//!     }
//!     chain postrouting {
//!         type nat hook postrouting priority srcnat; policy accept;
//!         ip daddr 224.0.0.0/4 return
//!         ip6 daddr ff00::/8 return
//!         goto masq_checks
//!     }
//! }
//! ```
//!
//! Rules are found again by the hash at the start of their comment, so a
//! DEL of container A never removes the rule of container B that reuses
//! A's address. Every operation lists `masq_checks` only (not the ruleset)
//! and commits one batch.

use ipnetwork::IpNetwork;
use libcni::plugin_conf::GcAttachment;
use nix::errno::Errno;

use super::names::{nft_instance_hash, nft_network_hash, nft_rule_comment};
use libcni::nftables::{
    BaseChain, Batch, Expr, Family, NfSocket, NfTablesError, Rule, Verdict, HOOK_POSTROUTING,
    META_NFPROTO, NFPROTO_IPV4, NFPROTO_IPV6, PAYLOAD_NETWORK_HEADER,
};

pub const TABLE: &str = "cni_plugins_masquerade";
pub const MASQ_CHAIN: &str = "masq_checks";
pub const POSTROUTING_CHAIN: &str = "postrouting";
const TABLE_COMMENT: &str = "Masquerading for plugins from github.com/containernetworking/plugins";
const MASQ_CHAIN_COMMENT: &str =
    "Masquerade traffic from certain IPs to any (non-multicast) IP outside their subnet";
/// `srcnat`.
const SRCNAT_PRIORITY: i32 = 100;

/// A listing and a commit race with other writers: a rule listed may be
/// gone when the batch deletes it (ENOENT). Listing again settles it.
const ATTEMPTS: u32 = 3;

/// Whether nf_tables answers in this namespace.
pub(crate) fn usable() -> bool {
    NfSocket::open().and_then(|mut s| s.probe()).is_ok()
}

/// ADD: (re)creates the table and chains, refills `postrouting`, replaces
/// this attachment's rules with one per address.
pub(crate) fn setup(
    network: &str,
    ifname: &str,
    container_id: &str,
    ips: &[IpNetwork],
) -> Result<(), NfTablesError> {
    let instance = nft_instance_hash(network, ifname, container_id);
    let comment = nft_rule_comment(network, ifname, container_id);
    with_retry(|socket| {
        let stale = rules_with_prefix(socket, instance.as_bytes())?;
        let mut batch = Batch::new();
        batch.add_table(Family::Inet, TABLE, Some(TABLE_COMMENT.as_bytes()));
        batch.add_chain(
            Family::Inet,
            TABLE,
            MASQ_CHAIN,
            None,
            Some(MASQ_CHAIN_COMMENT.as_bytes()),
        );
        batch.add_chain(
            Family::Inet,
            TABLE,
            POSTROUTING_CHAIN,
            Some(BaseChain {
                chain_type: "nat",
                hook: HOOK_POSTROUTING,
                priority: SRCNAT_PRIORITY,
                policy_accept: false,
            }),
            None,
        );
        batch.flush_chain(Family::Inet, TABLE, POSTROUTING_CHAIN);
        for rule in postrouting_rules() {
            batch.add_rule(Family::Inet, TABLE, POSTROUTING_CHAIN, &rule);
        }
        for handle in &stale {
            batch.delete_rule(Family::Inet, TABLE, MASQ_CHAIN, *handle);
        }
        for ip in ips {
            batch.add_rule(
                Family::Inet,
                TABLE,
                MASQ_CHAIN,
                &masquerade_rule(ip, &comment),
            );
        }
        socket.commit(&batch)
    })
}

/// DEL: deletes this attachment's rules (whatever addresses they name).
pub(crate) fn teardown(
    network: &str,
    ifname: &str,
    container_id: &str,
) -> Result<(), NfTablesError> {
    let instance = nft_instance_hash(network, ifname, container_id);
    with_retry(|socket| {
        let mut batch = Batch::new();
        for handle in rules_with_prefix(socket, instance.as_bytes())? {
            batch.delete_rule(Family::Inet, TABLE, MASQ_CHAIN, handle);
        }
        socket.commit(&batch)
    })
}

/// GC: deletes the network's rules whose attachment is not in `valid`.
pub(crate) fn gc(network: &str, valid: &[GcAttachment]) -> Result<(), NfTablesError> {
    let network_hash = nft_network_hash(network);
    let valid: Vec<Vec<u8>> = valid
        .iter()
        .map(|a| nft_rule_comment(network, &a.ifname, &a.container_id))
        .collect();
    with_retry(|socket| {
        let mut batch = Batch::new();
        for rule in socket.list_rules(Family::Inet, TABLE, MASQ_CHAIN)? {
            let Some(comment) = rule.comment else {
                continue;
            };
            if comment.starts_with(network_hash.as_bytes()) && !valid.contains(&comment) {
                batch.delete_rule(Family::Inet, TABLE, MASQ_CHAIN, rule.handle);
            }
        }
        socket.commit(&batch)
    })
}

fn with_retry(
    mut operation: impl FnMut(&mut NfSocket) -> Result<(), NfTablesError>,
) -> Result<(), NfTablesError> {
    let mut socket = NfSocket::open()?;
    let mut attempt = 1;
    loop {
        match operation(&mut socket) {
            Err(e) if e.errno() == Some(Errno::ENOENT) && attempt < ATTEMPTS => {
                log::debug!("nftables: {e}; listing again");
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// Handles of the `masq_checks` rules whose comment starts with `prefix`.
fn rules_with_prefix(socket: &mut NfSocket, prefix: &[u8]) -> Result<Vec<u64>, NfTablesError> {
    Ok(socket
        .list_rules(Family::Inet, TABLE, MASQ_CHAIN)?
        .into_iter()
        .filter(|r| r.comment.as_deref().is_some_and(|c| c.starts_with(prefix)))
        .map(|r| r.handle)
        .collect())
}

/// `ip daddr == 224.0.0.0/4 return`, `ip6 daddr == ff00::/8 return`,
/// `goto masq_checks`.
fn postrouting_rules() -> Vec<Rule> {
    let mut v4 = nfproto(NFPROTO_IPV4);
    v4.extend(Expr::prefix_match(
        PAYLOAD_NETWORK_HEADER,
        16,
        &[224, 0, 0, 0],
        4,
        true,
    ));
    v4.push(Expr::Verdict(Verdict::Return));
    let mut v6 = nfproto(NFPROTO_IPV6);
    let mut ff00 = [0u8; 16];
    ff00[0] = 0xff;
    v6.extend(Expr::prefix_match(
        PAYLOAD_NETWORK_HEADER,
        24,
        &ff00,
        8,
        true,
    ));
    v6.push(Expr::Verdict(Verdict::Return));
    let goto = vec![Expr::Verdict(Verdict::Goto(MASQ_CHAIN.to_string()))];
    [v4, v6, goto]
        .into_iter()
        .map(|exprs| Rule {
            exprs,
            comment: None,
        })
        .collect()
}

/// `ip saddr == <ip> ip daddr != <subnet> masquerade comment "…"` (or ip6).
fn masquerade_rule(ip: &IpNetwork, comment: &[u8]) -> Rule {
    let (proto, saddr_offset, daddr_offset, address, subnet) = match ip {
        IpNetwork::V4(v4) => (
            NFPROTO_IPV4,
            12,
            16,
            v4.ip().octets().to_vec(),
            v4.network().octets().to_vec(),
        ),
        IpNetwork::V6(v6) => (
            NFPROTO_IPV6,
            8,
            24,
            v6.ip().octets().to_vec(),
            v6.network().octets().to_vec(),
        ),
    };
    let full = (address.len() * 8) as u8;
    let mut exprs = nfproto(proto);
    exprs.extend(Expr::prefix_match(
        PAYLOAD_NETWORK_HEADER,
        saddr_offset,
        &address,
        full,
        true,
    ));
    exprs.extend(Expr::prefix_match(
        PAYLOAD_NETWORK_HEADER,
        daddr_offset,
        &subnet,
        ip.prefix(),
        false,
    ));
    exprs.push(Expr::Masquerade);
    Rule {
        exprs,
        comment: Some(comment.to_vec()),
    }
}

/// The dependency `nft` adds to `ip …`/`ip6 …` matches in an inet table.
fn nfproto(proto: u8) -> Vec<Expr> {
    vec![
        Expr::Meta { key: META_NFPROTO },
        Expr::Cmp {
            equal: true,
            data: vec![proto],
        },
    ]
}
