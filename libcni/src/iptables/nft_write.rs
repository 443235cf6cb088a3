//! Changes to an iptables-nft table written over netlink, in the form
//! `iptables-restore` itself gives them, for plugins that keep their rules
//! as saved text (firewall's iptables backend) but need not start
//! `iptables-restore` to write them: where `iptables` is iptables-nft, that
//! process start was most of such a call's time and its largest resident
//! set. `iptables-save` then prints the rules exactly as if
//! `iptables-restore` had written them, and `iptables -D` (the reference
//! plugins' DEL) finds them.
//!
//! Only rules in the saved form of the shapes [`super::nft_save`] reads
//! are written: `[!] -s/-d <net>` or `[!] -i/-o <name>[+]` (not both in one
//! rule), `-m comment --comment`, `-m conntrack [!] --ctstate <states>`,
//! and `-j ACCEPT|DROP|RETURN|<chain>` or `-g <chain>`. A change with any
//! other rule writes nothing and answers `false`: the caller runs
//! `iptables-restore` instead.
//!
//! The expressions follow iptables-nft 1.8: interfaces, then addresses,
//! then the matches in their order, a counter, and the verdict. A built-in
//! chain is created with its table when a rule first goes into it, as
//! iptables-nft does.

use std::collections::BTreeSet;

use ipnetwork::IpNetwork;

use crate::nftables::iptables_nft::{self, AddressField};
use crate::nftables::{Batch, CmpOp, Expr, Family, MetaKey, NfTablesError, NfTablesSocket};
use crate::nftables::{Rule, Verdict};
use crate::IpFamily;

use super::nft_save::conntrack_state_info;

/// One change of a table, as a restore script line would make it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// `:<chain> - [0:0]` for a chain that does not exist yet.
    CreateChain(String),
    /// `-I <chain> 1 <args>`.
    InsertFirst { chain: String, args: Vec<String> },
    /// `-A <chain> <args>`.
    Append { chain: String, args: Vec<String> },
    /// `-D` of the rule with this handle (see
    /// [`super::nft_save::read_chains_with_handles`]).
    Delete { chain: String, handle: u64 },
}

/// The expressions iptables-nft writes for a rule of saved arguments
/// `args` (what follows `-A <chain>`); `None` for a shape not written here.
pub fn rule_expressions(family: IpFamily, args: &[String]) -> Option<Vec<Expr>> {
    let mut interfaces = Vec::new();
    let mut addresses = Vec::new();
    let mut matches = Vec::new();
    let mut verdict = None;
    let mut negated = false;
    let mut it = args.iter().map(String::as_str);
    while let Some(arg) = it.next() {
        if verdict.is_some() {
            return None;
        }
        let negate_next = arg == "!";
        match arg {
            "!" if !negated => {}
            "-s" | "-d" => {
                let net: IpNetwork = it.next()?.parse().ok()?;
                if IpFamily::of_network(&net) != family || net.prefix() == 0 {
                    return None;
                }
                let field = if arg == "-s" {
                    AddressField::Source
                } else {
                    AddressField::Destination
                };
                addresses.extend(iptables_nft::address(field, negated, &net));
            }
            "-i" | "-o" => {
                let name = it.next()?;
                let data = match name.strip_suffix('+') {
                    Some(prefix) => prefix.as_bytes().to_vec(),
                    None => {
                        let mut exact = name.as_bytes().to_vec();
                        exact.push(0);
                        exact
                    }
                };
                if data.is_empty() || data.first() == Some(&0) || name.len() >= IFNAMSIZ {
                    return None;
                }
                let key = if arg == "-i" {
                    MetaKey::Iifname
                } else {
                    MetaKey::Oifname
                };
                let op = if negated { CmpOp::Neq } else { CmpOp::Eq };
                interfaces.push(Expr::Meta(key));
                interfaces.push(Expr::Cmp { op, data });
            }
            "-m" if !negated => match (it.next()?, it.next()?) {
                ("comment", "--comment") => matches.push(iptables_nft::comment(it.next()?)?),
                ("conntrack", flag) => {
                    let inverted = flag == "!";
                    let flag = if inverted { it.next()? } else { flag };
                    if flag != "--ctstate" {
                        return None;
                    }
                    matches.push(Expr::XtMatch {
                        name: "conntrack".into(),
                        revision: 3,
                        info: conntrack_state_info(it.next()?, inverted)?,
                    });
                }
                _ => return None,
            },
            "-j" if !negated => {
                verdict = Some(match it.next()? {
                    "ACCEPT" => Verdict::Accept,
                    "DROP" => Verdict::Drop,
                    "RETURN" => Verdict::Return,
                    chain if is_chain_name(chain) => Verdict::Jump(chain.to_string()),
                    _ => return None,
                });
            }
            "-g" if !negated => {
                let chain = it.next()?;
                if !is_chain_name(chain) {
                    return None;
                }
                verdict = Some(Verdict::Goto(chain.to_string()));
            }
            _ => return None,
        }
        negated = negate_next;
    }
    if negated || (!interfaces.is_empty() && !addresses.is_empty()) {
        return None;
    }
    let mut exprs = interfaces;
    exprs.extend(addresses);
    exprs.extend(matches);
    exprs.push(Expr::Counter);
    exprs.extend(verdict.map(Expr::Verdict));
    Some(exprs)
}

/// `IFNAMSIZ`: an interface name is shorter.
const IFNAMSIZ: usize = 16;

/// A user chain's name as a target: anything upper-case-only is an
/// extension target (`MASQUERADE`, `LOG`, ...) this module does not write,
/// unless it has a `-` (as every CNI chain does).
fn is_chain_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('-')
        && (name.contains('-') || name.chars().any(|c| c.is_ascii_lowercase()))
}

/// Writes `changes` to table `table` (`filter` or `nat`) of `family` as
/// one transaction; `Ok(false)`, having written nothing, when a rule is not
/// one this module writes. A failing transaction writes nothing either.
pub fn commit(family: IpFamily, table: &str, changes: &[Change]) -> Result<bool, NfTablesError> {
    let nf_family = Family::from(family);
    let mut rules = Vec::with_capacity(changes.len());
    for change in changes {
        rules.push(match change {
            Change::InsertFirst { args, .. } | Change::Append { args, .. } => {
                match rule_expressions(family, args) {
                    Some(exprs) => Some(Rule::new(exprs)),
                    None => return Ok(false),
                }
            }
            Change::CreateChain(_) | Change::Delete { .. } => None,
        });
    }
    let mut socket = NfTablesSocket::open()?;
    let mut batch = Batch::new();
    let mut table_added = false;
    let mut base_chains_in_place: BTreeSet<&str> = BTreeSet::new();
    for (change, rule) in changes.iter().zip(rules) {
        match (change, rule) {
            (Change::CreateChain(chain), _) => {
                if !table_added {
                    batch.add_table(nf_family, table, None);
                    table_added = true;
                }
                batch.add_chain(nf_family, table, chain, None, None);
            }
            (Change::InsertFirst { chain, .. } | Change::Append { chain, .. }, Some(rule)) => {
                if let Some(base) = iptables_nft::base_chain(table, chain) {
                    if base_chains_in_place.insert(chain.as_str())
                        && socket.get_chain(nf_family, table, chain)?.is_none()
                    {
                        if !table_added {
                            batch.add_table(nf_family, table, None);
                            table_added = true;
                        }
                        batch.add_chain(nf_family, table, chain, Some(base), None);
                    }
                }
                if matches!(change, Change::InsertFirst { .. }) {
                    batch.insert_rule(nf_family, table, chain, &rule);
                } else {
                    batch.add_rule(nf_family, table, chain, &rule);
                }
            }
            (Change::Delete { chain, handle }, _) => {
                batch.delete_rule(nf_family, table, chain, *handle);
            }
            (Change::InsertFirst { .. } | Change::Append { .. }, None) => return Ok(false),
        }
    }
    socket.commit(batch)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iptables::nft_save::read_chains_with_handles;
    use crate::iptables::{split_args, Programs, RestoreScript};
    use crate::netlink::test_support::in_private_netns;

    fn args(line: &str) -> Vec<String> {
        split_args(line).unwrap()
    }

    /// firewall's rule shapes, and a few more of the shapes read back.
    const SHAPES: [(&str, &str); 8] = [
        (
            "FORWARD",
            "-m comment --comment \"CNI firewall plugin rules\" -j CNI-FORWARD",
        ),
        (
            "CNI-FORWARD",
            "-m comment --comment \"CNI firewall plugin admin overrides\" -j CNI-ADMIN",
        ),
        (
            "CNI-FORWARD",
            "-d ADDR -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
        ),
        ("CNI-FORWARD", "-s ADDR -j ACCEPT"),
        (
            "CNI-FW-ATTACHMENTS",
            "-d ADDR -m comment --comment \"cni firewall net=n id=c1 if=eth0\" -j RETURN",
        ),
        (
            "CNI-FORWARD",
            "! -s NET -m conntrack ! --ctstate NEW,INVALID -j DROP",
        ),
        (
            "CNI-ADMIN",
            "-i cni0 ! -o cni0 -m comment --comment \"isolation\" -j CNI-FW-ATTACHMENTS",
        ),
        ("CNI-ADMIN", "-o veth+ -g CNI-FW-ATTACHMENTS"),
    ];

    fn shapes(family: IpFamily) -> Vec<(String, Vec<String>)> {
        let (addr, net) = match family {
            IpFamily::V4 => ("10.0.0.2/32", "10.0.0.0/24"),
            IpFamily::V6 => ("2001:db8::2/128", "2001:db8::/64"),
        };
        SHAPES
            .iter()
            .map(|(chain, rule)| {
                let rule = rule.replace("ADDR", addr).replace("NET", net);
                (chain.to_string(), args(&rule))
            })
            .collect()
    }

    const CHAINS: [&str; 4] = ["CNI-FORWARD", "CNI-ADMIN", "CNI-FW-ATTACHMENTS", "FORWARD"];

    fn saved(family: IpFamily) -> String {
        let text = Programs::of(family).save("filter").unwrap();
        text.lines()
            .filter(|line| !line.starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Each shape written here prints in `iptables-save` as the same rule
    /// written by `iptables-restore` prints, with the table and built-in
    /// chain made as iptables-nft makes them; and deleting by handle
    /// leaves what `iptables-restore -D` leaves.
    #[test]
    fn written_as_iptables_restore_writes() {
        if !Programs::of(IpFamily::V4).is_iptables_nft() {
            crate::test_skip::skip(
                "written_as_iptables_restore_writes",
                "iptables is not iptables-nft here: nothing to compare with",
            );
            return;
        }
        for family in [IpFamily::V4, IpFamily::V6] {
            let rules = shapes(family);
            let (by_restore, nft_by_restore) = in_private_netns(|| {
                let mut script = RestoreScript::new("filter");
                for chain in &CHAINS[..3] {
                    script.declare_chain(chain);
                }
                for (chain, rule) in &rules {
                    if chain == "FORWARD" {
                        script.insert(chain, 1, rule);
                    } else {
                        script.append(chain, rule);
                    }
                }
                Programs::of(family).restore(&script).unwrap();
                (saved(family), nft_ruleset())
            });
            let (in_process, nft_in_process, after_delete) = in_private_netns(|| {
                let mut changes: Vec<Change> = CHAINS[..3]
                    .iter()
                    .map(|c| Change::CreateChain(c.to_string()))
                    .collect();
                for (chain, rule) in &rules {
                    let chain = chain.clone();
                    let args = rule.clone();
                    changes.push(if chain == "FORWARD" {
                        Change::InsertFirst { chain, args }
                    } else {
                        Change::Append { chain, args }
                    });
                }
                assert!(commit(family, "filter", &changes).unwrap());
                let written = saved(family);
                let nft_written = nft_ruleset();
                let (table, handles) = read_chains_with_handles(family, "filter", &CHAINS)
                    .unwrap()
                    .expect("every shape reads back");
                let deletions: Vec<Change> = table
                    .rules
                    .iter()
                    .zip(&handles)
                    .filter(|(rule, _)| rule.target() == Some("ACCEPT"))
                    .map(|(rule, handle)| Change::Delete {
                        chain: rule.chain.clone(),
                        handle: *handle,
                    })
                    .collect();
                assert_eq!(deletions.len(), 2);
                assert!(commit(family, "filter", &deletions).unwrap());
                (written, nft_written, saved(family))
            });
            assert!(
                nft_by_restore.contains("match name conntrack rev 3"),
                "{nft_by_restore}"
            );
            assert_eq!(in_process, by_restore, "{family}");
            assert_eq!(nft_in_process, nft_by_restore, "{family}");
            let expected_after: Vec<&str> = by_restore
                .lines()
                .filter(|line| !line.ends_with("-j ACCEPT"))
                .collect();
            assert_eq!(after_delete, expected_after.join("\n"), "{family}");
        }
    }

    /// The kernel's own listing, handles aside: the same expressions.
    fn nft_ruleset() -> String {
        let output = std::process::Command::new("nft")
            .args(["--debug=netlink", "list", "ruleset"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .chain(String::from_utf8_lossy(&output.stderr).lines())
            .map(|line| {
                // "ip filter CNI-FORWARD 5 4" names the rule by its handles.
                let words: Vec<&str> = line.split_whitespace().collect();
                if words.len() >= 4 && (words[0] == "ip" || words[0] == "ip6") {
                    words[..3].join(" ")
                } else {
                    line.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn other_shapes_are_left_to_iptables_restore() {
        for rule in [
            "-p tcp -j ACCEPT",
            "-j MASQUERADE",
            "-s 10.0.0.2/32 -j LOG",
            "-m mark --mark 0x1 -j ACCEPT",
            "-s 2001:db8::2/128 -j ACCEPT",
            "-i eth0 -s 10.0.0.2/32 -j ACCEPT",
            "! ! -s 10.0.0.2/32 -j ACCEPT",
            "-j ACCEPT -s 10.0.0.2/32",
            "-m conntrack --ctstate BOGUS -j ACCEPT",
            "-i averyveryverylongname -j ACCEPT",
            "-s 10.0.0.2/32 !",
        ] {
            assert_eq!(rule_expressions(IpFamily::V4, &args(rule)), None, "{rule}");
        }
        assert!(rule_expressions(IpFamily::V4, &args("-s 10.0.0.2/32 -j ACCEPT")).is_some());
        assert!(!commit(
            IpFamily::V4,
            "filter",
            &[Change::Append {
                chain: "FORWARD".into(),
                args: args("-p tcp -j ACCEPT"),
            }]
        )
        .unwrap());
    }
}
