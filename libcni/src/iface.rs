//! The container interface of an attachment, from a 1.x result: what the
//! reference's `ipam.ConfigureIface` does when ADD puts the addresses and
//! routes on it ([`configure_iface`], or its steps one at a time), and
//! what its CHECK helpers verify later ([`check_interface_ips`],
//! [`check_routes`], [`check_mac`]).
//!
//! Addresses, link state and routes go through a netlink socket bound to
//! the container namespace; the `/proc/sys` writes need a thread inside it
//! ([`NetNs::run`]), started only when there is something to write.
//!
//! Differences from the reference, all in the direction of doing less by
//! accident: the DAD wait happens whenever an IPv6 address is added (the
//! reference waits only when an IPv6 gateway is known, so a gateway-less
//! IPv6 address could still be tentative when ADD returns), and CHECK
//! looks at the result's IPs of this interface only (the reference checks
//! every IP of a chained result against one interface).

use std::net::IpAddr;
use std::thread;
use std::time::{Duration, Instant};

use ipnetwork::IpNetwork;
use netlink_packet_route::address::AddressFlags;

use crate::error::{CniError, ErrorCode, ToCniError};
use crate::hwaddr;
use crate::netlink::{IpFamily, LinkInfo, NetlinkError, OperState, Route, RouteSocket};
use crate::netns::{NetNs, NetNsError};
use crate::sysctl::{self, SysctlError};
use crate::types::{v100, Route as ResultRoute};

/// The reference's bound on the wait for IPv6 duplicate address detection.
pub const DAD_TIMEOUT: Duration = Duration::from_secs(5);
const DAD_POLL_INTERVAL: Duration = Duration::from_millis(50);
/// `RT_TABLE_MAIN`, where routes without a table go.
pub const MAIN_TABLE: u32 = 254;

#[derive(Debug, thiserror::Error)]
pub enum IfaceError {
    #[error("no interfaces to configure")]
    NoInterfaces,
    #[error("failed to add IP addr {address} to {ifname:?}: invalid interface index")]
    InvalidInterfaceIndex { address: IpNetwork, ifname: String },
    #[error("failed to lookup {0:?}: no such link in the container")]
    LinkNotFound(String),
    #[error("failed to add IP addr {address} to {ifname:?}: {source}")]
    AddAddress {
        address: IpNetwork,
        ifname: String,
        #[source]
        source: NetlinkError,
    },
    #[error("failed to set {ifname:?} up: {source}")]
    SetUp {
        ifname: String,
        #[source]
        source: NetlinkError,
    },
    #[error("failed to add route '{destination} via {gateway} dev {ifname}': {source}")]
    AddRoute {
        destination: IpNetwork,
        /// The gateway as text ("<nil>" for none, as the reference prints).
        gateway: String,
        ifname: String,
        #[source]
        source: NetlinkError,
    },
    #[error("IPv6 duplicate address detection failed for {address} on {ifname:?}")]
    DadFailed { address: IpNetwork, ifname: String },
    #[error("IPv6 addresses on {ifname:?} still tentative after {seconds} s")]
    DadTimeout { ifname: String, seconds: u64 },
    #[error("failed to enable IPv6 on {ifname:?}: {source}")]
    Ipv6Sysctl {
        ifname: String,
        #[source]
        source: SysctlError,
    },
    #[error("failed to enter netns {path:?}: {source}")]
    NetNs {
        path: String,
        #[source]
        source: NetNsError,
    },
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
    // CHECK's findings, worded as in the reference.
    #[error("Failed to match addr {address} on interface {ifname}")]
    AddressMissing { address: IpNetwork, ifname: String },
    #[error("Failed to find a route to {prefix} for interface {ifname}")]
    NoRouteToPrefix { prefix: IpNetwork, ifname: String },
    #[error("Expected Route {destination}{} not found in routing table", .gateway.map(|g| format!(" via {g}")).unwrap_or_default())]
    RouteMissing {
        destination: IpNetwork,
        gateway: Option<IpAddr>,
    },
    #[error("Interface {ifname} MAC {expected} doesn't match the MAC found: {found}")]
    MacMismatch {
        ifname: String,
        expected: String,
        found: String,
    },
}

impl IfaceError {
    /// A finding of CHECK (the system differs from the result), as opposed
    /// to a failure to look.
    pub fn is_check_finding(&self) -> bool {
        matches!(
            self,
            IfaceError::AddressMissing { .. }
                | IfaceError::NoRouteToPrefix { .. }
                | IfaceError::RouteMissing { .. }
                | IfaceError::MacMismatch { .. }
        )
    }
}

impl ToCniError for IfaceError {
    fn to_cni_error(&self) -> CniError {
        let code = match self {
            IfaceError::NetNs { source, .. } => source.error_code(),
            IfaceError::NoInterfaces
            | IfaceError::InvalidInterfaceIndex { .. }
            | IfaceError::LinkNotFound(_)
            | IfaceError::AddAddress { .. }
            | IfaceError::SetUp { .. }
            | IfaceError::AddRoute { .. }
            | IfaceError::DadFailed { .. }
            | IfaceError::DadTimeout { .. }
            | IfaceError::Ipv6Sysctl { .. }
            | IfaceError::Netlink(_)
            | IfaceError::AddressMissing { .. }
            | IfaceError::NoRouteToPrefix { .. }
            | IfaceError::RouteMissing { .. }
            | IfaceError::MacMismatch { .. } => ErrorCode::Internal,
        };
        CniError::new(code, self.to_string())
    }
}

/// Kernel settings [`configure_iface`] writes besides the IPv6 ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Announce {
    /// `net/ipv4/conf/<if>/arp_notify=1` and
    /// `net/ipv6/conf/<if>/ndisc_notify=1`, best effort: neighbours learn
    /// the new MAC at once (macvlan and ipvlan set them, vlan does not).
    pub notify: bool,
}

/// The result's IPs that belong to `ifname`: those whose `interface`
/// index names it. An index past the list, or naming another interface,
/// is an error, as in the reference; IPs without an index are skipped.
pub fn interface_ips<'r>(
    result: &'r v100::Result,
    ifname: &str,
) -> Result<Vec<&'r v100::IpConfig>, IfaceError> {
    let mut mine = Vec::new();
    for ip in &result.ips {
        let Some(index) = ip.interface else { continue };
        match result.interfaces.get(index) {
            Some(iface) if iface.name == ifname => mine.push(ip),
            _ => {
                return Err(IfaceError::InvalidInterfaceIndex {
                    address: ip.address,
                    ifname: ifname.to_string(),
                })
            }
        }
    }
    Ok(mine)
}

/// Puts the result on the container interface `ifname`: IPv6 enabled when
/// an IPv6 address comes (`disable_ipv6=0` on `lo` and the interface,
/// `keep_addr_on_down=1`), the notify settings of `announce`, the
/// addresses, the link up, the wait for DAD, then the routes, each
/// without a gateway going through its family's first gateway. Returns
/// the link.
///
/// A plugin that must order other work between these steps (bridge puts
/// its gateway and masquerade between the addresses and the routes) calls
/// them itself: [`enable_ipv6`] inside the namespace,
/// [`configure_addresses`], [`add_routes`].
pub fn configure_iface(
    netns: &NetNs,
    socket: &mut RouteSocket,
    ifname: &str,
    result: &v100::Result,
    announce: Announce,
) -> Result<LinkInfo, IfaceError> {
    if result.interfaces.is_empty() {
        return Err(IfaceError::NoInterfaces);
    }
    let link = socket
        .link_by_name(ifname)?
        .ok_or_else(|| IfaceError::LinkNotFound(ifname.to_string()))?;
    let ips = interface_ips(result, ifname)?;
    let has_ipv6 = has_ipv6(&ips);
    if has_ipv6 || announce.notify {
        netns
            .run(|| write_sysctls(ifname, has_ipv6, announce))
            .map_err(|source| IfaceError::NetNs {
                path: netns.path().display().to_string(),
                source,
            })??;
    }
    configure_addresses(socket, link.index, ifname, &ips)?;
    log::info!(
        "addresses {} on {ifname}",
        crate::logging::joined(ips.iter().map(|ip| ip.address))
    );
    add_routes(socket, link.index, ifname, &result.routes, &ips)?;
    Ok(link)
}

fn has_ipv6(ips: &[&v100::IpConfig]) -> bool {
    ips.iter().any(|ip| ip.address.is_ipv6())
}

/// Adds `ips` to link `index` (named `ifname`), sets it up and, when one of
/// them is IPv6, waits for DAD ([`settle_addresses`]): the part of
/// [`configure_iface`] between the sysctls and the routes. IPv6 addresses
/// need [`enable_ipv6`] first.
pub fn configure_addresses(
    socket: &mut RouteSocket,
    index: u32,
    ifname: &str,
    ips: &[&v100::IpConfig],
) -> Result<(), IfaceError> {
    add_addresses(socket, index, ifname, ips)?;
    socket
        .set_link_up(index)
        .map_err(|source| IfaceError::SetUp {
            ifname: ifname.to_string(),
            source,
        })?;
    if has_ipv6(ips) {
        settle_addresses(socket, index, ifname, DAD_TIMEOUT)?;
    }
    Ok(())
}

/// Adds `ips` to link `index` (named `ifname`), and nothing else: an
/// address that is already there is an error, as in the reference.
pub fn add_addresses(
    socket: &mut RouteSocket,
    index: u32,
    ifname: &str,
    ips: &[&v100::IpConfig],
) -> Result<(), IfaceError> {
    for ip in ips {
        socket
            .add_address(index, ip.address)
            .map_err(|source| IfaceError::AddAddress {
                address: ip.address,
                ifname: ifname.to_string(),
                source,
            })?;
    }
    Ok(())
}

/// Adds `routes` through link `index` (named `ifname`), each without a
/// gateway going through the first gateway of its family among `ips`. A
/// route that is already there is what was asked for.
pub fn add_routes(
    socket: &mut RouteSocket,
    index: u32,
    ifname: &str,
    routes: &[ResultRoute],
    ips: &[&v100::IpConfig],
) -> Result<(), IfaceError> {
    let gateway_of = |family: crate::IpFamily| {
        ips.iter()
            .filter_map(|ip| ip.gateway)
            .find(|gw| crate::IpFamily::of(*gw) == family)
    };
    let mut added = Vec::with_capacity(routes.len());
    for route in routes {
        let mut wanted = Route::new(route.dst);
        wanted.gateway = route
            .gw
            .or_else(|| gateway_of(crate::IpFamily::of_network(&route.dst)));
        wanted.oif = Some(index);
        wanted.table = route.table;
        wanted.scope = route.scope;
        wanted.priority = (route.priority != 0).then_some(route.priority);
        wanted.mtu = (route.mtu != 0).then_some(route.mtu);
        let text = crate::logging::RouteText(&ResultRoute {
            gw: wanted.gateway,
            ..route.clone()
        })
        .to_string();
        match socket.append_route(&wanted) {
            Ok(()) => added.push(text),
            Err(e) if e.is_exists() => added.push(format!("{text} (already there)")),
            Err(source) => {
                return Err(IfaceError::AddRoute {
                    destination: route.dst,
                    gateway: wanted
                        .gateway
                        .map_or_else(|| "<nil>".to_string(), |g| g.to_string()),
                    ifname: ifname.to_string(),
                    source,
                })
            }
        }
    }
    if !added.is_empty() {
        log::info!("routes through {ifname}: {}", added.join(", "));
    }
    Ok(())
}

/// Runs inside the container namespace.
fn write_sysctls(ifname: &str, has_ipv6: bool, announce: Announce) -> Result<(), IfaceError> {
    if announce.notify {
        for path in [
            format!("net/ipv4/conf/{ifname}/arp_notify"),
            format!("net/ipv6/conf/{ifname}/ndisc_notify"),
        ] {
            // Best effort, as in the reference: a kernel without IPv6 has
            // no ndisc_notify, and nothing depends on these.
            if let Err(e) = sysctl::set(&path, "1") {
                log::debug!("{e}");
            }
        }
    }
    if has_ipv6 {
        enable_ipv6(ifname)?;
    }
    Ok(())
}

/// IPv6 on for `lo` and `ifname` (`disable_ipv6=0`), and `ifname`'s
/// addresses kept when it goes down (`keep_addr_on_down=1`): what IPv6
/// addresses need before [`configure_addresses`]. Runs inside the
/// container namespace ([`NetNs::run`]).
pub fn enable_ipv6(ifname: &str) -> Result<(), IfaceError> {
    let failed = |source| IfaceError::Ipv6Sysctl {
        ifname: ifname.to_string(),
        source,
    };
    for name in ["lo", ifname] {
        // `set` reads first and writes only a different value.
        sysctl::set(&format!("net/ipv6/conf/{name}/disable_ipv6"), "0").map_err(failed)?;
    }
    sysctl::set(&format!("net/ipv6/conf/{ifname}/keep_addr_on_down"), "1").map_err(failed)?;
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
) -> Result<(), IfaceError> {
    let deadline = Instant::now() + timeout;
    loop {
        let addresses = socket.list_addresses(Some(index))?;
        if let Some(failed) = addresses
            .iter()
            .find(|a| a.flags & AddressFlags::Dadfailed.bits() != 0)
        {
            return Err(IfaceError::DadFailed {
                address: failed.address,
                ifname: ifname.to_string(),
            });
        }
        if !addresses
            .iter()
            .any(|a| a.address.is_ipv6() && a.is_tentative())
        {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let up = socket
                .link_by_index(index)?
                .is_some_and(|l| l.oper_state == OperState::Up);
            if up {
                return Err(IfaceError::DadTimeout {
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

fn network(net: IpNetwork) -> Option<IpNetwork> {
    IpNetwork::new(net.network(), net.prefix()).ok()
}

/// The tables CHECK looks for a result's routes in: main, and every table
/// a policy rule sends traffic from a given source to. A meta plugin chained
/// after the interface's plugin (sbr, or rdma-sriov's rails) moves the
/// interface's routes into a table of their own, reached by a rule `from
/// <address>`; the reference looks in main only, so its CHECK of such a
/// chain always fails.
fn routed_tables(socket: &mut RouteSocket) -> Result<Vec<u32>, IfaceError> {
    let mut tables = vec![MAIN_TABLE];
    for rule in socket.list_rules(None)? {
        if rule.source.is_some() && !tables.contains(&rule.table) {
            tables.push(rule.table);
        }
    }
    Ok(tables)
}

/// CHECK: every IP the result gives `link` is on it, and there is a route
/// to its prefix (in main, or in a table a source rule leads to).
pub fn check_interface_ips(
    socket: &mut RouteSocket,
    link: &LinkInfo,
    result: &v100::Result,
) -> Result<(), IfaceError> {
    let ips = interface_ips(result, &link.name)?;
    check_addresses(socket, link, &ips)
}

/// CHECK of [`check_interface_ips`] for a list of IPs the caller chose:
/// each is on `link`, with a route to its prefix.
pub fn check_addresses(
    socket: &mut RouteSocket,
    link: &LinkInfo,
    ips: &[&v100::IpConfig],
) -> Result<(), IfaceError> {
    if ips.is_empty() {
        return Ok(());
    }
    let addresses: Vec<IpNetwork> = socket
        .list_addresses(Some(link.index))?
        .into_iter()
        .map(|a| a.address)
        .collect();
    let routes = socket.list_routes(None)?;
    let tables = routed_tables(socket)?;
    for ip in ips {
        if !addresses.contains(&ip.address) {
            return Err(IfaceError::AddressMissing {
                address: ip.address,
                ifname: link.name.clone(),
            });
        }
        let prefix = network(ip.address);
        let routed = routes.iter().any(|r| {
            r.table.is_some_and(|t| tables.contains(&t)) && network(r.destination) == prefix
        });
        if !routed {
            return Err(IfaceError::NoRouteToPrefix {
                prefix: prefix.unwrap_or(ip.address),
                ifname: link.name.clone(),
            });
        }
    }
    Ok(())
}

/// CHECK: `link` has the MAC the result gave its interface, if it gave one
/// (compared without regard to case).
pub fn check_mac(expected: &v100::Interface, link: &LinkInfo) -> Result<(), IfaceError> {
    let found = link.mac_string();
    if expected.mac.is_empty() || expected.mac.eq_ignore_ascii_case(&found) {
        return Ok(());
    }
    Err(IfaceError::MacMismatch {
        ifname: expected.name.clone(),
        expected: expected.mac.clone(),
        found,
    })
}

/// CHECK: every route of the result is in its table (when it names none:
/// main, or a table a source rule leads to), with its gateway when it has
/// one; a default route matches any default route of its family, as in
/// the reference.
pub fn check_routes(socket: &mut RouteSocket, wanted: &[ResultRoute]) -> Result<(), IfaceError> {
    if wanted.is_empty() {
        return Ok(());
    }
    let v4 = socket.list_routes(Some(IpFamily::V4))?;
    let v6 = socket.list_routes(Some(IpFamily::V6))?;
    let tables = routed_tables(socket)?;
    for route in wanted {
        let table: &[Route] = if route.dst.is_ipv4() { &v4 } else { &v6 };
        let in_table = |t: u32| match route.table {
            Some(named) => t == named,
            None => tables.contains(&t),
        };
        let default = route.dst.prefix() == 0;
        let found = table.iter().any(|r| {
            r.table.is_some_and(in_table)
                && network(r.destination) == network(route.dst)
                && (default || route.gw.is_none() || r.gateway == route.gw)
        });
        if !found {
            return Err(IfaceError::RouteMissing {
                destination: route.dst,
                gateway: route.gw,
            });
        }
    }
    Ok(())
}

/// The result's entry for `ifname` in the sandbox `netns`, with its index:
/// what CHECK compares the container interface with.
pub fn sandbox_interface<'r>(
    result: &'r v100::Result,
    ifname: &str,
    netns: &str,
) -> Option<(usize, &'r v100::Interface)> {
    result
        .interfaces
        .iter()
        .enumerate()
        .find(|(_, i)| i.name == ifname && i.sandbox == netns)
}

/// Why a MAC address cannot be a container interface's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MacError {
    #[error("not a 6-byte MAC address (aa:bb:cc:dd:ee:ff, aa-bb-cc-dd-ee-ff or aabb.ccdd.eeff)")]
    Syntax,
    #[error("a multicast address cannot be an interface's own")]
    Multicast,
    #[error("the all-zero address cannot be an interface's own")]
    Zero,
}

/// A 6-byte Ethernet address in any of the forms Go's `net.ParseMAC`
/// takes for 6 bytes ([`hwaddr::parse_ethernet`]), which must be unicast and
/// non-zero to be given to an interface.
pub fn parse_unicast_mac(text: &str) -> Result<[u8; 6], MacError> {
    let mac = hwaddr::parse_ethernet(text).ok_or(MacError::Syntax)?;
    if mac[0] & 1 == 1 {
        return Err(MacError::Multicast);
    }
    if mac == [0; 6] {
        return Err(MacError::Zero);
    }
    Ok(mac)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::test_support::in_private_netns;
    use crate::netlink::VethPair;

    fn ip(interface: Option<usize>, address: &str, gateway: Option<&str>) -> v100::IpConfig {
        v100::IpConfig {
            interface,
            address: address.parse().unwrap(),
            gateway: gateway.map(|g| g.parse().unwrap()),
        }
    }

    fn result_for(ifname: &str) -> v100::Result {
        let mut result = v100::Result::new();
        result.interfaces = vec![v100::Interface {
            name: ifname.to_string(),
            ..v100::Interface::default()
        }];
        result
    }

    #[test]
    fn macs_in_go_forms() {
        let want = Ok([0xc2, 0x11, 0x22, 0x33, 0x44, 0x55]);
        assert_eq!(parse_unicast_mac("c2:11:22:33:44:55"), want);
        assert_eq!(parse_unicast_mac("C2-11-22-33-44-55"), want);
        assert_eq!(parse_unicast_mac("c211.2233.4455"), want);
        for bad in [
            "",
            "c2:11:22:33:44",
            "c2:11:22:33:44:55:66",
            "c2:11-22:33:44:55",
            "c2:11:22:33:44:5g",
            "c2:11:22:33:44:+5",
            "c211.2233.44555",
            "c21.12233.4455",
            // Go's 8- and 20-byte forms are addresses, but not Ethernet's.
            "c2:11:22:33:44:55:66:77",
            "c211.2233.4455.6677",
        ] {
            assert_eq!(parse_unicast_mac(bad), Err(MacError::Syntax), "{bad:?}");
        }
        assert_eq!(
            parse_unicast_mac("01:00:5e:00:00:01"),
            Err(MacError::Multicast)
        );
        assert_eq!(parse_unicast_mac("00:00:00:00:00:00"), Err(MacError::Zero));
    }

    #[test]
    fn ips_of_an_interface_follow_their_index() {
        let mut result = result_for("net1");
        result.interfaces.push(v100::Interface {
            name: "other".into(),
            ..v100::Interface::default()
        });
        result.ips = vec![
            ip(Some(0), "10.0.0.2/24", None),
            ip(None, "10.9.0.2/24", None),
        ];
        let mine = interface_ips(&result, "net1").unwrap();
        assert_eq!(mine.len(), 1);
        assert_eq!(mine[0].address.to_string(), "10.0.0.2/24");
        result.ips.push(ip(Some(1), "10.1.0.2/24", None));
        assert!(matches!(
            interface_ips(&result, "net1"),
            Err(IfaceError::InvalidInterfaceIndex { .. })
        ));
        result.ips.pop();
        result.ips.push(ip(Some(7), "10.1.0.2/24", None));
        assert!(interface_ips(&result, "net1").is_err());
    }

    /// What sbr leaves after the interface's plugin: the interface's routes
    /// moved from main into a table of their own, reached by a rule from
    /// its address. CHECK finds them there, and only through the rule.
    #[test]
    fn check_follows_routes_into_a_source_rule_table() {
        in_private_netns(|| {
            let netns = NetNs::current_thread().unwrap();
            let mut socket = RouteSocket::open_current().unwrap();
            socket
                .create_veth_pair(&VethPair {
                    name: "sr-pod",
                    peer_name: "sr-peer",
                    ..VethPair::default()
                })
                .unwrap();
            socket.set_link_up("sr-peer").unwrap();
            let mut result = result_for("sr-pod");
            result.ips = vec![ip(Some(0), "10.6.0.2/24", Some("10.6.0.1"))];
            result.routes = vec![ResultRoute::new(
                "10.16.0.0/16".parse().unwrap(),
                Some("10.6.0.1".parse().unwrap()),
            )];
            let link = configure_iface(
                &netns,
                &mut socket,
                "sr-pod",
                &result,
                Announce { notify: false },
            )
            .unwrap();
            let moved: Vec<Route> = socket
                .list_routes(Some(IpFamily::V4))
                .unwrap()
                .into_iter()
                .filter(|r| r.table == Some(MAIN_TABLE) && r.oif == Some(link.index))
                .collect();
            assert_eq!(moved.len(), 2, "{moved:?}");
            for route in &moved {
                socket
                    .add_route(&Route {
                        table: Some(100),
                        ..route.clone()
                    })
                    .unwrap();
                socket.del_route(route).unwrap();
            }
            assert!(matches!(
                check_interface_ips(&mut socket, &link, &result),
                Err(IfaceError::NoRouteToPrefix { .. })
            ));
            assert!(check_routes(&mut socket, &result.routes).is_err());

            socket
                .add_rule(&crate::netlink::rule::RuleSpec::from_source(
                    "10.6.0.2/32".parse().unwrap(),
                    100,
                ))
                .unwrap();
            check_interface_ips(&mut socket, &link, &result).unwrap();
            check_routes(&mut socket, &result.routes).unwrap();
        });
    }

    /// Configures a veth end from a result in a private namespace, then
    /// CHECK passes; each kind of damage is found.
    #[test]
    fn configure_then_check_finds_what_is_missing() {
        in_private_netns(|| {
            let netns = NetNs::current_thread().unwrap();
            let mut socket = RouteSocket::open_current().unwrap();
            socket
                .create_veth_pair(&VethPair {
                    name: "if-pod",
                    peer_name: "if-peer",
                    ..VethPair::default()
                })
                .unwrap();
            socket.set_link_up("if-peer").unwrap();
            let mut result = result_for("if-pod");
            result.ips = vec![
                ip(Some(0), "10.7.0.2/24", Some("10.7.0.1")),
                ip(Some(0), "fd00:7::2/64", Some("fd00:7::1")),
            ];
            result.routes = vec![
                ResultRoute::new("0.0.0.0/0".parse().unwrap(), None),
                ResultRoute::new(
                    "10.8.0.0/16".parse().unwrap(),
                    Some("10.7.0.9".parse().unwrap()),
                ),
                ResultRoute::new("::/0".parse().unwrap(), None),
            ];
            let link = configure_iface(
                &netns,
                &mut socket,
                "if-pod",
                &result,
                Announce { notify: true },
            )
            .unwrap();
            assert!(socket.link_by_index(link.index).unwrap().unwrap().up);
            let arp_notify = netns
                .run(|| sysctl::get("net/ipv4/conf/if-pod/arp_notify"))
                .unwrap()
                .unwrap();
            assert_eq!(arp_notify, "1");
            let routes = socket.list_routes(Some(IpFamily::V4)).unwrap();
            let default = routes
                .iter()
                .find(|r| r.destination.prefix() == 0 && r.table == Some(MAIN_TABLE))
                .expect("default route");
            assert_eq!(default.gateway, Some("10.7.0.1".parse().unwrap()));
            assert!(socket
                .list_addresses(Some(link.index))
                .unwrap()
                .iter()
                .all(|a| !a.is_tentative()));

            check_interface_ips(&mut socket, &link, &result).unwrap();
            check_routes(&mut socket, &result.routes).unwrap();

            // The MAC in either case, or none, passes; another is reported.
            let mut entry = result.interfaces[0].clone();
            for mac in [link.mac_string().to_uppercase(), String::new()] {
                entry.mac = mac;
                check_mac(&entry, &link).unwrap();
            }
            entry.mac = "02:00:00:00:00:01".into();
            let error = check_mac(&entry, &link).unwrap_err();
            assert!(error.is_check_finding());
            assert_eq!(
                error.to_string(),
                format!(
                    "Interface if-pod MAC 02:00:00:00:00:01 doesn't match the MAC found: {}",
                    link.mac_string()
                )
            );

            let mut missing = result.clone();
            missing.routes.push(ResultRoute::new(
                "10.9.0.0/16".parse().unwrap(),
                Some("10.7.0.1".parse().unwrap()),
            ));
            let error = check_routes(&mut socket, &missing.routes).unwrap_err();
            assert_eq!(
                error.to_string(),
                "Expected Route 10.9.0.0/16 via 10.7.0.1 not found in routing table"
            );
            // The route exists, with another gateway.
            let mut wrong_gw = result.clone();
            wrong_gw.routes = vec![ResultRoute::new(
                "10.8.0.0/16".parse().unwrap(),
                Some("10.7.0.8".parse().unwrap()),
            )];
            assert!(check_routes(&mut socket, &wrong_gw.routes).is_err());

            socket
                .del_address(link.index, "10.7.0.2/24".parse().unwrap())
                .unwrap();
            let error = check_interface_ips(&mut socket, &link, &result).unwrap_err();
            assert!(error.is_check_finding());
            assert_eq!(
                error.to_string(),
                "Failed to match addr 10.7.0.2/24 on interface if-pod"
            );
        });
    }

    #[test]
    fn configure_refuses_results_it_cannot_place() {
        in_private_netns(|| {
            let netns = NetNs::current_thread().unwrap();
            let mut socket = RouteSocket::open_current().unwrap();
            let empty = v100::Result::new();
            assert!(matches!(
                configure_iface(&netns, &mut socket, "lo", &empty, Announce::default()),
                Err(IfaceError::NoInterfaces)
            ));
            assert!(matches!(
                configure_iface(
                    &netns,
                    &mut socket,
                    "if-none",
                    &result_for("if-none"),
                    Announce::default()
                ),
                Err(IfaceError::LinkNotFound(_))
            ));
        });
    }
}
