//! Firewall rules of an attachment, as the plugin's verbs see them:
//! masquerading of the container's addresses and the MAC spoof check of
//! its host veth. The rules themselves are built by [`libcni::ipmasq`] and
//! [`crate::spoofchk`]; [`AttachmentRules`] is the seam the verbs call, so
//! their logic does not depend on how the rules are written.

use ipnetwork::IpNetwork;
use libcni::ipmasq::{self, MasqBackend};
use libcni::plugin_conf::GcAttachment;

use crate::error::BridgeError;
use crate::spoofchk;

/// The masquerade rules of one attachment.
#[derive(Debug, Clone, Copy)]
pub struct Masquerade<'a> {
    /// `None` lets the masquerade code choose.
    pub backend: Option<MasqBackend>,
    pub network: &'a str,
    pub container_id: &'a str,
    pub ifname: &'a str,
    pub ips: &'a [IpNetwork],
}

/// The MAC spoof check of one attachment.
#[derive(Debug, Clone, Copy)]
pub struct SpoofCheck<'a> {
    pub host_veth: &'a str,
    /// `aa:bb:cc:dd:ee:ff`, the only source MAC let through.
    pub container_mac: &'a str,
    pub container_id: &'a str,
    pub ifname: &'a str,
}

/// `Sync`: ADD probes the masquerade backend on a worker thread.
pub trait AttachmentRules: Sync {
    /// The backend for a configuration that names none, as the system
    /// allows (a probe with no side effects).
    fn probe_masquerade_backend(&self) -> Result<MasqBackend, BridgeError>;
    /// With `masq.backend` unset, probes first.
    fn setup_masquerade(&self, masq: &Masquerade<'_>) -> Result<(), BridgeError>;
    /// Removes the rules of every backend; rules already gone are fine.
    fn teardown_masquerade(&self, masq: &Masquerade<'_>) -> Result<(), BridgeError>;
    /// Removes the masquerade rules of `network` that belong to none of
    /// `valid`.
    fn gc_masquerade(&self, network: &str, valid: &[GcAttachment]) -> Result<(), BridgeError>;
    fn setup_spoof_check(&self, check: &SpoofCheck<'_>) -> Result<(), BridgeError>;
    /// Rules already gone are fine.
    fn teardown_spoof_check(&self, container_id: &str, ifname: &str) -> Result<(), BridgeError>;
}

/// The host's real firewall, in the namespace of the calling thread.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemRules;

impl AttachmentRules for SystemRules {
    fn probe_masquerade_backend(&self) -> Result<MasqBackend, BridgeError> {
        Ok(ipmasq::select_backend(None)?)
    }

    fn setup_masquerade(&self, masq: &Masquerade<'_>) -> Result<(), BridgeError> {
        let backend = match masq.backend {
            Some(backend) => backend,
            None => self.probe_masquerade_backend()?,
        };
        ipmasq::setup(
            backend,
            masq.network,
            masq.container_id,
            masq.ifname,
            masq.ips,
        )?;
        Ok(())
    }

    fn teardown_masquerade(&self, masq: &Masquerade<'_>) -> Result<(), BridgeError> {
        ipmasq::teardown(masq.network, masq.container_id, masq.ifname, masq.ips)?;
        Ok(())
    }

    fn gc_masquerade(&self, network: &str, valid: &[GcAttachment]) -> Result<(), BridgeError> {
        ipmasq::gc(network, valid)?;
        Ok(())
    }

    fn setup_spoof_check(&self, check: &SpoofCheck<'_>) -> Result<(), BridgeError> {
        spoofchk::setup(
            check.container_id,
            check.ifname,
            check.host_veth,
            check.container_mac,
        )?;
        Ok(())
    }

    fn teardown_spoof_check(&self, container_id: &str, ifname: &str) -> Result<(), BridgeError> {
        spoofchk::teardown(container_id, ifname)?;
        Ok(())
    }
}
