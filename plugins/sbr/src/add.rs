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
//! With `table`, ADD only adds the rules into that table: the operator
//! fills it.
//!
//! Each change is recorded as it is made ([`Undo`]) and taken back, last
//! first, if a later step fails, so a failed ADD leaves the container's
//! routing as it found it.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use libcni::netlink::route_entry::SCOPE_LINK;
use libcni::netlink::rule::{RT_TABLE_MAIN, RT_TABLE_UNSPEC};
use libcni::netlink::{LinkInfo, RouteEntry, RouteSocket, Rule, RuleSpec};
use libcni::types::v100;

use crate::config::{SbrConf, StaticGateways};
use crate::error::SbrError;

/// The first table id the reference hands out.
pub const FIRST_TABLE: u32 = 100;

/// One change of ADD to take back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Undo {
    /// A rule as the kernel echoed it.
    DeleteRule(Rule),
    /// A rule the kernel did not echo: deleted by its selectors.
    DeleteRuleMatching(RuleSpec),
    /// Every route of a table that was empty when ADD took it.
    ClearTable(u32),
    /// A main-table route ADD deleted.
    RestoreRoute(RouteEntry),
}

/// The changes made so far, to take back on failure.
#[derive(Debug, Default)]
pub struct Rollback {
    steps: Vec<Undo>,
}

impl Rollback {
    pub fn push(&mut self, step: Undo) {
        self.steps.push(step);
    }

    /// Runs every step, last first, going on after failures; returns what
    /// failed, described.
    pub fn unwind(self, socket: &mut RouteSocket) -> Vec<String> {
        let mut failures = Vec::new();
        for step in self.steps.into_iter().rev() {
            let outcome = match &step {
                Undo::DeleteRule(rule) => socket.del_rule(rule),
                Undo::DeleteRuleMatching(spec) => socket.del_rule_matching(spec),
                Undo::ClearTable(table) => clear_table(socket, *table, None),
                Undo::RestoreRoute(route) => socket.add_route_entry(route),
            };
            match outcome {
                Ok(()) => log::debug!("undone: {step:?}"),
                // Already gone, or already back: nothing left to undo.
                Err(e) if e.is_not_found() || e.is_exists() => {}
                Err(e) => failures.push(e.to_string()),
            }
        }
        failures
    }
}

/// Deletes the routes of `table`, or only those through `oif`.
pub fn clear_table(
    socket: &mut RouteSocket,
    table: u32,
    oif: Option<u32>,
) -> Result<(), libcni::netlink::NetlinkError> {
    let routes = socket.list_route_entries(None)?;
    for route in routes
        .iter()
        .filter(|r| r.table == table && oif.is_none_or(|oif| r.oif == Some(oif)))
    {
        match socket.delete_route_entry(route) {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

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
        log::debug!("adding rule from {} lookup {table}", ip.address.ip());
        let added = socket.add_rule(&spec).map_err(SbrError::AddRuleToTable)?;
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
    let rules = socket.list_rules(None).map_err(SbrError::ListRules)?;
    let routes = socket
        .list_route_entries(None)
        .map_err(SbrError::ListRoutes)?;
    // The interface's own routes of the main table (cached exceptions are
    // not listed).
    let link_routes: Vec<&RouteEntry> = routes
        .iter()
        .filter(|r| r.table == RT_TABLE_MAIN && r.oif == Some(link.index))
        .collect();

    let mut table = first_free_table(FIRST_TABLE, &rules, &routes)?;
    for ip in ips {
        let address = ip.address.ip();
        log::debug!("routing from {address} through table {table}");
        let spec = RuleSpec::from_source(host_network(address), table);
        let added = socket.add_rule(&spec).map_err(SbrError::AddRule)?;
        rollback.push(added.map_or(Undo::DeleteRuleMatching(spec), Undo::DeleteRule));
        // The table was empty: whatever is in it from here on is ours.
        rollback.push(Undo::ClearTable(table));

        if let Some(gateway) = gateways.for_ip(ip) {
            let mut default = RouteEntry::new(default_network(address));
            default.gateway = Some(gateway);
            default.oif = Some(link.index);
            default.table = table;
            socket
                .add_route_entry(&default)
                .map_err(|source| SbrError::AddDefaultRoute { gateway, source })?;
        }

        for route in link_routes
            .iter()
            .filter(|r| belongs_to_address(r, &ip.address))
        {
            log::debug!("copying route {} to table {table}", route.describe());
            socket
                .replace_route_entry(&route.in_table(table))
                .map_err(SbrError::CopyRoute)?;
        }

        table = first_free_table(table.saturating_add(1), &rules, &routes)?;
    }

    if conf.add_source_hints {
        keep_subnet_routes_with_hints(socket, link, ips, &link_routes);
        return Ok(());
    }
    // Deleted only now: with several addresses of one subnet, each copy
    // above still needed the routes (a gateway route needs its subnet).
    for route in link_routes {
        log::debug!("deleting route {} from the main table", route.describe());
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

/// Whether a main-table route of the interface goes with `address` into
/// its table: its preferred source or gateway is in the address's subnet,
/// or it has neither (a route of the link itself).
pub fn belongs_to_address(route: &RouteEntry, address: &IpNetwork) -> bool {
    match (route.preferred_source, route.gateway) {
        (None, None) => true,
        (source, gateway) => [source, gateway]
            .into_iter()
            .flatten()
            .any(|ip| address.contains(ip)),
    }
}

/// The first id from `from` on that no rule looks up and no route is in.
/// The reference looks at rules and main-table routes only; a table that
/// holds routes but no rule (left by someone else) is skipped here too, so
/// ADD never mixes its routes with foreign ones.
pub fn first_free_table(from: u32, rules: &[Rule], routes: &[RouteEntry]) -> Result<u32, SbrError> {
    let used = |table: u32| {
        table == RT_TABLE_UNSPEC
            || rules.iter().any(|r| r.table == table)
            || routes.iter().any(|r| r.table == table)
    };
    (from..=u32::MAX)
        .find(|table| !used(*table))
        .ok_or(SbrError::NoFreeTable(from))
}

/// The address alone: `/32` or `/128`.
pub fn host_network(ip: IpAddr) -> IpNetwork {
    let prefix = if ip.is_ipv4() { 32 } else { 128 };
    // A full-length prefix is valid for either family.
    IpNetwork::new(ip, prefix).unwrap_or_else(|_| IpNetwork::from(ip))
}

/// `0.0.0.0/0` or `::/0`, in the family of `ip`.
pub fn default_network(ip: IpAddr) -> IpNetwork {
    let unspecified = match ip {
        IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
    };
    IpNetwork::new(unspecified, 0).unwrap_or_else(|_| IpNetwork::from(unspecified))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(dst: &str, source: Option<&str>, gateway: Option<&str>) -> RouteEntry {
        let mut r = RouteEntry::new(dst.parse().unwrap());
        r.preferred_source = source.map(|s| s.parse().unwrap());
        r.gateway = gateway.map(|s| s.parse().unwrap());
        r
    }

    #[test]
    fn routes_go_with_the_address_of_their_subnet() {
        let address: IpNetwork = "192.168.1.209/24".parse().unwrap();
        assert!(belongs_to_address(
            &route("192.168.1.0/24", Some("192.168.1.209"), None),
            &address
        ));
        assert!(belongs_to_address(
            &route("192.168.2.0/24", None, Some("192.168.1.2")),
            &address
        ));
        assert!(belongs_to_address(
            &route("fe80::/64", None, None),
            &address
        ));
        assert!(!belongs_to_address(
            &route("10.2.0.0/24", None, Some("10.0.0.5")),
            &address
        ));
        assert!(!belongs_to_address(
            &route("192.168.101.0/24", Some("192.168.101.209"), None),
            &address
        ));
    }

    #[test]
    fn table_ids_skip_rules_and_routes() {
        let in_table = |table| {
            let mut r = route("10.0.0.0/8", None, None);
            r.table = table;
            r
        };
        let routes = vec![in_table(101), in_table(RT_TABLE_MAIN)];
        assert_eq!(first_free_table(100, &[], &routes).unwrap(), 100);
        assert_eq!(first_free_table(101, &[], &routes).unwrap(), 102);
        let routes = vec![in_table(100), in_table(101)];
        assert_eq!(first_free_table(100, &[], &routes).unwrap(), 102);
        assert_eq!(first_free_table(0, &[], &[]).unwrap(), 1);
        assert!(matches!(
            first_free_table(u32::MAX, &[], &[in_table(u32::MAX)]),
            Err(SbrError::NoFreeTable(_))
        ));
    }

    #[test]
    fn host_and_default_networks() {
        assert_eq!(
            host_network("10.0.0.2".parse().unwrap()).to_string(),
            "10.0.0.2/32"
        );
        assert_eq!(
            host_network("fd00::2".parse().unwrap()).to_string(),
            "fd00::2/128"
        );
        assert_eq!(
            default_network("10.0.0.2".parse().unwrap()).to_string(),
            "0.0.0.0/0"
        );
        assert_eq!(
            default_network("fd00::2".parse().unwrap()).to_string(),
            "::/0"
        );
    }
}
