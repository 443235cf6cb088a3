//! `route_localnet` on the host interface that routes to the container.
//!
//! A connection to `127.0.0.1:<hostPort>` is DNATed in the output hook
//! and leaves with source 127.0.0.1, which the kernel drops as a martian
//! on an interface without `route_localnet`; the masquerade rule then
//! rewrites the source. IPv6 has no equivalent, so `[::1]:<hostPort>`
//! cannot work (as with the reference).

use std::net::Ipv4Addr;

use libcni::netlink::{NetlinkError, RouteSocket};
use libcni::sysctl::{self, SysctlError};
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

#[derive(Debug, thiserror::Error)]
pub enum LocalnetError {
    #[error(transparent)]
    Sysctl(#[from] SysctlError),
}

/// Sets `net/ipv4/conf/<interface>/route_localnet=1` for the interface
/// the host routes `container` through, in the calling thread's
/// namespace. Returns that interface, or `None` when no route was found
/// (then nothing is changed, as in the reference).
pub fn enable_route_localnet(container: Ipv4Addr) -> Result<Option<String>, LocalnetError> {
    let interface = match routing_interface(container) {
        Ok(interface) => interface,
        Err(e) => {
            // The reference ignores this silently: a container the host
            // cannot route to gets no localhost forwarding either way.
            log::debug!("cannot find the interface routing to {container}: {e}");
            None
        }
    };
    let Some(interface) = interface else {
        return Ok(None);
    };
    sysctl::set(&format!("net/ipv4/conf/{interface}/route_localnet"), "1")?;
    Ok(Some(interface))
}

/// The output interface of the route the kernel picks for `destination`
/// (`ip route get`).
pub fn routing_interface(destination: Ipv4Addr) -> Result<Option<String>, NetlinkError> {
    let mut socket = RouteSocket::open_current()?;
    let mut request = RouteMessage::default();
    request.header.address_family = AddressFamily::Inet;
    request.header.destination_prefix_length = 32;
    request
        .attributes
        .push(RouteAttribute::Destination(RouteAddress::Inet(destination)));
    let replies = socket.request(RouteNetlinkMessage::GetRoute(request), 0)?;
    let oif = replies.iter().find_map(|reply| match reply {
        RouteNetlinkMessage::NewRoute(route) => route.attributes.iter().find_map(|a| match a {
            RouteAttribute::Oif(index) => Some(*index),
            _ => None,
        }),
        _ => None,
    });
    let Some(oif) = oif else {
        return Ok(None);
    };
    Ok(socket.link_by_index(oif)?.map(|link| link.name))
}
