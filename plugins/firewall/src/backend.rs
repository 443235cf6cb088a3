//! Which firewall a call writes to.
//!
//! A `backend` key names one. Without it (or with `""`), the reference's
//! choice, extended by nftables:
//!
//! 1. firewalld, when its bus name has an owner on the system bus;
//! 2. else iptables, when the IPv4 iptables works here
//!    ([`probe_host_iptables`]: iptables-nft when nf_tables answers,
//!    legacy when its save program reads a table);
//! 3. else nftables, when nf_tables answers ([`probe_nftables`]): a host
//!    without iptables programs.
//!
//! iptables comes before nftables because that is where hosts keep a
//! restrictive FORWARD policy (Docker, distribution firewalls), and an
//! nftables accept cannot admit traffic another table drops (see
//! [`crate::nftables`]); the reference picks iptables there too, so a
//! node switching plugins keeps its rules where they were.

use libcni::firewall_probe::{probe_host_iptables, probe_nftables};

use crate::config::BackendChoice;
use crate::error::FirewallError;
use crate::firewalld::Firewalld;

/// The backend of one call.
pub enum Backend {
    Iptables,
    Nftables,
    Firewalld(Firewalld),
}

impl Backend {
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Iptables => "iptables",
            Backend::Nftables => "nftables",
            Backend::Firewalld(_) => "firewalld",
        }
    }
}

pub fn choose(choice: BackendChoice) -> Result<Backend, FirewallError> {
    let backend = match choice {
        BackendChoice::Iptables => Backend::Iptables,
        BackendChoice::Nftables => Backend::Nftables,
        BackendChoice::Firewalld => Backend::Firewalld(Firewalld::connect()?),
        BackendChoice::Auto => choose_automatically()?,
    };
    log::debug!("backend: {}", backend.name());
    Ok(backend)
}

fn choose_automatically() -> Result<Backend, FirewallError> {
    if let Ok(firewalld) = Firewalld::connect() {
        if firewalld.is_running() {
            return Ok(Backend::Firewalld(firewalld));
        }
    }
    let iptables = match probe_host_iptables() {
        Ok(_) => return Ok(Backend::Iptables),
        Err(e) => e,
    };
    match probe_nftables() {
        Ok(()) => Ok(Backend::Nftables),
        Err(nftables) => Err(FirewallError::NoBackend { iptables, nftables }),
    }
}
