//! VLANs on bridge ports: which VLAN entries a container's port gets, and
//! the kernel interface that applies them.
//!
//! The decisions ([`PortVlans`], [`apply_port_vlans`]) are separate from
//! the kernel calls ([`BridgeVlans`]) so they can be tested against a
//! recording fake: bridge VLAN filtering is a kernel build option
//! (`CONFIG_BRIDGE_VLAN_FILTERING`) that some kernels lack, and there
//! every VLAN request fails with `EOPNOTSUPP`, which is reported as
//! [`VlanError::Unsupported`].

use libcni::error::{CniError, ErrorCode, ToCniError};
use libcni::netlink::{NetlinkError, RouteSocket};
use netlink_packet_core::{NLM_F_ACK, NLM_F_DUMP};
use netlink_packet_route::link::{
    AfSpecBridge, BridgeFlag, BridgeVlanInfo, BridgeVlanInfoFlags, LinkAttribute, LinkExtentMask,
    LinkMessage,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use nix::errno::Errno;

/// The native VLAN a trunk port gets when no access VLAN is configured.
pub const DEFAULT_VLAN: u16 = 1;

pub const VLAN_FILTERING_OPTION: &str = "CONFIG_BRIDGE_VLAN_FILTERING";

#[derive(Debug, thiserror::Error)]
pub enum VlanError {
    #[error("{op}: the kernel does not support bridge VLAN filtering ({VLAN_FILTERING_OPTION} is not enabled), which the vlan/vlanTrunk settings need")]
    Unsupported { op: String },
    #[error("{op}: {source}")]
    Kernel {
        op: String,
        #[source]
        source: NetlinkError,
    },
}

impl VlanError {
    /// Wraps a kernel error of operation `op`, recognising a kernel built
    /// without VLAN filtering.
    pub fn from_netlink(op: impl Into<String>, source: NetlinkError) -> VlanError {
        let op = op.into();
        if source.errno() == Some(Errno::EOPNOTSUPP) {
            VlanError::Unsupported { op }
        } else {
            VlanError::Kernel { op, source }
        }
    }
}

impl ToCniError for VlanError {
    fn to_cni_error(&self) -> CniError {
        CniError::new(ErrorCode::Internal, self.to_string())
    }
}

/// The VLAN entries of one bridge port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortVlans {
    /// Remove every entry the port has (the kernel gives new ports VLAN 1)
    /// before adding ours.
    pub clear_existing: bool,
    /// Access VLAN: PVID and egress untagged.
    pub access: Option<u16>,
    /// Trunk VLANs: tagged.
    pub tagged: Vec<u16>,
    /// Native VLAN 1 (PVID, untagged) of a trunk with no access VLAN,
    /// added last so it wins over a tagged 1.
    pub native_default: bool,
}

impl PortVlans {
    pub fn plan(access: Option<u16>, trunk: &[u16], preserve_default_vlan: bool) -> PortVlans {
        let has_vlans = access.is_some() || !trunk.is_empty();
        PortVlans {
            clear_existing: has_vlans && !preserve_default_vlan,
            access,
            tagged: trunk.to_vec(),
            native_default: access.is_none() && !trunk.is_empty(),
        }
    }

    pub fn is_empty(&self) -> bool {
        !self.clear_existing && self.access.is_none() && self.tagged.is_empty()
    }
}

/// Bridge VLAN table operations on a port (`bridge vlan ... master`).
pub trait BridgeVlans {
    fn port_vids(&mut self, port: u32) -> Result<Vec<u16>, NetlinkError>;
    /// `pvid_untagged`: the VLAN is the port's PVID and leaves untagged.
    fn add_port_vid(
        &mut self,
        port: u32,
        vid: u16,
        pvid_untagged: bool,
    ) -> Result<(), NetlinkError>;
    fn del_port_vid(&mut self, port: u32, vid: u16) -> Result<(), NetlinkError>;
}

/// Gives port `port` (named `port_name`, for messages) the entries of
/// `plan`, in the reference plugin's order.
pub fn apply_port_vlans(
    vlans: &mut dyn BridgeVlans,
    port: u32,
    port_name: &str,
    plan: &PortVlans,
) -> Result<(), VlanError> {
    if plan.clear_existing {
        let existing = vlans.port_vids(port).map_err(|e| {
            VlanError::from_netlink(format!("list VLANs of bridge port {port_name:?}"), e)
        })?;
        for vid in existing {
            vlans.del_port_vid(port, vid).map_err(|e| {
                VlanError::from_netlink(
                    format!("remove VLAN {vid} from bridge port {port_name:?}"),
                    e,
                )
            })?;
        }
    }
    let add = |vlans: &mut dyn BridgeVlans, vid: u16, pvid_untagged: bool| {
        vlans.add_port_vid(port, vid, pvid_untagged).map_err(|e| {
            let kind = if pvid_untagged { "untagged" } else { "tagged" };
            VlanError::from_netlink(
                format!("add {kind} VLAN {vid} to bridge port {port_name:?}"),
                e,
            )
        })
    };
    if let Some(vid) = plan.access {
        add(vlans, vid, true)?;
    }
    for &vid in &plan.tagged {
        add(vlans, vid, false)?;
    }
    if plan.native_default {
        add(vlans, DEFAULT_VLAN, true)?;
    }
    Ok(())
}

/// [`BridgeVlans`] through rtnetlink (`AF_BRIDGE` link messages with
/// `IFLA_AF_SPEC`), as `bridge vlan` does it.
pub struct NetlinkVlans<'a> {
    socket: &'a mut RouteSocket,
}

impl<'a> NetlinkVlans<'a> {
    pub fn new(socket: &'a mut RouteSocket) -> Self {
        NetlinkVlans { socket }
    }
}

fn vlan_message(port: u32, vid: u16, flags: BridgeVlanInfoFlags) -> LinkMessage {
    let mut msg = LinkMessage::default();
    msg.header.interface_family = AddressFamily::Bridge;
    msg.header.index = port;
    msg.attributes.push(LinkAttribute::AfSpecBridge(vec![
        // The bridge's VLAN table, not the port device's own (`self`).
        AfSpecBridge::Flags(BridgeFlag::Controller),
        AfSpecBridge::VlanInfo(BridgeVlanInfo { flags, vid }),
    ]));
    msg
}

fn expect_ack(replies: Vec<RouteNetlinkMessage>) -> Result<(), NetlinkError> {
    if replies.is_empty() {
        Ok(())
    } else {
        Err(NetlinkError::Unexpected(format!(
            "{} replies where only an ACK was expected",
            replies.len()
        )))
    }
}

impl BridgeVlans for NetlinkVlans<'_> {
    fn port_vids(&mut self, port: u32) -> Result<Vec<u16>, NetlinkError> {
        let mut msg = LinkMessage::default();
        msg.header.interface_family = AddressFamily::Bridge;
        msg.attributes
            .push(LinkAttribute::ExtMask(vec![LinkExtentMask::Brvlan]));
        let replies = self
            .socket
            .request(RouteNetlinkMessage::GetLink(msg), NLM_F_DUMP)?;
        let mut vids = Vec::new();
        for reply in replies {
            let RouteNetlinkMessage::NewLink(link) = reply else {
                continue;
            };
            if link.header.index != port {
                continue;
            }
            for attribute in link.attributes {
                if let LinkAttribute::AfSpecBridge(specs) = attribute {
                    for spec in specs {
                        if let AfSpecBridge::VlanInfo(info) = spec {
                            vids.push(info.vid);
                        }
                    }
                }
            }
        }
        Ok(vids)
    }

    fn add_port_vid(
        &mut self,
        port: u32,
        vid: u16,
        pvid_untagged: bool,
    ) -> Result<(), NetlinkError> {
        let flags = if pvid_untagged {
            BridgeVlanInfoFlags::Pvid | BridgeVlanInfoFlags::Untagged
        } else {
            BridgeVlanInfoFlags::empty()
        };
        let msg = vlan_message(port, vid, flags);
        expect_ack(
            self.socket
                .request(RouteNetlinkMessage::SetLink(msg), NLM_F_ACK)?,
        )
    }

    fn del_port_vid(&mut self, port: u32, vid: u16) -> Result<(), NetlinkError> {
        let msg = vlan_message(port, vid, BridgeVlanInfoFlags::empty());
        expect_ack(
            self.socket
                .request(RouteNetlinkMessage::DelLink(msg), NLM_F_ACK)?,
        )
    }
}

#[cfg(test)]
pub(crate) mod fake;
#[cfg(test)]
mod tests;
