//! Nodes known alive: a heartbeat that a long-running agent on the node
//! (`cni-node run`) keeps beating, one per cluster-ipam network.
//!
//! The heartbeat holds an etcd lease of `ttl` and the key
//! `<prefix>/<network>/alive/<node>` attached to it ([`crate::keys`]), so
//! the key exists exactly while the node is known alive; it also writes
//! the node's report (`nodes/<node>`: leases, blocks, `updated`) at its
//! first beat and then at most every [`REPORT_EVERY`], which is the node's
//! last sign of life once it falls silent. `cluster-ipam-admin` shows both,
//! refuses `release-node` while the key exists, and lists the blocks of
//! nodes silent for longer than an operator-given period as reclaimable.
//!
//! Whenever the heartbeat (re)creates its lease (its first beat, or a
//! beat finding the lease expired: the node was silent and an operator
//! may have released its blocks meanwhile), it reads the pool and moves
//! every block etcd no longer gives the node out of the node's record
//! (under the store lock, as the plugin does): those are never handed out
//! again, and STATUS says so while pods hold addresses in them. The plugin
//! does the same whenever it reads the pool (a block claim).

use std::net::IpAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use host_local::store::Store;
use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};

use crate::config::ClusterConfig;
use crate::error::Error;
use crate::etcd::{Etcd, EtcdError, NodeReport};
use crate::node_state::NodeState;
use crate::pool::PoolSession;

/// How often a beating node rewrites its report (its last sign of life
/// once silent): one etcd write a minute per node and network.
pub const REPORT_EVERY: Duration = Duration::from_secs(60);
/// The shortest lease etcd grants reliably (its minimum TTL is about
/// 1.5 election timeouts; shorter ones are raised by etcd anyway).
pub const MIN_TTL: Duration = Duration::from_secs(2);

/// Beside the leases (`<dataDir>/<network>/`): until when the node's
/// heartbeat last made sure of its lease, `{"until": <unix seconds>}`.
/// Written at every beat that reached etcd. An ADD that finds it past
/// (the heartbeat silent longer than its TTL: an operator may have
/// released the node's blocks since) reads the pool before handing out an
/// address ([`crate::pool::PoolSession::check_released_if_silent`]). No
/// file: no heartbeat runs for the node, nothing is checked.
pub const ALIVE_FILE: &str = "cluster-alive.json";

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct AliveFile {
    until: u64,
}

/// Whether the node's heartbeat has let its lease lapse (or its file is
/// unreadable): false when no heartbeat ever ran for the node.
pub fn heartbeat_lapsed(store_dir: &std::path::Path) -> bool {
    let path = store_dir.join(ALIVE_FILE);
    match std::fs::read(&path) {
        Ok(text) => {
            serde_json::from_slice::<AliveFile>(&text).map_or(true, |file| file.until <= now_secs())
        }
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
    }
}

/// The value of a liveness key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AliveValue {
    /// Unix seconds since which the current lease has been kept.
    pub since: u64,
    /// The lease's TTL in seconds.
    pub ttl: u64,
}

/// What one beat found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Beat {
    /// A new lease was made (first beat, or the old one had expired).
    pub new_lease: bool,
    /// Blocks found released in etcd and taken out of the node's record.
    pub released: Vec<IpNetwork>,
}

/// Keeps one node known alive in one cluster-ipam network.
///
/// ```no_run
/// # fn demo(conf: &serde_json::Value) -> Result<(), cluster_ipam::Error> {
/// use cluster_ipam::{config::ClusterConfig, liveness::NodeHeartbeat};
/// use std::time::Duration;
/// // The network's configuration as the plugin gets it (a conflist's
/// // plugin object with the network's "name"): same etcd, node, dataDir.
/// let cluster = ClusterConfig::from_value(conf)?;
/// let mut heartbeat = NodeHeartbeat::new(&cluster, Duration::from_secs(30))?;
/// loop {
///     if let Err(e) = heartbeat.beat() {
///         eprintln!("heartbeat: {e}"); // etcd away: the next beat tries again
///     }
///     std::thread::sleep(heartbeat.interval());
/// #   break;
/// }
/// heartbeat.stop(); // a clean shutdown: the node is shown silent at once
/// # Ok(()) }
/// ```
///
/// Call [`NodeHeartbeat::beat`] every [`NodeHeartbeat::interval`] (a third
/// of the TTL) from one thread; each beat is bounded by the network's
/// `etcd.timeoutMs`. A node whose beats stop is shown silent once its
/// lease expires (within `ttl` of the last beat that reached etcd).
/// Dropping the heartbeat leaves the lease to expire (as a crash does);
/// [`NodeHeartbeat::stop`] revokes it.
pub struct NodeHeartbeat {
    cluster: ClusterConfig,
    etcd: Etcd,
    ttl: Duration,
    lease: Option<i64>,
    last_report: Option<Instant>,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl NodeHeartbeat {
    /// A heartbeat for the node and network of `cluster` (as
    /// [`ClusterConfig::from_value`] reads a network configuration),
    /// with a lease of `ttl` (at least [`MIN_TTL`]; whole seconds).
    /// Nothing is sent before the first beat.
    pub fn new(cluster: &ClusterConfig, ttl: Duration) -> Result<NodeHeartbeat, Error> {
        Ok(NodeHeartbeat {
            cluster: cluster.clone(),
            etcd: Etcd::new(&cluster.etcd, &cluster.node)?,
            ttl: ttl.max(MIN_TTL),
            lease: None,
            last_report: None,
        })
    }

    /// How long to wait between beats: a third of the TTL, so one lost
    /// beat does not let the lease expire.
    pub fn interval(&self) -> Duration {
        self.ttl / 3
    }

    /// Refreshes the lease, or makes a new one (and then checks the
    /// node's blocks against the pool), and writes the report when due.
    pub fn beat(&mut self) -> Result<Beat, Error> {
        // The lease runs at least `ttl` from before the beat was sent.
        let started = now_secs();
        self.etcd.renew_deadline();
        let alive = match self.lease {
            Some(id) => self.etcd.keep_alive_once(id)?,
            None => false,
        };
        let mut beat = Beat {
            new_lease: !alive,
            released: Vec::new(),
        };
        if !alive {
            if self.lease.is_some() {
                log::warn!(
                    "network {}: node {}'s liveness lease had expired; making a new one",
                    self.cluster.store.network,
                    self.cluster.node
                );
            }
            self.lease = None;
            let ttl = i64::try_from(self.ttl.as_secs()).unwrap_or(i64::MAX);
            let id = self.etcd.grant(ttl)?;
            let value = AliveValue {
                since: now_secs(),
                ttl: self.ttl.as_secs(),
            };
            let text = serde_json::to_string(&value).unwrap_or_default();
            let key = self.cluster.keys.alive(&self.cluster.node);
            self.etcd.put_with_lease(&key, &text, id)?;
            self.lease = Some(id);
            beat.released = self.check_blocks()?;
            self.last_report = None;
        }
        self.mark_alive(started);
        if self
            .last_report
            .is_none_or(|at| at.elapsed() >= REPORT_EVERY)
        {
            self.report()?;
            self.last_report = Some(Instant::now());
        }
        Ok(beat)
    }

    /// Records locally until when the lease is sure to be held
    /// ([`ALIVE_FILE`]); only where the node serves the network.
    fn mark_alive(&self, started: u64) {
        let store_dir = self
            .cluster
            .store
            .data_dir
            .join(&self.cluster.store.network);
        if !store_dir.is_dir() {
            return;
        }
        let file = AliveFile {
            until: started + self.ttl.as_secs(),
        };
        let text = serde_json::to_vec(&file).unwrap_or_default();
        if let Err(e) = libcni::state_file::write_atomically(&store_dir.join(ALIVE_FILE), &text) {
            log::warn!(
                "cannot record the heartbeat in {}: {e}",
                store_dir.display()
            );
        }
    }

    /// Revokes the lease: the node is shown silent at once. On an error the
    /// lease expires by itself within its TTL.
    pub fn stop(mut self) -> Result<(), EtcdError> {
        match self.lease.take() {
            Some(id) => {
                self.etcd.renew_deadline();
                self.etcd.revoke(id)
            }
            None => Ok(()),
        }
    }

    /// Reads the pool and drops from the node's record the blocks etcd no
    /// longer gives it. Nothing to do on a node that never served the
    /// network.
    fn check_blocks(&mut self) -> Result<Vec<IpNetwork>, Error> {
        let store = &self.cluster.store;
        let Some(store) =
            Store::open_existing(&store.data_dir, &store.network, store.lock_timeout)?
        else {
            return Ok(Vec::new());
        };
        let mut session = PoolSession::open(&self.cluster, &store, self.cluster.store.range_sets)?;
        let snapshot = session.snapshot()?;
        let released = session.drop_released(&snapshot);
        if !released.is_empty() {
            session.save()?;
        }
        Ok(released)
    }

    /// The node's report: leases counted from the lease files (no lock:
    /// a count for people), blocks from the record.
    fn report(&mut self) -> Result<(), Error> {
        let store_dir = self
            .cluster
            .store
            .data_dir
            .join(&self.cluster.store.network);
        let leases = std::fs::read_dir(&store_dir)
            .map(|dir| {
                dir.filter_map(Result::ok)
                    .filter(|e| {
                        e.file_name()
                            .to_str()
                            .is_some_and(|n| n.parse::<IpAddr>().is_ok())
                    })
                    .count() as u64
            })
            .unwrap_or(0);
        let blocks = std::fs::read(NodeState::path(&store_dir))
            .ok()
            .and_then(|text| serde_json::from_slice::<NodeState>(&text).ok())
            .map_or(0, |state| state.blocks.len() as u64);
        let report = NodeReport {
            leases,
            blocks,
            updated: now_secs(),
        };
        Ok(self
            .etcd
            .report(&self.cluster.keys, &self.cluster.node, report)?)
    }
}
