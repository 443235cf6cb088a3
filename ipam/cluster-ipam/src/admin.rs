//! The operator command's logic (`cluster-ipam-admin`): run by a person,
//! never by a runtime. It reads the etcd settings from the network's own
//! configuration file, so it reaches etcd exactly as the plugin does.
//!
//! - `show`: the pool's grid, every block with its owner, the addresses
//!   reserved one by one, and each node's last report (leases, blocks,
//!   when). Usage per node is what the node reported when it last talked
//!   to etcd (block claims and GC); an ADD inside a node's blocks does not
//!   reach etcd, so counts can be older than the node's disk.
//!   Each node's last sign of life: alive (its heartbeat's lease is held,
//!   [`crate::liveness`]) since when, or silent since its last report.
//! - `release-node NODE`: deletes the blocks (and reservations and report)
//!   of a node that is gone, so other nodes can claim them. Refused while
//!   the node is alive, even with `--force` (it would keep handing out
//!   addresses another node may then claim); refused while the node's
//!   report shows leases or it holds reservations, unless `--force`.
//! - `reclaimable --silent-for PERIOD`: the blocks of nodes not alive and
//!   silent (no report) for longer than PERIOD, to release.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

use crate::config::ClusterConfig;
use crate::error::Error;
use crate::etcd::{BlockValue, Etcd, IpValue, NodeReport};
use crate::keys;
use crate::liveness::AliveValue;

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not JSON: {source}")]
    Json {
        path: String,
        source: serde_json::Error,
    },
    #[error("{0} has no plugin with an ipam of type cluster-ipam")]
    NoClusterIpam(String),
    #[error(transparent)]
    Plugin(#[from] Error),
    #[error("node {node} still holds {leases} lease(s) and {reservations} reservation(s) by its last report ({age}); release with --force only if the node is gone for good")]
    NodeBusy {
        node: String,
        leases: u64,
        reservations: usize,
        age: String,
    },
    #[error("node {0} holds nothing in this pool")]
    UnknownNode(String),
    #[error("node {node} is alive: its heartbeat has kept its liveness lease (TTL {ttl} s) since {since}; \
             release it only once its agent is stopped and the lease has expired (even --force does not release a live node)")]
    NodeAlive {
        node: String,
        since: String,
        ttl: u64,
    },
}

/// The network configuration the plugin would get, from a `.conf` or
/// `.conflist` file naming cluster-ipam.
pub fn load_network(path: &Path) -> Result<ClusterConfig, AdminError> {
    let shown = path.display().to_string();
    let text = std::fs::read(path).map_err(|source| AdminError::Read {
        path: shown.clone(),
        source,
    })?;
    let conf: Value = serde_json::from_slice(&text).map_err(|source| AdminError::Json {
        path: shown.clone(),
        source,
    })?;
    let is_ours = |plugin: &Value| {
        plugin
            .get("ipam")
            .and_then(|i| i.get("type"))
            .and_then(Value::as_str)
            == Some("cluster-ipam")
    };
    let net = match conf.get("plugins").and_then(Value::as_array) {
        Some(plugins) => {
            let mut plugin = plugins
                .iter()
                .find(|p| is_ours(p))
                .cloned()
                .ok_or_else(|| AdminError::NoClusterIpam(shown.clone()))?;
            if let (Some(obj), Some(name)) = (plugin.as_object_mut(), conf.get("name")) {
                obj.insert("name".into(), name.clone());
            }
            plugin
        }
        None if is_ours(&conf) => conf,
        None => return Err(AdminError::NoClusterIpam(shown)),
    };
    ClusterConfig::from_value(&net).map_err(|e| AdminError::Plugin(e.into()))
}

/// Everything etcd holds for one network, decoded.
#[derive(Debug, Default)]
pub struct PoolView {
    pub grid: Option<String>,
    /// Block -> (owner, create revision).
    pub blocks: BTreeMap<String, (String, i64)>,
    pub ips: Vec<(String, IpValue)>,
    pub nodes: BTreeMap<String, (NodeReport, i64)>,
    /// Nodes known alive now: their liveness key.
    pub alive: BTreeMap<String, AliveValue>,
}

pub fn read_pool(etcd: &mut Etcd, cluster: &ClusterConfig) -> Result<PoolView, Error> {
    let keys = &cluster.keys;
    let mut view = PoolView::default();
    for (key, value, revision) in etcd.list(keys.root())? {
        let text = String::from_utf8_lossy(&value).into_owned();
        if key == keys.pool() {
            view.grid = Some(text);
        } else if let Some(block) = keys.parse_block(key.as_bytes()) {
            let owner = serde_json::from_slice::<BlockValue>(&value)
                .map(|v| v.node)
                .unwrap_or_else(|_| format!("<unreadable: {text}>"));
            view.blocks.insert(block.to_string(), (owner, revision));
        } else if let Some(ip) = keys.parse_ip(key.as_bytes()) {
            if let Ok(owner) = serde_json::from_slice::<IpValue>(&value) {
                view.ips.push((ip.to_string(), owner));
            }
        } else if let Some(node) = key.strip_prefix(&keys.alive_prefix()) {
            if let Ok(alive) = serde_json::from_slice::<AliveValue>(&value) {
                view.alive.insert(node.to_string(), alive);
            }
        } else if let Some(node) = key.strip_prefix(&keys.nodes()) {
            if let Ok(report) = serde_json::from_slice::<NodeReport>(&value) {
                view.nodes.insert(node.to_string(), (report, revision));
            }
        }
    }
    Ok(view)
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn age(updated: u64) -> String {
    format!("{} s ago", now_secs().saturating_sub(updated))
}

/// A node's last sign of life, for people.
pub fn sign_of_life(view: &PoolView, node: &str) -> String {
    if let Some(alive) = view.alive.get(node) {
        return format!("alive since {}", age(alive.since));
    }
    match view.nodes.get(node) {
        Some((report, _)) => format!("silent, last seen {}", age(report.updated)),
        None => "no sign of life".to_string(),
    }
}

/// `show`, as text for a person.
pub fn render(cluster: &ClusterConfig, view: &PoolView) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "network {} (keys under {})",
        cluster.store.network,
        cluster.keys.root()
    );
    let _ = writeln!(
        out,
        "grid: {}",
        view.grid
            .as_deref()
            .unwrap_or("not written yet (no block claimed)")
    );
    let mut per_node: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (block, (owner, _)) in &view.blocks {
        per_node
            .entry(owner.as_str())
            .or_default()
            .push(block.as_str());
    }
    for node in view.nodes.keys() {
        per_node.entry(node.as_str()).or_default();
    }
    for node in view.alive.keys() {
        per_node.entry(node.as_str()).or_default();
    }
    let _ = writeln!(
        out,
        "{:<24} {:>6} {:>7} {:>9}  {:<32} blocks",
        "NODE", "BLOCKS", "LEASES", "REPORTED", "LAST SIGN OF LIFE"
    );
    for (node, node_blocks) in &per_node {
        let (leases, reported) = match view.nodes.get(*node) {
            Some((report, _)) => (report.leases.to_string(), age(report.updated)),
            None => ("?".to_string(), "never".to_string()),
        };
        let _ = writeln!(
            out,
            "{node:<24} {:>6} {leases:>7} {reported:>9}  {:<32} {}",
            node_blocks.len(),
            sign_of_life(view, node),
            node_blocks.join(" ")
        );
    }
    if !view.ips.is_empty() {
        let _ = writeln!(out, "reserved addresses:");
        for (ip, owner) in &view.ips {
            let _ = writeln!(
                out,
                "  {ip:<40} node {} container {} {}",
                owner.node, owner.container_id, owner.ifname
            );
        }
    }
    out
}

/// What `release-node` deleted.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Released {
    pub blocks: Vec<String>,
    pub reservations: Vec<String>,
}

pub fn release_node(
    etcd: &mut Etcd,
    cluster: &ClusterConfig,
    node: &str,
    force: bool,
) -> Result<Released, AdminError> {
    keys::check_node(node).map_err(|e| AdminError::Plugin(Error::Config(e.into())))?;
    let view = read_pool(etcd, cluster)?;
    let blocks: Vec<(&String, i64)> = view
        .blocks
        .iter()
        .filter(|(_, (owner, _))| owner == node)
        .map(|(block, (_, rev))| (block, *rev))
        .collect();
    let reservations: Vec<&(String, IpValue)> =
        view.ips.iter().filter(|(_, o)| o.node == node).collect();
    let report = view.nodes.get(node);
    if blocks.is_empty() && reservations.is_empty() && report.is_none() {
        return Err(AdminError::UnknownNode(node.to_string()));
    }
    if let Some(alive) = view.alive.get(node) {
        return Err(AdminError::NodeAlive {
            node: node.to_string(),
            since: format!("{} ({})", alive.since, age(alive.since)),
            ttl: alive.ttl,
        });
    }
    let leases = report.map_or(0, |(r, _)| r.leases);
    if !force && (leases > 0 || !reservations.is_empty()) {
        return Err(AdminError::NodeBusy {
            node: node.to_string(),
            leases,
            reservations: reservations.len(),
            age: report.map_or_else(|| "never reported".into(), |(r, _)| age(r.updated)),
        });
    }
    let keys = &cluster.keys;
    let mut released = Released::default();
    for (block, revision) in blocks {
        let key = format!("{}{block}", keys.blocks());
        if etcd.delete_if(&key, revision).map_err(Error::from)? {
            released.blocks.push(block.clone());
        }
    }
    for (ip, _) in reservations {
        if let Ok(addr) = ip.parse() {
            let key = keys.ip(addr);
            let revision = etcd
                .list(&key)
                .map_err(Error::from)?
                .into_iter()
                .find(|(k, _, _)| *k == key)
                .map(|(_, _, rev)| rev);
            if let Some(revision) = revision {
                if etcd.delete_if(&key, revision).map_err(Error::from)? {
                    released.reservations.push(ip.clone());
                }
            }
        }
    }
    if let Some((_, revision)) = report {
        etcd.delete_if(&keys.node(node), *revision)
            .map_err(Error::from)?;
    }
    Ok(released)
}

/// A node whose blocks may be released: not alive, silent this long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reclaimable {
    pub node: String,
    /// Seconds since its last report.
    pub silent_for: u64,
    pub blocks: Vec<String>,
}

/// The nodes holding blocks that are not alive and have not reported for
/// longer than `silent_for` seconds. Nodes that never reported are not
/// listed: nothing tells how long they have been silent.
pub fn reclaimable(view: &PoolView, silent_for: u64) -> Vec<Reclaimable> {
    let now = now_secs();
    let mut out: Vec<Reclaimable> = Vec::new();
    for (node, (report, _)) in &view.nodes {
        let silent = now.saturating_sub(report.updated);
        if view.alive.contains_key(node) || silent <= silent_for {
            continue;
        }
        let blocks: Vec<String> = view
            .blocks
            .iter()
            .filter(|(_, (owner, _))| owner == node)
            .map(|(block, _)| block.clone())
            .collect();
        if !blocks.is_empty() {
            out.push(Reclaimable {
                node: node.clone(),
                silent_for: silent,
                blocks,
            });
        }
    }
    out
}

/// `reclaimable`, as text for a person.
pub fn render_reclaimable(list: &[Reclaimable], silent_for: u64) -> String {
    let mut out = String::new();
    if list.is_empty() {
        let _ = writeln!(
            out,
            "no node silent for more than {silent_for} s holds blocks"
        );
    }
    for r in list {
        let _ = writeln!(
            out,
            "reclaimable: node {} silent for {} s: {} block(s) {} (cluster-ipam-admin release-node {})",
            r.node,
            r.silent_for,
            r.blocks.len(),
            r.blocks.join(" "),
            r.node
        );
    }
    out
}

/// A period: seconds, or a number with `s`, `m`, `h` or `d`.
pub fn parse_period(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (number, unit) = match text.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&text[..i], c),
        _ => (text, 's'),
    };
    let scale = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => return Err(format!("{text:?}: the unit must be s, m, h or d")),
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("{text:?} is not a period such as 600, 10m, 2h or 1d"))
}

#[cfg(test)]
mod period_tests {
    use super::parse_period;

    #[test]
    fn periods() {
        assert_eq!(parse_period("600"), Ok(600));
        assert_eq!(parse_period("90s"), Ok(90));
        assert_eq!(parse_period("10m"), Ok(600));
        assert_eq!(parse_period("2h"), Ok(7200));
        assert_eq!(parse_period("1d"), Ok(86_400));
        for bad in ["", "m", "-1", "1.5h", "3w", "99999999999999999999d"] {
            assert!(parse_period(bad).is_err(), "{bad:?}");
        }
    }
}
