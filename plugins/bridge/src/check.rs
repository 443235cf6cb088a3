//! CHECK: verifies, from the previous result, that what ADD made is still
//! there: the bridge (a bridge, outside the sandbox, same MAC, promiscuous
//! mode as configured), the container interface (a veth in the sandbox,
//! same MAC), the host veth (its peer, a port of the bridge), and the
//! result's addresses and routes in the container.
//!
//! The IPAM plugin is checked first. Unlike the reference, a layer 2
//! network (no IPAM) skips that step rather than failing with "no plugin
//! name provided".
//!
//! Addresses, routes and MACs are compared by [`libcni::iface`]'s CHECK
//! helpers, every IP of the result as in the reference. Unlike the
//! reference, a route that sbr moved into a table behind a source rule is
//! found there (the reference looks in main only, so its CHECK of a
//! bridge + sbr chain always fails).

use libcni::iface;
use libcni::invoke::{Delegator, Exec};
use libcni::netlink::sublink_plugin::IpamCallError;
use libcni::netlink::{LinkInfo, RouteSocket};
use libcni::skel::CmdArgs;
use libcni::types::v100;
use netlink_packet_route::link::LinkFlags;

use crate::add::open_netns;
use crate::bridge_link::{self, is_bridge};
use crate::config::{BridgeConf, ConfigError};
use crate::error::BridgeError;

const VETH_KIND: &str = "veth";

fn failed(message: String) -> BridgeError {
    BridgeError::Check(message)
}

pub fn check<E: Exec>(args: &CmdArgs, ipam: &Delegator<E>) -> Result<(), BridgeError> {
    let conf = BridgeConf::from_conf(&args.conf, &args.args)?;
    let netns = open_netns(&args.netns)?;
    if let Some(plugin) = &conf.ipam_type {
        ipam.check(plugin, args.conf.bytes())
            .map_err(|source| IpamCallError::new("IPAM CHECK with", plugin, source))?;
    }
    let prev = args
        .conf
        .prev_result()?
        .ok_or(BridgeError::PrevResultMissing)?;
    let prev = v100::Result::try_from(prev).map_err(BridgeError::PrevResult)?;

    let mut host = RouteSocket::open_current()?;
    let mut container = RouteSocket::open_in(&netns)?;

    let bridge = check_bridge(&mut host, &conf, &prev)?;
    let (_, container_iface) = iface::sandbox_interface(&prev, &args.ifname, &args.netns)
        .ok_or_else(|| {
            failed(format!(
                "Sandbox in prevResult doesn't match configured netns: {}",
                args.netns
            ))
        })?;
    let container_link = container.link_by_name(&args.ifname)?.ok_or_else(|| {
        failed(format!(
            "CNI created interface in container {} not found",
            args.ifname
        ))
    })?;
    if container_link.kind.as_deref() != Some(VETH_KIND) {
        return Err(failed(format!(
            "Container interface {} is not a veth",
            args.ifname
        )));
    }
    iface::check_mac(container_iface, &container_link)?;
    check_host_veth(&mut host, &conf, &prev, &bridge, &container_link)?;
    // Every IP of the result, whichever interface it names, as the
    // reference checks them: bridge's own results put all on the container.
    let ips: Vec<&v100::IpConfig> = prev.ips.iter().collect();
    iface::check_addresses(&mut container, &container_link, &ips)?;
    Ok(iface::check_routes(&mut container, &prev.routes)?)
}

fn check_bridge(
    host: &mut RouteSocket,
    conf: &BridgeConf,
    prev: &v100::Result,
) -> Result<LinkInfo, BridgeError> {
    let not_found = || {
        failed(format!(
            "CNI created bridge {} in host namespace was not found",
            conf.bridge
        ))
    };
    let entry = prev
        .interfaces
        .iter()
        .find(|i| i.name == conf.bridge)
        .ok_or_else(not_found)?;
    if !entry.sandbox.is_empty() {
        return Err(failed(format!(
            "Interface {} should not be in sandbox",
            entry.name
        )));
    }
    let link = host.link_by_name(&conf.bridge)?.ok_or_else(not_found)?;
    if !is_bridge(&link) {
        return Err(failed(format!(
            "Interface {} does not have link type of bridge",
            link.name
        )));
    }
    iface::check_mac(entry, &link)?;
    let promisc = bridge_link::link_flags(host, link.index)?.contains(LinkFlags::Promisc);
    if promisc != conf.promisc_mode {
        return Err(failed(format!(
            "Bridge interface {} configured Promisc Mode {} doesn't match current state: {}",
            link.name, conf.promisc_mode, promisc
        )));
    }
    Ok(link)
}

/// Some other result interface must be a veth whose peer is the container
/// interface and whose master is the bridge. Non-veth entries (the
/// `<bridge>.<vlan>` interface) are skipped.
fn check_host_veth(
    host: &mut RouteSocket,
    conf: &BridgeConf,
    prev: &v100::Result,
    bridge: &LinkInfo,
    container: &LinkInfo,
) -> Result<(), BridgeError> {
    for (index, entry) in prev
        .interfaces
        .iter()
        .enumerate()
        .filter(|(_, i)| i.name != conf.bridge && i.sandbox.is_empty())
    {
        // A name from the runtime, looked up in the host: checked as the
        // configuration's link names are.
        let key = format!("prevResult.interfaces[{index}].name");
        libcni::link_name::check_key(&key, &entry.name).map_err(ConfigError::from)?;
        let Some(link) = host.link_by_name(&entry.name)? else {
            return Err(failed(format!("Interface name {} not found", entry.name)));
        };
        if link.kind.as_deref() != Some(VETH_KIND) {
            continue;
        }
        let peers = link.parent == Some(container.index) && container.parent == Some(link.index);
        if peers && link.master == Some(bridge.index) {
            return Ok(iface::check_mac(entry, &link)?);
        }
    }
    Err(failed(format!(
        "CNI veth created for bridge {} was not found",
        conf.bridge
    )))
}
