//! CHECK inside the container: what ADD set up is still there.
//!
//! The reference's CHECK does nothing. Here, for each address of the
//! interface in the previous result: a rule `from <address>` looks up the
//! configured `table`, or else a table of its own (not one of the kernel's)
//! that routes by default through the gateway ADD chose, out of this
//! interface; with `addSourceHints`, the main table also routes the
//! address's subnet out of the interface with the address as source hint.

use libcni::netlink::rule::RT_TABLE_MAIN;
use libcni::netlink::{LinkInfo, RouteEntry, RouteSocket};
use libcni::source_routing::SourceRoutingError;
use libcni::source_routing::{host_network, rule_tables, verify as verify_source, SourceRoute};
use libcni::types::v100;

use crate::config::{SbrConf, StaticGateways};
use crate::error::SbrError;

pub fn verify(
    socket: &mut RouteSocket,
    link: &LinkInfo,
    ips: &[&v100::IpConfig],
    conf: &SbrConf,
    gateways: &StaticGateways,
) -> Result<(), SbrError> {
    let rules = socket
        .list_rules(None)
        .map_err(SourceRoutingError::ListRules)?;
    let routes = socket
        .list_route_entries(None)
        .map_err(SourceRoutingError::ListRoutes)?;
    for ip in ips {
        let address = ip.address.ip();
        if let Some(table) = conf.table {
            // The operator's table: only the rule is ADD's.
            if !rule_tables(&rules, address).contains(&table) {
                return Err(SbrError::Check(format!(
                    "no rule from {} lookup {table} in the container",
                    host_network(address)
                )));
            }
            continue;
        }
        let route = SourceRoute {
            address: ip.address,
            gateway: gateways.for_ip(ip),
        };
        verify_source(&rules, &routes, link, &route, None).map_err(SbrError::Check)?;
        if conf.add_source_hints && !has_source_hint(&routes, link, ip) {
            return Err(SbrError::Check(format!(
                "no route to {} dev {} src {address} in the main table",
                ip.address, link.name
            )));
        }
    }
    Ok(())
}

fn has_source_hint(routes: &[RouteEntry], link: &LinkInfo, ip: &v100::IpConfig) -> bool {
    let subnet = ip.address;
    routes.iter().any(|r| {
        r.table == RT_TABLE_MAIN
            && r.oif == Some(link.index)
            && r.preferred_source == Some(subnet.ip())
            && r.destination.prefix() == subnet.prefix()
            && r.destination.contains(subnet.ip())
    })
}
