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
    let mut snapshot = None;
    for (set_idx, set) in ipam.range_sets.iter().enumerate() {
        if let Some(node_set) = session.node_set(set) {
            if next_free(&store, &node_set, set_idx)?.is_some() {
                continue;
            }
        }
        if snapshot.is_none() {
            let keys = cluster.keys.clone();
            snapshot = Some(session.etcd()?.snapshot(&keys)?);
        }
        let Some(snapshot) = snapshot.as_ref() else {
            continue;
        };
        let taken = snapshot.blocks.iter().map(|b| b.cidr).collect();
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
