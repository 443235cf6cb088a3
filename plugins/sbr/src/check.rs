//! CHECK inside the container: what ADD set up is still there.
//!
//! The reference's CHECK does nothing. Here, for each address of the
//! interface in the previous result: a rule `from <address>` looks up the
//! configured `table`, or else a table of its own (not one of the kernel's)
//! that routes by default through the gateway ADD chose, out of this
//! interface; with `addSourceHints`, the main table also routes the
//! address's subnet out of the interface with the address as source hint.

use libcni::netlink::rule::{RT_TABLE_DEFAULT, RT_TABLE_LOCAL, RT_TABLE_MAIN, RT_TABLE_UNSPEC};
use libcni::netlink::{LinkInfo, RouteEntry, RouteSocket, Rule};
use libcni::types::v100;

use crate::add::host_network;
use crate::config::{SbrConf, StaticGateways};
use crate::error::SbrError;

pub fn verify(
    socket: &mut RouteSocket,
    link: &LinkInfo,
    ips: &[&v100::IpConfig],
    conf: &SbrConf,
    gateways: &StaticGateways,
) -> Result<(), SbrError> {
    let rules = socket.list_rules(None).map_err(SbrError::ListRules)?;
    let routes = socket
        .list_route_entries(None)
        .map_err(SbrError::ListRoutes)?;
    for ip in ips {
        let address = ip.address.ip();
        let source = host_network(address);
        let from_address: Vec<&Rule> = rules.iter().filter(|r| r.source == Some(source)).collect();
        if let Some(table) = conf.table {
            if !from_address.iter().any(|r| r.table == table) {
                return Err(SbrError::Check(format!(
                    "no rule from {source} lookup {table} in the container"
                )));
            }
            continue;
        }
        let own_tables: Vec<u32> = from_address
            .iter()
            .map(|r| r.table)
            .filter(|t| {
                ![
                    RT_TABLE_UNSPEC,
                    RT_TABLE_DEFAULT,
                    RT_TABLE_MAIN,
                    RT_TABLE_LOCAL,
                ]
                .contains(t)
            })
            .collect();
        if own_tables.is_empty() {
            return Err(SbrError::Check(format!(
                "no rule from {source} to a routing table of its own in the container"
            )));
        }
        if let Some(gateway) = gateways.for_ip(ip) {
            let routes_by_default = |table: u32| {
                routes.iter().any(|r| {
                    r.table == table
                        && r.destination.prefix() == 0
                        && r.destination.is_ipv4() == address.is_ipv4()
                        && r.gateway == Some(gateway)
                        && r.oif == Some(link.index)
                })
            };
            if !own_tables.iter().any(|t| routes_by_default(*t)) {
                return Err(SbrError::Check(format!(
                    "table {} of {source} has no default route via {gateway} dev {}",
                    own_tables
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(", "),
                    link.name
                )));
            }
        }
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
