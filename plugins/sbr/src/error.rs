//! The plugin's errors and the spec codes they are reported with.
//!
//! - configuration and previous-result problems: 7 (6 for a previous
//!   result that does not decode, 1 for one of an unknown version);
//! - `CNI_IFNAME` naming no interface of the container, or `CNI_NETNS`
//!   naming something that is not a namespace: 4; a namespace that does
//!   not exist: 3;
//! - another sbr holding the namespace's lock too long: 11; the lock
//!   itself failing (a namespace file that cannot be locked): 5;
//! - everything the kernel refused: 999, worded as the reference words it
//!   (`Failed to add rule: ...`);
//! - CHECK finding a rule, a table's route or the interface itself
//!   missing: 999. CHECK finding the attachment different from what ADD
//!   set up is 999 in every plugin of the suite, as in the reference (the
//!   spec has no code for it); what keeps CHECK from comparing at all (no
//!   previous result, one that does not decode) keeps its code above.

use std::net::IpAddr;

use ipnetwork::IpNetwork;

use libcni::error::{CniError, ErrorCode, ErrorList, ToCniError};
use libcni::lock::LockError;
use libcni::netlink::NetlinkError;
use libcni::netns::NetNsError;
use libcni::plugin_conf::ConfError;
use libcni::source_routing::SourceRoutingError;
use libcni::types::ResultError;

use crate::config::ConfigError;

#[derive(Debug, thiserror::Error)]
pub enum SbrError {
    #[error(transparent)]
    Conf(#[from] ConfError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("could not convert result to current version: {0}")]
    PrevResult(#[source] ResultError),
    #[error("This plugin must be called as chained plugin")]
    NotChained,
    #[error("No IP addresses supplied on interface: {0}")]
    NoIps(String),
    #[error("none of the prevResult's IP addresses belongs to interface {0}")]
    NoIpsOnInterface(String),
    #[error("prevResult gives {address} the gateway {} of the other IP family", .gateway.map(|g| g.to_string()).unwrap_or_default())]
    GatewayFamily {
        address: IpNetwork,
        gateway: Option<IpAddr>,
    },
    #[error("failed to open netns {path:?}: {source}")]
    NetNs {
        path: String,
        #[source]
        source: NetNsError,
    },
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("Cannot find network interface {ifname} in netns {netns:?}")]
    InterfaceNotFound { ifname: String, netns: String },
    #[error("netlink: {0}")]
    Netlink(#[from] NetlinkError),
    /// The rules and tables, shared with rdma-sriov's rails; worded as
    /// the reference words them.
    #[error(transparent)]
    Routing(#[from] SourceRoutingError),
    /// The reference words the rule error of `table` mode in lower case.
    #[error("failed to add rule: {0}")]
    AddRuleToTable(#[source] NetlinkError),
    #[error("Failed to delete route: {0}")]
    DeleteRoute(#[source] NetlinkError),
    /// ADD failed and taking back its partial work failed too.
    #[error("{cause}; undoing the partial ADD also failed: {}", .undo_failures.join("; "))]
    UndoFailed {
        cause: Box<SbrError>,
        undo_failures: Vec<String>,
    },
    #[error("{0}")]
    Check(String),
    #[error(transparent)]
    Several(ErrorList),
}

impl SbrError {
    /// One error from many (DEL goes on after a failure); `None` when there
    /// were none.
    pub fn from_many(errors: Vec<SbrError>) -> Option<SbrError> {
        ErrorList::combine(errors, SbrError::Several)
    }
}

impl ToCniError for SbrError {
    fn to_cni_error(&self) -> CniError {
        let code = match self {
            SbrError::Conf(e) => return e.to_cni_error(),
            SbrError::Config(_)
            | SbrError::NotChained
            | SbrError::NoIps(_)
            | SbrError::NoIpsOnInterface(_)
            | SbrError::GatewayFamily { .. } => ErrorCode::InvalidNetworkConfig,
            SbrError::PrevResult(ResultError::UnsupportedVersion(_)) => {
                ErrorCode::IncompatibleVersion
            }
            SbrError::PrevResult(
                ResultError::Decode(_) | ResultError::NotAnObject | ResultError::NoValidIps,
            ) => ErrorCode::Decode,
            SbrError::NetNs { source, .. } => source.error_code(),
            SbrError::Lock(e) => e.error_code(),
            SbrError::InterfaceNotFound { .. } => ErrorCode::InvalidEnvironment,
            SbrError::Routing(e) => e.to_cni_error().code,
            SbrError::Netlink(_)
            | SbrError::AddRuleToTable(_)
            | SbrError::DeleteRoute(_)
            | SbrError::Check(_) => ErrorCode::Internal,
            // The failure that started it decides the code.
            SbrError::UndoFailed { cause, .. } => cause.to_cni_error().code,
            SbrError::Several(list) => list.code(),
        };
        CniError::new(code, self.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::errno::Errno;

    fn code(e: SbrError) -> u32 {
        e.to_cni_error().code.as_u32()
    }

    fn kernel(errno: Errno) -> NetlinkError {
        NetlinkError::Kernel {
            errno,
            message: None,
        }
    }

    #[test]
    fn codes() {
        assert_eq!(code(SbrError::NotChained), 7);
        assert_eq!(code(SbrError::NoIps("net1".into())), 7);
        assert_eq!(code(ConfigError::TooManyGateways.into()), 7);
        assert_eq!(
            code(SbrError::PrevResult(ResultError::UnsupportedVersion(
                "9".into()
            ))),
            1
        );
        assert_eq!(code(SbrError::PrevResult(ResultError::NotAnObject)), 6);
        assert_eq!(
            code(SbrError::NetNs {
                path: "/x".into(),
                source: NetNsError::NotExist { path: "/x".into() }
            }),
            3
        );
        assert_eq!(
            code(SbrError::NetNs {
                path: "/etc/hostname".into(),
                source: NetNsError::NotNetNs {
                    path: "/etc/hostname".into()
                }
            }),
            4
        );
        assert_eq!(
            code(SbrError::InterfaceNotFound {
                ifname: "net9".into(),
                netns: "/x".into()
            }),
            4
        );
        assert_eq!(
            code(
                LockError::Timeout {
                    path: "/x".into(),
                    holder: "another sbr call on this container",
                    waited: std::time::Duration::from_secs(30)
                }
                .into()
            ),
            11
        );
        assert_eq!(
            code(SourceRoutingError::AddRule(kernel(Errno::EEXIST)).into()),
            999
        );
        let undo = SbrError::UndoFailed {
            cause: Box::new(SbrError::NoIps("net1".into())),
            undo_failures: vec!["x".into()],
        };
        assert_eq!(code(undo), 7);
    }

    #[test]
    fn messages_follow_the_reference() {
        assert_eq!(
            SbrError::from(SourceRoutingError::AddRule(kernel(Errno::EEXIST))).to_string(),
            "Failed to add rule: EEXIST: File exists"
        );
        assert_eq!(
            SbrError::from(SourceRoutingError::AddDefaultRoute {
                gateway: "192.168.1.1".parse().unwrap(),
                source: kernel(Errno::ENETUNREACH)
            })
            .to_string(),
            "Failed to add default route to 192.168.1.1: ENETUNREACH: Network is unreachable"
        );
        let several = SbrError::from_many(vec![
            SourceRoutingError::DeleteRule(kernel(Errno::EPERM)).into(),
            SourceRoutingError::DeleteRule(kernel(Errno::EBUSY)).into(),
        ])
        .unwrap();
        assert_eq!(
            several.to_string(),
            "Failed to delete rule EPERM: Operation not permitted (changing the network \
             needs CAP_NET_ADMIN: run the plugin as root, as container runtimes do); \
             Failed to delete rule EBUSY: Device or resource busy"
        );
    }
}
