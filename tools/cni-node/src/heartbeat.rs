//! cluster-ipam nodes known alive: for every cluster-ipam network in the
//! conflist folder, one [`NodeHeartbeat`] beaten at its own interval on a
//! thread of its own, so a long GC pass never lets a lease lapse.
//!
//! Networks that share an etcd pool (same endpoints, prefix, network name
//! and node) share one heartbeat: a lease per node and pool, not per file.
//! The folder is read again every rescan period; a pool that left the
//! folder has its heartbeat stopped (the lease revoked). On SIGTERM every
//! heartbeat is stopped, so `cluster-ipam-admin show` lists the node as
//! silent at once instead of after its TTL.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster_ipam::admin::{load_network, AdminError};
use cluster_ipam::config::ClusterConfig;
use cluster_ipam::liveness::NodeHeartbeat;
use libcni::conf;

use crate::metrics::Metrics;

/// What the heartbeat thread needs.
#[derive(Debug, Clone)]
pub struct HeartbeatOptions {
    pub conf_dir: PathBuf,
    /// The lease's TTL; beats every third of it.
    pub ttl: Duration,
    /// How often the folder is read again for networks come or gone.
    pub rescan: Duration,
}

/// One etcd pool as seen from this node: endpoints (sorted), the pool's
/// key root (`<prefix>/<network>/`, normalised by cluster-ipam) and node.
pub type PoolId = (Vec<String>, String, String);

pub fn pool_id(cluster: &ClusterConfig) -> PoolId {
    let mut endpoints = cluster.etcd.endpoints.clone();
    endpoints.sort();
    endpoints.dedup();
    (
        endpoints,
        cluster.keys.root().to_string(),
        cluster.node.clone(),
    )
}

/// The cluster-ipam networks of the folder's `*.conflist`, `*.conf` and
/// `*.json` files, one per pool (the first file wins). A file whose
/// cluster-ipam configuration is invalid is logged and counted as an
/// error; files without cluster-ipam, or that do not parse (the GC pass
/// logs those), are skipped.
pub fn cluster_networks(dir: &Path, metrics: &Metrics) -> BTreeMap<PoolId, ClusterConfig> {
    let mut found = BTreeMap::new();
    let files = match conf::conf_files(dir, &[".conflist", ".conf", ".json"]) {
        Ok(files) => files,
        Err(e) => {
            log::warn!("heartbeat: cannot read the conflist folder: {e}");
            metrics.record_heartbeat_error();
            return found;
        }
    };
    for file in files {
        match load_network(&file) {
            Ok(cluster) => {
                found.entry(pool_id(&cluster)).or_insert(cluster);
            }
            Err(
                AdminError::NoClusterIpam(_) | AdminError::Read { .. } | AdminError::Json { .. },
            ) => {}
            Err(e) => {
                log::warn!("heartbeat: {}: {e}", file.display());
                metrics.record_heartbeat_error();
            }
        }
    }
    found
}

struct Entry {
    network: String,
    node: String,
    heartbeat: NodeHeartbeat,
    next: Instant,
}

/// The heartbeats kept, by pool.
#[derive(Default)]
pub struct Heartbeats {
    entries: BTreeMap<PoolId, Entry>,
}

impl Heartbeats {
    /// Starts heartbeats for pools new in `found` (due at once) and stops
    /// those of pools gone from it.
    pub fn sync(
        &mut self,
        found: BTreeMap<PoolId, ClusterConfig>,
        ttl: Duration,
        metrics: &Metrics,
    ) {
        let gone: Vec<PoolId> = self
            .entries
            .keys()
            .filter(|id| !found.contains_key(*id))
            .cloned()
            .collect();
        for id in gone {
            if let Some(entry) = self.entries.remove(&id) {
                log::info!(
                    "heartbeat: network {} left the folder; revoking node {}'s lease",
                    entry.network,
                    entry.node
                );
                metrics.forget_heartbeat(&entry.network, &entry.node);
                if let Err(e) = entry.heartbeat.stop() {
                    log::warn!(
                        "heartbeat: network {}: cannot revoke node {}'s lease (it expires within its TTL): {e}",
                        entry.network,
                        entry.node
                    );
                }
            }
        }
        for (id, cluster) in found {
            if self.entries.contains_key(&id) {
                continue;
            }
            match NodeHeartbeat::new(&cluster, ttl) {
                Ok(heartbeat) => {
                    self.entries.insert(
                        id,
                        Entry {
                            network: cluster.store.network.clone(),
                            node: cluster.node.clone(),
                            heartbeat,
                            next: Instant::now(),
                        },
                    );
                }
                Err(e) => {
                    log::warn!(
                        "heartbeat: network {}: cannot set up: {e}",
                        cluster.store.network
                    );
                    metrics.record_heartbeat_error();
                }
            }
        }
    }

    /// Beats every heartbeat that is due; a failure is logged, counted
    /// and retried at the next interval (the lease outlives one miss).
    pub fn beat_due(&mut self, metrics: &Metrics) {
        for entry in self.entries.values_mut() {
            if entry.next > Instant::now() {
                continue;
            }
            match entry.heartbeat.beat() {
                Ok(beat) => {
                    if beat.new_lease {
                        log::info!(
                            "heartbeat: network {}: node {} known alive (new lease)",
                            entry.network,
                            entry.node
                        );
                    }
                    if !beat.released.is_empty() {
                        log::warn!(
                            "heartbeat: network {}: blocks released while node {} was silent, never used again: {:?}",
                            entry.network,
                            entry.node,
                            beat.released
                        );
                    }
                    metrics.record_heartbeat(&entry.network, &entry.node, true);
                }
                Err(e) => {
                    log::warn!("heartbeat: network {}: {e}", entry.network);
                    metrics.record_heartbeat(&entry.network, &entry.node, false);
                    metrics.record_heartbeat_error();
                }
            }
            entry.next = Instant::now() + entry.heartbeat.interval();
        }
    }

    /// When the next heartbeat is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.entries.values().map(|e| e.next).min()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Revokes every lease: the node is shown silent at once.
    pub fn stop_all(&mut self, metrics: &Metrics) {
        for (_, entry) in std::mem::take(&mut self.entries) {
            metrics.forget_heartbeat(&entry.network, &entry.node);
            match entry.heartbeat.stop() {
                Ok(()) => log::info!(
                    "heartbeat: network {}: node {}'s lease revoked",
                    entry.network,
                    entry.node
                ),
                Err(e) => log::warn!(
                    "heartbeat: network {}: cannot revoke node {}'s lease (it expires within its TTL): {e}",
                    entry.network,
                    entry.node
                ),
            }
        }
    }
}

/// The running heartbeat thread.
pub struct HeartbeatHandle {
    stop: mpsc::Sender<()>,
    done: mpsc::Receiver<()>,
}

impl HeartbeatHandle {
    /// Asks the thread to revoke every lease and waits for it, at most
    /// `bound` (a beat in flight finishes first, bounded by the network's
    /// `etcd.timeoutMs`). False when it did not finish in time: the
    /// leases then expire by themselves within their TTL.
    pub fn stop(self, bound: Duration) -> bool {
        let _ = self.stop.send(());
        self.done.recv_timeout(bound).is_ok()
    }
}

/// Starts the heartbeat thread.
pub fn spawn(opts: HeartbeatOptions, metrics: Arc<Metrics>) -> std::io::Result<HeartbeatHandle> {
    let (stop_tx, stop_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("heartbeat".to_string())
        .spawn(move || {
            run(&opts, &metrics, &stop_rx);
            let _ = done_tx.send(());
        })?;
    Ok(HeartbeatHandle {
        stop: stop_tx,
        done: done_rx,
    })
}

/// Beats until told to stop, then revokes every lease.
fn run(opts: &HeartbeatOptions, metrics: &Metrics, stop: &mpsc::Receiver<()>) {
    let mut heartbeats = Heartbeats::default();
    let mut next_scan = Instant::now();
    loop {
        if Instant::now() >= next_scan {
            let found = cluster_networks(&opts.conf_dir, metrics);
            heartbeats.sync(found, opts.ttl, metrics);
            next_scan = Instant::now() + opts.rescan;
        }
        heartbeats.beat_due(metrics);
        let wake = heartbeats
            .next_due()
            .map_or(next_scan, |due| due.min(next_scan));
        match stop.recv_timeout(wake.saturating_duration_since(Instant::now())) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    heartbeats.stop_all(metrics);
}
