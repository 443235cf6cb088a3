//! Per-port bridge options of the host veth: hairpin mode
//! (`IFLA_BRPORT_MODE`) and port isolation (`IFLA_BRPORT_ISOLATED`).
//!
//! Both are set in one `RTM_NEWLINK` on the existing port with
//! `IFLA_INFO_SLAVE_DATA`, what `ip link set <port> type bridge_slave ...`
//! sends; the kernel hands the attributes to the bridge the port belongs
//! to, so the port must be attached first. The same request can also set
//! the port up (the kernel applies the port options first, then the link
//! flags, as for `ip link set <port> up type bridge_slave ...`): every
//! request takes the RTNL lock, which every other pod's ADD and the
//! kernel's own link work wait on.

use libcni::netlink::{NetlinkError, RouteSocket};
use netlink_packet_core::NLM_F_ACK;
use netlink_packet_route::link::{
    InfoBridgePort, InfoPortData, InfoPortKind, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::RouteNetlinkMessage;

use crate::bridge_link::expect_no_replies;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortOptions {
    /// Frames may leave through the port they came in on, so a container
    /// reaches itself through a service address.
    pub hairpin: bool,
    /// Isolated ports only talk to non-isolated ones.
    pub isolated: bool,
}

/// What else the request does to the port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminState {
    /// Left as it is.
    Unchanged,
    /// Set up after the options.
    Up,
}

/// Sets both options explicitly (on or off), as the reference does.
pub fn set_port_options(
    socket: &mut RouteSocket,
    port: u32,
    options: PortOptions,
    state: AdminState,
) -> Result<(), NetlinkError> {
    let replies = socket.request(
        RouteNetlinkMessage::NewLink(port_options_message(port, options, state)),
        NLM_F_ACK,
    )?;
    expect_no_replies(replies)
}

fn port_options_message(port: u32, options: PortOptions, state: AdminState) -> LinkMessage {
    let mut msg = LinkMessage::default();
    msg.header.index = port;
    if state == AdminState::Up {
        msg.header.flags = LinkFlags::Up;
        msg.header.change_mask = LinkFlags::Up;
    }
    msg.attributes.push(LinkAttribute::LinkInfo(vec![
        LinkInfo::PortKind(InfoPortKind::Bridge),
        LinkInfo::PortData(InfoPortData::BridgePort(vec![
            InfoBridgePort::HairpinMode(options.hairpin),
            InfoBridgePort::Isolated(options.isolated),
        ])),
    ]));
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_options_are_always_sent() {
        let msg = port_options_message(
            9,
            PortOptions {
                hairpin: false,
                isolated: true,
            },
            AdminState::Unchanged,
        );
        assert_eq!(msg.header.index, 9);
        assert!(msg.header.change_mask.is_empty(), "flags left alone");
        let LinkAttribute::LinkInfo(infos) = &msg.attributes[0] else {
            panic!("{msg:?}");
        };
        assert!(
            infos.contains(&LinkInfo::PortData(InfoPortData::BridgePort(vec![
                InfoBridgePort::HairpinMode(false),
                InfoBridgePort::Isolated(true),
            ])))
        );
    }
}
