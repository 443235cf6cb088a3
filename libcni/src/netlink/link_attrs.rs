//! Link attributes that [`LinkInfo`](super::LinkInfo) leaves out, with
//! their setters: the promiscuous and all-multicast flags and the transmit
//! queue length (what the `tuning` plugin changes and restores).
//!
//! The flags are the ones userspace set (`IFF_PROMISC`/`IFF_ALLMULTI` in
//! `ifi_flags`, which the kernel fills from the device's user-set flags),
//! not the promiscuity counter (`IFLA_PROMISCUITY`) that packet sockets,
//! bridge ports and macvlan parents raise on their own: a setter changes the
//! flag, so the flag is what reads back and what a restore must put back.

use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use netlink_packet_route::RouteNetlinkMessage;
use nix::errno::Errno;

use super::route::{LinkId, RouteSocket};
use super::socket::NetlinkError;

/// A link's hardware address, MTU, user-set flags and queue length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkAttrs {
    pub index: u32,
    pub name: String,
    /// Hardware address; empty when the link has none.
    pub mac: Vec<u8>,
    pub mtu: u32,
    /// `IFF_PROMISC` as set by userspace.
    pub promisc: bool,
    /// `IFF_ALLMULTI` as set by userspace.
    pub allmulti: bool,
    /// `IFLA_TXQLEN`.
    pub tx_queue_len: u32,
}

impl RouteSocket {
    /// The link's attributes; `None` when there is no such link.
    pub fn link_attrs<'a>(
        &mut self,
        link: impl Into<LinkId<'a>>,
    ) -> Result<Option<LinkAttrs>, NetlinkError> {
        let link = link.into();
        let replies = match self.request(RouteNetlinkMessage::GetLink(message_for(link)), 0) {
            Ok(replies) => replies,
            Err(e) if e.errno() == Some(Errno::ENODEV) => return Ok(None),
            Err(e) => return Err(e.context(format!("get {link}"))),
        };
        match replies.into_iter().next() {
            Some(RouteNetlinkMessage::NewLink(msg)) => Ok(Some(parse_attrs(msg))),
            other => Err(NetlinkError::Unexpected(format!("get {link}: {other:?}"))),
        }
    }

    /// Sets or clears the user-set promiscuous flag.
    pub fn set_promisc<'a>(
        &mut self,
        link: impl Into<LinkId<'a>>,
        on: bool,
    ) -> Result<(), NetlinkError> {
        let link = link.into();
        self.set_flag(link, LinkFlags::Promisc, on)
            .map_err(|e| e.context(format!("set promisc {} on {link}", on_off(on))))
    }

    /// Sets or clears the user-set all-multicast flag.
    pub fn set_allmulti<'a>(
        &mut self,
        link: impl Into<LinkId<'a>>,
        on: bool,
    ) -> Result<(), NetlinkError> {
        let link = link.into();
        self.set_flag(link, LinkFlags::Allmulti, on)
            .map_err(|e| e.context(format!("set allmulticast {} on {link}", on_off(on))))
    }

    pub fn set_tx_queue_len<'a>(
        &mut self,
        link: impl Into<LinkId<'a>>,
        len: u32,
    ) -> Result<(), NetlinkError> {
        let link = link.into();
        let mut msg = message_for(link);
        msg.attributes.push(LinkAttribute::TxQueueLen(len));
        self.request_ack(RouteNetlinkMessage::SetLink(msg), 0)
            .map_err(|e| e.context(format!("set txqueuelen {len} on {link}")))
    }

    /// One flag changed, the others left as they are (`ifi_change` masks
    /// the request to that flag).
    fn set_flag(
        &mut self,
        link: LinkId<'_>,
        flag: LinkFlags,
        on: bool,
    ) -> Result<(), NetlinkError> {
        let mut msg = message_for(link);
        msg.header.change_mask = flag;
        if on {
            msg.header.flags = flag;
        }
        self.request_ack(RouteNetlinkMessage::SetLink(msg), 0)
    }
}

fn on_off(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}

/// A link request addressed by index or by name.
fn message_for(link: LinkId<'_>) -> LinkMessage {
    let mut msg = LinkMessage::default();
    match link {
        LinkId::Index(index) => msg.header.index = index,
        LinkId::Name(name) => msg.attributes.push(LinkAttribute::IfName(name.to_string())),
    }
    msg
}

fn parse_attrs(msg: LinkMessage) -> LinkAttrs {
    let mut attrs = LinkAttrs {
        index: msg.header.index,
        name: String::new(),
        mac: Vec::new(),
        mtu: 0,
        promisc: msg.header.flags.contains(LinkFlags::Promisc),
        allmulti: msg.header.flags.contains(LinkFlags::Allmulti),
        tx_queue_len: 0,
    };
    for attribute in msg.attributes {
        match attribute {
            LinkAttribute::IfName(name) => attrs.name = name,
            LinkAttribute::Address(mac) => attrs.mac = mac,
            LinkAttribute::Mtu(mtu) => attrs.mtu = mtu,
            LinkAttribute::TxQueueLen(len) => attrs.tx_queue_len = len,
            _ => {}
        }
    }
    attrs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::test_support::in_private_netns;

    /// Each setter changes its own attribute only and reads back; `lo` of a
    /// private namespace is the link (it has all three).
    #[test]
    fn setters_change_one_attribute_each() {
        if !nix::unistd::Uid::effective().is_root() {
            return;
        }
        in_private_netns(|| {
            let mut socket = RouteSocket::open_current().unwrap();
            let before = socket.link_attrs("lo").unwrap().unwrap();
            assert_eq!(before.name, "lo");
            assert!(!before.promisc && !before.allmulti);

            socket.set_promisc("lo", true).unwrap();
            let after = socket.link_attrs(before.index).unwrap().unwrap();
            assert!(after.promisc);
            assert_eq!(
                (after.allmulti, after.tx_queue_len),
                (false, before.tx_queue_len)
            );

            socket.set_allmulti("lo", true).unwrap();
            socket.set_tx_queue_len("lo", 1234).unwrap();
            let after = socket.link_attrs("lo").unwrap().unwrap();
            assert!(after.promisc && after.allmulti);
            assert_eq!(after.tx_queue_len, 1234);
            assert_eq!(after.mtu, before.mtu);

            socket.set_promisc("lo", false).unwrap();
            socket.set_allmulti("lo", false).unwrap();
            let after = socket.link_attrs("lo").unwrap().unwrap();
            assert!(!after.promisc && !after.allmulti);
        });
    }

    #[test]
    fn a_missing_link_is_none_and_setting_it_fails_not_found() {
        if !nix::unistd::Uid::effective().is_root() {
            return;
        }
        in_private_netns(|| {
            let mut socket = RouteSocket::open_current().unwrap();
            assert!(socket.link_attrs("no-such-link").unwrap().is_none());
            let e = socket.set_promisc("no-such-link", true).unwrap_err();
            assert!(e.is_not_found(), "{e}");
        });
    }
}
