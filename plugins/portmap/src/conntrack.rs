//! Removing stale UDP conntrack entries for a host port.
//!
//! A UDP "connection" to a host port stays bound to the container it was
//! first DNATed to for as long as packets keep coming. When a new
//! container takes the same host port, those entries must go, or the
//! traffic keeps flowing to the old address.
//!
//! The kernel cannot delete by port in one request (a filtered flush
//! refuses tuple filters), so this dumps the entries with original
//! destination port = host port and protocol UDP (the kernel filters the
//! dump, `CTA_FILTER`, on kernels since 5.8; the filter is repeated here
//! for older ones) and deletes each one by its original tuple.

use netlink_packet_core::{DefaultNla, Emitable, NLA_F_NESTED};
use netlink_packet_netfilter::{
    NetfilterHeader, NetfilterMessage, NetfilterMessageInner, NetfilterProtoFamily,
    NetfilterSubsystem,
};
use nix::errno::Errno;

use crate::nfnetlink::{attributes, NfnlError, NfnlSocket};
use crate::Family;

const CTA_TUPLE_ORIG: u16 = 1;
const CTA_ZONE: u16 = 18;
const CTA_FILTER: u16 = 25;
const CTA_FILTER_ORIG_FLAGS: u16 = 1;
const CTA_TUPLE_PROTO: u16 = 2;
const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTO_DST_PORT: u16 = 3;
/// `CTA_FILTER_FLAG(CTA_PROTO_NUM) | CTA_FILTER_FLAG(CTA_PROTO_DST_PORT)`.
const FILTER_PROTO_NUM_AND_DST_PORT: u32 = (1 << 3) | (1 << 5);
const IPPROTO_UDP: u8 = 17;
const NFNL_SUBSYS_CTNETLINK: u16 = 1;
const IPCTNL_MSG_CT_NEW: u8 = 0;
const IPCTNL_MSG_CT_GET: u8 = 1;
const IPCTNL_MSG_CT_DELETE: u8 = 2;

#[derive(Debug, thiserror::Error)]
pub enum ConntrackError {
    #[error("cannot open conntrack netlink socket: {0}")]
    Open(#[source] NfnlError),
    #[error("cannot list conntrack entries: {0}")]
    Dump(#[source] NfnlError),
    #[error("cannot delete a conntrack entry: {0}")]
    Delete(#[source] NfnlError),
}

fn protocol_family(family: Family) -> NetfilterProtoFamily {
    match family {
        Family::V4 => NetfilterProtoFamily::IPv4,
        Family::V6 => NetfilterProtoFamily::IPv6,
    }
}

/// An entry to delete: its original tuple and zone, as the kernel sent
/// them.
struct Entry {
    tuple: Vec<u8>,
    zone: Option<Vec<u8>>,
}

/// Deletes the UDP entries of `family` whose original destination port is
/// `port`; returns how many were deleted.
pub fn delete_udp_entries(family: Family, port: u16) -> Result<usize, ConntrackError> {
    let mut socket = NfnlSocket::open().map_err(ConntrackError::Open)?;
    let request = |message_type: u8, attributes: Vec<DefaultNla>| {
        NetfilterMessage::new(
            NetfilterHeader::new(protocol_family(family), 0, 0),
            NetfilterMessageInner::Other {
                subsys: NetfilterSubsystem::Conntrack,
                message_type,
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
        .dump(request(IPCTNL_MSG_CT_GET, vec![tuple, filter]))
        .map_err(ConntrackError::Dump)?;

    let entries: Vec<Entry> = replies
        .iter()
        .filter(|r| r.message_type == (NFNL_SUBSYS_CTNETLINK << 8 | u16::from(IPCTNL_MSG_CT_NEW)))
        .filter_map(|r| matching_entry(&r.attributes, port))
        .collect();
    let mut deleted = 0;
    for entry in entries {
        let mut attributes = vec![DefaultNla::new(CTA_TUPLE_ORIG | NLA_F_NESTED, entry.tuple)];
        if let Some(zone) = entry.zone {
            attributes.push(DefaultNla::new(CTA_ZONE, zone));
        }
        match socket.request_ack(request(IPCTNL_MSG_CT_DELETE, attributes)) {
            Ok(()) => deleted += 1,
            // Gone meanwhile (expired, or deleted by someone else).
            Err(e) if e.errno() == Some(Errno::ENOENT) => {}
            Err(e) => return Err(ConntrackError::Delete(e)),
        }
    }
    Ok(deleted)
}

/// A nested attribute holding `inner`.
fn nested(kind: u16, inner: &[DefaultNla]) -> DefaultNla {
    let mut value = vec![0u8; inner.buffer_len()];
    inner.emit(&mut value);
    DefaultNla::new(kind | NLA_F_NESTED, value)
}

/// The entry described by a dump message's attributes, if it is UDP to
/// `port` in its original direction.
fn matching_entry(attrs: &[u8], port: u16) -> Option<Entry> {
    let mut tuple = None;
    let mut zone = None;
    for (kind, value) in attributes(attrs) {
        match kind {
            CTA_TUPLE_ORIG => tuple = Some(value),
            CTA_ZONE => zone = Some(value.to_vec()),
            _ => {}
        }
    }
    let tuple = tuple?;
    let (_, proto) = attributes(tuple).find(|(kind, _)| *kind == CTA_TUPLE_PROTO)?;
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

    fn nla(kind: u16, value: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(value);
        while out.len() % 4 != 0 {
            out.push(0);
        }
        out
    }

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
}
