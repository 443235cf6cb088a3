//! The plugin's errors and the spec codes they are reported with.
//!
//! - configuration problems, a device the configuration names that this
//!   node does not have, and CHECK without a `prevResult`: 7;
//! - a container namespace that does not exist: 3; a path that is not a
//!   namespace: 4;
//! - the IPAM plugin's own error: the IPAM plugin's code;
//! - state and device-info files that cannot be written, sysfs that
//!   cannot be read: 5;
//! - another call holding the device's lock too long, a physical device
//!   not back yet from a deleted namespace: 11;
//! - everything the kernel refused and CHECK's findings: 999, with a
//!   message naming the device and the step. CHECK finding the attachment
//!   different from what ADD set up is 999 in every plugin of the suite,
//!   as in the reference (the spec has no code for it); what keeps CHECK
//!   from comparing at all keeps its spec code.

use libcni::device_info::DeviceInfoError;
use libcni::error::{CniError, ErrorCode, ToCniError};
use libcni::iface::IfaceError;
use libcni::invoke::InvokeError;
use libcni::lock::LockError;
use libcni::netlink::rdma::RdmaError;
use libcni::netlink::NetlinkError;
use libcni::netns::NetNsError;
use libcni::plugin_conf::ConfError;
use libcni::types::ResultError;

use crate::config::ConfigError;
use crate::lookup::LookupError;
use crate::state::StateError;
use crate::transfer::TransferError;

#[derive(Debug, thiserror::Error)]
pub enum HostDeviceError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Conf(#[from] ConfError),
    #[error("failed to open netns {path:?}: {source}")]
    NetNs {
        path: String,
        #[source]
        source: NetNsError,
    },

    #[error(transparent)]
    Lookup(#[from] LookupError),
    #[error("failed to move link: {0}")]
    Transfer(#[source] TransferError),
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("DEL of {ifname:?}: {source}")]
    Restore {
        ifname: String,
        #[source]
        source: TransferError,
    },
    #[error("failed to find original ifname for {0:?} (alias is not set, and no state of this attachment): it was not moved there by host-device")]
    NoOriginalName(String),
    #[error("{ifname:?} ({name:?} in the host) has not come back from the container's deleted namespace after {seconds} s: something still holds that namespace; DEL again later")]
    NotBackYet {
        ifname: String,
        name: String,
        seconds: u64,
    },
    #[error("{0}")]
    Netlink(#[from] NetlinkError),
    #[error("RDMA device {device:?} of {netdev:?}: {step}: {source}")]
    Rdma {
        device: String,
        netdev: String,
        step: &'static str,
        #[source]
        source: RdmaError,
    },
    #[error("cannot tell whether {netdev:?} has RDMA devices to move: {source}")]
    RdmaMode {
        netdev: String,
        #[source]
        source: RdmaError,
    },
    #[error("{action} {plugin:?}: {source}")]
    Ipam {
        action: &'static str,
        plugin: String,
        #[source]
        source: InvokeError,
    },
    #[error("IPAM plugin returned missing IP config")]
    IpamNoIps,
    #[error("failed to convert the IPAM result: {0}")]
    IpamResult(#[source] ResultError),
    /// Checked before ADD returns, so its changes can still be undone.
    #[error("{source}")]
    ResultNotExpressible {
        version: String,
        #[source]
        source: ResultError,
    },
    #[error(transparent)]
    Iface(#[from] IfaceError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    DeviceInfo(#[from] DeviceInfoError),
    // CHECK's findings, worded as in the reference.
    #[error("Required prevResult missing")]
    PrevResultMissing,
    #[error("failed to convert prevResult: {0}")]
    PrevResult(#[source] ResultError),
    #[error("Sandbox in prevResult {found} doesn't match configured netns: {netns}")]
    SandboxMismatch { found: String, netns: String },
    #[error("Container Interface name in prevResult: {0} not found")]
    InterfaceMissing(String),
    #[error("Interface {ifname} Mac {expected} doesn't match container Mac: {found}")]
    MacMismatch {
        ifname: String,
        expected: String,
        found: String,
    },
    #[error("RDMA device {device:?} moved with {ifname:?} is not in the container")]
    RdmaMissing { device: String, ifname: String },
}

impl ToCniError for HostDeviceError {
    fn to_cni_error(&self) -> CniError {
        let code = match self {
            HostDeviceError::ResultNotExpressible { version, .. } => {
                return CniError::new(ErrorCode::IncompatibleVersion, self.to_string())
                    .with_details(format!(
                        "a result without IP addresses (no \"ipam\") has no CNI {version} form"
                    ))
            }
            HostDeviceError::Conf(e) => return e.to_cni_error(),
            HostDeviceError::Iface(e) => return e.to_cni_error(),
            HostDeviceError::Ipam { source, .. } => return source.to_cni_error(),
            HostDeviceError::Config(_) | HostDeviceError::PrevResultMissing => {
                ErrorCode::InvalidNetworkConfig
            }
            HostDeviceError::NetNs { source, .. } => source.error_code(),
            HostDeviceError::Lock(e) => e.error_code(),
            HostDeviceError::Lookup(e) => match e {
                LookupError::NotFound(_)
                | LookupError::DeviceMissing { .. }
                | LookupError::NoNetdev { .. }
                | LookupError::KernelPath { .. } => ErrorCode::InvalidNetworkConfig,
                LookupError::Sysfs(_) => ErrorCode::Io,
                LookupError::Netlink(_) => ErrorCode::Internal,
            },
            HostDeviceError::DeviceInfo(e) => e.to_cni_error().code,
            HostDeviceError::State(_) => ErrorCode::Io,
            HostDeviceError::IpamResult(ResultError::UnsupportedVersion(_))
            | HostDeviceError::PrevResult(ResultError::UnsupportedVersion(_)) => {
                ErrorCode::IncompatibleVersion
            }
            HostDeviceError::IpamResult(_) | HostDeviceError::PrevResult(_) => ErrorCode::Decode,
            HostDeviceError::RdmaMode { source, .. } | HostDeviceError::Rdma { source, .. } => {
                match source {
                    RdmaError::Unavailable { .. } => ErrorCode::NotAvailable,
                    RdmaError::Kernel { .. }
                    | RdmaError::Socket { .. }
                    | RdmaError::Decode(_)
                    | RdmaError::DeviceNotFound(_)
                    | RdmaError::NetNs(_)
                    | RdmaError::Backend(_) => ErrorCode::Internal,
                }
            }
            HostDeviceError::NotBackYet { .. } => ErrorCode::TryAgainLater,
            HostDeviceError::Transfer(_)
            | HostDeviceError::Restore { .. }
            | HostDeviceError::NoOriginalName(_)
            | HostDeviceError::Netlink(_)
            | HostDeviceError::IpamNoIps
            | HostDeviceError::SandboxMismatch { .. }
            | HostDeviceError::InterfaceMissing(_)
            | HostDeviceError::MacMismatch { .. }
            | HostDeviceError::RdmaMissing { .. } => ErrorCode::Internal,
        };
        CniError::new(code, self.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn codes_follow_the_module_rules() {
        let code = |e: HostDeviceError| e.to_cni_error().code.as_u32();
        assert_eq!(code(ConfigError::NoSelector.into()), 7);
        assert_eq!(code(LookupError::NotFound("device \"x\"".into()).into()), 7);
        assert_eq!(
            code(HostDeviceError::NetNs {
                path: "/x".into(),
                source: NetNsError::NotExist {
                    path: PathBuf::from("/x")
                }
            }),
            3
        );
        assert_eq!(
            code(
                StateError::Write {
                    path: "/x".into(),
                    source: std::io::Error::other("full")
                }
                .into()
            ),
            5
        );
        assert_eq!(code(HostDeviceError::IpamNoIps), 999);
        // CHECK: nothing to compare is the configuration's fault, a
        // difference is a finding.
        assert_eq!(code(HostDeviceError::PrevResultMissing), 7);
        for finding in [
            HostDeviceError::SandboxMismatch {
                found: String::new(),
                netns: "/x".into(),
            },
            HostDeviceError::InterfaceMissing("net1".into()),
            HostDeviceError::MacMismatch {
                ifname: "net1".into(),
                expected: "02:00:00:00:00:01".into(),
                found: "02:00:00:00:00:02".into(),
            },
            HostDeviceError::RdmaMissing {
                device: "mlx5_0".into(),
                ifname: "net1".into(),
            },
            IfaceError::MacMismatch {
                ifname: "net1".into(),
                expected: "a".into(),
                found: "b".into(),
            }
            .into(),
        ] {
            assert_eq!(code(finding), 999);
        }
        assert_eq!(
            code(HostDeviceError::Ipam {
                action: "IPAM ADD",
                plugin: "static".into(),
                source: InvokeError::Plugin(CniError::new(ErrorCode::Other(11), "busy")),
            }),
            11
        );
    }
}
