//! Chains of an iptables-nft table read over netlink, as `iptables-save`
//! would print them, for plugins that compare and delete rules by their
//! saved text (firewall's iptables backend) but need not start
//! `iptables-save` to read them: where `iptables` is iptables-nft, each
//! such run was a process start of several milliseconds and the largest
//! resident set of the call.
//!
//! Only the shapes iptables-nft 1.8 writes for the following are read
//! (see [`crate::nftables::iptables_nft`] for their expressions):
//! `[!] -s/-d <net>`, `[!] -i/-o <name>[+]`, `-m comment --comment`,
//! `-m conntrack [!] --ctstate <states>`, a counter, and `-j
//! ACCEPT|DROP|RETURN|<chain>` or `-g <chain>`. A rule with anything else
//! makes the whole read answer `None`, and the caller runs `iptables-save`:
//! a rule misread as someone else's would be written twice, or left behind
//! by a DEL.

use ipnetwork::IpNetwork;

use crate::nftables::iptables_nft::{self, AddressField};
use crate::nftables::{CmpOp, Expr, Family, MetaKey, NfTablesError, NfTablesSocket, PayloadBase};
use crate::nftables::{ListedRule, Verdict};
use crate::IpFamily;

use super::restore::join_args;
use super::save::{SavedRule, SavedTable};

/// `struct xt_conntrack_mtinfo3`: eight 16-byte addresses and masks, two
/// u32 expiry bounds, then u16 fields (162 bytes), padded to eight
/// (`XT_ALIGN`) as iptables-nft writes it.
const CONNTRACK_INFO_LEN: usize = 168;
const CONNTRACK_INFO_UNPADDED_LEN: usize = 162;
const CONNTRACK_MATCH_FLAGS: usize = 146;
const CONNTRACK_INVERT_FLAGS: usize = 148;
const CONNTRACK_STATE_MASK: usize = 150;
/// `XT_CONNTRACK_STATE`: the match tests the state bits.
const XT_CONNTRACK_STATE: u16 = 1;
/// The state bits in the order `iptables-save` prints them
/// (`XT_CONNTRACK_STATE_INVALID`, then `1 << (ctinfo + 1)` for NEW,
/// RELATED, ESTABLISHED, and `XT_CONNTRACK_STATE_UNTRACKED`).
const CONNTRACK_STATES: [(u16, &str); 5] = [
    (1 << 0, "INVALID"),
    (1 << 3, "NEW"),
    (1 << 2, "RELATED"),
    (1 << 1, "ESTABLISHED"),
    (1 << 8, "UNTRACKED"),
];

/// The `-m conntrack [!] --ctstate ...` arguments of a conntrack match's
/// info; `None` for a match that tests anything besides the state.
pub fn conntrack_state_args(info: &[u8]) -> Option<Vec<String>> {
    if !(CONNTRACK_INFO_UNPADDED_LEN..=CONNTRACK_INFO_LEN).contains(&info.len()) {
        return None;
    }
    let u16_at = |offset: usize| u16::from_ne_bytes([info[offset], info[offset + 1]]);
    let others_zero = info
        .iter()
        .enumerate()
        .filter(|(i, _)| {
            !(CONNTRACK_MATCH_FLAGS..CONNTRACK_MATCH_FLAGS + 2).contains(i)
                && !(CONNTRACK_INVERT_FLAGS..CONNTRACK_INVERT_FLAGS + 2).contains(i)
                && !(CONNTRACK_STATE_MASK..CONNTRACK_STATE_MASK + 2).contains(i)
        })
        .all(|(_, b)| *b == 0);
    let invert = u16_at(CONNTRACK_INVERT_FLAGS);
    let mask = u16_at(CONNTRACK_STATE_MASK);
    let known: u16 = CONNTRACK_STATES.iter().map(|(bit, _)| bit).sum();
    if !others_zero
        || u16_at(CONNTRACK_MATCH_FLAGS) != XT_CONNTRACK_STATE
        || (invert != 0 && invert != XT_CONNTRACK_STATE)
        || mask == 0
        || mask & !known != 0
    {
        return None;
    }
    let states: Vec<&str> = CONNTRACK_STATES
        .iter()
        .filter(|(bit, _)| mask & bit != 0)
        .map(|(_, name)| *name)
        .collect();
    let mut args = vec!["-m".to_string(), "conntrack".to_string()];
    if invert != 0 {
        args.push("!".into());
    }
    args.push("--ctstate".into());
    args.push(states.join(","));
    Some(args)
}

/// The info of `-m conntrack [!] --ctstate <states>` (comma-separated
/// state names) as iptables-nft writes it, the inverse of
/// [`conntrack_state_args`]; `None` for an unknown or missing state.
pub fn conntrack_state_info(states: &str, negated: bool) -> Option<Vec<u8>> {
    let mut mask = 0u16;
    for state in states.split(',') {
        let (bit, _) = CONNTRACK_STATES.iter().find(|(_, name)| *name == state)?;
        mask |= bit;
    }
    let mut info = vec![0u8; CONNTRACK_INFO_LEN];
    let mut put = |offset: usize, value: u16| {
        info[offset..offset + 2].copy_from_slice(&value.to_ne_bytes());
    };
    put(CONNTRACK_MATCH_FLAGS, XT_CONNTRACK_STATE);
    if negated {
        put(CONNTRACK_INVERT_FLAGS, XT_CONNTRACK_STATE);
    }
    put(CONNTRACK_STATE_MASK, mask);
    Some(info)
}

/// `chains` of table `table` (those that exist, with their rules) as
/// `iptables-save -t <table>` prints them; `None` when a rule in them is
/// not one this module reads.
pub fn read_chains(
    family: IpFamily,
    table: &str,
    chains: &[&str],
) -> Result<Option<SavedTable>, NfTablesError> {
    Ok(read_chains_with_handles(family, table, chains)?.map(|(saved, _)| saved))
}

/// [`read_chains`], with the kernel's handle of each rule, in the order
/// of the table's rules: what [`super::nft_write`] deletes a rule by.
pub fn read_chains_with_handles(
    family: IpFamily,
    table: &str,
    chains: &[&str],
) -> Result<Option<(SavedTable, Vec<u64>)>, NfTablesError> {
    let nf_family = Family::from(family);
    let mut socket = NfTablesSocket::open()?;
    let mut saved = SavedTable::default();
    let mut handles = Vec::new();
    for chain in chains {
        if saved.chains.contains(*chain) || socket.get_chain(nf_family, table, chain)?.is_none() {
            continue;
        }
        saved.chains.insert(chain.to_string());
        for rule in socket.list_rules(nf_family, table, Some(chain))? {
            match saved_rule(&rule, family) {
                Some(saved_rule) => {
                    saved.rules.push(saved_rule);
                    handles.push(rule.handle);
                }
                None => {
                    log::debug!(
                        "rule #{} of {table} {chain} is not one read in-process",
                        rule.handle
                    );
                    return Ok(None);
                }
            }
        }
    }
    Ok(Some((saved, handles)))
}

/// The saved form of one listed rule; `None` for shapes not read here.
fn saved_rule(rule: &ListedRule, family: IpFamily) -> Option<SavedRule> {
    let exprs = rule.expressions()?;
    let args = saved_args(exprs, family)?;
    Some(SavedRule {
        chain: rule.chain.clone(),
        text: join_args(&args),
        args,
    })
}

fn negatable(negated: bool, flag: &str, value: String) -> Vec<String> {
    let mut args = Vec::new();
    if negated {
        args.push("!".to_string());
    }
    args.push(flag.to_string());
    args.push(value);
    args
}

/// An interface name compared as iptables-nft writes it: the name and its
/// NUL for an exact name, the bytes before `+` for a wildcard.
fn interface_text(data: &[u8]) -> Option<String> {
    let text = match data.iter().position(|b| *b == 0) {
        Some(end) if data[end..].iter().all(|b| *b == 0) => {
            String::from_utf8(data[..end].to_vec()).ok()?
        }
        Some(_) => return None,
        None => format!("{}+", String::from_utf8(data.to_vec()).ok()?),
    };
    (!text.is_empty()).then_some(text)
}

fn saved_args(exprs: Vec<Expr>, family: IpFamily) -> Option<Vec<String>> {
    let source_offset = AddressField::Source.offset(family);
    let destination_offset = AddressField::Destination.offset(family);
    let address_len = usize::from(family.bits() / 8);
    // iptables-save prints addresses and interfaces first, in this order,
    // then the matches in their order, then the target.
    let (mut source, mut destination, mut input, mut output) = (None, None, None, None);
    let mut matches: Vec<String> = Vec::new();
    let mut target: Option<Vec<String>> = None;
    let mut it = exprs.into_iter().peekable();
    while let Some(expr) = it.next() {
        if target.is_some() {
            return None;
        }
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
                    return None;
                };
                let net: IpNetwork =
                    iptables_nft::network_of(&data, mask.as_deref(), len, address_len)?;
                let text = negatable(
                    op == CmpOp::Neq,
                    if offset == source_offset { "-s" } else { "-d" },
                    format!("{}/{}", net.ip(), net.prefix()),
                );
                let slot = if offset == source_offset {
                    &mut source
                } else {
                    &mut destination
                };
                if slot.replace(text).is_some() {
                    return None;
                }
            }
            Expr::Meta(key @ (MetaKey::Iifname | MetaKey::Oifname)) => {
                let Some(Expr::Cmp { op, data }) = it.next() else {
                    return None;
                };
                let input_side = matches!(key, MetaKey::Iifname);
                let text = negatable(
                    op == CmpOp::Neq,
                    if input_side { "-i" } else { "-o" },
                    interface_text(&data)?,
                );
                let slot = if input_side { &mut input } else { &mut output };
                if slot.replace(text).is_some() {
                    return None;
                }
            }
            Expr::XtMatch {
                name,
                revision: 0,
                info,
            } if name == "comment" => {
                let text = iptables_nft::comment_text(&info)?;
                matches.extend(["-m".into(), "comment".into(), "--comment".into(), text]);
            }
            Expr::XtMatch {
                name,
                revision: 3,
                info,
            } if name == "conntrack" => matches.extend(conntrack_state_args(&info)?),
            Expr::Counter => {}
            Expr::Verdict(verdict) => {
                target = Some(match verdict {
                    Verdict::Accept => vec!["-j".into(), "ACCEPT".into()],
                    Verdict::Drop => vec!["-j".into(), "DROP".into()],
                    Verdict::Return => vec!["-j".into(), "RETURN".into()],
                    Verdict::Jump(chain) => vec!["-j".into(), chain],
                    Verdict::Goto(chain) => vec!["-g".into(), chain],
                });
            }
            _ => return None,
        }
    }
    let mut args: Vec<String> = [source, destination, input, output]
        .into_iter()
        .flatten()
        .flatten()
        .collect();
    args.extend(matches);
    args.extend(target.unwrap_or_default());
    Some(args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iptables::{Programs, RestoreScript};
    use crate::netlink::test_support::in_private_netns;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    /// Rules written by iptables-restore read back here exactly as
    /// iptables-save prints them; a rule of another shape makes the read
    /// `None`.
    #[test]
    fn reads_what_iptables_save_prints() {
        for family in [IpFamily::V4, IpFamily::V6] {
            let programs = Programs::of(family);
            if !programs.is_iptables_nft() {
                crate::test_skip::skip(
                    "reads_what_iptables_save_prints",
                    "iptables is not iptables-nft here",
                );
                return;
            }
            let (s1, d1, d2) = match family {
                IpFamily::V4 => ("10.1.0.0/16", "10.0.0.2/32", "192.168.3.0/25"),
                IpFamily::V6 => ("2001:db8:1::/48", "2001:db8::2/128", "fd00::/65"),
            };
            in_private_netns(|| {
                let mut script = RestoreScript::new("filter");
                for chain in ["CNI-T", "CNI-T2"] {
                    script.declare_chain(chain);
                }
                script.insert(
                    "FORWARD",
                    1,
                    &args(&[
                        "-m",
                        "comment",
                        "--comment",
                        "some \"quoted\" text",
                        "-j",
                        "CNI-T",
                    ]),
                );
                let rules: Vec<Vec<String>> = vec![
                    args(&[
                        "-d",
                        d1,
                        "-m",
                        "conntrack",
                        "--ctstate",
                        "RELATED,ESTABLISHED",
                        "-j",
                        "ACCEPT",
                    ]),
                    args(&["-s", d1, "-j", "ACCEPT"]),
                    args(&[
                        "!", "-s", s1, "-d", d2, "-i", "cni0", "!", "-o", "cni0", "-j", "RETURN",
                    ]),
                    args(&[
                        "-i",
                        "veth+",
                        "-m",
                        "conntrack",
                        "!",
                        "--ctstate",
                        "INVALID,NEW",
                        "-j",
                        "DROP",
                    ]),
                    args(&[
                        "-d",
                        d1,
                        "-m",
                        "comment",
                        "--comment",
                        "cni firewall net=n id=c1 if=eth0",
                        "-j",
                        "RETURN",
                    ]),
                    args(&["-o", "eth0", "-g", "CNI-T2"]),
                ];
                for rule in &rules {
                    script.append("CNI-T", rule);
                }
                programs.restore(&script).unwrap();
                let saved = programs.read("filter").unwrap();
                let read = read_chains(
                    family,
                    "filter",
                    &["FORWARD", "CNI-T", "CNI-T2", "CNI-NONE"],
                )
                .unwrap()
                .expect("every rule read");
                for chain in ["FORWARD", "CNI-T", "CNI-T2"] {
                    assert!(read.has_chain(chain), "{chain}");
                    let ours: Vec<&SavedRule> = read.rules_in(chain).collect();
                    let theirs: Vec<&SavedRule> = saved.rules_in(chain).collect();
                    assert_eq!(ours, theirs, "{family} {chain}");
                }
                assert!(!read.has_chain("CNI-NONE"));
                assert_eq!(read.rules_in("CNI-T").count(), rules.len());

                // A shape not read here (a protocol match) sends the
                // caller to iptables-save.
                let mut other = RestoreScript::new("filter");
                other.append("CNI-T2", &args(&["-p", "tcp", "-j", "ACCEPT"]));
                programs.restore(&other).unwrap();
                assert_eq!(read_chains(family, "filter", &["CNI-T2"]).unwrap(), None);
                // Chains not asked for are not read.
                assert!(read_chains(family, "filter", &["CNI-T"]).unwrap().is_some());
            });
        }
    }

    fn conntrack_info(match_flags: u16, invert: u16, mask: u16) -> Vec<u8> {
        let mut info = vec![0u8; CONNTRACK_INFO_LEN];
        info[CONNTRACK_MATCH_FLAGS..CONNTRACK_MATCH_FLAGS + 2]
            .copy_from_slice(&match_flags.to_ne_bytes());
        info[CONNTRACK_INVERT_FLAGS..CONNTRACK_INVERT_FLAGS + 2]
            .copy_from_slice(&invert.to_ne_bytes());
        info[CONNTRACK_STATE_MASK..CONNTRACK_STATE_MASK + 2].copy_from_slice(&mask.to_ne_bytes());
        info
    }

    #[test]
    fn conntrack_states_print_in_iptables_order() {
        assert_eq!(
            conntrack_state_args(&conntrack_info(1, 0, 6))
                .unwrap()
                .join(" "),
            "-m conntrack --ctstate RELATED,ESTABLISHED"
        );
        assert_eq!(
            conntrack_state_args(&conntrack_info(1, 1, 1 | 8))
                .unwrap()
                .join(" "),
            "-m conntrack ! --ctstate INVALID,NEW"
        );
        // Anything besides the state is not read.
        assert_eq!(conntrack_state_args(&conntrack_info(3, 0, 6)), None);
        assert_eq!(conntrack_state_args(&conntrack_info(1, 0, 0)), None);
        assert_eq!(conntrack_state_args(&conntrack_info(1, 0, 64)), None);
        let mut with_port = conntrack_info(1, 0, 6);
        with_port[140] = 1;
        assert_eq!(conntrack_state_args(&with_port), None);
        assert_eq!(conntrack_state_args(&[0; 8]), None);
    }

    #[test]
    fn interface_names_exact_and_wildcard() {
        assert_eq!(interface_text(b"cni0\0\0\0\0").as_deref(), Some("cni0"));
        assert_eq!(interface_text(b"veth").as_deref(), Some("veth+"));
        assert_eq!(interface_text(b"a\0b\0"), None);
        assert_eq!(interface_text(b"\0\0\0\0"), None);
    }
}
