//! The plugin's errors and the spec codes they are reported with.
//!
//! - configuration problems: 7 ([`ConfigError`]);
//! - a parent that is not there, or no default route to find one by: 7,
//!   naming the interface and the namespace looked in;
//! - a container namespace that does not exist: 3; a path that is not a
//!   namespace: 4;
//! - a kernel without ipvlan: 50 (the node cannot serve the plugin);
//! - the IPAM plugin's own error: the IPAM plugin's code;
//! - what CHECK finds different from the prevResult, and whatever else
//!   the kernel refused: 999, with a message naming what and where.

use libcni::error::{CniError, ErrorCode, ErrorList, ToCniError};
use libcni::iface::IfaceError;
use libcni::netlink::sublink::{DeleteError, SubLinkError};
use libcni::netlink::sublink_plugin::{CheckError, ContainerNetNsError, IpamCallError};
use libcni::netlink::NetlinkError;
use libcni::plugin_conf::ConfError;
use libcni::types::ResultError;

use crate::config::ConfigError;

#[derive(Debug, thiserror::Error)]
pub enum IpvlanError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Conf(#[from] ConfError),
    #[error(transparent)]
    NetNs(#[from] ContainerNetNsError),
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
    #[error("no default route interface found{}; set \"master\"", if *.in_container { " in the container" } else { "" })]
    NoDefaultRoute { in_container: bool },
    #[error("failed to lookup master {master:?}: no such link{}", if *.in_container { " in the container" } else { "" })]
    MasterNotFound { master: String, in_container: bool },
    #[error(transparent)]
    SubLink(#[from] SubLinkError),
    #[error(transparent)]
    Iface(#[from] IfaceError),
    #[error(transparent)]
    Ipam(#[from] IpamCallError),
    #[error("IPAM plugin returned missing IP config")]
    IpamNoIps,
    #[error("failed to convert prevResult: {0}")]
    PrevResult(#[source] ResultError),
    #[error(transparent)]
    Check(#[from] CheckError),
    #[error("Container IPVlan mode {found} does not match expected value: {expected}")]
    ModeMismatch { found: String, expected: String },
    #[error(transparent)]
    Delete(#[from] DeleteError),
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

impl ToCniError for IpvlanError {
    fn to_cni_error(&self) -> CniError {
        let internal = || CniError::new(ErrorCode::Internal, self.to_string());
        match self {
            IpvlanError::Config(e) => e.to_cni_error(),
            IpvlanError::Conf(e) => e.to_cni_error(),
            IpvlanError::NetNs(e) => e.to_cni_error(),
            IpvlanError::NoDefaultRoute { .. } | IpvlanError::MasterNotFound { .. } => {
                CniError::new(ErrorCode::InvalidNetworkConfig, self.to_string())
            }
            IpvlanError::SubLink(e) => e.to_cni_error(),
            IpvlanError::Iface(e) => e.to_cni_error(),
            IpvlanError::Delete(e) => e.to_cni_error(),
            IpvlanError::Ipam(e) => e.to_cni_error(),
            IpvlanError::Check(e) => e.to_cni_error(),
            IpvlanError::PrevResult(_) => CniError::new(ErrorCode::Decode, self.to_string()),
            // The first failure decides the code; the message lists all.
            IpvlanError::Several(list) => list.to_cni_error(),
            IpvlanError::Netlink(_) | IpvlanError::IpamNoIps | IpvlanError::ModeMismatch { .. } => {
                internal()
            }
        }
    }
}
