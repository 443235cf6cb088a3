//! The plugin's errors and the spec codes they are reported with.
//!
//! The reference reports everything as 999; here:
//!
//! | condition | code |
//! |---|---|
//! | configuration: wrong types, no `ipam`, an option name that does not parse, a value over 255 bytes | 7 |
//! | `prevResult` undecodable | 6 (1 for an unknown version) |
//! | the daemon cannot be reached (ADD, DEL, CHECK, GC) | 11 (try again later: the runtime retries, the lease is the daemon's) |
//! | the daemon cannot be reached (STATUS) | 50 (plugin not available) |
//! | the daemon's own error (`no more tries`, no lease for CHECK) or an answer it should not give | 999 |
//! | CHECK: the leased address is not in `prevResult` | 999, the suite's rule for a CHECK that finds a difference (as the reference) |

use std::net::IpAddr;

use libcni::error::{CniError, ErrorCode, ToCniError};
use libcni::plugin_conf::ConfError;
use libcni::types::ResultError;

use crate::config::ConfigError;
use crate::rpc::RpcError;

#[derive(Debug, thiserror::Error)]
pub enum DhcpError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Conf(#[from] ConfError),
    #[error("failed to convert prevResult: {0}")]
    PrevResult(#[source] ResultError),
    /// The daemon is not there (ADD, DEL, CHECK, GC).
    #[error("error dialing DHCP daemon: {0}")]
    Dial(#[source] RpcError),
    /// The daemon is not there (STATUS).
    #[error("DHCP daemon not available at {socket}: {source}")]
    Unavailable {
        socket: String,
        #[source]
        source: RpcError,
    },
    #[error("error calling {method}: {source}")]
    Call {
        method: &'static str,
        #[source]
        source: RpcError,
    },
    #[error("DHCP lease {leased} is not in prevResult for interface {ifname}")]
    LeaseMismatch { leased: IpAddr, ifname: String },
    /// `ipam.daemonSocketPath` outside the state folders or through a link.
    #[error(transparent)]
    Socket(#[from] libcni::confine::ConfineError),
}

impl DhcpError {
    /// An RPC failure of `method`: not reaching the daemon is a dial error.
    pub fn from_call(method: &'static str, source: RpcError) -> DhcpError {
        match source {
            RpcError::Dial(_) => DhcpError::Dial(source),
            RpcError::Io(_) | RpcError::Gob(_) | RpcError::Protocol(_) | RpcError::Remote(_) => {
                DhcpError::Call { method, source }
            }
        }
    }

    pub fn code(&self) -> ErrorCode {
        match self {
            DhcpError::Config(e) => match e {
                ConfigError::Decode(_)
                | ConfigError::MissingIpam
                | ConfigError::Option(_)
                | ConfigError::BadPriority(_) => ErrorCode::InvalidNetworkConfig,
            },
            DhcpError::Conf(e) => e.to_cni_error().code,
            DhcpError::PrevResult(e) => match e {
                ResultError::UnsupportedVersion(_) => ErrorCode::IncompatibleVersion,
                ResultError::Decode(_) | ResultError::NotAnObject | ResultError::NoValidIps => {
                    ErrorCode::Decode
                }
            },
            DhcpError::Dial(_) => ErrorCode::TryAgainLater,
            DhcpError::Unavailable { .. } => ErrorCode::NotAvailable,
            DhcpError::Call { .. } => ErrorCode::Internal,
            DhcpError::LeaseMismatch { .. } => ErrorCode::Internal,
            DhcpError::Socket(libcni::confine::ConfineError::Io { .. }) => ErrorCode::Io,
            DhcpError::Socket(_) => ErrorCode::InvalidNetworkConfig,
        }
    }
}

impl ToCniError for DhcpError {
    fn to_cni_error(&self) -> CniError {
        match self {
            DhcpError::Conf(e) => e.to_cni_error(),
            _ => CniError::new(self.code(), self.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    #[test]
    fn codes_and_messages() {
        let dial = || RpcError::Dial(io::Error::from(io::ErrorKind::NotFound));
        let cases: Vec<(DhcpError, u32, &str)> = vec![
            (
                ConfigError::MissingIpam.into(),
                7,
                "IPAM config missing 'ipam' key",
            ),
            (
                DhcpError::from_call("DHCP.Allocate", dial()),
                11,
                "error dialing DHCP daemon: entity not found",
            ),
            (
                DhcpError::from_call("DHCP.Allocate", RpcError::Remote("no more tries".into())),
                999,
                "error calling DHCP.Allocate: no more tries",
            ),
            (
                DhcpError::Unavailable {
                    socket: "/run/cni/dhcp.sock".into(),
                    source: dial(),
                },
                50,
                "DHCP daemon not available at /run/cni/dhcp.sock: entity not found",
            ),
            (
                DhcpError::LeaseMismatch {
                    leased: "10.0.0.5".parse().unwrap(),
                    ifname: "eth0".into(),
                },
                999,
                "DHCP lease 10.0.0.5 is not in prevResult for interface eth0",
            ),
        ];
        for (error, code, msg) in cases {
            let cni = error.to_cni_error();
            assert_eq!(cni.code.as_u32(), code, "{error}");
            assert_eq!(cni.msg, msg);
        }
    }
}
