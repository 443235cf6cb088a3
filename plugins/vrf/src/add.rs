//! ADD: `CNI_IFNAME` into the VRF `vrfname`, with its addresses and
//! routes.
//!
//! 1. The configuration and the prevResult are read; the interface must
//!    exist and have no master. Both are checked before anything changes
//!    (the reference creates the VRF first and leaves it when the
//!    interface is missing or taken).
//! 2. The VRF is found or made: a link of that name that is no VRF, or a
//!    VRF with another table than `table` asks for, is an error; a new VRF
//!    gets `table` or the lowest id no VRF of the namespace uses (other
//!    tables are not looked at, as in the reference), and is set up.
//! 3. The interface's global IPv6 addresses and its main-table routes of
//!    universe scope are noted, the interface is enslaved (the kernel
//!    cycles it: IPv6 addresses go unless `keep_addr_on_down`, routes
//!    through it go), the IPv6 addresses that went are added again and
//!    their `/128` local routes awaited in the VRF table, and the noted
//!    routes are put in the VRF table. Routes the kernel makes itself
//!    (protocol kernel: prefix and link-local routes) are left to it: it
//!    makes them again in the VRF table.
//! 4. The result is the prevResult, unchanged.
//!
//! A failure in step 3 takes the interface out of the VRF again, puts the
//! noted addresses and routes back, and deletes the VRF if this ADD made
//! it and nothing else joined it.

use std::net::IpAddr;
use std::thread;
use std::time::Duration;

use ipnetwork::IpNetwork;
use libcni::iface::MAIN_TABLE;
use libcni::netlink::route_entry::ROUTE_TYPE_UNICAST;
use libcni::netlink::standalone_link::{
    StandaloneKind, StandaloneLink, StandaloneLinkError, VrfLink,
};
use libcni::netlink::sublink_plugin;
use libcni::netlink::{IpFamily, LinkInfo, RouteEntry, RouteSocket};
use libcni::skel::CmdArgs;
use libcni::types::AnyResult;

use crate::config::VrfConf;
use crate::error::VrfError;

/// `RTPROT_KERNEL`: routes the kernel makes for addresses and links.
const PROTOCOL_KERNEL: u8 = 2;
/// `RTN_LOCAL`.
const ROUTE_TYPE_LOCAL: u8 = 2;
/// The reference's wait for a re-added address's local route: 8 looks,
/// 10 ms apart at first, doubling (about 2.5 s in all; the route appears
/// once duplicate address detection is done).
const LOCAL_ROUTE_LOOKS: u32 = 8;
const LOCAL_ROUTE_FIRST_WAIT: Duration = Duration::from_millis(10);

pub fn add(args: &CmdArgs) -> Result<AnyResult, VrfError> {
    let conf = VrfConf::from_conf(&args.conf)?;
    let prev = args
        .conf
        .prev_result()?
        .ok_or(VrfError::PrevResultMissing)?;
    attach(args, &conf).map_err(VrfError::in_add)?;
    Ok(prev)
}

fn attach(args: &CmdArgs, conf: &VrfConf) -> Result<(), VrfError> {
    let netns = sublink_plugin::open_container_netns(&args.netns)?;
    let mut socket = RouteSocket::open_in(&netns)?;
    let iface = socket
        .link_by_name(&args.ifname)?
        .ok_or_else(|| VrfError::InterfaceMissing(args.ifname.clone()))?;
    if let Some(master) = iface.master {
        let master = socket
            .link_by_index(master)?
            .map_or_else(|| format!("#{master}"), |link| link.name);
        return Err(VrfError::HasMaster {
            ifname: iface.name,
            master,
        });
    }
    let (vrf, created) = find_or_create_vrf(&mut socket, conf)?;
    let mut enslavement = Enslavement {
        socket,
        iface,
        vrf,
        created,
        saved_v6: Vec::new(),
        saved_routes: Vec::new(),
        enslaved: false,
    };
    enslavement.run().inspect_err(|_| enslavement.undo())
}

/// The VRF of the configuration, made when missing; `true` when made now.
fn find_or_create_vrf(
    socket: &mut RouteSocket,
    conf: &VrfConf,
) -> Result<(VrfLink, bool), VrfError> {
    // Twice: another ADD may make the same VRF between the look and the
    // creation, which then finds it.
    for _ in 0..2 {
        if let Some(vrf) = find_vrf(socket, &conf.vrf_name)? {
            if let Some(table) = conf.table.filter(|&t| t != vrf.table) {
                return Err(VrfError::TableConflict {
                    name: conf.vrf_name.clone(),
                    table,
                });
            }
            return Ok((vrf, false));
        }
        let table = match conf.table {
            Some(table) => table,
            None => lowest_free_table(socket.list_vrfs()?.iter().map(|v| v.table)),
        };
        let created = socket.create_standalone_link(&StandaloneLink {
            name: &conf.vrf_name,
            kind: StandaloneKind::Vrf { table },
            mtu: None,
            mac: None,
        });
        match created {
            Ok(()) => {}
            Err(StandaloneLinkError::Exists { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
        let vrf = find_vrf(socket, &conf.vrf_name)?
            .ok_or_else(|| VrfError::VrfMissing(conf.vrf_name.clone()))?;
        if let Err(source) = socket.set_link_up(vrf.link.index) {
            delete_vrf_quietly(socket, &vrf);
            return Err(VrfError::SetUp {
                name: conf.vrf_name.clone(),
                source,
            });
        }
        return Ok((vrf, true));
    }
    Err(VrfError::VrfMissing(conf.vrf_name.clone()))
}

/// The VRF called `name`; a link of that name that is no VRF is an error.
pub fn find_vrf(socket: &mut RouteSocket, name: &str) -> Result<Option<VrfLink>, VrfError> {
    let Some(link) = socket.link_by_name(name)? else {
        return Ok(None);
    };
    if link.kind.as_deref() != Some("vrf") {
        return Err(VrfError::NotAVrf(name.to_string()));
    }
    Ok(socket
        .list_vrfs()?
        .into_iter()
        .find(|vrf| vrf.link.index == link.index))
}

/// The lowest table id, from 1, that none of `used` is.
pub fn lowest_free_table(used: impl Iterator<Item = u32>) -> u32 {
    let used: std::collections::BTreeSet<u32> = used.collect();
    (1..=u32::MAX)
        .find(|id| !used.contains(id))
        .unwrap_or(u32::MAX)
}

fn delete_vrf_quietly(socket: &mut RouteSocket, vrf: &VrfLink) {
    if let Err(e) = socket.delete_link(vrf.link.index) {
        if !e.is_not_found() {
            log::warn!("rollback: delete VRF {}: {e}", vrf.link.name);
        }
    }
}

/// Step 3 of ADD and its undo.
struct Enslavement {
    socket: RouteSocket,
    iface: LinkInfo,
    vrf: VrfLink,
    /// This ADD made the VRF.
    created: bool,
    saved_v6: Vec<IpNetwork>,
    saved_routes: Vec<RouteEntry>,
    enslaved: bool,
}

impl Enslavement {
    fn run(&mut self) -> Result<(), VrfError> {
        let index = self.iface.index;
        let ifname = self.iface.name.clone();
        self.saved_v6 = self
            .socket
            .list_addresses(Some(index))?
            .into_iter()
            .filter(|a| a.address.is_ipv6() && a.scope == 0)
            .map(|a| a.address)
            .collect();
        self.saved_routes = self
            .socket
            .list_route_entries(None)?
            .into_iter()
            .filter(|r| {
                r.oif == Some(index)
                    && r.table == MAIN_TABLE
                    && r.scope == 0
                    && r.kind == ROUTE_TYPE_UNICAST
                    && r.protocol != PROTOCOL_KERNEL
            })
            .collect();

        self.socket
            .set_master(index, Some(self.vrf.link.index))
            .map_err(|source| VrfError::Enslave {
                vrf: self.vrf.link.name.clone(),
                ifname: ifname.clone(),
                source,
            })?;
        self.enslaved = true;

        let present: Vec<IpNetwork> = self
            .socket
            .list_addresses(Some(index))?
            .into_iter()
            .map(|a| a.address)
            .collect();
        for address in self.saved_v6.iter().filter(|a| !present.contains(a)) {
            self.socket
                .add_address(index, *address)
                .map_err(|source| VrfError::ReAddAddress {
                    address: *address,
                    ifname: ifname.clone(),
                    source,
                })?;
        }
        for address in self.saved_v6.clone() {
            self.wait_for_local_route(address.ip())?;
        }
        for route in &self.saved_routes {
            let moved = route.in_table(self.vrf.table);
            self.socket
                .replace_route_entry(&moved)
                .map_err(|source| VrfError::MoveRoute {
                    route: moved.describe(),
                    source,
                })?;
        }
        log::info!(
            "{ifname} joined VRF {} (table {}{}); routes moved to its table: {}",
            self.vrf.link.name,
            self.vrf.table,
            if self.created { ", VRF created" } else { "" },
            libcni::logging::joined(self.saved_routes.iter().map(|r| r.describe()))
        );
        Ok(())
    }

    /// The `/128` local route of `address` in the VRF table.
    fn wait_for_local_route(&mut self, address: IpAddr) -> Result<(), VrfError> {
        let host = IpNetwork::new(address, 128).ok();
        let mut wait = LOCAL_ROUTE_FIRST_WAIT;
        for _ in 0..LOCAL_ROUTE_LOOKS {
            let found = self
                .socket
                .list_route_entries(Some(IpFamily::V6))?
                .iter()
                .any(|r| {
                    r.table == self.vrf.table
                        && r.kind == ROUTE_TYPE_LOCAL
                        && Some(r.destination) == host
                });
            if found {
                return Ok(());
            }
            thread::sleep(wait);
            wait *= 2;
        }
        Err(VrfError::LocalRouteMissing {
            ifname: self.iface.name.clone(),
            table: self.vrf.table,
            address,
        })
    }

    /// Puts the interface back as it was, as far as it can; failures are
    /// logged, the error that caused the undo is what ADD reports.
    fn undo(&mut self) {
        let index = self.iface.index;
        if self.enslaved {
            if let Err(e) = self.socket.set_master(index, None) {
                log::warn!("rollback: take {} out of the VRF: {e}", self.iface.name);
            }
            for address in &self.saved_v6 {
                if let Err(e) = self.socket.add_address(index, *address) {
                    if !e.is_exists() {
                        log::warn!("rollback: re-add {address}: {e}");
                    }
                }
            }
            for route in &self.saved_routes {
                let restored = route.in_table(route.table);
                if let Err(e) = self.socket.replace_route_entry(&restored) {
                    log::warn!("rollback: restore route {}: {e}", route.describe());
                }
            }
        }
        if self.created {
            let members = self
                .socket
                .list_links()
                .map(|links| links.iter().any(|l| l.master == Some(self.vrf.link.index)));
            match members {
                Ok(false) => delete_vrf_quietly(&mut self.socket, &self.vrf),
                Ok(true) => {}
                Err(e) => log::warn!("rollback: list the VRF's members: {e}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowest_free_table_as_the_reference_picks_it() {
        assert_eq!(lowest_free_table([1, 2, 3, 5].into_iter()), 4);
        assert_eq!(lowest_free_table(std::iter::empty()), 1);
        assert_eq!(lowest_free_table(1..=999), 1000);
        assert_eq!(lowest_free_table([2, 3].into_iter()), 1);
    }
}
