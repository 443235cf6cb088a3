//! cluster-ipam against host-local, in the same plugin directory: an ADD
//! with room in the node's block (which should cost what host-local's
//! does: no etcd round trip), an ADD that has to claim a block from a
//! local three-member etcd cluster, many nodes claiming and allocating at
//! once, and the peak RSS of each kind of ADD.
//!
//! etcd runs as real members on loopback (the `etcd-cluster` harness), so
//! the group needs `/usr/bin/etcd`; without it the group is skipped.

use std::collections::HashSet;
use std::io::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use etcd_cluster::{ClusterOptions, EtcdCluster, HarnessError};
use serde_json::{json, Value};

use super::{Row, StateRoot};
use crate::measure::{run_ok, summarize, MeasureError, RunCost};
use crate::testnet::TestNetns;

/// Where the harness runs etcd from.
pub const ETCD: &str = "/usr/bin/etcd";
/// Members of the cluster: the smallest that has a quorum to keep when one
/// fails, so a claim pays for real replication as it would in production.
const MEMBERS: usize = 3;
/// The block of the in-block figures: 4096 addresses, so that no measured
/// ADD ever runs out of room and claims.
const ROOMY_BLOCK: u8 = 20;
/// The blocks of the claim figures: four addresses, so that each sample's
/// fresh node has none and its one ADD claims.
const CLAIM_BLOCK: u8 = 30;
/// The blocks of the many-nodes figures: 64 addresses, the plugin's
/// default, so that 50 pods fit in one block per node (62 usable in most).
const FLEET_BLOCK: u8 = 26;

#[derive(Debug, thiserror::Error)]
pub enum ClusterIpamError {
    #[error(transparent)]
    Measure(#[from] MeasureError),
    #[error("etcd: {0}")]
    Etcd(#[from] HarnessError),
    #[error("cannot create a state directory under {path}: {source}")]
    StateDir {
        path: String,
        source: std::io::Error,
    },
    #[error("{what} failed: {detail}")]
    Call { what: String, detail: String },
    #[error("{0}")]
    Unexpected(String),
}

/// How much of each figure to take.
#[derive(Debug, Clone, Copy)]
pub struct ClusterIpamRuns {
    /// ADD+DEL rounds per candidate inside a block.
    pub rounds: usize,
    /// ADDs that claim a block, each on a node of its own.
    pub claims: usize,
    /// Nodes adding pods at once, one thread each.
    pub nodes: usize,
    /// Pods each node adds, one after the other.
    pub pods_per_node: usize,
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct FleetFigures {
    pub nodes: usize,
    pub pods_per_node: usize,
    pub pool: String,
    pub block_size: u8,
    pub wall_s: f64,
    pub failures: usize,
    pub duplicate_ips: usize,
    /// Block keys in etcd once every pod is added.
    pub blocks_claimed: usize,
    /// DELs of the pods afterwards that failed.
    pub del_failures: usize,
    /// What the first failed call said, ADD or DEL.
    pub first_failure: Option<String>,
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ClusterIpamFigures {
    pub etcd_members: usize,
    /// Where the harness keeps etcd's data (its fsyncs are part of a claim).
    pub etcd_data_under: String,
    pub block_size: u8,
    /// [cluster-ipam, host-local] ADD times with room in the node's block, ms.
    pub in_block_add_ms: [Vec<f64>; 2],
    pub claim_block_size: u8,
    /// ADD times of ADDs that claim a block, ms.
    pub claim_add_ms: Vec<f64>,
    pub fleet: FleetFigures,
    /// Peak RSS, KiB: cluster-ipam ADD inside a block, cluster-ipam ADD
    /// that claims, host-local ADD.
    pub in_block_add_rss_kib: u64,
    pub claim_add_rss_kib: u64,
    pub host_local_add_rss_kib: u64,
}

/// Why the group cannot run here, if it cannot.
pub fn unavailable(ours_dir: &Path) -> Option<String> {
    if !Path::new(ETCD).exists() {
        return Some(format!("etcd is not installed at {ETCD}"));
    }
    ["cluster-ipam", "host-local"]
        .iter()
        .find(|p| !ours_dir.join(p).exists())
        .map(|p| format!("{p} is not built in {}", ours_dir.display()))
}

/// A directory of the run, removed when dropped: the nodes' stores must
/// go also when a measurement fails half way.
struct WorkDir(PathBuf);

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One plugin of one network on one node: binary, configuration and the
/// namespace named in `CNI_NETNS`.
struct Plugin<'a> {
    binary: PathBuf,
    stdin: Vec<u8>,
    netns: &'a str,
}

impl Plugin<'_> {
    fn env<'e>(&'e self, command: &'e str, cid: &'e str) -> [(&'e str, &'e str); 6] {
        [
            // The bench's lease folder is allowed by the tests' policy.
            (
                libcni::confine::POLICY_ENV,
                crate::testnet::scratch_policy()
                    .to_str()
                    .unwrap_or_default(),
            ),
            ("CNI_COMMAND", command),
            ("CNI_CONTAINERID", cid),
            ("CNI_NETNS", self.netns),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/nonexistent"),
        ]
    }

    /// A timed call (stdout and stderr dropped, as in the other groups).
    fn timed(&self, command: &str, cid: &str) -> Result<RunCost, MeasureError> {
        run_ok(&self.binary, &self.env(command, cid), &self.stdin)
    }

    /// An untimed call whose result is read: the addresses of an ADD, or
    /// the plugin's own error text when it fails.
    fn call(&self, command: &str, cid: &str) -> Result<Vec<IpAddr>, String> {
        let mut child = Command::new(&self.binary)
            .env_clear()
            .envs(self.env(command, cid))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.binary.display()))?;
        if let Some(mut input) = child.stdin.take() {
            let _ = input.write_all(&self.stdin);
        }
        let out = child
            .wait_with_output()
            .map_err(|e| format!("cannot wait for {}: {e}", self.binary.display()))?;
        if !out.status.success() {
            return Err(format!(
                "{} {command} {cid}: {} {}{}",
                self.binary.display(),
                out.status,
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let result: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        Ok(result["ips"]
            .as_array()
            .map(|ips| {
                ips.iter()
                    .filter_map(|i| i["address"].as_str()?.split('/').next()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default())
    }

    fn call_checked(&self, command: &str, cid: &str) -> Result<Vec<IpAddr>, ClusterIpamError> {
        self.call(command, cid)
            .map_err(|detail| ClusterIpamError::Call {
                what: format!("{command} {cid}"),
                detail,
            })
    }
}

/// The network configuration of cluster-ipam on node `node`.
fn cluster_conf(
    network: &str,
    subnet: &str,
    block_size: u8,
    node: &str,
    data_dir: &Path,
    endpoints: &[String],
) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "cniVersion": "1.0.0",
        "name": network,
        "ipam": {
            "type": "cluster-ipam",
            "ranges": [[{"subnet": subnet}]],
            "blockSize": block_size,
            "nodeName": node,
            "dataDir": data_dir,
            "etcd": {"endpoints": endpoints}
        }
    }))
    .unwrap_or_default()
}

fn host_local_conf(network: &str, subnet: &str, data_dir: &Path) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "cniVersion": "1.0.0",
        "name": network,
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": subnet}]],
            "dataDir": data_dir
        }
    }))
    .unwrap_or_default()
}

/// The blocks a node's record holds (`<dataDir>/<network>/cluster-blocks.json`).
fn node_blocks(data_dir: &Path, network: &str) -> usize {
    std::fs::read(data_dir.join(network).join("cluster-blocks.json"))
        .ok()
        .and_then(|text| serde_json::from_slice::<Value>(&text).ok())
        .and_then(|state| state["blocks"].as_array().map(Vec::len))
        .unwrap_or(0)
}

/// Starts the etcd cluster, runs the four measurements and reports them.
/// The namespace, the cluster (its `Drop` kills the members) and the
/// stores are dropped on every way out, errors and panics included.
pub fn measure(
    ours_dir: &Path,
    runs: ClusterIpamRuns,
    state: &StateRoot,
) -> Result<(ClusterIpamFigures, Vec<Row>), ClusterIpamError> {
    // Any namespace but our own will do: IPAM does not enter it, but the
    // skeleton refuses the caller's own, as a runtime never passes it.
    let pod = TestNetns::new("bench-cipam");
    let netns = pod.path().display().to_string();
    let dir = state
        .work_dir("cni-cipambench")
        .map_err(|source| ClusterIpamError::StateDir {
            path: state.dir.display().to_string(),
            source,
        })?;
    let work = WorkDir(dir);
    let etcd = EtcdCluster::start(MEMBERS, ClusterOptions::default())?;
    let endpoints = etcd.endpoints();
    let mut figs = ClusterIpamFigures {
        etcd_members: MEMBERS,
        etcd_data_under: std::env::temp_dir().display().to_string(),
        block_size: ROOMY_BLOCK,
        claim_block_size: CLAIM_BLOCK,
        ..ClusterIpamFigures::default()
    };
    in_block(
        &mut figs,
        ours_dir,
        &netns,
        &work.0,
        &endpoints,
        runs.rounds,
    )?;
    claims(
        &mut figs,
        ours_dir,
        &netns,
        &work.0,
        &endpoints,
        runs.claims,
    )?;
    let plugin = ours_dir.join("cluster-ipam");
    figs.fleet = fleet(&plugin, &netns, &work.0, &etcd, runs)?;
    let rows = rows(&figs);
    Ok((figs, rows))
}

/// Figure 1 (and the in-block and host-local RSS): both plugins get the
/// same range and a store under the same state root; cluster-ipam's node
/// claims its block with one untimed ADD first, then the two are
/// alternated run by run, each ADD of a fresh container followed by its
/// DEL, as in the host-local group.
fn in_block(
    figs: &mut ClusterIpamFigures,
    ours_dir: &Path,
    netns: &str,
    work: &Path,
    endpoints: &[String],
    rounds: usize,
) -> Result<(), ClusterIpamError> {
    const NETWORK: &str = "cipbench";
    const SUBNET: &str = "10.98.0.0/16";
    let cluster_dir = work.join("in-block-cluster");
    let sides = [
        Plugin {
            binary: ours_dir.join("cluster-ipam"),
            stdin: cluster_conf(
                NETWORK,
                SUBNET,
                ROOMY_BLOCK,
                "bench-node",
                &cluster_dir,
                endpoints,
            ),
            netns,
        },
        Plugin {
            binary: ours_dir.join("host-local"),
            stdin: host_local_conf(NETWORK, SUBNET, &work.join("in-block-host-local")),
            netns,
        },
    ];
    // The claim, and host-local's first store creation, stay untimed.
    for side in &sides {
        side.call_checked("ADD", "warm")?;
    }
    let mut rss = [0u64; 2];
    for round in 0..rounds {
        for k in 0..2 {
            let i = (round + k) % 2;
            let cid = format!("probe-{round}");
            let c = sides[i].timed("ADD", &cid)?;
            figs.in_block_add_ms[i].push(c.wall.as_secs_f64() * 1e3);
            rss[i] = rss[i].max(c.max_rss_kib);
            sides[i].timed("DEL", &cid)?;
        }
    }
    let held = node_blocks(&cluster_dir, NETWORK);
    if held != 1 {
        return Err(ClusterIpamError::Unexpected(format!(
            "the in-block node holds {held} blocks, not the 1 it claimed first: the figures include claims"
        )));
    }
    [figs.in_block_add_rss_kib, figs.host_local_add_rss_kib] = rss;
    Ok(())
}

/// Figure 2 (and the claim RSS): each sample is a node of its own, fresh
/// name and empty `dataDir`, whose one ADD therefore claims a block.
fn claims(
    figs: &mut ClusterIpamFigures,
    ours_dir: &Path,
    netns: &str,
    work: &Path,
    endpoints: &[String],
    samples: usize,
) -> Result<(), ClusterIpamError> {
    const NETWORK: &str = "cipclaim";
    for n in 0..samples {
        let node = format!("claim-{n}");
        let data_dir = work.join(&node);
        let plugin = Plugin {
            binary: ours_dir.join("cluster-ipam"),
            stdin: cluster_conf(
                NETWORK,
                "10.97.0.0/16",
                CLAIM_BLOCK,
                &node,
                &data_dir,
                endpoints,
            ),
            netns,
        };
        let c = plugin.timed("ADD", "c0")?;
        figs.claim_add_ms.push(c.wall.as_secs_f64() * 1e3);
        figs.claim_add_rss_kib = figs.claim_add_rss_kib.max(c.max_rss_kib);
    }
    Ok(())
}

/// Figure 3: `nodes` threads, each one node (its own name and `dataDir`)
/// adding its pods one after the other, all against the same pool at
/// once, as a cluster does when a deployment lands on every node. Every
/// address handed out is checked against all others; then every pod is
/// deleted again.
fn fleet(
    binary: &Path,
    netns: &str,
    work: &Path,
    etcd: &EtcdCluster,
    runs: ClusterIpamRuns,
) -> Result<FleetFigures, ClusterIpamError> {
    const NETWORK: &str = "cipfleet";
    const POOL: &str = "10.99.0.0/16";
    let endpoints = etcd.endpoints();
    let nodes: Vec<Plugin> = (0..runs.nodes)
        .map(|n| {
            let name = format!("fleet-{n}");
            let data_dir = work.join(&name);
            Plugin {
                binary: binary.to_path_buf(),
                stdin: cluster_conf(NETWORK, POOL, FLEET_BLOCK, &name, &data_dir, &endpoints),
                netns,
            }
        })
        .collect();
    let cid = |n: usize, k: usize| format!("pod-{n}-{k}");
    let seen: Mutex<HashSet<IpAddr>> = Mutex::new(HashSet::new());
    let failures = AtomicUsize::new(0);
    let duplicates = AtomicUsize::new(0);
    let first_failure: Mutex<Option<String>> = Mutex::new(None);
    let note = |what: String| {
        let mut first = first_failure.lock().unwrap_or_else(|e| e.into_inner());
        first.get_or_insert(what);
    };
    let start = Instant::now();
    std::thread::scope(|s| {
        for (n, node) in nodes.iter().enumerate() {
            let (seen, failures, duplicates, note) = (&seen, &failures, &duplicates, &note);
            s.spawn(move || {
                for k in 0..runs.pods_per_node {
                    match node.call("ADD", &cid(n, k)) {
                        Ok(ips) if !ips.is_empty() => {
                            let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                            for ip in ips {
                                if !seen.insert(ip) {
                                    duplicates.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        }
                        Ok(_) => {
                            failures.fetch_add(1, Ordering::Relaxed);
                            note(format!("ADD {}: no address in the result", cid(n, k)));
                        }
                        Err(e) => {
                            failures.fetch_add(1, Ordering::Relaxed);
                            note(e);
                        }
                    }
                }
            });
        }
    });
    let wall_s = start.elapsed().as_secs_f64();
    let blocks_claimed = etcd
        .etcdctl(&[
            "get",
            "--prefix",
            "--keys-only",
            &format!("/cluster-ipam/{NETWORK}/blocks/"),
        ])?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count();
    let del_failures = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for (n, node) in nodes.iter().enumerate() {
            let (del_failures, note) = (&del_failures, &note);
            s.spawn(move || {
                for k in 0..runs.pods_per_node {
                    if let Err(e) = node.call("DEL", &cid(n, k)) {
                        del_failures.fetch_add(1, Ordering::Relaxed);
                        note(e);
                    }
                }
            });
        }
    });
    Ok(FleetFigures {
        nodes: runs.nodes,
        pods_per_node: runs.pods_per_node,
        pool: POOL.to_string(),
        block_size: FLEET_BLOCK,
        wall_s,
        failures: failures.into_inner(),
        duplicate_ips: duplicates.into_inner(),
        blocks_claimed,
        del_failures: del_failures.into_inner(),
        first_failure: first_failure
            .into_inner()
            .unwrap_or_else(|e| e.into_inner()),
    })
}

fn rows(figs: &ClusterIpamFigures) -> Vec<Row> {
    let stats = |v: &[f64]| {
        summarize(
            &v.iter()
                .map(|m| Duration::from_secs_f64(m / 1e3))
                .collect::<Vec<_>>(),
        )
    };
    let [ours, host_local] = [
        stats(&figs.in_block_add_ms[0]),
        stats(&figs.in_block_add_ms[1]),
    ];
    let claim = stats(&figs.claim_add_ms);
    let f = &figs.fleet;
    let fleet = format!(
        "cluster-ipam {} nodes x {} pods at once (/{} blocks)",
        f.nodes, f.pods_per_node, f.block_size
    );
    let mib = |kib: u64| kib as f64 / 1024.0;
    vec![
        Row::new(
            format!(
                "cluster-ipam ADD inside a /{} block vs host-local ADD (median)",
                figs.block_size
            ),
            ours.median_ms,
            host_local.median_ms,
            "ms",
        )
        .with_target(1.2),
        Row::new(
            format!(
                "cluster-ipam ADD claiming a /{} block, {}-member etcd (median) vs host-local ADD",
                figs.claim_block_size, figs.etcd_members
            ),
            claim.median_ms,
            host_local.median_ms,
            "ms",
        ),
        Row::new(
            format!(
                "cluster-ipam ADD claiming a /{} block, {}-member etcd (p90) vs host-local ADD",
                figs.claim_block_size, figs.etcd_members
            ),
            claim.p90_ms,
            host_local.p90_ms,
            "ms",
        ),
        Row::alone(format!("{fleet}: wall time"), f.wall_s, "s"),
        Row::alone(format!("{fleet}: failures"), f.failures as f64, ""),
        Row::alone(
            format!("{fleet}: duplicate IPs"),
            f.duplicate_ips as f64,
            "",
        ),
        Row::alone(
            format!("{fleet}: blocks claimed"),
            f.blocks_claimed as f64,
            "",
        ),
        Row::alone(format!("{fleet}: DEL failures"), f.del_failures as f64, ""),
        Row::new(
            "cluster-ipam ADD peak RSS, inside a block vs host-local ADD",
            mib(figs.in_block_add_rss_kib),
            mib(figs.host_local_add_rss_kib),
            "MiB",
        ),
        Row::new(
            "cluster-ipam ADD peak RSS, claiming a block vs host-local ADD",
            mib(figs.claim_add_rss_kib),
            mib(figs.host_local_add_rss_kib),
            "MiB",
        ),
    ]
}
