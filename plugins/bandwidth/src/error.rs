//! The plugin's errors and the spec codes they are reported with.
//!
//! - configuration (rates, bursts, subnets, key types): 7, with the
//!   reference's messages; a missing `prevResult`: 7;
//! - a `prevResult` that does not decode: the library's code (6/1/7);
//! - `CNI_NETNS` gone: 3, not a namespace: 4 (the library's codes);
//! - no host veth to shape (the container interface is no veth, its peer
//!   is not in the host namespace or not in the previous result): 7, the
//!   configuration chains bandwidth after a plugin it cannot follow;
//! - CHECK finding other qdiscs or filters than configured, the kernel's
//!   clock unreadable, and everything the kernel refused: 999;
//! - STATUS without traffic control in the kernel: 50.

use libcni::error::{CniError, ErrorCode, ErrorList, ToCniError};
use libcni::netlink::sublink_plugin::ContainerNetNsError;
use libcni::netlink::NetlinkError;
use libcni::plugin_conf::ConfError;
use libcni::types::ResultError;

use crate::config::ConfigError;

#[derive(Debug, thiserror::Error)]
pub enum BandwidthError {
    #[error(transparent)]
    Conf(#[from] ConfError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("must be called as chained plugin")]
    NotChained,
    /// CHECK's wording of the same (the reference has both).
    #[error("must be called as a chained plugin")]
    NotChainedCheck,
    #[error("could not convert result to current version: {0}")]
    PrevResult(#[source] ResultError),
    #[error(transparent)]
    NetNs(#[from] ContainerNetNsError),
    /// DEL's own namespace, which its detached deletion of the ifb needs.
    #[error("cannot open this process's network namespace: {0}")]
    HostNetNs(#[source] libcni::netns::NetNsError),
    /// Entering the container's namespace, or coming back from it, failed;
    /// after a failed return the plugin must stop at once.
    #[error(transparent)]
    EnterNetNs(libcni::netns::NetNsError),
    #[error("no interfaces provided")]
    NoInterfaces,
    #[error("container interface {ifname} has no veth peer: {reason}")]
    NoVethPeer { ifname: String, reason: String },
    #[error("veth peer with index {0} is not in host ns")]
    PeerNotInHost(u32),
    #[error("no veth peer of container interface found in host ns")]
    PeerNotListed,
    #[error("cannot read the kernel's traffic control clock: {0}")]
    Clock(#[source] std::io::Error),
    #[error("adding link: {0}")]
    AddIfb(#[source] NetlinkError),
    #[error("get ifb device: {0}")]
    IfbMissing(String),
    #[error("Failed to find qdisc")]
    QdiscMissing,
    #[error("Rate doesn't match")]
    RateMismatch,
    #[error("Limit doesn't match")]
    LimitMismatch,
    #[error("Buffer doesn't match")]
    BufferMismatch,
    #[error(
        "the {what} on {device} do not match the configuration: expected {expected}, found {found}"
    )]
    LayoutMismatch {
        what: &'static str,
        device: String,
        expected: String,
        found: String,
    },
    #[error("netlink: {0}")]
    Netlink(#[from] NetlinkError),
    /// ADD failed and taking back its partial work failed too.
    #[error("{cause}; undoing the partial ADD also failed: {}", .undo_failures.join("; "))]
    UndoFailed {
        cause: Box<BandwidthError>,
        undo_failures: Vec<String>,
    },
    /// GC's failures, each with its code.
    #[error(transparent)]
    Several(ErrorList),
    #[error("traffic control is not available in this kernel: {0}")]
    Unavailable(String),
}

impl ToCniError for BandwidthError {
    fn to_cni_error(&self) -> CniError {
        let code = match self {
            BandwidthError::Conf(e) => return e.to_cni_error(),
            BandwidthError::NetNs(e) => return e.to_cni_error(),
            BandwidthError::EnterNetNs(e) => e.error_code(),
            BandwidthError::UndoFailed { cause, .. } => {
                return CniError::new(cause.to_cni_error().code, self.to_string())
            }
            BandwidthError::Several(list) => return list.to_cni_error(),
            BandwidthError::PrevResult(_) => ErrorCode::Decode,
            BandwidthError::Config(_)
            | BandwidthError::NotChained
            | BandwidthError::NotChainedCheck
            | BandwidthError::NoInterfaces
            | BandwidthError::NoVethPeer { .. }
            | BandwidthError::PeerNotInHost(_)
            | BandwidthError::PeerNotListed => ErrorCode::InvalidNetworkConfig,
            BandwidthError::Clock(_)
            | BandwidthError::HostNetNs(_)
            | BandwidthError::AddIfb(_)
            | BandwidthError::IfbMissing(_)
            | BandwidthError::QdiscMissing
            | BandwidthError::RateMismatch
            | BandwidthError::LimitMismatch
            | BandwidthError::BufferMismatch
            | BandwidthError::LayoutMismatch { .. }
            | BandwidthError::Netlink(_) => ErrorCode::Internal,
            BandwidthError::Unavailable(_) => ErrorCode::NotAvailable,
        };
        CniError::new(code, self.to_string())
    }
}
