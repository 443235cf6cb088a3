//! The plugin's errors and the spec codes they are reported with.
//!
//! The reference reports every error as 999 ("internal"); messages are its
//! own where it has one. Codes here:
//!
//! | condition | code |
//! |---|---|
//! | configuration invalid: wrong types, no `ipam`, an address, gateway or `ips` entry that does not parse, more than one address per family before 0.3.0, no `prevResult` for CHECK | 7 |
//! | `CNI_ARGS` invalid: a pair without one `=`, an unknown key, `IP=` not CIDR, `GATEWAY=` not an address | 4 |
//! | `prevResult` undecodable | 6 (1 for a version the plugin does not know) |
//! | CHECK: the `prevResult` address of a configured address has another gateway | 999 |
//!
//! CHECK finding the attachment different from what ADD set up is 999 in
//! every plugin of the suite, as in the reference: the spec has no code
//! for it (0-99 are its own, 100 and up the plugin's), and a runtime then
//! sees the same code from either implementation. What keeps CHECK from
//! comparing at all keeps its spec code (7 no `prevResult`, 6 or 1 one
//! that does not decode).

use std::net::IpAddr;

use libcni::args::ArgsError;
use libcni::error::{CniError, ErrorCode, ToCniError};
use libcni::plugin_conf::ConfError;
use libcni::types::ResultError;

use crate::config::ConfigError;

#[derive(Debug, thiserror::Error)]
pub enum StaticError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Args(#[from] ArgsError),
    /// The skeleton's view of the configuration (`prevResult`).
    #[error(transparent)]
    Conf(#[from] ConfError),
    #[error("failed to convert prevResult: {0}")]
    PrevResult(#[source] ResultError),
    #[error("Required prevResult missing")]
    PrevResultMissing,
    #[error("static: Failed to match addr {address} on interface {ifname}")]
    GatewayMismatch { address: IpAddr, ifname: String },
}

impl StaticError {
    pub fn code(&self) -> ErrorCode {
        match self {
            StaticError::Config(e) => match e {
                ConfigError::InvalidEnvIp(_) | ConfigError::InvalidEnvGateway(_) => {
                    ErrorCode::InvalidEnvironment
                }
                ConfigError::Decode(_)
                | ConfigError::MissingIpam
                | ConfigError::InvalidIp(_)
                | ConfigError::InvalidAddress(_)
                | ConfigError::InvalidIpNet { .. }
                | ConfigError::InvalidIps(_)
                | ConfigError::TooManyPerFamily(_) => ErrorCode::InvalidNetworkConfig,
            },
            StaticError::Args(e) => e.to_cni_error().code,
            StaticError::Conf(e) => e.to_cni_error().code,
            StaticError::PrevResult(e) => match e {
                ResultError::UnsupportedVersion(_) => ErrorCode::IncompatibleVersion,
                ResultError::Decode(_) | ResultError::NotAnObject | ResultError::NoValidIps => {
                    ErrorCode::Decode
                }
            },
            StaticError::PrevResultMissing => ErrorCode::InvalidNetworkConfig,
            StaticError::GatewayMismatch { .. } => ErrorCode::Internal,
        }
    }
}

impl ToCniError for StaticError {
    fn to_cni_error(&self) -> CniError {
        match self {
            // Keeps the details libcni gives (the offending network name).
            StaticError::Conf(e) => e.to_cni_error(),
            _ => CniError::new(self.code(), self.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_messages() {
        let ip: IpAddr = "10.10.0.1".parse().unwrap();
        let cases: Vec<(StaticError, u32, &str)> = vec![
            (
                ConfigError::MissingIpam.into(),
                7,
                "IPAM config missing 'ipam' key",
            ),
            (
                ConfigError::InvalidAddress("10.0.0.1".into()).into(),
                7,
                "the 'address' field is expected to be in CIDR notation, got: '10.0.0.1'",
            ),
            (
                ConfigError::InvalidIp("x".into()).into(),
                7,
                "invalid IP address: x",
            ),
            (
                ConfigError::InvalidIps("1.2.3.4".into()).into(),
                7,
                "an entry in the 'ips' field is NOT in CIDR notation, got: '1.2.3.4'",
            ),
            (
                ConfigError::TooManyPerFamily("0.2.0".into()).into(),
                7,
                "CNI version 0.2.0 does not support more than 1 address per family",
            ),
            (
                ConfigError::InvalidEnvIp("11.11.0.1".into()).into(),
                4,
                "the 'ip' field is expected to be in CIDR notation, got: '11.11.0.1'",
            ),
            (
                ConfigError::InvalidEnvGateway(" x".into()).into(),
                4,
                "invalid gateway address:  x",
            ),
            (
                ArgsError::Unknown(vec!["FOO=1".into()]).into(),
                4,
                "ARGS: unknown args [\"FOO=1\"]",
            ),
            (
                StaticError::PrevResultMissing,
                7,
                "Required prevResult missing",
            ),
            (
                StaticError::GatewayMismatch {
                    address: ip,
                    ifname: "eth0".into(),
                },
                999,
                "static: Failed to match addr 10.10.0.1 on interface eth0",
            ),
            (
                StaticError::PrevResult(ResultError::UnsupportedVersion("9.9.9".into())),
                1,
                "failed to convert prevResult: unsupported CNI result version \"9.9.9\"",
            ),
        ];
        for (error, code, msg) in cases {
            let cni = error.to_cni_error();
            assert_eq!(cni.code.as_u32(), code, "{error}");
            assert_eq!(cni.msg, msg);
        }
    }
}
