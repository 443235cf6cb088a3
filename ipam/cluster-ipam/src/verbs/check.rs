//! CHECK: the attachment holds a lease on this node, and every address it
//! holds is in one of the node's blocks or its cluster-wide reservations.

use host_local::lease::Attachment;

use crate::config::ClusterConfig;
use crate::error::Error;
use crate::pool::PoolSession;

pub fn check(cluster: &ClusterConfig, attachment: &Attachment) -> Result<(), Error> {
    let not_found = || host_local::Error::NotFound(attachment.container_id().to_string());
    let Some(store) = super::open_existing(cluster)? else {
        return Err(not_found().into());
    };
    let mut session = PoolSession::open(cluster, &store, cluster.store.range_sets)?;
    let ips = session.locked.leases_of(attachment)?;
    if ips.is_empty() {
        return Err(not_found().into());
    }
    for ip in ips {
        let reserved = session.state.cluster_ips.iter().any(|c| c.ip == ip);
        if session.state.block_of(ip).is_none() && !reserved {
            return Err(Error::LeaseNotOurs {
                ip,
                attachment: attachment.to_string(),
            });
        }
    }
    Ok(())
}
