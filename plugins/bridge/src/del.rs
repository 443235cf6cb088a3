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
//! The bridge, its addresses and `<bridge>.<vlan>` are shared and stay.

use ipnetwork::IpNetwork;
use libcni::invoke::{Delegator, Exec};
use libcni::netlink::RouteSocket;
use libcni::skel::CmdArgs;
use libcni::types::v100;

use crate::add::open_netns;
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
    let mut errors = Vec::new();

    let mut ips = Vec::new();
    if !args.netns.is_empty() {
        match remove_container_interface(&args.netns, &args.ifname) {
            Ok(found) => ips = found,
            Err(e) => errors.push(e),
        }
    }
    for ip in prev_result_ips(args) {
        if !ips.contains(&ip) {
            ips.push(ip);
        }
    }

    if let Some(plugin) = &conf.ipam_type {
        if let Err(source) = ipam.del(plugin, args.conf.bytes()) {
            errors.push(BridgeError::Ipam {
                action: "IPAM DEL with",
                plugin: plugin.clone(),
                source,
            });
        }
    }
    if conf.mac_spoof_check {
        if let Err(e) = rules.teardown_spoof_check(&args.container_id, &args.ifname) {
            log::warn!("{e}");
            errors.push(e);
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
            errors.push(e);
        }
    }
    match BridgeError::from_many(errors) {
        None => Ok(()),
        Some(e) => Err(e),
    }
}

/// Deletes `ifname` in the namespace at `path` and returns its global
/// addresses; a namespace or link that is already gone is success.
fn remove_container_interface(path: &str, ifname: &str) -> Result<Vec<IpNetwork>, BridgeError> {
    let netns = match open_netns(path) {
        Ok(netns) => netns,
        Err(BridgeError::NetNs { source, .. }) if source.is_not_exist() => {
            log::debug!("netns {path:?} is gone; nothing to delete in it");
            return Ok(Vec::new());
        }
        Err(e) => return Err(e),
    };
    let mut socket = RouteSocket::open_in(&netns)?;
    let Some(link) = socket.link_by_name(ifname)? else {
        return Ok(Vec::new());
    };
    let ips = socket
        .list_addresses(Some(link.index))?
        .into_iter()
        .filter(|a| a.scope == SCOPE_UNIVERSE)
        .map(|a| a.address)
        .collect();
    match socket.delete_link(link.index) {
        Err(e) if !e.is_not_found() => Err(e.context(format!("delete {ifname:?}")).into()),
        _ => Ok(ips),
    }
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
