//! ADD inside the container: a routing table per address of the
//! interface, a rule sending traffic from that address to it, and the
//! interface's routes moved out of the main table.
//!
//! Without `table`, for each address in the previous result's order:
//!
//! 1. take the first table id from 100 on that no rule looks up and that
//!    holds no route;
//! 2. add the rule `from <address>/32|128 lookup <table>` (no priority: the
//!    kernel puts it before the rules there, so later addresses come
//!    first, as with the reference);
//! 3. add `default via <gateway> dev <ifname>` to the table, the gateway
//!    being the static one of `gateways` for the address's family or else
//!    the previous result's;
//! 4. copy into the table each main-table route of the interface whose
//!    preferred source or gateway lies in the address's subnet, or that
//!    has neither (the subnet and link-local routes), as it is, flags
//!    cleared, replacing a route of the same key (the default route of
//!    step 3, when the main table had one too).
//!
//! Then the interface's main-table routes are deleted, so traffic from
//! other sources no longer leaves by this interface; with
//! `addSourceHints` the subnet routes stay instead, with the address as
//! source hint, and only the other routes go (failures there are only
//! logged, as in the reference).
//!
//! Steps 1 to 4 are [`libcni::source_routing`]'s, which rdma-sriov's
//! rails use too.
//!
//! With `table`, ADD only adds the rules into that table: the operator
//! fills it.
//!
//! Each change is recorded as it is made ([`Undo`]) and taken back, last
//! first, if a later step fails, so a failed ADD leaves the container's
//! routing as it found it.

use libcni::netlink::route_entry::SCOPE_LINK;
use libcni::netlink::{LinkInfo, RouteEntry, RouteSocket, RuleSpec};
use libcni::source_routing::{
    first_free_table, host_network, main_routes_of, route_through_table, Rollback, SourceRoute,
    SourceRoutingError, Undo, FIRST_TABLE,
};
use libcni::types::v100;

use crate::config::{SbrConf, StaticGateways};
use crate::error::SbrError;

/// Sets up source-based routing for `ips` on `link`, undoing its own
/// changes if a step fails.
pub fn setup(
    socket: &mut RouteSocket,
    link: &LinkInfo,
    ips: &[&v100::IpConfig],
    conf: &SbrConf,
    gateways: &StaticGateways,
) -> Result<(), SbrError> {
    let mut rollback = Rollback::default();
    let outcome = match conf.table {
        Some(table) => add_rules_to_table(socket, ips, table, &mut rollback),
        None => route_per_address(socket, link, ips, conf, gateways, &mut rollback),
    };
    let Err(cause) = outcome else {
        return Ok(());
    };
    let undo_failures = rollback.unwind(socket);
    if undo_failures.is_empty() {
        Err(cause)
    } else {
        Err(SbrError::UndoFailed {
            cause: Box::new(cause),
            undo_failures,
        })
    }
}

/// `from <address> lookup <table>` for each address, and nothing else.
fn add_rules_to_table(
    socket: &mut RouteSocket,
    ips: &[&v100::IpConfig],
    table: u32,
    rollback: &mut Rollback,
) -> Result<(), SbrError> {
    for ip in ips {
        let spec = RuleSpec::from_source(host_network(ip.address.ip()), table);
        let added = socket.add_rule(&spec).map_err(SbrError::AddRuleToTable)?;
        log::info!("rule: from {} lookup table {table}", ip.address.ip());
        rollback.push(added.map_or(Undo::DeleteRuleMatching(spec), Undo::DeleteRule));
    }
    Ok(())
}

fn route_per_address(
    socket: &mut RouteSocket,
    link: &LinkInfo,
    ips: &[&v100::IpConfig],
    conf: &SbrConf,
    gateways: &StaticGateways,
    rollback: &mut Rollback,
) -> Result<(), SbrError> {
    let rules = socket
        .list_rules(None)
        .map_err(SourceRoutingError::ListRules)?;
    let routes = socket
        .list_route_entries(None)
        .map_err(SourceRoutingError::ListRoutes)?;
    let link_routes = main_routes_of(&routes, link.index);

    let mut table = first_free_table(FIRST_TABLE, &rules, &routes)?;
    for ip in ips {
        let route = SourceRoute {
            address: ip.address,
            gateway: gateways.for_ip(ip),
        };
        route_through_table(socket, link.index, &route, table, &link_routes, rollback)?;
        log::info!(
            "traffic from {} goes through table {table}{}",
            ip.address,
            route
                .gateway
                .map(|gw| format!(" (default via {gw})"))
                .unwrap_or_default()
        );
        table = first_free_table(table.saturating_add(1), &rules, &routes)?;
    }

    if conf.add_source_hints {
        keep_subnet_routes_with_hints(socket, link, ips, &link_routes);
        return Ok(());
    }
    // Deleted only now: with several addresses of one subnet, each copy
    // above still needed the routes (a gateway route needs its subnet).
    for route in link_routes {
        log::info!("deleting route {} from the main table", route.describe());
        match socket.delete_route_entry(route) {
            Ok(()) => rollback.push(Undo::RestoreRoute(route.clone())),
            // Gone meanwhile, which is what this step wants.
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(SbrError::DeleteRoute(e)),
        }
    }
    Ok(())
}

/// `addSourceHints`: each address's subnet routed in the main table with
/// the address as preferred source, the interface's other main routes
/// deleted. Best effort, as in the reference: failures are logged.
fn keep_subnet_routes_with_hints(
    socket: &mut RouteSocket,
    link: &LinkInfo,
    ips: &[&v100::IpConfig],
    link_routes: &[&RouteEntry],
) {
    for ip in ips {
        let mut subnet = RouteEntry::new(ip.address);
        subnet.oif = Some(link.index);
        subnet.preferred_source = Some(ip.address.ip());
        subnet.scope = SCOPE_LINK;
        log::debug!("adding source hint: {}", subnet.describe());
        if let Err(e) = socket.replace_route_entry(&subnet) {
            log::warn!("failed to add subnet route with source hint to the main table: {e}");
        }
    }
    for route in link_routes.iter().filter(|r| r.scope != SCOPE_LINK) {
        log::debug!("deleting route {} from the main table", route.describe());
        if let Err(e) = socket.delete_route_entry(route) {
            log::warn!("failed to delete route {}: {e}", route.describe());
        }
    }
}
