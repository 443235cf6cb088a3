//! The bridge device: creating it (or finding the one already there),
//! promiscuous mode, and keeping its MAC address stable.

use libcni::netlink::{LinkInfo, NetlinkError, RouteSocket};
use libcni::sysctl;
use netlink_packet_core::NLM_F_ACK;
use netlink_packet_route::link::{LinkFlags, LinkMessage};
use netlink_packet_route::RouteNetlinkMessage;
use nix::errno::Errno;

use crate::error::BridgeError;
use crate::vlan::VlanError;

const BRIDGE_KIND: &str = "bridge";

/// A bridge lookup that raced with its deletion by someone else is
/// retried this often before giving up.
const ENSURE_ATTEMPTS: usize = 3;

/// The bridge as this ADD found it.
#[derive(Debug, Clone)]
pub struct Bridge {
    pub link: LinkInfo,
    /// Its MAC before this ADD attached a port: the kernel recomputes an
    /// unpinned bridge's MAC from its ports, so this is the value to pin.
    pub mac_before_ports: Vec<u8>,
}

/// What the bridge must look like.
#[derive(Debug, Clone, Copy)]
pub struct BridgeSpec<'a> {
    pub name: &'a str,
    pub mtu: Option<u32>,
    /// Only applied when the bridge is created here, as in the reference.
    pub vlan_filtering: bool,
    pub promisc: bool,
}

pub fn is_bridge(link: &LinkInfo) -> bool {
    link.kind.as_deref() == Some(BRIDGE_KIND)
}

/// Looks the bridge up without changing anything: a link of that name that
/// is not a bridge is an error found before ADD touches the system.
pub fn existing_bridge(
    socket: &mut RouteSocket,
    name: &str,
) -> Result<Option<LinkInfo>, BridgeError> {
    match socket.link_by_name(name)? {
        Some(link) if is_bridge(&link) => Ok(Some(link)),
        Some(_) => Err(BridgeError::NotABridge(name.to_string())),
        None => Ok(None),
    }
}

/// Creates the bridge unless it exists, also when another plugin run
/// creates it at the same moment, then sets it up.
pub fn ensure_bridge(
    socket: &mut RouteSocket,
    spec: &BridgeSpec<'_>,
) -> Result<Bridge, BridgeError> {
    let mut link = None;
    for _ in 0..ENSURE_ATTEMPTS {
        if let Some(found) = existing_bridge(socket, spec.name)? {
            link = Some(found);
            break;
        }
        match socket.create_bridge(spec.name, spec.mtu, spec.vlan_filtering) {
            Ok(()) => log::info!("created bridge {}", spec.name),
            // Someone else created it first; the next lookup finds it.
            Err(e) if e.is_exists() => {}
            Err(e) if spec.vlan_filtering && e.errno() == Some(Errno::EOPNOTSUPP) => {
                return Err(VlanError::from_netlink(
                    format!("create bridge {:?} with VLAN filtering", spec.name),
                    e,
                )
                .into())
            }
            Err(e) => return Err(e.into()),
        }
    }
    let link = match link {
        Some(link) => link,
        None => existing_bridge(socket, spec.name)?.ok_or_else(|| {
            NetlinkError::Kernel {
                errno: Errno::ENODEV,
                message: None,
            }
            .context(format!(
                "bridge {:?} vanished while being set up",
                spec.name
            ))
        })?,
    };
    if spec.promisc {
        set_promisc(socket, link.index, true)
            .map_err(|e| e.context(format!("set promiscuous mode on {:?}", spec.name)))?;
    }
    // The plugin owns the bridge's IPv6 routes; router advertisements must
    // not add others. Best effort, as in the reference.
    if let Err(e) = sysctl::set(&format!("net/ipv6/conf/{}/accept_ra", spec.name), "0") {
        log::debug!("{e}");
    }
    if !link.up {
        socket.set_link_up(link.index)?;
    }
    Ok(Bridge {
        mac_before_ports: link.mac.clone(),
        link,
    })
}

pub fn set_promisc(socket: &mut RouteSocket, index: u32, on: bool) -> Result<(), NetlinkError> {
    let mut msg = LinkMessage::default();
    msg.header.index = index;
    msg.header.change_mask = LinkFlags::Promisc;
    if on {
        msg.header.flags = LinkFlags::Promisc;
    }
    let replies = socket.request(RouteNetlinkMessage::SetLink(msg), NLM_F_ACK)?;
    expect_no_replies(replies)
}

/// The `IFF_*` flags of a link, e.g. to see `IFF_PROMISC`.
pub fn link_flags(socket: &mut RouteSocket, index: u32) -> Result<LinkFlags, NetlinkError> {
    let mut msg = LinkMessage::default();
    msg.header.index = index;
    let replies = socket.request(RouteNetlinkMessage::GetLink(msg), 0)?;
    match replies.into_iter().next() {
        Some(RouteNetlinkMessage::NewLink(link)) => Ok(link.header.flags),
        other => Err(NetlinkError::Unexpected(format!(
            "get flags of link #{index}: {other:?}"
        ))),
    }
}

pub(crate) fn expect_no_replies(replies: Vec<RouteNetlinkMessage>) -> Result<(), NetlinkError> {
    if replies.is_empty() {
        Ok(())
    } else {
        Err(NetlinkError::Unexpected(format!(
            "{} replies where only an ACK was expected",
            replies.len()
        )))
    }
}

pub fn is_zero_mac(mac: &[u8]) -> bool {
    mac.iter().all(|b| *b == 0)
}

/// Fixes the bridge's MAC so it no longer follows its ports: an unpinned
/// bridge takes the lowest port MAC, which changes as containers come and
/// go, and drops to 00:00:00:00:00:00 when the last port leaves.
///
/// The MAC pinned is the one the bridge had before this ADD attached a
/// port, as in the reference. When that was all zeros (a bridge whose last
/// port left), the reference fails; here the bridge's current MAC (taken
/// from its ports) is pinned instead, and nothing is done if it too is
/// zero.
pub fn pin_mac(socket: &mut RouteSocket, bridge: &Bridge) -> Result<(), BridgeError> {
    let mac = if is_zero_mac(&bridge.mac_before_ports) {
        match socket.link_by_index(bridge.link.index)? {
            Some(now) if !is_zero_mac(&now.mac) => now.mac,
            _ => {
                log::info!(
                    "bridge {} has no MAC address yet; not pinning it",
                    bridge.link.name
                );
                return Ok(());
            }
        }
    } else {
        bridge.mac_before_ports.clone()
    };
    socket
        .set_mac(bridge.link.index, &mac)
        .map_err(|e| e.context(format!("pin the MAC of bridge {:?}", bridge.link.name)))?;
    Ok(())
}
