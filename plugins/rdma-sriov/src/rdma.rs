//! RDMA devices and the RDMA subsystem's network-namespace mode.
//!
//! [`RdmaOps`] is the seam: [`crate::rdma_netlink::NetlinkRdmaOps`] speaks
//! the kernel's RDMA netlink (`NETLINK_RDMA`, the `nldev` client), and
//! [`crate::fake::FakeBackend`] stands in where no RDMA device exists.

use std::fmt;

use libcni::netns::{NetNs, NetNsError};
use nix::errno::Errno;
use serde::{Deserialize, Serialize};

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
    /// A failure reported by the test double (see [`crate::fake`]).
    #[error("{0}")]
    Fake(String),
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
