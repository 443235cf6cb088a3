//! STATUS: every range set must be able to serve one more ADD: from room
//! in the node's blocks, or else from a free block in etcd. 50 when the
//! pool has none, 11 when etcd cannot be asked.

use host_local::allocator::next_free;
use host_local::store::Store;

use crate::blocks;
use crate::config::AddConfig;
use crate::error::Error;
use crate::pool::PoolSession;

pub fn status(config: &AddConfig) -> Result<(), Error> {
    let cluster = &config.cluster;
    let ipam = &config.ipam;
    // A node that never served the network has no store: everything must
    // come from etcd, which an empty store tells as well.
    let store = Store::open(
        &ipam.store.data_dir,
        &ipam.store.network,
        ipam.store.lock_timeout,
    )?;
    let mut session = PoolSession::open(cluster, &store, ipam.range_sets.len())?;
    session.check_endpoints()?;
    released_blocks_in_use(&mut session)?;
    let mut snapshot = None;
    for (set_idx, set) in ipam.range_sets.iter().enumerate() {
        if let Some(node_set) = session.node_set(set) {
            if next_free(&store, &node_set, set_idx)?.is_some() {
                continue;
            }
        }
        if snapshot.is_none() {
            snapshot = Some(session.snapshot()?);
        }
        let Some(snapshot) = snapshot.as_ref() else {
            continue;
        };
        // As a claim sees it: blocks released under this node stay out.
        let taken = snapshot
            .blocks
            .iter()
            .map(|b| b.cidr)
            .chain(session.state.revoked.iter().map(|r| r.cidr))
            .collect();
        let reserved: Vec<_> = snapshot.ips.iter().map(|r| r.ip).collect();
        let free = blocks::free_block(
            set,
            cluster.grid.prefix(set.family()),
            &cluster.node,
            &taken,
            &cluster.exclude,
            &reserved,
        );
        let ours_unknown = snapshot
            .blocks
            .iter()
            .any(|b| b.node == cluster.node && !session.state.holds(b.cidr));
        let reservation_gone = session.state.blocks.iter().any(|b| {
            b.reserved
                .iter()
                .any(|ip| !snapshot.ips.iter().any(|r| r.ip == *ip))
        });
        if free.is_none() && !ours_unknown && !reservation_gone {
            return Err(Error::PoolExhausted {
                network: ipam.store.network.clone(),
                ranges: set.to_string(),
            });
        }
    }
    Ok(())
}

/// Pods holding addresses in blocks an operator released while the node
/// was silent (51): those addresses may be handed out elsewhere now.
fn released_blocks_in_use(session: &mut PoolSession<'_>) -> Result<(), Error> {
    if session.state.revoked.is_empty() {
        return Ok(());
    }
    let leases = session.locked.scan()?;
    let revoked = &session.state.revoked;
    let in_use: Vec<_> = revoked
        .iter()
        .filter(|r| leases.iter().any(|l| r.cidr.contains(l.ip)))
        .collect();
    if in_use.is_empty() {
        return Ok(());
    }
    let count = leases
        .iter()
        .filter(|l| in_use.iter().any(|r| r.cidr.contains(l.ip)))
        .count();
    Err(Error::BlocksReleased {
        network: session.cluster.store.network.clone(),
        node: session.cluster.node.clone(),
        blocks: in_use
            .iter()
            .map(|r| r.cidr.to_string())
            .collect::<Vec<_>>()
            .join(" "),
        leases: count,
    })
}
