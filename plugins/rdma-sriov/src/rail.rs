//! `rail`: the VF as one rail of a multi-rail GPU pod, without an `sbr` and
//! a `tuning` plugin chained behind each rail.
//!
//! A GPU pod gets one VF per rail (eight, on the usual eight-GPU node),
//! each in a subnet of its own, and the traffic of a rail must leave by
//! that rail's NIC: a RoCE connection whose packets or ARP replies go out
//! of another rail's NIC lands on the wrong switch, outside the lossless
//! class and PFC of its own. Linux by default routes by destination only,
//! through one main table, and answers ARP for any of its addresses on any
//! interface. A rail therefore gets:
//!
//! - the ARP and reverse-path settings of [`RAIL_SYSCTLS`] on its
//!   interface, written as soon as the VF netdev is in the pod
//!   ([`set_sysctls`]);
//! - a routing table of its own: a rule `from <address> lookup <table>` for
//!   each address IPAM gave it, and in the table the default route through
//!   its gateway and copies of its routes (its subnet, IPAM's routes
//!   through it), as sbr makes them ([`libcni::source_routing`], shared
//!   with sbr). The table is the first free one from 100, or
//!   `"rail": {"table": N}`; ADD picks it under a lock on the pod's
//!   namespace file, the one sbr takes, so two rails (or a rail and an
//!   sbr) added at once never take the same table.
//!
//! Unlike sbr, the main table keeps the rail's routes as IPAM made them:
//! traffic that names no source (a `ping` of a peer in the rail's subnet,
//! RDMA-CM resolving a peer before it binds) still finds the rail's subnet
//! there, and only traffic from the rail's address needs the rule. All the
//! addresses of a rail share its one table; of two addresses of one family,
//! the first one's gateway gives the table's default route of that family.
//!
//! Undo: the rules live in the pod's namespace and outlast the VF, so
//! teardown (DEL, GC, a failed ADD) deletes them, as the record names them,
//! and empties the table. The sysctls need no undo: the kernel drops a
//! device's IPv4 settings when it leaves a namespace, and the host gets the
//! VF back with its own defaults.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use libcni::error::ErrorList;
use libcni::lock::{FileLock, LockError, LockWait};
use libcni::netlink::{LinkInfo, RouteSocket};
use libcni::netns::NetNs;
use libcni::source_routing::{
    clear_tables, delete_rules, first_free_table, is_free, main_routes_of, route_through_table,
    routes_subnet, verify, Rollback, SourceRoute, SourceRoutingError, FIRST_TABLE,
};
use libcni::sysctl::{self, SysctlError};
use libcni::types::v100;

use crate::config::RailConf;
use crate::error::PluginError;
use crate::state::RailRecord;

/// The rail's interface settings, under `net/ipv4/conf/<ifname>/` in the
/// pod:
///
/// - `arp_ignore` 1: answer an ARP request only for an address of the
///   interface it came in on. With the default 0 every rail answers for
///   every address of the pod, so a peer can learn rail 1's MAC for rail
///   2's address and send rail 2's traffic to rail 1's NIC ("ARP flux").
///   (2 would also require the asker to be in the address's subnet, which
///   refuses askers of another subnet sharing the segment and gains
///   nothing here.)
/// - `arp_announce` 2: an ARP request the rail sends names one of the
///   rail's own addresses as sender, never another rail's address taken
///   from the packet that triggered it, which would teach the peer the
///   wrong MAC for that address.
/// - `rp_filter` 2, loose: a packet is accepted when its source is
///   reachable through any interface. Strict mode (1), the default of many
///   distributions and inherited by the pod's namespace, drops what
///   arrives on a rail whenever the main table would reach the sender
///   through another interface, which is what multi-rail traffic does.
///   Turning the check off (0) is what some sbr + tuning chains write, but
///   the kernel applies the larger of `conf/all` and the interface's value,
///   so 0 on the interface counts only when the pod's `all` is 0 as well,
///   and `all` also rules the pod's primary interface, which is not the
///   rail's to change. 2 is the largest value: it holds whatever `all` is.
///
/// These are the values of the RoCE multi-homing guides (IBM's SMC-R
/// guide: arp_ignore 1, arp_announce 2, rp_filter 2; libfabric's verbs
/// multi-NIC notes: rp_filter 2) and of the `tuning` step GPU operators
/// chain before `sbr` for each rail (arp_ignore 1, arp_announce 2). IPv6
/// needs none: neighbour discovery answers only for addresses of the
/// interface the solicitation came in on.
pub const RAIL_SYSCTLS: [(&str, &str); 3] = [
    ("arp_ignore", "1"),
    ("arp_announce", "2"),
    ("rp_filter", "2"),
];

/// Who holds the pod's routing lock when a call times out waiting for it.
const LOCK_HOLDER: &str = "another CNI call routing this pod (a rail or sbr)";

fn sysctl_path(ifname: &str, name: &str) -> String {
    format!("net/ipv4/conf/{ifname}/{name}")
}

/// Writes [`RAIL_SYSCTLS`] for `ifname` inside the pod.
pub(crate) fn set_sysctls(pod: &NetNs, ifname: &str) -> Result<(), PluginError> {
    pod.run(|| -> Result<(), SysctlError> {
        for (name, value) in RAIL_SYSCTLS {
            sysctl::set(&sysctl_path(ifname, name), value)?;
        }
        Ok(())
    })??;
    Ok(())
}

/// The lock sbr takes too: an exclusive `flock` on the pod's namespace
/// file, for as long as the returned value lives.
pub(crate) fn lock_pod(pod: &NetNs, timeout: Duration) -> Result<FileLock, LockError> {
    FileLock::acquire_open(
        pod.file(),
        pod.path(),
        LockWait {
            timeout,
            holder: LOCK_HOLDER,
        },
    )
}

/// The rail's addresses (those of interface 0, the VF) with the gateway of
/// their family's default route in the rail's table: the first gateway IPAM
/// gave for that family, on the address it came with.
pub(crate) fn sources(result: &v100::Result) -> Vec<SourceRoute> {
    let mut routed_families: Vec<bool> = Vec::new();
    result
        .ips
        .iter()
        .filter(|ip| ip.interface.is_none_or(|i| i == 0))
        .map(|ip| {
            let v4 = ip.address.is_ipv4();
            let gateway = ip
                .gateway
                .filter(|g| g.is_ipv4() == v4 && !routed_families.contains(&v4));
            if gateway.is_some() {
                routed_families.push(v4);
            }
            SourceRoute {
                address: ip.address,
                gateway,
            }
        })
        .collect()
}

/// The table the rail gets: the configured one if nothing in the pod uses
/// it, else the first free one from 100. Call with the pod locked.
pub(crate) fn pick_table(socket: &mut RouteSocket, conf: &RailConf) -> Result<u32, PluginError> {
    let rules = socket
        .list_rules(None)
        .map_err(SourceRoutingError::ListRules)?;
    let routes = socket
        .list_route_entries(None)
        .map_err(SourceRoutingError::ListRoutes)?;
    match conf.table {
        Some(table) if is_free(table, &rules, &routes) => Ok(table),
        Some(table) => Err(PluginError::RailTableInUse { table }),
        None => Ok(first_free_table(FIRST_TABLE, &rules, &routes)?),
    }
}

/// Adds the rules and fills the table `record` describes, for the rail on
/// `link`. A failure part way takes back what this call made; the record,
/// saved before, lets teardown finish the job if that fails too.
pub(crate) fn add_routing(
    socket: &mut RouteSocket,
    link: &LinkInfo,
    record: &RailRecord,
) -> Result<(), PluginError> {
    let routes = socket
        .list_route_entries(None)
        .map_err(SourceRoutingError::ListRoutes)?;
    let link_routes = main_routes_of(&routes, link.index);
    let mut rollback = Rollback::default();
    for source in &record.sources {
        if let Err(e) = route_through_table(
            socket,
            link.index,
            source,
            record.table,
            &link_routes,
            &mut rollback,
        ) {
            for failure in rollback.unwind(socket) {
                log::warn!("undoing the rail's routing: {failure}");
            }
            return Err(e.into());
        }
    }
    log::info!(
        "rail {}: traffic from {} routed through table {}",
        link.name,
        record
            .sources
            .iter()
            .map(|s| s.address.ip().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        record.table
    );
    Ok(())
}

/// Deletes the rail's rules (from its recorded addresses, to its table)
/// and empties its table when only the rail's routes are left in it and no
/// rule looks it up. `ifname` is the VF's name in the pod when it is still
/// there; without it the kernel has already dropped the routes through it.
/// Goes on after a failure; returns every one.
pub(crate) fn remove_routing(
    pod: &NetNs,
    ifname: Option<&str>,
    record: &RailRecord,
    lock_timeout: Duration,
) -> Result<(), ErrorList> {
    let mut problems = ErrorList::new();
    let _lock = match lock_pod(pod, lock_timeout) {
        Ok(lock) => lock,
        Err(e) => {
            problems.push(&PluginError::Lock(e));
            return Err(problems);
        }
    };
    let mut socket = match RouteSocket::open_in(pod) {
        Ok(socket) => socket,
        Err(e) => {
            problems.push(&PluginError::Netlink(e));
            return Err(problems);
        }
    };
    let addresses: Vec<IpAddr> = record.sources.iter().map(|s| s.address.ip()).collect();
    let deleted = delete_rules(&mut socket, &addresses, Some(record.table));
    for e in &deleted.errors {
        problems.push(e);
    }
    let link = match ifname.map(|name| socket.link_by_name(name)).transpose() {
        Ok(link) => link.flatten(),
        Err(e) => {
            problems.push(&PluginError::Netlink(e));
            None
        }
    };
    if let Some(link) = link {
        for e in clear_tables(&mut socket, link.index, &BTreeSet::from([record.table])) {
            problems.push(&e);
        }
    }
    problems.into_result()
}

/// CHECK: the rail's sysctls hold ADD's values, and for each recorded
/// address a rule looks up the rail's table, which routes the address's
/// subnet out of the rail and, when there is a gateway, routes by default
/// through it.
pub(crate) fn check(
    pod: &NetNs,
    socket: &mut RouteSocket,
    link: &LinkInfo,
    record: &RailRecord,
) -> Result<(), PluginError> {
    let ifname = link.name.clone();
    let mismatch = pod.run(|| -> Result<Option<String>, PluginError> {
        for (name, wanted) in RAIL_SYSCTLS {
            let path = sysctl_path(&ifname, name);
            let value = sysctl::get(&path)?;
            if value != wanted {
                return Ok(Some(format!(
                    "rail {ifname}: {} is {value}, expected {wanted}",
                    path.replace('/', ".")
                )));
            }
        }
        Ok(None)
    })??;
    if let Some(message) = mismatch {
        return Err(PluginError::Check(message));
    }
    let rules = socket
        .list_rules(None)
        .map_err(SourceRoutingError::ListRules)?;
    let routes = socket
        .list_route_entries(None)
        .map_err(SourceRoutingError::ListRoutes)?;
    for source in &record.sources {
        verify(&rules, &routes, link, source, Some(record.table))
            .map_err(|e| PluginError::Check(format!("rail {}: {e}", link.name)))?;
        if !routes_subnet(&routes, record.table, &source.address, link.index) {
            return Err(PluginError::Check(format!(
                "rail {}: table {} has no route to {} dev {}",
                link.name,
                record.table,
                source.address.network(),
                link.name
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_family_takes_the_first_gateway_it_is_given() {
        let result: v100::Result = serde_json::from_value(json!({
            "cniVersion": "1.1.0",
            "ips": [
                {"address": "10.1.0.2/24", "interface": 0},
                {"address": "10.1.1.2/24", "interface": 0, "gateway": "10.1.1.1"},
                {"address": "10.1.2.2/24", "interface": 0, "gateway": "10.1.2.1"},
                {"address": "fd00::2/64", "interface": 0, "gateway": "fd00::1"},
                {"address": "10.9.0.2/24", "interface": 1, "gateway": "10.9.0.1"}
            ]
        }))
        .unwrap();
        let gateways: Vec<(String, Option<String>)> = sources(&result)
            .iter()
            .map(|s| (s.address.to_string(), s.gateway.map(|g| g.to_string())))
            .collect();
        assert_eq!(
            gateways,
            vec![
                ("10.1.0.2/24".to_string(), None),
                ("10.1.1.2/24".to_string(), Some("10.1.1.1".to_string())),
                ("10.1.2.2/24".to_string(), None),
                ("fd00::2/64".to_string(), Some("fd00::1".to_string())),
            ]
        );
    }
}
