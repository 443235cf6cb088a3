//! The routes that make a veth pair a point-to-point link, as the
//! reference lays them out.
//!
//! A container address such as 10.1.2.5/24 with gateway 10.1.2.1 would
//! have the kernel's route `10.1.2.0/24 dev eth0`, reaching its neighbours
//! directly; but on the other end of the veth there is only the host. So
//! in the container that route is replaced by `10.1.2.1 dev eth0 scope
//! link` and `10.1.2.0/24 via 10.1.2.1`, both with the container address
//! as source: all traffic goes to the gateway, found by ARP (or neighbour
//! discovery). On the host, the host end holds `10.1.2.1/32`, so it
//! answers for the gateway, and `10.1.2.5 dev <host veth> scope host`
//! sends the container's traffic back. Two containers of one subnet each
//! hold the gateway on their own host end.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use libcni::netlink::route_entry::SCOPE_LINK;
use libcni::netlink::{LinkInfo, Route, RouteEntry, RouteSocket};
use libcni::types::v100;

use crate::error::PtpError;

/// `RT_SCOPE_HOST`: the reference's host routes (`ip.AddHostRoute`).
const SCOPE_HOST: u8 = 254;
/// `RT_TABLE_MAIN`.
const MAIN_TABLE: u32 = 254;

/// An address's gateway, which ADD has checked every address has.
fn gateway_of(ip: &v100::IpConfig) -> Result<IpAddr, PtpError> {
    let gateway = ip.gateway.ok_or(PtpError::NoGateway {
        address: ip.address,
    })?;
    if gateway.is_ipv4() != ip.address.is_ipv4() {
        return Err(PtpError::GatewayFamily {
            gateway,
            address: ip.address,
        });
    }
    Ok(gateway)
}

/// Every address must have a gateway of its own family: checked before
/// ADD makes anything.
pub fn check_gateways(ips: &[v100::IpConfig]) -> Result<(), PtpError> {
    for ip in ips {
        gateway_of(ip)?;
    }
    Ok(())
}

/// `address` as a single-host prefix (/32 or /128).
fn host_prefix(address: IpAddr) -> IpNetwork {
    let bits = if address.is_ipv4() { 32 } else { 128 };
    // A full-length prefix is valid for either family.
    IpNetwork::new(address, bits).unwrap_or_else(|_| IpNetwork::from(address))
}

/// The subnet of `address` (host bits cleared).
fn subnet_of(address: IpNetwork) -> IpNetwork {
    IpNetwork::new(address.network(), address.prefix()).unwrap_or(address)
}

/// In the container, on `link` (already holding the addresses): each
/// address's subnet through its gateway instead of directly.
pub fn route_through_gateways(
    container: &mut RouteSocket,
    link: &LinkInfo,
    ips: &[v100::IpConfig],
) -> Result<(), PtpError> {
    for ip in ips {
        let gateway = gateway_of(ip)?;
        let subnet = subnet_of(ip.address);
        // The kernel's connected route, matched as the reference matches
        // it: destination and device, any scope, main table.
        let mut connected = Route::new(subnet);
        connected.oif = Some(link.index);
        connected.table = Some(MAIN_TABLE);
        container
            .del_route(&connected)
            .map_err(|source| PtpError::DeleteConnectedRoute {
                subnet,
                ifname: link.name.clone(),
                source,
            })?;

        let mut to_gateway = RouteEntry::new(host_prefix(gateway));
        to_gateway.oif = Some(link.index);
        to_gateway.scope = SCOPE_LINK;
        to_gateway.preferred_source = Some(ip.address.ip());
        let mut via_gateway = RouteEntry::new(subnet);
        via_gateway.oif = Some(link.index);
        via_gateway.gateway = Some(gateway);
        via_gateway.preferred_source = Some(ip.address.ip());
        for route in [to_gateway, via_gateway] {
            container
                .add_route_entry(&route)
                .map_err(|source| PtpError::AddRoute {
                    route: route.describe(),
                    source,
                })?;
        }
    }
    Ok(())
}

/// On the host, on the host end of the pair: each gateway as a
/// single-host address, and a host route to each container address.
pub fn set_up_host_end(
    host: &mut RouteSocket,
    host_end: &LinkInfo,
    ips: &[v100::IpConfig],
) -> Result<(), PtpError> {
    for ip in ips {
        let gateway = host_prefix(gateway_of(ip)?);
        host.add_address(host_end.index, gateway)
            .map_err(|source| PtpError::HostAddress {
                address: gateway,
                source,
            })?;
        let mut to_container = RouteEntry::new(host_prefix(ip.address.ip()));
        to_container.oif = Some(host_end.index);
        to_container.scope = SCOPE_HOST;
        match host.add_route_entry(&to_container) {
            Ok(()) => {}
            // Already there is what was asked for, as in the reference.
            Err(e) if e.is_exists() => {}
            Err(source) => return Err(PtpError::HostRoute { source }),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(address: &str, gateway: Option<&str>) -> v100::IpConfig {
        v100::IpConfig {
            interface: None,
            address: address.parse().unwrap(),
            gateway: gateway.map(|g| g.parse().unwrap()),
        }
    }

    #[test]
    fn prefixes() {
        assert_eq!(
            host_prefix("10.1.2.1".parse().unwrap()).to_string(),
            "10.1.2.1/32"
        );
        assert_eq!(
            host_prefix("2001:db8:1::1".parse().unwrap()).to_string(),
            "2001:db8:1::1/128"
        );
        assert_eq!(
            subnet_of("10.1.2.5/24".parse().unwrap()).to_string(),
            "10.1.2.0/24"
        );
        assert_eq!(
            subnet_of("2001:db8:1::5/66".parse().unwrap()).to_string(),
            "2001:db8:1::/66"
        );
    }

    #[test]
    fn every_address_needs_a_gateway_of_its_family() {
        assert!(check_gateways(&[ip("10.1.2.5/24", Some("10.1.2.1"))]).is_ok());
        assert!(matches!(
            check_gateways(&[ip("10.1.2.5/24", None)]),
            Err(PtpError::NoGateway { .. })
        ));
        assert!(matches!(
            check_gateways(&[ip("10.1.2.5/24", Some("2001:db8::1"))]),
            Err(PtpError::GatewayFamily { .. })
        ));
    }
}
