//! The firewalld backend: each address (as `/32` or `/128`) becomes a
//! source of a zone (default `trusted`) through firewalld's D-Bus API on
//! the system bus (`DBUS_SYSTEM_BUS_ADDRESS` when set), as the reference
//! does it:
//!
//! - ADD: `addSource(zone, address)`; firewalld's `ZONE_ALREADY_SET` (the
//!   address is a source of that zone already) is success;
//! - DEL: `removeSource(zone, address)`, errors ignored (it may be gone);
//! - CHECK: `querySource(zone, address)`. The reference only fails on a
//!   D-Bus error and passes a `false` answer; here `false` fails too.
//! - GC: firewalld's sources carry nothing that tells whose they are, so
//!   there is nothing GC could tell apart: it leaves the zone alone.
//!
//! Calls are bounded by a method timeout, so a hung firewalld fails the
//! call (code 11) instead of hanging the runtime.
//!
//! Tested against the real firewalld (Debian's 1.3, nftables backend, run
//! by the test in a network and mount namespace of its own on a bus of its
//! own), beside the reference plugin: `tests/firewalld_real.rs`;
//! `tests/firewalld.rs` runs the same calls against a fake.

use std::time::Duration;

use ipnetwork::IpNetwork;
use libcni::error::ErrorCode;
use zbus::blocking::connection::Builder;
use zbus::blocking::Connection;

use crate::iptables::host_text;

pub const BUS_NAME: &str = "org.fedoraproject.FirewallD1";
pub const OBJECT_PATH: &str = "/org/fedoraproject/FirewallD1";
pub const ZONE_INTERFACE: &str = "org.fedoraproject.FirewallD1.zone";
const ZONE_ALREADY_SET: &str = "ZONE_ALREADY_SET";
const METHOD_TIMEOUT: Duration = Duration::from_secs(25);

#[derive(Debug, thiserror::Error)]
pub enum FirewalldError {
    #[error("cannot connect to the system bus: {0}")]
    Connect(#[source] Box<zbus::Error>),
    #[error("firewalld is not running: {BUS_NAME} has no owner on the system bus")]
    NotRunning,
    #[error("failed to add the address {address} to {zone} zone: {source}")]
    AddSource {
        address: String,
        zone: String,
        #[source]
        source: Box<zbus::Error>,
    },
    #[error("failed to find the address {address} in {zone} zone")]
    QuerySource {
        address: String,
        zone: String,
        #[source]
        source: Box<zbus::Error>,
    },
    #[error("the address {address} is not a source of {zone} zone")]
    NotInZone { address: String, zone: String },
}

impl FirewalldError {
    pub fn error_code(&self) -> ErrorCode {
        match self {
            FirewalldError::Connect(_) | FirewalldError::NotRunning => ErrorCode::TryAgainLater,
            FirewalldError::AddSource { source, .. }
            | FirewalldError::QuerySource { source, .. } => match source.as_ref() {
                zbus::Error::InputOutput(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                    ErrorCode::TryAgainLater
                }
                _ => ErrorCode::Internal,
            },
            FirewalldError::NotInZone { .. } => ErrorCode::Internal,
        }
    }
}

/// A connection to the system bus.
pub struct Firewalld {
    connection: Connection,
}

impl Firewalld {
    pub fn connect() -> Result<Firewalld, FirewalldError> {
        let connection = Builder::system()
            .and_then(|b| b.method_timeout(METHOD_TIMEOUT).build())
            .map_err(|e| FirewalldError::Connect(Box::new(e)))?;
        Ok(Firewalld { connection })
    }

    /// Whether firewalld's bus name has an owner (the reference asks
    /// `GetNameOwner`).
    pub fn is_running(&self) -> bool {
        match zbus::blocking::fdo::DBusProxy::new(&self.connection) {
            Ok(proxy) => match BUS_NAME.try_into() {
                Ok(name) => proxy.get_name_owner(name).is_ok(),
                Err(_) => false,
            },
            Err(_) => false,
        }
    }

    fn call(
        &self,
        method: &str,
        zone: &str,
        address: &str,
    ) -> zbus::Result<zbus::message::Message> {
        self.connection.call_method(
            Some(BUS_NAME),
            OBJECT_PATH,
            Some(ZONE_INTERFACE),
            method,
            &(zone, address),
        )
    }

    /// ADD; returns the addresses this call added (not those already set),
    /// for the undo.
    pub fn add(&self, zone: &str, ips: &[IpNetwork]) -> Result<Vec<IpNetwork>, FirewalldError> {
        let mut added = Vec::new();
        for ip in ips {
            let address = host_text(ip);
            match self.call("addSource", zone, &address) {
                Ok(_) => added.push(*ip),
                Err(e) if e.to_string().contains(ZONE_ALREADY_SET) => {
                    log::debug!("{address} is already in zone {zone}")
                }
                Err(source) => {
                    self.del(zone, &added);
                    return Err(FirewalldError::AddSource {
                        address,
                        zone: zone.to_string(),
                        source: Box::new(source),
                    });
                }
            }
        }
        Ok(added)
    }

    /// DEL: best effort, as the reference.
    pub fn del(&self, zone: &str, ips: &[IpNetwork]) {
        for ip in ips {
            let address = host_text(ip);
            if let Err(e) = self.call("removeSource", zone, &address) {
                log::debug!("removeSource({zone}, {address}): {e}");
            }
        }
    }

    pub fn check(&self, zone: &str, ips: &[IpNetwork]) -> Result<(), FirewalldError> {
        for ip in ips {
            let address = host_text(ip);
            let reply = self.call("querySource", zone, &address).map_err(|source| {
                FirewalldError::QuerySource {
                    address: address.clone(),
                    zone: zone.to_string(),
                    source: Box::new(source),
                }
            })?;
            let present: bool =
                reply
                    .body()
                    .deserialize()
                    .map_err(|source| FirewalldError::QuerySource {
                        address: address.clone(),
                        zone: zone.to_string(),
                        source: Box::new(source),
                    })?;
            if !present {
                return Err(FirewalldError::NotInZone {
                    address,
                    zone: zone.to_string(),
                });
            }
        }
        Ok(())
    }
}
