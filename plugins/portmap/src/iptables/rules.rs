//! The iptables rules of the reference plugin, argument for argument, so
//! that either plugin can remove what the other added.
//!
//! Layout (all in table `nat`):
//!
//! ```text
//! PREROUTING, OUTPUT: -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
//! CNI-HOSTPORT-DNAT:  <comment> -m multiport -p tcp --destination-ports 8080,8081 -j CNI-DN-<hash>
//! CNI-DN-<hash>:      -p tcp --dport 8080 -s <container/prefix> -j CNI-HOSTPORT-SETMARK
//!                     -p tcp --dport 8080 -s 127.0.0.1 -j CNI-HOSTPORT-SETMARK
//!                     -p tcp --dport 8080 -j DNAT --to-destination <container>:80
//! CNI-HOSTPORT-SETMARK: mark bit 13 (default) and return
//! POSTROUTING (first): -j CNI-HOSTPORT-MASQ, which masquerades marked packets
//! ```

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnetwork::IpNetwork;
use libcni::IpFamily;
use sha2::{Digest, Sha512};

use crate::config::{PortMapConf, Protocol};

pub const TOP_LEVEL_DNAT_CHAIN: &str = "CNI-HOSTPORT-DNAT";
pub const SET_MARK_CHAIN: &str = "CNI-HOSTPORT-SETMARK";
pub const MARK_MASQ_CHAIN: &str = "CNI-HOSTPORT-MASQ";
/// Created by old versions of the reference; still torn down on DEL.
pub const OLD_TOP_LEVEL_SNAT_CHAIN: &str = "CNI-HOSTPORT-SNAT";

/// The built-in chains that jump to the top-level DNAT chain.
pub const DNAT_ENTRY_CHAINS: [&str; 2] = ["PREROUTING", "OUTPUT"];
pub const MASQ_ENTRY_CHAIN: &str = "POSTROUTING";

/// iptables limits comments to 256 bytes with the NUL.
const MAX_COMMENT_LEN: usize = 255;
/// multiport takes at most 15 ports per rule.
const MULTIPORT_MAX: usize = 15;
const CHAIN_NAME_LEN: usize = 28;

/// `CNI-<prefix>` followed by the hex SHA-512 of network name and
/// container ID, cut to 28 characters (the reference's
/// `MustFormatChainNameWithPrefix`).
pub fn chain_name(prefix: &str, network: &str, container_id: &str) -> String {
    let digest = Sha512::new()
        .chain_update(network.as_bytes())
        .chain_update(container_id.as_bytes())
        .finalize();
    let mut name = format!("CNI-{prefix}");
    for byte in digest {
        if name.len() >= CHAIN_NAME_LEN {
            break;
        }
        name.push_str(&format!("{byte:02x}"));
    }
    name.truncate(CHAIN_NAME_LEN);
    name
}

/// The per-container DNAT chain.
pub fn dnat_chain_name(network: &str, container_id: &str) -> String {
    chain_name("DN-", network, container_id)
}

/// The per-container SNAT chain of old reference versions.
pub fn old_snat_chain_name(network: &str, container_id: &str) -> String {
    chain_name("SN-", network, container_id)
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// `0x2000/0x2000` for bit 13, as Go's `%#x/%#x` prints it.
fn mark_spec(mark: u32) -> String {
    format!("{mark:#x}/{mark:#x}")
}

/// The rule in PREROUTING and OUTPUT.
pub fn dnat_entry_jump() -> Vec<String> {
    args(&[
        "-m",
        "addrtype",
        "--dst-type",
        "LOCAL",
        "-j",
        TOP_LEVEL_DNAT_CHAIN,
    ])
}

/// The only rule of CNI-HOSTPORT-SETMARK.
pub fn set_mark_rule(mark: u32) -> Vec<String> {
    let mut rule = args(&[
        "-m",
        "comment",
        "--comment",
        "CNI portfwd masquerade mark",
        "-j",
        "MARK",
        "--set-xmark",
    ]);
    rule.push(mark_spec(mark));
    rule
}

/// The only rule of CNI-HOSTPORT-MASQ.
pub fn mark_masq_rule(mark: u32) -> Vec<String> {
    let mut rule = args(&["-m", "mark", "--mark"]);
    rule.push(mark_spec(mark));
    rule.extend(args(&["-j", "MASQUERADE"]));
    rule
}

/// The rule at the head of POSTROUTING.
pub fn masq_entry_jump() -> Vec<String> {
    args(&[
        "-m",
        "comment",
        "--comment",
        "CNI portfwd requiring masquerade",
        "-j",
        MARK_MASQ_CHAIN,
    ])
}

/// `dnat name: "<net>" id: "<cid>"`, cut like the reference does.
pub fn dnat_comment(network: &str, container_id: &str) -> String {
    let comment = format!("dnat name: \"{network}\" id: \"{container_id}\"");
    if comment.len() <= MAX_COMMENT_LEN {
        return comment;
    }
    // Names and IDs are ASCII (validated by the skeleton), so any byte
    // index is a character boundary; `get` keeps this panic-free anyway.
    let head = comment.get(..MAX_COMMENT_LEN - 2).unwrap_or(&comment);
    format!("{head}...")
}

/// The `(network, container ID)` a DNAT comment names, if it is whole.
pub fn parse_dnat_comment(comment: &str) -> Option<(&str, &str)> {
    let rest = comment.strip_prefix("dnat name: \"")?;
    let (network, rest) = rest.split_once("\" id: \"")?;
    let container_id = rest.strip_suffix('"')?;
    Some((network, container_id))
}

/// The rules in CNI-HOSTPORT-DNAT that send a container's ports to its
/// chain: one per protocol (sorted) and per 15 ports. As in the reference,
/// every mapping's port is listed whatever the family of its host IP.
pub fn dnat_entry_rules(
    conf: &PortMapConf,
    container_id: &str,
    family: IpFamily,
    chain: &str,
) -> Vec<Vec<String>> {
    let comment = dnat_comment(&conf.network, container_id);
    let mut ports_by_protocol: BTreeMap<Protocol, Vec<u16>> = BTreeMap::new();
    for mapping in &conf.mappings {
        ports_by_protocol
            .entry(mapping.protocol)
            .or_default()
            .push(mapping.host_port);
    }
    let mut rules = Vec::new();
    for (protocol, ports) in ports_by_protocol {
        for chunk in ports.chunks(MULTIPORT_MAX) {
            let port_list = chunk
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(",");
            let mut rule = args(&["-m", "comment", "--comment"]);
            rule.push(comment.clone());
            rule.extend(args(&["-m", "multiport", "-p", protocol.as_str()]));
            rule.push("--destination-ports".to_string());
            rule.push(port_list);
            rule.extend(conf.conditions(family).iter().cloned());
            rule.push("-j".to_string());
            rule.push(chain.to_string());
            rules.push(rule);
        }
    }
    rules
}

/// `ip:port`, with brackets for IPv6.
pub fn ip_port(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(v4) => format!("{v4}:{port}"),
        IpAddr::V6(v6) => format!("[{v6}]:{port}"),
    }
}

/// The rules of the container's DNAT chain: for every mapping of the
/// container's family, the hairpin and (IPv4) localhost mark rules when
/// SNAT is on, then the DNAT itself. The mark rules must come first.
pub fn dnat_chain_rules(conf: &PortMapConf, container: IpNetwork) -> Vec<Vec<String>> {
    let family = IpFamily::of(container.ip());
    let set_mark_chain = conf
        .external_set_mark_chain
        .as_deref()
        .unwrap_or(SET_MARK_CHAIN);
    let mut rules = Vec::new();
    for mapping in conf.mappings_for(family) {
        let mut base = vec![
            "-p".to_string(),
            mapping.protocol.as_str().to_string(),
            "--dport".to_string(),
            mapping.host_port.to_string(),
        ];
        if let Some(destination) = mapping.destination() {
            base.push("-d".to_string());
            base.push(destination.to_string());
        }
        if conf.snat {
            let hairpin_source = match (conf.masq_all, family) {
                (true, IpFamily::V4) => "0.0.0.0/0".to_string(),
                (true, IpFamily::V6) => "::/0".to_string(),
                // The container's address with its prefix: iptables turns
                // it into the subnet, as the reference has always done.
                (false, _) => container.to_string(),
            };
            let mut hairpin = base.clone();
            hairpin.extend(["-s".to_string(), hairpin_source]);
            hairpin.extend(["-j".to_string(), set_mark_chain.to_string()]);
            rules.push(hairpin);
            if family == IpFamily::V4 && !conf.masq_all {
                let mut localhost = base.clone();
                localhost.extend(args(&["-s", "127.0.0.1", "-j", set_mark_chain]));
                rules.push(localhost);
            }
        }
        let mut dnat = base;
        dnat.extend(args(&["-j", "DNAT", "--to-destination"]));
        dnat.push(ip_port(container.ip(), mapping.container_port));
        rules.push(dnat);
    }
    rules
}

#[cfg(test)]
mod tests;
