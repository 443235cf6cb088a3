//! The plugin's errors and the spec codes they are reported with.
//!
//! - configuration problems (a value, a sysctl key, the allowlist, a
//!   missing `prevResult`): 7; `CNI_ARGS`: 4;
//! - a `prevResult` that does not decode: 6;
//! - a container namespace that does not exist: 3; a path that is not a
//!   namespace: 4;
//! - the saved-settings files: 5;
//! - what the kernel refused, and CHECK finding a difference: 999, with a
//!   message naming the setting and the interface.
//!
//! The reference reports all of these as 999.

use libcni::args::ArgsError;
use libcni::error::{CniError, ErrorCode, ErrorList, ToCniError};
use libcni::netlink::NetlinkError;
use libcni::netns::NetNsError;
use libcni::plugin_conf::ConfError;
use libcni::sysctl::SysctlError;
use libcni::types::ResultError;

use crate::allowlist::AllowlistError;
use crate::config::ConfigError;
use crate::saved::SavedError;

#[derive(Debug, thiserror::Error)]
pub enum TuningError {
    #[error(transparent)]
    Conf(#[from] ConfError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Args(#[from] ArgsError),
    #[error(transparent)]
    Allowlist(#[from] AllowlistError),
    #[error("Required prevResult missing")]
    PrevResultMissing,
    #[error("failed to convert prevResult: {0}")]
    PrevResult(#[source] ResultError),
    #[error("failed to open netns {path:?}: {source}")]
    NetNs {
        path: String,
        #[source]
        source: NetNsError,
    },
    #[error(
        "sysctl {key:?} does not exist in the container's network namespace (no /proc/sys/{path})"
    )]
    SysctlMissing { key: String, path: String },
    #[error(transparent)]
    Sysctl(#[from] SysctlError),
    #[error("Cannot find container link {0}")]
    LinkMissing(String),
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
    #[error(transparent)]
    Saved(#[from] SavedError),
    /// CHECK: the namespace differs from the configuration.
    #[error("Error: Tuning configured {setting} of {subject} is {configured}, current value is {current}")]
    Mismatch {
        setting: &'static str,
        subject: String,
        configured: String,
        current: String,
    },
    /// DEL: some settings could not be put back (all were tried).
    #[error(transparent)]
    Several(ErrorList),
}

impl TuningError {
    pub fn netns(path: &str, source: NetNsError) -> TuningError {
        TuningError::NetNs {
            path: path.to_string(),
            source,
        }
    }

    /// One error from many; `None` when there were none.
    pub fn from_many(errors: Vec<TuningError>) -> Option<TuningError> {
        ErrorList::combine(errors, TuningError::Several)
    }
}

impl ToCniError for TuningError {
    fn to_cni_error(&self) -> CniError {
        let code = match self {
            TuningError::Conf(e) => return e.to_cni_error(),
            TuningError::Args(e) => return e.to_cni_error(),
            TuningError::Allowlist(e) => return e.to_cni_error(),
            TuningError::Saved(e) => return e.to_cni_error(),
            TuningError::Config(_)
            | TuningError::PrevResultMissing
            | TuningError::SysctlMissing { .. } => ErrorCode::InvalidNetworkConfig,
            TuningError::PrevResult(_) => ErrorCode::Decode,
            TuningError::NetNs { source, .. } => source.error_code(),
            TuningError::Sysctl(_)
            | TuningError::LinkMissing(_)
            | TuningError::Netlink(_)
            | TuningError::Mismatch { .. } => ErrorCode::Internal,
            // The first failure decides the code; the message lists all.
            TuningError::Several(list) => list.code(),
        };
        CniError::new(code, self.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn codes() {
        let code = |e: TuningError| e.to_cni_error().code.as_u32();
        assert_eq!(code(TuningError::PrevResultMissing), 7);
        assert_eq!(code(TuningError::Config(ConfigError::InvalidMtu(-1))), 7);
        assert_eq!(
            code(TuningError::Args(ArgsError::Unknown(vec!["X=1".into()]))),
            4
        );
        assert_eq!(
            code(TuningError::netns(
                "/x",
                NetNsError::NotExist {
                    path: PathBuf::from("/x")
                }
            )),
            3
        );
        assert_eq!(
            code(TuningError::netns(
                "/etc/hostname",
                NetNsError::NotNetNs {
                    path: PathBuf::from("/etc/hostname")
                }
            )),
            4
        );
        assert_eq!(code(TuningError::LinkMissing("eth0".into())), 999);
        let several = TuningError::from_many(vec![
            TuningError::LinkMissing("a".into()),
            TuningError::PrevResultMissing,
        ])
        .unwrap();
        assert_eq!(
            several.to_string(),
            "Cannot find container link a; Required prevResult missing"
        );
        assert_eq!(code(several), 999);
    }
}
