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

use libcni::netlink::{LinkInfo, RouteSocket};
use libcni::source_routing::{clear_tables, delete_rules};

use crate::error::SbrError;

pub fn tidy(socket: &mut RouteSocket, link: &LinkInfo, table: Option<u32>) -> Result<(), SbrError> {
    let addresses: Vec<_> = socket
        .list_addresses(Some(link.index))?
        .into_iter()
        .map(|a| a.address.ip())
        .collect();
    let deleted = delete_rules(socket, &addresses, table);
    let mut errors: Vec<SbrError> = deleted.errors.into_iter().map(SbrError::from).collect();
    if table.is_none() {
        errors.extend(
            clear_tables(socket, link.index, &deleted.tables)
                .into_iter()
                .map(SbrError::from),
        );
    }
    SbrError::from_many(errors).map_or(Ok(()), Err)
}
