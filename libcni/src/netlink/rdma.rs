//! RDMA netlink (`NETLINK_RDMA`, client `RDMA_NL_NLDEV`) over the socket
//! core: the RDMA subsystem's network-namespace mode, the devices a
//! namespace sees with their ports, and moving a device to another
//! namespace.
//!
//! No crate covers this family, so messages are built here on
//! `netlink-packet-core`: a netlink header whose type is
//! `RDMA_NL_NLDEV << 10 | command`, followed directly by attributes (there
//! is no family header). Values are those of `include/uapi/rdma/rdma_netlink.h`.
//!
//! The socket is [`NetlinkSocket`] (sequence checks, ACKs, errors with
//! errno and extended-ACK text, dumps redone on `NLM_F_DUMP_INTR`) with
//! the [`RdmaNetlink`] family. An RDMA netlink socket sees the devices of
//! the namespace it was created in (in exclusive mode), so queries about a
//! namespace open their socket inside it through [`NetNs::run`].
//!
//! [`RdmaOps`] is the seam for plugins: [`NetlinkRdmaOps`] is the kernel,
//! and a plugin's tests can put a simulated RDMA subsystem in its place.

use std::fmt;
use std::os::fd::{AsFd, AsRawFd};

use netlink_packet_core::{
    DecodeError, NetlinkDeserializable, NetlinkHeader, NetlinkSerializable, NlaBuffer,
    NlasIterator, NLM_F_ACK, NLM_F_DUMP,
};
use netlink_sys::protocols::NETLINK_RDMA;
use nix::errno::Errno;
use serde::{Deserialize, Serialize};

use super::{NetlinkError, NetlinkFamily, NetlinkSocket};
use crate::error::{CniError, ErrorCode, ToCniError};
use crate::netns::{NetNs, NetNsError};

/// How RDMA devices relate to network namespaces
/// (`RDMA_NLDEV_SYS_ATTR_NETNS_MODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RdmaNetnsMode {
    /// Each device lives in one namespace and can be moved (value 0).
    Exclusive,
    /// Every device is visible in every namespace (value 1, the default).
    Shared,
}

impl fmt::Display for RdmaNetnsMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RdmaNetnsMode::Exclusive => "exclusive",
            RdmaNetnsMode::Shared => "shared",
        })
    }
}

/// One port of an RDMA device.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RdmaPort {
    pub index: u32,
    /// `IB_PORT_*` (4 is ACTIVE), when reported.
    pub state: Option<u8>,
    /// The netdev bound to the port, reported only when it is in the
    /// namespace the query runs in.
    pub netdev_index: Option<u32>,
    pub netdev_name: Option<String>,
}

/// An RDMA device as one namespace sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RdmaDevice {
    pub index: u32,
    pub name: String,
    pub ports: Vec<RdmaPort>,
}

impl RdmaDevice {
    /// Whether a port of this device is bound to the netdev `name`.
    pub fn is_bound_to(&self, netdev: &str) -> bool {
        self.ports
            .iter()
            .any(|p| p.netdev_name.as_deref() == Some(netdev))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RdmaError {
    /// No RDMA subsystem in this kernel (ib_core not built or not loaded).
    #[error("RDMA subsystem not available: {reason}")]
    Unavailable { reason: String },
    #[error("RDMA netlink {op} failed: {errno}{}", .message.as_deref().map(|m| format!(" ({m})")).unwrap_or_default())]
    Kernel {
        op: &'static str,
        errno: Errno,
        message: Option<String>,
    },
    #[error("RDMA netlink socket: {op}: {source}")]
    Socket {
        op: &'static str,
        source: std::io::Error,
    },
    #[error("cannot decode RDMA netlink reply: {0}")]
    Decode(String),
    #[error("cannot find RDMA link from name: {0}")]
    DeviceNotFound(String),
    #[error(transparent)]
    NetNs(#[from] NetNsError),
    /// A failure of an [`RdmaOps`] implementation other than the kernel's
    /// (a plugin's simulated RDMA subsystem in its tests).
    #[error("{0}")]
    Backend(String),
}

impl ToCniError for RdmaError {
    /// No RDMA subsystem is "not available" (50); everything else the
    /// kernel or the namespace switch refused is internal (999).
    fn to_cni_error(&self) -> CniError {
        let code = match self {
            RdmaError::Unavailable { .. } => ErrorCode::NotAvailable,
            RdmaError::Kernel { .. }
            | RdmaError::Socket { .. }
            | RdmaError::Decode(_)
            | RdmaError::DeviceNotFound(_)
            | RdmaError::NetNs(_)
            | RdmaError::Backend(_) => ErrorCode::Internal,
        };
        CniError::new(code, self.to_string())
    }
}

impl RdmaError {
    pub fn errno(&self) -> Option<Errno> {
        match self {
            RdmaError::Kernel { errno, .. } => Some(*errno),
            _ => None,
        }
    }
}

/// Operations on the RDMA subsystem.
pub trait RdmaOps: Send + Sync {
    /// The subsystem's namespace mode.
    fn netns_mode(&self) -> Result<RdmaNetnsMode, RdmaError>;

    /// The RDMA devices visible from `netns`, with their ports.
    fn devices(&self, netns: &NetNs) -> Result<Vec<RdmaDevice>, RdmaError>;

    /// Moves `device`, visible from `from`, into the namespace `to`.
    fn move_device(&self, device: &str, from: &NetNs, to: &NetNs) -> Result<(), RdmaError>;
}

/// The `nldev` client of RDMA netlink.
const RDMA_NL_NLDEV: u16 = 5;

pub const RDMA_NLDEV_CMD_GET: u16 = 1;
pub const RDMA_NLDEV_CMD_SET: u16 = 2;
pub const RDMA_NLDEV_CMD_PORT_GET: u16 = 5;
pub const RDMA_NLDEV_CMD_SYS_GET: u16 = 6;

pub const RDMA_NLDEV_ATTR_DEV_INDEX: u16 = 1;
pub const RDMA_NLDEV_ATTR_DEV_NAME: u16 = 2;
pub const RDMA_NLDEV_ATTR_PORT_INDEX: u16 = 3;
pub const RDMA_NLDEV_ATTR_PORT_STATE: u16 = 12;
pub const RDMA_NLDEV_ATTR_NDEV_INDEX: u16 = 50;
pub const RDMA_NLDEV_ATTR_NDEV_NAME: u16 = 51;
pub const RDMA_NLDEV_SYS_ATTR_NETNS_MODE: u16 = 66;
pub const RDMA_NLDEV_NET_NS_FD: u16 = 68;

/// `RDMA_NL_GET_TYPE(client, op)`.
pub fn message_type(command: u16) -> u16 {
    (RDMA_NL_NLDEV << 10) | command
}

/// One attribute: type and raw value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaAttr {
    pub kind: u16,
    pub value: Vec<u8>,
}

impl RdmaAttr {
    pub fn u32(kind: u16, value: u32) -> RdmaAttr {
        RdmaAttr {
            kind,
            value: value.to_ne_bytes().to_vec(),
        }
    }

    pub fn string(kind: u16, value: &str) -> RdmaAttr {
        let mut bytes = value.as_bytes().to_vec();
        bytes.push(0);
        RdmaAttr { kind, value: bytes }
    }

    fn as_u32(&self) -> Option<u32> {
        let four: [u8; 4] = self.value.get(..4)?.try_into().ok()?;
        Some(u32::from_ne_bytes(four))
    }

    fn as_u8(&self) -> Option<u8> {
        self.value.first().copied()
    }

    fn as_string(&self) -> Option<String> {
        let end = self
            .value
            .iter()
            .position(|b| *b == 0)
            .unwrap_or(self.value.len());
        let text = self.value.get(..end)?;
        std::str::from_utf8(text).ok().map(str::to_string)
    }
}

/// An `nldev` message: a command and its attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaMessage {
    pub command: u16,
    pub attributes: Vec<RdmaAttr>,
}

impl RdmaMessage {
    fn attr(&self, kind: u16) -> Option<&RdmaAttr> {
        self.attributes.iter().find(|a| a.kind == kind)
    }

    fn u32_attr(&self, kind: u16) -> Option<u32> {
        self.attr(kind).and_then(RdmaAttr::as_u32)
    }

    fn string_attr(&self, kind: u16) -> Option<String> {
        self.attr(kind).and_then(RdmaAttr::as_string)
    }
}

const NLA_HEADER: usize = 4;

fn aligned(len: usize) -> usize {
    len.next_multiple_of(4)
}

impl NetlinkSerializable for RdmaMessage {
    fn message_type(&self) -> u16 {
        message_type(self.command)
    }

    fn buffer_len(&self) -> usize {
        self.attributes
            .iter()
            .map(|a| aligned(NLA_HEADER + a.value.len()))
            .sum()
    }

    fn serialize(&self, buffer: &mut [u8]) {
        let mut offset = 0;
        for attr in &self.attributes {
            let len = NLA_HEADER + attr.value.len();
            let Some(slot) = buffer.get_mut(offset..offset + aligned(len)) else {
                return;
            };
            slot.fill(0);
            // The length fits: attributes here are a few bytes long.
            slot[0..2].copy_from_slice(&(len as u16).to_ne_bytes());
            slot[2..4].copy_from_slice(&attr.kind.to_ne_bytes());
            slot[NLA_HEADER..len].copy_from_slice(&attr.value);
            offset += aligned(len);
        }
    }
}

impl NetlinkDeserializable for RdmaMessage {
    type Error = DecodeError;

    fn deserialize(header: &NetlinkHeader, payload: &[u8]) -> Result<Self, Self::Error> {
        let mut attributes = Vec::new();
        for nla in NlasIterator::new(payload) {
            let nla: NlaBuffer<&[u8]> = nla?;
            attributes.push(RdmaAttr {
                kind: nla.kind(),
                value: nla.value().to_vec(),
            });
        }
        Ok(RdmaMessage {
            command: header.message_type & 0x3ff,
            attributes,
        })
    }
}

/// The `NETLINK_RDMA` family with `nldev` messages.
#[derive(Debug)]
pub struct RdmaNetlink;

impl NetlinkFamily for RdmaNetlink {
    const PROTOCOL: isize = NETLINK_RDMA;
    type Request = RdmaMessage;
    type Reply = RdmaMessage;
}

/// A `NETLINK_RDMA` socket in the calling thread's namespace.
#[derive(Debug)]
pub struct RdmaSocket {
    socket: NetlinkSocket<RdmaNetlink>,
}

impl RdmaSocket {
    pub fn open_current() -> Result<RdmaSocket, RdmaError> {
        let socket = NetlinkSocket::open_current().map_err(|e| match e {
            NetlinkError::Socket {
                op: "socket",
                source,
            } if source.raw_os_error() == Some(libc::EPROTONOSUPPORT) => RdmaError::Unavailable {
                reason: "the kernel has no RDMA netlink (ib_core is not loaded)".to_string(),
            },
            other => rdma_error("open", other),
        })?;
        Ok(RdmaSocket { socket })
    }

    /// Sends one request and gathers its replies (all of a dump).
    pub fn request(
        &mut self,
        op: &'static str,
        message: RdmaMessage,
        flags: u16,
    ) -> Result<Vec<RdmaMessage>, RdmaError> {
        self.socket
            .request(message, flags)
            .map_err(|e| rdma_error(op, e))
    }

    /// `RDMA_NLDEV_CMD_SYS_GET`.
    pub fn netns_mode(&mut self) -> Result<RdmaNetnsMode, RdmaError> {
        let replies = self.request(
            "SYS_GET",
            RdmaMessage {
                command: RDMA_NLDEV_CMD_SYS_GET,
                attributes: Vec::new(),
            },
            NLM_F_ACK,
        )?;
        let mode = replies
            .iter()
            .find_map(|r| r.attr(RDMA_NLDEV_SYS_ATTR_NETNS_MODE))
            .and_then(RdmaAttr::as_u8)
            .ok_or_else(|| RdmaError::Unavailable {
                reason: "the kernel does not report the RDMA netns mode (RDMA_NLDEV_SYS_ATTR_NETNS_MODE; kernel 5.3 or later needed)".to_string(),
            })?;
        Ok(if mode == 0 {
            RdmaNetnsMode::Exclusive
        } else {
            RdmaNetnsMode::Shared
        })
    }

    /// Devices (`RDMA_NLDEV_CMD_GET` dump), each with its ports
    /// (`RDMA_NLDEV_CMD_PORT_GET` dump, which needs the device index).
    pub fn devices(&mut self) -> Result<Vec<RdmaDevice>, RdmaError> {
        let replies = self.request(
            "GET",
            RdmaMessage {
                command: RDMA_NLDEV_CMD_GET,
                attributes: Vec::new(),
            },
            NLM_F_DUMP,
        )?;
        let mut devices = Vec::new();
        for reply in replies {
            let (Some(index), Some(name)) = (
                reply.u32_attr(RDMA_NLDEV_ATTR_DEV_INDEX),
                reply.string_attr(RDMA_NLDEV_ATTR_DEV_NAME),
            ) else {
                continue;
            };
            let ports = self.ports(index)?;
            devices.push(RdmaDevice { index, name, ports });
        }
        Ok(devices)
    }

    fn ports(&mut self, device_index: u32) -> Result<Vec<RdmaPort>, RdmaError> {
        let replies = self.request(
            "PORT_GET",
            RdmaMessage {
                command: RDMA_NLDEV_CMD_PORT_GET,
                attributes: vec![RdmaAttr::u32(RDMA_NLDEV_ATTR_DEV_INDEX, device_index)],
            },
            NLM_F_DUMP,
        )?;
        Ok(replies
            .iter()
            .filter_map(|reply| {
                Some(RdmaPort {
                    index: reply.u32_attr(RDMA_NLDEV_ATTR_PORT_INDEX)?,
                    state: reply
                        .attr(RDMA_NLDEV_ATTR_PORT_STATE)
                        .and_then(RdmaAttr::as_u8),
                    netdev_index: reply.u32_attr(RDMA_NLDEV_ATTR_NDEV_INDEX),
                    netdev_name: reply.string_attr(RDMA_NLDEV_ATTR_NDEV_NAME),
                })
            })
            .collect())
    }

    /// `RDMA_NLDEV_CMD_SET` with `RDMA_NLDEV_NET_NS_FD`.
    pub fn move_device(&mut self, device_index: u32, netns_fd: u32) -> Result<(), RdmaError> {
        self.request(
            "SET netns",
            RdmaMessage {
                command: RDMA_NLDEV_CMD_SET,
                attributes: vec![
                    RdmaAttr::u32(RDMA_NLDEV_ATTR_DEV_INDEX, device_index),
                    RdmaAttr::u32(RDMA_NLDEV_NET_NS_FD, netns_fd),
                ],
            },
            NLM_F_ACK,
        )
        .map(drop)
    }
}

/// The core's error in this crate's terms, naming the operation.
fn rdma_error(op: &'static str, error: NetlinkError) -> RdmaError {
    match error {
        NetlinkError::Kernel { errno, message } => RdmaError::Kernel { op, errno, message },
        NetlinkError::DumpInterrupted(_) => RdmaError::Kernel {
            op,
            errno: Errno::EINTR,
            message: Some("dump interrupted".into()),
        },
        NetlinkError::Socket { op, source } => RdmaError::Socket { op, source },
        NetlinkError::NetNs(e) => RdmaError::NetNs(e),
        other => RdmaError::Decode(other.to_string()),
    }
}

/// [`RdmaOps`] over RDMA netlink.
#[derive(Debug, Default, Clone, Copy)]
pub struct NetlinkRdmaOps;

impl RdmaOps for NetlinkRdmaOps {
    fn netns_mode(&self) -> Result<RdmaNetnsMode, RdmaError> {
        RdmaSocket::open_current()?.netns_mode()
    }

    fn devices(&self, netns: &NetNs) -> Result<Vec<RdmaDevice>, RdmaError> {
        netns.run(|| RdmaSocket::open_current()?.devices())?
    }

    fn move_device(&self, device: &str, from: &NetNs, to: &NetNs) -> Result<(), RdmaError> {
        let fd = u32::try_from(to.as_fd().as_raw_fd())
            .map_err(|_| RdmaError::Decode("negative netns fd".to_string()))?;
        from.run(|| {
            let mut socket = RdmaSocket::open_current()?;
            let index = socket
                .devices()?
                .into_iter()
                .find(|d| d.name == device)
                .map(|d| d.index)
                .ok_or_else(|| RdmaError::DeviceNotFound(device.to_string()))?;
            socket.move_device(index, fd)
        })?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::{NetlinkMessage, NetlinkPayload, NLM_F_REQUEST};

    #[test]
    fn message_type_encodes_client_and_command() {
        assert_eq!(message_type(RDMA_NLDEV_CMD_GET), 0x1401);
        assert_eq!(message_type(RDMA_NLDEV_CMD_SYS_GET), 0x1406);
    }

    #[test]
    fn set_netns_request_has_the_kernel_layout() {
        let mut packet = NetlinkMessage::new(
            NetlinkHeader::default(),
            NetlinkPayload::InnerMessage(RdmaMessage {
                command: RDMA_NLDEV_CMD_SET,
                attributes: vec![
                    RdmaAttr::u32(RDMA_NLDEV_ATTR_DEV_INDEX, 3),
                    RdmaAttr::u32(RDMA_NLDEV_NET_NS_FD, 9),
                ],
            }),
        );
        packet.header.flags = NLM_F_REQUEST | NLM_F_ACK;
        packet.finalize();
        let mut bytes = vec![0u8; packet.buffer_len()];
        packet.serialize(&mut bytes);
        assert_eq!(bytes.len(), 16 + 8 + 8);
        assert_eq!(u16::from_ne_bytes([bytes[4], bytes[5]]), 0x1402);
        // DEV_INDEX = 3, then NET_NS_FD = 9: 8-byte attributes.
        assert_eq!(&bytes[16..20], &[8, 0, 1, 0]);
        assert_eq!(u32::from_ne_bytes(bytes[20..24].try_into().unwrap()), 3);
        assert_eq!(&bytes[24..28], &[8, 0, 68, 0]);
        assert_eq!(u32::from_ne_bytes(bytes[28..32].try_into().unwrap()), 9);
    }

    #[test]
    fn replies_decode_strings_and_numbers() {
        let msg = RdmaMessage {
            command: RDMA_NLDEV_CMD_PORT_GET,
            attributes: vec![
                RdmaAttr::u32(RDMA_NLDEV_ATTR_PORT_INDEX, 1),
                RdmaAttr {
                    kind: RDMA_NLDEV_ATTR_PORT_STATE,
                    value: vec![4],
                },
                RdmaAttr::string(RDMA_NLDEV_ATTR_NDEV_NAME, "ens1f0v2"),
            ],
        };
        let mut buf = vec![0u8; msg.buffer_len()];
        msg.serialize(&mut buf);
        let mut header = NetlinkHeader::default();
        header.message_type = message_type(RDMA_NLDEV_CMD_PORT_GET);
        let back = RdmaMessage::deserialize(&header, &buf).unwrap();
        assert_eq!(back, msg);
        assert_eq!(
            back.string_attr(RDMA_NLDEV_ATTR_NDEV_NAME).unwrap(),
            "ens1f0v2"
        );
        assert_eq!(back.u32_attr(RDMA_NLDEV_ATTR_PORT_INDEX), Some(1));
        // Truncated values decode to nothing rather than panicking.
        let short = RdmaAttr {
            kind: 1,
            value: vec![1, 2],
        };
        assert_eq!(short.as_u32(), None);
        assert!(RdmaMessage::deserialize(&header, &[7, 0, 1]).is_err());
    }

    /// This machine's kernel has no RDMA subsystem: the real operations
    /// report that as "unavailable", which STATUS turns into code 50.
    #[test]
    fn missing_subsystem_is_unavailable_not_a_crash() {
        let host = NetNs::current_thread().unwrap();
        match NetlinkRdmaOps.netns_mode() {
            Err(RdmaError::Unavailable { .. }) => {}
            Ok(mode) => {
                // A kernel with RDMA: the other calls must work too.
                eprintln!("RDMA present here (mode {mode}); checking a dump instead");
                NetlinkRdmaOps.devices(&host).unwrap();
            }
            Err(other) => panic!("unexpected error {other}"),
        }
    }
}
