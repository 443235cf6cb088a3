//! DEL inside the container: the rules ADD made, found as the reference
//! finds them, and the tables they looked up.
//!
//! A rule is ADD's when its source address is one of the interface's
//! addresses now (any rule, or only those looking up `table` when the
//! configuration names one). The tables of the rules deleted are then
//! emptied, when they look like the ones ADD fills: not one of the
//! kernel's own tables, looked up by no rule left, and holding only routes
//! through this interface. The reference leaves those routes to go with
//! the interface; when the interface stays (a device given back to the
//! host, or a chain whose next DEL fails), they would otherwise be left in
//! a table no rule uses, and the next ADD would find the id taken. With
//! `table`, the operator's table is left alone, as ADD never filled it.
//!
//! Best effort: every rule and table is tried, and the failures are
//! reported together at the end. An interface that is gone means nothing
//! is left to do (its addresses, and so ADD's rules' meaning, went with
//! it), as in the reference.

use std::collections::BTreeSet;

use libcni::netlink::rule::{RT_TABLE_DEFAULT, RT_TABLE_LOCAL, RT_TABLE_MAIN, RT_TABLE_UNSPEC};
use libcni::netlink::{LinkInfo, RouteSocket};

use crate::error::SbrError;

pub fn tidy(socket: &mut RouteSocket, link: &LinkInfo, table: Option<u32>) -> Result<(), SbrError> {
    let addresses: Vec<_> = socket
        .list_addresses(Some(link.index))?
        .into_iter()
        .map(|a| a.address.ip())
        .collect();
    let rules = socket.list_rules(None).map_err(SbrError::ListRules)?;
    let mut errors = Vec::new();
    let mut emptied_tables = BTreeSet::new();
    for rule in rules
        .iter()
        .filter(|r| table.is_none_or(|t| r.table == t))
        .filter(|r| r.source.is_some_and(|s| addresses.contains(&s.ip())))
    {
        log::debug!("deleting rule {}", rule.describe());
        match socket.del_rule(rule) {
            Ok(()) => {
                emptied_tables.insert(rule.table);
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => errors.push(SbrError::DeleteRule(e)),
        }
    }
    if table.is_none() {
        errors.extend(clear_tables(socket, link, emptied_tables).err());
    }
    SbrError::from_many(errors).map_or(Ok(()), Err)
}

/// Empties each of `tables` that no rule looks up any more and that only
/// holds routes through `link`.
fn clear_tables(
    socket: &mut RouteSocket,
    link: &LinkInfo,
    tables: BTreeSet<u32>,
) -> Result<(), SbrError> {
    let candidates: Vec<u32> = tables
        .into_iter()
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
    if candidates.is_empty() {
        return Ok(());
    }
    let rules = socket.list_rules(None).map_err(SbrError::ListRules)?;
    let routes = socket
        .list_route_entries(None)
        .map_err(SbrError::ListRoutes)?;
    let mut errors = Vec::new();
    for table in candidates {
        if rules.iter().any(|r| r.table == table) {
            log::debug!("table {table} is still looked up by another rule: kept");
            continue;
        }
        let in_table: Vec<_> = routes.iter().filter(|r| r.table == table).collect();
        if in_table.iter().any(|r| r.oif != Some(link.index)) {
            log::debug!("table {table} has routes of other interfaces: kept");
            continue;
        }
        for route in in_table {
            log::debug!("deleting route {}", route.describe());
            match socket.delete_route_entry(route) {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(source) => errors.push(SbrError::ClearTable { table, source }),
            }
        }
    }
    SbrError::from_many(errors).map_or(Ok(()), Err)
}
