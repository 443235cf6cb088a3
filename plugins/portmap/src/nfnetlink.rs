//! A blocking `NETLINK_NETFILTER` socket: nf_tables batches and dumps,
//! and conntrack requests.
//!
//! Messages are built with `netlink-packet-netfilter`; replies are read
//! at the attribute level by the callers ([`Reply`]), so that a rule with
//! an expression no library knows (`fib`, `nat`, anything another program
//! put in a chain) can never make a listing fail.

use std::collections::BTreeSet;
use std::io;

use netlink_packet_core::{
    NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload, NlasIterator, NLM_F_ACK,
    NLM_F_ACK_TLVS, NLM_F_CAPPED, NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_REQUEST,
};
use netlink_packet_netfilter::none::ControlMessage;
use netlink_packet_netfilter::{NetfilterHeader, NetfilterMessage, NetfilterProtoFamily};
use netlink_sys::{protocols::NETLINK_NETFILTER, Socket, SocketAddr};
use nix::errno::Errno;
use nix::sys::socket::{setsockopt, sockopt};
use nix::sys::time::TimeVal;

const NLMSG_NOOP: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLMSG_HEADER_LEN: usize = 16;
const NFGENMSG_LEN: usize = 4;
/// `NLMSGERR_ATTR_MSG`: the extended ACK's text.
const NLMSGERR_ATTR_MSG: u16 = 1;
/// `NFNL_SUBSYS_NFTABLES`, the resource id of an nf_tables batch.
const NFNL_SUBSYS_NFTABLES: u16 = 10;
/// A dump the kernel flags as changed meanwhile is redone this often.
const DUMP_ATTEMPTS: u32 = 5;
const INITIAL_RECV_BUFFER: usize = 64 * 1024;
const RECEIVE_TIMEOUT_SECONDS: libc::time_t = 30;

#[derive(Debug, thiserror::Error)]
pub enum NfnlError {
    #[error("netfilter netlink socket: {op}: {source}")]
    Socket { op: &'static str, source: io::Error },
    #[error("{errno}{}", .message.as_deref().map(|m| format!(" ({m})")).unwrap_or_default())]
    Kernel {
        errno: Errno,
        message: Option<String>,
    },
    #[error("malformed netlink reply: {0}")]
    Malformed(String),
    #[error("netlink dump still inconsistent after {0} attempts")]
    DumpInterrupted(u32),
}

impl NfnlError {
    pub fn errno(&self) -> Option<Errno> {
        match self {
            NfnlError::Kernel { errno, .. } => Some(*errno),
            _ => None,
        }
    }
}

/// One data message of a reply: the family of its `nfgenmsg`, its type,
/// and its attributes undecoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub family: u8,
    pub message_type: u16,
    pub attributes: Vec<u8>,
}

/// A message of an nf_tables batch with its netlink flags (besides
/// `NLM_F_REQUEST` and `NLM_F_ACK`, which every batch message gets).
#[derive(Debug, Clone)]
pub struct BatchMessage {
    pub message: NetfilterMessage,
    pub flags: u16,
}

#[derive(Debug)]
pub struct NfnlSocket {
    socket: Socket,
    sequence: u32,
    recv_buffer: Vec<u8>,
}

impl NfnlSocket {
    /// A socket in the calling thread's network namespace.
    pub fn open() -> Result<NfnlSocket, NfnlError> {
        let sock_err = |op| move |source| NfnlError::Socket { op, source };
        let mut socket = Socket::new(NETLINK_NETFILTER).map_err(sock_err("socket"))?;
        socket
            .set_ext_ack(true)
            .map_err(sock_err("NETLINK_EXT_ACK"))?;
        socket
            .set_cap_ack(true)
            .map_err(sock_err("NETLINK_CAP_ACK"))?;
        // The kernel answers every request; a bound wait turns a lost
        // answer into an error instead of a hung runtime call.
        setsockopt(
            &socket,
            sockopt::ReceiveTimeout,
            &TimeVal::new(RECEIVE_TIMEOUT_SECONDS, 0),
        )
        .map_err(|e| NfnlError::Socket {
            op: "SO_RCVTIMEO",
            source: io::Error::from(e),
        })?;
        socket.bind_auto().map_err(sock_err("bind"))?;
        socket
            .connect(&SocketAddr::new(0, 0))
            .map_err(sock_err("connect"))?;
        Ok(NfnlSocket {
            socket,
            sequence: 0,
            recv_buffer: Vec::with_capacity(INITIAL_RECV_BUFFER),
        })
    }

    fn next_sequence(&mut self) -> u32 {
        self.sequence = self.sequence.wrapping_add(1);
        self.sequence
    }

    /// Sends `messages` as one nf_tables transaction: the kernel applies
    /// all of them or none. Returns the first error the kernel reported.
    pub fn transaction(&mut self, messages: Vec<BatchMessage>) -> Result<(), NfnlError> {
        if messages.is_empty() {
            return Ok(());
        }
        let mut bytes = Vec::new();
        let begin_sequence = self.next_sequence();
        let control = |inner: ControlMessage| {
            NetfilterMessage::new(
                NetfilterHeader::new(NetfilterProtoFamily::Unspec, 0, NFNL_SUBSYS_NFTABLES),
                inner,
            )
        };
        encode(
            &mut bytes,
            control(ControlMessage::BatchBegin),
            NLM_F_REQUEST,
            begin_sequence,
        );
        let mut pending = BTreeSet::new();
        for message in messages {
            let sequence = self.next_sequence();
            pending.insert(sequence);
            encode(
                &mut bytes,
                message.message,
                NLM_F_REQUEST | NLM_F_ACK | message.flags,
                sequence,
            );
        }
        let end_sequence = self.next_sequence();
        encode(
            &mut bytes,
            control(ControlMessage::BatchEnd),
            NLM_F_REQUEST,
            end_sequence,
        );
        self.send(&bytes)?;

        // Every message is acknowledged once the batch is processed; a
        // failed commit is reported once, against the batch's first
        // message.
        let mut failure = None;
        while !pending.is_empty() {
            self.receive_datagram()?;
            for message in split_messages(&self.recv_buffer)? {
                if message.sequence < begin_sequence || message.sequence > end_sequence {
                    continue;
                }
                match message.message_type {
                    NLMSG_ERROR => {
                        let code = error_code(message.payload)?;
                        pending.remove(&message.sequence);
                        if code != 0 {
                            if failure.is_none() {
                                failure = Some(kernel_error(code, message.flags, message.payload));
                            }
                            if message.sequence == begin_sequence {
                                pending.clear();
                            }
                        }
                    }
                    NLMSG_NOOP => {}
                    _ => {}
                }
            }
        }
        match failure {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// Sends one request that expects only an acknowledgement.
    pub fn request_ack(&mut self, message: NetfilterMessage) -> Result<(), NfnlError> {
        let sequence = self.next_sequence();
        let mut bytes = Vec::new();
        encode(&mut bytes, message, NLM_F_REQUEST | NLM_F_ACK, sequence);
        self.send(&bytes)?;
        loop {
            self.receive_datagram()?;
            for message in split_messages(&self.recv_buffer)? {
                if message.sequence != sequence || message.message_type != NLMSG_ERROR {
                    continue;
                }
                let code = error_code(message.payload)?;
                if code == 0 {
                    return Ok(());
                }
                return Err(kernel_error(code, message.flags, message.payload));
            }
        }
    }

    /// Sends one request that answers with data messages (a `GET` of one
    /// object) followed by the acknowledgement; returns the messages.
    pub fn get(&mut self, message: NetfilterMessage) -> Result<Vec<Reply>, NfnlError> {
        let sequence = self.next_sequence();
        let mut bytes = Vec::new();
        encode(&mut bytes, message, NLM_F_REQUEST | NLM_F_ACK, sequence);
        self.send(&bytes)?;
        let mut replies = Vec::new();
        loop {
            self.receive_datagram()?;
            for message in split_messages(&self.recv_buffer)? {
                if message.sequence != sequence {
                    continue;
                }
                match message.message_type {
                    NLMSG_ERROR => {
                        let code = error_code(message.payload)?;
                        if code == 0 {
                            return Ok(replies);
                        }
                        return Err(kernel_error(code, message.flags, message.payload));
                    }
                    NLMSG_NOOP | NLMSG_DONE => {}
                    message_type => replies.push(data_reply(message_type, message.payload)?),
                }
            }
        }
    }

    /// Runs a dump request and returns its data messages; a dump the
    /// kernel marks as interrupted is redone.
    pub fn dump(&mut self, message: NetfilterMessage) -> Result<Vec<Reply>, NfnlError> {
        for _ in 0..DUMP_ATTEMPTS {
            if let Some(replies) = self.dump_once(message.clone())? {
                return Ok(replies);
            }
            log::debug!("netfilter dump interrupted, retrying");
        }
        Err(NfnlError::DumpInterrupted(DUMP_ATTEMPTS))
    }

    fn dump_once(&mut self, message: NetfilterMessage) -> Result<Option<Vec<Reply>>, NfnlError> {
        let sequence = self.next_sequence();
        let mut bytes = Vec::new();
        encode(&mut bytes, message, NLM_F_REQUEST | NLM_F_DUMP, sequence);
        self.send(&bytes)?;
        let mut replies = Vec::new();
        let mut interrupted = false;
        loop {
            self.receive_datagram()?;
            for message in split_messages(&self.recv_buffer)? {
                if message.sequence != sequence {
                    continue;
                }
                if message.flags & NLM_F_DUMP_INTR != 0 {
                    interrupted = true;
                }
                match message.message_type {
                    NLMSG_DONE => return Ok((!interrupted).then_some(replies)),
                    NLMSG_ERROR => {
                        let code = error_code(message.payload)?;
                        if code == 0 {
                            return Ok((!interrupted).then_some(replies));
                        }
                        return Err(kernel_error(code, message.flags, message.payload));
                    }
                    NLMSG_NOOP => {}
                    message_type => replies.push(data_reply(message_type, message.payload)?),
                }
            }
        }
    }

    fn send(&self, bytes: &[u8]) -> Result<(), NfnlError> {
        let sent = self
            .socket
            .send(bytes, 0)
            .map_err(|source| NfnlError::Socket { op: "send", source })?;
        if sent != bytes.len() {
            return Err(NfnlError::Socket {
                op: "send",
                source: io::Error::other(format!("sent {sent} of {} bytes", bytes.len())),
            });
        }
        Ok(())
    }

    /// Reads one whole datagram, growing the buffer to its size.
    fn receive_datagram(&mut self) -> Result<(), NfnlError> {
        let recv_err = |source| NfnlError::Socket { op: "recv", source };
        loop {
            let size = match self
                .socket
                .recv(&mut &mut [0u8; 0][..], libc::MSG_PEEK | libc::MSG_TRUNC)
            {
                Ok(size) => size,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(recv_err(e)),
            };
            self.recv_buffer.clear();
            self.recv_buffer.reserve(size);
            match self.socket.recv(&mut self.recv_buffer, 0) {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(recv_err(e)),
            }
        }
    }
}

/// A data message: its `nfgenmsg` family and its attributes.
fn data_reply(message_type: u16, payload: &[u8]) -> Result<Reply, NfnlError> {
    let short = || NfnlError::Malformed("message shorter than nfgenmsg".into());
    let family = *payload.first().ok_or_else(short)?;
    let attributes = payload.get(NFGENMSG_LEN..).ok_or_else(short)?.to_vec();
    Ok(Reply {
        family,
        message_type,
        attributes,
    })
}

/// Appends one netlink message to `bytes`.
fn encode(bytes: &mut Vec<u8>, message: NetfilterMessage, flags: u16, sequence: u32) {
    let mut header = NetlinkHeader::default();
    header.flags = flags;
    header.sequence_number = sequence;
    let mut packet = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(message));
    packet.finalize();
    let start = bytes.len();
    bytes.resize(start + packet.buffer_len(), 0);
    if let Some(slot) = bytes.get_mut(start..) {
        packet.serialize(slot);
    }
}

/// A netlink message inside a received datagram.
struct RawMessage<'a> {
    message_type: u16,
    flags: u16,
    sequence: u32,
    payload: &'a [u8],
}

fn split_messages(datagram: &[u8]) -> Result<Vec<RawMessage<'_>>, NfnlError> {
    let mut messages = Vec::new();
    let mut offset = 0;
    while offset < datagram.len() {
        let rest = datagram.get(offset..).unwrap_or_default();
        let buffer =
            NetlinkBuffer::new_checked(rest).map_err(|e| NfnlError::Malformed(e.to_string()))?;
        let length = buffer.length() as usize;
        let payload = rest
            .get(NLMSG_HEADER_LEN..length)
            .ok_or_else(|| NfnlError::Malformed(format!("message length {length}")))?;
        messages.push(RawMessage {
            message_type: buffer.message_type(),
            flags: buffer.flags(),
            sequence: buffer.sequence_number(),
            payload,
        });
        offset += length.next_multiple_of(4).max(NLMSG_HEADER_LEN);
    }
    Ok(messages)
}

/// The (negative) errno of an `NLMSG_ERROR`, 0 for an acknowledgement.
fn error_code(payload: &[u8]) -> Result<i32, NfnlError> {
    let bytes: [u8; 4] = payload
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| NfnlError::Malformed("short NLMSG_ERROR".into()))?;
    Ok(i32::from_ne_bytes(bytes))
}

/// The error with the kernel's extended-ACK text when there is one. With
/// `NETLINK_CAP_ACK` the echoed request is only its header.
fn kernel_error(code: i32, flags: u16, payload: &[u8]) -> NfnlError {
    let errno = Errno::from_raw(code.saturating_abs());
    let mut message = None;
    if flags & NLM_F_ACK_TLVS != 0 {
        let echoed = if flags & NLM_F_CAPPED != 0 {
            NLMSG_HEADER_LEN
        } else {
            payload
                .get(4..)
                .and_then(|p| NetlinkBuffer::new_checked(p).ok())
                .map(|b| b.length() as usize)
                .unwrap_or(payload.len())
        };
        let tlvs = payload.get(4 + echoed..).unwrap_or_default();
        for nla in NlasIterator::new(tlvs).flatten() {
            if nla.kind() == NLMSGERR_ATTR_MSG {
                let text = String::from_utf8_lossy(nla.value());
                message = Some(text.trim_end_matches('\0').to_string());
            }
        }
    }
    NfnlError::Kernel { errno, message }
}

/// Iterates the attributes of `bytes` as `(type without flags, value)`.
pub fn attributes(bytes: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    NlasIterator::new(bytes).flatten().filter_map(|nla| {
        let kind = nla.kind() & NLA_TYPE_MASK;
        let length = usize::from(nla.length());
        // The buffer runs to the end of `bytes`; the value is the part
        // the attribute's length covers.
        let value = nla.into_inner().get(NLA_HEADER_LEN..length)?;
        Some((kind, value))
    })
}

const NLA_HEADER_LEN: usize = 4;

/// `NLA_TYPE_MASK`: the attribute type without the nested and byte-order
/// flags.
const NLA_TYPE_MASK: u16 =
    !(netlink_packet_core::NLA_F_NESTED | netlink_packet_core::NLA_F_NET_BYTEORDER);

/// A NUL-terminated string attribute.
pub fn attribute_string(value: &[u8]) -> String {
    let end = value.iter().position(|b| *b == 0).unwrap_or(value.len());
    String::from_utf8_lossy(value.get(..end).unwrap_or_default()).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_datagrams_and_rejects_truncated_messages() {
        // Two NLMSG_DONE messages (16-byte header + 4-byte payload each).
        let mut datagram = Vec::new();
        for sequence in [7u32, 8] {
            datagram.extend_from_slice(&20u32.to_ne_bytes());
            datagram.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
            datagram.extend_from_slice(&0u16.to_ne_bytes());
            datagram.extend_from_slice(&sequence.to_ne_bytes());
            datagram.extend_from_slice(&0u32.to_ne_bytes());
            datagram.extend_from_slice(&0i32.to_ne_bytes());
        }
        let messages = split_messages(&datagram).unwrap();
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[1].sequence, 8);
        assert!(split_messages(&datagram[..30]).is_err());
        // A length field pointing past the end.
        let mut bad = datagram.clone();
        bad[0] = 200;
        assert!(split_messages(&bad).is_err());
    }

    #[test]
    fn error_codes_and_strings() {
        assert_eq!(error_code(&(-2i32).to_ne_bytes()).unwrap(), -2);
        assert!(error_code(&[1, 2]).is_err());
        let e = kernel_error(-17, 0, &[]);
        assert_eq!(e.errno(), Some(Errno::EEXIST));
        assert_eq!(attribute_string(b"hostports\0"), "hostports");
        assert_eq!(attribute_string(b"no-nul"), "no-nul");
    }
}
