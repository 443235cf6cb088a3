//! The iptables masquerade backend, laid out exactly as the reference lays
//! it out (table `nat`):
//!
//! ```text
//! :CNI-<hash> - [0:0]
//! -A POSTROUTING -s <ip>/32 -m comment --comment "name: \"<net>\" id: \"<id>\"" -j CNI-<hash>
//! -A CNI-<hash> -d <subnet> -m comment --comment "..." -j ACCEPT
//! -A CNI-<hash> ! -d 224.0.0.0/4 -m comment --comment "..." -j MASQUERADE
//! ```
//!
//! The reference runs one `iptables` process per rule and list. Here every
//! operation reads the table once and applies its changes at once, per
//! address family: where `iptables` is iptables-nft, in-process over
//! netlink as iptables-nft itself would write them ([`nft`]); elsewhere
//! (iptables-legacy) with `iptables-save -t nat` and one
//! `iptables-restore --noflush` ([`crate::iptables`]), which is atomic and
//! waits a bounded time for the xtables lock. Reading first makes ADD
//! idempotent (no duplicate rules) and lets DEL delete exactly the rules
//! that exist.

mod nft;

use std::collections::BTreeSet;

use crate::firewall_probe::IptablesFlavour;
use crate::iptables::{join_args, CommandError, Programs, RestoreScript, SavedRule, SavedTable};
use crate::nftables::iptables_nft::NAT_TABLE;
use crate::plugin_conf::GcAttachment;
use crate::IpFamily;
use ipnetwork::IpNetwork;

use super::names::{go_quote, iptables_chain, iptables_comment};
use super::IpMasqError;

/// How changes reach the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writer {
    /// In-process nf_tables messages, as iptables-nft writes them.
    Netlink,
    /// `iptables-save` and `iptables-restore`.
    Programs,
}

/// One address family's tools.
#[derive(Debug, Clone)]
pub(crate) struct Tools {
    writer: Writer,
    family: IpFamily,
    programs: Programs,
}

impl Tools {
    pub(crate) fn of(family: IpFamily) -> Tools {
        let programs = Programs::of(family);
        Tools {
            writer: Writer::of(&programs),
            family,
            programs,
        }
    }

    /// The same family with other programs, which are always run (tests
    /// use legacy iptables with its lock file elsewhere).
    #[cfg(test)]
    fn with_programs(mut self, programs: Programs) -> Tools {
        self.programs = programs;
        self.writer = Writer::Programs;
        self
    }

    /// The same tools with another writer (tests run both).
    #[cfg(test)]
    fn with_writer(mut self, writer: Writer) -> Tools {
        self.writer = writer;
        self
    }

    /// What the masquerade rule leaves alone: the family's multicast.
    fn multicast(&self) -> IpNetwork {
        match self.family {
            IpFamily::V4 => network([224, 0, 0, 0].into(), 4),
            IpFamily::V6 => network([0xff00, 0, 0, 0, 0, 0, 0, 0].into(), 8),
        }
    }

    /// The current `nat` table, or with the netlink writer what an
    /// operation on `chain` needs of it (see [`nft::read`]).
    pub(crate) fn read_nat(&self, chain: Option<&str>) -> Result<NatTable, IpMasqError> {
        if self.writer == Writer::Netlink {
            // Failing to read is failing to read, whichever way: an error
            // of the save program, which DEL and GC ignore.
            return nft::read(self.family, chain).map_err(|source| IpMasqError::NetlinkRead {
                program: self.programs.save_name().to_string(),
                source,
            });
        }
        Ok(NatTable::from_saved(self.programs.read(NAT_TABLE)?))
    }

    /// Applies `changes` read from `table` at once.
    fn apply(&self, changes: &[Change], table: &NatTable) -> Result<(), IpMasqError> {
        if self.writer == Writer::Netlink {
            if let Some(batch) = nft::batch(changes, table, self.family) {
                log::debug!(
                    "{} nat: {} changes over netlink",
                    self.programs.save_name(),
                    changes.len()
                );
                return nft::commit(batch);
            }
            log::debug!("a rule iptables-nft would refuse: running the programs");
        }
        Ok(self.programs.restore(&restore_script(changes))?)
    }
}

impl Writer {
    /// Netlink where the programs are iptables-nft, else the programs.
    fn of(programs: &Programs) -> Writer {
        match IptablesFlavour::of(programs) {
            IptablesFlavour::Nft => Writer::Netlink,
            IptablesFlavour::Legacy => Writer::Programs,
        }
    }
}

/// One change to the `nat` table.
#[derive(Debug, Clone)]
pub(crate) enum Change {
    NewChain(String),
    Append { chain: String, spec: RuleSpec },
    Delete(NatRule),
    Flush(String),
    DeleteChain(String),
}

/// `changes` as one `iptables-restore` script.
fn restore_script(changes: &[Change]) -> RestoreScript {
    let mut script = RestoreScript::new(NAT_TABLE);
    for change in changes {
        match change {
            Change::NewChain(chain) => script.declare_chain(chain),
            Change::Append { chain, spec } => script.append(chain, &spec.args()),
            Change::Delete(rule) => script.delete(&rule.saved),
            Change::Flush(chain) => script.flush_chain(chain),
            Change::DeleteChain(chain) => script.delete_chain(chain),
        }
    }
    script
}

/// A network from constant parts (the prefix is always in range, so the
/// fallback to a host route never happens).
fn network(addr: std::net::IpAddr, prefix: u8) -> IpNetwork {
    IpNetwork::new(addr, prefix).unwrap_or(IpNetwork::from(addr))
}

/// What a rule matches on and jumps to, as far as our rules go.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct RuleSpec {
    /// `(negated, network)` of `-s`.
    source: Option<(bool, IpNetwork)>,
    /// `(negated, network)` of `-d`.
    destination: Option<(bool, IpNetwork)>,
    comment: Option<String>,
    target: Option<String>,
    /// Any other match or option: never one of ours.
    other: bool,
}

impl RuleSpec {
    /// The rule's arguments after `-A <chain>`, in `iptables-save` order.
    fn args(&self) -> Vec<String> {
        let mut args = Vec::new();
        for (flag, field) in [("-s", &self.source), ("-d", &self.destination)] {
            if let Some((negated, net)) = field {
                if *negated {
                    args.push("!".to_string());
                }
                args.push(flag.to_string());
                args.push(net.to_string());
            }
        }
        if let Some(comment) = &self.comment {
            args.extend(["-m", "comment", "--comment"].map(String::from));
            args.push(comment.clone());
        }
        if let Some(target) = &self.target {
            args.push("-j".to_string());
            args.push(target.clone());
        }
        args
    }

    fn parse(tokens: &[String]) -> RuleSpec {
        let mut spec = RuleSpec::default();
        let mut negate = false;
        let mut it = tokens.iter();
        while let Some(token) = it.next() {
            match token.as_str() {
                "!" => {
                    negate = true;
                    continue;
                }
                "-s" | "--source" | "-d" | "--destination" => {
                    let net = it.next().and_then(|v| parse_network(v));
                    match (net, matches!(token.as_str(), "-s" | "--source")) {
                        (Some(net), true) => spec.source = Some((negate, net)),
                        (Some(net), false) => spec.destination = Some((negate, net)),
                        (None, _) => spec.other = true,
                    }
                }
                "-m" | "--match" => {
                    if it.next().map(String::as_str) != Some("comment") {
                        spec.other = true;
                    }
                }
                "--comment" => spec.comment = it.next().cloned(),
                "-j" | "--jump" => spec.target = it.next().cloned(),
                _ => spec.other = true,
            }
            negate = false;
        }
        spec
    }
}

fn parse_network(text: &str) -> Option<IpNetwork> {
    text.parse::<IpNetwork>().ok()
}

/// A rule of the `nat` table as read, by the programs or over netlink.
#[derive(Debug, Clone)]
pub(crate) struct NatRule {
    /// The rule as `iptables-save` prints it: a restore script deletes it
    /// by this text.
    saved: SavedRule,
    spec: RuleSpec,
    /// The nf_tables handle, when read over netlink.
    handle: Option<u64>,
}

impl NatRule {
    fn new(chain: &str, spec: RuleSpec, handle: Option<u64>) -> NatRule {
        let args = spec.args();
        NatRule {
            saved: SavedRule {
                chain: chain.to_string(),
                text: join_args(&args),
                args,
            },
            spec,
            handle,
        }
    }

    fn chain(&self) -> &str {
        &self.saved.chain
    }
}

/// The `nat` table: its chains, and its rules as far as an operation
/// needs them.
#[derive(Debug, Clone, Default)]
pub(crate) struct NatTable {
    chains: BTreeSet<String>,
    rules: Vec<NatRule>,
}

impl NatTable {
    fn from_saved(saved: SavedTable) -> NatTable {
        let rules = saved
            .rules
            .into_iter()
            .map(|saved| NatRule {
                spec: RuleSpec::parse(&saved.args),
                saved,
                handle: None,
            })
            .collect();
        NatTable {
            chains: saved.chains,
            rules,
        }
    }

    fn has_rule(&self, chain: &str, spec: &RuleSpec) -> bool {
        self.rules
            .iter()
            .any(|r| r.chain() == chain && r.spec == *spec && !r.spec.other)
    }

    /// Rules anywhere in the table that jump to `chain`.
    fn references<'a>(&'a self, chain: &'a str) -> impl Iterator<Item = &'a NatRule> {
        self.rules
            .iter()
            .filter(move |r| r.spec.target.as_deref() == Some(chain))
    }
}

/// The host route of an address: `10.0.0.2/32`, `fd00::2/128`.
fn host_network(ip: &IpNetwork) -> IpNetwork {
    IpNetwork::from(ip.ip())
}

/// The subnet of an address: `10.0.0.2/24` gives `10.0.0.0/24`.
fn subnet(ip: &IpNetwork) -> IpNetwork {
    IpNetwork::new(ip.network(), ip.prefix()).unwrap_or(*ip)
}

/// ADD: the chain, its two rules per address and the POSTROUTING jump per
/// address, each added only if missing (the reference's `AppendUnique`).
pub(crate) fn setup(
    network: &str,
    container_id: &str,
    ips: &[IpNetwork],
) -> Result<(), IpMasqError> {
    for tools in IpFamily::ALL.map(Tools::of) {
        let family: Vec<IpNetwork> = ips
            .iter()
            .filter(|ip| IpFamily::of_network(ip) == tools.family)
            .copied()
            .collect();
        if family.is_empty() {
            continue;
        }
        setup_family(&tools, network, container_id, &family)?;
    }
    Ok(())
}

pub(crate) fn setup_family(
    tools: &Tools,
    network: &str,
    container_id: &str,
    ips: &[IpNetwork],
) -> Result<(), IpMasqError> {
    let chain = iptables_chain(network, container_id);
    let comment = iptables_comment(network, container_id);
    // A concurrent change between the read and the restore makes the
    // restore fail as a whole; reading again settles it.
    let mut attempt = 1;
    loop {
        let mut table = tools.read_nat(Some(&chain))?;
        let mut changes = Vec::new();
        if !table.chains.contains(&chain) {
            changes.push(Change::NewChain(chain.clone()));
        }
        for ip in ips {
            let wanted = [
                (
                    chain.as_str(),
                    RuleSpec {
                        destination: Some((false, subnet(ip))),
                        comment: Some(comment.clone()),
                        target: Some("ACCEPT".into()),
                        ..RuleSpec::default()
                    },
                ),
                (
                    chain.as_str(),
                    RuleSpec {
                        destination: Some((true, tools.multicast())),
                        comment: Some(comment.clone()),
                        target: Some("MASQUERADE".into()),
                        ..RuleSpec::default()
                    },
                ),
                (
                    "POSTROUTING",
                    RuleSpec {
                        source: Some((false, host_network(ip))),
                        comment: Some(comment.clone()),
                        target: Some(chain.clone()),
                        ..RuleSpec::default()
                    },
                ),
            ];
            for (in_chain, spec) in wanted {
                if !table.has_rule(in_chain, &spec) {
                    table.rules.push(NatRule::new(in_chain, spec.clone(), None));
                    changes.push(Change::Append {
                        chain: in_chain.to_string(),
                        spec,
                    });
                }
            }
        }
        if changes.is_empty() {
            return Ok(());
        }
        match tools.apply(&changes, &table) {
            Err(e) if attempt < 3 && e.is_race() => attempt += 1,
            other => return other,
        }
    }
}

/// DEL: removes the POSTROUTING jumps for `ips` (`-s <ip>/32` and the
/// legacy `-s <ip>/<prefix>`), then flushes and deletes the chain once
/// nothing jumps to it any more. Without addresses (the interface was
/// already gone) every jump to this container's chain goes: the chain name
/// is unique to the network and container, so nothing else is touched and
/// the reference's leak of the chain is avoided.
pub(crate) fn teardown(
    network: &str,
    container_id: &str,
    ips: &[IpNetwork],
) -> Result<(), IpMasqError> {
    let mut errors = Vec::new();
    for tools in IpFamily::ALL.map(Tools::of) {
        let family: Vec<IpNetwork> = ips
            .iter()
            .filter(|ip| IpFamily::of_network(ip) == tools.family)
            .copied()
            .collect();
        // With addresses, only their families can hold rules of this
        // attachment; saves a process per DEL.
        if family.is_empty() && !ips.is_empty() {
            continue;
        }
        let scope = if ips.is_empty() {
            Scope::Everything
        } else {
            Scope::Addresses(&family)
        };
        if let Err(e) = teardown_family(&tools, network, container_id, scope) {
            keep_unless_unusable(&tools, e, &mut errors);
        }
    }
    IpMasqError::from_list(errors)
}

/// Failing to read the table means iptables does not work here (not
/// installed, no kernel support, IPv6 off), so nothing of ours can be in
/// it: like the reference, DEL and GC then ignore it. Failing to apply
/// changes to a table that could be read is a real error.
fn keep_unless_unusable(tools: &Tools, error: IpMasqError, errors: &mut Vec<IpMasqError>) {
    let save = tools.programs.save_name();
    let unusable = match &error {
        IpMasqError::NetlinkRead { program, .. } => program == save,
        IpMasqError::Iptables(e) => match e {
            CommandError::NotFound { program }
            | CommandError::Spawn { program, .. }
            | CommandError::Failed { program, .. }
            | CommandError::Unreadable { program, .. } => program == save,
            // A hung save is no sign that iptables is missing, nor is the
            // lock (which only restore takes).
            CommandError::Deadline { .. } | CommandError::XtablesLock { .. } => false,
            // Refused before any program ran.
            CommandError::UnsafeInput { .. } => false,
        },
        IpMasqError::UnknownBackend(_) | IpMasqError::NfTables(_) | IpMasqError::Several(_) => {
            false
        }
    };
    if unusable {
        log::debug!("iptables unusable here, skipped: {error}");
    } else {
        errors.push(error);
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Scope<'a> {
    Everything,
    Addresses(&'a [IpNetwork]),
}

pub(crate) fn teardown_family(
    tools: &Tools,
    network: &str,
    container_id: &str,
    scope: Scope<'_>,
) -> Result<(), IpMasqError> {
    let chain = iptables_chain(network, container_id);
    let mut attempt = 1;
    loop {
        let table = tools.read_nat(Some(&chain))?;
        let changes = teardown_changes(&table, &chain, scope);
        if changes.is_empty() {
            return Ok(());
        }
        match tools.apply(&changes, &table) {
            Err(e) if attempt < 3 && e.is_race() => attempt += 1,
            other => return other,
        }
    }
}

fn teardown_changes(table: &NatTable, chain: &str, scope: Scope<'_>) -> Vec<Change> {
    let mut changes = Vec::new();
    let mut remaining = 0;
    for rule in table.references(chain) {
        let ours = match scope {
            Scope::Everything => true,
            Scope::Addresses(ips) => ips.iter().any(|ip| {
                // iptables stores the legacy `-s <ip>/<prefix>` masked.
                matches!(rule.spec.source, Some((false, src))
                    if src == host_network(ip) || src == *ip || src == subnet(ip))
            }),
        };
        if ours {
            changes.push(Change::Delete(rule.clone()));
        } else {
            remaining += 1;
        }
    }
    // Another interface of the same container on the same network shares
    // the chain (the chain name ignores the interface): keep it for that one.
    if remaining == 0 && table.chains.contains(chain) {
        changes.push(Change::Flush(chain.to_string()));
        changes.push(Change::DeleteChain(chain.to_string()));
    }
    changes
}

/// GC: deletes the chains of this network whose container is not in
/// `valid`. A chain is recognised by its rules' comment, and only when the
/// chain name is the hash of that very network and container.
pub(crate) fn gc(network: &str, valid: &[GcAttachment]) -> Result<(), IpMasqError> {
    let mut errors = Vec::new();
    for tools in IpFamily::ALL.map(Tools::of) {
        if let Err(e) = gc_family(&tools, network, valid) {
            keep_unless_unusable(&tools, e, &mut errors);
        }
    }
    IpMasqError::from_list(errors)
}

pub(crate) fn gc_family(
    tools: &Tools,
    network: &str,
    valid: &[GcAttachment],
) -> Result<(), IpMasqError> {
    let valid_ids: BTreeSet<&str> = valid.iter().map(|a| a.container_id.as_str()).collect();
    let mut attempt = 1;
    loop {
        let table = tools.read_nat(None)?;
        let mut changes = Vec::new();
        for chain in stale_chains(&table, network, &valid_ids) {
            changes.extend(teardown_changes(&table, &chain, Scope::Everything));
        }
        if changes.is_empty() {
            return Ok(());
        }
        match tools.apply(&changes, &table) {
            Err(e) if attempt < 3 && e.is_race() => attempt += 1,
            other => return other,
        }
    }
}

fn stale_chains(table: &NatTable, network: &str, valid_ids: &BTreeSet<&str>) -> BTreeSet<String> {
    let prefix = format!("name: {} id: ", go_quote(network));
    let mut stale = BTreeSet::new();
    for rule in &table.rules {
        if !is_masq_chain_name(rule.chain()) {
            continue;
        }
        let Some(container_id) = rule
            .spec
            .comment
            .as_deref()
            .and_then(|c| c.strip_prefix(&prefix))
            .and_then(go_unquote)
        else {
            continue;
        };
        if iptables_chain(network, &container_id) != rule.chain()
            || iptables_comment(network, &container_id)
                != rule.spec.comment.as_deref().unwrap_or_default()
        {
            continue;
        }
        if !valid_ids.contains(container_id.as_str()) {
            stale.insert(rule.chain().to_string());
        }
    }
    stale
}

/// `CNI-` and 24 lower-case hex digits (and not `CNI-DN-…` and the like).
fn is_masq_chain_name(name: &str) -> bool {
    name.len() == 28
        && name.strip_prefix("CNI-").is_some_and(|h| {
            h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
}

/// The inverse of Go's `%q` for the escapes it produces; `None` for
/// anything else.
fn go_unquote(quoted: &str) -> Option<String> {
    let inner = quoted.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '"' {
            return None;
        }
        if c != '\\' {
            out.push(c);
            continue;
        }
        let escaped = match chars.next()? {
            '"' => '"',
            '\\' => '\\',
            'a' => '\u{7}',
            'b' => '\u{8}',
            'f' => '\u{c}',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'v' => '\u{b}',
            kind @ ('x' | 'u' | 'U') => {
                let digits = match kind {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let hex: String = chars.by_ref().take(digits).collect();
                if hex.len() != digits {
                    return None;
                }
                char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?
            }
            _ => return None,
        };
        out.push(escaped);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAVED: &str = r#"# Generated by iptables-save v1.8.9 (nf_tables) on Mon Nov 30 08:20:27 2026
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:CNI-682b5374add02da0403a30b6 - [0:0]
-A POSTROUTING -s 10.88.0.2/32 -m comment --comment "name: \"mynet\" id: \"ctr-one\"" -j CNI-682b5374add02da0403a30b6
-A CNI-682b5374add02da0403a30b6 -d 10.88.0.0/16 -m comment --comment "name: \"mynet\" id: \"ctr-one\"" -j ACCEPT
-A CNI-682b5374add02da0403a30b6 ! -d 224.0.0.0/4 -m comment --comment "name: \"mynet\" id: \"ctr-one\"" -j MASQUERADE
COMMIT
"#;

    fn ip(s: &str) -> IpNetwork {
        s.parse().unwrap()
    }

    /// A new, empty network namespace of the test's own, alive as long as
    /// the returned handle is.
    fn fresh_netns() -> crate::netns::NetNs {
        std::thread::spawn(|| {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            crate::netns::NetNs::current_thread().unwrap()
        })
        .join()
        .unwrap()
    }

    fn parse(text: &str) -> NatTable {
        NatTable::from_saved(SavedTable::parse(text, "nat").unwrap())
    }

    /// The restore lines of `changes`, without the table's frame.
    fn lines_of(changes: Vec<Change>) -> Vec<String> {
        let script = restore_script(&changes).render().unwrap();
        let lines: Vec<&str> = script.lines().collect();
        assert_eq!(lines.first(), Some(&"*nat"));
        assert_eq!(lines.last(), Some(&"COMMIT"));
        lines[1..lines.len() - 1]
            .iter()
            .map(|l| l.to_string())
            .collect()
    }

    #[test]
    fn parses_reference_save_output() {
        let table = parse(SAVED);
        assert!(table.chains.contains("CNI-682b5374add02da0403a30b6"));
        assert_eq!(table.rules.len(), 3);
        let jump = &table.rules[0];
        assert_eq!(jump.chain(), "POSTROUTING");
        assert_eq!(jump.spec.source, Some((false, ip("10.88.0.2/32"))));
        assert_eq!(
            jump.spec.comment.as_deref(),
            Some(r#"name: "mynet" id: "ctr-one""#)
        );
        assert_eq!(
            table.rules[2].spec.destination,
            Some((true, ip("224.0.0.0/4")))
        );
        assert!(!table.rules.iter().any(|r| r.spec.other));
    }

    #[test]
    fn rendered_rules_read_back_identically() {
        let table = parse(SAVED);
        for rule in &table.rules {
            assert_eq!(join_args(&rule.spec.args()), rule.saved.text);
            assert_eq!(rule.spec.args(), rule.saved.args);
        }
    }

    #[test]
    fn teardown_of_one_address_keeps_a_shared_chain() {
        let chain = "CNI-682b5374add02da0403a30b6";
        let mut text = SAVED.replace("COMMIT\n", "");
        text.push_str(&format!(
            "-A POSTROUTING -s 10.88.0.3/32 -m comment --comment \"x\" -j {chain}\nCOMMIT\n"
        ));
        let table = parse(&text);
        let ips = [ip("10.88.0.2/16")];
        let lines = lines_of(teardown_changes(&table, chain, Scope::Addresses(&ips)));
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].starts_with("-D POSTROUTING -s 10.88.0.2/32 "));
        // Without addresses, everything of the chain goes.
        let lines = lines_of(teardown_changes(&table, chain, Scope::Everything));
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert_eq!(lines[3], format!("-X {chain}"));
    }

    #[test]
    fn legacy_prefix_jump_is_torn_down() {
        let chain = "CNI-682b5374add02da0403a30b6";
        let text = SAVED.replace("-s 10.88.0.2/32", "-s 10.88.0.0/16");
        let table = parse(&text);
        let ips = [ip("10.88.0.2/16")];
        let lines = lines_of(teardown_changes(&table, chain, Scope::Addresses(&ips)));
        assert_eq!(lines.len(), 3, "{lines:?}");
    }

    #[test]
    fn gc_finds_only_verified_chains_of_the_network() {
        let table = parse(SAVED);
        let none = BTreeSet::new();
        assert_eq!(
            stale_chains(&table, "mynet", &none)
                .into_iter()
                .collect::<Vec<_>>(),
            vec!["CNI-682b5374add02da0403a30b6".to_string()]
        );
        assert!(stale_chains(&table, "othernet", &none).is_empty());
        let valid = BTreeSet::from(["ctr-one"]);
        assert!(stale_chains(&table, "mynet", &valid).is_empty());
        // A comment naming the network but a chain that is not the hash of
        // it is left alone.
        let forged = SAVED.replace("ctr-one", "ctr-two");
        assert!(stale_chains(&parse(&forged), "mynet", &none).is_empty());
    }

    #[test]
    fn go_unquote_inverts_go_quote() {
        for s in ["ctr-one", "a\"b\\c", "tab\t\u{1}\u{85}é", ""] {
            assert_eq!(go_unquote(&go_quote(s)).as_deref(), Some(s));
        }
        for bad in ["", "\"", "noquotes", "\"a\"b\"", "\"\\q\"", "\"\\x1\""] {
            assert_eq!(go_unquote(bad), None, "{bad}");
        }
    }

    type Step<'a> = dyn Fn(&Tools) -> Result<(), IpMasqError> + Sync + 'a;

    /// What `iptables-save -t nat` prints, without its dated comments.
    fn saved_text(tools: &Tools) -> String {
        tools
            .programs
            .save("nat")
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| format!("{l}\n"))
            .collect()
    }

    /// Every rule of the table as the kernel keeps it: chain and raw
    /// expressions, in order (handles differ between namespaces).
    fn kernel_rules(family: IpFamily) -> Vec<(String, Vec<u8>)> {
        let mut socket = crate::nftables::NfTablesSocket::open().unwrap();
        let mut rules: Vec<(String, Vec<u8>)> = socket
            .list_rules(family.into(), "nat", None)
            .unwrap()
            .into_iter()
            .map(|r| (r.chain.clone(), r.raw_expressions().to_vec()))
            .collect();
        // Chains list in creation order, which may differ; rules within a
        // chain keep theirs.
        rules.sort_by(|a, b| a.0.cmp(&b.0));
        rules
    }

    /// The netlink writer leaves exactly what iptables-nft's own
    /// `iptables-restore` leaves: the same expressions byte for byte and
    /// the same `iptables-save` text, for ADD of two addresses, then DEL
    /// of one and of the other; and each reads the other's rules.
    #[test]
    fn netlink_writer_writes_what_iptables_nft_writes() {
        assert!(
            crate::nftables::iptables_nft::is_iptables_nft("iptables-save"),
            "this test needs iptables-nft as iptables (Debian's default)"
        );
        for family in IpFamily::ALL {
            let tools = Tools::of(family);
            let ips = match family {
                IpFamily::V4 => [ip("10.9.0.2/24"), ip("10.9.0.3/24")],
                IpFamily::V6 => [ip("fd00:9::2/64"), ip("fd00:9::3/64")],
            };
            let programs = tools.clone().with_writer(Writer::Programs);
            let netlink = tools.clone().with_writer(Writer::Netlink);
            let in_programs = fresh_netns();
            let in_netlink = fresh_netns();
            let state = |netns: &crate::netns::NetNs| {
                netns
                    .run(|| (saved_text(&programs), kernel_rules(family)))
                    .unwrap()
            };
            let steps: [&Step<'_>; 3] = [
                &|t| setup_family(t, "mynet", "ctr-one", &ips),
                &|t| teardown_family(t, "mynet", "ctr-one", Scope::Addresses(&ips[..1])),
                &|t| teardown_family(t, "mynet", "ctr-one", Scope::Addresses(&ips[1..])),
            ];
            for (n, step) in steps.iter().enumerate() {
                in_programs.run(|| step(&programs)).unwrap().unwrap();
                in_netlink.run(|| step(&netlink)).unwrap().unwrap();
                let (text_p, rules_p) = state(&in_programs);
                let (text_n, rules_n) = state(&in_netlink);
                assert_eq!(text_n, text_p, "{family} step {n}");
                assert_eq!(rules_n, rules_p, "{family} step {n}");
                if n == 0 {
                    assert!(text_n.contains("-j MASQUERADE"), "{text_n}");
                    // One ACCEPT and one MASQUERADE for the shared subnet,
                    // one jump per address.
                    assert_eq!(rules_n.len(), 4, "{text_n}");
                    // Each reads the other's rules as its own.
                    let chain = iptables_chain("mynet", "ctr-one");
                    let read_p = in_programs
                        .run(|| netlink.read_nat(Some(&chain)))
                        .unwrap()
                        .unwrap();
                    let read_n = in_netlink.run(|| programs.read_nat(None)).unwrap().unwrap();
                    for table in [&read_p, &read_n] {
                        let ours = table.rules.iter().filter(|r| !r.spec.other).count();
                        assert_eq!(ours, 4, "{table:?}");
                    }
                }
            }
            let (text_n, rules_n) = state(&in_netlink);
            assert!(rules_n.is_empty(), "{text_n}");
            assert!(!text_n.contains("CNI-"), "{text_n}");
        }
    }

    /// A held xtables lock makes the restore give up after the bounded
    /// wait, with "try again later". Legacy iptables (which takes the lock;
    /// iptables-nft does not) with its lock file moved into a temporary
    /// directory, in a test namespace.
    #[test]
    fn lock_timeout_is_reported_as_try_again_later() {
        use crate::error::ToCniError;
        use nix::fcntl::{Flock, FlockArg};

        let dir = tempfile::tempdir().unwrap();
        let lock_path = dir.path().join("xtables.lock");
        let lock_file = std::fs::File::create(&lock_path).unwrap();
        let tools = Tools::of(IpFamily::V4).with_programs(
            Programs::of(IpFamily::V4)
                .with_names("iptables-legacy-save", "iptables-legacy-restore")
                .with_env("XTABLES_LOCKFILE", &lock_path.display().to_string())
                .with_lock_wait_seconds(1),
        );
        let netns = fresh_netns();
        let ips = [ip("10.9.0.2/24")];

        let held = Flock::lock(lock_file, FlockArg::LockExclusiveNonblock).unwrap();
        let err = netns
            .run(|| setup_family(&tools, "net", "ctr", &ips))
            .unwrap()
            .unwrap_err();
        assert!(
            matches!(
                err,
                IpMasqError::Iptables(CommandError::XtablesLock { seconds: 1, .. })
            ),
            "{err}"
        );
        assert_eq!(err.to_cni_error().code, crate::ErrorCode::TryAgainLater);

        // Released, the same call goes through.
        drop(held);
        netns
            .run(|| setup_family(&tools, "net", "ctr", &ips))
            .unwrap()
            .unwrap();
        let table = netns.run(|| tools.read_nat(None)).unwrap().unwrap();
        assert!(table.chains.contains(&iptables_chain("net", "ctr")));
    }

    #[test]
    fn unusable_iptables_is_ignored_by_teardown_but_restore_failures_are_not() {
        let missing = Tools::of(IpFamily::V4).with_programs(Programs::of(IpFamily::V4).with_names(
            "/nonexistent/iptables-save",
            "/nonexistent/iptables-restore",
        ));
        let mut errors = Vec::new();
        let err = teardown_family(&missing, "net", "ctr", Scope::Everything).unwrap_err();
        keep_unless_unusable(&missing, err, &mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        let failed_restore = IpMasqError::Iptables(CommandError::Failed {
            program: missing.programs.restore_name().to_string(),
            status: std::os::unix::process::ExitStatusExt::from_raw(1 << 8),
            stderr: "iptables-restore: line 2 failed".into(),
        });
        keep_unless_unusable(&missing, failed_restore, &mut errors);
        assert_eq!(errors.len(), 1);
    }

    #[test]
    fn masq_chain_names() {
        assert!(is_masq_chain_name("CNI-682b5374add02da0403a30b6"));
        assert!(!is_masq_chain_name("CNI-DN-bfd599665540dd91d5d28"));
        assert!(!is_masq_chain_name("CNI-HOSTPORT-DNAT"));
        assert!(!is_masq_chain_name("POSTROUTING"));
    }
}
