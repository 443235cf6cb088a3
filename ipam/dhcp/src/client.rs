//! The DHCP client: acquiring, extending and releasing one lease on an
//! interface inside a container's network namespace.
//!
//! Every exchange runs on a thread inside the namespace (libcni's
//! [`NetNs::run`]): the interface is looked up there, brought up when down,
//! and the packet socket is made there.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dhcproto::v4::{DhcpOption, Flags, Message, MessageType, Opcode, OptionCode};
use libcni::netlink::route::LinkInfo;
use libcni::netlink::{NetlinkError, NetlinkSocket};
use libcni::netns::{NetNs, NetNsError};

use crate::options::{self, SentOption};
use crate::packet::{PacketSocket, BROADCAST_MAC};

/// Retries of an acquisition: the first few 2 s apart, then from 4 s
/// doubling up to `resend_max`, each ±1 s, until `resend_timeout` is spent.
const FAST_RETRIES: u32 = 4;
const FAST_RETRY_DELAY: Duration = Duration::from_secs(2);
const FIRST_SLOW_DELAY: Duration = Duration::from_secs(4);
/// The lease time assumed when the server gives none (as the reference).
const DEFAULT_LEASE_SECS: u32 = 60 * 60;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(transparent)]
    NetNs(#[from] NetNsError),
    #[error("error looking up {ifname:?}: {source}")]
    LinkLookup {
        ifname: String,
        #[source]
        source: NetlinkError,
    },
    #[error("error looking up {0:?}: Link not found")]
    LinkMissing(String),
    #[error("failed to set {ifname:?} up: {source}")]
    LinkUp {
        ifname: String,
        #[source]
        source: NetlinkError,
    },
    #[error("DHCP socket on {ifname:?}: {source}")]
    Socket {
        ifname: String,
        #[source]
        source: std::io::Error,
    },
    #[error("no more tries")]
    NoMoreTries,
    #[error("no answer from a DHCP server within {0:?}")]
    Timeout(Duration),
    #[error("the DHCP server refused the lease (DHCPNAK)")]
    Nak,
    #[error("DHCP option Subnet Mask not found in DHCPACK")]
    NoSubnetMask,
}

/// How the client retries.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// How long one exchange waits for each answer.
    pub timeout: Duration,
    pub resend_max: Duration,
    pub resend_timeout: Duration,
}

/// What identifies the client and what it sends.
#[derive(Debug, Clone)]
pub struct Identity {
    pub netns: PathBuf,
    pub ifname: String,
    pub client_id: String,
    pub sent: Vec<SentOption>,
    pub requested: Vec<u8>,
}

/// An acknowledged lease.
#[derive(Debug, Clone)]
pub struct Ack {
    pub ip: Ipv4Addr,
    pub mask: Ipv4Addr,
    pub server: Ipv4Addr,
    pub server_mac: [u8; 6],
    pub lease_secs: u32,
    pub renew_secs: u32,
    pub rebind_secs: u32,
    /// Unix time the acknowledged request was sent: the lease's times
    /// count from it (RFC 2131 4.4.1), not from when acquisition began.
    pub requested_at: u64,
    pub message: Message,
}

/// How an existing lease is extended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extend {
    /// T1: unicast to the server that gave the lease.
    Renew,
    /// T2: broadcast to any server.
    Rebind,
}

/// The interface, brought up when down.
fn up_link(ifname: &str) -> Result<LinkInfo, ClientError> {
    let mut netlink = NetlinkSocket::open_current().map_err(|source| ClientError::LinkLookup {
        ifname: ifname.to_string(),
        source,
    })?;
    let link = netlink
        .link_by_name(ifname)
        .map_err(|source| ClientError::LinkLookup {
            ifname: ifname.to_string(),
            source,
        })?
        .ok_or_else(|| ClientError::LinkMissing(ifname.to_string()))?;
    if !link.up {
        netlink
            .set_link_up(link.index)
            .map_err(|source| ClientError::LinkUp {
                ifname: ifname.to_string(),
                source,
            })?;
    }
    Ok(link)
}

fn open_socket(link: &LinkInfo) -> Result<PacketSocket, ClientError> {
    PacketSocket::open(link.index).map_err(|source| ClientError::Socket {
        ifname: link.name.clone(),
        source,
    })
}

/// A request message with the client's identity, options and chaddr.
fn message(identity: &Identity, mac: &[u8], kind: MessageType, xid: u32) -> Message {
    let chaddr = &mac[..mac.len().min(16)];
    let unspecified = Ipv4Addr::UNSPECIFIED;
    let mut msg = Message::new_with_id(
        xid,
        unspecified,
        unspecified,
        unspecified,
        unspecified,
        chaddr,
    );
    msg.set_opcode(Opcode::BootRequest);
    let opts = msg.opts_mut();
    opts.insert(DhcpOption::MessageType(kind));
    opts.insert(DhcpOption::ClientIdentifier(options::client_id_option(
        &identity.client_id,
    )));
    options::add_sent_options(opts, &identity.sent, &identity.requested);
    msg
}

/// A reply of `kinds` to transaction `xid` for this client.
fn reply_filter(xid: u32, kinds: &'static [MessageType]) -> impl Fn(&Message) -> bool {
    move |m: &Message| {
        m.opcode() == Opcode::BootReply
            && m.xid() == xid
            && m.opts().msg_type().is_some_and(|t| kinds.contains(&t))
    }
}

fn server_of(msg: &Message) -> Ipv4Addr {
    match msg.opts().get(OptionCode::ServerIdentifier) {
        Some(DhcpOption::ServerIdentifier(ip)) => *ip,
        _ => msg.siaddr(),
    }
}

fn to_ack(message: Message, server_mac: [u8; 6], requested_at: u64) -> Result<Ack, ClientError> {
    if message.opts().msg_type() == Some(MessageType::Nak) {
        return Err(ClientError::Nak);
    }
    let mask = options::subnet_mask(message.opts()).ok_or(ClientError::NoSubnetMask)?;
    let lease_secs = match message.opts().get(OptionCode::AddressLeaseTime) {
        Some(DhcpOption::AddressLeaseTime(secs)) => *secs,
        _ => DEFAULT_LEASE_SECS,
    };
    let renew_secs = match message.opts().get(OptionCode::Renewal) {
        Some(DhcpOption::Renewal(secs)) => *secs,
        _ => lease_secs / 2,
    };
    let rebind_secs = match message.opts().get(OptionCode::Rebinding) {
        Some(DhcpOption::Rebinding(secs)) => *secs,
        _ => (u64::from(lease_secs) * 85 / 100) as u32,
    };
    Ok(Ack {
        ip: message.yiaddr(),
        mask,
        server: server_of(&message),
        server_mac,
        lease_secs,
        renew_secs,
        rebind_secs,
        requested_at,
        message,
    })
}

/// One DISCOVER/OFFER/REQUEST/ACK exchange.
fn exchange(
    socket: &PacketSocket,
    identity: &Identity,
    mac: &[u8],
    timeout: Duration,
) -> Result<Ack, ClientError> {
    let socket_error = |source| ClientError::Socket {
        ifname: identity.ifname.clone(),
        source,
    };
    let xid: u32 = rand_xid();
    let mut discover = message(identity, mac, MessageType::Discover, xid);
    // Replies to a client without an address must be broadcast.
    discover.set_flags(Flags::default().set_broadcast());
    socket
        .send(
            &discover,
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::BROADCAST,
            BROADCAST_MAC,
        )
        .map_err(socket_error)?;
    let offer = socket
        .receive(
            Instant::now() + timeout,
            &reply_filter(xid, &[MessageType::Offer]),
        )
        .map_err(socket_error)?
        .ok_or(ClientError::Timeout(timeout))?;
    let offered = offer.message.yiaddr();
    let server = server_of(&offer.message);
    let mut request = message(identity, mac, MessageType::Request, xid);
    request.set_flags(Flags::default().set_broadcast());
    request
        .opts_mut()
        .insert(DhcpOption::RequestedIpAddress(offered));
    request
        .opts_mut()
        .insert(DhcpOption::ServerIdentifier(server));
    let requested_at = crate::lease::unix_now();
    socket
        .send(
            &request,
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::BROADCAST,
            BROADCAST_MAC,
        )
        .map_err(socket_error)?;
    let ack = socket
        .receive(
            Instant::now() + timeout,
            &reply_filter(xid, &[MessageType::Ack, MessageType::Nak]),
        )
        .map_err(socket_error)?
        .ok_or(ClientError::Timeout(timeout))?;
    to_ack(ack.message, ack.source_mac, requested_at)
}

/// A transaction id; not secret, only distinct between clients.
fn rand_xid() -> u32 {
    let mut bytes = [0u8; 4];
    // getrandom(2) without flags does not fail for 4 bytes once the pool
    // is ready; on error the time-based fallback still differs per call.
    let filled = nix::errno::Errno::result(unsafe {
        // SAFETY: the buffer is valid for its length.
        libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0)
    });
    if filled.is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        return nanos ^ std::process::id();
    }
    u32::from_ne_bytes(bytes)
}

/// ±1 s, so that clients started together do not retry in step.
fn jitter(delay: Duration) -> Duration {
    let offset_ms = u64::from(rand_xid() % 2001);
    (delay + Duration::from_millis(offset_ms)).saturating_sub(Duration::from_secs(1))
}

/// Acquires a new lease, retrying as [`Timing`] says.
pub fn acquire(identity: &Identity, timing: Timing) -> Result<Ack, ClientError> {
    let netns = NetNs::open(&identity.netns)?;
    netns.run(|| {
        let link = up_link(&identity.ifname)?;
        let socket = open_socket(&link)?;
        let started = Instant::now();
        let mut attempt = 0u32;
        let mut slow_delay = FIRST_SLOW_DELAY;
        loop {
            match exchange(&socket, identity, &link.mac, timing.timeout) {
                Ok(ack) => return Ok(ack),
                Err(error @ (ClientError::Timeout(_) | ClientError::Nak)) => {
                    log::info!("{}: {error}", identity.client_id);
                }
                Err(error) => return Err(error),
            }
            let delay = if attempt < FAST_RETRIES {
                FAST_RETRY_DELAY
            } else {
                let delay = slow_delay;
                slow_delay = (slow_delay * 2).min(timing.resend_max.max(FIRST_SLOW_DELAY));
                delay
            };
            attempt += 1;
            let delay = jitter(delay);
            if started.elapsed() + delay + timing.timeout > timing.resend_timeout {
                return Err(ClientError::NoMoreTries);
            }
            std::thread::sleep(delay);
        }
    })?
}

/// Whether `ip` is on the interface (the calling plugin usually applies
/// the result; when it has not, the lease is extended without `ciaddr`).
fn has_address(ifindex: u32, ip: Ipv4Addr) -> bool {
    let Ok(mut netlink) = NetlinkSocket::open_current() else {
        return false;
    };
    netlink
        .list_addresses(Some(ifindex))
        .map(|addresses| {
            addresses
                .iter()
                .any(|a| a.address.ip() == std::net::IpAddr::V4(ip))
        })
        .unwrap_or(false)
}

/// One attempt to extend `lease`: RENEWING (unicast, `ciaddr`) or
/// REBINDING (broadcast, `ciaddr`) when the address is on the interface;
/// otherwise an INIT-REBOOT request for it (broadcast, option 50), which
/// every server answers by broadcast.
pub fn extend(
    identity: &Identity,
    lease: &Ack,
    how: Extend,
    timeout: Duration,
) -> Result<Ack, ClientError> {
    let netns = NetNs::open(&identity.netns)?;
    netns.run(|| {
        let link = up_link(&identity.ifname)?;
        let socket = open_socket(&link)?;
        let socket_error = |source| ClientError::Socket {
            ifname: identity.ifname.clone(),
            source,
        };
        let xid = rand_xid();
        let mut request = message(identity, &link.mac, MessageType::Request, xid);
        let (source, destination, mac) = if has_address(link.index, lease.ip) {
            request.set_ciaddr(lease.ip);
            match how {
                Extend::Renew => (lease.ip, lease.server, lease.server_mac),
                Extend::Rebind => (lease.ip, Ipv4Addr::BROADCAST, BROADCAST_MAC),
            }
        } else {
            request.set_flags(Flags::default().set_broadcast());
            request
                .opts_mut()
                .insert(DhcpOption::RequestedIpAddress(lease.ip));
            (Ipv4Addr::UNSPECIFIED, Ipv4Addr::BROADCAST, BROADCAST_MAC)
        };
        let requested_at = crate::lease::unix_now();
        socket
            .send(&request, source, destination, mac)
            .map_err(socket_error)?;
        let reply = socket
            .receive(
                Instant::now() + timeout,
                &reply_filter(xid, &[MessageType::Ack, MessageType::Nak]),
            )
            .map_err(socket_error)?
            .ok_or(ClientError::Timeout(timeout))?;
        to_ack(reply.message, reply.source_mac, requested_at)
    })?
}

/// Sends DHCPRELEASE for `lease` (no answer comes).
pub fn release(identity: &Identity, lease: &Ack) -> Result<(), ClientError> {
    let netns = NetNs::open(&identity.netns)?;
    netns.run(|| {
        let mut netlink =
            NetlinkSocket::open_current().map_err(|source| ClientError::LinkLookup {
                ifname: identity.ifname.clone(),
                source,
            })?;
        let link = netlink
            .link_by_name(&identity.ifname)
            .map_err(|source| ClientError::LinkLookup {
                ifname: identity.ifname.clone(),
                source,
            })?
            .ok_or_else(|| ClientError::LinkMissing(identity.ifname.clone()))?;
        let socket = open_socket(&link)?;
        let mut release = message(identity, &link.mac, MessageType::Release, rand_xid());
        release.set_ciaddr(lease.ip);
        release.opts_mut().remove(OptionCode::ParameterRequestList);
        release
            .opts_mut()
            .insert(DhcpOption::ServerIdentifier(lease.server));
        socket
            .send(&release, lease.ip, lease.server, lease.server_mac)
            .map_err(|source| ClientError::Socket {
                ifname: identity.ifname.clone(),
                source,
            })
    })?
}

/// Whether the interface still exists (maintenance stops when it does not).
pub fn link_exists(netns: &Path, ifname: &str) -> bool {
    let Ok(netns) = NetNs::open(netns) else {
        return false;
    };
    netns
        .run(|| {
            NetlinkSocket::open_current()
                .ok()
                .and_then(|mut n| n.link_by_name(ifname).ok().flatten())
                .is_some()
        })
        .unwrap_or(false)
}

/// Sets the interface down: the lease expired, so its address is no
/// longer the container's to use.
pub fn set_link_down(netns: &Path, ifname: &str) -> Result<(), ClientError> {
    let netns = NetNs::open(netns)?;
    netns.run(|| {
        let mut netlink =
            NetlinkSocket::open_current().map_err(|source| ClientError::LinkLookup {
                ifname: ifname.to_string(),
                source,
            })?;
        netlink
            .set_link_down(ifname)
            .map_err(|source| ClientError::LinkUp {
                ifname: ifname.to_string(),
                source,
            })
    })?
}
