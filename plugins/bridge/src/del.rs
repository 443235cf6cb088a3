//! DEL: idempotent and best effort.
//!
//! Every step runs even when an earlier one failed, and the failures are
//! reported together: removing the container interface (a missing netns or
//! link is success), IPAM DEL, the MAC spoof check, masquerading. IPAM DEL
//! and the masquerade teardown run also without a netns or a prevResult
//! (containerd's second DEL has `CNI_NETNS=""` and neither).
//!
//! The masquerade teardown gets the container's addresses from the link
//! before deleting it, and from the prevResult; with neither (the second
//! DEL), the rules are found by their attachment identity.
//!
//! The link deletion and IPAM DEL run on worker threads while the firewall
//! teardown runs on the calling thread; none of the three needs another.
//! The veth's unregistration itself (10-25 ms of kernel waits) finishes
//! after DEL returns, in a detached child, once the interface is down and
//! renamed (see [`ContainerInterface::delete`]).
//!
//! The bridge, its addresses and `<bridge>.<vlan>` are shared and stay.

use std::thread;

use ipnetwork::IpNetwork;
use libcni::invoke::{Delegator, Exec};
use libcni::netlink::sublink_plugin;
use libcni::netlink::RouteSocket;
use libcni::skel::CmdArgs;
use libcni::veth;

use crate::add::{container_socket, open_netns};
use crate::background::Background;
use crate::config::TeardownConf;
use crate::error::BridgeError;
use crate::rules::{AttachmentRules, Masquerade};

/// `RT_SCOPE_UNIVERSE`: the addresses masquerade rules are made for.
const SCOPE_UNIVERSE: u8 = 0;

pub fn del<E: Exec>(
    args: &CmdArgs,
    ipam: &Delegator<E>,
    rules: &dyn AttachmentRules,
) -> Result<(), BridgeError> {
    let conf = TeardownConf::from_conf(&args.conf)?;

    let mut interface = None;
    let mut interface_error = None;
    if !args.netns.is_empty() {
        match find_container_interface(&args.netns, &args.ifname) {
            Ok(found) => interface = found,
            // The rest would run in the container's namespace.
            Err(e) if e.left_thread_inside() => return Err(e),
            Err(e) => interface_error = Some(e),
        }
    }
    let on_link = interface
        .as_ref()
        .map(|found| found.addresses.clone())
        .unwrap_or_default();
    let ips = veth::addresses_for_del(on_link, args);

    thread::scope(|scope| {
        // Parking the veth and IPAM DEL (a process of its own) depend
        // neither on each other nor on the firewall teardown, so the three
        // overlap. DEL returns once all are done.
        let deletion =
            interface.map(|found| Background::start(scope, "link-delete", move || found.delete()));
        let released = conf.ipam_type.as_deref().map(|plugin| {
            Background::start(scope, "ipam-del", move || {
                sublink_plugin::ipam_del(args, ipam, plugin).map_err(BridgeError::from)
            })
        });

        let mut firewall_errors = Vec::new();
        if conf.mac_spoof_check {
            if let Err(e) = rules.teardown_spoof_check(&args.container_id, &args.ifname) {
                firewall_errors.push(e);
            }
        }
        if conf.ip_masq && conf.ipam_type.is_some() {
            let masq = Masquerade {
                backend: None,
                network: &conf.network,
                container_id: &args.container_id,
                ifname: &args.ifname,
                ips: &ips,
            };
            if let Err(e) = rules.teardown_masquerade(&masq) {
                firewall_errors.push(e);
            }
        }

        // Reported in the order of the module docs.
        let mut errors: Vec<BridgeError> = interface_error.into_iter().collect();
        if let Some(deletion) = deletion {
            match finished(deletion, "link deletion") {
                Ok(()) => log::info!("deleted {} and its veth peer on the bridge", args.ifname),
                Err(e) => errors.push(e),
            }
        }
        if let Some(released) = released {
            errors.extend(finished(released, "IPAM DEL").err());
        }
        errors.extend(firewall_errors);
        match BridgeError::from_many(errors) {
            None => Ok(()),
            Some(e) => Err(e),
        }
    })
}

fn finished(
    job: Background<'_, Result<(), BridgeError>>,
    what: &'static str,
) -> Result<(), BridgeError> {
    job.finish().unwrap_or(Err(BridgeError::WorkerLost(what)))
}

/// The prefix of the name a container interface gets while its deletion
/// finishes (`cnidel-<index in hex>`, at most 15 bytes), so a DEL can find
/// one whose deletion never happened (its child was killed).
const PARKED_PREFIX: &str = "cnidel-";

/// The container interface, found through a socket bound to its namespace,
/// and any interface an earlier DEL parked there and did not delete.
struct ContainerInterface {
    socket: RouteSocket,
    /// The interface named `ifname`, if it is still there.
    index: Option<u32>,
    ifname: String,
    /// Interfaces named [`PARKED_PREFIX`]...: rare, see there.
    parked: Vec<u32>,
    /// Its global addresses, read before it is deleted.
    addresses: Vec<IpNetwork>,
}

impl ContainerInterface {
    /// Takes the interface out of use, then leaves its deletion to a
    /// detached child; one already gone is success.
    ///
    /// The kernel's unregistration of a veth waits for RCU grace periods
    /// and an `rcu_barrier` (10-25 ms on the test VM) when the link has
    /// long stopped mattering: it was most of a DEL's time. So before
    /// returning, DEL sets the container end down, which drops the
    /// carrier of the host end and with it the bridge port (no traffic
    /// either way, no ARP answers for a released address), and renames
    /// it out of the way, so an ADD that follows at once in the same
    /// namespace finds `ifname` free. The deletion itself is sent from a
    /// child ([`RouteSocket::delete_link_detached`]) and done some
    /// milliseconds later. Should that child die first, the parked link
    /// is deleted by the next DEL in this namespace, or with the
    /// namespace.
    fn delete(mut self) -> Result<(), BridgeError> {
        for index in std::mem::take(&mut self.parked) {
            if let Err(e) = self.socket.delete_link(index) {
                if !e.is_not_found() {
                    log::warn!("delete parked link #{index}: {e}");
                }
            }
        }
        let Some(index) = self.index else {
            return Ok(());
        };
        match park(&mut self.socket, index) {
            Ok(true) => self
                .socket
                .delete_link_detached(index)
                .map_err(|e| e.context(format!("delete {:?}", self.ifname)).into()),
            Ok(false) => Ok(()),
            Err(e) => {
                log::debug!("cannot park {} ({e}); deleting it now", self.ifname);
                match self.socket.delete_link(index) {
                    Err(e) if !e.is_not_found() => {
                        Err(e.context(format!("delete {:?}", self.ifname)).into())
                    }
                    _ => Ok(()),
                }
            }
        }
    }
}

/// Sets link `index` down and renames it `cnidel-<index>`; `false` when it
/// vanished meanwhile. Two requests: the kernel renames only a link that
/// is already down.
fn park(socket: &mut RouteSocket, index: u32) -> Result<bool, libcni::netlink::NetlinkError> {
    let parked_name = format!("{PARKED_PREFIX}{index:x}");
    let outcome = socket
        .set_link_down(index)
        .and_then(|()| socket.set_name(index, &parked_name));
    match outcome {
        Err(e) if e.is_not_found() => Ok(false),
        Err(e) => Err(e),
        Ok(()) => Ok(true),
    }
}

/// Looks `ifname` up in the namespace at `path`, with any parked link
/// left there; a namespace that is already gone, or holds neither, is
/// `None`.
fn find_container_interface(
    path: &str,
    ifname: &str,
) -> Result<Option<ContainerInterface>, BridgeError> {
    let netns = match open_netns(path) {
        Ok(netns) => netns,
        Err(BridgeError::NetNs { source, .. }) if source.is_not_exist() => {
            log::info!("netns {path} is gone; nothing to delete in it");
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let mut socket = container_socket(&netns)?;
    // A pod holds a handful of links: one dump finds `ifname` and any
    // parked link for the cost of one lookup.
    let links = socket.list_links()?;
    let index = links.iter().find(|l| l.name == ifname).map(|l| l.index);
    let parked: Vec<u32> = links
        .iter()
        .filter(|l| l.name.starts_with(PARKED_PREFIX) && l.kind.as_deref() == Some("veth"))
        .map(|l| l.index)
        .collect();
    if index.is_none() && parked.is_empty() {
        return Ok(None);
    }
    let addresses = match index {
        Some(index) => socket
            .list_addresses(Some(index))?
            .into_iter()
            .filter(|a| a.scope == SCOPE_UNIVERSE)
            .map(|a| a.address)
            .collect(),
        None => Vec::new(),
    };
    Ok(Some(ContainerInterface {
        socket,
        index,
        ifname: ifname.to_string(),
        parked,
        addresses,
    }))
}
