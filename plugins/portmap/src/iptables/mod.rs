//! The iptables backend, under the host-wide portmap lock. Where
//! `iptables` is iptables-nft, ADD and DEL write the rules in-process over
//! netlink ([`nft`]), reading only small chains. Elsewhere, and for CHECK,
//! GC and rules [`nft`] does not write: one `iptables-save -t nat` to
//! learn the state and one `iptables-restore --noflush` to apply a whole
//! change, per family.
//!
//! The reference runs a process per check and per rule (about 24 for a
//! DEL); here an ADD or DEL costs no process with iptables-nft, and at
//! most two per family otherwise.
//!
//! The host lock: `iptables-restore --noflush` applies one change
//! atomically, but the change is computed from an `iptables-save` taken just
//! before; two plugins doing that at once could both add the shared jump
//! rules. An exclusive lock on [`LOCK_PATH`] makes the read and the write
//! one step for every portmap on the host. nftables needs no such lock: a
//! whole ADD is one kernel batch.

mod nft;
pub mod rules;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;

use ipnetwork::IpNetwork;
use libcni::error::ErrorCode;
use libcni::firewall_probe::{probe_host_iptables, IptablesFlavour, IptablesUnusable};
use libcni::iptables::{
    join_args, option_value, CommandError, Programs, RestoreScript, SavedTable,
};
use libcni::lock::{FileLock, LockError, LockWait};
use libcni::nftables::iptables_nft::NAT_TABLE;
use libcni::IpFamily;

use crate::config::{ContainerIps, PortMapConf};
use rules::{
    dnat_chain_name, dnat_chain_rules, dnat_entry_jump, dnat_entry_rules, mark_masq_rule,
    masq_entry_jump, old_snat_chain_name, parse_dnat_comment, set_mark_rule, DNAT_ENTRY_CHAINS,
    MARK_MASQ_CHAIN, MASQ_ENTRY_CHAIN, SET_MARK_CHAIN, TOP_LEVEL_DNAT_CHAIN,
};

/// The host lock's file; `/run` is per boot, like the rules it protects.
pub const LOCK_PATH: &str = "/run/cni-portmap.lock";

/// How long a call waits for another portmap before giving up (code 11).
pub const LOCK_WAIT: LockWait = LockWait {
    timeout: std::time::Duration::from_secs(30),
    holder: "another portmap",
};

#[derive(Debug, thiserror::Error)]
pub enum IptablesError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Command(#[from] CommandError),
    #[error("neither iptables nor ip6tables is usable, (iptables) {v4}, (ip6tables) {v6}")]
    NeitherUsable {
        v4: Box<IptablesError>,
        v6: Box<IptablesError>,
    },
    #[error("{0}")]
    Check(String),
    #[error("invalid {key}: {reason}")]
    InvalidCondition { key: &'static str, reason: String },
    #[error(transparent)]
    NfTables(#[from] libcni::nftables::NfTablesError),
}

/// The probe's failure as the backend reports it: the same errors its
/// own reading of the table or its nf_tables socket would give.
impl From<IptablesUnusable> for IptablesError {
    fn from(error: IptablesUnusable) -> IptablesError {
        match error {
            IptablesUnusable::NfTables(e) => IptablesError::NfTables(e),
            IptablesUnusable::Command(e) => IptablesError::Command(e),
        }
    }
}

impl IptablesError {
    /// The spec code: 11 when the portmap or the xtables lock stayed
    /// taken, 7 for a condition the configuration got wrong, 999 for what
    /// the host refused. When neither family was usable, 11 if either
    /// failed only on a lock (a retry may find both free; the other family
    /// is often just absent), else the IPv4 failure's code.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            IptablesError::Lock(e) => e.error_code(),
            IptablesError::Command(e) => e.error_code(),
            IptablesError::InvalidCondition { .. } => ErrorCode::InvalidNetworkConfig,
            IptablesError::NeitherUsable { v4, v6 } => {
                if v4.is_try_again() || v6.is_try_again() {
                    ErrorCode::TryAgainLater
                } else {
                    v4.error_code()
                }
            }
            IptablesError::Check(_) | IptablesError::NfTables(_) => ErrorCode::Internal,
        }
    }

    /// Worth retrying: the portmap or the xtables lock stayed taken.
    pub fn is_try_again(&self) -> bool {
        self.error_code() == ErrorCode::TryAgainLater
    }

    /// The kernel's errno when nf_tables refused something.
    pub fn nftables_errno(&self) -> Option<nix::errno::Errno> {
        match self {
            IptablesError::NfTables(e) => e.errno(),
            _ => None,
        }
    }

    /// A configuration problem rather than a host problem.
    pub fn is_config(&self) -> bool {
        self.error_code() == ErrorCode::InvalidNetworkConfig
    }
}

/// The iptables backend, holding the host lock for its whole life.
#[derive(Debug)]
pub struct IptablesMapper {
    _lock: FileLock,
    /// The IPv4 table read by [`IptablesMapper::probe`], still current
    /// because the lock is held and nothing was written since.
    probed_v4: Option<SavedTable>,
    /// Whether each family's iptables is iptables-nft ([`nft`] writes).
    netlink: [bool; 2],
}

fn index(family: IpFamily) -> usize {
    match family {
        IpFamily::V4 => 0,
        IpFamily::V6 => 1,
    }
}

fn uses_netlink(family: IpFamily) -> bool {
    IptablesFlavour::of(&Programs::of(family)) == IptablesFlavour::Nft
}

impl IptablesMapper {
    /// Takes the host lock.
    pub fn open() -> Result<IptablesMapper, IptablesError> {
        Ok(IptablesMapper {
            _lock: FileLock::acquire(Path::new(LOCK_PATH), LOCK_WAIT)?,
            probed_v4: None,
            netlink: [uses_netlink(IpFamily::V4), uses_netlink(IpFamily::V6)],
        })
    }

    /// The same mapper always running the programs (tests compare both).
    #[cfg(test)]
    pub(crate) fn with_programs_only(mut self) -> IptablesMapper {
        self.netlink = [false, false];
        self
    }

    /// Whether iptables works here: reads the IPv4 `nat` table (kept for
    /// the next operation, so auto-detection costs no extra process).
    pub fn probe(&mut self) -> Result<(), IptablesError> {
        let probe = probe_host_iptables()?;
        if !self.netlink[index(IpFamily::V4)] {
            self.probed_v4 = probe.nat_table;
        }
        Ok(())
    }

    fn table(&mut self, family: IpFamily) -> Result<SavedTable, IptablesError> {
        if family == IpFamily::V4 {
            if let Some(table) = self.probed_v4.take() {
                return Ok(table);
            }
        }
        read_table(family)
    }

    /// Sets up the container's port forwarding for each of its families.
    pub fn forward(
        &mut self,
        conf: &PortMapConf,
        container_id: &str,
        ips: &ContainerIps,
    ) -> Result<(), IptablesError> {
        for (family, ip) in ips.iter() {
            validate_conditions(conf, family)?;
            if self.netlink[index(family)] && nft::forward(conf, container_id, ip)? {
                continue;
            }
            let table = self.table(family)?;
            let script = add_script(conf, container_id, ip, &table);
            Programs::of(family).restore(&script)?;
        }
        Ok(())
    }

    /// Removes the container's chains and every reference to them, in
    /// both families (the addresses are not known at DEL). A family whose
    /// iptables does not work is skipped, unless neither works.
    pub fn unforward(&mut self, network: &str, container_id: &str) -> Result<(), IptablesError> {
        let chains = [
            dnat_chain_name(network, container_id),
            old_snat_chain_name(network, container_id),
        ];
        self.remove_chains_everywhere(&chains.each_ref().map(String::as_str))
    }

    /// Removes the chains of this network's containers that are not in
    /// `valid`. A container is known by the comment of its entry rules,
    /// which names network and ID; chains without one are left alone.
    pub fn gc(&mut self, network: &str, valid: &BTreeSet<String>) -> Result<(), IptablesError> {
        let mut failures = Vec::new();
        for family in IpFamily::ALL {
            let table = match self.table(family) {
                Ok(table) => table,
                Err(e) => {
                    failures.push(e);
                    continue;
                }
            };
            let stale: BTreeSet<String> = table
                .rules_in(TOP_LEVEL_DNAT_CHAIN)
                .filter_map(|rule| {
                    let (net, id) = parse_dnat_comment(rule.option("--comment")?)?;
                    let chain = dnat_chain_name(net, id);
                    (net == network && !valid.contains(id) && rule.target() == Some(&chain))
                        .then_some(chain)
                })
                .collect();
            let stale: Vec<&str> = stale.iter().map(String::as_str).collect();
            if let Some(script) = delete_script(&table, &stale) {
                Programs::of(family).restore(&script)?;
            }
        }
        neither_usable(failures)
    }

    /// Verifies that the container's rules are in place, per family.
    pub fn check(
        &mut self,
        conf: &PortMapConf,
        container_id: &str,
        ips: &ContainerIps,
    ) -> Result<(), IptablesError> {
        for (family, ip) in ips.iter() {
            let table = self.table(family)?;
            check_table(conf, container_id, ip, &table)
                .map_err(|e| IptablesError::Check(format!("could not check {family} dnat: {e}")))?;
        }
        Ok(())
    }

    fn remove_chains_everywhere(&mut self, chains: &[&str]) -> Result<(), IptablesError> {
        let mut failures = Vec::new();
        // One socket for both families: its drop parks it for the
        // detached release that ends the call (libcni::detached).
        let mut socket = None;
        for family in IpFamily::ALL {
            if self.netlink[index(family)] {
                let removal = match socket.take() {
                    Some(s) => Ok(s),
                    None => libcni::nftables::NfTablesSocket::open().map_err(IptablesError::from),
                }
                .and_then(|mut s| {
                    let removal = nft::remove_chains(&mut s, chains, family);
                    socket = Some(s);
                    removal
                });
                match removal {
                    Ok(true) => continue,
                    Ok(false) => {
                        log::debug!("{family}: jumps outside the layout, using the programs")
                    }
                    Err(e) => {
                        log::debug!("{family} nf_tables not usable: {e}");
                        failures.push(e);
                        continue;
                    }
                }
            }
            let table = match self.table(family) {
                Ok(table) => table,
                Err(e) => {
                    log::debug!("{family} iptables not usable: {e}");
                    failures.push(e);
                    continue;
                }
            };
            if let Some(script) = delete_script(&table, chains) {
                Programs::of(family).restore(&script)?;
            }
        }
        neither_usable(failures)
    }
}

/// The error when both families failed to read; one failing family is
/// normal (a host without IPv6 iptables).
fn neither_usable(mut failures: Vec<IptablesError>) -> Result<(), IptablesError> {
    if failures.len() < 2 {
        return Ok(());
    }
    let v6 = failures.pop();
    let v4 = failures.pop();
    match (v4, v6) {
        (Some(v4), Some(v6)) => Err(IptablesError::NeitherUsable {
            v4: Box::new(v4),
            v6: Box::new(v6),
        }),
        _ => Ok(()),
    }
}

/// Whether iptables works on this host (reads the IPv4 `nat` table;
/// takes no lock, as it changes nothing).
pub fn probe_host() -> Result<(), IptablesError> {
    probe_host_iptables()?;
    Ok(())
}

fn read_table(family: IpFamily) -> Result<SavedTable, IptablesError> {
    Ok(Programs::of(family).read(NAT_TABLE)?)
}

/// Conditions become arguments of restore lines: a line break inside one
/// would start a new command.
fn validate_conditions(conf: &PortMapConf, family: IpFamily) -> Result<(), IptablesError> {
    let key = match family {
        IpFamily::V4 => "conditionsV4",
        IpFamily::V6 => "conditionsV6",
    };
    if conf
        .conditions(family)
        .iter()
        .any(|c| c.contains(['\n', '\r', '\0']))
    {
        return Err(IptablesError::InvalidCondition {
            key,
            reason: "a condition contains a line break or NUL".to_string(),
        });
    }
    Ok(())
}

/// The change an ADD makes to `table`: shared chains and jumps where they
/// are missing, the container chain replaced whole, and its entry rules
/// replaced.
fn add_script(
    conf: &PortMapConf,
    container_id: &str,
    container: IpNetwork,
    table: &SavedTable,
) -> RestoreScript {
    let family = IpFamily::of(container.ip());
    let chain = dnat_chain_name(&conf.network, container_id);
    let mut script = RestoreScript::new(NAT_TABLE);

    if conf.snat && conf.external_set_mark_chain.is_none() {
        let mark = conf.mark_value();
        if !table.has_chain(SET_MARK_CHAIN) {
            script.declare_chain(SET_MARK_CHAIN);
        }
        if !table.has_rule(SET_MARK_CHAIN, &set_mark_rule(mark)) {
            script.append(SET_MARK_CHAIN, &set_mark_rule(mark));
        }
        if !table.has_chain(MARK_MASQ_CHAIN) {
            script.declare_chain(MARK_MASQ_CHAIN);
        }
        if !table.has_rule(MARK_MASQ_CHAIN, &mark_masq_rule(mark)) {
            script.append(MARK_MASQ_CHAIN, &mark_masq_rule(mark));
        }
        // First in POSTROUTING: the bridge and ptp plugins' masquerade
        // rules further down would otherwise take the packet.
        if !table.has_rule(MASQ_ENTRY_CHAIN, &masq_entry_jump()) {
            script.insert(MASQ_ENTRY_CHAIN, 1, &masq_entry_jump());
        }
    }

    if !table.has_chain(TOP_LEVEL_DNAT_CHAIN) {
        script.declare_chain(TOP_LEVEL_DNAT_CHAIN);
    }
    for entry_chain in DNAT_ENTRY_CHAINS {
        if !table.has_rule(entry_chain, &dnat_entry_jump()) {
            script.append(entry_chain, &dnat_entry_jump());
        }
    }

    // Declaring the container chain creates it or empties it, so a repeated
    // ADD replaces the rules instead of duplicating them; its old entry
    // rules go for the same reason.
    script.declare_chain(&chain);
    for reference in table.references_to(&chain) {
        script.delete(reference);
    }
    for rule in dnat_chain_rules(conf, container) {
        script.append(&chain, &rule);
    }
    for rule in dnat_entry_rules(conf, container_id, family, &chain) {
        script.append(TOP_LEVEL_DNAT_CHAIN, &rule);
    }
    script
}

/// The change that removes `chains` and every rule jumping to them, or
/// `None` when none of that exists.
fn delete_script(table: &SavedTable, chains: &[&str]) -> Option<RestoreScript> {
    let mut script = RestoreScript::new(NAT_TABLE);
    let mut removed = Vec::new();
    for chain in chains {
        for reference in table.references_to(chain) {
            script.delete(reference);
        }
        if table.has_chain(chain) {
            // Declaring empties the chain, so it can be deleted.
            script.declare_chain(chain);
            removed.push(*chain);
        }
    }
    if script.is_empty() {
        return None;
    }
    for chain in removed {
        script.delete_chain(chain);
    }
    Some(script)
}

/// What a rule of a container chain does, in a form where the rule as
/// written and as `iptables-save` prints it compare equal (addresses
/// masked to their prefix, "any" source dropped, match modules ignored).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct RuleMeaning {
    protocol: Option<String>,
    dport: Option<String>,
    source: Option<IpNetwork>,
    destination: Option<IpNetwork>,
    target: Option<String>,
    to_destination: Option<String>,
}

impl RuleMeaning {
    fn of(args: &[String]) -> Option<RuleMeaning> {
        let mut meaning = RuleMeaning {
            protocol: None,
            dport: None,
            source: None,
            destination: None,
            target: None,
            to_destination: None,
        };
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let value = it.next()?;
            match arg.as_str() {
                "-p" => meaning.protocol = Some(value.clone()),
                "-m" => {}
                "--dport" => meaning.dport = Some(value.clone()),
                "-s" => meaning.source = normalized_network(value)?,
                "-d" => meaning.destination = normalized_network(value)?,
                "-j" => meaning.target = Some(value.clone()),
                "--to-destination" => meaning.to_destination = Some(value.clone()),
                _ => return None,
            }
        }
        Some(meaning)
    }
}

/// `10.0.0.2/24` as the subnet iptables keeps, `1.2.3.4` as `/32`, and
/// an "any" network as no match at all (iptables-save omits it).
fn normalized_network(text: &str) -> Option<Option<IpNetwork>> {
    let network: IpNetwork = match text.parse::<IpNetwork>() {
        Ok(n) => n,
        Err(_) => {
            let ip: IpAddr = text.parse().ok()?;
            IpNetwork::from(ip)
        }
    };
    if network.prefix() == 0 {
        return Some(None);
    }
    IpNetwork::new(network.network(), network.prefix())
        .ok()
        .map(Some)
}

fn check_table(
    conf: &PortMapConf,
    container_id: &str,
    container: IpNetwork,
    table: &SavedTable,
) -> Result<(), String> {
    let family = IpFamily::of(container.ip());
    let chain = dnat_chain_name(&conf.network, container_id);
    if !table.has_chain(&chain) {
        return Err(format!("chain {chain} not found in iptables table nat"));
    }
    let present: Vec<Option<RuleMeaning>> = table
        .rules_in(&chain)
        .map(|r| RuleMeaning::of(&r.args))
        .collect();
    for rule in dnat_chain_rules(conf, container) {
        let wanted = RuleMeaning::of(&rule);
        if wanted.is_none() || !present.contains(&wanted) {
            return Err(format!(
                "rule {} in chain {chain} not found in table nat",
                join_args(&rule)
            ));
        }
    }
    for rule in dnat_entry_rules(conf, container_id, family, &chain) {
        let protocol = option_value(&rule, "-p");
        let ports = option_value(&rule, "--destination-ports");
        let found = table.rules_in(TOP_LEVEL_DNAT_CHAIN).any(|r| {
            r.target() == Some(chain.as_str())
                && r.option("-p") == protocol
                && (r.option("--dports") == ports || r.option("--destination-ports") == ports)
        });
        if !found {
            return Err(format!(
                "rule {} in chain {TOP_LEVEL_DNAT_CHAIN} not found in table nat",
                join_args(&rule)
            ));
        }
    }
    for entry_chain in DNAT_ENTRY_CHAINS {
        if !table.has_rule(entry_chain, &dnat_entry_jump()) {
            return Err(format!(
                "rule {} in chain {entry_chain} not found in table nat",
                join_args(&dnat_entry_jump())
            ));
        }
    }
    if conf.snat && conf.external_set_mark_chain.is_none() {
        let mark = conf.mark_value();
        for (chain, rule) in [
            (SET_MARK_CHAIN, set_mark_rule(mark)),
            (MARK_MASQ_CHAIN, mark_masq_rule(mark)),
            (MASQ_ENTRY_CHAIN, masq_entry_jump()),
        ] {
            if !table.has_rule(chain, &rule) {
                return Err(format!(
                    "rule {} in chain {chain} not found in table nat",
                    join_args(&rule)
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
