//! ADD: one address per range set, in set order, under one hold of the
//! store lock.
//!
//! - No requested address: host-local's allocator over the node's blocks
//!   of the set; only when they are full (or there are none) is etcd asked
//!   for a block, and the allocation runs again.
//! - A requested address inside the node's blocks: reserved locally.
//!   Outside them: reserved cluster-wide first (an `ips/` key, created only
//!   if absent and only while no node holds its block), then locally.
//! - On any failure, what this ADD reserved is released again, locally and
//!   in etcd; blocks it claimed stay (they are the node's room).

use std::net::IpAddr;

use host_local::allocator::{allocate, AllocError};
use host_local::dns::read_resolv_conf;
use host_local::lease::Attachment;
use host_local::range_set::RangeSet;
use host_local::store::Store;
use ipnetwork::IpNetwork;
use libcni::types::{v100, Dns};
use libcni::SpecVersion;

use crate::config::AddConfig;
use crate::error::Error;
use crate::pool::PoolSession;

pub fn add(config: &AddConfig, attachment: &Attachment) -> Result<v100::Result, Error> {
    let ipam = &config.ipam;
    let dns = match (&config.dns, &ipam.resolv_conf) {
        (Some(inline), _) => inline.clone(),
        (None, Some(path)) => {
            read_resolv_conf(path).map_err(|source| host_local::Error::ResolvConf {
                path: path.clone(),
                source,
            })?
        }
        (None, None) => Dns::default(),
    };
    let store = Store::open(
        &ipam.store.data_dir,
        &ipam.store.network,
        ipam.store.lock_timeout,
    )?;
    let mut session = PoolSession::open(&config.cluster, &store, ipam.range_sets.len())?;
    session.check_endpoints()?;
    session.check_released_if_silent()?;
    session.reconcile_if_pending()?;

    // The same address asked for twice is one request, as in host-local.
    let mut requested: Vec<IpAddr> = Vec::new();
    for ip in &ipam.requested_ips {
        let ip = ip.to_canonical();
        if !requested.contains(&ip) {
            requested.push(ip);
        }
    }

    let mut ips = Vec::new();
    let mut reserved = Vec::new();
    let mut failure = None;
    for (set_idx, set) in ipam.range_sets.iter().enumerate() {
        let wanted = requested
            .iter()
            .position(|ip| set.contains(*ip))
            .map(|pos| requested.remove(pos));
        match allocate_one(&mut session, set, set_idx, attachment, wanted) {
            Ok(address) => {
                reserved.push(address.ip());
                let gateway = set.range_for(address.ip()).map(|r| r.gateway);
                ips.push(v100::IpConfig {
                    interface: None,
                    address,
                    gateway,
                });
            }
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    if failure.is_none() && !requested.is_empty() {
        failure = Some(host_local::Error::UnfulfilledRequest(requested).into());
    }
    if let Some(error) = failure {
        undo(&mut session, attachment, &reserved);
        return Err(error);
    }
    log::info!(
        "node {} reserved {} in network {} for {attachment}",
        config.cluster.node,
        libcni::logging::joined(&reserved),
        ipam.store.network
    );
    Ok(v100::Result {
        cni_version: SpecVersion::CURRENT,
        interfaces: Vec::new(),
        ips,
        routes: ipam.routes.clone(),
        dns,
    })
}

/// Releases what a failed ADD reserved, and only that.
fn undo(session: &mut PoolSession<'_>, attachment: &Attachment, reserved: &[IpAddr]) {
    if let Err(e) = session.locked.release_ips(attachment, reserved) {
        log::error!(
            "failed to release {} reserved by the failed ADD: {e}",
            libcni::logging::joined(reserved)
        );
    }
    if let Err(e) = session.release_cluster_ips(reserved) {
        log::error!(
            "failed to release the cluster reservations of {} (failed ADD): {e}",
            libcni::logging::joined(reserved)
        );
    }
}

fn alloc_error(set: usize, source: AllocError) -> Error {
    host_local::Error::Alloc { set, source }.into()
}

/// One address of `set` for `attachment`, with its subnet's prefix length.
fn allocate_one(
    session: &mut PoolSession<'_>,
    set: &RangeSet,
    set_idx: usize,
    attachment: &Attachment,
    wanted: Option<IpAddr>,
) -> Result<IpNetwork, Error> {
    if let Some(ip) = wanted {
        if session.state.block_of(ip).is_some() {
            let node_set = session.node_set(set).ok_or(Error::RequestedExcluded(ip))?;
            return allocate(
                &mut session.locked,
                &node_set,
                set_idx,
                attachment,
                Some(ip),
            )
            .map(|a| a.address)
            .map_err(|e| match e {
                AllocError::NotInRangeSet { ip, .. } => Error::RequestedExcluded(ip),
                other => alloc_error(set_idx, other),
            });
        }
        return reserve_outside_blocks(session, set, set_idx, attachment, ip);
    }

    // At most one claim per address: a fresh block always has room.
    for claimed in [false, true] {
        if let Some(node_set) = session.node_set(set) {
            match allocate(&mut session.locked, &node_set, set_idx, attachment, None) {
                Ok(allocation) => return Ok(allocation.address),
                Err(AllocError::Exhausted(_)) => {}
                Err(other) => return Err(alloc_error(set_idx, other)),
            }
        }
        if claimed {
            break;
        }
        session.claim_block(set)?;
    }
    Err(Error::Internal(format!(
        "a block claimed for range set {set_idx} had no free address"
    )))
}

fn reserve_outside_blocks(
    session: &mut PoolSession<'_>,
    set: &RangeSet,
    set_idx: usize,
    attachment: &Attachment,
    ip: IpAddr,
) -> Result<IpNetwork, Error> {
    let range = set
        .range_for(ip)
        .ok_or(Error::RequestedExcluded(ip))?
        .clone();
    if ip == range.gateway {
        return Err(alloc_error(set_idx, AllocError::RequestedGateway(ip)));
    }
    if session.cluster.exclude.iter().any(|n| n.contains(ip)) {
        return Err(Error::RequestedExcluded(ip));
    }
    // Locally first: an address this node already leases needs no key.
    if !session.locked.reserve(attachment, ip, set_idx)? {
        return Err(alloc_error(
            set_idx,
            AllocError::RequestedTaken {
                ip,
                set: set.to_string(),
            },
        ));
    }
    if let Err(e) = session.reserve_cluster_ip(ip, attachment) {
        if let Err(undo) = session.locked.release_ips(attachment, &[ip]) {
            log::error!("failed to release {ip} after its reservation failed: {undo}");
        }
        return Err(e);
    }
    Ok(IpNetwork::new(ip, range.subnet.prefix()).unwrap_or_else(|_| IpNetwork::from(ip)))
}
