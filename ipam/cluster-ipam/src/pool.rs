//! A node's share of the pool during one call: host-local's locked store
//! (the leases), the node's block record, and etcd when it is needed.
//!
//! Safety rests on two rules:
//! - a node hands out addresses only from blocks etcd has given it (the
//!   claim succeeded) and it has recorded, or addresses etcd has reserved
//!   for it one by one; nobody else can be given those while the keys
//!   exist, whatever is reachable;
//! - a block leaves the node's record before its key is deleted, never
//!   after, so a crash in between leaves a key the node no longer uses
//!   (adopted back later), never a block two nodes use.
//!
//! A claim is recorded as pending before it is sent. A process killed
//! after etcd created the key but before the node recorded it leaves the
//! pending mark; the next call reads etcd and adopts every block etcd says
//! is this node's ([`PoolSession::adopt`]).

use std::collections::HashSet;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use host_local::lease::Attachment;
use host_local::range_set::RangeSet;
use host_local::store::{LockedStore, Store};
use ipnetwork::IpNetwork;
use libcni::IpFamily;

use crate::blocks;
use crate::config::ClusterConfig;
use crate::error::Error;
use crate::etcd::{Claim, Etcd, IpReservation, NodeReport, Snapshot};
use crate::node_state::{
    self, ClusterIp, HeldBlock, NodeState, PoolIdentity, RevokedBlock, StateError,
};

/// Claims lost to other nodes before giving up: each loss means another
/// node took a block in between, so this many in one call means a storm.
const MAX_CLAIM_ROUNDS: usize = 32;
/// How long a pending claim that etcd could not settle is left alone: an
/// outage then costs one ADD in this long a wait for etcd, not every ADD.
const SETTLE_PAUSE_SECS: u64 = 30;

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

pub struct PoolSession<'a> {
    pub cluster: &'a ClusterConfig,
    store_dir: PathBuf,
    pub locked: LockedStore<'a>,
    pub state: NodeState,
    etcd: Option<Etcd>,
    /// Whether etcd was found to be the record's cluster in this call.
    bound: bool,
}

impl<'a> PoolSession<'a> {
    /// Takes the store lock and reads the node's record.
    pub fn open(
        cluster: &'a ClusterConfig,
        store: &'a Store,
        range_sets: usize,
    ) -> Result<PoolSession<'a>, Error> {
        let locked = store.lock(range_sets)?;
        let state = NodeState::load(store.dir(), &cluster.node)?;
        let mut session = PoolSession {
            cluster,
            store_dir: store.dir().to_path_buf(),
            locked,
            state,
            etcd: None,
            bound: false,
        };
        session.bind_keys()?;
        Ok(session)
    }

    /// The pool this configuration names (its cluster is learned from etcd).
    fn configured_pool(&self) -> PoolIdentity {
        PoolIdentity::new(
            &self.cluster.etcd.prefix,
            &self.cluster.store.network,
            &self.cluster.etcd.endpoints,
        )
    }

    fn other_pool(&self, recorded: &PoolIdentity, configured: &PoolIdentity) -> Error {
        Error::State(StateError::OtherPool {
            path: NodeState::path(&self.store_dir),
            recorded: recorded.to_string(),
            configured: configured.to_string(),
        })
    }

    /// Holds the record to its pool's prefix and network, without etcd.
    /// A record holding nothing (or written before the identity existed)
    /// takes the configured pool, saved with the next write; endpoints
    /// other than the recorded ones are checked to reach the recorded
    /// cluster before any block is used.
    fn bind_keys(&mut self) -> Result<(), Error> {
        let configured = self.configured_pool();
        let recorded = match self.state.pool.clone() {
            Some(recorded) if self.state.holds_anything() => recorded,
            _ => {
                self.state.pool = Some(configured);
                return Ok(());
            }
        };
        if !recorded.same_keys(&configured) {
            return Err(self.other_pool(&recorded, &configured));
        }
        if recorded.endpoints != configured.endpoints && recorded.cluster_id.is_none() {
            if let Some(pool) = self.state.pool.as_mut() {
                pool.endpoints = configured.endpoints;
            }
        }
        Ok(())
    }

    /// Before the node's blocks hand out an address: endpoints other than
    /// the recorded ones must reach the recorded etcd cluster (asked once,
    /// then recorded); another cluster is [`StateError::OtherPool`]. When
    /// they cannot be reached the blocks serve on (an outage must not stop
    /// ADDs inside them; every write to etcd checks the cluster first) and
    /// the next call asks again. Calls that only release (DEL, GC) do not
    /// wait for etcd here.
    pub fn check_endpoints(&mut self) -> Result<(), Error> {
        let configured = self.configured_pool();
        let changed = self
            .state
            .pool
            .as_ref()
            .is_some_and(|p| p.endpoints != configured.endpoints);
        if !changed || now_secs() < self.state.settle_after {
            return Ok(());
        }
        match self.etcd() {
            Ok(_) => {}
            Err(Error::Etcd(e)) => {
                log::warn!(
                    "network {}: the configured etcd endpoints differ from the recorded ones and \
                     cannot tell their cluster now ({e}); serving from the node's blocks \
                     (asked again in {SETTLE_PAUSE_SECS} s)",
                    self.cluster.store.network
                );
                // As for a pending claim: an outage costs one ADD a wait.
                self.state.settle_after = now_secs() + SETTLE_PAUSE_SECS;
                return self.save();
            }
            Err(e) => return Err(e),
        }
        if let Some(pool) = self.state.pool.as_mut() {
            pool.endpoints = configured.endpoints;
        }
        self.save()
    }

    /// Holds the record to the etcd cluster that answered (`id`): the
    /// first answer names the cluster of a record that has none yet.
    fn bind_cluster(&mut self, id: u64) -> Result<(), Error> {
        let id = node_state::cluster_id_text(id);
        let configured = self.configured_pool();
        let holds = self.state.holds_anything();
        let pool = self.state.pool.get_or_insert_with(|| configured.clone());
        match &pool.cluster_id {
            Some(recorded) if *recorded == id => {}
            Some(_) if holds => {
                let recorded = pool.clone();
                let configured = PoolIdentity {
                    cluster_id: Some(id),
                    ..configured
                };
                return Err(self.other_pool(&recorded, &configured));
            }
            _ => {
                *pool = PoolIdentity {
                    cluster_id: Some(id),
                    ..configured
                };
                self.save()?;
            }
        }
        self.bound = true;
        Ok(())
    }

    /// The etcd connection, made on first use: calls that stay on the node
    /// never build the client or its runtime. Before it is handed out, the
    /// cluster it reaches is checked to be the record's (one count-only
    /// read, unless a snapshot already told).
    pub fn etcd(&mut self) -> Result<&mut Etcd, Error> {
        if !self.bound {
            let key = self.cluster.keys.pool();
            let id = self.client()?.cluster_id(&key)?;
            self.bind_cluster(id)?;
        }
        self.client()
    }

    fn client(&mut self) -> Result<&mut Etcd, Error> {
        if self.etcd.is_none() {
            self.etcd = Some(Etcd::new(&self.cluster.etcd, &self.cluster.node)?);
        }
        // Set just above.
        self.etcd
            .as_mut()
            .ok_or_else(|| Error::Internal("etcd client missing".into()))
    }

    /// The pool in etcd, once its cluster is checked to be the record's.
    pub fn snapshot(&mut self) -> Result<Snapshot, Error> {
        let keys = self.cluster.keys.clone();
        let snapshot = self.client()?.snapshot(&keys)?;
        if !self.bound {
            self.bind_cluster(snapshot.cluster_id)?;
        }
        Ok(snapshot)
    }

    pub fn save(&self) -> Result<(), Error> {
        Ok(self.state.save(&self.store_dir)?)
    }

    /// The node's blocks as a host-local range set for `set`: the
    /// addresses of held blocks inside the set's ranges.
    pub fn node_set(&self, set: &RangeSet) -> Option<RangeSet> {
        let mut pieces = Vec::new();
        for block in &self.state.blocks {
            pieces.extend(blocks::pieces(
                set,
                block.cidr,
                &self.cluster.exclude,
                &block.reserved,
            ));
        }
        pieces.sort_by_key(|r| host_local::addr::to_u128(r.range_start));
        blocks::node_range_set(pieces)
    }

    /// Records every block `snapshot` says is this node's that the record
    /// lacks; returns how many. Saved by the caller.
    pub fn adopt(&mut self, snapshot: &Snapshot) -> usize {
        let mut adopted = 0;
        for claimed in &snapshot.blocks {
            if claimed.node == self.cluster.node && !self.state.holds(claimed.cidr) {
                let reserved = reserved_in(snapshot, claimed.cidr);
                log::info!(
                    "network {}: adopting block {} (claimed at revision {}, unknown to this node)",
                    self.cluster.store.network,
                    claimed.cidr,
                    claimed.create_revision
                );
                self.state.blocks.push(HeldBlock {
                    cidr: claimed.cidr,
                    revision: claimed.create_revision,
                    reserved,
                });
                adopted += 1;
            }
        }
        adopted
    }

    /// Moves out of the held blocks every block `snapshot` no longer
    /// gives this node (deleted, another owner, or claimed again since):
    /// an operator released it while the node was silent, and another
    /// node may hand its addresses out now. Returns them. Saved by the
    /// caller.
    pub fn drop_released(&mut self, snapshot: &Snapshot) -> Vec<IpNetwork> {
        let node = &self.cluster.node;
        let still = |held: &HeldBlock| {
            snapshot.blocks.iter().any(|c| {
                c.cidr == held.cidr && c.node == *node && c.create_revision == held.revision
            })
        };
        let (kept, gone): (Vec<HeldBlock>, Vec<HeldBlock>) = std::mem::take(&mut self.state.blocks)
            .into_iter()
            .partition(|b| still(b));
        self.state.blocks = kept;
        let found = now_secs();
        for block in &gone {
            log::warn!(
                "network {}: block {} was released in etcd while this node was silent; \
                 no address of it is handed out again",
                self.cluster.store.network,
                block.cidr
            );
            self.state.revoked.push(RevokedBlock {
                cidr: block.cidr,
                revision: block.revision,
                found,
            });
        }
        gone.into_iter().map(|b| b.cidr).collect()
    }

    /// When the node's heartbeat has let its lease lapse (see
    /// [`crate::liveness::ALIVE_FILE`]), reads the pool and drops the
    /// blocks released meanwhile before any is used. Without etcd the
    /// blocks serve on (nobody can release them through an etcd the node
    /// cannot reach either, short of a partition), with a warning.
    pub fn check_released_if_silent(&mut self) -> Result<(), Error> {
        if self.state.blocks.is_empty() || !crate::liveness::heartbeat_lapsed(&self.store_dir) {
            return Ok(());
        }
        match self.snapshot() {
            Ok(snapshot) => {
                if !self.drop_released(&snapshot).is_empty() {
                    self.save()?;
                }
                Ok(())
            }
            Err(Error::Etcd(e)) => {
                log::warn!(
                    "network {}: this node's heartbeat has lapsed and etcd cannot tell whether its \
                     blocks were released meanwhile ({e}); serving from them",
                    self.cluster.store.network
                );
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Addresses the node's blocks of `set` hand out, taken or not.
    fn room(&self, set: &RangeSet) -> u128 {
        self.node_set(set)
            .map_or(0, |s| blocks::capacity(s.ranges()))
    }

    /// Drops from the held blocks' reserved lists the addresses whose
    /// cluster-wide reservation is gone (released by its holder): the
    /// block's owner may hand them out now, and nobody else can reserve
    /// them while the block is held. Returns how many. Saved by the caller.
    pub fn refresh_reserved(&mut self, snapshot: &Snapshot) -> usize {
        let still: HashSet<IpAddr> = snapshot.ips.iter().map(|r| r.ip).collect();
        let mut freed = 0;
        for block in &mut self.state.blocks {
            let before = block.reserved.len();
            block.reserved.retain(|ip| still.contains(ip));
            freed += before - block.reserved.len();
        }
        freed
    }

    /// When a claim was left pending (a killed claimer), reads etcd and
    /// adopts. Without etcd the mark stays, and the call goes on with the
    /// blocks it knows.
    pub fn reconcile_if_pending(&mut self) -> Result<(), Error> {
        if !self.state.claim_pending || now_secs() < self.state.settle_after {
            return Ok(());
        }
        match self.snapshot() {
            Ok(snapshot) => {
                self.drop_released(&snapshot);
                self.adopt(&snapshot);
                self.refresh_reserved(&snapshot);
                self.state.claim_pending = false;
                self.save()
            }
            Err(e @ Error::State(_)) => Err(e),
            Err(e) => {
                log::warn!(
                    "a block claim was interrupted and etcd cannot be read to settle it \
                     (tried again in {SETTLE_PAUSE_SECS} s, or at the next claim): {e}"
                );
                self.state.settle_after = now_secs() + SETTLE_PAUSE_SECS;
                self.save()
            }
        }
    }

    fn check_grid(&self, snapshot: &Snapshot) -> Result<(), Error> {
        match &snapshot.grid {
            Some(value) if value.as_slice() != self.cluster.grid.to_value().as_bytes() => {
                Err(Error::GridMismatch {
                    network: self.cluster.store.network.clone(),
                    etcd: String::from_utf8_lossy(value).into_owned(),
                    ours: self.cluster.grid.to_value(),
                })
            }
            _ => Ok(()),
        }
    }

    /// Makes room for one more address of `set`: adopts blocks etcd says
    /// are ours, or claims a free one. Fails with [`Error::PoolExhausted`]
    /// when no block is free.
    pub fn claim_block(&mut self, set: &RangeSet) -> Result<(), Error> {
        let keys = self.cluster.keys.clone();
        let family = set.family();
        let prefix = self.cluster.grid.prefix(family);
        for _ in 0..MAX_CLAIM_ROUNDS {
            let snapshot = self.snapshot()?;
            self.check_grid(&snapshot)?;
            let released = self.drop_released(&snapshot).len();
            let room_before = self.room(set);
            let adopted = self.adopt(&snapshot);
            let freed = self.refresh_reserved(&snapshot);
            if released > 0 {
                self.save()?;
            }
            if adopted > 0 || freed > 0 {
                self.state.claim_pending = false;
                self.save()?;
                if self.room(set) > room_before {
                    return Ok(());
                }
            }
            // The node's own blocks count as taken whatever etcd says: a
            // block is listed once in a record. So do the blocks released
            // under it: their addresses may still be its pods' (and
            // another node's now), so it never hands them out again.
            let taken: HashSet<IpNetwork> = snapshot
                .blocks
                .iter()
                .map(|b| b.cidr)
                .chain(self.state.blocks.iter().map(|b| b.cidr))
                .chain(self.state.revoked.iter().map(|r| r.cidr))
                .collect();
            let reserved: Vec<IpAddr> = snapshot.ips.iter().map(|r| r.ip).collect();
            let Some(block) = blocks::free_block(
                set,
                prefix,
                &self.cluster.node,
                &taken,
                &self.cluster.exclude,
                &reserved,
            ) else {
                // This snapshot was read after any earlier claim of this
                // call and adopted: nothing is left pending.
                if self.state.claim_pending {
                    self.state.claim_pending = false;
                    self.save()?;
                }
                return Err(Error::PoolExhausted {
                    network: self.cluster.store.network.clone(),
                    ranges: set.to_string(),
                });
            };
            self.state.claim_pending = true;
            self.save()?;
            let grid = self.cluster.grid;
            let node = self.cluster.node.clone();
            let claim = match self.etcd()?.claim(&keys, grid, &snapshot, block, &node) {
                Ok(claim) => claim,
                Err(e) => {
                    // The claim may have landed: it stays pending, but
                    // the ADDs that follow need not wait for etcd for it.
                    self.state.settle_after = now_secs() + SETTLE_PAUSE_SECS;
                    self.save()?;
                    return Err(e.into());
                }
            };
            match claim {
                Claim::Claimed(revision) if !self.state.holds(block) => {
                    self.state.blocks.push(HeldBlock {
                        cidr: block,
                        revision,
                        reserved: reserved_in(&snapshot, block),
                    });
                    self.state.claim_pending = false;
                    self.save()?;
                    log::info!(
                        "network {}: node {} claimed block {block} (revision {revision})",
                        self.cluster.store.network,
                        self.cluster.node
                    );
                    // Already talking to etcd: settle what earlier calls
                    // could not.
                    self.retry_unreleased();
                    self.report_best_effort();
                    return Ok(());
                }
                Claim::Claimed(_) => {
                    return Err(Error::Internal(format!(
                        "claimed block {block}, which this node already holds"
                    )))
                }
                Claim::Lost => {
                    // Left pending: if the claim did land (its answer was
                    // lost), the next snapshot adopts it.
                    log::debug!("block {block} was taken meanwhile; reading the pool again");
                }
            }
        }
        Err(Error::ClaimContention(MAX_CLAIM_ROUNDS))
    }

    /// Reserves `ip`, outside the node's blocks, for `attachment`
    /// cluster-wide, and records it.
    pub fn reserve_cluster_ip(&mut self, ip: IpAddr, attachment: &Attachment) -> Result<(), Error> {
        let keys = self.cluster.keys.clone();
        let grid = self.cluster.grid;
        let record = ClusterIp {
            ip,
            container_id: attachment.container_id().to_string(),
            ifname: attachment.ifname().to_string(),
        };
        let owner = record.owner(&self.cluster.node);
        let block = blocks::block_of(ip, grid.prefix(IpFamily::of(ip)));
        for grid_written in [true, false] {
            let outcome = self
                .etcd()?
                .reserve_ip(&keys, grid, grid_written, ip, block, &owner)?;
            match outcome {
                IpReservation::Reserved => {
                    if !self.state.cluster_ips.contains(&record) {
                        self.state.cluster_ips.push(record);
                    }
                    self.save()?;
                    return Ok(());
                }
                IpReservation::InBlock { block, node } => {
                    return Err(Error::RequestedInOtherBlock { ip, block, node })
                }
                IpReservation::Taken(holder) => {
                    return Err(Error::RequestedTaken {
                        ip,
                        node: holder.node,
                        container_id: holder.container_id,
                    })
                }
                IpReservation::GridMismatch(value) if !value.is_empty() => {
                    return Err(Error::GridMismatch {
                        network: self.cluster.store.network.clone(),
                        etcd: String::from_utf8_lossy(&value).into_owned(),
                        ours: grid.to_value(),
                    })
                }
                // No pool key yet: try again writing it.
                IpReservation::GridMismatch(_) => {}
            }
        }
        Err(Error::ClaimContention(2))
    }

    /// Deletes the cluster-wide reservations of `ips` (those that are
    /// cluster reservations of this node); a failed delete is kept for the
    /// next call that reaches etcd. Saves the record.
    pub fn release_cluster_ips(&mut self, ips: &[IpAddr]) -> Result<(), Error> {
        let (going, staying): (Vec<ClusterIp>, Vec<ClusterIp>) =
            std::mem::take(&mut self.state.cluster_ips)
                .into_iter()
                .partition(|c| ips.contains(&c.ip));
        self.state.cluster_ips = staying;
        if going.is_empty() {
            return Ok(());
        }
        self.state.unreleased.extend(going);
        self.save()?;
        self.retry_unreleased();
        Ok(())
    }

    /// Sends the deletes of reservations left from earlier calls.
    pub fn retry_unreleased(&mut self) {
        if self.state.unreleased.is_empty() {
            return;
        }
        let keys = self.cluster.keys.clone();
        let node = self.cluster.node.clone();
        let pending = std::mem::take(&mut self.state.unreleased);
        let mut left = Vec::new();
        for record in pending {
            let result = match self.etcd() {
                Ok(etcd) => etcd.release_ip(&keys, record.ip, &record.owner(&node)),
                Err(e) => {
                    log::warn!("cannot release {} in etcd: {e}", record.ip);
                    left.push(record);
                    continue;
                }
            };
            match result {
                Ok(_) => log::info!(
                    "network {}: released reservation of {}",
                    keys.root(),
                    record.ip
                ),
                Err(e) => {
                    log::warn!(
                        "cannot release the reservation of {} in etcd now (kept for a later call): {e}",
                        record.ip
                    );
                    left.push(record);
                }
            }
        }
        self.state.unreleased = left;
        if let Err(e) = self.save() {
            log::warn!("cannot record the reservations left to release: {e}");
        }
    }

    /// Publishes the node's lease and block counts for the operator
    /// command; failures only cost freshness.
    pub fn report_best_effort(&mut self) {
        let leases = match self.locked.scan() {
            Ok(leases) => leases.len() as u64,
            Err(e) => {
                log::warn!("cannot count leases for the node report: {e}");
                return;
            }
        };
        let report = NodeReport {
            leases,
            blocks: self.state.blocks.len() as u64,
            updated: now_secs(),
        };
        let keys = self.cluster.keys.clone();
        let node = self.cluster.node.clone();
        if let Err(e) = self
            .etcd()
            .and_then(|etcd| Ok(etcd.report(&keys, &node, report)?))
        {
            log::warn!("cannot publish the node report: {e}");
        }
    }
}

/// Addresses reserved cluster-wide inside `block`: the block hands them
/// out to nobody (the node's own such reservations stay in `clusterIps`).
fn reserved_in(snapshot: &Snapshot, block: IpNetwork) -> Vec<IpAddr> {
    snapshot
        .ips
        .iter()
        .filter(|r| block.contains(r.ip))
        .map(|r| r.ip)
        .collect()
}
