//! The plugin's errors and the spec codes they are reported with.
//!
//! - configuration problems: 7 (6 for a prevResult that does not decode,
//!   1 for one of an unknown version, as libcni's configuration errors);
//! - a missing prevResult, or one without the interface the ingress policy
//!   needs: 7 (the plugin is chained wrongly);
//! - the host lock or the xtables lock held too long, a program that hung,
//!   firewalld unreachable or not running: 11;
//! - everything the firewall refused, and CHECK finding a rule missing:
//!   999, worded as the reference words it where it has a message.

use libcni::error::{CniError, ErrorCode, ErrorList, ToCniError};
use libcni::firewall_probe::IptablesUnusable;
use libcni::iptables::CommandError;
use libcni::lock::LockError;
use libcni::nftables::NfTablesError;
use libcni::plugin_conf::ConfError;
use libcni::types::ResultError;
use libcni::IpFamily;

use crate::config::ConfigError;
use crate::firewalld::FirewalldError;

#[derive(Debug, thiserror::Error)]
pub enum FirewallError {
    #[error(transparent)]
    Conf(#[from] ConfError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("could not convert result to current version: {0}")]
    PrevResult(#[source] ResultError),
    #[error("missing prevResult from earlier plugin")]
    MissingPrevResult,
    #[error("interface needs to be set for ingress policy {policy:?}, make sure to chain \"firewall\" plugin with \"bridge\"")]
    NoBridge { policy: &'static str },
    #[error("got empty bridge name")]
    EmptyBridgeName,
    #[error(transparent)]
    InvalidBridgeName(#[from] libcni::link_name::InvalidLinkName),
    #[error(transparent)]
    Lock(#[from] LockError),
    /// A family's iptables could not be read (the reference's wording).
    #[error("could not initialize iptables protocol {family}: {source}")]
    IptablesInit {
        family: IpFamily,
        #[source]
        source: CommandError,
    },
    #[error("{family} iptables is not usable: {source}")]
    IptablesUnusable {
        family: IpFamily,
        #[source]
        source: IptablesUnusable,
    },
    #[error(transparent)]
    Iptables(CommandError),
    #[error(transparent)]
    NfTables(NfTablesError),
    #[error(transparent)]
    Firewalld(#[from] FirewalldError),
    #[error("no firewall backend is usable here: iptables: {iptables}; nftables: {nftables}")]
    NoBackend {
        iptables: IptablesUnusable,
        nftables: NfTablesError,
    },
    #[error("{0}")]
    Check(String),
    /// ADD failed and taking back its partial work failed too.
    #[error("{cause}; undoing the partial ADD also failed: {}", .undo_failures.join("; "))]
    UndoFailed {
        cause: Box<FirewallError>,
        undo_failures: Vec<String>,
    },
    #[error(transparent)]
    Several(ErrorList),
}

impl FirewallError {
    /// `cause`, noting the undo steps that failed, if any.
    pub fn undo_failed(cause: FirewallError, undo_failures: Vec<String>) -> FirewallError {
        if undo_failures.is_empty() {
            cause
        } else {
            FirewallError::UndoFailed {
                cause: Box::new(cause),
                undo_failures,
            }
        }
    }

    /// One error from many (DEL and GC go on after a failure); `None`
    /// when there are none.
    pub fn from_many(errors: Vec<FirewallError>) -> Option<FirewallError> {
        ErrorList::combine(errors, FirewallError::Several)
    }

    pub fn error_code(&self) -> ErrorCode {
        match self {
            FirewallError::Conf(e) => e.to_cni_error().code,
            FirewallError::Config(_)
            | FirewallError::MissingPrevResult
            | FirewallError::NoBridge { .. }
            | FirewallError::EmptyBridgeName
            | FirewallError::InvalidBridgeName(_) => ErrorCode::InvalidNetworkConfig,
            FirewallError::PrevResult(ResultError::UnsupportedVersion(_)) => {
                ErrorCode::IncompatibleVersion
            }
            FirewallError::PrevResult(ResultError::Decode(_) | ResultError::NotAnObject) => {
                ErrorCode::Decode
            }
            FirewallError::PrevResult(ResultError::NoValidIps) => ErrorCode::InvalidNetworkConfig,
            FirewallError::Lock(e) => e.error_code(),
            FirewallError::IptablesInit { source, .. } => source.error_code(),
            FirewallError::IptablesUnusable { source, .. } => source.error_code(),
            FirewallError::Iptables(e) => e.error_code(),
            FirewallError::NfTables(_) | FirewallError::NoBackend { .. } => ErrorCode::Internal,
            FirewallError::Firewalld(e) => e.error_code(),
            FirewallError::Check(_) => ErrorCode::Internal,
            FirewallError::UndoFailed { cause, .. } => cause.error_code(),
            FirewallError::Several(list) => list.code(),
        }
    }
}

impl ToCniError for FirewallError {
    fn to_cni_error(&self) -> CniError {
        match self {
            FirewallError::Conf(e) => e.to_cni_error(),
            FirewallError::Several(list) => list.to_cni_error(),
            other => CniError::new(other.error_code(), other.to_string()),
        }
    }
}
