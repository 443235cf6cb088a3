//! The iptables backend written in-process where `iptables` is
//! iptables-nft (Debian's and most distributions' default).
//!
//! iptables-nft keeps the `nat` table as an nf_tables table (`ip nat`,
//! `ip6 nat`) whose rules are plain nf_tables expressions. Writing those
//! very expressions over netlink gives the rules `iptables-save` prints
//! and the reference's `iptables -D` deletes, without a process: with 200
//! pods an `iptables-save` costs ~6 ms and an ADD ran two of them and an
//! `iptables-restore`, which was most of the growth of ADD time with the
//! number of pods. Here an ADD reads two chains (ours and, only when ours
//! exists, POSTROUTING) and commits one batch.
//!
//! The shapes are the ones iptables-nft 1.8 writes, checked against it by
//! comparing the kernel's dump of both (plugins/bridge/tests/ipmasq_iptables.rs):
//!
//! ```text
//! -s/-d <net>   payload load <prefix/8>b @ network header + <offset>, cmp eq|neq
//!               (a prefix that is not whole bytes loads the whole address
//!               and masks it with bitwise first; /0 writes nothing)
//! -m comment    match name comment rev 0, info = the text in 256 bytes
//! (every rule)  counter
//! -j ACCEPT     immediate verdict accept;  -j <chain>: immediate jump
//! -j MASQUERADE target name MASQUERADE rev 0, info = the family's empty range
//! ```
//!
//! A rule this module does not recognise reads as `other` (never ours),
//! and a spec it cannot write (a comment of 256 bytes or more) sends the
//! whole operation to the programs, which fail it as the reference does.

use std::collections::BTreeSet;

use crate::nftables::iptables_nft::{self, AddressField, NAT_TABLE as TABLE};
use crate::nftables::{
    Batch, CmpOp, Expr, Family, ListedRule, NfTablesError, NfTablesSocket, PayloadBase, Rule,
    Verdict,
};
use crate::IpFamily;

use super::{Change, NatRule, NatTable, RuleSpec};
use crate::ipmasq::IpMasqError;

const POSTROUTING: &str = "POSTROUTING";

/// The expressions iptables-nft writes for `spec`; `None` when it is not
/// one this module can write.
pub(crate) fn encode(spec: &RuleSpec, family: IpFamily) -> Option<Vec<Expr>> {
    if spec.other {
        return None;
    }
    let mut exprs = Vec::new();
    for (field, which) in [
        (&spec.source, AddressField::Source),
        (&spec.destination, AddressField::Destination),
    ] {
        if let Some((negated, net)) = field {
            if IpFamily::of_network(net) != family {
                return None;
            }
            exprs.extend(iptables_nft::address(which, *negated, net));
        }
    }
    if let Some(comment) = &spec.comment {
        exprs.push(iptables_nft::comment(comment)?);
    }
    exprs.push(Expr::Counter);
    match spec.target.as_deref()? {
        "ACCEPT" => exprs.push(Expr::Verdict(Verdict::Accept)),
        "RETURN" => exprs.push(Expr::Verdict(Verdict::Return)),
        "DROP" => exprs.push(Expr::Verdict(Verdict::Drop)),
        "MASQUERADE" => exprs.push(iptables_nft::masquerade(family)),
        // Any other upper-case name is an extension target we do not
        // write; a chain of ours is never all upper case.
        chain if chain.bytes().all(|b| b.is_ascii_uppercase()) => return None,
        chain => exprs.push(Expr::Verdict(Verdict::Jump(chain.to_string()))),
    }
    Some(exprs)
}

/// The spec of a listed rule, `other` set for anything this module would
/// not have written.
pub(crate) fn decode(exprs: Option<Vec<Expr>>, family: IpFamily) -> RuleSpec {
    let mut spec = RuleSpec::default();
    let Some(exprs) = exprs else {
        spec.other = true;
        return spec;
    };
    let source_offset = AddressField::Source.offset(family);
    let destination_offset = AddressField::Destination.offset(family);
    let address_len = usize::from(family.bits() / 8);
    let mut it = exprs.into_iter().peekable();
    while let Some(expr) = it.next() {
        match expr {
            Expr::Payload {
                base: PayloadBase::Network,
                offset,
                len,
            } if offset == source_offset || offset == destination_offset => {
                let mask = match it.peek() {
                    Some(Expr::Mask(mask)) => {
                        let mask = mask.clone();
                        it.next();
                        Some(mask)
                    }
                    _ => None,
                };
                let Some(Expr::Cmp { op, data }) = it.next() else {
                    spec.other = true;
                    break;
                };
                let Some(net) = iptables_nft::network_of(&data, mask.as_deref(), len, address_len)
                else {
                    spec.other = true;
                    break;
                };
                let field = Some((op == CmpOp::Neq, net));
                if offset == source_offset {
                    spec.source = field;
                } else {
                    spec.destination = field;
                }
            }
            Expr::XtMatch {
                name,
                revision: 0,
                info,
            } if name == "comment" => match iptables_nft::comment_text(&info) {
                Some(text) => spec.comment = Some(text),
                None => spec.other = true,
            },
            Expr::Counter => {}
            Expr::Verdict(verdict) if it.peek().is_none() => {
                spec.target = Some(match verdict {
                    Verdict::Accept => "ACCEPT".into(),
                    Verdict::Drop => "DROP".into(),
                    Verdict::Return => "RETURN".into(),
                    Verdict::Jump(chain) => chain,
                    Verdict::Goto(_) => {
                        spec.other = true;
                        break;
                    }
                });
            }
            target @ Expr::XtTarget { .. }
                if target == iptables_nft::masquerade(family) && it.peek().is_none() =>
            {
                spec.target = Some("MASQUERADE".into());
            }
            _ => {
                spec.other = true;
                break;
            }
        }
    }
    spec
}

fn nat_rule(rule: ListedRule, family: IpFamily) -> NatRule {
    let spec = decode(rule.expressions(), family);
    NatRule::new(&rule.chain, spec, Some(rule.handle))
}

/// What an operation on `chain` needs of the table: whether `chain` and
/// POSTROUTING exist, the rules of `chain` and, when `chain` exists, the
/// rules of POSTROUTING that jump or go to it (nothing can jump to a chain
/// that does not exist, so a first ADD lists no rules at all). `None` for `chain` reads every rule
/// of the table (GC).
pub(crate) fn read(ip_family: IpFamily, chain: Option<&str>) -> Result<NatTable, NfTablesError> {
    let family = Family::from(ip_family);
    let mut socket = NfTablesSocket::open()?;
    let mut table = NatTable::default();
    if socket.get_chain(family, TABLE, POSTROUTING)?.is_some() {
        table.chains.insert(POSTROUTING.to_string());
    }
    let listed = match chain {
        Some(chain) => {
            if socket.get_chain(family, TABLE, chain)?.is_none() {
                return Ok(table);
            }
            table.chains.insert(chain.to_string());
            let mut rules = socket.list_rules(family, TABLE, Some(chain))?;
            if chain != POSTROUTING {
                // POSTROUTING holds a jump per pod; only those to `chain`
                // matter here.
                rules.extend(
                    socket.list_rules_where(family, TABLE, Some(POSTROUTING), |r| {
                        r.verdict_chain().as_deref() == Some(chain)
                    })?,
                );
            }
            rules
        }
        None => socket.list_rules(family, TABLE, None)?,
    };
    let chains: BTreeSet<String> = listed.iter().map(|r| r.chain.clone()).collect();
    table.chains.extend(chains);
    table.rules = listed.into_iter().map(|r| nat_rule(r, ip_family)).collect();
    Ok(table)
}

/// Every change as one batch; `None` when some rule cannot be written here
/// (the caller then uses the programs).
pub(crate) fn batch(changes: &[Change], table: &NatTable, ip_family: IpFamily) -> Option<Batch> {
    let family = Family::from(ip_family);
    let mut batch = Batch::new();
    let creates = changes
        .iter()
        .any(|c| matches!(c, Change::NewChain(_) | Change::Append { .. }));
    if creates {
        // Sent for an existing table, this changes nothing and costs nothing.
        batch.add_table(family, TABLE, None);
    }
    let appends_to_postrouting = changes
        .iter()
        .any(|c| matches!(c, Change::Append { chain, .. } if chain == POSTROUTING));
    if appends_to_postrouting && !table.chains.contains(POSTROUTING) {
        batch.add_chain(
            family,
            TABLE,
            POSTROUTING,
            iptables_nft::nat_base_chain(POSTROUTING),
            None,
        );
    }
    for change in changes {
        match change {
            Change::NewChain(chain) => batch.add_chain(family, TABLE, chain, None, None),
            Change::Append { chain, spec } => {
                batch.add_rule(family, TABLE, chain, &Rule::new(encode(spec, ip_family)?));
            }
            Change::Delete(rule) => batch.delete_rule(family, TABLE, rule.chain(), rule.handle?),
            Change::Flush(chain) => batch.flush_chain(family, TABLE, chain),
            Change::DeleteChain(chain) => batch.delete_chain(family, TABLE, chain),
        }
    }
    Some(batch)
}

/// Commits `batch` in the calling thread's network namespace. The
/// socket's drop parks it: its close is left to the detached child that
/// ends the plugin call (see `crate::detached`).
pub(crate) fn commit(batch: Batch) -> Result<(), IpMasqError> {
    NfTablesSocket::open()?.commit(batch)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipnetwork::IpNetwork;

    fn net(s: &str) -> IpNetwork {
        s.parse().unwrap()
    }

    fn spec(
        source: Option<(bool, &str)>,
        destination: Option<(bool, &str)>,
        target: &str,
    ) -> RuleSpec {
        RuleSpec {
            source: source.map(|(n, s)| (n, net(s))),
            destination: destination.map(|(n, s)| (n, net(s))),
            comment: Some(r#"name: "mynet" id: "ctr""#.into()),
            target: Some(target.into()),
            other: false,
        }
    }

    #[test]
    fn every_rule_of_ours_reads_back_as_written() {
        let cases = [
            (
                spec(Some((false, "10.88.0.2/32")), None, "CNI-abc"),
                IpFamily::V4,
            ),
            (
                spec(None, Some((false, "10.88.0.0/16")), "ACCEPT"),
                IpFamily::V4,
            ),
            (
                spec(None, Some((false, "10.88.16.0/20")), "ACCEPT"),
                IpFamily::V4,
            ),
            (
                spec(None, Some((true, "224.0.0.0/4")), "MASQUERADE"),
                IpFamily::V4,
            ),
            (
                spec(Some((false, "10.88.0.0/16")), None, "CNI-abc"),
                IpFamily::V4,
            ),
            (
                spec(Some((false, "fd00::2/128")), None, "CNI-abc"),
                IpFamily::V6,
            ),
            (
                spec(None, Some((false, "fd00:1::/64")), "ACCEPT"),
                IpFamily::V6,
            ),
            (
                spec(None, Some((false, "fd00:1::/60")), "ACCEPT"),
                IpFamily::V6,
            ),
            (
                spec(None, Some((true, "ff00::/8")), "MASQUERADE"),
                IpFamily::V6,
            ),
        ];
        for (spec, family) in cases {
            let exprs = encode(&spec, family).expect("encodable");
            assert_eq!(decode(Some(exprs), family), spec);
        }
    }

    #[test]
    fn address_shapes_follow_iptables_nft() {
        // Whole bytes: load just those bytes, no mask.
        let exprs = encode(
            &spec(None, Some((false, "10.88.0.0/16")), "ACCEPT"),
            IpFamily::V4,
        )
        .unwrap();
        assert_eq!(
            exprs[..2],
            [
                Expr::Payload {
                    base: PayloadBase::Network,
                    offset: 16,
                    len: 2
                },
                Expr::Cmp {
                    op: CmpOp::Eq,
                    data: vec![10, 88]
                }
            ]
        );
        // Not whole bytes: the whole address, masked.
        let exprs = encode(
            &spec(None, Some((true, "224.0.0.0/4")), "MASQUERADE"),
            IpFamily::V4,
        )
        .unwrap();
        assert_eq!(exprs[1], Expr::Mask(vec![0xf0, 0, 0, 0]));
        assert_eq!(
            exprs[2],
            Expr::Cmp {
                op: CmpOp::Neq,
                data: vec![224, 0, 0, 0]
            }
        );
        // The last two are the counter and the target.
        assert_eq!(exprs[exprs.len() - 2], Expr::Counter);
        // /0 matches everything: nothing is written for it.
        let exprs = encode(
            &spec(None, Some((false, "0.0.0.0/0")), "ACCEPT"),
            IpFamily::V4,
        )
        .unwrap();
        assert_eq!(exprs.len(), 3);
    }

    #[test]
    fn unwritable_specs_go_to_the_programs() {
        let mut long = spec(None, None, "ACCEPT");
        long.comment = Some("x".repeat(iptables_nft::COMMENT_INFO_LEN));
        assert!(encode(&long, IpFamily::V4).is_none());
        assert!(encode(&spec(None, None, "SNAT"), IpFamily::V4).is_none());
        let mut other = spec(None, None, "ACCEPT");
        other.other = true;
        assert!(encode(&other, IpFamily::V4).is_none());
        // A v6 network in a v4 rule.
        assert!(encode(
            &spec(Some((false, "fd00::1/128")), None, "ACCEPT"),
            IpFamily::V4
        )
        .is_none());
    }

    #[test]
    fn foreign_rules_read_as_other() {
        assert!(decode(None, IpFamily::V4).other);
        let foreign = vec![Expr::Meta(crate::nftables::MetaKey::Mark), Expr::Counter];
        assert!(decode(Some(foreign), IpFamily::V4).other);
        // A masquerade with a port range is not ours.
        let ranged = vec![
            Expr::Counter,
            Expr::XtTarget {
                name: "MASQUERADE".into(),
                revision: 0,
                info: vec![1; 24],
            },
        ];
        assert!(decode(Some(ranged), IpFamily::V4).other);
        // A non-contiguous mask is not a network.
        let odd = vec![
            Expr::Payload {
                base: PayloadBase::Network,
                offset: 16,
                len: 4,
            },
            Expr::Mask(vec![0xff, 0, 0xff, 0]),
            Expr::Cmp {
                op: CmpOp::Eq,
                data: vec![10, 0, 1, 0],
            },
            Expr::Verdict(Verdict::Accept),
        ];
        assert!(decode(Some(odd), IpFamily::V4).other);
    }
}
