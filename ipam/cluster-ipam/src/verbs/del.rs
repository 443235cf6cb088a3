//! DEL: releases what the attachment holds on this node, always locally;
//! the etcd keys of its cluster-wide reservations are deleted best effort
//! (a failed delete is recorded and sent again by a later call).

use host_local::lease::Attachment;
use host_local::store::Store;
use serde_json::Value;

use crate::config::{self, ClusterConfig};
use crate::error::Error;
use crate::pool::PoolSession;

pub fn del(raw: &Value, attachment: &Attachment) -> Result<(), Error> {
    let cluster = match ClusterConfig::from_value(raw) {
        Ok(cluster) => cluster,
        Err(e) => {
            // The leases can still go: they need only the network name and
            // dataDir. Reservations in etcd then stay until an operator
            // (or a later DEL with a good configuration) removes them.
            log::warn!(
                "DEL with an unusable cluster-ipam configuration, releasing locally only: {e}"
            );
            return del_local(raw, attachment);
        }
    };
    let Some(store) = super::open_existing(&cluster)? else {
        return Ok(());
    };
    let mut session = match PoolSession::open(&cluster, &store, cluster.store.range_sets) {
        Ok(session) => session,
        Err(Error::State(e)) => {
            // An unreadable node record must not keep a pod's addresses.
            log::warn!("DEL with an unreadable node record, releasing locally only: {e}");
            return del_local(raw, attachment);
        }
        Err(e) => return Err(e),
    };
    let released = session.locked.release(attachment)?;
    if released.is_empty() {
        return Ok(());
    }
    log::info!(
        "released {} in network {} of {attachment}",
        libcni::logging::joined(&released),
        cluster.store.network
    );
    if let Err(e) = session.release_cluster_ips(&released) {
        log::warn!(
            "released {} locally, but not their cluster reservations: {e}",
            libcni::logging::joined(&released)
        );
    }
    Ok(())
}

fn del_local(raw: &Value, attachment: &Attachment) -> Result<(), Error> {
    let store_config = config::store_config(raw)?;
    let Some(store) = Store::open_existing(
        &store_config.data_dir,
        &store_config.network,
        store_config.lock_timeout,
    )?
    else {
        return Ok(());
    };
    let released = store.lock(store_config.range_sets)?.release(attachment)?;
    log::info!(
        "released {} in network {} of {attachment} (local store only)",
        libcni::logging::joined(&released),
        store_config.network
    );
    Ok(())
}
