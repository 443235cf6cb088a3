//! Masquerade rules for container addresses (iptables and nftables).
//!
//! Traffic from a container address to anything outside its subnet (and not
//! multicast) leaves with the host's address. Both backends write exactly
//! the rules, names and comments of the reference plugins, so a container
//! added by the Go bridge is deleted by ours and the other way round.
//!
//! Every function works in the network namespace of the calling thread
//! (the `iptables-*` programs it runs inherit it).

mod iptables;
pub mod names;
mod nftables;

use crate::error::{CniError, ErrorCode, ErrorList, ToCniError};
use crate::firewall_probe::{probe_host_iptables, probe_nftables};
use crate::iptables::CommandError;
use crate::plugin_conf::GcAttachment;
use ipnetwork::IpNetwork;

pub use crate::nftables::NfTablesError;

/// Where the rules go (`ipMasqBackend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MasqBackend {
    Iptables,
    Nftables,
}

impl MasqBackend {
    pub fn as_str(self) -> &'static str {
        match self {
            MasqBackend::Iptables => "iptables",
            MasqBackend::Nftables => "nftables",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum IpMasqError {
    #[error("unknown ipmasq backend {0:?}")]
    UnknownBackend(String),
    #[error(transparent)]
    Iptables(#[from] CommandError),
    /// The table read in-process where iptables is iptables-nft, standing
    /// in for its save program.
    #[error("{program} failed (over netlink): {source}")]
    NetlinkRead {
        program: String,
        source: NfTablesError,
    },
    #[error(transparent)]
    NfTables(#[from] NfTablesError),
    /// Teardown and GC go on after a failure; this holds all of them,
    /// each with its own spec code (the first one's is reported).
    #[error("{0}")]
    Several(ErrorList),
}

impl IpMasqError {
    /// A failure a fresh read may settle: the table changed between the
    /// read and the write (a restore refused as a whole, a rule or chain
    /// gone or still in use).
    fn is_race(&self) -> bool {
        match self {
            IpMasqError::Iptables(CommandError::Failed { .. }) => true,
            IpMasqError::NfTables(e) => matches!(
                e.errno(),
                Some(nix::errno::Errno::ENOENT | nix::errno::Errno::EBUSY)
            ),
            IpMasqError::Iptables(_)
            | IpMasqError::NetlinkRead { .. }
            | IpMasqError::UnknownBackend(_)
            | IpMasqError::Several(_) => false,
        }
    }

    fn from_list(errors: Vec<IpMasqError>) -> Result<(), IpMasqError> {
        match ErrorList::combine(errors, IpMasqError::Several) {
            None => Ok(()),
            Some(error) => Err(error),
        }
    }

    fn code(&self) -> ErrorCode {
        match self {
            IpMasqError::UnknownBackend(_) => ErrorCode::InvalidNetworkConfig,
            IpMasqError::Iptables(e) => e.error_code(),
            IpMasqError::Several(list) => list.code(),
            IpMasqError::NetlinkRead { .. } | IpMasqError::NfTables(_) => ErrorCode::Internal,
        }
    }
}

impl ToCniError for IpMasqError {
    fn to_cni_error(&self) -> CniError {
        CniError::new(self.code(), self.to_string())
    }
}

/// The backend for `ipMasqBackend`: as named, or when absent iptables
/// unless only nftables works here (as the reference decides). Absent, it
/// runs `iptables-save -t nat` once to see whether iptables works.
pub fn select_backend(conf: Option<&str>) -> Result<MasqBackend, IpMasqError> {
    match conf {
        Some("iptables") => Ok(MasqBackend::Iptables),
        Some("nftables") => Ok(MasqBackend::Nftables),
        Some(other) => Err(IpMasqError::UnknownBackend(other.to_string())),
        None => {
            if probe_host_iptables().is_ok() || probe_nftables().is_err() {
                Ok(MasqBackend::Iptables)
            } else {
                Ok(MasqBackend::Nftables)
            }
        }
    }
}

/// Checks a configured `ipMasqBackend` without probing the system.
pub fn validate_backend(conf: Option<&str>) -> Result<(), IpMasqError> {
    match conf {
        None | Some("iptables") | Some("nftables") => Ok(()),
        Some(other) => Err(IpMasqError::UnknownBackend(other.to_string())),
    }
}

/// Masquerades traffic from each of `ips` (address with prefix, as in a
/// result) to anything outside its subnet. Adding the same attachment again
/// leaves one set of rules.
pub fn setup(
    backend: MasqBackend,
    network: &str,
    container_id: &str,
    ifname: &str,
    ips: &[IpNetwork],
) -> Result<(), IpMasqError> {
    let outcome = match backend {
        // The iptables layout has no place for the interface name (as in
        // the reference).
        MasqBackend::Iptables => iptables::setup(network, container_id, ips),
        MasqBackend::Nftables => Ok(nftables::setup(network, ifname, container_id, ips)?),
    };
    if outcome.is_ok() {
        log::info!(
            "masquerading traffic from {} that leaves its subnet ({} backend)",
            crate::logging::joined(ips),
            backend.as_str()
        );
    }
    outcome
}

/// Removes what [`setup`] made with either backend (the attachment may come
/// from another configuration or plugin version). Missing rules are fine;
/// both backends are tried and every failure is reported.
///
/// `ips` are the attachment's addresses when known. Without them, the
/// iptables chain of this network and container is still found by name and
/// removed, with every jump to it.
pub fn teardown(
    network: &str,
    container_id: &str,
    ifname: &str,
    ips: &[IpNetwork],
) -> Result<(), IpMasqError> {
    let mut errors = Vec::new();
    if let Err(e) = iptables::teardown(network, container_id, ips) {
        errors.push(e);
    }
    if let Err(e) = nftables::teardown(network, ifname, container_id) {
        // No nf_tables here: nothing of ours can be there either.
        if probe_nftables().is_ok() {
            errors.push(e.into());
        }
    }
    if errors.is_empty() {
        log::info!("removed the masquerade rules of network {network}, if any");
    }
    IpMasqError::from_list(errors)
}

/// Removes the masquerade rules of `network` whose attachment is not in
/// `valid`, in both backends (iptables per container, since its rules do
/// not name the interface).
pub fn gc(network: &str, valid: &[GcAttachment]) -> Result<(), IpMasqError> {
    let mut errors = Vec::new();
    if let Err(e) = iptables::gc(network, valid) {
        errors.push(e);
    }
    if let Err(e) = nftables::gc(network, valid) {
        if probe_nftables().is_ok() {
            errors.push(e.into());
        }
    }
    IpMasqError::from_list(errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_names() {
        assert_eq!(
            select_backend(Some("iptables")).unwrap(),
            MasqBackend::Iptables
        );
        assert_eq!(
            select_backend(Some("nftables")).unwrap(),
            MasqBackend::Nftables
        );
        let err = select_backend(Some("ebtables")).unwrap_err();
        assert_eq!(err.to_string(), "unknown ipmasq backend \"ebtables\"");
        assert_eq!(err.to_cni_error().code, ErrorCode::InvalidNetworkConfig);
        assert!(validate_backend(Some("")).is_err());
        assert!(validate_backend(None).is_ok());
    }

    #[test]
    fn lock_timeout_is_try_again_later() {
        let err = IpMasqError::Iptables(CommandError::XtablesLock {
            program: "iptables-restore".into(),
            seconds: 10,
        });
        assert_eq!(err.to_cni_error().code, ErrorCode::TryAgainLater);
        let both =
            IpMasqError::from_list(vec![err, IpMasqError::UnknownBackend("x".into())]).unwrap_err();
        assert!(matches!(both, IpMasqError::Several(_)));
        assert_eq!(both.to_cni_error().code, ErrorCode::TryAgainLater);
        assert_eq!(
            both.to_string(),
            "iptables-restore: the xtables lock is still held by another program after 10s; unknown ipmasq backend \"x\""
        );
    }
}
