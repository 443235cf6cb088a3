//! The plugin's errors and their spec codes.
//!
//! - configuration problems, a `deviceID` or `pf` this node does not have
//!   or that is no VF, a VF of another PF than `pf`, a `rail` on a VF
//!   without netdev or with a `table` the pod already uses: 7 (4 for
//!   `CNI_ARGS`);
//! - a pod namespace that does not exist: 3; a path that is no namespace: 4;
//! - a VF lock, or the pod's routing lock of a rail, held by another run
//!   past the wait: 11 (5 when the lock itself fails);
//! - an RDMA subsystem that cannot serve pods (missing, or shared mode not
//!   opted into), no free VF: 50;
//! - the IPAM plugin's own error: its code;
//! - the device-info file that cannot be written or removed: 5;
//! - a teardown that failed in several steps: the first failure's code
//!   (each kept in an [`ErrorList`]); a failed ADD whose undoing failed
//!   too: the ADD error's code;
//! - everything the kernel, sysfs or the state directory refused: 999,
//!   with a message naming the operation.

use libcni::device_info::DeviceInfoError;
use libcni::error::{CniError, ErrorCode, ErrorList, ToCniError};
use libcni::iface::IfaceError;
use libcni::invoke::InvokeError;
use libcni::lock::LockError;
use libcni::netlink::rdma::RdmaError;
use libcni::netlink::NetlinkError;
use libcni::netns::NetNsError;
use libcni::plugin_conf::ConfError;
use libcni::source_routing::SourceRoutingError;
use libcni::sysctl::SysctlError;
use libcni::types::ResultError;

use crate::alloc::AllocError;
use crate::config::ConfigError;
use crate::netdev::NetdevError;
use crate::pf::PfError;
use crate::state::StateError;
use crate::verbs::VerbsError;
use crate::vf::VfError;

/// What to do about an RDMA subsystem in shared mode; part of every error
/// that reports it.
pub const SHARED_MODE_FIX: &str = "run `rdma system set netns exclusive` (accepted only while no network namespace other than the initial one exists), or load ib_core with netns_mode=0 at boot (`options ib_core netns_mode=0` in /etc/modprobe.d/), or set \"allowSharedRdmaNetns\": true in the network configuration to let pods share RDMA devices";

#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Conf(#[from] ConfError),
    #[error(transparent)]
    NetNs(#[from] NetNsError),
    #[error(transparent)]
    Vf(#[from] VfError),
    #[error(transparent)]
    Alloc(#[from] AllocError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Pf(#[from] PfError),
    #[error(transparent)]
    Rdma(#[from] RdmaError),
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    #[error(transparent)]
    Netdev(#[from] NetdevError),
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
    /// The pod interface's addresses and routes.
    #[error(transparent)]
    Iface(#[from] IfaceError),
    #[error(transparent)]
    Ipam(#[from] InvokeError),
    #[error("IPAM result: {0}")]
    IpamResult(#[from] ResultError),
    #[error("IPAM plugin returned missing IP config")]
    IpamNoIps,
    #[error(transparent)]
    DeviceInfo(#[from] DeviceInfoError),
    #[error(transparent)]
    Sysctl(#[from] SysctlError),
    #[error(transparent)]
    SourceRouting(#[from] SourceRoutingError),
    /// The pod's routing lock (a rail's table choice).
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("rail.table {table} is already in use in the pod (a rule looks it up or a route is in it): give each rail of a pod a table of its own, or leave table out to take the first free one from 100")]
    RailTableInUse { table: u32 },
    #[error("rail needs the VF's netdev, but VF {pci} is bound to {driver} and has none: leave rail out for a userspace VF")]
    RailWithoutNetdev { pci: String, driver: String },
    #[error("RDMA subsystem namespace awareness mode is set to shared, expecting it to be set to exclusive: {SHARED_MODE_FIX}")]
    SharedMode,
    #[error("cannot move RDMA device {device} into the pod netns: its driver {driver} cannot change network namespace (EOPNOTSUPP: the kernel moves only devices whose driver can disassociate user contexts, such as mlx5; soft-RoCE rdma_rxe and siw cannot). Use a hardware RDMA device, or run the RDMA subsystem in shared mode with \"allowSharedRdmaNetns\": true")]
    RdmaMoveUnsupported { device: String, driver: String },
    #[error("failed to move RDMA device {device} to namespace {netns}: {source}")]
    RdmaMove {
        device: String,
        netns: String,
        source: RdmaError,
    },
    #[error("no RDMA device found for VF {pci} (netdev {netdev:?}): sysfs lists none under the PCI device and RDMA netlink shows none bound to the netdev")]
    NoRdmaDevice { pci: String, netdev: String },
    #[error("VF {pci} belongs to PF {actual:?}, not to the configured pf {expected:?}")]
    WrongPf {
        pci: String,
        actual: String,
        expected: String,
    },
    #[error("no free VF on PF {pf:?}")]
    NoFreeVf { pf: String },
    #[error("PF {pf:?} did not take MAC {mac} for VF {vf}: it reports {reported}")]
    MacNotApplied {
        pf: String,
        vf: u32,
        mac: String,
        reported: String,
    },
    #[error(
        "attachment {container_id}/{ifname} of network {network:?} already exists; DEL it first"
    )]
    AttachmentExists {
        network: String,
        container_id: String,
        ifname: String,
    },
    #[error("{0}")]
    Check(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("cleanup incomplete: {0}")]
    Teardown(ErrorList),
    #[error("{error}; undoing the partial ADD also failed: {problems}")]
    RollbackFailed {
        error: Box<PluginError>,
        problems: ErrorList,
    },
}

impl ToCniError for PluginError {
    fn to_cni_error(&self) -> CniError {
        let code = match self {
            PluginError::Config(e) => return e.to_cni_error(),
            PluginError::Conf(e) => return e.to_cni_error(),
            PluginError::Ipam(e) => return e.to_cni_error(),
            PluginError::RollbackFailed { error, .. } => error.to_cni_error().code,
            PluginError::Teardown(problems) => problems.code(),
            PluginError::Rdma(e) => e.to_cni_error().code,
            PluginError::Iface(e) => e.to_cni_error().code,
            PluginError::SourceRouting(e) => e.to_cni_error().code,
            PluginError::Lock(e) => e.error_code(),
            PluginError::NetNs(NetNsError::NotExist { .. }) => ErrorCode::UnknownContainer,
            PluginError::NetNs(NetNsError::NotNetNs { .. }) => ErrorCode::InvalidEnvironment,
            PluginError::NetNs(
                NetNsError::Open { .. }
                | NetNsError::Switch { .. }
                | NetNsError::Thread { .. }
                | NetNsError::SwitchBack { .. },
            ) => ErrorCode::Internal,
            PluginError::Alloc(AllocError::LockTimeout { .. }) => ErrorCode::TryAgainLater,
            PluginError::Alloc(
                AllocError::Lock { .. }
                | AllocError::AlreadyAllocated { .. }
                | AllocError::Record { .. },
            ) => ErrorCode::Internal,
            PluginError::DeviceInfo(e) => e.to_cni_error().code,
            PluginError::SharedMode
            | PluginError::NoFreeVf { .. }
            | PluginError::Unavailable(_) => ErrorCode::NotAvailable,
            // The configuration (deviceID, pf) names a device this node
            // does not have, or one that is no VF: retrying cannot help.
            PluginError::WrongPf { .. }
            | PluginError::RailTableInUse { .. }
            | PluginError::RailWithoutNetdev { .. }
            | PluginError::Vf(
                VfError::DeviceNotFound { .. }
                | VfError::NotAVf { .. }
                | VfError::PfNotFound { .. },
            ) => ErrorCode::InvalidNetworkConfig,
            PluginError::Vf(
                VfError::PfNetdevNotFound { .. }
                | VfError::VfIndexNotFound { .. }
                | VfError::NoNetdevNorUserspaceDriver { .. }
                | VfError::SeveralRdmaDevices { .. }
                | VfError::Sysfs(_),
            )
            | PluginError::State(_)
            | PluginError::Pf(_)
            | PluginError::Verbs(_)
            | PluginError::Netdev(_)
            | PluginError::Netlink(_)
            | PluginError::Sysctl(_)
            | PluginError::IpamResult(_)
            | PluginError::IpamNoIps
            | PluginError::RdmaMoveUnsupported { .. }
            | PluginError::RdmaMove { .. }
            | PluginError::NoRdmaDevice { .. }
            | PluginError::MacNotApplied { .. }
            | PluginError::AttachmentExists { .. }
            | PluginError::Check(_) => ErrorCode::Internal,
        };
        CniError::new(code, self.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::time::Duration;

    #[test]
    fn codes() {
        let code = |e: PluginError| e.to_cni_error().code.as_u32();
        assert_eq!(code(PluginError::SharedMode), 50);
        assert_eq!(
            code(PluginError::Rdma(RdmaError::Unavailable {
                reason: "x".into()
            })),
            50
        );
        assert_eq!(
            code(PluginError::Alloc(AllocError::LockTimeout {
                path: PathBuf::from("/x"),
                waited: Duration::from_secs(1)
            })),
            11
        );
        assert_eq!(code(PluginError::Config(ConfigError::NoDevice)), 7);
        assert_eq!(code(PluginError::IpamNoIps), 999);
        assert_eq!(code(PluginError::RailTableInUse { table: 101 }), 7);
        assert_eq!(
            code(PluginError::RailWithoutNetdev {
                pci: "0000:af:06.0".into(),
                driver: "vfio-pci".into()
            }),
            7
        );
        assert_eq!(
            code(PluginError::Lock(LockError::Timeout {
                path: PathBuf::from("/run/netns/pod"),
                holder: "x",
                waited: Duration::from_secs(1)
            })),
            11
        );
        assert_eq!(
            code(PluginError::SourceRouting(SourceRoutingError::NoFreeTable(
                100
            ))),
            999
        );
        let missing = PluginError::Vf(VfError::DeviceNotFound {
            pci: "0000:af:06.7".into(),
            path: PathBuf::from("/sys/bus/pci/devices/0000:af:06.7"),
        });
        let e = missing.to_cni_error();
        assert_eq!(e.code.as_u32(), 7);
        assert!(
            e.msg
                .starts_with("PCI device 0000:af:06.7 does not exist on this node"),
            "{}",
            e.msg
        );
        assert_eq!(
            code(PluginError::Vf(VfError::NotAVf {
                pci: "0000:01:00.0".into()
            })),
            7
        );
        let mut problems = ErrorList::new();
        problems.push(&CniError::new(ErrorCode::Internal, "a"));
        let wrapped = PluginError::RollbackFailed {
            error: Box::new(PluginError::SharedMode),
            problems,
        };
        let e = wrapped.to_cni_error();
        assert_eq!(e.code.as_u32(), 50);
        assert!(
            e.msg.ends_with("undoing the partial ADD also failed: a"),
            "{}",
            e.msg
        );
    }

    #[test]
    fn teardown_keeps_each_failures_code_and_reports_the_first() {
        let mut problems = ErrorList::new();
        problems.push_in(
            "c1/net1",
            &PluginError::Alloc(AllocError::LockTimeout {
                path: PathBuf::from("/s/locks/0000:af:00.2.lock"),
                waited: Duration::from_secs(3),
            }),
        );
        problems.push_in("IPAM DEL", &PluginError::IpamNoIps);
        let e = PluginError::Teardown(problems).to_cni_error();
        assert_eq!(e.code.as_u32(), 11);
        assert!(
            e.msg
                .starts_with("cleanup incomplete: c1/net1: time out while waiting"),
            "{}",
            e.msg
        );
        assert!(
            e.msg
                .ends_with("; IPAM DEL: IPAM plugin returned missing IP config"),
            "{}",
            e.msg
        );
    }

    #[test]
    fn shared_mode_message_names_the_fixes() {
        let msg = PluginError::SharedMode.to_string();
        assert!(msg.contains("rdma system set netns exclusive"), "{msg}");
        assert!(msg.contains("netns_mode=0"), "{msg}");
        assert!(msg.contains("allowSharedRdmaNetns"), "{msg}");
    }
}
