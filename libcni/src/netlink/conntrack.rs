//! Removing stale UDP conntrack entries for a port.
//!
//! A UDP "connection" to a host port stays bound to the container it was
//! first DNATed to for as long as packets keep coming. When a new container
//! takes the same host port, those entries must go, or the traffic keeps
//! flowing to the old address.
//!
//! The kernel cannot delete by port in one request (a filtered flush refuses
//! tuple filters), so this dumps the entries with original destination port
//! = port and protocol UDP (the kernel filters the dump, `CTA_FILTER`, on
//! kernels since 5.8; the filter is repeated here for older ones) and
//! deletes each one by its original tuple, sent back as the kernel gave it.
//!
//! Requests are `netlink-packet-netfilter` messages of the conntrack
//! subsystem with hand-encoded attributes: the crate's `ConntrackMessage`
//! has no type for `CTA_FILTER` and `CTA_ZONE`, and its catch-all
//! `ConntrackAttribute::Other` drops the `NLA_F_NESTED` flag, without which
//! the kernel refuses the filter (`EINVAL`).

use netlink_packet_core::{DefaultNla, Emitable, NLA_F_NESTED, NLM_F_DUMP};
use netlink_packet_netfilter::conntrack::ConntrackMessageType;
use netlink_packet_netfilter::{
    NetfilterHeader, NetfilterMessage, NetfilterMessageInner, NetfilterProtoFamily,
    NetfilterSubsystem,
};
use nix::errno::Errno;

use super::attributes::{attributes, find};
use super::netfilter::NfnlSocket;
use super::route::IpFamily;
use super::socket::NetlinkError;

const CTA_TUPLE_ORIG: u16 = 1;
const CTA_TUPLE_PROTO: u16 = 2;
const CTA_ZONE: u16 = 18;
const CTA_FILTER: u16 = 25;
const CTA_FILTER_ORIG_FLAGS: u16 = 1;
const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTO_DST_PORT: u16 = 3;
/// `CTA_FILTER_FLAG(CTA_PROTO_NUM) | CTA_FILTER_FLAG(CTA_PROTO_DST_PORT)`.
const FILTER_PROTO_NUM_AND_DST_PORT: u32 = (1 << 3) | (1 << 5);
const IPPROTO_UDP: u8 = 17;
const NFNL_SUBSYS_CTNETLINK: u8 = 1;
const IPCTNL_MSG_CT_NEW: u8 = 0;

#[derive(Debug, thiserror::Error)]
pub enum ConntrackError {
    #[error("cannot open conntrack netlink socket: {0}")]
    Open(#[source] NetlinkError),
    #[error("cannot list conntrack entries: {0}")]
    Dump(#[source] NetlinkError),
    #[error("cannot delete a conntrack entry: {0}")]
    Delete(#[source] NetlinkError),
}

/// An entry to delete: its original tuple and zone, as the kernel sent
/// them.
#[derive(Debug, PartialEq, Eq)]
struct Entry {
    tuple: Vec<u8>,
    zone: Option<Vec<u8>>,
}

/// Deletes the UDP entries of `family` whose original destination port is
/// `port`, in the calling thread's namespace; returns how many were
/// deleted.
pub fn delete_udp_entries(family: IpFamily, port: u16) -> Result<usize, ConntrackError> {
    let mut socket = NfnlSocket::open_current().map_err(ConntrackError::Open)?;
    let proto_family = match family {
        IpFamily::V4 => NetfilterProtoFamily::IPv4,
        IpFamily::V6 => NetfilterProtoFamily::IPv6,
    };
    let message = |message_type: ConntrackMessageType, attributes: Vec<DefaultNla>| {
        NetfilterMessage::new(
            NetfilterHeader::new(proto_family, 0, 0),
            NetfilterMessageInner::Other {
                subsys: NetfilterSubsystem::Conntrack,
                message_type: message_type.into(),
                attributes,
            },
        )
    };
    let tuple = nested(
        CTA_TUPLE_ORIG,
        &[nested(
            CTA_TUPLE_PROTO,
            &[
                DefaultNla::new(CTA_PROTO_NUM, vec![IPPROTO_UDP]),
                DefaultNla::new(CTA_PROTO_DST_PORT, port.to_be_bytes().to_vec()),
            ],
        )],
    );
    let filter = nested(
        CTA_FILTER,
        &[DefaultNla::new(
            CTA_FILTER_ORIG_FLAGS,
            FILTER_PROTO_NUM_AND_DST_PORT.to_ne_bytes().to_vec(),
        )],
    );
    let replies = socket
        .request(
            message(ConntrackMessageType::Get, vec![tuple, filter]),
            NLM_F_DUMP,
        )
        .map_err(ConntrackError::Dump)?;

    let entries: Vec<Entry> = replies
        .iter()
        .filter(|r| r.subsystem == NFNL_SUBSYS_CTNETLINK && r.message_type == IPCTNL_MSG_CT_NEW)
        .filter_map(|r| matching_entry(&r.attributes, port))
        .collect();
    let mut deleted = 0;
    for entry in entries {
        let mut attributes = vec![DefaultNla::new(CTA_TUPLE_ORIG | NLA_F_NESTED, entry.tuple)];
        if let Some(zone) = entry.zone {
            attributes.push(DefaultNla::new(CTA_ZONE, zone));
        }
        match socket.request_ack(message(ConntrackMessageType::Delete, attributes), 0) {
            Ok(()) => deleted += 1,
            // Gone meanwhile (expired, or deleted by someone else).
            Err(e) if e.errno() == Some(Errno::ENOENT) => {}
            Err(e) => return Err(ConntrackError::Delete(e)),
        }
    }
    Ok(deleted)
}

/// A nested attribute holding `inner`, flagged `NLA_F_NESTED`.
fn nested(kind: u16, inner: &[DefaultNla]) -> DefaultNla {
    let mut value = vec![0u8; inner.buffer_len()];
    inner.emit(&mut value);
    DefaultNla::new(kind | NLA_F_NESTED, value)
}

/// The entry described by a dump message's attributes, if it is UDP to
/// `port` in its original direction.
fn matching_entry(attrs: &[u8], port: u16) -> Option<Entry> {
    let tuple = find(attrs, CTA_TUPLE_ORIG)?;
    let zone = find(attrs, CTA_ZONE).map(<[u8]>::to_vec);
    let proto = find(tuple, CTA_TUPLE_PROTO)?;
    let mut number = None;
    let mut dst_port = None;
    for (kind, value) in attributes(proto) {
        match kind {
            CTA_PROTO_NUM => number = value.first().copied(),
            CTA_PROTO_DST_PORT => {
                dst_port = <[u8; 2]>::try_from(value).ok().map(u16::from_be_bytes)
            }
            _ => {}
        }
    }
    (number == Some(IPPROTO_UDP) && dst_port == Some(port)).then(|| Entry {
        tuple: tuple.to_vec(),
        zone,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::attributes::nla;

    fn entry(protocol: u8, port: u16) -> Vec<u8> {
        let proto = [
            nla(CTA_PROTO_NUM, &[protocol]),
            nla(2, &5000u16.to_be_bytes()),
            nla(CTA_PROTO_DST_PORT, &port.to_be_bytes()),
        ]
        .concat();
        let ip = nla(1 | NLA_F_NESTED, &nla(1, &[10, 0, 0, 1]));
        let tuple = [ip, nla(CTA_TUPLE_PROTO | NLA_F_NESTED, &proto)].concat();
        [
            nla(CTA_TUPLE_ORIG | NLA_F_NESTED, &tuple),
            nla(CTA_ZONE, &7u16.to_be_bytes()),
        ]
        .concat()
    }

    #[test]
    fn only_udp_to_the_port_matches() {
        let found = matching_entry(&entry(17, 8080), 8080).unwrap();
        assert_eq!(found.zone.as_deref(), Some(&7u16.to_be_bytes()[..]));
        assert!(matching_entry(&entry(6, 8080), 8080).is_none());
        assert!(matching_entry(&entry(17, 8081), 8080).is_none());
        assert!(matching_entry(&[1, 2, 3], 8080).is_none());
    }

    /// Real entries: UDP through loopback with conntrack enabled (a `ct`
    /// rule), in a namespace of the test's own.
    #[test]
    fn deletes_the_udp_entries_of_the_port_only() {
        use crate::netlink::test_support::{in_private_netns, nft};
        use std::net::UdpSocket;
        in_private_netns(|| {
            nft(&["add table ip t"], None);
            nft(
                &["add chain ip t c { type filter hook output priority 0; }"],
                None,
            );
            nft(&["add rule ip t c ct state new counter"], None);
            std::process::Command::new("ip")
                .args(["link", "set", "lo", "up"])
                .status()
                .unwrap();
            let client = UdpSocket::bind("127.0.0.1:0").unwrap();
            for port in [9999, 9998] {
                client.send_to(b"x", ("127.0.0.1", port)).unwrap();
            }
            assert_eq!(delete_udp_entries(IpFamily::V4, 9999).unwrap(), 1);
            assert_eq!(delete_udp_entries(IpFamily::V4, 9999).unwrap(), 0);
            assert_eq!(delete_udp_entries(IpFamily::V6, 9998).unwrap(), 0);
            assert_eq!(delete_udp_entries(IpFamily::V4, 9998).unwrap(), 1);
        });
    }
}
