//! The one blocking netlink socket every family of this suite goes through.
//!
//! [`NetlinkSocket<P>`] owns the `netlink_sys::Socket`, the sequence numbers
//! and a receive buffer that grows to the size of each datagram. Its three
//! entry points share one reading loop and the same checks:
//!
//! - [`request`](NetlinkSocket::request): one message and its replies, the
//!   whole of a dump with `NLM_F_DUMP` (redone when the kernel flags it
//!   `NLM_F_DUMP_INTR`), ending at `NLMSG_DONE` or the ACK;
//! - [`request_ack`](NetlinkSocket::request_ack): a change whose only reply
//!   is the ACK;
//! - [`transaction`](NetlinkSocket::transaction): several messages in one
//!   datagram (an nf_tables batch), each acknowledged.
//!
//! Replies of other sequence numbers (left over from an earlier request that
//! ended early) are skipped; an `NLMSG_ERROR` becomes
//! [`NetlinkError::Kernel`] with its errno and the kernel's extended-ACK text.
//! A family says how its messages are encoded and decoded
//! ([`NetlinkFamily`]); messages come from the `netlink-packet-*` crates
//! where one covers the family.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::time::Duration;

use netlink_packet_core::{
    ErrorBuffer, ErrorMessage, NetlinkBuffer, NetlinkDeserializable, NetlinkHeader, NetlinkMessage,
    NetlinkPayload, NetlinkSerializable, NlasIterator, Parseable, NLM_F_ACK, NLM_F_ACK_TLVS,
    NLM_F_CAPPED, NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_MULTIPART, NLM_F_REQUEST,
};
use netlink_sys::{Socket, SocketAddr};
use nix::errno::Errno;
use nix::sys::socket::{setsockopt, sockopt};
use nix::sys::time::TimeVal;

use crate::detached::{self, Side};
use crate::error::{CniError, ErrorCode, ToCniError};
use crate::netns::{NetNs, NetNsError};

/// How many times a dump the kernel flags as inconsistent is repeated; the
/// Go plugins (`pkg/netlinksafe`) use the same bound.
const DUMP_ATTEMPTS: u32 = 5;

/// Large enough for every datagram of a dump in the common case (the kernel
/// fills dump skbs up to 32 KiB); bigger datagrams grow the buffer.
const INITIAL_RECV_BUFFER: usize = 32 * 1024;

/// What one queued ACK takes of a socket's receive buffer, rounded up: an
/// skb's truesize (the small message's slab object, the `sk_buff` and its
/// shared info). A batch of 603 acknowledged messages overflowed the
/// default 208 KiB here, so each takes more than 350 bytes.
const ACK_TRUESIZE: usize = 1024;

/// The answers a socket's default receive buffer holds without asking for
/// more: `net.core.rmem_default` is 208 KiB on Linux; counted low so
/// that a smaller default is covered too.
const DEFAULT_RECV_ROOM: usize = 128 * 1024;

/// The largest datagram a socket's default send buffer takes without
/// asking for more: `net.core.wmem_default` is 208 KiB on Linux, counted
/// low as for [`DEFAULT_RECV_ROOM`].
const DEFAULT_SEND_ROOM: usize = 128 * 1024;
/// What the kernel keeps of a send buffer besides the datagram, rounded up
/// (it refuses a datagram longer than the buffer less 32 bytes).
const SEND_HEADROOM: usize = 4096;

/// `NLMSGERR_ATTR_MSG`: the extended ACK's human-readable message.
const NLMSGERR_ATTR_MSG: u16 = 1;

const NETLINK_HEADER_LEN: usize = 16;
/// The most bytes an attribute can span, its own header included: its
/// length field has 16 bits.
pub const MAX_ATTRIBUTE_LEN: usize = u16::MAX as usize;
const NLMSG_ERROR: u16 = 2;
/// Message types below this are netlink's own (`NLMSG_NOOP`, `_ERROR`,
/// `_DONE`, `_OVERRUN`); from it on, the family's data messages.
const NLMSG_MIN_TYPE: u16 = 0x10;

/// A netlink protocol family: its protocol number, the messages sent and
/// received, and the socket options it needs besides the common ones
/// (extended ACKs, capped echoes).
pub trait NetlinkFamily {
    /// `NETLINK_ROUTE`, `NETLINK_NETFILTER`, ...
    const PROTOCOL: isize;
    /// `NETLINK_GET_STRICT_CHK`: dumps filtered by the request's header,
    /// malformed requests refused (rtnetlink).
    const STRICT_CHECKING: bool = false;
    /// `SO_RCVTIMEO`; `None` waits as long as the kernel takes.
    const RECEIVE_TIMEOUT: Option<Duration> = None;
    /// Whether closing a socket of this family can wait for kernel work
    /// other processes left: such sockets are parked when dropped (see
    /// [`detached::park`]).
    const CLOSE_MAY_WAIT: bool = false;
    type Request: NetlinkSerializable + fmt::Debug;
    type Reply: NetlinkDeserializable + fmt::Debug;

    /// What in `request` is longer than [`MAX_ATTRIBUTE_LEN`] ("link name
    /// of 70000 bytes"), for the error that refuses it; `None` when the
    /// family cannot tell (the error then gives the message's size).
    fn oversized_attribute(_request: &Self::Request) -> Option<String> {
        None
    }
}

#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    #[error("netlink socket: {op}: {source}")]
    Socket { op: &'static str, source: io::Error },
    #[error("{errno}{}{}", .message.as_deref().map(|m| format!(" ({m})")).unwrap_or_default(), capability_hint(*.errno))]
    Kernel {
        errno: Errno,
        /// The kernel's extended-ACK text, when it gave one.
        message: Option<String>,
    },
    #[error("cannot decode netlink reply: {0}")]
    Decode(String),
    #[error("unexpected netlink reply: {0}")]
    Unexpected(String),
    #[error("netlink dump still inconsistent after {0} attempts")]
    DumpInterrupted(u32),
    #[error("invalid netlink request: {0}")]
    InvalidArgument(String),
    #[error(
        "netlink request of {len} bytes cannot be encoded: {} is longer than the {MAX_ATTRIBUTE_LEN} bytes a netlink attribute holds",
        .attribute.as_deref().unwrap_or("one of its attributes")
    )]
    Oversized {
        len: usize,
        /// What is too long, when the family can tell.
        attribute: Option<String>,
    },
    #[error(transparent)]
    NetNs(#[from] NetNsError),
    #[error("{context}: {source}")]
    Context {
        context: String,
        source: Box<NetlinkError>,
    },
}

/// What to do about a refused request: the kernel answers EPERM to
/// changes (links, addresses, routes, rules, nf_tables) from a process
/// without CAP_NET_ADMIN in the namespace.
fn capability_hint(errno: Errno) -> &'static str {
    if errno == Errno::EPERM {
        " (changing the network needs CAP_NET_ADMIN: run the plugin as root, as container runtimes do)"
    } else {
        ""
    }
}

impl NetlinkError {
    /// The kernel's errno, looking through any added context.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            NetlinkError::Kernel { errno, .. } => Some(*errno),
            NetlinkError::Context { source, .. } => source.errno(),
            _ => None,
        }
    }

    /// The error under any added context.
    pub fn innermost(&self) -> &NetlinkError {
        match self {
            NetlinkError::Context { source, .. } => source.innermost(),
            other => other,
        }
    }

    pub fn is_exists(&self) -> bool {
        self.errno() == Some(Errno::EEXIST)
    }

    /// Link, address or route missing: what DEL treats as already done.
    pub fn is_not_found(&self) -> bool {
        matches!(
            self.errno(),
            Some(Errno::ENODEV | Errno::ENOENT | Errno::ESRCH | Errno::EADDRNOTAVAIL)
        )
    }

    /// Prefixes the error with what was being done.
    pub fn context(self, context: impl Into<String>) -> NetlinkError {
        NetlinkError::Context {
            context: context.into(),
            source: Box::new(self),
        }
    }
}

impl ToCniError for NetlinkError {
    fn to_cni_error(&self) -> CniError {
        let code = match self.innermost() {
            // Only the configuration's values make a request this long.
            NetlinkError::Oversized { .. } => ErrorCode::InvalidNetworkConfig,
            _ => ErrorCode::Internal,
        };
        CniError::new(code, self.to_string())
    }
}

/// Refuses a request the encoders cannot write, before they write it:
/// `netlink-packet-*` panic on an attribute longer than its 16-bit length
/// field (and release builds abort), which a configuration value of
/// 70,000 bytes reached. Every attribute lies inside the message's body,
/// so a body within the limit holds none too long. No request of this
/// suite is longer legitimately: nested attributes (a rule's expressions,
/// a link's info) must fit the limit too, and nothing here sends sets.
fn check_encodable<P: NetlinkFamily>(
    packet: &NetlinkMessage<P::Request>,
) -> Result<(), NetlinkError> {
    let len = packet.buffer_len();
    if len.saturating_sub(NETLINK_HEADER_LEN) <= MAX_ATTRIBUTE_LEN {
        return Ok(());
    }
    let attribute = match &packet.payload {
        NetlinkPayload::InnerMessage(message) => P::oversized_attribute(message),
        _ => None,
    };
    Err(NetlinkError::Oversized { len, attribute })
}

/// One message of a [`NetlinkSocket::transaction`]: its netlink flags
/// besides `NLM_F_REQUEST`, and what it does, for error messages.
#[derive(Debug, Clone)]
pub struct BatchMessage<M> {
    pub message: M,
    pub flags: u16,
    pub description: String,
}

/// A blocking socket of family `P`, bound to the network namespace it was
/// created in for its whole life.
#[derive(Debug)]
pub struct NetlinkSocket<P: NetlinkFamily> {
    socket: Socket,
    sequence: u32,
    recv_buffer: Vec<u8>,
    /// Bytes of answers the socket's receive buffer is known to hold.
    recv_room: usize,
    /// Bytes of one datagram the send buffer is known to take.
    send_room: usize,
    /// Whether the drop parks the socket (see [`NetlinkFamily::CLOSE_MAY_WAIT`]).
    park_on_drop: bool,
    /// `fn() -> P`: the socket holds no `P`, so it is `Send` whatever `P`
    /// is.
    family: PhantomData<fn() -> P>,
}

impl<P: NetlinkFamily> Drop for NetlinkSocket<P> {
    fn drop(&mut self) {
        if self.park_on_drop {
            detached::park(&self.socket);
        }
    }
}

impl<P: NetlinkFamily> std::os::fd::AsRawFd for NetlinkSocket<P> {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.socket.as_raw_fd()
    }
}

impl<P: NetlinkFamily> NetlinkSocket<P> {
    /// A socket in the calling thread's namespace.
    pub fn open_current() -> Result<NetlinkSocket<P>, NetlinkError> {
        let mut socket = Socket::new(P::PROTOCOL).map_err(socket_error("socket"))?;
        // Errors carry the kernel's explanation, and not a copy of the whole
        // request.
        socket
            .set_ext_ack(true)
            .map_err(socket_error("NETLINK_EXT_ACK"))?;
        socket
            .set_cap_ack(true)
            .map_err(socket_error("NETLINK_CAP_ACK"))?;
        if P::STRICT_CHECKING {
            socket
                .set_netlink_get_strict_chk(true)
                .map_err(socket_error("NETLINK_GET_STRICT_CHK"))?;
        }
        if let Some(timeout) = P::RECEIVE_TIMEOUT {
            // time_t by inference: the libc crate deprecates naming it on
            // musl, where its width is changing. Far beyond any timeout.
            let seconds = timeout.as_secs().try_into().unwrap_or(i32::MAX.into());
            let timeout = TimeVal::new(seconds, 0);
            setsockopt(&socket, sockopt::ReceiveTimeout, &timeout)
                .map_err(|e| socket_error("SO_RCVTIMEO")(e.into()))?;
        }
        socket.bind_auto().map_err(socket_error("bind"))?;
        socket
            .connect(&SocketAddr::new(0, 0))
            .map_err(socket_error("connect"))?;
        Ok(NetlinkSocket {
            socket,
            sequence: 0,
            recv_buffer: Vec::with_capacity(INITIAL_RECV_BUFFER),
            recv_room: DEFAULT_RECV_ROOM,
            send_room: DEFAULT_SEND_ROOM,
            park_on_drop: P::CLOSE_MAY_WAIT,
            family: PhantomData,
        })
    }

    /// Closes the socket here and now, waiting for whatever its release
    /// waits for, instead of parking it.
    pub fn close_now(mut self) {
        self.park_on_drop = false;
    }

    /// A socket bound to `netns`, usable afterwards from any thread.
    pub fn open_in(netns: &NetNs) -> Result<NetlinkSocket<P>, NetlinkError> {
        netns.run(Self::open_current)?
    }

    fn next_sequence(&mut self) -> u32 {
        self.sequence = self.sequence.wrapping_add(1);
        self.sequence
    }

    /// Sends one request and collects its replies. `flags` are added to
    /// `NLM_F_REQUEST`; with `NLM_F_DUMP` the whole dump is read, and redone
    /// when the kernel reports it changed meanwhile.
    pub fn request(
        &mut self,
        message: P::Request,
        flags: u16,
    ) -> Result<Vec<P::Reply>, NetlinkError> {
        self.request_fold(message, flags, Vec::new, |replies, raw| {
            let reply = NetlinkMessage::<P::Reply>::deserialize(raw)
                .map_err(|e| NetlinkError::Decode(e.to_string()))?;
            log::trace!("netlink recv: {reply:?}");
            if let NetlinkPayload::InnerMessage(inner) = reply.payload {
                replies.push(inner);
            }
            Ok(())
        })
    }

    /// Like [`request`](Self::request), but hands each data message to
    /// `step` as the kernel sent it (header included, still in the receive
    /// buffer) instead of decoding and keeping it: for dumps that can be
    /// long where the caller keeps only a few of the messages. Each attempt
    /// of a dump starts again from `init()`.
    ///
    /// Why: decoding and keeping every message of a dump that grows with
    /// the node (a chain with a rule per pod) cost more in allocations and
    /// page faults than reading it.
    pub fn request_fold<T>(
        &mut self,
        message: P::Request,
        flags: u16,
        init: impl Fn() -> T,
        mut step: impl FnMut(&mut T, &[u8]) -> Result<(), NetlinkError>,
    ) -> Result<T, NetlinkError> {
        let dump = flags & NLM_F_DUMP == NLM_F_DUMP;
        let mut packet = NetlinkMessage::new(
            NetlinkHeader::default(),
            NetlinkPayload::InnerMessage(message),
        );
        packet.header.flags = NLM_F_REQUEST | flags;
        let mut attempt = 1;
        loop {
            let mut state = init();
            match self.request_once(&mut packet, &mut |raw| step(&mut state, raw)) {
                Ok(()) => return Ok(state),
                Err(NetlinkError::DumpInterrupted(_)) if dump && attempt < DUMP_ATTEMPTS => {
                    log::debug!("netlink dump interrupted, attempt {attempt}, retrying");
                    attempt += 1;
                }
                Err(NetlinkError::DumpInterrupted(_)) => {
                    return Err(NetlinkError::DumpInterrupted(attempt))
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// A request whose only reply is the ACK.
    pub fn request_ack(&mut self, message: P::Request, flags: u16) -> Result<(), NetlinkError> {
        let replies = self.request(message, flags | NLM_F_ACK)?;
        if replies.is_empty() {
            Ok(())
        } else {
            Err(NetlinkError::Unexpected(format!(
                "{} replies where only an ACK was expected",
                replies.len()
            )))
        }
    }

    /// Sends `message` from a forked child ([`crate::detached`]) and returns
    /// without waiting for the kernel to carry it out: for a change whose
    /// effect the caller has already secured, where what is left is the
    /// kernel's slow cleanup (a veth's unregistration). The kernel's answer
    /// goes unread, so its errors are not seen (the caller looks for the
    /// effect instead, on this socket, which the child shares). Where fork
    /// fails, the request runs here and its error is returned.
    pub fn request_detached(
        &mut self,
        message: P::Request,
        flags: u16,
    ) -> Result<(), NetlinkError> {
        let mut packet = NetlinkMessage::new(
            NetlinkHeader::default(),
            NetlinkPayload::InnerMessage(message),
        );
        packet.header.flags = NLM_F_REQUEST | flags;
        packet.header.sequence_number = self.next_sequence();
        packet.finalize();
        check_encodable::<P>(&packet)?;
        // Serialized before the fork: the child must not allocate.
        let mut bytes = vec![0u8; packet.buffer_len()];
        packet.serialize(&mut bytes);
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.socket);
        // SAFETY: the child makes one send on a kept descriptor, from
        // memory prepared before the fork, then exits.
        match unsafe { detached::fork_keeping(&[fd]) } {
            Some(Side::Child) => {
                // SAFETY: `bytes` outlives the call; send is a plain syscall.
                unsafe { libc::send(fd, bytes.as_ptr().cast(), bytes.len(), 0) };
                detached::exit_child()
            }
            Some(Side::Parent) => Ok(()),
            None => {
                packet.header.flags |= NLM_F_ACK;
                self.request_once(&mut packet, &mut |_| Ok(()))
            }
        }
    }

    /// One attempt: sends `packet` and hands every data message of the
    /// answer to `on_data`, until the ACK, `NLMSG_DONE` or the one reply of
    /// a plain request. A dump the kernel flagged inconsistent ends in
    /// [`NetlinkError::DumpInterrupted`] once read to its end.
    fn request_once(
        &mut self,
        packet: &mut NetlinkMessage<P::Request>,
        on_data: &mut dyn FnMut(&[u8]) -> Result<(), NetlinkError>,
    ) -> Result<(), NetlinkError> {
        let sequence = self.next_sequence();
        packet.header.sequence_number = sequence;
        packet.finalize();
        check_encodable::<P>(packet)?;
        let mut bytes = vec![0u8; packet.buffer_len()];
        packet.serialize(&mut bytes);
        log::trace!("netlink send: {packet:?}");
        self.send(&bytes)?;

        let expects_ack = packet.header.flags & NLM_F_ACK != 0;
        let mut interrupted = false;
        loop {
            self.receive_datagram()?;
            for raw in split_datagram(&self.recv_buffer)? {
                let header = NetlinkBuffer::new(raw);
                if header.sequence_number() != sequence {
                    log::debug!(
                        "netlink: skipping reply with sequence {}",
                        header.sequence_number()
                    );
                    continue;
                }
                let reply_flags = header.flags();
                if reply_flags & NLM_F_DUMP_INTR != 0 {
                    interrupted = true;
                }
                if header.message_type() >= NLMSG_MIN_TYPE {
                    on_data(raw)?;
                    if reply_flags & NLM_F_MULTIPART == 0 && !expects_ack {
                        return Ok(());
                    }
                    continue;
                }
                let reply = NetlinkMessage::<P::Reply>::deserialize(raw)
                    .map_err(|e| NetlinkError::Decode(e.to_string()))?;
                match reply.payload {
                    NetlinkPayload::Error(error) => match error.code {
                        None => return finish(interrupted),
                        Some(code) => {
                            return Err(kernel_error(code.get(), reply_flags, &error.header))
                        }
                    },
                    NetlinkPayload::Done(done) => {
                        if done.code != 0 {
                            return Err(NetlinkError::Kernel {
                                errno: Errno::from_raw(done.code.saturating_abs()),
                                message: extended_ack_message(&done.extended_ack),
                            });
                        }
                        return finish(interrupted);
                    }
                    NetlinkPayload::Noop => {}
                    NetlinkPayload::Overrun(_) => {
                        return Err(NetlinkError::Unexpected("NLMSG_OVERRUN".into()))
                    }
                    other => return Err(NetlinkError::Unexpected(format!("{other:?}"))),
                }
            }
        }
    }

    /// Sends `messages` in one datagram and waits until each one that asked
    /// for an ACK (`NLM_F_ACK` in its flags) is answered. Returns the first
    /// error, prefixed with that message's description. An error for a
    /// message that asked for no ACK (an nf_tables batch header, when the
    /// kernel refuses the whole batch) ends the wait at once: the kernel
    /// processed nothing after it.
    pub fn transaction(
        &mut self,
        messages: Vec<BatchMessage<P::Request>>,
    ) -> Result<(), NetlinkError> {
        if messages.is_empty() {
            return Ok(());
        }
        let mut bytes = Vec::new();
        let mut descriptions = BTreeMap::new();
        let mut pending = BTreeSet::new();
        for message in messages {
            let sequence = self.next_sequence();
            let mut header = NetlinkHeader::default();
            header.flags = NLM_F_REQUEST | message.flags;
            header.sequence_number = sequence;
            let mut packet =
                NetlinkMessage::new(header, NetlinkPayload::InnerMessage(message.message));
            packet.finalize();
            check_encodable::<P>(&packet).map_err(|e| e.context(message.description.clone()))?;
            log::trace!("netlink send: {packet:?}");
            let start = bytes.len();
            bytes.resize(start + packet.buffer_len(), 0);
            if let Some(slot) = bytes.get_mut(start..) {
                packet.serialize(slot);
            }
            if message.flags & NLM_F_ACK != 0 {
                pending.insert(sequence);
            }
            descriptions.insert(sequence, message.description);
        }
        self.make_room(
            SocketBuffer::Receive,
            pending.len().saturating_mul(ACK_TRUESIZE),
        )?;
        // The kernel keeps a little of the send buffer for itself.
        self.make_room(
            SocketBuffer::Send,
            bytes.len().saturating_add(SEND_HEADROOM),
        )?;
        self.send(&bytes)?;

        let mut failure = None;
        while !pending.is_empty() {
            self.receive_datagram()?;
            for raw in split_datagram(&self.recv_buffer)? {
                let header = NetlinkBuffer::new(raw);
                let sequence = header.sequence_number();
                let Some(description) = descriptions.get(&sequence) else {
                    continue;
                };
                if header.message_type() != NLMSG_ERROR {
                    continue;
                }
                let flags = header.flags();
                let payload = header.payload();
                let error = ErrorBuffer::new_checked(&payload)
                    .and_then(|buffer| ErrorMessage::parse(&buffer))
                    .map_err(|e| NetlinkError::Decode(e.to_string()))?;
                let acked = pending.remove(&sequence);
                let Some(code) = error.code else {
                    continue;
                };
                let error = kernel_error(code.get(), flags, &error.header).context(description);
                if !acked {
                    return Err(error);
                }
                failure.get_or_insert(error);
            }
        }
        failure.map_or(Ok(()), Err)
    }

    /// Makes the socket's `buffer` hold at least `wanted` bytes. A batch
    /// is one datagram, which the kernel refuses when it is larger than
    /// the send buffer (`EMSGSIZE`); and the kernel queues the answer to
    /// every message of a batch before the caller reads any, each taking
    /// about [`ACK_TRUESIZE`], so past a few hundred (a GC deleting many
    /// rules, a pod with hundreds of port mappings) the receive buffer
    /// overflows (`ENOBUFS`). `SO_*BUFFORCE` (a plugin has
    /// `CAP_NET_ADMIN`) passes the `*mem_max` cap; the plain option is the
    /// fallback. What a pod's ADD sends fits the defaults: no system call.
    fn make_room(&mut self, buffer: SocketBuffer, wanted: usize) -> Result<(), NetlinkError> {
        let room = match buffer {
            SocketBuffer::Receive => self.recv_room,
            SocketBuffer::Send => self.send_room,
        };
        if wanted <= room {
            return Ok(());
        }
        // The kernel doubles the value it is given.
        let asked = wanted.div_ceil(2).min(i32::MAX as usize);
        let socket = &self.socket;
        let (set, name) = match buffer {
            SocketBuffer::Receive => (
                setsockopt(socket, sockopt::RcvBufForce, &asked)
                    .or_else(|_| setsockopt(socket, sockopt::RcvBuf, &asked)),
                "SO_RCVBUF",
            ),
            SocketBuffer::Send => (
                setsockopt(socket, sockopt::SndBufForce, &asked)
                    .or_else(|_| setsockopt(socket, sockopt::SndBuf, &asked)),
                "SO_SNDBUF",
            ),
        };
        set.map_err(|e| socket_error(name)(e.into()))?;
        match buffer {
            SocketBuffer::Receive => self.recv_room = wanted,
            SocketBuffer::Send => self.send_room = wanted,
        }
        Ok(())
    }

    fn send(&self, bytes: &[u8]) -> Result<(), NetlinkError> {
        let sent = self.socket.send(bytes, 0).map_err(socket_error("send"))?;
        if sent != bytes.len() {
            return Err(NetlinkError::Socket {
                op: "send",
                source: io::Error::other(format!("sent {sent} of {} bytes", bytes.len())),
            });
        }
        Ok(())
    }

    /// Reads one whole datagram into `recv_buffer`, growing it when the
    /// datagram is larger (a peek with `MSG_TRUNC` gives the real size).
    fn receive_datagram(&mut self) -> Result<(), NetlinkError> {
        loop {
            let size = match self
                .socket
                .recv(&mut &mut [0u8; 0][..], libc::MSG_PEEK | libc::MSG_TRUNC)
            {
                Ok(size) => size,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(socket_error("recv")(e)),
            };
            self.recv_buffer.clear();
            self.recv_buffer.reserve(size);
            match self.socket.recv(&mut self.recv_buffer, 0) {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(socket_error("recv")(e)),
            }
        }
    }
}

/// One of a socket's two kernel buffers.
#[derive(Debug, Clone, Copy)]
enum SocketBuffer {
    Receive,
    Send,
}

/// A failed socket call, named.
fn socket_error(op: &'static str) -> impl Fn(io::Error) -> NetlinkError {
    move |source| NetlinkError::Socket { op, source }
}

fn finish(interrupted: bool) -> Result<(), NetlinkError> {
    if interrupted {
        Err(NetlinkError::DumpInterrupted(1))
    } else {
        Ok(())
    }
}

/// The messages of a datagram, each with its header. A length that does
/// not fit is an error rather than a guess.
fn split_datagram(datagram: &[u8]) -> Result<Vec<&[u8]>, NetlinkError> {
    let mut messages = Vec::new();
    let mut offset = 0;
    while offset < datagram.len() {
        let rest = datagram.get(offset..).unwrap_or_default();
        let length = NetlinkBuffer::new_checked(rest)
            .map_err(|e| NetlinkError::Decode(e.to_string()))?
            .length() as usize;
        // new_checked guarantees NETLINK_HEADER_LEN <= length <= rest.len().
        messages.push(rest.get(..length).unwrap_or_default());
        offset += length.next_multiple_of(4).max(NETLINK_HEADER_LEN);
    }
    Ok(messages)
}

/// An `NLMSG_ERROR` with a code. With `NETLINK_CAP_ACK` the echoed request
/// (`payload`) is only its header, followed by extended-ACK attributes when
/// the kernel sets `NLM_F_ACK_TLVS`.
fn kernel_error(code: i32, flags: u16, payload: &[u8]) -> NetlinkError {
    let errno = Errno::from_raw(code.saturating_abs());
    let mut message = None;
    if flags & NLM_F_ACK_TLVS != 0 {
        let echoed = if flags & NLM_F_CAPPED != 0 {
            NETLINK_HEADER_LEN
        } else {
            NetlinkBuffer::new_checked(payload)
                .map(|b| b.length() as usize)
                .unwrap_or(payload.len())
        };
        message = extended_ack_message(payload.get(echoed..).unwrap_or_default());
    }
    NetlinkError::Kernel { errno, message }
}

/// The `NLMSGERR_ATTR_MSG` text among extended-ACK attributes.
fn extended_ack_message(tlvs: &[u8]) -> Option<String> {
    NlasIterator::new(tlvs)
        .map_while(Result::ok)
        .find(|nla| nla.kind() == NLMSGERR_ATTR_MSG)
        .map(|nla| {
            let text = String::from_utf8_lossy(nla.value());
            text.trim_end_matches('\0').to_string()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get_link_named(name: String) -> NetlinkMessage<netlink_packet_route::RouteNetlinkMessage> {
        use netlink_packet_route::link::{LinkAttribute, LinkMessage};
        let mut link = LinkMessage::default();
        link.attributes.push(LinkAttribute::IfName(name));
        let mut packet = NetlinkMessage::new(
            NetlinkHeader::default(),
            NetlinkPayload::InnerMessage(netlink_packet_route::RouteNetlinkMessage::GetLink(link)),
        );
        packet.finalize();
        packet
    }

    #[test]
    fn requests_too_long_to_encode_are_refused_before_encoding() {
        use crate::netlink::route::Rtnetlink;
        // What the fuzzer sent as `master`: the encoder panicked.
        let e = check_encodable::<Rtnetlink>(&get_link_named("m".repeat(70_000))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "netlink request of 70040 bytes cannot be encoded: the link name of 70000 bytes \
             is longer than the 65535 bytes a netlink attribute holds"
        );
        assert_eq!(e.to_cni_error().code, ErrorCode::InvalidNetworkConfig);
        let in_context = e.context("look up master");
        assert_eq!(
            in_context.to_cni_error().code,
            ErrorCode::InvalidNetworkConfig
        );

        // The largest body the check lets through encodes.
        let fits = get_link_named("m".repeat(65_000));
        check_encodable::<Rtnetlink>(&fits).unwrap();
        let mut bytes = vec![0u8; fits.buffer_len()];
        fits.serialize(&mut bytes);
        assert_eq!(bytes.len(), 65_040);

        // A family that cannot name the attribute still refuses.
        struct Unnamed;
        impl NetlinkFamily for Unnamed {
            const PROTOCOL: isize = 0;
            type Request = netlink_packet_route::RouteNetlinkMessage;
            type Reply = netlink_packet_route::RouteNetlinkMessage;
        }
        let e = check_encodable::<Unnamed>(&get_link_named("m".repeat(70_000))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "netlink request of 70040 bytes cannot be encoded: one of its attributes \
             is longer than the 65535 bytes a netlink attribute holds"
        );
    }

    #[test]
    fn error_matching_looks_through_context() {
        let e = NetlinkError::Kernel {
            errno: Errno::EEXIST,
            message: Some("already there".into()),
        }
        .context("create bridge \"br0\"");
        assert!(e.is_exists());
        assert!(!e.is_not_found());
        assert_eq!(
            e.to_string(),
            "create bridge \"br0\": EEXIST: File exists (already there)"
        );
        let e = NetlinkError::Kernel {
            errno: Errno::ENODEV,
            message: None,
        };
        assert!(e.is_not_found());
        let refused = NetlinkError::Kernel {
            errno: Errno::EPERM,
            message: None,
        }
        .context("set lo up");
        assert_eq!(
            refused.to_string(),
            "set lo up: EPERM: Operation not permitted (changing the network needs \
             CAP_NET_ADMIN: run the plugin as root, as container runtimes do)"
        );
        assert_eq!(e.to_cni_error().code, ErrorCode::Internal);
    }

    #[test]
    fn extended_ack_message_is_extracted() {
        // Capped echo: the request's 16-byte header, then NLMSGERR_ATTR_MSG.
        let mut payload = vec![0u8; NETLINK_HEADER_LEN];
        let text = b"bad mtu\0";
        let nla_len = (4 + text.len()) as u16;
        payload.extend_from_slice(&nla_len.to_ne_bytes());
        payload.extend_from_slice(&NLMSGERR_ATTR_MSG.to_ne_bytes());
        payload.extend_from_slice(text);
        let e = kernel_error(-22, NLM_F_CAPPED | NLM_F_ACK_TLVS, &payload);
        assert_eq!(e.errno(), Some(Errno::EINVAL));
        assert!(e.to_string().ends_with("(bad mtu)"), "{e}");
        // An uncapped echo is skipped by its own length.
        let mut uncapped = vec![0u8; 20];
        uncapped[..4].copy_from_slice(&20u32.to_ne_bytes());
        uncapped.extend_from_slice(&payload[NETLINK_HEADER_LEN..]);
        let e = kernel_error(-22, NLM_F_ACK_TLVS, &uncapped);
        assert!(e.to_string().ends_with("(bad mtu)"), "{e}");
        // Garbage after the header must not panic nor invent a message.
        let e = kernel_error(-22, NLM_F_CAPPED | NLM_F_ACK_TLVS, &[0xff; 19]);
        assert_eq!(e.to_string(), "EINVAL: Invalid argument");
        let e = kernel_error(-17, NLM_F_ACK_TLVS, &[]);
        assert_eq!(e.errno(), Some(Errno::EEXIST));
    }

    #[test]
    fn datagrams_split_into_messages_and_bad_lengths_are_errors() {
        // Two NLMSG_DONE messages (16-byte header + 4-byte code each).
        let mut datagram = Vec::new();
        for sequence in [7u32, 8] {
            datagram.extend_from_slice(&20u32.to_ne_bytes());
            datagram.extend_from_slice(&3u16.to_ne_bytes());
            datagram.extend_from_slice(&0u16.to_ne_bytes());
            datagram.extend_from_slice(&sequence.to_ne_bytes());
            datagram.extend_from_slice(&0u32.to_ne_bytes());
            datagram.extend_from_slice(&0i32.to_ne_bytes());
        }
        let messages = split_datagram(&datagram).unwrap();
        assert_eq!(messages.len(), 2);
        assert_eq!(NetlinkBuffer::new(messages[1]).sequence_number(), 8);
        assert!(split_datagram(&datagram[..30]).is_err());
        let mut bad = datagram.clone();
        bad[0] = 200;
        assert!(split_datagram(&bad).is_err());
        // A length below the header size would loop forever if trusted.
        bad[0] = 4;
        assert!(split_datagram(&bad).is_err());
        assert!(split_datagram(&[]).unwrap().is_empty());
    }
}
