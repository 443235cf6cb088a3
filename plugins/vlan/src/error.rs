//! The plugin's errors and the spec codes they are reported with.
//!
//! - configuration problems: 7 ([`ConfigError`]);
//! - a parent that is not there: 7, naming the interface and the
//!   namespace looked in;
//! - a container namespace that does not exist: 3; a path that is not a
//!   namespace: 4;
//! - a kernel without 802.1Q (module `8021q`): 50 (the node cannot serve
//!   the plugin);
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
pub enum VlanError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Conf(#[from] ConfError),
    #[error(transparent)]
    Master(#[from] MasterError),
    #[error(transparent)]
    SubLink(#[from] SubLinkError),
    #[error("Container VLAN link {ifname} has VLAN id {found}, the configuration says {expected}")]
    VlanIdMismatch {
        ifname: String,
        found: u16,
        expected: u16,
    },
    #[error("Container VLAN link {ifname} has MTU {found}, the configuration says {expected}")]
    MtuMismatch {
        ifname: String,
        found: u32,
        expected: i64,
    },
    /// What the shared steps report ([`StepError`]).
    #[error(transparent)]
    Step(#[from] Box<StepError>),
    #[error(transparent)]
    Several(ErrorList),
}

impl VlanError {
    /// One error from many (DEL goes on after a failure); `None` when
    /// there were none.
    pub fn from_many(errors: Vec<VlanError>) -> Option<VlanError> {
        ErrorList::combine(errors, VlanError::Several)
    }
}

libcni::sublink_step_errors!(VlanError);

impl ToCniError for VlanError {
    fn to_cni_error(&self) -> CniError {
        let internal = || CniError::new(ErrorCode::Internal, self.to_string());
        match self {
            VlanError::Config(e) => e.to_cni_error(),
            VlanError::Conf(e) => e.to_cni_error(),
            VlanError::Master(e) => e.to_cni_error(),
            VlanError::SubLink(e) => e.to_cni_error(),
            VlanError::Step(e) => e.to_cni_error(),
            // The first failure decides the code; the message lists all.
            VlanError::Several(list) => list.to_cni_error(),
            VlanError::VlanIdMismatch { .. } | VlanError::MtuMismatch { .. } => internal(),
        }
    }
}
