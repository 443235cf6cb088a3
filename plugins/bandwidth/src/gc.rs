//! GC: delete the ifb devices of this network's attachments that the
//! runtime no longer lists in `cni.dev/valid-attachments`.
//!
//! An ifb's name is a hash of network name and container ID, so the names
//! of the valid attachments can be computed, but a name alone does not
//! tell which network a device belongs to: the `bwp` devices of another
//! network (or of another runtime sharing the host) would look stale too.
//! So ADD writes the network (and container ID) into the device's alias
//! (`cni-bandwidth:<network>:<container ID>`), and GC deletes only `ifb`
//! links whose alias names this network and whose name is none of the
//! valid attachments' names. Devices made by the reference plugin carry no
//! alias and are kept: erring towards keeping is the safe side of GC.

use std::collections::BTreeSet;

use libcni::error::ErrorList;
use libcni::netlink::RouteSocket;
use libcni::skel::CmdArgs;

use crate::add::alias_network;
use crate::config::{self, IFB_PREFIX};
use crate::error::BandwidthError;

pub fn gc(args: &CmdArgs) -> Result<(), BandwidthError> {
    config::parse(args)?;
    let network = &args.conf.name;
    let valid: BTreeSet<String> = args
        .conf
        .valid_attachments
        .iter()
        .map(|a| config::ifb_name(network, &a.container_id))
        .collect();
    let mut socket = RouteSocket::open_current()?;
    let candidates: Vec<(u32, String)> = socket
        .list_links()?
        .into_iter()
        .filter(|l| l.kind.as_deref() == Some("ifb") && l.name.starts_with(IFB_PREFIX))
        .filter(|l| !valid.contains(&l.name))
        .map(|l| (l.index, l.name))
        .collect();
    let mut failures = Vec::new();
    for (index, name) in candidates {
        let identity = socket.link_identity(index)?;
        let ours = identity
            .and_then(|i| i.alias)
            .is_some_and(|alias| alias_network(&alias) == Some(network.as_str()));
        if !ours {
            log::debug!("gc: {name} is not this network's (alias), kept");
            continue;
        }
        log::debug!("gc: deleting {name}: no valid attachment of {network} has it");
        match socket.delete_link(index) {
            Err(e) if !e.is_not_found() => failures.push(BandwidthError::from(e)),
            _ => {}
        }
    }
    match ErrorList::combine(failures, BandwidthError::Several) {
        Some(error) => Err(error),
        None => Ok(()),
    }
}
