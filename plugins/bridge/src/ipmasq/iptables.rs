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
//! `iptables-restore --noflush`, which is atomic and waits a bounded time
//! for the xtables lock. Reading first makes ADD idempotent (no duplicate
//! rules) and lets DEL delete exactly the rules that exist.

mod nft;

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command, Stdio};

use ipnetwork::IpNetwork;
use libcni::plugin_conf::GcAttachment;

use super::names::{go_quote, iptables_chain, iptables_comment};
use super::IpMasqError;

/// Seconds `iptables-restore` waits for the xtables lock before giving up
/// (the reference waits forever).
pub const LOCK_WAIT_SECONDS: u32 = 10;

/// `iptables-restore` exits with this status when it could not get the lock.
const RESOURCE_PROBLEM: i32 = 4;

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
    save: String,
    restore: String,
    multicast: IpNetwork,
    /// Extra environment for both programs (tests point the xtables lock
    /// file elsewhere).
    env: Vec<(String, String)>,
    lock_wait_seconds: u32,
}

impl Tools {
    pub(crate) fn v4() -> Tools {
        Tools {
            writer: Writer::detect("iptables-save"),
            save: "iptables-save".into(),
            restore: "iptables-restore".into(),
            multicast: network([224, 0, 0, 0].into(), 4),
            env: Vec::new(),
            lock_wait_seconds: LOCK_WAIT_SECONDS,
        }
    }

    pub(crate) fn v6() -> Tools {
        Tools {
            writer: Writer::detect("ip6tables-save"),
            save: "ip6tables-save".into(),
            restore: "ip6tables-restore".into(),
            multicast: network([0xff00, 0, 0, 0, 0, 0, 0, 0].into(), 8),
            env: Vec::new(),
            lock_wait_seconds: LOCK_WAIT_SECONDS,
        }
    }

    #[cfg(test)]
    fn with_programs(
        mut self,
        save: &str,
        restore: &str,
        env: &[(&str, &str)],
        lock_wait_seconds: u32,
    ) -> Tools {
        self.save = save.into();
        self.restore = restore.into();
        self.env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.lock_wait_seconds = lock_wait_seconds;
        self.writer = Writer::Programs;
        self
    }

    /// The same tools with another writer (tests run both).
    #[cfg(test)]
    fn with_writer(mut self, writer: Writer) -> Tools {
        self.writer = writer;
        self
    }

    fn is_v4(&self) -> bool {
        self.multicast.is_ipv4()
    }

    /// The current `nat` table, or with the netlink writer what an
    /// operation on `chain` needs of it (see [`nft::read`]).
    pub(crate) fn read_nat(&self, chain: Option<&str>) -> Result<NatTable, IpMasqError> {
        if self.writer == Writer::Netlink {
            // Failing to read is failing to read, whichever way: the same
            // error as a failed `iptables-save`, which DEL and GC ignore.
            return nft::read(self.is_v4(), chain).map_err(|e| IpMasqError::Command {
                program: self.save.clone(),
                status: "over netlink".into(),
                stderr: e.to_string(),
            });
        }
        let out = self.run(&self.save, &["-t", "nat"], None)?;
        Ok(NatTable::parse(&out))
    }

    /// Whether iptables works here (the backend choice when none is
    /// configured): nf_tables answers, or `iptables-save` runs.
    pub(crate) fn usable(&self) -> bool {
        match self.writer {
            Writer::Netlink => libcni::nftables::NfTablesSocket::open()
                .and_then(|mut s| s.probe())
                .is_ok(),
            Writer::Programs => self.read_nat(None).is_ok(),
        }
    }

    /// Applies `changes` read from `table` at once.
    fn apply(&self, changes: &[Change], table: &NatTable) -> Result<(), IpMasqError> {
        if self.writer == Writer::Netlink {
            if let Some(batch) = nft::batch(changes, table, self.is_v4()) {
                log::debug!("{} nat: {} changes over netlink", self.save, changes.len());
                return nft::commit(batch);
            }
            log::debug!("a rule iptables-nft would refuse: running the programs");
        }
        let lines: Vec<String> = changes.iter().map(Change::restore_line).collect();
        self.restore(&lines)
    }

    /// Applies a restore script (without the `*nat`/`COMMIT` frame).
    fn restore(&self, lines: &[String]) -> Result<(), IpMasqError> {
        let mut script = String::from("*nat\n");
        for line in lines {
            script.push_str(line);
            script.push('\n');
        }
        script.push_str("COMMIT\n");
        log::debug!("{} --noflush:\n{script}", self.restore);
        let wait = self.lock_wait_seconds.to_string();
        self.run(
            &self.restore,
            &["--noflush", "-w", &wait],
            Some(script.as_bytes()),
        )
        .map(|_| ())
    }

    fn run(
        &self,
        program: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
    ) -> Result<String, IpMasqError> {
        // The child inherits the calling thread's network namespace.
        let mut child = Command::new(program)
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| IpMasqError::Spawn {
                program: program.to_string(),
                source,
            })?;
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            // A failed write shows up as the program's own error below.
            let _ = pipe.write_all(input);
        }
        let out = child
            .wait_with_output()
            .map_err(|source| IpMasqError::Spawn {
                program: program.to_string(),
                source,
            })?;
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        if out.status.success() {
            return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
        }
        if out.status.code() == Some(RESOURCE_PROBLEM) && stderr.contains("xtables lock") {
            return Err(IpMasqError::XtablesLock {
                program: program.to_string(),
                seconds: self.lock_wait_seconds,
            });
        }
        Err(IpMasqError::Command {
            program: program.to_string(),
            status: out.status.to_string(),
            stderr,
        })
    }
}

impl Writer {
    /// Netlink where `program` is iptables-nft, else the programs.
    fn detect(program: &str) -> Writer {
        if libcni::nftables::iptables_nft::is_iptables_nft(program) {
            Writer::Netlink
        } else {
            Writer::Programs
        }
    }
}

/// One change to the `nat` table.
#[derive(Debug, Clone)]
pub(crate) enum Change {
    NewChain(String),
    Append { chain: String, spec: RuleSpec },
    Delete(SavedRule),
    Flush(String),
    DeleteChain(String),
}

impl Change {
    /// The change as an `iptables-restore` line.
    fn restore_line(&self) -> String {
        match self {
            Change::NewChain(chain) => format!(":{chain} - [0:0]"),
            Change::Append { chain, spec } => format!("-A {chain} {}", spec.render()),
            Change::Delete(rule) => format!("-D {}", rule.text),
            Change::Flush(chain) => format!("-F {chain}"),
            Change::DeleteChain(chain) => format!("-X {chain}"),
        }
    }
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
    /// The rule in `iptables-save` syntax, after `-A <chain> `.
    fn render(&self) -> String {
        let mut parts = Vec::new();
        if let Some((neg, net)) = &self.source {
            parts.push(format!("{}-s {}", if *neg { "! " } else { "" }, net));
        }
        if let Some((neg, net)) = &self.destination {
            parts.push(format!("{}-d {}", if *neg { "! " } else { "" }, net));
        }
        if let Some(comment) = &self.comment {
            parts.push(format!("-m comment --comment {}", restore_quote(comment)));
        }
        if let Some(target) = &self.target {
            parts.push(format!("-j {target}"));
        }
        parts.join(" ")
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

/// A rule as listed by `iptables-save`.
#[derive(Debug, Clone)]
pub(crate) struct SavedRule {
    chain: String,
    /// The text after `-A `, which `-D ` takes back verbatim.
    text: String,
    spec: RuleSpec,
    /// The nf_tables handle, when read over netlink.
    handle: Option<u64>,
}

/// The `nat` table as `iptables-save -t nat` prints it.
#[derive(Debug, Clone, Default)]
pub(crate) struct NatTable {
    chains: BTreeSet<String>,
    rules: Vec<SavedRule>,
}

impl NatTable {
    pub(crate) fn parse(text: &str) -> NatTable {
        let mut table = NatTable::default();
        for line in text.lines() {
            if let Some(decl) = line.strip_prefix(':') {
                if let Some(name) = decl.split_whitespace().next() {
                    table.chains.insert(name.to_string());
                }
            } else if let Some(rest) = line.strip_prefix("-A ") {
                let tokens = tokenize(rest);
                let Some((chain, args)) = tokens.split_first() else {
                    continue;
                };
                table.rules.push(SavedRule {
                    chain: chain.clone(),
                    text: rest.to_string(),
                    spec: RuleSpec::parse(args),
                    handle: None,
                });
            }
        }
        table
    }

    fn has_rule(&self, chain: &str, spec: &RuleSpec) -> bool {
        self.rules
            .iter()
            .any(|r| r.chain == chain && r.spec == *spec && !r.spec.other)
    }

    /// Rules anywhere in the table that jump to `chain`.
    fn references<'a>(&'a self, chain: &'a str) -> impl Iterator<Item = &'a SavedRule> {
        self.rules
            .iter()
            .filter(move |r| r.spec.target.as_deref() == Some(chain))
    }
}

/// Splits a rule the way `iptables-restore` does: on blanks, with double
/// quotes grouping and a backslash escaping the next character inside them.
fn tokenize(line: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut current = String::new();
    let mut in_token = false;
    let mut quoted = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' if quoted => {
                if let Some(next) = chars.next() {
                    current.push(next);
                }
            }
            '"' => {
                quoted = !quoted;
                in_token = true;
            }
            c if c.is_whitespace() && !quoted => {
                if in_token {
                    tokens.push(std::mem::take(&mut current));
                    in_token = false;
                }
            }
            c => {
                current.push(c);
                in_token = true;
            }
        }
    }
    if in_token {
        tokens.push(current);
    }
    tokens
}

/// Quotes an argument for `iptables-restore` (the inverse of [`tokenize`]).
fn restore_quote(arg: &str) -> String {
    let mut out = String::from("\"");
    for c in arg.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
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
    for tools in [Tools::v4(), Tools::v6()] {
        let family: Vec<IpNetwork> = ips
            .iter()
            .filter(|ip| ip.is_ipv4() == tools.is_v4())
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
                        destination: Some((true, tools.multicast)),
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
                    table.rules.push(SavedRule {
                        chain: in_chain.to_string(),
                        text: format!("{in_chain} {}", spec.render()),
                        spec: spec.clone(),
                        handle: None,
                    });
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
    for tools in [Tools::v4(), Tools::v6()] {
        let family: Vec<IpNetwork> = ips
            .iter()
            .filter(|ip| ip.is_ipv4() == tools.is_v4())
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
    let unusable = match &error {
        IpMasqError::Spawn { program, .. } | IpMasqError::Command { program, .. } => {
            *program == tools.save
        }
        _ => false,
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
    for tools in [Tools::v4(), Tools::v6()] {
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
        if !is_masq_chain_name(&rule.chain) {
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
        if iptables_chain(network, &container_id) != rule.chain
            || iptables_comment(network, &container_id)
                != rule.spec.comment.as_deref().unwrap_or_default()
        {
            continue;
        }
        if !valid_ids.contains(container_id.as_str()) {
            stale.insert(rule.chain.clone());
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

    fn lines_of(changes: Vec<Change>) -> Vec<String> {
        changes.iter().map(Change::restore_line).collect()
    }

    #[test]
    fn parses_reference_save_output() {
        let table = NatTable::parse(SAVED);
        assert!(table.chains.contains("CNI-682b5374add02da0403a30b6"));
        assert_eq!(table.rules.len(), 3);
        let jump = &table.rules[0];
        assert_eq!(jump.chain, "POSTROUTING");
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
        let table = NatTable::parse(SAVED);
        for rule in &table.rules {
            assert_eq!(format!("{} {}", rule.chain, rule.spec.render()), rule.text);
        }
    }

    #[test]
    fn quoting_round_trips_through_the_tokenizer() {
        for s in [r#"name: "a\"b\\c" id: "x""#, "plain", "", "two  spaces"] {
            let quoted = restore_quote(s);
            assert_eq!(tokenize(&quoted), vec![s.to_string()]);
        }
    }

    #[test]
    fn teardown_of_one_address_keeps_a_shared_chain() {
        let chain = "CNI-682b5374add02da0403a30b6";
        let mut text = SAVED.replace("COMMIT\n", "");
        text.push_str(&format!(
            "-A POSTROUTING -s 10.88.0.3/32 -m comment --comment \"x\" -j {chain}\nCOMMIT\n"
        ));
        let table = NatTable::parse(&text);
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
        let table = NatTable::parse(&text);
        let ips = [ip("10.88.0.2/16")];
        let lines = lines_of(teardown_changes(&table, chain, Scope::Addresses(&ips)));
        assert_eq!(lines.len(), 3, "{lines:?}");
    }

    #[test]
    fn gc_finds_only_verified_chains_of_the_network() {
        let table = NatTable::parse(SAVED);
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
        assert!(stale_chains(&NatTable::parse(&forged), "mynet", &none).is_empty());
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
        let out = std::process::Command::new(&tools.save)
            .args(["-t", "nat"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| format!("{l}\n"))
            .collect()
    }

    /// Every rule of the table as the kernel keeps it: chain and raw
    /// expressions, in order (handles differ between namespaces).
    fn kernel_rules(v4: bool) -> Vec<(String, Vec<u8>)> {
        let family = if v4 {
            libcni::nftables::Family::Ip
        } else {
            libcni::nftables::Family::Ip6
        };
        let mut socket = libcni::nftables::NfTablesSocket::open().unwrap();
        let mut rules: Vec<(String, Vec<u8>)> = socket
            .list_rules(family, "nat", None)
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
            libcni::nftables::iptables_nft::is_iptables_nft("iptables-save"),
            "this test needs iptables-nft as iptables (Debian's default)"
        );
        for v4 in [true, false] {
            let (tools, ips) = if v4 {
                (Tools::v4(), [ip("10.9.0.2/24"), ip("10.9.0.3/24")])
            } else {
                (Tools::v6(), [ip("fd00:9::2/64"), ip("fd00:9::3/64")])
            };
            let programs = tools.clone().with_writer(Writer::Programs);
            let netlink = tools.clone().with_writer(Writer::Netlink);
            let ns_programs = conformance::testnet::TestNetns::new("iptprog");
            let ns_netlink = conformance::testnet::TestNetns::new("iptnl");
            let in_programs = libcni::netns::NetNs::open(ns_programs.path()).unwrap();
            let in_netlink = libcni::netns::NetNs::open(ns_netlink.path()).unwrap();
            let state = |netns: &libcni::netns::NetNs| {
                netns
                    .run(|| (saved_text(&programs), kernel_rules(v4)))
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
                assert_eq!(text_n, text_p, "v4={v4} step {n}");
                assert_eq!(rules_n, rules_p, "v4={v4} step {n}");
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
        use libcni::error::ToCniError;
        use nix::fcntl::{Flock, FlockArg};

        let dir = tempfile::tempdir().unwrap();
        let lock_path = dir.path().join("xtables.lock");
        let lock_file = std::fs::File::create(&lock_path).unwrap();
        let lock_env = lock_path.display().to_string();
        let tools = Tools::v4().with_programs(
            "iptables-legacy-save",
            "iptables-legacy-restore",
            &[("XTABLES_LOCKFILE", &lock_env)],
            1,
        );
        let ns = conformance::testnet::TestNetns::new("iptlock");
        let netns = libcni::netns::NetNs::open(ns.path()).unwrap();
        let ips = [ip("10.9.0.2/24")];

        let held = Flock::lock(lock_file, FlockArg::LockExclusiveNonblock).unwrap();
        let err = netns
            .run(|| setup_family(&tools, "net", "ctr", &ips))
            .unwrap()
            .unwrap_err();
        assert!(
            matches!(err, IpMasqError::XtablesLock { seconds: 1, .. }),
            "{err}"
        );
        assert_eq!(err.to_cni_error().code, libcni::ErrorCode::TryAgainLater);

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
        let missing = Tools::v4().with_programs(
            "/nonexistent/iptables-save",
            "/nonexistent/iptables-restore",
            &[],
            1,
        );
        let mut errors = Vec::new();
        let err = teardown_family(&missing, "net", "ctr", Scope::Everything).unwrap_err();
        keep_unless_unusable(&missing, err, &mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        let failed_restore = IpMasqError::Command {
            program: missing.restore.clone(),
            status: "exit status: 1".into(),
            stderr: "iptables-restore: line 2 failed".into(),
        };
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
