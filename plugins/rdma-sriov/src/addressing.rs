//! The addresses and routes of an IPAM result, put on the pod's interface.

use std::net::IpAddr;

use libcni::netlink::{NetlinkError, Route, RouteSocket};
use libcni::types::v100;

/// Adds every address of `result` meant for interface 0 (or for no
/// interface in particular) to link `index`, then its routes through that
/// link. A route without a gateway goes through the gateway of its family
/// when IPAM gave one, as the reference plugins do.
pub fn configure(
    pod: &mut RouteSocket,
    index: u32,
    result: &v100::Result,
) -> Result<(), NetlinkError> {
    let mine = |ip: &&v100::IpConfig| ip.interface.is_none_or(|i| i == 0);
    for ip in result.ips.iter().filter(mine) {
        match pod.add_address(index, ip.address) {
            Ok(()) => {}
            Err(e) if e.is_exists() => {}
            Err(e) => return Err(e),
        }
    }
    let gateway_of = |v4: bool| -> Option<IpAddr> {
        result
            .ips
            .iter()
            .filter(mine)
            .find_map(|ip| ip.gateway.filter(|g| g.is_ipv4() == v4))
    };
    for route in &result.routes {
        let mut r = Route::new(route.dst);
        r.gateway = route.gw.or_else(|| gateway_of(route.dst.is_ipv4()));
        r.oif = Some(index);
        r.table = route.table;
        r.scope = route.scope;
        r.priority = (route.priority != 0).then_some(route.priority);
        r.mtu = (route.mtu != 0).then_some(route.mtu);
        match pod.add_route(&r) {
            Ok(()) => {}
            Err(e) if e.is_exists() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
