//! GC (CNI 1.1): releases this node's leases that no valid attachment
//! holds (host-local's rule, `cni.dev/valid-attachments`), deletes their
//! cluster-wide reservations, and gives back blocks left empty, keeping
//! per range set as many as leave the node room for one more ADD (so the
//! next pod needs no etcd round trip). A block leaves the node's record
//! before its key is deleted.
//!
//! Blocks released under the node by an operator (`revoked`) are
//! forgotten once no pod holds an address in them.
//!
//! A configuration without the attachment list releases nothing, as in
//! host-local: runtimes that send none must not lose every lease.

use std::net::IpAddr;

use host_local::allocator::next_free;
use host_local::plugin::ValidAttachments;
use host_local::store::Store;
use libcni::plugin_conf::{LEGACY_ATTACHMENTS_KEY, VALID_ATTACHMENTS_KEY};
use serde_json::Value;

use crate::blocks;
use crate::config::{AddConfig, ClusterConfig};
use crate::error::Error;
use crate::node_state::HeldBlock;
use crate::pool::PoolSession;

pub fn gc(raw: &Value, valid: &[(&str, &str)]) -> Result<(), Error> {
    if raw.get(VALID_ATTACHMENTS_KEY).is_none() && raw.get(LEGACY_ATTACHMENTS_KEY).is_none() {
        log::warn!(
            "GC without {VALID_ATTACHMENTS_KEY} or {LEGACY_ATTACHMENTS_KEY}: nothing released"
        );
        return Ok(());
    }
    let cluster = ClusterConfig::from_value(raw)?;
    let Some(store) = super::open_existing(&cluster)? else {
        return Ok(());
    };
    let mut session = PoolSession::open(&cluster, &store, cluster.store.range_sets)?;
    let valid = ValidAttachments::new(valid);
    let report = session.locked.gc(|owner| valid.keeps(owner))?;
    for lease in &report.released {
        log::info!(
            "GC released {} in network {} (held by {})",
            lease.ip,
            cluster.store.network,
            lease.owner.as_ref().map_or_else(
                || "nobody".to_string(),
                |o| format!("{}/{}", o.container_id(), o.ifname().unwrap_or("*"))
            )
        );
    }
    let mut errors: Vec<Error> = report.errors.into_iter().map(Error::from).collect();
    let released: Vec<IpAddr> = report.released.iter().map(|l| l.ip).collect();
    if let Err(e) = session.release_cluster_ips(&released) {
        errors.push(e);
    }

    if let Err(e) = forget_empty_revoked(&mut session) {
        errors.push(e);
    }
    // Blocks go back only with ranges to judge the room by.
    match AddConfig::from_value(raw, None) {
        Ok(config) => {
            if let Err(e) = give_back_empty_blocks(&mut session, &store, &config) {
                errors.push(e);
            }
        }
        Err(e) => log::warn!("GC keeps every block: the ranges are unusable: {e}"),
    }
    session.retry_unreleased();
    session.report_best_effort();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Error::Several(errors))
    }
}

fn give_back_empty_blocks(
    session: &mut PoolSession<'_>,
    store: &Store,
    config: &AddConfig,
) -> Result<(), Error> {
    let leased: Vec<IpAddr> = session.locked.scan()?.into_iter().map(|l| l.ip).collect();
    let mut giving: Vec<HeldBlock> = Vec::new();
    for (set_idx, set) in config.ipam.range_sets.iter().enumerate() {
        let empty: Vec<HeldBlock> = session
            .state
            .blocks
            .iter()
            .filter(|b| {
                !blocks::pieces(set, b.cidr, &config.cluster.exclude, &b.reserved).is_empty()
                    && !leased.iter().any(|ip| b.cidr.contains(*ip))
                    && !session
                        .state
                        .cluster_ips
                        .iter()
                        .any(|c| b.cidr.contains(c.ip))
            })
            .cloned()
            .collect();
        for block in empty {
            // Without this block, would the set still have room?
            let kept = std::mem::take(&mut session.state.blocks);
            session.state.blocks = kept
                .iter()
                .filter(|b| b.cidr != block.cidr)
                .cloned()
                .collect();
            let room = match session.node_set(set) {
                Some(node_set) => next_free(store, &node_set, set_idx)?.is_some(),
                None => false,
            };
            session.state.blocks = kept;
            if room {
                session.state.blocks.retain(|b| b.cidr != block.cidr);
                giving.push(block);
            }
        }
    }
    if giving.is_empty() {
        return Ok(());
    }
    // Out of the record first: from here on this node hands out nothing
    // from these blocks, whatever happens to the deletes.
    session.save()?;
    let keys = session.cluster.keys.clone();
    for block in giving {
        match session
            .etcd()?
            .release_block(&keys, block.cidr, block.revision)
        {
            Ok(true) => log::info!(
                "network {}: gave back empty block {}",
                session.cluster.store.network,
                block.cidr
            ),
            Ok(false) => log::warn!(
                "block {} was no longer this node's claim in etcd; forgotten",
                block.cidr
            ),
            // Still ours in etcd: adopted again at the next claim.
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Forgets released blocks (`revoked`) no pod holds an address in any
/// more: nothing of them is the node's, and a later claim may take one
/// like any free block.
fn forget_empty_revoked(session: &mut PoolSession<'_>) -> Result<(), Error> {
    if session.state.revoked.is_empty() {
        return Ok(());
    }
    let leased: Vec<IpAddr> = session.locked.scan()?.into_iter().map(|l| l.ip).collect();
    let before = session.state.revoked.len();
    session
        .state
        .revoked
        .retain(|r| leased.iter().any(|ip| r.cidr.contains(*ip)));
    if session.state.revoked.len() != before {
        session.save()?;
    }
    Ok(())
}
