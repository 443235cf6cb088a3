//! The kernel settings of the container interface. ADD writes those that
//! do not depend on the addresses while IPAM runs ([`start_sysctls`]), the
//! IPv6 ones after ([`finish_sysctls`]); only these `/proc/sys` writes need
//! a thread inside the container namespace.
//!
//! The addresses and routes are [`libcni::iface`]'s steps of the
//! reference's `ipam.ConfigureIface`, which ADD calls in its own order
//! (routes last, see `add.rs`).

use std::thread::{Scope, ScopedJoinHandle};

use libcni::iface;
use libcni::netns::{NetNs, NetNsError};
use libcni::sysctl;

use crate::error::BridgeError;

/// Settings of the container interface, written inside its namespace.
#[derive(Debug, Clone, Copy)]
pub struct InterfaceSysctls<'a> {
    pub ifname: &'a str,
    pub enable_dad: bool,
    /// IPv6 addresses follow, so IPv6 must be on and addresses must survive
    /// the link going down.
    pub has_ipv6: bool,
}

/// Starts writing the settings that do not depend on the addresses (DAD
/// and ARP notify, best effort as in the reference) on a thread inside
/// `netns`, so that the caller can get the addresses meanwhile;
/// [`finish_sysctls`] adds the IPv6 ones. Together they write the
/// reference's settings, in its order.
pub fn start_sysctls<'scope, 'env>(
    scope: &'scope Scope<'scope, 'env>,
    netns: &'scope NetNs,
    ifname: &'scope str,
    enable_dad: bool,
) -> Result<EarlySysctls<'scope>, BridgeError> {
    let worker = in_netns(
        netns,
        netns.spawn_scoped(scope, move || write_neighbour_sysctls(ifname, enable_dad)),
    )?;
    Ok(EarlySysctls { netns, worker })
}

/// The sysctls [`start_sysctls`] is writing.
pub struct EarlySysctls<'scope> {
    netns: &'scope NetNs,
    worker: ScopedJoinHandle<'scope, Result<(), NetNsError>>,
}

impl EarlySysctls<'_> {
    /// Waits for the early settings: an error here is about the thread or
    /// the namespace, never a setting.
    pub fn wait(self) -> Result<(), BridgeError> {
        in_netns(self.netns, self.netns.join(self.worker))
    }
}

/// Completes [`start_sysctls`] once the addresses are known: IPv6 on, and
/// addresses kept when the link goes down; failing that is an error.
/// Without IPv6 addresses there is nothing to write and no visit.
pub fn finish_sysctls(netns: &NetNs, settings: InterfaceSysctls<'_>) -> Result<(), BridgeError> {
    if !settings.has_ipv6 {
        return Ok(());
    }
    Ok(in_netns(
        netns,
        netns.run(|| iface::enable_ipv6(settings.ifname)),
    )??)
}

fn in_netns<T>(netns: &NetNs, outcome: Result<T, NetNsError>) -> Result<T, BridgeError> {
    outcome.map_err(|source| BridgeError::NetNs {
        path: netns.path().display().to_string(),
        source,
    })
}

/// DAD and ARP notify, best effort as in the reference.
fn write_neighbour_sysctls(ifname: &str, enable_dad: bool) {
    let best_effort = |path: String, value: &str| {
        if let Err(e) = sysctl::set(&path, value) {
            log::debug!("{e}");
        }
    };
    if enable_dad {
        best_effort(format!("net/ipv6/conf/{ifname}/enhanced_dad"), "1");
        best_effort(format!("net/ipv6/conf/{ifname}/accept_dad"), "1");
    } else {
        best_effort(format!("net/ipv6/conf/{ifname}/accept_dad"), "0");
    }
    best_effort(format!("net/ipv4/conf/{ifname}/arp_notify"), "1");
}
