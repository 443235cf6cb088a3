//! Moving the host link into the pod and back.
//!
//! A link cannot enter a namespace that has a link of its name, and both
//! sides may have one (the host link `eth0` given to a pod that has its
//! own `eth0` as another attachment; a pod's `net1` coming back to a host
//! that has a `net1`). So the link always crosses under a temporary name
//! (`veth` + 8 random hex digits, libcni's) and gets its final name on the
//! far side, where a clash is reported as such. A link must be down to be
//! renamed.
//!
//! Into the pod: down, alias = host name, temporary name, move, `CNI_IFNAME`,
//! up. Back: down, temporary name, move, then [`restore_in_host`] puts
//! back name, MAC, MTU, alias and admin state from the [`SavedLink`].
//! Each function undoes its own steps when one fails, so the link ends
//! either where it was asked to go or where it was.

use std::os::fd::AsFd;

use libcni::hwaddr;
use libcni::link_name::random_veth_name;
use libcni::netlink::sublink::NAME_ATTEMPTS;
use libcni::netlink::{format_mac, LinkInfo, NetlinkError, RouteSocket};
use libcni::netns::NetNs;

use crate::state::SavedLink;

#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// The netlink error names the operation; `device` names the link.
    #[error("{device}: {source}")]
    Netlink {
        device: String,
        #[source]
        source: NetlinkError,
    },
    #[error("cannot name the device {ifname:?} in the container: the container already has an interface of that name")]
    NameTakenInPod { ifname: String },
    #[error("cannot give {ifname:?} back to the host as {name:?}: the host has another interface of that name; rename or remove it and run DEL again")]
    NameTakenInHost { ifname: String, name: String },
    #[error("{0:?} vanished during the move")]
    Vanished(String),
    #[error("no free temporary interface name after {0} attempts")]
    NamesTaken(usize),
    #[error("cannot draw a temporary interface name: {0}")]
    Random(String),
}

fn netlink(device: impl Into<String>) -> impl FnOnce(NetlinkError) -> TransferError {
    let device = device.into();
    move |source| TransferError::Netlink { device, source }
}

/// What a host link looks like before it is handed over.
pub fn saved_link(link: &LinkInfo, alias: Option<String>) -> SavedLink {
    SavedLink {
        name: link.name.clone(),
        index: link.index,
        mac: format_mac(&link.mac),
        mtu: link.mtu,
        up: link.up,
        alias,
        returns_to_host: returns_to_host(link.kind.as_deref()),
    }
}

/// Whether the kernel moves a link of this kind back to the initial
/// namespace when its namespace is destroyed, rather than destroying it:
/// links without a kind (their driver has no link operations: physical
/// NICs) and CAN devices, whose link operations ask for it.
pub fn returns_to_host(kind: Option<&str>) -> bool {
    matches!(kind, None | Some("can"))
}

/// Renames the (down) link to a fresh temporary name, retrying on a clash.
fn rename_temporary(
    socket: &mut RouteSocket,
    index: u32,
    name: &str,
) -> Result<String, TransferError> {
    for _ in 0..NAME_ATTEMPTS {
        let temp = random_veth_name().map_err(|e| TransferError::Random(e.to_string()))?;
        match socket.set_name(index, &temp) {
            Ok(()) => return Ok(temp),
            Err(e) if e.is_exists() => continue,
            Err(e) => return Err(netlink(name)(e)),
        }
    }
    Err(TransferError::NamesTaken(NAME_ATTEMPTS))
}

/// The two namespaces of a move, each with its socket.
pub struct Sides<'a> {
    pub host: &'a mut RouteSocket,
    pub host_ns: &'a NetNs,
    pub pod: &'a mut RouteSocket,
    pub pod_ns: &'a NetNs,
}

/// Moves host link `saved` into the pod as `ifname`, up, with the host
/// name as its alias; returns it as the pod sees it. On failure the link
/// is back in the host as it was.
pub fn move_into_pod(
    sides: &mut Sides<'_>,
    saved: &SavedLink,
    ifname: &str,
) -> Result<LinkInfo, TransferError> {
    let index = saved.index;
    let mut in_pod = None;
    let outcome = (|| {
        sides
            .host
            .set_alias(index, Some(&saved.name))
            .map_err(netlink(&saved.name))?;
        let pod_index = send_across(sides.host, sides.pod, sides.pod_ns, index)?;
        in_pod = Some(pod_index);
        name_and_raise(sides.pod, pod_index, ifname, true)
    })();
    if outcome.is_err() {
        let back = match in_pod {
            Some(pod_index) => send_across(sides.pod, sides.host, sides.host_ns, pod_index),
            None => Ok(index),
        };
        let restored = back.and_then(|host_index| restore_in_host(sides.host, host_index, saved));
        if let Err(e) = restored {
            log::warn!("cannot put {} back after a failed move: {e}", saved.name);
        }
    }
    outcome
}

/// Names the link that arrived in `socket`'s namespace and sets it up
/// when asked; returns it.
fn name_and_raise(
    socket: &mut RouteSocket,
    index: u32,
    name: &str,
    up: bool,
) -> Result<LinkInfo, TransferError> {
    match socket.set_name(index, name) {
        Ok(()) => {}
        Err(e) if e.is_exists() => {
            return Err(TransferError::NameTakenInPod {
                ifname: name.to_string(),
            })
        }
        Err(e) => return Err(netlink(name)(e)),
    }
    if up {
        socket.set_link_up(index).map_err(netlink(name))?;
    }
    socket
        .link_by_index(index)
        .map_err(netlink(name))?
        .ok_or_else(|| TransferError::Vanished(name.to_string()))
}

/// Sends link `index` of `from`'s namespace to `to_ns` under a temporary
/// name; returns its index there. On failure it keeps its name and admin
/// state in `from`.
fn send_across(
    from: &mut RouteSocket,
    to: &mut RouteSocket,
    to_ns: &NetNs,
    index: u32,
) -> Result<u32, TransferError> {
    let link = from
        .link_by_index(index)
        .map_err(netlink(format!("link #{index}")))?
        .ok_or_else(|| TransferError::Vanished(format!("link #{index}")))?;
    // Links are renamed only when down.
    from.set_link_down(index).map_err(netlink(&link.name))?;
    let sent = rename_temporary(from, index, &link.name).and_then(|temp| {
        from.set_netns_fd(index, to_ns.file().as_fd())
            .map_err(netlink(&link.name))?;
        Ok(temp)
    });
    let temp = match sent {
        Ok(temp) => temp,
        Err(e) => {
            let _ = from.set_name(index, &link.name);
            if link.up {
                let _ = from.set_link_up(index);
            }
            return Err(e);
        }
    };
    let arrived = to
        .link_by_name(&temp)
        .map_err(netlink(&temp))?
        .ok_or(TransferError::Vanished(temp))?;
    Ok(arrived.index)
}

/// DEL's move: the pod's link `pod_link` back to the host, restored as
/// `saved`. A host link already named like `saved` is reported before
/// anything moves; should one appear meanwhile, the link goes back into
/// the pod as it was, for the next DEL.
pub fn move_out_of_pod(
    sides: &mut Sides<'_>,
    pod_link: &LinkInfo,
    saved: &SavedLink,
) -> Result<(), TransferError> {
    let taken = || TransferError::NameTakenInHost {
        ifname: pod_link.name.clone(),
        name: saved.name.clone(),
    };
    let clash = sides
        .host
        .link_by_name(&saved.name)
        .map_err(netlink(&saved.name))?;
    if clash.is_some() {
        return Err(taken());
    }
    let host_index = send_across(sides.pod, sides.host, sides.host_ns, pod_link.index)?;
    match restore_in_host(sides.host, host_index, saved) {
        Err(TransferError::NameTakenInHost { .. }) => {
            let back = send_across(sides.host, sides.pod, sides.pod_ns, host_index)
                .and_then(|i| name_and_raise(sides.pod, i, &pod_link.name, pod_link.up));
            if let Err(e) = back {
                log::warn!("cannot return {} to the container: {e}", pod_link.name);
            }
            Err(taken())
        }
        other => other,
    }
}

/// Puts back a host link as `saved` describes it: name, MAC, MTU, alias,
/// then up if it was. Every step is tried; the first failure is returned.
pub fn restore_in_host(
    host: &mut RouteSocket,
    index: u32,
    saved: &SavedLink,
) -> Result<(), TransferError> {
    let link = host
        .link_by_index(index)
        .map_err(netlink(format!("link #{index}")))?
        .ok_or_else(|| TransferError::Vanished(saved.name.clone()))?;
    let mut first_error = None;
    let mut note = |result: Result<(), TransferError>| {
        if let Err(e) = result {
            // The first error is returned; later ones are logged here.
            match first_error {
                Some(_) => log::warn!("restoring {}: {e}", saved.name),
                None => first_error = Some(e),
            }
        }
    };
    if link.name != saved.name {
        if link.up {
            note(host.set_link_down(index).map_err(netlink(&link.name)));
        }
        match host.set_name(index, &saved.name) {
            Ok(()) => {}
            Err(e) if e.is_exists() => {
                return Err(TransferError::NameTakenInHost {
                    ifname: link.name.clone(),
                    name: saved.name.clone(),
                })
            }
            Err(e) => return Err(netlink(&link.name)(e)),
        }
    }
    if let Some(mac) = hwaddr::parse(&saved.mac).filter(|mac| *mac != link.mac) {
        note(host.set_mac(index, &mac).map_err(netlink(&saved.name)));
    }
    if saved.mtu != 0 && saved.mtu != link.mtu {
        note(host.set_mtu(index, saved.mtu).map_err(netlink(&saved.name)));
    }
    note(
        host.set_alias(index, saved.alias.as_deref())
            .map_err(netlink(&saved.name)),
    );
    if saved.up {
        note(host.set_link_up(index).map_err(netlink(&saved.name)));
    }
    first_error.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_links_without_a_kind_and_can_devices_come_back() {
        assert!(returns_to_host(None));
        assert!(returns_to_host(Some("can")));
        for virtual_kind in ["veth", "macvlan", "vlan", "vcan", "dummy", "bond"] {
            assert!(!returns_to_host(Some(virtual_kind)), "{virtual_kind}");
        }
    }
}
