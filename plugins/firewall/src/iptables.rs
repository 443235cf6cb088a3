//! The iptables backend: the reference's rules in table `filter`, to the
//! letter, so that a node switching between the two plugins keeps
//! working (either plugin's DEL removes what the other's ADD wrote):
//!
//! ```text
//! -A FORWARD -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD
//! -A CNI-FORWARD -m comment --comment "CNI firewall plugin admin overrides" -j CNI-ADMIN
//! -A CNI-FORWARD -d 10.0.0.2/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
//! -A CNI-FORWARD -s 10.0.0.2/32 -j ACCEPT
//! ```
//!
//! The per-address rules carry no trace of the container, and must not
//! (the reference's DEL deletes them by exact text). GC still has to know
//! whose they are, so ADD also writes a marker per address into a chain
//! nothing jumps to, `CNI-FW-ATTACHMENTS`, which therefore never sees a
//! packet:
//!
//! ```text
//! -A CNI-FW-ATTACHMENTS -d 10.0.0.2/32 -m comment --comment "cni firewall net=n id=c1 if=eth0" -j RETURN
//! ```
//!
//! - DEL removes the reference's rules of the prevResult's addresses (as
//!   the reference does) and the attachment's markers; without a
//!   prevResult it still removes the rules of the addresses its markers
//!   name, where no other attachment's marker names them too.
//! - GC removes the markers of this network whose attachment is not in
//!   `cni.dev/valid-attachments`, and the rules of their addresses unless
//!   another marker still names the address. Rules the reference wrote have
//!   no marker: GC leaves them (nothing tells whose they are).
//! - Chains and jumps stay (the reference's DEL keeps them too).
//!
//! Each family's change is read with one `iptables-save` and written with
//! one `iptables-restore --noflush` (libcni's runner, with its deadline and
//! xtables lock handling), or, where `iptables` is iptables-nft, both over
//! netlink in the form iptables-nft itself gives the rules (see
//! [`Filter`]); either way all or nothing in the kernel; an IPv6 failure
//! after the IPv4 write takes the IPv4 additions back. Calls of this plugin
//! are serialised by a host lock (see [`crate::lock`]) so two ADDs never
//! both declare a new chain (a declaration empties an existing chain).

use std::collections::BTreeSet;

use ipnetwork::IpNetwork;
use libcni::iptables::nft_write::{self, Change};
use libcni::iptables::{
    join_args, nft_save, CommandError, Programs, RestoreScript, SavedRule, SavedTable,
};
use libcni::IpFamily;

use crate::config::{tag_prefix, IngressPolicy};
use crate::error::FirewallError;

pub const FILTER: &str = "filter";
pub const FORWARD: &str = "FORWARD";
pub const PRIVATE_CHAIN: &str = "CNI-FORWARD";
pub const ATTACHMENTS_CHAIN: &str = "CNI-FW-ATTACHMENTS";
pub const STAGE_1: &str = "CNI-ISOLATION-STAGE-1";
pub const STAGE_2: &str = "CNI-ISOLATION-STAGE-2";
const FORWARD_JUMP_COMMENT: &str = "CNI firewall plugin rules";
const ADMIN_JUMP_COMMENT: &str = "CNI firewall plugin admin overrides";
/// The comment of the isolation jumps, RETURNs and stage-2 drop.
pub const ISOLATION_COMMENT: &str =
    "CNI firewall plugin rules (ingressPolicy: same-bridge|isolated)";
/// What reference releases before `isolated` existed wrote on those same
/// rules: such a rule counts as present.
const LEGACY_ISOLATION_COMMENT: &str = "CNI firewall plugin rules (ingressPolicy: same-bridge)";

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// An address as the reference writes it: `/32` or `/128`.
pub fn host_text(ip: &IpNetwork) -> String {
    let bits = IpFamily::of_network(ip).bits();
    format!("{}/{bits}", ip.ip())
}

/// The rules as `iptables-save` prints them (addresses and interfaces
/// first, then matches, the target last): the form they are compared in.
pub fn forward_jump() -> Vec<String> {
    strings(&[
        "-m",
        "comment",
        "--comment",
        FORWARD_JUMP_COMMENT,
        "-j",
        PRIVATE_CHAIN,
    ])
}

pub fn admin_jump(admin_chain: &str) -> Vec<String> {
    strings(&[
        "-m",
        "comment",
        "--comment",
        ADMIN_JUMP_COMMENT,
        "-j",
        admin_chain,
    ])
}

/// The two rules that admit one address.
pub fn address_rules(ip: &IpNetwork) -> [Vec<String>; 2] {
    let host = host_text(ip);
    [
        strings(&[
            "-d",
            &host,
            "-m",
            "conntrack",
            "--ctstate",
            "RELATED,ESTABLISHED",
            "-j",
            "ACCEPT",
        ]),
        strings(&["-s", &host, "-j", "ACCEPT"]),
    ]
}

fn marker(ip: &IpNetwork, tag: &str) -> Vec<String> {
    strings(&[
        "-d",
        &host_text(ip),
        "-m",
        "comment",
        "--comment",
        tag,
        "-j",
        "RETURN",
    ])
}

/// A marker's address and tag, if `rule` is a marker.
fn read_marker(rule: &SavedRule) -> Option<(String, String)> {
    let address = rule.option("-d")?.to_string();
    let tag = rule.option("--comment")?.to_string();
    Some((address, tag))
}

fn saved(chain: &str, args: &[String]) -> SavedRule {
    SavedRule {
        chain: chain.to_string(),
        args: args.to_vec(),
        text: join_args(args),
    }
}

/// One family's filter table as read: its programs, the chains read,
/// and, where they were read over netlink, each rule's handle (what an
/// in-process write deletes it by).
struct Filter {
    family: IpFamily,
    programs: Programs,
    table: SavedTable,
    handles: Option<Vec<u64>>,
}

impl Filter {
    /// `chains` of the family's filter table, with the error of a failing
    /// read worded as the reference words it.
    ///
    /// Where `iptables` is iptables-nft, the chains are read over netlink
    /// ([`libcni::iptables::nft_save`]) instead of with `iptables-save`:
    /// that process start was about a third of a call's time and the
    /// largest resident set of the call. Rules of a shape that module does
    /// not read send the read to `iptables-save` after all.
    fn read(family: IpFamily, chains: &[&str]) -> Result<Filter, FirewallError> {
        let programs = Programs::of(family);
        if programs.is_iptables_nft() {
            match nft_save::read_chains_with_handles(family, FILTER, chains) {
                Ok(Some((table, handles))) => {
                    return Ok(Filter {
                        family,
                        programs,
                        table,
                        handles: Some(handles),
                    })
                }
                Ok(None) => {}
                Err(e) => log::debug!("reading {family} {FILTER} over netlink: {e}"),
            }
        }
        let table = programs
            .read(FILTER)
            .map_err(|source| FirewallError::IptablesInit { family, source })?;
        Ok(Filter {
            family,
            programs,
            table,
            handles: None,
        })
    }

    /// The kernel's handle of `rule`, one of this table's rules.
    fn handle_of(&self, rule: &SavedRule) -> Option<u64> {
        let index = self
            .table
            .rules
            .iter()
            .position(|r| std::ptr::eq(r, rule))?;
        self.handles.as_ref()?.get(index).copied()
    }

    /// Writes `edit` in one transaction: in-process where the table was
    /// read over netlink and every rule of the edit is one
    /// [`libcni::iptables::nft_write`] writes (the one `iptables-restore`
    /// a call started was most of its time and its peak resident set),
    /// else, or if that transaction fails, with `iptables-restore`.
    fn write(&self, edit: Edit) -> Result<(), CommandError> {
        if edit.script.is_empty() {
            return Ok(());
        }
        if let (Some(_), Some(changes)) = (&self.handles, &edit.changes) {
            match nft_write::commit(self.family, FILTER, changes) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => log::debug!("writing {} {FILTER} over netlink: {e}", self.family),
            }
        }
        self.programs.restore(&edit.script)
    }
}

/// A change of one family's filter table, kept both as restore input and
/// as in-process changes (`None` once a deletion has no known handle).
struct Edit {
    script: RestoreScript,
    changes: Option<Vec<Change>>,
}

impl Edit {
    fn new() -> Edit {
        Edit {
            script: RestoreScript::new(FILTER),
            changes: Some(Vec::new()),
        }
    }

    fn push(&mut self, change: Change) {
        if let Some(changes) = &mut self.changes {
            changes.push(change);
        }
    }

    fn create_chain(&mut self, chain: &str) {
        self.script.declare_chain(chain);
        self.push(Change::CreateChain(chain.to_string()));
    }

    fn insert_first(&mut self, chain: &str, args: &[String]) {
        self.script.insert(chain, 1, args);
        self.push(Change::InsertFirst {
            chain: chain.to_string(),
            args: args.to_vec(),
        });
    }

    fn append(&mut self, chain: &str, args: &[String]) {
        self.script.append(chain, args);
        self.push(Change::Append {
            chain: chain.to_string(),
            args: args.to_vec(),
        });
    }

    /// Deletes `rule`, one of `filter`'s rules.
    fn delete(&mut self, filter: &Filter, rule: &SavedRule) {
        self.script.delete(rule);
        match filter.handle_of(rule) {
            Some(handle) => self.push(Change::Delete {
                chain: rule.chain.clone(),
                handle,
            }),
            None => self.changes = None,
        }
    }
}

fn families_of(ips: &[IpNetwork]) -> BTreeSet<IpFamily> {
    ips.iter().map(IpFamily::of_network).collect()
}

/// What one ADD appended, to take back if a later step fails.
#[derive(Debug, Default)]
pub struct Added {
    rules: Vec<(IpFamily, SavedRule)>,
}

impl Added {
    /// Deletes the rules again; returns what failed.
    pub fn undo(self) -> Vec<String> {
        let mut failures = Vec::new();
        for family in [IpFamily::V4, IpFamily::V6] {
            let mut script = RestoreScript::new(FILTER);
            for (_, rule) in self.rules.iter().filter(|(f, _)| *f == family) {
                script.delete(rule);
            }
            if script.is_empty() {
                continue;
            }
            if let Err(e) = Programs::of(family).restore(&script) {
                failures.push(e.to_string());
            }
        }
        failures
    }
}

/// ADD: chains, jumps, the address rules and the markers, per family of
/// the addresses.
pub fn add(ips: &[IpNetwork], admin_chain: &str, tag: &str) -> Result<Added, FirewallError> {
    let mut added = Added::default();
    for family in families_of(ips) {
        let chains = [FORWARD, PRIVATE_CHAIN, admin_chain, ATTACHMENTS_CHAIN];
        let result = Filter::read(family, &chains).and_then(|filter| {
            let table = &filter.table;
            let mut edit = Edit::new();
            for chain in [PRIVATE_CHAIN, admin_chain, ATTACHMENTS_CHAIN] {
                if !table.has_chain(chain) {
                    edit.create_chain(chain);
                }
            }
            if !table.has_rule(FORWARD, &forward_jump()) {
                edit.insert_first(FORWARD, &forward_jump());
            }
            if !table.has_rule(PRIVATE_CHAIN, &admin_jump(admin_chain)) {
                edit.insert_first(PRIVATE_CHAIN, &admin_jump(admin_chain));
            }
            let mut appended = Vec::new();
            for ip in ips.iter().filter(|ip| IpFamily::of_network(ip) == family) {
                for rule in address_rules(ip) {
                    if !table.has_rule(PRIVATE_CHAIN, &rule) {
                        appended.push(saved(PRIVATE_CHAIN, &rule));
                    }
                }
                let marker = marker(ip, tag);
                if !table.has_rule(ATTACHMENTS_CHAIN, &marker) {
                    appended.push(saved(ATTACHMENTS_CHAIN, &marker));
                }
            }
            for rule in &appended {
                edit.append(&rule.chain, &rule.args);
            }
            filter.write(edit).map_err(FirewallError::Iptables)?;
            Ok(appended)
        });
        match result {
            Ok(appended) => added
                .rules
                .extend(appended.into_iter().map(|rule| (family, rule))),
            Err(e) => {
                let failures = added.undo();
                return Err(FirewallError::undo_failed(e, failures));
            }
        }
    }
    Ok(added)
}

/// DEL: see the module text. A family whose programs are not installed
/// is skipped when the prevResult names none of its addresses.
pub fn del(ips: &[IpNetwork], tag: &str) -> Result<(), FirewallError> {
    let wanted = families_of(ips);
    let mut errors = Vec::new();
    for family in [IpFamily::V4, IpFamily::V6] {
        let filter = match Filter::read(family, &[ATTACHMENTS_CHAIN, PRIVATE_CHAIN]) {
            Ok(read) => read,
            Err(FirewallError::IptablesInit {
                source: CommandError::NotFound { .. },
                ..
            }) if !wanted.contains(&family) => continue,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        let table = &filter.table;
        let mut doomed: Vec<&SavedRule> = Vec::new();
        let mut addresses: BTreeSet<String> = ips
            .iter()
            .filter(|ip| IpFamily::of_network(ip) == family)
            .map(host_text)
            .collect();
        let mut others = BTreeSet::new();
        for rule in table.rules_in(ATTACHMENTS_CHAIN) {
            match read_marker(rule) {
                Some((address, marker_tag)) if marker_tag == tag => {
                    doomed.push(rule);
                    addresses.insert(address);
                }
                Some((address, _)) => {
                    others.insert(address);
                }
                None => {}
            }
        }
        let prev_addresses: BTreeSet<String> = ips.iter().map(host_text).collect();
        for address in &addresses {
            // An address only a marker names may belong to another
            // attachment by now.
            if others.contains(address) && !prev_addresses.contains(address) {
                continue;
            }
            doomed.extend(address_rules_in(table, address));
        }
        if let Err(e) = delete_all(&filter, doomed) {
            errors.push(e);
        }
    }
    FirewallError::from_many(errors).map_or(Ok(()), Err)
}

/// Deletes `rules`, rules of `filter`, in one transaction.
fn delete_all(filter: &Filter, rules: Vec<&SavedRule>) -> Result<(), FirewallError> {
    let mut edit = Edit::new();
    for rule in rules {
        edit.delete(filter, rule);
    }
    filter.write(edit).map_err(FirewallError::Iptables)
}

/// The reference's two rules of `address` (`/32` or `/128` text) that
/// are in `CNI-FORWARD`.
fn address_rules_in<'a>(
    table: &'a SavedTable,
    address: &str,
) -> impl Iterator<Item = &'a SavedRule> + 'a {
    let wanted: Vec<Vec<String>> = address
        .parse::<IpNetwork>()
        .map(|ip| address_rules(&ip).to_vec())
        .unwrap_or_default();
    table
        .rules_in(PRIVATE_CHAIN)
        .filter(move |rule| wanted.contains(&rule.args))
}

/// CHECK: chains, jumps and each address's rules, per family of the
/// addresses. A missing chain is an error (the reference creates it,
/// which a CHECK should not).
pub fn check(ips: &[IpNetwork], admin_chain: &str) -> Result<(), FirewallError> {
    for family in families_of(ips) {
        let table = Filter::read(family, &[FORWARD, PRIVATE_CHAIN, admin_chain])?.table;
        for chain in [PRIVATE_CHAIN, admin_chain] {
            if !table.has_chain(chain) {
                return Err(FirewallError::Check(format!(
                    "expected chain {chain} not found ({family})"
                )));
            }
        }
        for (chain, rule) in [
            (FORWARD, forward_jump()),
            (PRIVATE_CHAIN, admin_jump(admin_chain)),
        ] {
            if !table.has_rule(chain, &rule) {
                return Err(FirewallError::Check(format!(
                    "expected {chain} rule [{}] not found",
                    rule.join(" ")
                )));
            }
        }
        for ip in ips.iter().filter(|ip| IpFamily::of_network(ip) == family) {
            for rule in address_rules(ip) {
                if !table.has_rule(PRIVATE_CHAIN, &rule) {
                    return Err(FirewallError::Check(format!(
                        "expected rule [{}] not found",
                        rule.join(" ")
                    )));
                }
            }
        }
    }
    Ok(())
}

/// GC: see the module text. `keep` holds the tags of the valid
/// attachments of network `network`.
pub fn gc(network: &str, keep: &BTreeSet<String>) -> Result<(), FirewallError> {
    let prefix = tag_prefix(network);
    let mut errors = Vec::new();
    for family in [IpFamily::V4, IpFamily::V6] {
        let filter = match Filter::read(family, &[ATTACHMENTS_CHAIN, PRIVATE_CHAIN]) {
            Ok(read) => read,
            Err(FirewallError::IptablesInit {
                source: CommandError::NotFound { .. },
                ..
            }) => continue,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        let table = &filter.table;
        let mut doomed: Vec<&SavedRule> = Vec::new();
        let mut stale = BTreeSet::new();
        let mut kept = BTreeSet::new();
        for rule in table.rules_in(ATTACHMENTS_CHAIN) {
            let Some((address, tag)) = read_marker(rule) else {
                continue;
            };
            if tag.starts_with(&prefix) && !keep.contains(&tag) {
                doomed.push(rule);
                stale.insert(address);
            } else {
                kept.insert(address);
            }
        }
        for address in stale.difference(&kept) {
            doomed.extend(address_rules_in(table, address));
        }
        if let Err(e) = delete_all(&filter, doomed) {
            errors.push(e);
        }
    }
    FirewallError::from_many(errors).map_or(Ok(()), Err)
}

/// STATUS: both families' iptables work, as the reference requires.
pub fn status() -> Result<(), FirewallError> {
    for family in [IpFamily::V4, IpFamily::V6] {
        libcni::firewall_probe::probe_iptables(&Programs::of(family))
            .map_err(|source| FirewallError::IptablesUnusable { family, source })?;
    }
    Ok(())
}

/// The isolation rules of `bridge`, comment included, in save order.
struct IsolationRules {
    stage_1_bridge: Vec<String>,
    stage_1_drop: Vec<String>,
}

fn with_comment(rule: &[&str], comment: &str, target: &str) -> Vec<String> {
    let mut args = strings(rule);
    args.extend(strings(&[
        "-m",
        "comment",
        "--comment",
        comment,
        "-j",
        target,
    ]));
    args
}

fn isolation_rules(bridge: &str, policy: IngressPolicy) -> IsolationRules {
    let comment = format!(
        "CNI firewall plugin rules (ingressPolicy: {})",
        policy.name()
    );
    IsolationRules {
        stage_1_bridge: with_comment(&["-i", bridge, "!", "-o", bridge], &comment, STAGE_2),
        stage_1_drop: with_comment(&["-i", bridge, "-o", bridge], &comment, "DROP"),
    }
}

/// A shared rule with the isolation comment: present when the chain has
/// it with the current comment or the legacy one.
fn has_isolation_rule(table: &SavedTable, chain: &str, rule: &[&str], target: &str) -> bool {
    [ISOLATION_COMMENT, LEGACY_ISOLATION_COMMENT]
        .iter()
        .any(|comment| table.has_rule(chain, &with_comment(rule, comment, target)))
}

/// The ingress policy's chains and rules for `bridge`, per family of the
/// addresses, each inserted only when missing (the reference's order:
/// the jump first in FORWARD, the bridge rules first in stage 1, the
/// RETURNs last). They stay on DEL: the bridge may be shared.
pub fn setup_isolation(
    ips: &[IpNetwork],
    bridge: &str,
    policy: IngressPolicy,
) -> Result<(), FirewallError> {
    let rules = isolation_rules(bridge, policy);
    for family in families_of(ips) {
        let filter = Filter::read(family, &[FORWARD, STAGE_1, STAGE_2])?;
        let table = &filter.table;
        let mut edit = Edit::new();
        for chain in [STAGE_1, STAGE_2] {
            if !table.has_chain(chain) {
                edit.create_chain(chain);
            }
        }
        if !has_isolation_rule(table, FORWARD, &[], STAGE_1) {
            edit.insert_first(FORWARD, &with_comment(&[], ISOLATION_COMMENT, STAGE_1));
        }
        if !table.has_rule(STAGE_1, &rules.stage_1_bridge) {
            edit.insert_first(STAGE_1, &rules.stage_1_bridge);
        }
        if policy == IngressPolicy::Isolated && !table.has_rule(STAGE_1, &rules.stage_1_drop) {
            edit.insert_first(STAGE_1, &rules.stage_1_drop);
        }
        if !has_isolation_rule(table, STAGE_1, &[], "RETURN") {
            edit.append(STAGE_1, &with_comment(&[], ISOLATION_COMMENT, "RETURN"));
        }
        if !has_isolation_rule(table, STAGE_2, &["-o", bridge], "DROP") {
            edit.insert_first(
                STAGE_2,
                &with_comment(&["-o", bridge], ISOLATION_COMMENT, "DROP"),
            );
        }
        if !has_isolation_rule(table, STAGE_2, &[], "RETURN") {
            edit.append(STAGE_2, &with_comment(&[], ISOLATION_COMMENT, "RETURN"));
        }
        filter.write(edit).map_err(FirewallError::Iptables)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_rule_text() {
        let ip: IpNetwork = "10.0.0.2/24".parse().unwrap();
        assert_eq!(
            join_args(&address_rules(&ip)[0]),
            "-d 10.0.0.2/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"
        );
        let ip6: IpNetwork = "2001:db8:1:2::1/64".parse().unwrap();
        assert_eq!(
            join_args(&address_rules(&ip6)[1]),
            "-s 2001:db8:1:2::1/128 -j ACCEPT"
        );
        assert_eq!(
            join_args(&forward_jump()),
            "-m comment --comment \"CNI firewall plugin rules\" -j CNI-FORWARD"
        );
        let rules = isolation_rules("cni0", IngressPolicy::Isolated);
        assert_eq!(
            join_args(&rules.stage_1_drop),
            "-i cni0 -o cni0 -m comment --comment \"CNI firewall plugin rules (ingressPolicy: isolated)\" -j DROP"
        );
    }

    #[test]
    fn markers_read_back() {
        let ip: IpNetwork = "10.0.0.2/24".parse().unwrap();
        let tag = crate::config::attachment_tag("n", "c1", "eth0");
        let text = join_args(&marker(&ip, &tag));
        let table = SavedTable::parse(
            &format!(
                "*filter\n:{ATTACHMENTS_CHAIN} - [0:0]\n-A {ATTACHMENTS_CHAIN} {text}\nCOMMIT\n"
            ),
            FILTER,
        )
        .unwrap();
        let rule = table.rules_in(ATTACHMENTS_CHAIN).next().unwrap();
        assert_eq!(read_marker(rule), Some(("10.0.0.2/32".into(), tag)));
    }
}
