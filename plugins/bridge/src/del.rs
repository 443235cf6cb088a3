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
//! teardown runs on the calling thread: the kernel's veth unregistration
//! alone takes 10-30 ms, and none of the three needs another.
//!
//! The bridge, its addresses and `<bridge>.<vlan>` are shared and stay.

use std::thread;

use ipnetwork::IpNetwork;
use libcni::invoke::{Delegator, Exec};
use libcni::netlink::RouteSocket;
use libcni::skel::CmdArgs;
use libcni::types::v100;

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
    let mut ips = interface
        .as_ref()
        .map(|found| found.addresses.clone())
        .unwrap_or_default();
    for ip in prev_result_ips(args) {
        if !ips.contains(&ip) {
            ips.push(ip);
        }
    }

    thread::scope(|scope| {
        // The kernel takes 10-30 ms to unregister a veth (it waits for RCU
        // grace periods) and IPAM DEL is a process of its own; neither
        // depends on the other nor on the firewall teardown, so the three
        // overlap. DEL still returns only once all are done.
        let deletion =
            interface.map(|found| Background::start(scope, "link-delete", move || found.delete()));
        let released = conf.ipam_type.as_deref().map(|plugin| {
            Background::start(scope, "ipam-del", move || {
                ipam.del(plugin, args.conf.bytes())
                    .map_err(|source| BridgeError::Ipam {
                        action: "IPAM DEL with",
                        plugin: plugin.to_string(),
                        source,
                    })
            })
        });

        let mut firewall_errors = Vec::new();
        if conf.mac_spoof_check {
            if let Err(e) = rules.teardown_spoof_check(&args.container_id, &args.ifname) {
                log::warn!("{e}");
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
            errors.extend(finished(deletion, "link deletion").err());
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

/// The container interface, found through a socket bound to its namespace.
struct ContainerInterface {
    socket: RouteSocket,
    index: u32,
    ifname: String,
    /// Its global addresses, read before it is deleted.
    addresses: Vec<IpNetwork>,
}

impl ContainerInterface {
    /// Deletes the link; one already gone is success.
    fn delete(mut self) -> Result<(), BridgeError> {
        match self.socket.delete_link(self.index) {
            Err(e) if !e.is_not_found() => {
                Err(e.context(format!("delete {:?}", self.ifname)).into())
            }
            _ => Ok(()),
        }
    }
}

/// Looks `ifname` up in the namespace at `path`; a namespace or link that
/// is already gone is `None`.
fn find_container_interface(
    path: &str,
    ifname: &str,
) -> Result<Option<ContainerInterface>, BridgeError> {
    let netns = match open_netns(path) {
        Ok(netns) => netns,
        Err(BridgeError::NetNs { source, .. }) if source.is_not_exist() => {
            log::debug!("netns {path:?} is gone; nothing to delete in it");
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let mut socket = container_socket(&netns)?;
    let Some(link) = socket.link_by_name(ifname)? else {
        return Ok(None);
    };
    let addresses = socket
        .list_addresses(Some(link.index))?
        .into_iter()
        .filter(|a| a.scope == SCOPE_UNIVERSE)
        .map(|a| a.address)
        .collect();
    Ok(Some(ContainerInterface {
        socket,
        index: link.index,
        ifname: ifname.to_string(),
        addresses,
    }))
}

/// The container's addresses per the prevResult, if there is a usable one.
fn prev_result_ips(args: &CmdArgs) -> Vec<IpNetwork> {
    let prev = match args.conf.prev_result() {
        Ok(Some(prev)) => prev,
        Ok(None) => return Vec::new(),
        Err(e) => {
            log::warn!("ignoring the prevResult: {e}");
            return Vec::new();
        }
    };
    match v100::Result::try_from(prev) {
        Ok(prev) => prev.ips.into_iter().map(|ip| ip.address).collect(),
        Err(e) => {
            log::warn!("ignoring the prevResult: {e}");
            Vec::new()
        }
    }
}
