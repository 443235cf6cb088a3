//! CHECK: verifies, from the previous result, that what ADD made is still
//! there: the bridge (a bridge, outside the sandbox, same MAC, promiscuous
//! mode as configured), the container interface (a veth in the sandbox,
//! same MAC), the host veth (its peer, a port of the bridge), and the
//! result's addresses and routes in the container.
//!
//! The IPAM plugin is checked first. Unlike the reference, a layer 2
//! network (no IPAM) skips that step rather than failing with "no plugin
//! name provided".

use ipnetwork::IpNetwork;
use libcni::invoke::{Delegator, Exec};
use libcni::netlink::{IpFamily, LinkInfo, Route, RouteSocket};
use libcni::skel::CmdArgs;
use libcni::types::v100;
use netlink_packet_route::link::LinkFlags;

use crate::add::open_netns;
use crate::bridge_link::{self, is_bridge};
use crate::config::BridgeConf;
use crate::error::BridgeError;

const VETH_KIND: &str = "veth";
/// `RT_TABLE_MAIN`, where routes without a table go.
const MAIN_TABLE: u32 = 254;

fn failed(message: String) -> BridgeError {
    BridgeError::Check(message)
}

pub fn check<E: Exec>(args: &CmdArgs, ipam: &Delegator<E>) -> Result<(), BridgeError> {
    let conf = BridgeConf::from_conf(&args.conf, &args.args)?;
    let netns = open_netns(&args.netns)?;
    if let Some(plugin) = &conf.ipam_type {
        ipam.check(plugin, args.conf.bytes())
            .map_err(|source| BridgeError::Ipam {
                action: "IPAM CHECK with",
                plugin: plugin.clone(),
                source,
            })?;
    }
    let prev = args
        .conf
        .prev_result()?
        .ok_or_else(|| failed("Required prevResult missing".to_string()))?;
    let prev = v100::Result::try_from(prev).map_err(BridgeError::PrevResult)?;

    let mut host = RouteSocket::open_current()?;
    let mut container = RouteSocket::open_in(&netns)?;

    let bridge = check_bridge(&mut host, &conf, &prev)?;
    let container_iface = prev
        .interfaces
        .iter()
        .find(|i| i.name == args.ifname && i.sandbox == args.netns)
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
    check_mac(container_iface, &container_link)?;
    check_host_veth(&mut host, &conf, &prev, &bridge, &container_link)?;
    check_addresses(&mut container, &container_link, &prev.ips)?;
    check_routes(&mut container, &prev.routes)
}

fn check_mac(expected: &v100::Interface, link: &LinkInfo) -> Result<(), BridgeError> {
    if !expected.mac.is_empty() && !expected.mac.eq_ignore_ascii_case(&link.mac_string()) {
        return Err(failed(format!(
            "Interface {} MAC {} doesn't match the MAC found: {}",
            expected.name,
            expected.mac,
            link.mac_string()
        )));
    }
    Ok(())
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
    let iface = prev
        .interfaces
        .iter()
        .find(|i| i.name == conf.bridge)
        .ok_or_else(not_found)?;
    if !iface.sandbox.is_empty() {
        return Err(failed(format!(
            "Interface {} should not be in sandbox",
            iface.name
        )));
    }
    let link = host.link_by_name(&conf.bridge)?.ok_or_else(not_found)?;
    if !is_bridge(&link) {
        return Err(failed(format!(
            "Interface {} does not have link type of bridge",
            link.name
        )));
    }
    check_mac(iface, &link)?;
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
    for iface in prev
        .interfaces
        .iter()
        .filter(|i| i.name != conf.bridge && i.sandbox.is_empty())
    {
        let Some(link) = host.link_by_name(&iface.name)? else {
            return Err(failed(format!("Interface name {} not found", iface.name)));
        };
        if link.kind.as_deref() != Some(VETH_KIND) {
            continue;
        }
        let peers = link.parent == Some(container.index) && container.parent == Some(link.index);
        if peers && link.master == Some(bridge.index) {
            return check_mac(iface, &link);
        }
    }
    Err(failed(format!(
        "CNI veth created for bridge {} was not found",
        conf.bridge
    )))
}

fn network(net: IpNetwork) -> Option<IpNetwork> {
    IpNetwork::new(net.network(), net.prefix()).ok()
}

fn check_addresses(
    container: &mut RouteSocket,
    link: &LinkInfo,
    ips: &[v100::IpConfig],
) -> Result<(), BridgeError> {
    if ips.is_empty() {
        return Ok(());
    }
    let addresses: Vec<IpNetwork> = container
        .list_addresses(Some(link.index))?
        .into_iter()
        .map(|a| a.address)
        .collect();
    let routes = container.list_routes(None)?;
    for ip in ips {
        if !addresses.contains(&ip.address) {
            return Err(failed(format!(
                "Failed to match addr {} on interface {}",
                ip.address, link.name
            )));
        }
        let prefix = network(ip.address);
        let routed = routes
            .iter()
            .any(|r| r.table == Some(MAIN_TABLE) && network(r.destination) == prefix);
        if !routed {
            return Err(failed(format!(
                "Failed to find a route to {} for interface {}",
                prefix.map_or_else(|| ip.address.to_string(), |p| p.to_string()),
                link.name
            )));
        }
    }
    Ok(())
}

/// Every route of the result must be in the routing table; a default route
/// matches any default route of its family, as in the reference.
fn check_routes(
    container: &mut RouteSocket,
    wanted: &[libcni::types::Route],
) -> Result<(), BridgeError> {
    if wanted.is_empty() {
        return Ok(());
    }
    let v4 = container.list_routes(Some(IpFamily::V4))?;
    let v6 = container.list_routes(Some(IpFamily::V6))?;
    for route in wanted {
        let table: &[Route] = if route.dst.is_ipv4() { &v4 } else { &v6 };
        let in_table = route.table.unwrap_or(MAIN_TABLE);
        let default = route.dst.prefix() == 0;
        let found = table.iter().any(|r| {
            r.table == Some(in_table)
                && network(r.destination) == network(route.dst)
                && (default || route.gw.is_none() || r.gateway == route.gw)
        });
        if !found {
            return Err(failed(format!(
                "Expected Route {}{} not found in routing table",
                route.dst,
                route.gw.map(|g| format!(" via {g}")).unwrap_or_default()
            )));
        }
    }
    Ok(())
}
