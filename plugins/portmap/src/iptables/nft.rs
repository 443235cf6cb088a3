//! ADD and DEL of the iptables backend written in-process where `iptables`
//! is iptables-nft: the reference's rules (see [`super::rules`]) as the
//! nf_tables expressions iptables-nft writes for them
//! ([`libcni::nftables::iptables_nft`]), one batch per family.
//!
//! Why: an `iptables-save` lists the whole `nat` table, and with hundreds
//! of pods that is most of an ADD's time and all of its growth. Here an
//! ADD reads the small shared chains and never the per-pod ones:
//! POSTROUTING (one bridge rule per pod) is not listed at all, since the
//! kernel's use count of CNI-HOSTPORT-MASQ tells whether the jump to it
//! exists; CNI-HOSTPORT-DNAT (one rule per pod) is listed only when the
//! container's chain already exists (a repeated ADD). A DEL lists
//! CNI-HOSTPORT-DNAT only when the container has a chain, and a DEL of a
//! container without mappings costs no process at all.
//!
//! Anything these shapes do not cover (user `conditionsV4/V6`, SCTP
//! mappings, references found elsewhere than expected) is left to the
//! programs: the callers get `Ok(false)` and run `iptables-restore`.

use ipnetwork::IpNetwork;
use libcni::nftables::iptables_nft::{self, AddressField, NAT_TABLE};
use libcni::nftables::{
    retry_if_vanished, Batch, Expr, Family as NftFamily, ListedRule, NfTablesSocket, Rule, Verdict,
};
use libcni::IpFamily;

use super::rules::{
    dnat_chain_name, dnat_chain_rules, dnat_entry_jump, dnat_entry_rules, mark_masq_rule,
    masq_entry_jump, set_mark_rule, DNAT_ENTRY_CHAINS, MARK_MASQ_CHAIN, MASQ_ENTRY_CHAIN,
    SET_MARK_CHAIN, TOP_LEVEL_DNAT_CHAIN,
};
use super::IptablesError;
use crate::config::PortMapConf;

const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;

/// `0x2000/0x2000`.
fn parse_mark(text: &str) -> Option<(u32, u32)> {
    let (mark, mask) = text.split_once('/')?;
    let hex = |t: &str| u32::from_str_radix(t.strip_prefix("0x")?, 16).ok();
    Some((hex(mark)?, hex(mask)?))
}

/// `10.0.0.2:80` or `[fd00::2]:80`.
fn parse_ip_port(text: &str) -> Option<(std::net::IpAddr, u16)> {
    let (ip, port) = text.rsplit_once(':')?;
    let ip = ip
        .strip_prefix('[')
        .and_then(|i| i.strip_suffix(']'))
        .unwrap_or(ip);
    Some((ip.parse().ok()?, port.parse().ok()?))
}

/// A network as iptables keeps it: masked to its prefix; a bare address
/// is a host.
fn parse_network(text: &str) -> Option<IpNetwork> {
    let net: IpNetwork = match text.parse::<IpNetwork>() {
        Ok(net) => net,
        Err(_) => IpNetwork::from(text.parse::<std::net::IpAddr>().ok()?),
    };
    IpNetwork::new(net.network(), net.prefix()).ok()
}

/// One rule given as `iptables` arguments (the shapes of
/// [`super::rules`]); `None` for anything else.
pub(crate) fn encode(args: &[String], family: IpFamily) -> Option<Rule> {
    let (mut protocol, mut source, mut destination) = (None, None, None);
    let mut matches: Vec<Expr> = Vec::new();
    let mut target: Option<&str> = None;
    let (mut xmark, mut to_destination) = (None, None);
    let mut it = args.iter().map(String::as_str);
    while let Some(flag) = it.next() {
        let value = it.next()?;
        match flag {
            "-p" => {
                protocol = Some(match value {
                    "tcp" => IPPROTO_TCP,
                    "udp" => IPPROTO_UDP,
                    _ => return None,
                })
            }
            "-s" | "-d" => {
                let net = parse_network(value)?;
                if IpFamily::of_network(&net) != family {
                    return None;
                }
                if flag == "-s" {
                    source = Some(net);
                } else {
                    destination = Some(net);
                }
            }
            "-m" if matches!(value, "comment" | "multiport" | "addrtype" | "mark") => {}
            "--comment" => matches.push(iptables_nft::comment(value)?),
            "--destination-ports" => {
                let ports: Option<Vec<u16>> = value.split(',').map(|p| p.parse().ok()).collect();
                matches.push(iptables_nft::multiport_destination(&ports?)?);
            }
            "--dst-type" if value == "LOCAL" => {
                matches.push(iptables_nft::addrtype_destination_local())
            }
            "--mark" => {
                let (mark, mask) = parse_mark(value)?;
                matches.extend(iptables_nft::mark(mark, mask));
            }
            "--dport" => {
                protocol?;
                matches.extend(Expr::destination_port_is(value.parse().ok()?));
            }
            "-j" => target = Some(value),
            "--set-xmark" => xmark = Some(parse_mark(value)?),
            "--to-destination" => to_destination = Some(parse_ip_port(value)?),
            _ => return None,
        }
    }
    let mut exprs = Vec::new();
    if let Some(protocol) = protocol {
        exprs.extend(Expr::l4proto_is(protocol));
    }
    if let Some(net) = source {
        exprs.extend(iptables_nft::address(AddressField::Source, false, &net));
    }
    if let Some(net) = destination {
        exprs.extend(iptables_nft::address(
            AddressField::Destination,
            false,
            &net,
        ));
    }
    exprs.extend(matches);
    exprs.push(Expr::Counter);
    exprs.push(match (target?, xmark, to_destination) {
        ("ACCEPT", None, None) => Expr::Verdict(Verdict::Accept),
        ("RETURN", None, None) => Expr::Verdict(Verdict::Return),
        ("MASQUERADE", None, None) => iptables_nft::masquerade(family),
        ("MARK", Some((mark, mask)), None) => iptables_nft::set_xmark(mark, mask),
        ("DNAT", None, Some((ip, port))) if IpFamily::of(ip) == family => {
            iptables_nft::dnat(ip, port)
        }
        ("MARK" | "DNAT" | "SNAT" | "DROP" | "REJECT" | "LOG", _, _) => return None,
        (chain, None, None) => Expr::Verdict(Verdict::Jump(chain.to_string())),
        _ => return None,
    });
    let rule = Rule::new(exprs);
    Some(match protocol {
        Some(protocol) => rule.with_compat_protocol(protocol),
        None => rule,
    })
}

fn encode_all(rules: &[Vec<String>], family: IpFamily) -> Option<Vec<Rule>> {
    rules.iter().map(|r| encode(r, family)).collect()
}

fn has_rule(listed: &[ListedRule], wanted: &Rule) -> bool {
    listed
        .iter()
        .any(|r| r.expressions().as_deref() == Some(wanted.exprs.as_slice()))
}

/// ADD of one family in-process; `Ok(false)` when the rules are not all
/// ones this module writes (the caller runs the programs).
pub(crate) fn forward(
    conf: &PortMapConf,
    container_id: &str,
    container: IpNetwork,
) -> Result<bool, IptablesError> {
    let family = IpFamily::of(container.ip());
    if !conf.conditions(family).is_empty() {
        return Ok(false);
    }
    let chain = dnat_chain_name(&conf.network, container_id);
    let mark = conf.mark_value();
    let shared_snat = conf.snat && conf.external_set_mark_chain.is_none();
    let (Some(set_mark), Some(mark_masq), Some(masq_jump), Some(entry_jump)) = (
        encode(&set_mark_rule(mark), family),
        encode(&mark_masq_rule(mark), family),
        encode(&masq_entry_jump(), family),
        encode(&dnat_entry_jump(), family),
    ) else {
        return Ok(false);
    };
    let (Some(chain_rules), Some(entry_rules)) = (
        encode_all(&dnat_chain_rules(conf, container), family),
        encode_all(
            &dnat_entry_rules(conf, container_id, family, &chain),
            family,
        ),
    ) else {
        return Ok(false);
    };
    let nft = NftFamily::from(family);
    let mut socket = NfTablesSocket::open()?;
    retry_if_vanished(IptablesError::nftables_errno, || {
        let mut batch = Batch::new();
        batch.add_table(nft, NAT_TABLE, None);
        let mut base_chains = vec![DNAT_ENTRY_CHAINS[0], DNAT_ENTRY_CHAINS[1]];
        if shared_snat {
            base_chains.push(MASQ_ENTRY_CHAIN);
        }
        for base in base_chains {
            if socket.get_chain(nft, NAT_TABLE, base)?.is_none() {
                batch.add_chain(
                    nft,
                    NAT_TABLE,
                    base,
                    iptables_nft::nat_base_chain(base),
                    None,
                );
            }
        }
        if shared_snat {
            // The shared chains, each with its one rule.
            let mut masq_jumps = 0;
            for (shared, rule) in [(SET_MARK_CHAIN, &set_mark), (MARK_MASQ_CHAIN, &mark_masq)] {
                match socket.get_chain(nft, NAT_TABLE, shared)? {
                    None => {
                        batch.add_chain(nft, NAT_TABLE, shared, None, None);
                        batch.add_rule(nft, NAT_TABLE, shared, rule);
                    }
                    Some(info) => {
                        let listed = socket.list_rules(nft, NAT_TABLE, Some(shared))?;
                        if !has_rule(&listed, rule) {
                            batch.add_rule(nft, NAT_TABLE, shared, rule);
                        }
                        if shared == MARK_MASQ_CHAIN {
                            masq_jumps = info.use_count.saturating_sub(listed.len() as u32);
                        }
                    }
                }
            }
            // Nothing but the head of POSTROUTING jumps to
            // CNI-HOSTPORT-MASQ; its use count says whether that jump
            // is there without listing POSTROUTING's per-pod rules.
            if masq_jumps == 0 {
                batch.insert_rule(nft, NAT_TABLE, MASQ_ENTRY_CHAIN, &masq_jump);
            }
        }
        if socket
            .get_chain(nft, NAT_TABLE, TOP_LEVEL_DNAT_CHAIN)?
            .is_none()
        {
            batch.add_chain(nft, NAT_TABLE, TOP_LEVEL_DNAT_CHAIN, None, None);
        }
        for entry in DNAT_ENTRY_CHAINS {
            let listed = socket.list_rules(nft, NAT_TABLE, Some(entry))?;
            if !has_rule(&listed, &entry_jump) {
                batch.add_rule(nft, NAT_TABLE, entry, &entry_jump);
            }
        }
        // A repeated ADD replaces the container's rules.
        match socket.get_chain(nft, NAT_TABLE, &chain)? {
            None => batch.add_chain(nft, NAT_TABLE, &chain, None, None),
            Some(_) => {
                let jumps =
                    socket.list_rules_where(nft, NAT_TABLE, Some(TOP_LEVEL_DNAT_CHAIN), |r| {
                        r.verdict_chain().as_deref() == Some(chain.as_str())
                    })?;
                for rule in jumps {
                    batch.delete_rule(nft, NAT_TABLE, TOP_LEVEL_DNAT_CHAIN, rule.handle);
                }
                batch.flush_chain(nft, NAT_TABLE, &chain);
            }
        }
        for rule in &chain_rules {
            batch.add_rule(nft, NAT_TABLE, &chain, rule);
        }
        for rule in &entry_rules {
            batch.add_rule(nft, NAT_TABLE, TOP_LEVEL_DNAT_CHAIN, rule);
        }
        socket.commit(batch)?;
        Ok(())
    })?;
    Ok(true)
}

/// DEL of `chains` (and every jump to them) in one family in-process, on
/// `socket`, which the caller shares between the families. `Ok(false)`
/// when something jumps to the chains from elsewhere than
/// CNI-HOSTPORT-DNAT: the caller runs the programs, which find it.
pub(crate) fn remove_chains(
    socket: &mut NfTablesSocket,
    chains: &[&str],
    family: IpFamily,
) -> Result<bool, IptablesError> {
    let nft = NftFamily::from(family);
    let mut handled = true;
    retry_if_vanished(IptablesError::nftables_errno, || {
        let mut batch = Batch::new();
        let mut top_rules: Option<Vec<ListedRule>> = None;
        for chain in chains {
            let Some(info) = socket.get_chain(nft, NAT_TABLE, chain)? else {
                continue;
            };
            let own_rules = socket.list_rules(nft, NAT_TABLE, Some(chain))?.len() as u32;
            let jumps = info.use_count.saturating_sub(own_rules);
            let mut found = 0;
            if jumps > 0 {
                // CNI-HOSTPORT-DNAT holds a jump per pod: only the jumps
                // to `chains` are kept from its listing.
                let top = match top_rules.take() {
                    Some(rules) => rules,
                    None => socket.list_rules_where(
                        nft,
                        NAT_TABLE,
                        Some(TOP_LEVEL_DNAT_CHAIN),
                        |r| {
                            r.verdict_chain()
                                .is_some_and(|c| chains.contains(&c.as_str()))
                        },
                    )?,
                };
                for rule in &top {
                    if rule.verdict_chain().as_deref() == Some(*chain) {
                        batch.delete_rule(nft, NAT_TABLE, TOP_LEVEL_DNAT_CHAIN, rule.handle);
                        found += 1;
                    }
                }
                top_rules = Some(top);
            }
            if found != jumps {
                handled = false;
                return Ok(());
            }
            batch.flush_chain(nft, NAT_TABLE, chain);
            batch.delete_chain(nft, NAT_TABLE, chain);
        }
        socket.commit(batch)?;
        Ok(())
    })?;
    Ok(handled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split(' ').map(String::from).collect()
    }

    #[test]
    fn every_reference_rule_shape_encodes() {
        let v4 = [
            "-m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT",
            "-m mark --mark 0x2000/0x2000 -j MASQUERADE",
            "-m multiport -p tcp --destination-ports 8080,8081 -j CNI-DN-abc",
            "-p tcp --dport 8080 -s 10.88.0.2/16 -j CNI-HOSTPORT-SETMARK",
            "-p udp --dport 53 -d 192.168.1.1/32 -j DNAT --to-destination 10.88.0.2:53",
            "-p tcp --dport 80 -s 0.0.0.0/0 -j CNI-HOSTPORT-SETMARK",
        ];
        for rule in v4 {
            assert!(encode(&args(rule), IpFamily::V4).is_some(), "{rule}");
        }
        let v6 = "-p tcp --dport 80 -j DNAT --to-destination [fd00::2]:80";
        assert!(encode(&args(v6), IpFamily::V6).is_some());
        // Masked like iptables: 10.88.0.2/16 is 10.88.0.0/16, two bytes.
        let exprs = encode(&args(v4[3]), IpFamily::V4).unwrap().exprs;
        assert!(exprs.contains(&Expr::Cmp {
            op: libcni::nftables::CmpOp::Eq,
            data: vec![10, 88]
        }));
    }

    #[test]
    fn other_shapes_go_to_the_programs() {
        for rule in [
            "-p sctp --dport 99 -j DNAT --to-destination 10.88.0.2:99",
            "-i eth0 -j ACCEPT",
            "-m conntrack --ctstate NEW -j ACCEPT",
            "-p tcp --dport 80 -j DNAT --to-destination [fd00::2]:80",
            "-j SNAT --to-source 1.2.3.4",
            "-p tcp --dport 80",
        ] {
            assert!(encode(&args(rule), IpFamily::V4).is_none(), "{rule}");
        }
    }
}
