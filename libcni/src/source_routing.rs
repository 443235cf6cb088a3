//! Source-based routing for an interface of a container: each address gets
//! a routing table holding the interface's routes and a default route
//! through its gateway, and a rule `from <address> lookup <table>`, so
//! traffic from that address leaves by the interface that owns it whatever
//! the main table says.
//!
//! A pod with several interfaces (one per GPU rail, say) has one main
//! table, so replies and RDMA connections would otherwise leave by the
//! interface of the main table's best route. The sbr meta plugin and
//! rdma-sriov's rails both set this up; what they share lives here:
//!
//! - ADD: [`first_free_table`] picks a table (from [`FIRST_TABLE`] on, one
//!   that no rule looks up and no route is in); [`route_through_table`]
//!   adds the rule, the default route, and copies of the interface's
//!   main-table routes that go with the address ([`belongs_to_address`]),
//!   recording each change in a [`Rollback`] to take back on failure;
//! - DEL: [`delete_rules`] removes the rules from the interface's
//!   addresses, [`clear_tables`] empties the tables they looked up when
//!   nothing else uses them;
//! - CHECK: [`verify`], and [`routes_subnet`] for a table that must route
//!   the address's own subnet.
//!
//! Callers serialise calls on one container (a lock on its namespace file,
//! [`crate::lock::FileLock::acquire_open`]): two ADDs would otherwise both
//! see the same table free and both take it.
//!
//! The messages of the kernel's refusals are worded as the reference sbr
//! words them (`Failed to add rule: ...`), so sbr's errors read as the
//! reference's.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};

use crate::error::{CniError, ErrorCode, ToCniError};
use crate::netlink::rule::{RT_TABLE_DEFAULT, RT_TABLE_LOCAL, RT_TABLE_MAIN, RT_TABLE_UNSPEC};
use crate::netlink::{LinkInfo, NetlinkError, RouteEntry, RouteSocket, Rule, RuleSpec};

/// The first table id the reference sbr hands out.
pub const FIRST_TABLE: u32 = 100;

/// What the kernel refused while routing by source.
#[derive(Debug, thiserror::Error)]
pub enum SourceRoutingError {
    #[error("Failed to list all rules: {0}")]
    ListRules(#[source] NetlinkError),
    #[error("Failed to list all routes: {0}")]
    ListRoutes(#[source] NetlinkError),
    #[error("no free routing table from {0} on")]
    NoFreeTable(u32),
    #[error("Failed to add rule: {0}")]
    AddRule(#[source] NetlinkError),
    #[error("Failed to add default route to {gateway}: {source}")]
    AddDefaultRoute {
        gateway: IpAddr,
        #[source]
        source: NetlinkError,
    },
    /// The reference's word for copying a route into the table.
    #[error("Failed to readd route: {0}")]
    CopyRoute(#[source] NetlinkError),
    #[error("Failed to delete rule {0}")]
    DeleteRule(#[source] NetlinkError),
    #[error("failed to clear table {table}: {source}")]
    ClearTable {
        table: u32,
        #[source]
        source: NetlinkError,
    },
}

impl ToCniError for SourceRoutingError {
    fn to_cni_error(&self) -> CniError {
        // Every variant is the kernel refusing or failing a request (or,
        // for NoFreeTable, a namespace with four billion tables in use).
        let code = match self {
            SourceRoutingError::ListRules(_)
            | SourceRoutingError::ListRoutes(_)
            | SourceRoutingError::NoFreeTable(_)
            | SourceRoutingError::AddRule(_)
            | SourceRoutingError::AddDefaultRoute { .. }
            | SourceRoutingError::CopyRoute(_)
            | SourceRoutingError::DeleteRule(_)
            | SourceRoutingError::ClearTable { .. } => ErrorCode::Internal,
        };
        CniError::new(code, self.to_string())
    }
}

/// An address to route from a table of its own (serialisable, for a
/// plugin that records what it set up).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceRoute {
    /// With its prefix: the routes of its subnet go into the table too.
    pub address: IpNetwork,
    /// The table's default route goes through it; without one the table
    /// holds only the copied routes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<IpAddr>,
}

/// One change of ADD to take back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Undo {
    /// A rule as the kernel echoed it.
    DeleteRule(Rule),
    /// A rule the kernel did not echo: deleted by its selectors.
    DeleteRuleMatching(RuleSpec),
    /// Every route of a table that was empty when ADD took it.
    ClearTable(u32),
    /// A route ADD deleted.
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
                Ok(()) => log::debug!(
                    "undone: {}",
                    match &step {
                        Undo::DeleteRule(_) | Undo::DeleteRuleMatching(_) =>
                            "a rule ADD added".to_string(),
                        Undo::ClearTable(table) => format!("the routes of table {table}"),
                        Undo::RestoreRoute(route) => format!("route {} restored", route.describe()),
                    }
                ),
                // Already gone, or already back: nothing left to undo.
                Err(e) if e.is_not_found() || e.is_exists() => {}
                Err(e) => failures.push(e.to_string()),
            }
        }
        failures
    }
}

/// Whether `table` is one the kernel's own rules look up (or none at all):
/// never one to fill, empty or take as an address's own.
pub fn is_kernel_table(table: u32) -> bool {
    [
        RT_TABLE_UNSPEC,
        RT_TABLE_DEFAULT,
        RT_TABLE_MAIN,
        RT_TABLE_LOCAL,
    ]
    .contains(&table)
}

/// The first id from `from` on that no rule looks up and no route is in.
/// The reference sbr looks at rules and main-table routes only; a table
/// that holds routes but no rule (left by someone else) is skipped here
/// too, so ADD never mixes its routes with foreign ones.
pub fn first_free_table(
    from: u32,
    rules: &[Rule],
    routes: &[RouteEntry],
) -> Result<u32, SourceRoutingError> {
    (from..=u32::MAX)
        .find(|table| is_free(*table, rules, routes))
        .ok_or(SourceRoutingError::NoFreeTable(from))
}

/// No rule looks `table` up and no route is in it (and it is a table).
pub fn is_free(table: u32, rules: &[Rule], routes: &[RouteEntry]) -> bool {
    table != RT_TABLE_UNSPEC
        && !rules.iter().any(|r| r.table == table)
        && !routes.iter().any(|r| r.table == table)
}

/// The main-table routes through link `index` (cached exceptions are not
/// listed by [`RouteSocket::list_route_entries`]).
pub fn main_routes_of(routes: &[RouteEntry], index: u32) -> Vec<&RouteEntry> {
    routes
        .iter()
        .filter(|r| r.table == RT_TABLE_MAIN && r.oif == Some(index))
        .collect()
}

/// Sets up `table` for `route` on link `index`: the rule `from
/// <address>/32|128 lookup <table>` (no priority: the kernel puts it before
/// the rules there, so later addresses come first, as with the reference),
/// the default route through the gateway, and a copy of each of
/// `link_routes` that [`belongs_to_address`], flags cleared, replacing a
/// route of the same key (the default route, when the main table had one
/// too). `table` must have been free: the rollback empties it.
pub fn route_through_table(
    socket: &mut RouteSocket,
    index: u32,
    route: &SourceRoute,
    table: u32,
    link_routes: &[&RouteEntry],
    rollback: &mut Rollback,
) -> Result<(), SourceRoutingError> {
    let address = route.address.ip();
    log::debug!("routing from {address} through table {table}");
    let spec = RuleSpec::from_source(host_network(address), table);
    let added = socket
        .add_rule(&spec)
        .map_err(SourceRoutingError::AddRule)?;
    rollback.push(added.map_or(Undo::DeleteRuleMatching(spec), Undo::DeleteRule));
    // The table was empty: whatever is in it from here on is ours.
    rollback.push(Undo::ClearTable(table));

    if let Some(gateway) = route.gateway {
        let mut default = RouteEntry::new(default_network(address));
        default.gateway = Some(gateway);
        default.oif = Some(index);
        default.table = table;
        socket
            .add_route_entry(&default)
            .map_err(|source| SourceRoutingError::AddDefaultRoute { gateway, source })?;
    }

    for link_route in link_routes
        .iter()
        .filter(|r| belongs_to_address(r, &route.address))
    {
        log::debug!("copying route {} to table {table}", link_route.describe());
        socket
            .replace_route_entry(&link_route.in_table(table))
            .map_err(SourceRoutingError::CopyRoute)?;
    }
    Ok(())
}

/// Deletes the routes of `table`, or only those through `oif`.
pub fn clear_table(
    socket: &mut RouteSocket,
    table: u32,
    oif: Option<u32>,
) -> Result<(), NetlinkError> {
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

/// What [`delete_rules`] did: the tables of the rules it deleted, and what
/// failed (it goes on after a failure).
#[derive(Debug, Default)]
pub struct DeletedRules {
    pub tables: BTreeSet<u32>,
    pub errors: Vec<SourceRoutingError>,
}

/// Deletes every rule whose source address is one of `sources` (any
/// prefix, as the reference sbr matches them), only those looking up
/// `table` when given. Rules already gone are not errors.
pub fn delete_rules(
    socket: &mut RouteSocket,
    sources: &[IpAddr],
    table: Option<u32>,
) -> DeletedRules {
    let mut deleted = DeletedRules::default();
    let rules = match socket.list_rules(None) {
        Ok(rules) => rules,
        Err(e) => {
            deleted.errors.push(SourceRoutingError::ListRules(e));
            return deleted;
        }
    };
    for rule in rules
        .iter()
        .filter(|r| table.is_none_or(|t| r.table == t))
        .filter(|r| r.source.is_some_and(|s| sources.contains(&s.ip())))
    {
        log::debug!("deleting rule {}", rule.describe());
        match socket.del_rule(rule) {
            Ok(()) => {
                deleted.tables.insert(rule.table);
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => deleted.errors.push(SourceRoutingError::DeleteRule(e)),
        }
    }
    deleted
}

/// Empties each of `tables` that looks like one ADD filled: not one of the
/// kernel's, looked up by no rule, and holding only routes through link
/// `index`. Others are kept, logged. Goes on after a failure.
pub fn clear_tables(
    socket: &mut RouteSocket,
    index: u32,
    tables: &BTreeSet<u32>,
) -> Vec<SourceRoutingError> {
    let candidates: Vec<u32> = tables
        .iter()
        .copied()
        .filter(|t| !is_kernel_table(*t))
        .collect();
    if candidates.is_empty() {
        return Vec::new();
    }
    let rules = match socket.list_rules(None) {
        Ok(rules) => rules,
        Err(e) => return vec![SourceRoutingError::ListRules(e)],
    };
    let routes = match socket.list_route_entries(None) {
        Ok(routes) => routes,
        Err(e) => return vec![SourceRoutingError::ListRoutes(e)],
    };
    let mut errors = Vec::new();
    for table in candidates {
        if rules.iter().any(|r| r.table == table) {
            log::debug!("table {table} is still looked up by another rule: kept");
            continue;
        }
        let in_table: Vec<_> = routes.iter().filter(|r| r.table == table).collect();
        if in_table.iter().any(|r| r.oif != Some(index)) {
            log::debug!("table {table} has routes of other interfaces: kept");
            continue;
        }
        for route in in_table {
            log::debug!("deleting route {}", route.describe());
            match socket.delete_route_entry(route) {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(source) => errors.push(SourceRoutingError::ClearTable { table, source }),
            }
        }
    }
    errors
}

/// The tables that rules from `address` alone (`/32` or `/128`) look up.
pub fn rule_tables(rules: &[Rule], address: IpAddr) -> Vec<u32> {
    let source = host_network(address);
    rules
        .iter()
        .filter(|r| r.source == Some(source))
        .map(|r| r.table)
        .collect()
}

/// CHECK of [`route_through_table`]'s work for `route` on `link`: a rule
/// from the address looks up `table` (given), or else a table of its own
/// (not one of the kernel's); when the route has a gateway, that table
/// routes by default through it out of `link`. The error says what is
/// missing.
pub fn verify(
    rules: &[Rule],
    routes: &[RouteEntry],
    link: &LinkInfo,
    route: &SourceRoute,
    table: Option<u32>,
) -> Result<(), String> {
    let address = route.address.ip();
    let source = host_network(address);
    let looked_up = rule_tables(rules, address);
    let tables: Vec<u32> = match table {
        Some(table) if looked_up.contains(&table) => vec![table],
        Some(table) => {
            return Err(format!(
                "no rule from {source} lookup {table} in the container"
            ))
        }
        None => looked_up
            .into_iter()
            .filter(|t| !is_kernel_table(*t))
            .collect(),
    };
    if tables.is_empty() {
        return Err(format!(
            "no rule from {source} to a routing table of its own in the container"
        ));
    }
    let Some(gateway) = route.gateway else {
        return Ok(());
    };
    let routes_by_default = |table: u32| {
        routes.iter().any(|r| {
            r.table == table
                && r.destination.prefix() == 0
                && r.destination.is_ipv4() == address.is_ipv4()
                && r.gateway == Some(gateway)
                && r.oif == Some(link.index)
        })
    };
    if tables.iter().any(|t| routes_by_default(*t)) {
        return Ok(());
    }
    Err(format!(
        "table {} of {source} has no default route via {gateway} dev {}",
        tables
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        link.name
    ))
}

/// Whether `table` routes the subnet of `address` out of link `index`.
pub fn routes_subnet(routes: &[RouteEntry], table: u32, address: &IpNetwork, index: u32) -> bool {
    routes.iter().any(|r| {
        r.table == table
            && r.oif == Some(index)
            && r.destination.prefix() == address.prefix()
            && r.destination.contains(address.ip())
    })
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

/// The address alone: `/32` or `/128`.
pub fn host_network(ip: IpAddr) -> IpNetwork {
    let prefix = if ip.is_ipv4() { 32 } else { 128 };
    // A full-length prefix is valid for either family.
    IpNetwork::new(ip, prefix).unwrap_or_else(|_| IpNetwork::from(ip))
}

/// `0.0.0.0/0` or `::/0`, in the family of `ip`.
pub fn default_network(ip: IpAddr) -> IpNetwork {
    let unspecified = match ip {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    IpNetwork::new(unspecified, 0).unwrap_or_else(|_| IpNetwork::from(unspecified))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::test_support::in_private_netns;
    use crate::netlink::VethPair;

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
            Err(SourceRoutingError::NoFreeTable(_))
        ));
        assert!(!is_free(0, &[], &[]));
        assert!(is_kernel_table(RT_TABLE_MAIN) && !is_kernel_table(100));
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

    #[test]
    fn kernel_refusals_are_999_in_the_reference_words() {
        let e = SourceRoutingError::AddRule(NetlinkError::Kernel {
            errno: nix::errno::Errno::EEXIST,
            message: None,
        });
        let cni = e.to_cni_error();
        assert_eq!(cni.code, ErrorCode::Internal);
        assert_eq!(cni.msg, "Failed to add rule: EEXIST: File exists");
    }

    /// The whole cycle on a veth in a namespace of the test: ADD's table,
    /// CHECK of it, a failure part way taken back, DEL of rules and table
    /// that leaves a foreign rule and table alone.
    #[test]
    fn add_check_undo_and_delete_in_a_namespace() {
        in_private_netns(|| {
            let mut socket = RouteSocket::open_current().unwrap();
            socket
                .create_veth_pair(&VethPair {
                    name: "sr-a",
                    peer_name: "sr-b",
                    ..VethPair::default()
                })
                .unwrap();
            let link = socket.link_by_name("sr-a").unwrap().unwrap();
            socket
                .add_address(link.index, "10.7.0.2/24".parse().unwrap())
                .unwrap();
            socket.set_link_up("sr-a").unwrap();
            socket.set_link_up("sr-b").unwrap();
            let gateway: IpAddr = "10.7.0.1".parse().unwrap();
            let rail = SourceRoute {
                address: "10.7.0.2/24".parse().unwrap(),
                gateway: Some(gateway),
            };
            // Someone else's table 100: skipped.
            socket
                .add_rule(&RuleSpec::from_source("192.0.2.9/32".parse().unwrap(), 100))
                .unwrap();

            let rules = socket.list_rules(None).unwrap();
            let routes = socket.list_route_entries(None).unwrap();
            let table = first_free_table(FIRST_TABLE, &rules, &routes).unwrap();
            assert_eq!(table, 101);
            let link_routes = main_routes_of(&routes, link.index);
            let mut rollback = Rollback::default();
            route_through_table(
                &mut socket,
                link.index,
                &rail,
                table,
                &link_routes,
                &mut rollback,
            )
            .unwrap();

            let rules = socket.list_rules(None).unwrap();
            let routes = socket.list_route_entries(None).unwrap();
            assert_eq!(rule_tables(&rules, rail.address.ip()), vec![101]);
            verify(&rules, &routes, &link, &rail, Some(101)).unwrap();
            verify(&rules, &routes, &link, &rail, None).unwrap();
            assert!(routes_subnet(&routes, 101, &rail.address, link.index));
            assert!(!routes_subnet(&routes, 100, &rail.address, link.index));
            let other_gateway = SourceRoute {
                gateway: Some("10.7.0.254".parse().unwrap()),
                ..rail
            };
            let e = verify(&rules, &routes, &link, &other_gateway, None).unwrap_err();
            assert_eq!(
                e,
                "table 101 of 10.7.0.2/32 has no default route via 10.7.0.254 dev sr-a"
            );
            let e = verify(&rules, &routes, &link, &rail, Some(102)).unwrap_err();
            assert_eq!(e, "no rule from 10.7.0.2/32 lookup 102 in the container");

            // Taken back whole.
            assert!(rollback.unwind(&mut socket).is_empty());
            let rules = socket.list_rules(None).unwrap();
            let routes = socket.list_route_entries(None).unwrap();
            assert!(rule_tables(&rules, rail.address.ip()).is_empty());
            assert!(is_free(101, &rules, &routes));
            assert_eq!(
                verify(&rules, &routes, &link, &rail, None).unwrap_err(),
                "no rule from 10.7.0.2/32 to a routing table of its own in the container"
            );

            // Again, then DEL: only this address's rule and table go.
            let mut rollback = Rollback::default();
            let link_routes = main_routes_of(&routes, link.index);
            route_through_table(
                &mut socket,
                link.index,
                &rail,
                101,
                &link_routes,
                &mut rollback,
            )
            .unwrap();
            let deleted = delete_rules(&mut socket, &[rail.address.ip()], None);
            assert!(deleted.errors.is_empty(), "{:?}", deleted.errors);
            assert_eq!(deleted.tables, BTreeSet::from([101]));
            let mut tables = deleted.tables.clone();
            tables.insert(100);
            assert!(clear_tables(&mut socket, link.index, &tables).is_empty());
            let rules = socket.list_rules(None).unwrap();
            let routes = socket.list_route_entries(None).unwrap();
            assert!(is_free(101, &rules, &routes));
            assert_eq!(rule_tables(&rules, "192.0.2.9".parse().unwrap()), vec![100]);
            // Nothing left to delete: no errors either.
            let again = delete_rules(&mut socket, &[rail.address.ip()], None);
            assert!(again.errors.is_empty() && again.tables.is_empty());
        });
    }
}
