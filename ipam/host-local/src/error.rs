//! The plugin's errors and the spec codes they are reported with.
//!
//! The reference reports nearly everything as 999 ("internal"). Here each
//! condition gets the code that tells a runtime (and an operator) what to
//! do about it:
//!
//! | condition | code |
//! |---|---|
//! | configuration invalid (ranges, names, requested addresses) | 7 |
//! | `CNI_ARGS`, container ID or interface name invalid | 4 |
//! | file system failure (read-only, full disk, permissions) | 5 |
//! | store lock not obtained in time | 11 (try again later) |
//! | requested address held by someone else | 11: it frees once its holder is deleted (a recreated pod with a fixed address) |
//! | range set exhausted (ADD and STATUS) | 50: the plugin cannot service ADD for this network, which is how STATUS reports it too |
//! | attachment already holds an address of the set (ADD twice without DEL) | 100 (plugin-specific) |
//! | CHECK finds no address for the attachment | 999, as the reference: the suite's rule for a CHECK that finds a difference (a runtime sees the same code from either implementation) |

use std::io;
use std::net::IpAddr;
use std::path::PathBuf;

use libcni::args::ArgsError;
use libcni::error::{CniError, ErrorCode, ToCniError};

use crate::allocator::AllocError;
use crate::config::ConfigError;
use crate::lease::AttachmentError;
use crate::store::StoreError;

/// ADD for an attachment that already holds an address of the range set.
pub const CODE_DUPLICATE_ALLOCATION: u32 = 100;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Args(#[from] ArgsError),
    #[error(transparent)]
    Attachment(#[from] AttachmentError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// `ipam.dataDir` outside the state folders, or through a link.
    #[error(transparent)]
    DataDir(#[from] libcni::confine::ConfineError),
    #[error("failed to read resolvConf {path}: {source}")]
    ResolvConf { path: PathBuf, source: io::Error },
    #[error("failed to allocate for range {set}: {source}")]
    Alloc {
        set: usize,
        #[source]
        source: AllocError,
    },
    #[error("failed to allocate all requested IPs:{}", list_ips(.0))]
    UnfulfilledRequest(Vec<IpAddr>),
    #[error("host-local: Failed to find address added by container {0}")]
    NotFound(String),
    #[error("GC could not release every stale lease: {}", join_errors(.0))]
    Gc(Vec<StoreError>),
    #[error("no IP addresses available in range set {set}: {ranges}")]
    Exhausted { set: usize, ranges: String },
}

fn list_ips(ips: &[IpAddr]) -> String {
    ips.iter().map(|ip| format!(" {ip}")).collect()
}

fn join_errors(errors: &[StoreError]) -> String {
    let texts: Vec<String> = errors.iter().map(ToString::to_string).collect();
    texts.join("; ")
}

fn store_code(e: &StoreError) -> ErrorCode {
    match e {
        StoreError::InvalidNetworkName(_) => ErrorCode::InvalidNetworkConfig,
        StoreError::Io { .. } => ErrorCode::Io,
        StoreError::Lock(e) => e.error_code(),
    }
}

impl Error {
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::Config(ConfigError::InvalidEnvIp(_)) => ErrorCode::InvalidEnvironment,
            Error::Config(_) => ErrorCode::InvalidNetworkConfig,
            Error::Args(e) => e.to_cni_error().code,
            Error::Attachment(_) => ErrorCode::InvalidEnvironment,
            Error::Store(e) => store_code(e),
            Error::DataDir(e) if crate::data_dir::is_config_error(e) => {
                ErrorCode::InvalidNetworkConfig
            }
            Error::DataDir(_) => ErrorCode::Io,
            // A FIFO, a device or an oversized file: the configuration
            // named what it must not.
            Error::ResolvConf { source, .. } if source.kind() == io::ErrorKind::InvalidInput => {
                ErrorCode::InvalidNetworkConfig
            }
            Error::ResolvConf { .. } => ErrorCode::Io,
            Error::Alloc { source, .. } => match source {
                AllocError::NotInRangeSet { .. } | AllocError::RequestedGateway(_) => {
                    ErrorCode::InvalidNetworkConfig
                }
                AllocError::RequestedTaken { .. } => ErrorCode::TryAgainLater,
                AllocError::Duplicate { .. } => ErrorCode::Other(CODE_DUPLICATE_ALLOCATION),
                AllocError::Exhausted(_) => ErrorCode::NotAvailable,
                AllocError::Store(e) => store_code(e),
            },
            Error::UnfulfilledRequest(_) => ErrorCode::InvalidNetworkConfig,
            Error::NotFound(_) => ErrorCode::Internal,
            Error::Gc(_) => ErrorCode::Io,
            Error::Exhausted { .. } => ErrorCode::NotAvailable,
        }
    }
}

impl ToCniError for Error {
    fn to_cni_error(&self) -> CniError {
        CniError::new(self.code(), self.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libcni::lock::LockError;
    use std::time::Duration;

    #[test]
    fn codes() {
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let cases: Vec<(Error, u32)> = vec![
            (ConfigError::NoRanges.into(), 7),
            (ConfigError::InvalidEnvIp("x".into()).into(), 4),
            (AttachmentError::InvalidContainerId("..".into()).into(), 4),
            (StoreError::InvalidNetworkName("..".into()).into(), 7),
            (
                StoreError::Io {
                    action: "create lease file",
                    path: "/x".into(),
                    source: io::Error::from_raw_os_error(28),
                }
                .into(),
                5,
            ),
            (
                StoreError::Lock(LockError::Timeout {
                    path: "/x/lock".into(),
                    holder: "another host-local",
                    waited: Duration::from_secs(1),
                })
                .into(),
                11,
            ),
            (
                Error::Alloc {
                    set: 0,
                    source: AllocError::Exhausted("r".into()),
                },
                50,
            ),
            (
                Error::Alloc {
                    set: 1,
                    source: AllocError::RequestedTaken {
                        ip,
                        set: "r".into(),
                    },
                },
                11,
            ),
            (
                Error::Alloc {
                    set: 0,
                    source: AllocError::Duplicate {
                        ip,
                        container_id: "c".into(),
                    },
                },
                100,
            ),
            (
                Error::Alloc {
                    set: 0,
                    source: AllocError::RequestedGateway(ip),
                },
                7,
            ),
            (Error::UnfulfilledRequest(vec![ip]), 7),
            (Error::NotFound("c".into()), 999),
            (
                Error::Exhausted {
                    set: 0,
                    ranges: "r".into(),
                },
                50,
            ),
        ];
        for (error, code) in cases {
            let cni = error.to_cni_error();
            assert_eq!(cni.code.as_u32(), code, "{error}");
            assert_eq!(cni.msg, error.to_string());
        }
    }

    #[test]
    fn reference_messages() {
        let ip: IpAddr = "10.1.2.88".parse().unwrap();
        let other: IpAddr = "10.1.2.77".parse().unwrap();
        assert_eq!(
            Error::UnfulfilledRequest(vec![ip, other]).to_string(),
            "failed to allocate all requested IPs: 10.1.2.88 10.1.2.77"
        );
        assert_eq!(
            Error::Alloc { set: 0, source: AllocError::Exhausted("10.0.0.2-10.0.0.2".into()) }.to_string(),
            "failed to allocate for range 0: no IP addresses available in range set: 10.0.0.2-10.0.0.2"
        );
        assert_eq!(
            Error::NotFound("dummy".into()).to_string(),
            "host-local: Failed to find address added by container dummy"
        );
    }
}
