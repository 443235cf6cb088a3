//! The host side of layer 3: which gateways the result names, the gateway
//! addresses on the bridge (or on the `<bridge>.<vlan>` interface of a VLAN
//! network), and IP forwarding.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use libcni::link_name;
use libcni::netlink::{LinkInfo, RouteSocket, VethPair};
use libcni::sysctl;
use libcni::types::{v100, Route};
use libcni::IpFamily;

use crate::bridge_port::{set_port_options, AdminState, PortOptions};
use crate::error::BridgeError;

use crate::vlan::{apply_port_vlans, BridgeVlans, PortVlans};

/// The container interface's position in the result's `interfaces`.
pub const CONTAINER_INTERFACE_INDEX: usize = 2;

/// Gateway addresses (address and prefix of the subnet they serve) to put
/// on the host, per family.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gateways {
    pub v4: Vec<IpNetwork>,
    pub v6: Vec<IpNetwork>,
}

impl Gateways {
    pub fn all(&self) -> impl Iterator<Item = &IpNetwork> {
        self.v4.iter().chain(self.v6.iter())
    }

    pub fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }
}

/// The first address after the network address (10.1.2.0/24 => 10.1.2.1).
pub fn first_host(network: IpNetwork) -> Option<IpAddr> {
    match network {
        IpNetwork::V4(n) => u32::from(n.network())
            .checked_add(1)
            .map(|a| IpAddr::V4(a.into())),
        IpNetwork::V6(n) => u128::from(n.network())
            .checked_add(1)
            .map(|a| IpAddr::V6(a.into())),
    }
}

fn default_route_dst(family: IpFamily) -> Option<IpNetwork> {
    IpNetwork::new(family.unspecified(), 0).ok()
}

/// Completes the IPAM result the way the reference does: every IP belongs
/// to the container interface; with `is_gateway`, an IP without gateway
/// gets the subnet's first address; with `is_default_gateway`, each family
/// gets a default route through its gateway unless one with a gateway is
/// already there. Returns the gateway addresses to put on the host.
pub fn complete_result(
    result: &mut v100::Result,
    is_gateway: bool,
    is_default_gateway: bool,
) -> Gateways {
    let mut gateways = Gateways::default();
    let mut default_route_found = [false, false];
    for ip in &mut result.ips {
        let family = IpFamily::of_network(&ip.address);
        let slot_index = usize::from(family == IpFamily::V6);
        ip.interface = Some(CONTAINER_INTERFACE_INDEX);
        if ip.gateway.is_none() && is_gateway {
            ip.gateway = first_host(ip.address);
        }
        if let (true, Some(dst)) = (is_default_gateway, default_route_dst(family)) {
            let found = default_route_found.get(slot_index).copied().unwrap_or(true)
                || result.routes.iter().any(|r| r.gw.is_some() && r.dst == dst);
            if !found {
                result.routes.push(Route::new(dst, ip.gateway));
            }
            if let Some(slot) = default_route_found.get_mut(slot_index) {
                *slot = true;
            }
        }
        if is_gateway {
            if let Some(gw) = ip
                .gateway
                .and_then(|g| IpNetwork::new(g, ip.address.prefix()).ok())
            {
                if family == IpFamily::V4 {
                    gateways.v4.push(gw);
                } else {
                    gateways.v6.push(gw);
                }
            }
        }
    }
    gateways
}

/// What [`ensure_address`] must do about the link's current addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddressPlan {
    AlreadyThere,
    /// Add the address after removing these conflicting ones.
    Add {
        remove: Vec<IpNetwork>,
    },
    Conflict(IpNetwork),
}

/// The reference's rule: the exact address is fine; any other IPv4
/// address, or an IPv6 one whose subnet overlaps, is a conflict that
/// `force` resolves by removing it; non-overlapping IPv6 subnets coexist.
pub fn plan_address(current: &[IpNetwork], wanted: IpNetwork, force: bool) -> AddressPlan {
    let mut remove = Vec::new();
    for &have in current.iter().filter(|a| a.is_ipv4() == wanted.is_ipv4()) {
        if have == wanted {
            return AddressPlan::AlreadyThere;
        }
        let conflicts =
            wanted.is_ipv4() || have.contains(wanted.ip()) || wanted.contains(have.ip());
        if conflicts {
            if !force {
                return AddressPlan::Conflict(have);
            }
            remove.push(have);
        }
    }
    AddressPlan::Add { remove }
}

/// Puts gateway address `wanted` on `link`; see [`plan_address`].
/// Whether this call added it (`false`: it was there, or a concurrent ADD
/// added it first).
pub fn ensure_address(
    socket: &mut RouteSocket,
    link: &LinkInfo,
    wanted: IpNetwork,
    force: bool,
) -> Result<bool, BridgeError> {
    let current: Vec<IpNetwork> = socket
        .list_addresses(Some(link.index))?
        .into_iter()
        .map(|a| a.address)
        .collect();
    match plan_address(&current, wanted, force) {
        AddressPlan::AlreadyThere => Ok(false),
        AddressPlan::Conflict(_) => Err(BridgeError::AddressConflict(
            link.name.clone(),
            wanted.to_string(),
        )),
        AddressPlan::Add { remove } => {
            for old in remove {
                socket.del_address(link.index, old).map_err(|e| {
                    e.context(format!("could not remove IP address from {:?}", link.name))
                })?;
            }
            match socket.add_address(link.index, wanted) {
                Ok(()) => Ok(true),
                // Another ADD on the same network added it meanwhile.
                Err(e) if e.is_exists() => Ok(false),
                Err(e) => Err(e
                    .context(format!("could not add IP address to {:?}", link.name))
                    .into()),
            }
        }
    }
}

/// Turns routing on in the host namespace for the families that have
/// gateways.
pub fn enable_forwarding(gateways: &Gateways) -> Result<(), BridgeError> {
    if !gateways.v4.is_empty() {
        sysctl::enable_forwarding(IpFamily::V4)?;
    }
    if !gateways.v6.is_empty() {
        sysctl::enable_forwarding(IpFamily::V6)?;
    }
    Ok(())
}

/// The interface that holds the gateway addresses of a VLAN network: a
/// veth pair in the host namespace whose one end, `<bridge>.<vlan>`, keeps
/// the addresses and whose other end is a bridge port in the VLAN. Reused
/// when it exists; never deleted, since every container of the network
/// shares it. One that outlived its bridge (deleted and made again) has
/// its port end put back on the bridge.
pub fn ensure_vlan_gateway(
    socket: &mut RouteSocket,
    vlans: &mut dyn BridgeVlans,
    bridge: &LinkInfo,
    name: &str,
    port_vlans: &PortVlans,
) -> Result<LinkInfo, BridgeError> {
    if let Some(existing) = socket.link_by_name(name)? {
        return reattach_if_detached(socket, vlans, bridge, existing, port_vlans);
    }
    let port_name = link_name::random_veth_name().map_err(BridgeError::Random)?;
    let pair = VethPair {
        name: &port_name,
        peer_name: name,
        peer_netns: None,
        mtu: (bridge.mtu != 0).then_some(bridge.mtu),
        mac: None,
        peer_mac: None,
        master: None,
    };
    match socket.create_veth_pair(&pair) {
        Ok(()) => {}
        // A concurrent ADD made it first.
        Err(e) if e.is_exists() => {
            if let Some(existing) = socket.link_by_name(name)? {
                return Ok(existing);
            }
            return Err(e.into());
        }
        Err(e) => return Err(e.into()),
    }
    let made = attach_vlan_gateway(socket, vlans, bridge, name, &port_name, port_vlans);
    if made.is_err() {
        // Half made: remove it so the next ADD starts over.
        let _ = socket.delete_link(port_name.as_str());
    }
    made
}

/// The gateway interface `existing` as it is when its port end (its veth
/// peer) is on `bridge`; otherwise the port end is attached again. A link
/// of that name that is no veth, or whose peer is not in this namespace,
/// is left as it is.
fn reattach_if_detached(
    socket: &mut RouteSocket,
    vlans: &mut dyn BridgeVlans,
    bridge: &LinkInfo,
    existing: LinkInfo,
    port_vlans: &PortVlans,
) -> Result<LinkInfo, BridgeError> {
    let Some(peer) = existing
        .parent
        .filter(|_| existing.kind.as_deref() == Some("veth"))
    else {
        return Ok(existing);
    };
    let Some(port) = socket.link_by_index(peer)? else {
        return Ok(existing);
    };
    if port.master == Some(bridge.index) {
        return Ok(existing);
    }
    log::info!(
        "gateway interface {:?} was off bridge {:?} (the bridge was made again): attaching {:?}",
        existing.name,
        bridge.name,
        port.name
    );
    attach_vlan_gateway(
        socket,
        vlans,
        bridge,
        &existing.name,
        &port.name,
        port_vlans,
    )
}

fn attach_vlan_gateway(
    socket: &mut RouteSocket,
    vlans: &mut dyn BridgeVlans,
    bridge: &LinkInfo,
    name: &str,
    port_name: &str,
    port_vlans: &PortVlans,
) -> Result<LinkInfo, BridgeError> {
    let not_found = |n: &str| {
        libcni::netlink::NetlinkError::Unexpected(format!("{n:?} not found after creation"))
    };
    let port = socket
        .link_by_name(port_name)?
        .ok_or_else(|| not_found(port_name))?;
    socket
        .set_master(port.index, Some(bridge.index))
        .map_err(|e| e.context(format!("attach {port_name:?} to bridge {:?}", bridge.name)))?;
    set_port_options(
        socket,
        port.index,
        PortOptions {
            hairpin: false,
            isolated: false,
        },
        AdminState::Unchanged,
    )?;
    apply_port_vlans(vlans, port.index, port_name, port_vlans)?;
    socket.set_link_up(port.index)?;
    socket.set_link_up(name)?;
    Ok(socket.link_by_name(name)?.ok_or_else(|| not_found(name))?)
}

#[cfg(test)]
mod tests;
