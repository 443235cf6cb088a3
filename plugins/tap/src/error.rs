//! The plugin's errors and the spec codes they are reported with.
//!
//! - configuration problems: 7; `CNI_ARGS`: 4; a layer 2 result in a
//!   version without a form for it: 1 ([`ConfigError`]);
//! - a `bridge` that is not in the container: 7;
//! - a container namespace that does not exist: 3; a path that is not a
//!   namespace: 4;
//! - a node without `/dev/net/tun`, or without SELinux while
//!   `selinuxContext` is set: 50 ([`TunError`]);
//! - the IPAM plugin's own error: the IPAM plugin's code;
//! - what CHECK finds different from the prevResult, and whatever else
//!   the kernel refused: 999, with a message naming what and where.

use libcni::error::{CniError, ErrorCode, ErrorList, ToCniError};
use libcni::netlink::sublink_plugin::StepError;
use libcni::netns::NetNsError;
use libcni::plugin_conf::ConfError;

use crate::config::ConfigError;
use crate::tuntap::TunError;

#[derive(Debug, thiserror::Error)]
pub enum TapError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Conf(#[from] ConfError),
    #[error("failed to work inside the container namespace: {0}")]
    NetNsThread(#[from] NetNsError),
    #[error(transparent)]
    Tun(#[from] TunError),
    #[error("failed to read random bytes for a temporary tap name: {0}")]
    Random(#[source] std::io::Error),
    #[error("failed to get bridge {0}: no such link in the container")]
    BridgeNotFound(String),
    #[error("tap {0:?} is not in the container right after its creation")]
    Vanished(String),
    #[error("Container tap {ifname} is not a port of bridge {bridge}")]
    NotBridgePort { ifname: String, bridge: String },
    /// What the shared steps report ([`StepError`]).
    #[error(transparent)]
    Step(#[from] Box<StepError>),
    #[error(transparent)]
    Several(ErrorList),
}

impl TapError {
    /// One error from many (DEL goes on after a failure); `None` when
    /// there were none.
    pub fn from_many(errors: Vec<TapError>) -> Option<TapError> {
        ErrorList::combine(errors, TapError::Several)
    }
}

libcni::sublink_step_errors!(TapError);

impl ToCniError for TapError {
    fn to_cni_error(&self) -> CniError {
        let internal = || CniError::new(ErrorCode::Internal, self.to_string());
        match self {
            TapError::Config(e) => e.to_cni_error(),
            TapError::Conf(e) => e.to_cni_error(),
            TapError::NetNsThread(e) => CniError::new(e.error_code(), self.to_string()),
            TapError::Tun(e) => e.to_cni_error(),
            TapError::BridgeNotFound(_) => {
                CniError::new(ErrorCode::InvalidNetworkConfig, self.to_string())
            }
            TapError::Random(_) => CniError::new(ErrorCode::Io, self.to_string()),
            TapError::Step(e) => e.to_cni_error(),
            // The first failure decides the code; the message lists all.
            TapError::Several(list) => list.to_cni_error(),
            TapError::Vanished(_) | TapError::NotBridgePort { .. } => internal(),
        }
    }
}
