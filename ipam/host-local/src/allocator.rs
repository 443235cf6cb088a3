//! Picking one address of one range set for an attachment.
//!
//! A requested address is reserved if it is free (no duplicate check: the
//! runtime asked for exactly that address). Otherwise the attachment must
//! not already hold an address of the set, and the round-robin walk
//! ([`RangeSet::iter_from`]) tries addresses from just after the set's last
//! reservation until one can be reserved. Costs: one lookup of the
//! attachment in the index, then one probe per address tried, which in the
//! steady state is the first one.

use std::net::IpAddr;

use ipnetwork::IpNetwork;

use crate::lease::Attachment;
use crate::range_set::RangeSet;
use crate::store::{LockedStore, Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum AllocError {
    #[error("{ip} not in range set {set}")]
    NotInRangeSet { ip: IpAddr, set: String },
    #[error("requested ip {0} is subnet's gateway")]
    RequestedGateway(IpAddr),
    #[error("requested IP address {ip} is not available in range set {set}")]
    RequestedTaken { ip: IpAddr, set: String },
    #[error("{ip} has been allocated to {container_id}, duplicate allocation is not allowed")]
    Duplicate { ip: IpAddr, container_id: String },
    #[error("no IP addresses available in range set: {0}")]
    Exhausted(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// One reserved address with what the result reports for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    /// The address with its subnet's prefix length.
    pub address: IpNetwork,
    pub gateway: IpAddr,
}

fn allocation(ip: IpAddr, prefix: u8, gateway: IpAddr) -> Allocation {
    Allocation {
        // The prefix comes from a validated subnet of the same family.
        address: IpNetwork::new(ip, prefix).unwrap_or_else(|_| IpNetwork::from(ip)),
        gateway,
    }
}

/// Reserves an address of `set` (the configuration's set number `set_idx`)
/// for `attachment`.
pub fn allocate(
    store: &mut LockedStore<'_>,
    set: &RangeSet,
    set_idx: usize,
    attachment: &Attachment,
    requested: Option<IpAddr>,
) -> Result<Allocation, AllocError> {
    if let Some(ip) = requested {
        let ip = ip.to_canonical();
        let range = set.range_for(ip).ok_or_else(|| AllocError::NotInRangeSet {
            ip,
            set: set.to_string(),
        })?;
        if ip == range.gateway {
            return Err(AllocError::RequestedGateway(ip));
        }
        if !store.reserve(attachment, ip, set_idx)? {
            return Err(AllocError::RequestedTaken {
                ip,
                set: set.to_string(),
            });
        }
        return Ok(allocation(ip, range.subnet.prefix(), range.gateway));
    }

    if let Some(ip) = store
        .leases_of(attachment)?
        .into_iter()
        .find(|ip| set.contains(*ip))
    {
        return Err(AllocError::Duplicate {
            ip,
            container_id: attachment.container_id().to_string(),
        });
    }

    let last = store.last_reserved_ip(set_idx);
    for (ip, range) in set.iter_from(last) {
        if store.reserve(attachment, ip, set_idx)? {
            return Ok(allocation(ip, range.subnet.prefix(), range.gateway));
        }
    }
    Err(AllocError::Exhausted(set.to_string()))
}

/// The address the next allocation from `set` would get, or `None` when
/// the set is full. Reads without the lock (STATUS is advisory); stops at
/// the first free address, so it only walks the whole set when the set is
/// full or nearly so.
pub fn next_free(
    store: &Store,
    set: &RangeSet,
    set_idx: usize,
) -> Result<Option<IpAddr>, StoreError> {
    for (ip, _) in set.iter_from(store.last_reserved_ip(set_idx)) {
        if store.is_free(ip)? {
            return Ok(Some(ip));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests;
