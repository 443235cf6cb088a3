//! The container side of an attachment: kernel settings of the interface,
//! its addresses and routes, and the wait for IPv6 duplicate address
//! detection (what the reference's `ipam.ConfigureIface` does).
//!
//! Addresses and routes go through a netlink socket bound to the container
//! namespace; only the `/proc/sys` writes need a thread inside it. ADD
//! writes the settings that do not depend on the addresses while IPAM runs
//! ([`start_sysctls`]), the IPv6 ones after ([`finish_sysctls`]).

use std::net::IpAddr;
use std::thread::{self, Scope, ScopedJoinHandle};
use std::time::{Duration, Instant};

use libcni::netlink::{self, Address, OperState, RouteSocket};
use libcni::netns::{NetNs, NetNsError};
use libcni::sysctl;
use libcni::types::v100;
use netlink_packet_route::address::AddressFlags;

use crate::error::BridgeError;

/// The reference's bound on the DAD wait.
pub const DAD_TIMEOUT: Duration = Duration::from_secs(5);
const DAD_POLL_INTERVAL: Duration = Duration::from_millis(50);

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
    in_netns(netns, netns.run(|| write_ipv6_sysctls(settings)))?
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

fn write_ipv6_sysctls(settings: InterfaceSysctls<'_>) -> Result<(), BridgeError> {
    let ifname = settings.ifname;
    for name in ["lo", ifname] {
        // `set` reads first and writes only a different value.
        sysctl::set(&format!("net/ipv6/conf/{name}/disable_ipv6"), "0")?;
    }
    sysctl::set(&format!("net/ipv6/conf/{ifname}/keep_addr_on_down"), "1")?;
    Ok(())
}

/// The first gateway of each family among the result's IPs: the default
/// next hop of routes that name none.
fn family_gateways(ips: &[v100::IpConfig]) -> (Option<IpAddr>, Option<IpAddr>) {
    let first = |v4: bool| {
        ips.iter()
            .filter_map(|ip| ip.gateway)
            .find(|gw| gw.is_ipv4() == v4)
    };
    (first(true), first(false))
}

/// Adds the result's addresses to the container interface `index` (named
/// `ifname`), sets it up and waits for its IPv6 addresses to leave DAD:
/// the reference's `ConfigureIface` up to its routes, which
/// [`add_routes`] adds.
pub fn configure_addresses(
    socket: &mut RouteSocket,
    index: u32,
    ifname: &str,
    result: &v100::Result,
) -> Result<(), BridgeError> {
    for ip in &result.ips {
        socket.add_address(index, ip.address).map_err(|e| {
            e.context(format!(
                "failed to add IP addr {} to {ifname:?}",
                ip.address
            ))
        })?;
    }
    socket
        .set_link_up(index)
        .map_err(|e| e.context(format!("failed to set {ifname:?} up")))?;
    if result.ips.iter().any(|ip| ip.address.is_ipv6()) {
        settle_addresses(socket, index, ifname, DAD_TIMEOUT)?;
    }
    Ok(())
}

/// Adds the result's routes to the container interface `index`, each
/// without a gateway going through its family's first gateway.
pub fn add_routes(
    socket: &mut RouteSocket,
    index: u32,
    ifname: &str,
    result: &v100::Result,
) -> Result<(), BridgeError> {
    let (gw4, gw6) = family_gateways(&result.ips);
    for route in &result.routes {
        let family_gateway = if route.dst.is_ipv4() { gw4 } else { gw6 };
        let mut wanted = netlink::Route::new(route.dst);
        wanted.gateway = route.gw.or(family_gateway);
        wanted.oif = Some(index);
        wanted.table = route.table;
        wanted.scope = route.scope;
        wanted.priority = (route.priority != 0).then_some(route.priority);
        wanted.mtu = (route.mtu != 0).then_some(route.mtu);
        match socket.append_route(&wanted) {
            Ok(()) => {}
            // The same route is already there: what was asked for.
            Err(e) if e.is_exists() => {}
            Err(e) => {
                return Err(e
                    .context(format!("failed to add route {} on {ifname:?}", route.dst))
                    .into())
            }
        }
    }
    Ok(())
}

/// Waits until no IPv6 address of the link is tentative. A failed DAD is
/// an error; running out of time is one only if the link is up (a link
/// without carrier never finishes DAD, and the reference accepts that).
pub fn settle_addresses(
    socket: &mut RouteSocket,
    index: u32,
    ifname: &str,
    timeout: Duration,
) -> Result<(), BridgeError> {
    let deadline = Instant::now() + timeout;
    loop {
        let addresses = socket.list_addresses(Some(index))?;
        if let Some(failed) = addresses
            .iter()
            .find(|a| has_flag(a, AddressFlags::Dadfailed))
        {
            return Err(BridgeError::DadFailed {
                address: failed.address.to_string(),
                ifname: ifname.to_string(),
            });
        }
        let tentative = addresses
            .iter()
            .any(|a| a.address.is_ipv6() && a.is_tentative());
        if !tentative {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let up = socket
                .link_by_index(index)?
                .is_some_and(|l| l.oper_state == OperState::Up);
            if up {
                return Err(BridgeError::DadTimeout {
                    ifname: ifname.to_string(),
                    seconds: timeout.as_secs(),
                });
            }
            log::info!("{ifname}: IPv6 addresses still tentative, link not up; not waiting");
            return Ok(());
        }
        thread::sleep(DAD_POLL_INTERVAL);
    }
}

fn has_flag(address: &Address, flag: AddressFlags) -> bool {
    address.flags & flag.bits() != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(address: &str, gateway: Option<&str>) -> v100::IpConfig {
        v100::IpConfig {
            interface: Some(2),
            address: address.parse().unwrap(),
            gateway: gateway.map(|g| g.parse().unwrap()),
        }
    }

    #[test]
    fn first_gateway_of_each_family() {
        let ips = [
            ip("10.0.0.2/24", None),
            ip("2001:db8::2/64", Some("2001:db8::1")),
            ip("10.1.0.2/24", Some("10.1.0.1")),
            ip("10.2.0.2/24", Some("10.2.0.1")),
        ];
        let (v4, v6) = family_gateways(&ips);
        assert_eq!(v4, Some("10.1.0.1".parse().unwrap()));
        assert_eq!(v6, Some("2001:db8::1".parse().unwrap()));
        assert_eq!(family_gateways(&[]), (None, None));
    }
}
