//! The VF netdev: into the pod under CNI_IFNAME and back to the host under
//! its own name.
//!
//! Moves go through a temporary name (`rsv` + random hex): a link cannot
//! enter a namespace that already has a link of its name, and the pod
//! (into it) or the host (back out) may have one. The final rename happens
//! on the far side, where a clash is reported as such instead of failing
//! the move itself.

use std::io;
use std::os::fd::BorrowedFd;

use libcni::device::{BusDevice, Sysfs};
use libcni::netlink::{LinkInfo, NetlinkError, RouteSocket};

use crate::hwaddr::MacAddr;
use crate::state::HostNetdev;

/// Prefix of temporary names, so a leftover is recognisable.
pub const TEMP_PREFIX: &str = "rsv";

#[derive(Debug, thiserror::Error)]
pub enum NetdevError {
    #[error("VF netdev {0:?} not found in the host netns")]
    NotInHost(String),
    #[error("VF netdev {0:?} not found in the pod netns after the move")]
    NotInPod(String),
    #[error(
        "cannot name the VF {ifname:?} in the pod: the pod already has an interface of that name"
    )]
    NameTaken { ifname: String },
    #[error("{context}: {source}")]
    Netlink {
        context: String,
        source: NetlinkError,
    },
    #[error("cannot draw a temporary name for the VF netdev: {0}")]
    TempName(#[source] io::Error),
}

impl NetdevError {
    fn netlink(context: impl Into<String>) -> impl FnOnce(NetlinkError) -> NetdevError {
        let context = context.into();
        move |source| NetdevError::Netlink { context, source }
    }
}

/// A fresh temporary name: `rsv` and 8 random hex digits (11 bytes,
/// within IFNAMSIZ).
pub fn temp_name() -> Result<String, NetdevError> {
    libcni::link_name::random_name(TEMP_PREFIX).map_err(NetdevError::TempName)
}

/// The host-side facts to restore later.
pub fn host_netdev(link: &LinkInfo) -> HostNetdev {
    HostNetdev {
        name: link.name.clone(),
        mac: MacAddr::from_slice(&link.mac).unwrap_or_default(),
        mtu: link.mtu,
        up: link.up,
    }
}

/// Sets the link down and renames it.
pub fn rename_down(socket: &mut RouteSocket, index: u32, name: &str) -> Result<(), NetdevError> {
    socket
        .set_link_down(index)
        .map_err(NetdevError::netlink(format!("set link #{index} down")))?;
    socket
        .set_name(index, name)
        .map_err(NetdevError::netlink(format!(
            "rename link #{index} to {name:?}"
        )))
}

/// Moves a link to the namespace open as `target`.
pub fn move_link(
    socket: &mut RouteSocket,
    index: u32,
    target: BorrowedFd<'_>,
    target_name: &str,
) -> Result<(), NetdevError> {
    socket
        .set_netns_fd(index, target)
        .map_err(NetdevError::netlink(format!(
            "move link #{index} to {target_name}"
        )))
}

/// In the pod: the link that arrived as `temp` becomes `ifname`; returns
/// its index.
pub fn rename_in_pod(pod: &mut RouteSocket, temp: &str, ifname: &str) -> Result<u32, NetdevError> {
    let link = pod
        .link_by_name(temp)
        .map_err(NetdevError::netlink(format!("look up {temp:?} in the pod")))?
        .ok_or_else(|| NetdevError::NotInPod(temp.to_string()))?;
    match pod.set_name(link.index, ifname) {
        Ok(()) => Ok(link.index),
        Err(e) if e.is_exists() => Err(NetdevError::NameTaken {
            ifname: ifname.to_string(),
        }),
        Err(source) => Err(NetdevError::Netlink {
            context: format!("rename {temp:?} to {ifname:?} in the pod"),
            source,
        }),
    }
}

/// In the pod: the requested MAC and MTU, then up; returns the link as it
/// ends up.
pub fn configure_in_pod(
    pod: &mut RouteSocket,
    index: u32,
    ifname: &str,
    mac: Option<MacAddr>,
    mtu: Option<u32>,
) -> Result<LinkInfo, NetdevError> {
    if let Some(mac) = mac {
        pod.set_mac(index, mac.bytes())
            .map_err(NetdevError::netlink(format!("set MAC {mac} on {ifname:?}")))?;
    }
    if let Some(mtu) = mtu {
        pod.set_mtu(index, mtu)
            .map_err(NetdevError::netlink(format!("set MTU {mtu} on {ifname:?}")))?;
    }
    pod.set_link_up(index)
        .map_err(NetdevError::netlink(format!("set {ifname:?} up")))?;
    pod.link_by_index(index)
        .map_err(NetdevError::netlink(format!("read back {ifname:?}")))?
        .ok_or_else(|| NetdevError::NotInPod(ifname.to_string()))
}

/// Sends the pod's link `name` back to the host under a temporary name and
/// returns that name; `None` when the pod has no such link.
pub fn send_back_from_pod(
    pod: &mut RouteSocket,
    name: &str,
    host: BorrowedFd<'_>,
) -> Result<Option<String>, NetdevError> {
    let Some(link) = pod
        .link_by_name(name)
        .map_err(NetdevError::netlink(format!("look up {name:?} in the pod")))?
    else {
        return Ok(None);
    };
    let temp = temp_name()?;
    rename_down(pod, link.index, &temp)?;
    move_link(pod, link.index, host, "the host netns")?;
    Ok(Some(temp))
}

/// Finds the VF netdev in the host: by the names sysfs lists under its PCI
/// device (where the kernel brings it back, under the pod's name or
/// `devN`, when a namespace dies), then by `hints`.
pub fn find_in_host(
    host: &mut RouteSocket,
    sysfs: &Sysfs,
    pci: &str,
    hints: &[&str],
) -> Result<Option<LinkInfo>, NetdevError> {
    let mut names: Vec<String> = sysfs.netdevs(&BusDevice::pci(pci)).unwrap_or_default();
    names.extend(hints.iter().map(|h| h.to_string()));
    for name in names {
        if let Some(link) = host
            .link_by_name(&name)
            .map_err(NetdevError::netlink(format!(
                "look up {name:?} in the host"
            )))?
        {
            return Ok(Some(link));
        }
    }
    Ok(None)
}

/// Gives the host its netdev back as it was: name, MAC, MTU and admin
/// state. A name taken meanwhile by another link keeps the VF under its
/// current name (reported in the log), since it is returned all the same.
pub fn restore_in_host(
    host: &mut RouteSocket,
    link: &LinkInfo,
    original: &HostNetdev,
) -> Result<(), NetdevError> {
    let index = link.index;
    host.set_link_down(index)
        .map_err(NetdevError::netlink(format!("set {:?} down", link.name)))?;
    if link.name != original.name {
        match host.set_name(index, &original.name) {
            Ok(()) => {}
            Err(e) if e.is_exists() => log::warn!(
                "VF netdev stays {}: the host already has a link named {}",
                link.name,
                original.name
            ),
            Err(source) => {
                return Err(NetdevError::Netlink {
                    context: format!("rename {:?} back to {:?}", link.name, original.name),
                    source,
                })
            }
        }
    }
    if !original.mac.is_zero() && MacAddr::from_slice(&link.mac) != Some(original.mac) {
        host.set_mac(index, original.mac.bytes())
            .map_err(NetdevError::netlink(format!(
                "restore MAC {} on {:?}",
                original.mac, original.name
            )))?;
    }
    if original.mtu != 0 && link.mtu != original.mtu {
        host.set_mtu(index, original.mtu)
            .map_err(NetdevError::netlink(format!(
                "restore MTU {} on {:?}",
                original.mtu, original.name
            )))?;
    }
    if original.up {
        host.set_link_up(index)
            .map_err(NetdevError::netlink(format!("set {:?} up", original.name)))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_are_short_and_distinct() {
        let a = temp_name().unwrap();
        let b = temp_name().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 11);
        assert!(a.starts_with(TEMP_PREFIX));
        libcni::skel::validate_interface_name(&a).unwrap();
    }
}
