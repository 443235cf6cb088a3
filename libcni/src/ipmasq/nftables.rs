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
//! A's address. Every operation lists only this table's rules (not the
//! ruleset) and commits one batch.
//!
//! An ADD leaves the shared part alone when it is already in place: the
//! chains when they exist as wanted (hook, type), `postrouting` when its
//! rules are exactly the three above. Re-sending an existing chain or
//! refilling `postrouting` would make the kernel wait for an RCU grace
//! period when the socket closes (see [`crate::nftables`]), which was
//! most of an ADD's time. A `postrouting` that differs (first ADD, or
//! changed by hand) is flushed and refilled in the same batch, so
//! concurrent ADDs still leave one copy of each rule.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::nftables::userdata;
use crate::nftables::{
    retry_if_vanished, AddressField, AddressMatch, BaseChain, Batch, CmpOp, Expr, Family, Hook,
    ListedRule, ListedRuleRef, MetaKey, NfTablesError, NfTablesSocket, Rule, Verdict,
    HOOK_POSTROUTING, NFPROTO_IPV4, NFPROTO_IPV6,
};
use crate::plugin_conf::GcAttachment;
use crate::IpFamily;
use ipnetwork::IpNetwork;

use super::names::{nft_instance_hash, nft_network_hash, nft_rule_comment};

pub const TABLE: &str = "cni_plugins_masquerade";
pub const MASQ_CHAIN: &str = "masq_checks";
pub const POSTROUTING_CHAIN: &str = "postrouting";
const TABLE_COMMENT: &str = "Masquerading for plugins from github.com/containernetworking/plugins";
const MASQ_CHAIN_COMMENT: &str =
    "Masquerade traffic from certain IPs to any (non-multicast) IP outside their subnet";
/// `type nat hook postrouting priority srcnat`.
const POSTROUTING: BaseChain = BaseChain {
    chain_type: "nat",
    hook: Hook {
        number: HOOK_POSTROUTING,
        priority: 100,
    },
    policy_accept: false,
};

/// ADD: creates what is missing of the table and chains, refills
/// `postrouting` if it differs, replaces this attachment's rules with one
/// per address.
pub(crate) fn setup(
    network: &str,
    ifname: &str,
    container_id: &str,
    ips: &[IpNetwork],
) -> Result<(), NfTablesError> {
    let instance = nft_instance_hash(network, ifname, container_id);
    let comment = nft_rule_comment(network, ifname, container_id);
    let mut socket = NfTablesSocket::open()?;
    retry_if_vanished(NfTablesError::errno, || {
        // `masq_checks` holds a rule per pod: only this attachment's are
        // kept from the listing.
        let listed = socket.list_rules_where(Family::Inet, TABLE, None, |r| {
            r.chain == POSTROUTING_CHAIN || is_attachment_rule(r, instance.as_bytes())
        })?;
        let masq_chain = socket.get_chain(Family::Inet, TABLE, MASQ_CHAIN)?;
        let postrouting = socket.get_chain(Family::Inet, TABLE, POSTROUTING_CHAIN)?;
        let mut batch = Batch::new();
        batch.add_table(
            Family::Inet,
            TABLE,
            Some(userdata::comment(TABLE_COMMENT.as_bytes())),
        );
        if masq_chain.is_none_or(|chain| chain.hook.is_some()) {
            batch.add_chain(
                Family::Inet,
                TABLE,
                MASQ_CHAIN,
                None,
                Some(userdata::comment(MASQ_CHAIN_COMMENT.as_bytes())),
            );
        }
        if !postrouting.is_some_and(|chain| POSTROUTING.is_in_place(&chain)) {
            batch.add_chain(
                Family::Inet,
                TABLE,
                POSTROUTING_CHAIN,
                Some(POSTROUTING),
                None,
            );
        }
        if !postrouting_current(&listed) {
            batch.flush_chain(Family::Inet, TABLE, POSTROUTING_CHAIN);
            for rule in postrouting_rules() {
                batch.add_rule(Family::Inet, TABLE, POSTROUTING_CHAIN, &rule);
            }
        }
        // The listing kept only this attachment's `masq_checks` rules.
        for rule in listed.iter().filter(|r| r.chain == MASQ_CHAIN) {
            batch.delete_rule(Family::Inet, TABLE, MASQ_CHAIN, rule.handle);
        }
        for ip in ips {
            batch.add_rule(
                Family::Inet,
                TABLE,
                MASQ_CHAIN,
                &masquerade_rule(ip, &comment),
            );
        }
        socket.commit(batch)
    })
}

/// DEL: deletes this attachment's rules (whatever addresses they name).
pub(crate) fn teardown(
    network: &str,
    ifname: &str,
    container_id: &str,
) -> Result<(), NfTablesError> {
    let instance = nft_instance_hash(network, ifname, container_id);
    let mut socket = NfTablesSocket::open()?;
    retry_if_vanished(NfTablesError::errno, || {
        let listed = socket.list_rules_where(Family::Inet, TABLE, Some(MASQ_CHAIN), |r| {
            is_attachment_rule(r, instance.as_bytes())
        })?;
        let mut batch = Batch::new();
        for rule in &listed {
            batch.delete_rule(Family::Inet, TABLE, MASQ_CHAIN, rule.handle);
        }
        socket.commit(batch)
    })?;
    Ok(())
}

/// GC: deletes the network's rules whose attachment is not in `valid`.
pub(crate) fn gc(network: &str, valid: &[GcAttachment]) -> Result<(), NfTablesError> {
    let network_hash = nft_network_hash(network);
    let valid: Vec<Vec<u8>> = valid
        .iter()
        .map(|a| nft_rule_comment(network, &a.ifname, &a.container_id))
        .collect();
    let mut socket = NfTablesSocket::open()?;
    retry_if_vanished(NfTablesError::errno, || {
        let mut batch = Batch::new();
        let stale = socket.list_rules_where(Family::Inet, TABLE, Some(MASQ_CHAIN), |r| {
            r.comment().is_some_and(|comment| {
                comment.starts_with(network_hash.as_bytes()) && !valid.iter().any(|v| v == comment)
            })
        })?;
        for rule in stale {
            batch.delete_rule(Family::Inet, TABLE, MASQ_CHAIN, rule.handle);
        }
        socket.commit(batch)
    })?;
    Ok(())
}

/// Whether `rule` is a `masq_checks` rule whose comment starts with
/// `prefix` (the attachment's hash).
fn is_attachment_rule(rule: &ListedRuleRef<'_>, prefix: &[u8]) -> bool {
    rule.chain == MASQ_CHAIN && rule.comment().is_some_and(|c| c.starts_with(prefix))
}

/// Whether `postrouting` holds exactly [`postrouting_rules`], in order,
/// with nothing else (no comment either, as the reference writes them).
fn postrouting_current(listed: &[ListedRule]) -> bool {
    let present: Vec<Option<Vec<Expr>>> = listed
        .iter()
        .filter(|r| r.chain == POSTROUTING_CHAIN)
        .map(|r| {
            if r.userdata.is_empty() {
                r.expressions()
            } else {
                None
            }
        })
        .collect();
    let wanted: Vec<Option<Vec<Expr>>> = postrouting_rules()
        .into_iter()
        .map(|rule| Some(rule.exprs))
        .collect();
    present == wanted
}

/// `ip daddr == 224.0.0.0/4 return`, `ip6 daddr == ff00::/8 return`,
/// `goto masq_checks`.
fn postrouting_rules() -> Vec<Rule> {
    // Both networks are valid (the prefix fits the address), so the
    // matches are never left out.
    let multicast = |address: IpAddr, prefix: u8| -> Vec<Expr> {
        IpNetwork::new(address, prefix)
            .map(|network| {
                AddressMatch::new(AddressField::Destination, CmpOp::Eq, network).expressions()
            })
            .unwrap_or_default()
    };
    let mut v4 = nfproto(NFPROTO_IPV4);
    v4.extend(multicast(Ipv4Addr::new(224, 0, 0, 0).into(), 4));
    v4.push(Expr::Verdict(Verdict::Return));
    let mut v6 = nfproto(NFPROTO_IPV6);
    v6.extend(multicast(
        Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0).into(),
        8,
    ));
    v6.push(Expr::Verdict(Verdict::Return));
    let goto = vec![Expr::Verdict(Verdict::Goto(MASQ_CHAIN.to_string()))];
    [v4, v6, goto].into_iter().map(Rule::new).collect()
}

/// `ip saddr == <ip> ip daddr != <subnet> masquerade comment "…"` (or ip6).
fn masquerade_rule(ip: &IpNetwork, comment: &[u8]) -> Rule {
    let family = IpFamily::of_network(ip);
    let proto = match family {
        IpFamily::V4 => NFPROTO_IPV4,
        IpFamily::V6 => NFPROTO_IPV6,
    };
    let mut exprs = nfproto(proto);
    if let Ok(address) = IpNetwork::new(ip.ip(), family.bits()) {
        exprs.extend(AddressMatch::new(AddressField::Source, CmpOp::Eq, address).expressions());
    }
    exprs.extend(AddressMatch::new(AddressField::Destination, CmpOp::Neq, *ip).expressions());
    exprs.push(Expr::Masquerade);
    Rule::new(exprs).with_comment(comment)
}

/// The dependency `nft` adds to `ip …`/`ip6 …` matches in an inet table.
fn nfproto(proto: u8) -> Vec<Expr> {
    vec![
        Expr::Meta(MetaKey::Nfproto),
        Expr::Cmp {
            op: CmpOp::Eq,
            data: vec![proto],
        },
    ]
}
