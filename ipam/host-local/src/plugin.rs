//! The five verbs, over the skeleton's [`CmdArgs`].
//!
//! - ADD reserves one address per range set, in set order, under one hold
//!   of the store lock; if any set fails, the addresses this ADD reserved
//!   are released again (only those: unlike the reference, a failed ADD
//!   never releases what the attachment held before it).
//! - DEL releases everything the attachment holds, legacy leases of its
//!   container included when it holds nothing under its own name. It needs
//!   only `name` and `ipam.dataDir` from the configuration, so a
//!   configuration whose ranges have become invalid can still release, and
//!   it ignores `CNI_ARGS`.
//! - CHECK succeeds when the attachment holds any address.
//! - GC releases every lease whose holder is not in the runtime's list of
//!   valid attachments (`cni.dev/valid-attachments`, or the older
//!   `cni.dev/attachments`); a legacy lease naming only a container is kept
//!   while any valid attachment belongs to that container. `lock`,
//!   `last_reserved_ip.*` and any file that is not a lease are left alone.
//!   A configuration with neither key releases nothing: runtimes that send
//!   no list (the Go `cnitool gc`, which has already deleted the stale
//!   attachments) must not lose every lease, and must not fail either.
//! - STATUS fails with code 50 when a range set has no free address left,
//!   since an ADD would then fail.

use std::collections::HashSet;
use std::net::IpAddr;

use libcni::plugin_conf::{LEGACY_ATTACHMENTS_KEY, VALID_ATTACHMENTS_KEY};
use libcni::skel::{about_string, CmdArgs, Plugin};
use libcni::types::{v100, AnyResult, Dns};
use libcni::SpecVersion;

use crate::allocator::{self, allocate};
use crate::config::{IpamConfig, StoreConfig};
use crate::data_dir;
use crate::dns::read_resolv_conf;
use crate::error::Error;
use crate::lease::{Attachment, LeaseOwner};
use crate::store::Store;

/// The `CNI_ARGS` key naming a requested address.
pub const IP_ARG: &str = "IP";

/// The host-local plugin, for [`libcni::skel::plugin_main`].
#[derive(Debug, Clone, Copy, Default)]
pub struct HostLocal;

impl Plugin for HostLocal {
    type Error = Error;

    fn about(&self) -> String {
        about_string("host-local", env!("CARGO_PKG_VERSION"))
    }

    fn add(&self, args: &CmdArgs) -> Result<AnyResult, Error> {
        let cni_args = args.parse_args(&[IP_ARG])?;
        let config = IpamConfig::from_value(args.conf.raw(), cni_args.get(IP_ARG))?;
        let attachment = Attachment::new(&args.container_id, &args.ifname)?;
        data_dir::confine(&config.store, true)?;
        Ok(AnyResult::V1(add(&config, &attachment)?))
    }

    fn del(&self, args: &CmdArgs) -> Result<(), Error> {
        let config = StoreConfig::from_value(args.conf.raw())?;
        let attachment = Attachment::new(&args.container_id, &args.ifname)?;
        data_dir::confine(&config, false)?;
        del(&config, &attachment)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        let cni_args = args.parse_args(&[IP_ARG])?;
        let config = IpamConfig::from_value(args.conf.raw(), cni_args.get(IP_ARG))?;
        let attachment = Attachment::new(&args.container_id, &args.ifname)?;
        data_dir::confine(&config.store, false)?;
        check(&config, &attachment)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), Error> {
        let config = StoreConfig::from_value(args.conf.raw())?;
        data_dir::confine(&config, false)?;
        let raw = args.conf.raw();
        if raw.get(VALID_ATTACHMENTS_KEY).is_none() && raw.get(LEGACY_ATTACHMENTS_KEY).is_none() {
            log::warn!(
                "GC without {VALID_ATTACHMENTS_KEY} or {LEGACY_ATTACHMENTS_KEY}: nothing released"
            );
            return Ok(());
        }
        let valid: Vec<(&str, &str)> = args
            .conf
            .valid_attachments
            .iter()
            .map(|a| (a.container_id.as_str(), a.ifname.as_str()))
            .collect();
        gc(&config, &valid)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), Error> {
        let config = IpamConfig::from_value(args.conf.raw(), None)?;
        data_dir::confine(&config.store, false)?;
        status(&config)
    }
}

/// ADD: one address per range set, then the result (in the current
/// version; the skeleton converts it to the configuration's).
pub fn add(config: &IpamConfig, attachment: &Attachment) -> Result<v100::Result, Error> {
    let dns = match &config.resolv_conf {
        Some(path) => read_resolv_conf(path).map_err(|source| Error::ResolvConf {
            path: path.clone(),
            source,
        })?,
        None => Dns::default(),
    };

    let store = Store::open(
        &config.store.data_dir,
        &config.store.network,
        config.store.lock_timeout,
    )?;
    let mut locked = store.lock(config.range_sets.len())?;

    // The same address asked for twice is one request, as in the
    // reference (which keys requests by address).
    let mut requested: Vec<IpAddr> = Vec::new();
    for ip in &config.requested_ips {
        if !requested.contains(ip) {
            requested.push(*ip);
        }
    }

    let mut ips = Vec::new();
    let mut reserved = Vec::new();
    let mut failure = None;
    for (set_idx, set) in config.range_sets.iter().enumerate() {
        let wanted = requested
            .iter()
            .position(|ip| set.contains(*ip))
            .map(|pos| requested.remove(pos));
        match allocate(&mut locked, set, set_idx, attachment, wanted) {
            Ok(allocation) => {
                reserved.push(allocation.address.ip());
                ips.push(v100::IpConfig {
                    interface: None,
                    address: allocation.address,
                    gateway: Some(allocation.gateway),
                });
            }
            Err(source) => {
                failure = Some(Error::Alloc {
                    set: set_idx,
                    source,
                });
                break;
            }
        }
    }
    if failure.is_none() && !requested.is_empty() {
        failure = Some(Error::UnfulfilledRequest(requested));
    }
    if let Some(error) = failure {
        if let Err(e) = locked.release_ips(attachment, &reserved) {
            log::error!(
                "failed to release {} reserved by the failed ADD: {e}",
                libcni::logging::joined(&reserved)
            );
        }
        return Err(error);
    }
    log::info!(
        "reserved {} in network {} for {attachment}",
        libcni::logging::joined(&reserved),
        config.store.network
    );

    Ok(v100::Result {
        cni_version: SpecVersion::CURRENT,
        interfaces: Vec::new(),
        ips,
        routes: config.routes.clone(),
        dns,
    })
}

/// DEL: releases what `attachment` holds; an unknown attachment or a store
/// that was never created is no error.
pub fn del(config: &StoreConfig, attachment: &Attachment) -> Result<(), Error> {
    let Some(store) = open_existing(config)? else {
        return Ok(());
    };
    let released = store.lock(config.range_sets)?.release(attachment)?;
    if !released.is_empty() {
        log::info!(
            "released {} in network {} of {attachment}",
            libcni::logging::joined(&released),
            config.network
        );
    }
    Ok(())
}

/// CHECK: the attachment must hold an address.
pub fn check(config: &IpamConfig, attachment: &Attachment) -> Result<(), Error> {
    let holds = match open_existing(&config.store)? {
        Some(store) => store.lock(config.range_sets.len())?.holds_any(attachment)?,
        None => false,
    };
    if holds {
        Ok(())
    } else {
        Err(Error::NotFound(attachment.container_id().to_string()))
    }
}

/// GC: releases every lease not held by one of `valid` (container ID,
/// ifname) pairs.
pub fn gc(config: &StoreConfig, valid: &[(&str, &str)]) -> Result<(), Error> {
    let Some(store) = open_existing(config)? else {
        return Ok(());
    };
    let valid = ValidAttachments::new(valid);
    let report = store
        .lock(config.range_sets)?
        .gc(|owner| valid.keeps(owner))?;
    for lease in &report.released {
        log::info!(
            "GC released {} in network {} (held by {})",
            lease.ip,
            config.network,
            lease.owner.as_ref().map_or_else(
                || "nobody".to_string(),
                |o| format!("{}/{}", o.container_id(), o.ifname().unwrap_or("*"))
            )
        );
    }
    if report.errors.is_empty() {
        Ok(())
    } else {
        Err(Error::Gc(report.errors))
    }
}

/// The leases a GC keeps: those of a valid attachment, and legacy leases
/// (naming only a container) of a container with any valid attachment.
#[derive(Debug, Clone)]
pub struct ValidAttachments<'a> {
    attachments: HashSet<(&'a str, &'a str)>,
    containers: HashSet<&'a str>,
}

impl<'a> ValidAttachments<'a> {
    /// From (container ID, ifname) pairs as the runtime sent them.
    pub fn new(valid: &[(&'a str, &'a str)]) -> ValidAttachments<'a> {
        let attachments: HashSet<(&str, &str)> = valid
            .iter()
            .map(|(id, ifname)| (id.trim(), *ifname))
            .collect();
        let containers = attachments.iter().map(|(id, _)| *id).collect();
        ValidAttachments {
            attachments,
            containers,
        }
    }

    pub fn keeps(&self, owner: &LeaseOwner) -> bool {
        match owner {
            LeaseOwner::Attachment {
                container_id,
                ifname,
            } => self
                .attachments
                .contains(&(container_id.as_str(), ifname.as_str())),
            LeaseOwner::Container(id) => self.containers.contains(id.as_str()),
        }
    }
}

/// STATUS: every range set must have a free address.
pub fn status(config: &IpamConfig) -> Result<(), Error> {
    let Some(store) = open_existing(&config.store)? else {
        return Ok(());
    };
    for (set_idx, set) in config.range_sets.iter().enumerate() {
        if allocator::next_free(&store, set, set_idx)?.is_none() {
            return Err(Error::Exhausted {
                set: set_idx,
                ranges: set.to_string(),
            });
        }
    }
    Ok(())
}

/// The store, without creating it: verbs other than ADD have nothing to
/// do in a store that does not exist.
fn open_existing(config: &StoreConfig) -> Result<Option<Store>, Error> {
    Ok(Store::open_existing(
        &config.data_dir,
        &config.network,
        config.lock_timeout,
    )?)
}

#[cfg(test)]
mod tests;
