//! The five verbs, one module each, over [`crate::pool::PoolSession`].

pub mod add;
pub mod check;
pub mod del;
pub mod gc;
pub mod status;

use host_local::store::Store;

use crate::config::ClusterConfig;
use crate::error::Error;

/// The store, without creating it: verbs other than ADD have nothing to
/// do on a node that never served the network.
fn open_existing(cluster: &ClusterConfig) -> Result<Option<Store>, Error> {
    Ok(Store::open_existing(
        &cluster.store.data_dir,
        &cluster.store.network,
        cluster.store.lock_timeout,
    )?)
}
