//! The nftables backend. The reference has none; this one keeps the
//! iptables backend's layout in a table of its own, in the `inet` family
//! so one table serves both IP versions:
//!
//! ```text
//! table inet cni_plugins_firewall {
//!     chain forward {
//!         type filter hook forward priority filter; policy accept;
//!         jump isolation_stage_1 comment "CNI firewall plugin rules (ingressPolicy: same-bridge|isolated)"
//!         jump CNI-ADMIN comment "CNI firewall plugin admin overrides"
//!         ip daddr 10.0.0.2 ct state established,related accept comment "cni firewall net=n id=c1 if=eth0"
//!         ip saddr 10.0.0.2 accept comment "cni firewall net=n id=c1 if=eth0"
//!     }
//!     chain CNI-ADMIN { }
//!     chain isolation_stage_1 {
//!         iifname "cni0" oifname != "cni0" jump isolation_stage_2 comment "… (ingressPolicy: same-bridge)"
//!         return comment "…"
//!     }
//!     chain isolation_stage_2 {
//!         oifname "cni0" drop comment "…"
//!         return comment "…"
//!     }
//! }
//! ```
//!
//! - The admin chain is named by `iptablesAdminChainName` here too: it is
//!   the operator's chain, jumped to before any container rule.
//! - Every address rule carries the attachment's tag as its comment, so
//!   DEL finds an attachment's rules without a prevResult, and GC finds
//!   the rules of this network's attachments that are no longer valid.
//! - The ingress policy lives in the same table and is enforced fully: a
//!   drop is final in nf_tables, whatever other tables say.
//! - An accept is not: it only ends this chain's verdict, and a drop in
//!   another table's forward hook still drops. The accepts admit traffic
//!   past what this table drops, which is the policy of chain `forward`:
//!   the plugin creates it as accept and never changes it afterwards, so a
//!   host that wants containers closed by default sets `policy drop` on it
//!   (or drops in the admin chain's tail rules of its own). A host whose
//!   restrictive forward policy lives in iptables needs the iptables
//!   backend, which is why the automatic choice prefers iptables
//!   ([`crate::backend`]).
//!
//! Every operation lists this table's rules (never the ruleset), builds
//! one batch, and commits it as one transaction; a listing made stale by
//! a concurrent change is retried ([`retry_if_vanished`]).

use std::collections::BTreeSet;

use ipnetwork::IpNetwork;
use libcni::nftables::expr::{CT_STATE_ESTABLISHED, CT_STATE_RELATED};
use libcni::nftables::{
    retry_if_vanished, userdata, AddressField, AddressMatch, BaseChain, Batch, CmpOp, Expr, Family,
    Hook, ListedRule, MetaKey, NfTablesError, NfTablesSocket, Rule, Verdict, IFNAMSIZ,
    NFPROTO_IPV4, NFPROTO_IPV6,
};
use libcni::IpFamily;

use crate::config::{tag_prefix, IngressPolicy};
use crate::error::FirewallError;
use crate::iptables::ISOLATION_COMMENT;

pub const TABLE: &str = "cni_plugins_firewall";
pub const FORWARD_CHAIN: &str = "forward";
pub const STAGE_1: &str = "isolation_stage_1";
pub const STAGE_2: &str = "isolation_stage_2";
const TABLE_COMMENT: &str = "Container traffic admitted by the CNI firewall plugin";
const ADMIN_JUMP_COMMENT: &str = "CNI firewall plugin admin overrides";
/// `NF_INET_FORWARD`.
const HOOK_FORWARD: u32 = 2;
/// `type filter hook forward priority filter`, policy left to the kernel's
/// accept on creation and to the host afterwards.
const FORWARD_BASE: BaseChain = BaseChain {
    chain_type: "filter",
    hook: Hook {
        number: HOOK_FORWARD,
        priority: 0,
    },
    policy_accept: false,
};

fn nfproto_is(family: IpFamily) -> Vec<Expr> {
    let proto = match family {
        IpFamily::V4 => NFPROTO_IPV4,
        IpFamily::V6 => NFPROTO_IPV6,
    };
    vec![
        Expr::Meta(MetaKey::Nfproto),
        Expr::Cmp {
            op: CmpOp::Eq,
            data: vec![proto],
        },
    ]
}

fn host(ip: &IpNetwork) -> IpNetwork {
    let bits = IpFamily::of_network(ip).bits();
    IpNetwork::new(ip.ip(), bits).unwrap_or(*ip)
}

/// `ip daddr X ct state established,related accept` and `ip saddr X
/// accept` (ip6 alike), as expressions.
pub fn address_rules(ip: &IpNetwork) -> [Vec<Expr>; 2] {
    let family = IpFamily::of_network(ip);
    let host = host(ip);
    let mut inbound = nfproto_is(family);
    inbound.extend(AddressMatch::new(AddressField::Destination, CmpOp::Eq, host).expressions());
    let ct_mask = CT_STATE_ESTABLISHED | CT_STATE_RELATED;
    inbound.extend([
        Expr::CtState,
        Expr::Mask(ct_mask.to_ne_bytes().to_vec()),
        Expr::Cmp {
            op: CmpOp::Neq,
            data: vec![0; 4],
        },
        Expr::Verdict(Verdict::Accept),
    ]);
    let mut outbound = nfproto_is(family);
    outbound.extend(AddressMatch::new(AddressField::Source, CmpOp::Eq, host).expressions());
    outbound.push(Expr::Verdict(Verdict::Accept));
    [inbound, outbound]
}

fn interface_is(key: MetaKey, name: &str, op: CmpOp) -> Vec<Expr> {
    let mut padded = name.as_bytes().to_vec();
    padded.resize(IFNAMSIZ, 0);
    vec![Expr::Meta(key), Expr::Cmp { op, data: padded }]
}

fn jump(chain: &str) -> Vec<Expr> {
    vec![Expr::Verdict(Verdict::Jump(chain.to_string()))]
}

fn rule_with(exprs: Vec<Expr>, comment: &str) -> Rule {
    Rule::new(exprs).with_comment(comment.as_bytes())
}

/// Whether a listed rule is `rule` (expressions and comment).
fn is(listed: &ListedRule, rule: &Rule) -> bool {
    listed.expressions().as_ref() == Some(&rule.exprs)
        && listed.comment()
            == rule.userdata.as_deref().and_then(|u| {
                userdata::find(u, userdata::COMMENT).map(|c| c.strip_suffix(&[0]).unwrap_or(c))
            })
}

fn comment_text(rule: &ListedRule) -> Option<String> {
    rule.comment()
        .map(|c| String::from_utf8_lossy(c.strip_suffix(&[0]).unwrap_or(c)).into_owned())
}

fn admin_jump(admin_chain: &str) -> Rule {
    rule_with(jump(admin_chain), ADMIN_JUMP_COMMENT)
}

fn open() -> Result<NfTablesSocket, FirewallError> {
    NfTablesSocket::open().map_err(FirewallError::NfTables)
}

/// Adds the table and the chains that do not exist yet.
fn ensure_chains(
    socket: &mut NfTablesSocket,
    batch: &mut Batch,
    chains: &[&str],
) -> Result<(), NfTablesError> {
    batch.add_table(
        Family::Inet,
        TABLE,
        Some(userdata::comment(TABLE_COMMENT.as_bytes())),
    );
    if socket
        .get_chain(Family::Inet, TABLE, FORWARD_CHAIN)?
        .is_none()
    {
        batch.add_chain(Family::Inet, TABLE, FORWARD_CHAIN, Some(FORWARD_BASE), None);
    }
    for chain in chains {
        if socket.get_chain(Family::Inet, TABLE, chain)?.is_none() {
            batch.add_chain(Family::Inet, TABLE, chain, None, None);
        }
    }
    Ok(())
}

/// ADD: table, chains, the admin jump, and the tagged address rules
/// (those already in place are left). Returns whether any address rule
/// was added, for the undo.
pub fn add(ips: &[IpNetwork], admin_chain: &str, tag: &str) -> Result<bool, FirewallError> {
    let mut socket = open()?;
    retry_if_vanished(NfTablesError::errno, || {
        let listed = socket.list_rules(Family::Inet, TABLE, Some(FORWARD_CHAIN))?;
        let mut batch = Batch::new();
        ensure_chains(&mut socket, &mut batch, &[admin_chain])?;
        let admin = admin_jump(admin_chain);
        if !listed.iter().any(|r| is(r, &admin)) {
            batch.insert_rule(Family::Inet, TABLE, FORWARD_CHAIN, &admin);
        }
        let mut added = false;
        for ip in ips {
            for exprs in address_rules(ip) {
                let rule = rule_with(exprs, tag);
                if !listed.iter().any(|r| is(r, &rule)) {
                    batch.add_rule(Family::Inet, TABLE, FORWARD_CHAIN, &rule);
                    added = true;
                }
            }
        }
        socket.commit(batch)?;
        Ok(added)
    })
    .map_err(FirewallError::NfTables)
}

/// Deletes the address rules whose tag `doomed` accepts.
fn delete_tagged(
    socket: &mut NfTablesSocket,
    doomed: impl Fn(&str) -> bool,
) -> Result<(), NfTablesError> {
    retry_if_vanished(NfTablesError::errno, || {
        let listed = socket.list_rules(Family::Inet, TABLE, Some(FORWARD_CHAIN))?;
        let mut batch = Batch::new();
        for rule in &listed {
            if comment_text(rule).is_some_and(|tag| doomed(&tag)) {
                batch.delete_rule(Family::Inet, TABLE, FORWARD_CHAIN, rule.handle);
            }
        }
        socket.commit(batch)
    })
}

/// DEL: the attachment's rules, found by its tag (whatever addresses
/// they name, prevResult or not). A missing table lists as no rules.
pub fn del(tag: &str) -> Result<(), FirewallError> {
    let mut socket = open()?;
    delete_tagged(&mut socket, |t| t == tag).map_err(FirewallError::NfTables)
}

/// GC: the rules of this network's attachments that are not in `keep`.
pub fn gc(network: &str, keep: &BTreeSet<String>) -> Result<(), FirewallError> {
    let prefix = tag_prefix(network);
    let mut socket = open()?;
    delete_tagged(&mut socket, |t| t.starts_with(&prefix) && !keep.contains(t))
        .map_err(FirewallError::NfTables)
}

/// CHECK: the forward chain, the admin jump, and each address's rules
/// with the attachment's tag.
pub fn check(ips: &[IpNetwork], admin_chain: &str, tag: &str) -> Result<(), FirewallError> {
    let mut socket = open()?;
    let forward = socket
        .get_chain(Family::Inet, TABLE, FORWARD_CHAIN)
        .map_err(FirewallError::NfTables)?;
    if !forward.is_some_and(|chain| chain.hook == Some(FORWARD_BASE.hook)) {
        return Err(FirewallError::Check(format!(
            "expected base chain inet {TABLE} {FORWARD_CHAIN} not found"
        )));
    }
    let listed = socket
        .list_rules(Family::Inet, TABLE, Some(FORWARD_CHAIN))
        .map_err(FirewallError::NfTables)?;
    if !listed.iter().any(|r| is(r, &admin_jump(admin_chain))) {
        return Err(FirewallError::Check(format!(
            "expected rule \"jump {admin_chain}\" not found in inet {TABLE} {FORWARD_CHAIN}"
        )));
    }
    for ip in ips {
        for (exprs, what) in address_rules(ip).into_iter().zip(["to", "from"]) {
            if !listed.iter().any(|r| is(r, &rule_with(exprs.clone(), tag))) {
                return Err(FirewallError::Check(format!(
                    "expected rule accepting traffic {what} {} not found in inet {TABLE} {FORWARD_CHAIN}",
                    ip.ip()
                )));
            }
        }
    }
    Ok(())
}

/// STATUS: nf_tables answers.
pub fn status() -> Result<(), FirewallError> {
    libcni::firewall_probe::probe_nftables().map_err(FirewallError::NfTables)
}

/// The ingress policy for `bridge` in this table: the iptables backend's
/// chains and rules in nftables form, each added only when missing.
pub fn setup_isolation(bridge: &str, policy: IngressPolicy) -> Result<(), FirewallError> {
    let comment = format!(
        "CNI firewall plugin rules (ingressPolicy: {})",
        policy.name()
    );
    let mut stage_1_bridge = interface_is(MetaKey::Iifname, bridge, CmpOp::Eq);
    stage_1_bridge.extend(interface_is(MetaKey::Oifname, bridge, CmpOp::Neq));
    stage_1_bridge.extend(jump(STAGE_2));
    let mut stage_1_drop = interface_is(MetaKey::Iifname, bridge, CmpOp::Eq);
    stage_1_drop.extend(interface_is(MetaKey::Oifname, bridge, CmpOp::Eq));
    stage_1_drop.push(Expr::Verdict(Verdict::Drop));
    let mut stage_2_drop = interface_is(MetaKey::Oifname, bridge, CmpOp::Eq);
    stage_2_drop.push(Expr::Verdict(Verdict::Drop));
    let to_stage_1 = rule_with(jump(STAGE_1), ISOLATION_COMMENT);
    let ret = rule_with(vec![Expr::Verdict(Verdict::Return)], ISOLATION_COMMENT);

    let mut socket = open()?;
    retry_if_vanished(NfTablesError::errno, || {
        let listed = socket.list_rules(Family::Inet, TABLE, None)?;
        let has = |chain: &str, rule: &Rule| {
            listed
                .iter()
                .any(|listed| listed.chain == chain && is(listed, rule))
        };
        let mut batch = Batch::new();
        ensure_chains(&mut socket, &mut batch, &[STAGE_1, STAGE_2])?;
        // Inserted: they go before the rules already there, and a later
        // insert goes before an earlier one (the reference's order).
        let mut inserts = vec![
            (FORWARD_CHAIN, to_stage_1.clone()),
            (STAGE_1, rule_with(stage_1_bridge.clone(), &comment)),
        ];
        if policy == IngressPolicy::Isolated {
            inserts.push((STAGE_1, rule_with(stage_1_drop.clone(), &comment)));
        }
        inserts.push((STAGE_2, rule_with(stage_2_drop.clone(), ISOLATION_COMMENT)));
        for (chain, rule) in &inserts {
            if !has(chain, rule) {
                batch.insert_rule(Family::Inet, TABLE, chain, rule);
            }
        }
        for chain in [STAGE_1, STAGE_2] {
            if !has(chain, &ret) {
                batch.add_rule(Family::Inet, TABLE, chain, &ret);
            }
        }
        socket.commit(batch)
    })
    .map_err(FirewallError::NfTables)
}
