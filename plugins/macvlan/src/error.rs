//! The plugin's errors and the spec codes they are reported with.
//!
//! - configuration problems: 7; `CNI_ARGS`: 4; a layer 2 result in a
//!   version without a form for it: 1 ([`ConfigError`]);
//! - a parent that is not there, or no default route to find one by: 7,
//!   naming the interface and the namespace looked in;
//! - a container namespace that does not exist: 3; a path that is not a
//!   namespace: 4;
//! - a kernel without macvlan: 50 (the node cannot serve the plugin);
//! - a master that cannot take this mode next to its other macvlans
//!   (passthru): 7;
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
pub enum MacvlanError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Conf(#[from] ConfError),
    #[error(transparent)]
    Master(#[from] MasterError),
    #[error(transparent)]
    SubLink(#[from] SubLinkError),
    /// EINVAL on creation: the master cannot take a macvlan in this mode
    /// next to the ones it has (the macvlans of other pods are in their
    /// namespaces, so the plugin cannot list them to say which).
    #[error("the kernel refused a {mode} macvlan on master {master:?} ({source}): a passthru macvlan must be its master's only macvlan, a master with a passthru macvlan takes no other, and the master must be an Ethernet device; check the other macvlan networks on {master:?}")]
    MasterRefused {
        master: String,
        mode: &'static str,
        #[source]
        source: Box<SubLinkError>,
    },
    #[error("Container macvlan mode {found} does not match expected value: {expected}")]
    ModeMismatch { found: String, expected: String },
    /// What the shared steps report ([`StepError`]).
    #[error(transparent)]
    Step(#[from] Box<StepError>),
    #[error(transparent)]
    Several(ErrorList),
}

impl MacvlanError {
    /// One error from many (DEL goes on after a failure); `None` when
    /// there were none.
    pub fn from_many(errors: Vec<MacvlanError>) -> Option<MacvlanError> {
        ErrorList::combine(errors, MacvlanError::Several)
    }
}

libcni::sublink_step_errors!(MacvlanError);

impl ToCniError for MacvlanError {
    fn to_cni_error(&self) -> CniError {
        let internal = || CniError::new(ErrorCode::Internal, self.to_string());
        match self {
            MacvlanError::Config(e) => e.to_cni_error(),
            MacvlanError::Conf(e) => e.to_cni_error(),
            MacvlanError::MasterRefused { .. } => {
                CniError::new(ErrorCode::InvalidNetworkConfig, self.to_string())
            }
            MacvlanError::Master(e) => e.to_cni_error(),
            MacvlanError::SubLink(e) => e.to_cni_error(),
            MacvlanError::Step(e) => e.to_cni_error(),
            // The first failure decides the code; the message lists all.
            MacvlanError::Several(list) => list.to_cni_error(),
            MacvlanError::ModeMismatch { .. } => internal(),
        }
    }
}
