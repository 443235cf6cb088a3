//! The plugin's errors and the spec codes they are reported with.
//!
//! - configuration problems: 7 ([`ConfigError`]);
//! - a parent that is not there, or no default route to find one by: 7,
//!   naming the interface and the namespace looked in;
//! - a container namespace that does not exist: 3; a path that is not a
//!   namespace: 4;
//! - a kernel without ipvlan: 50 (the node cannot serve the plugin);
//! - the IPAM plugin's own error: the IPAM plugin's code;
//! - CHECK without a prevResult: 7 (nothing to compare with);
//! - what CHECK finds different from the prevResult, and whatever else
//!   the kernel refused: 999, as the reference, with a message naming
//!   what and where.

use libcni::error::{CniError, ErrorCode, ErrorList, ToCniError};
use libcni::netlink::sublink::SubLinkError;
use libcni::netlink::sublink_plugin::{MasterError, StepError};
use libcni::plugin_conf::ConfError;

use crate::config::ConfigError;

#[derive(Debug, thiserror::Error)]
pub enum IpvlanError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Conf(#[from] ConfError),
    #[error(transparent)]
    Master(#[from] MasterError),
    #[error(transparent)]
    SubLink(#[from] SubLinkError),
    #[error("Container IPVlan mode {found} does not match expected value: {expected}")]
    ModeMismatch { found: String, expected: String },
    /// What the shared steps report ([`StepError`]).
    #[error(transparent)]
    Step(#[from] Box<StepError>),
    #[error(transparent)]
    Several(ErrorList),
}

impl IpvlanError {
    /// One error from many (DEL goes on after a failure); `None` when
    /// there were none.
    pub fn from_many(errors: Vec<IpvlanError>) -> Option<IpvlanError> {
        ErrorList::combine(errors, IpvlanError::Several)
    }
}

libcni::sublink_step_errors!(IpvlanError);

impl ToCniError for IpvlanError {
    fn to_cni_error(&self) -> CniError {
        let internal = || CniError::new(ErrorCode::Internal, self.to_string());
        match self {
            IpvlanError::Config(e) => e.to_cni_error(),
            IpvlanError::Conf(e) => e.to_cni_error(),
            IpvlanError::Master(e) => e.to_cni_error(),
            IpvlanError::SubLink(e) => e.to_cni_error(),
            IpvlanError::Step(e) => e.to_cni_error(),
            // The first failure decides the code; the message lists all.
            IpvlanError::Several(list) => list.to_cni_error(),
            IpvlanError::ModeMismatch { .. } => internal(),
        }
    }
}
