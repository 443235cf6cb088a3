//! nfnetlink (`NETLINK_NETFILTER`): the family of nf_tables and conntrack.
//!
//! Requests are `netlink-packet-netfilter` messages. Replies are kept
//! undecoded ([`NfReply`]) and read attribute by attribute by their users
//! (see [`super::attributes`]): the crate's decoder refuses messages with
//! attributes it does not expect, and a listing must never fail because a
//! rule holds an expression nobody here knows.

use std::time::Duration;

use netlink_packet_core::{DecodeError, NetlinkDeserializable, NetlinkHeader};
use netlink_packet_netfilter::NetfilterMessage;
use netlink_sys::protocols::NETLINK_NETFILTER;

use super::socket::{NetlinkFamily, NetlinkSocket};

/// `sizeof(struct nfgenmsg)`.
pub(crate) const NFGENMSG_LEN: usize = 4;

/// The `NETLINK_NETFILTER` family.
#[derive(Debug)]
pub struct Nfnetlink;

impl NetlinkFamily for Nfnetlink {
    const PROTOCOL: isize = NETLINK_NETFILTER;
    /// The kernel answers every request (a batch while `send` runs); a
    /// bounded wait turns an answer that never comes into an error instead
    /// of a hung runtime call.
    const RECEIVE_TIMEOUT: Option<Duration> = Some(Duration::from_secs(30));
    /// Any close of a bound nfnetlink socket first finishes the nf_tables
    /// frees pending in its namespace (10-35 ms after another process's
    /// deletion here).
    const CLOSE_MAY_WAIT: bool = true;
    type Request = NetfilterMessage;
    type Reply = NfReply;
}

/// A `NETLINK_NETFILTER` socket in one network namespace.
pub type NfnlSocket = NetlinkSocket<Nfnetlink>;

/// A data message as the kernel sent it: the `nfgenmsg` family, the
/// subsystem and message type, and the attributes undecoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NfReply {
    /// `NFPROTO_*`.
    pub family: u8,
    /// `NFNL_SUBSYS_*` (high byte of the netlink message type).
    pub subsystem: u8,
    /// The subsystem's message type (low byte).
    pub message_type: u8,
    pub attributes: Vec<u8>,
}

impl NetlinkDeserializable for NfReply {
    type Error = DecodeError;

    fn deserialize(header: &NetlinkHeader, payload: &[u8]) -> Result<NfReply, DecodeError> {
        let short = || DecodeError::from("netfilter message shorter than its nfgenmsg");
        let family = *payload.first().ok_or_else(short)?;
        let attributes = payload.get(NFGENMSG_LEN..).ok_or_else(short)?.to_vec();
        let [subsystem, message_type] = header.message_type.to_be_bytes();
        Ok(NfReply {
            family,
            subsystem,
            message_type,
            attributes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_keep_family_type_and_raw_attributes() {
        let mut header = NetlinkHeader::default();
        header.message_type = (10 << 8) | 6;
        let reply = NfReply::deserialize(&header, &[2, 0, 0, 5, 8, 0, 1, 0]).unwrap();
        assert_eq!(
            reply,
            NfReply {
                family: 2,
                subsystem: 10,
                message_type: 6,
                attributes: vec![8, 0, 1, 0],
            }
        );
        assert!(NfReply::deserialize(&header, &[2, 0]).is_err());
        assert!(NfReply::deserialize(&header, &[]).is_err());
    }
}
