//! DEL: idempotent and best effort.
//!
//! Every step runs even when an earlier one failed, and the failures are
//! reported together: the container interface goes (a namespace or link
//! already gone is success; its host end, with the gateway addresses and
//! host routes, goes with it), IPAM DEL, then the masquerade rules.
//!
//! The masquerade teardown gets the container's addresses from the link
//! before deleting it, and from the prevResult; with neither (the netns
//! gone, or containerd's second DEL without `CNI_NETNS` and prevResult),
//! the rules are still found by their attachment identity. The reference
//! skips the teardown then, leaking its iptables chain.
//!
//! Only `ipMasq` and `ipam.type` are read, so a configuration that ADD
//! refused can still be deleted; without an IPAM plugin there is no lease.

use ipnetwork::IpNetwork;
use libcni::invoke::{Delegator, Exec};
use libcni::ipmasq;
use libcni::netlink::retire;
use libcni::netlink::sublink::DeleteError;
use libcni::netlink::sublink_plugin;
use libcni::netlink::RouteSocket;
use libcni::netns::NetNs;
use libcni::skel::CmdArgs;
use libcni::veth;

use crate::config::TeardownConf;
use crate::error::PtpError;

/// `RT_SCOPE_UNIVERSE`: the addresses masquerade rules are made for.
const SCOPE_UNIVERSE: u8 = 0;

pub fn del<E: Exec>(args: &CmdArgs, ipam: &Delegator<E>) -> Result<(), PtpError> {
    let conf = TeardownConf::from_conf(&args.conf)?;
    let mut errors: Vec<PtpError> = Vec::new();

    let mut on_link = Vec::new();
    if !args.netns.is_empty() {
        match delete_container_interface(&args.netns, &args.ifname) {
            Ok(found) => on_link = found,
            Err(e) => errors.push(e.into()),
        }
    }
    let ips = veth::addresses_for_del(on_link, args);

    if let Some(plugin) = &conf.ipam_type {
        if let Err(e) = sublink_plugin::ipam_del(args, ipam, plugin) {
            errors.push(e.into());
        }
    }
    if conf.ip_masq {
        if let Err(e) = ipmasq::teardown(&conf.network, &args.container_id, &args.ifname, &ips) {
            errors.push(e.into());
        }
    }
    PtpError::from_many(errors).map_or(Ok(()), Err)
}

/// Deletes `ifname` in the namespace at `path`, returning its global
/// addresses; a namespace or link already gone is success with none.
fn delete_container_interface(path: &str, ifname: &str) -> Result<Vec<IpNetwork>, DeleteError> {
    let netns = match NetNs::open(path) {
        Ok(netns) => netns,
        Err(source) if source.is_not_exist() => {
            log::debug!("netns {path} is gone; nothing to delete in it");
            return Ok(Vec::new());
        }
        Err(source) => {
            return Err(DeleteError::NetNs {
                path: path.to_string(),
                source,
            })
        }
    };
    let failed = |source| DeleteError::Netlink {
        ifname: ifname.to_string(),
        source,
    };
    let mut socket = RouteSocket::open_in(&netns).map_err(failed)?;
    let Some(link) = socket.link_by_name(ifname).map_err(failed)? else {
        log::debug!("{ifname} was already gone");
        return Ok(Vec::new());
    };
    let addresses = socket
        .list_addresses(Some(link.index))
        .map_err(failed)?
        .into_iter()
        .filter(|a| a.scope == SCOPE_UNIVERSE)
        .map(|a| a.address)
        .collect();
    // Deleted detached: the kernel's unregistration of the pair was most
    // of a DEL's time (see `retire`).
    retire::retire(&netns, socket, link.index).map_err(failed)?;
    log::info!("deleted {ifname} and its veth peer in the host");
    Ok(addresses)
}
