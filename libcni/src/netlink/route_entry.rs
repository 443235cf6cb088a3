//! Routes whole, as the kernel lists them: for moving or copying a route
//! from one table to another and for deleting exactly the route listed.
//!
//! [`Route`](super::Route) carries what plugins usually set (destination,
//! gateway, device, table, metric, MTU). A [`RouteEntry`] carries every
//! field of the kernel's route: its protocol, type, preferred source,
//! flags, and each attribute without a field of its own (metrics, IPv6
//! preference and expiry, multipath next hops, encapsulation) kept as
//! received. A copy made with [`RouteEntry::in_table`] is therefore the
//! same route in another table, which is what policy routing plugins (sbr)
//! need.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnetwork::IpNetwork;
use netlink_packet_core::{NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REPLACE};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::route::{IpFamily, Rtnetlink};
use super::rule::RT_TABLE_MAIN;
use super::socket::{NetlinkError, NetlinkSocket};

/// `RT_SCOPE_LINK`.
pub const SCOPE_LINK: u8 = 253;
/// `RTN_UNICAST`.
pub const ROUTE_TYPE_UNICAST: u8 = 1;
/// `RTNH_F_ONLINK`: the gateway is on the link even outside its subnets.
pub const RTNH_F_ONLINK: u32 = 4;
/// `RTPROT_BOOT`: what `ip route add` and the Go plugins set.
pub const PROTOCOL_BOOT: u8 = 3;

/// A route with every field the kernel reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteEntry {
    pub destination: IpNetwork,
    /// Source prefix of an IPv6 source-specific route (`from` in `ip -6
    /// route`).
    pub source: Option<IpNetwork>,
    pub gateway: Option<IpAddr>,
    /// `src` in `ip route`: the source address preferred for traffic the
    /// route carries.
    pub preferred_source: Option<IpAddr>,
    pub oif: Option<u32>,
    pub table: u32,
    /// `RT_SCOPE_*`: 0 universe, 253 link, 254 host.
    pub scope: u8,
    /// `RTPROT_*`: 2 kernel, 3 boot, 4 static, ...
    pub protocol: u8,
    /// `RTN_*`: 1 unicast, 2 local, 6 blackhole, ...
    pub kind: u8,
    pub tos: u8,
    /// The metric (`RTA_PRIORITY`).
    pub priority: Option<u32>,
    /// `rtm_flags`: next-hop state (`RTNH_F_LINKDOWN`, ...) and
    /// `RTM_F_CLONED` for cached exceptions.
    pub flags: u32,
    /// Attributes without a field above, as received.
    other_attributes: Vec<RouteAttribute>,
}

impl RouteEntry {
    /// A unicast route to `destination` in the main table, universe
    /// scope, protocol boot: what `ip route add <destination>` makes.
    pub fn new(destination: IpNetwork) -> RouteEntry {
        RouteEntry {
            destination,
            source: None,
            gateway: None,
            preferred_source: None,
            oif: None,
            table: RT_TABLE_MAIN,
            scope: 0,
            protocol: PROTOCOL_BOOT,
            kind: ROUTE_TYPE_UNICAST,
            tos: 0,
            priority: None,
            flags: 0,
            other_attributes: Vec::new(),
        }
    }

    /// A cached exception (a PMTU or redirect clone), not a route of a
    /// table.
    pub fn is_cloned(&self) -> bool {
        self.flags & RouteFlags::Cloned.bits() != 0
    }

    pub fn family(&self) -> IpFamily {
        if self.destination.is_ipv4() {
            IpFamily::V4
        } else {
            IpFamily::V6
        }
    }

    /// The same route in `table`. Of the flags only `onlink` stays, the
    /// one a route is made with: the kernel sets the other next-hop flags
    /// such as `linkdown` itself and refuses a new route that carries them
    /// (`EINVAL`), while a gateway outside every subnet of the link needs
    /// `onlink` to be accepted at all.
    pub fn in_table(&self, table: u32) -> RouteEntry {
        RouteEntry {
            table,
            flags: self.flags & RTNH_F_ONLINK,
            ..self.clone()
        }
    }

    /// `<destination> via <gateway> dev #<oif> table <table>`, for
    /// messages.
    pub fn describe(&self) -> String {
        let mut text = self.destination.to_string();
        if let Some(gateway) = self.gateway {
            text.push_str(&format!(" via {gateway}"));
        }
        if let Some(oif) = self.oif {
            text.push_str(&format!(" dev #{oif}"));
        }
        if let Some(source) = self.preferred_source {
            text.push_str(&format!(" src {source}"));
        }
        text.push_str(&format!(" table {}", self.table));
        text
    }
}

impl NetlinkSocket<Rtnetlink> {
    /// Every route of every table and type, of one family or both,
    /// cached exceptions excluded.
    pub fn list_route_entries(
        &mut self,
        family: Option<IpFamily>,
    ) -> Result<Vec<RouteEntry>, NetlinkError> {
        let mut msg = RouteMessage::default();
        msg.header.address_family = match family {
            Some(IpFamily::V4) => AddressFamily::Inet,
            Some(IpFamily::V6) => AddressFamily::Inet6,
            None => AddressFamily::Unspec,
        };
        let replies = self
            .request(RouteNetlinkMessage::GetRoute(msg), NLM_F_DUMP)
            .map_err(|e| e.context("list routes"))?;
        Ok(replies
            .into_iter()
            .filter_map(|reply| match reply {
                RouteNetlinkMessage::NewRoute(msg) => parse_route_entry(msg),
                _ => None,
            })
            .filter(|route| !route.is_cloned())
            .collect())
    }

    /// Adds a route; an identical one fails with `EEXIST`.
    pub fn add_route_entry(&mut self, route: &RouteEntry) -> Result<(), NetlinkError> {
        self.request_ack(
            RouteNetlinkMessage::NewRoute(route_entry_message(route)),
            NLM_F_CREATE | NLM_F_EXCL,
        )
        .map_err(|e| e.context(format!("add route {}", route.describe())))
    }

    /// Adds a route, or replaces the one with the same destination, TOS
    /// and metric in its table (`ip route replace`).
    pub fn replace_route_entry(&mut self, route: &RouteEntry) -> Result<(), NetlinkError> {
        self.request_ack(
            RouteNetlinkMessage::NewRoute(route_entry_message(route)),
            NLM_F_CREATE | NLM_F_REPLACE,
        )
        .map_err(|e| e.context(format!("replace route {}", route.describe())))
    }

    /// Deletes the route matching every field of `route`.
    pub fn delete_route_entry(&mut self, route: &RouteEntry) -> Result<(), NetlinkError> {
        self.request_ack(RouteNetlinkMessage::DelRoute(route_entry_message(route)), 0)
            .map_err(|e| e.context(format!("delete route {}", route.describe())))
    }
}

fn address_family(ip: &IpAddr) -> AddressFamily {
    match ip {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    }
}

/// The kernel refuses a prefix with host bits set.
fn network_address(network: IpNetwork) -> IpAddr {
    match network {
        IpNetwork::V4(n) => IpAddr::V4(n.network()),
        IpNetwork::V6(n) => IpAddr::V6(n.network()),
    }
}

fn route_entry_message(route: &RouteEntry) -> RouteMessage {
    let mut msg = RouteMessage::default();
    msg.header.address_family = address_family(&route.destination.ip());
    msg.header.destination_prefix_length = route.destination.prefix();
    msg.header.source_prefix_length = route.source.map_or(0, |s| s.prefix());
    msg.header.tos = route.tos;
    // The header holds 8 bits; larger ids go in RTA_TABLE alone.
    msg.header.table = u8::try_from(route.table).unwrap_or(0);
    msg.header.protocol = RouteProtocol::from(route.protocol);
    msg.header.scope = RouteScope::from(route.scope);
    msg.header.kind = RouteType::from(route.kind);
    msg.header.flags = RouteFlags::from_bits_retain(route.flags);
    msg.attributes.push(RouteAttribute::Table(route.table));
    if route.destination.prefix() > 0 {
        msg.attributes
            .push(RouteAttribute::Destination(RouteAddress::from(
                network_address(route.destination),
            )));
    }
    if let Some(source) = route.source {
        msg.attributes
            .push(RouteAttribute::Source(RouteAddress::from(network_address(
                source,
            ))));
    }
    if let Some(gateway) = route.gateway {
        msg.attributes
            .push(RouteAttribute::Gateway(RouteAddress::from(gateway)));
    }
    if let Some(preferred) = route.preferred_source {
        msg.attributes
            .push(RouteAttribute::PrefSource(RouteAddress::from(preferred)));
    }
    if let Some(oif) = route.oif {
        msg.attributes.push(RouteAttribute::Oif(oif));
    }
    if let Some(priority) = route.priority {
        msg.attributes.push(RouteAttribute::Priority(priority));
    }
    msg.attributes
        .extend(route.other_attributes.iter().cloned());
    msg
}

fn route_address(address: RouteAddress) -> Option<IpAddr> {
    match address {
        RouteAddress::Inet(ip) => Some(IpAddr::V4(ip)),
        RouteAddress::Inet6(ip) => Some(IpAddr::V6(ip)),
        _ => None,
    }
}

fn parse_route_entry(msg: RouteMessage) -> Option<RouteEntry> {
    let unspecified = match msg.header.address_family {
        AddressFamily::Inet => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        AddressFamily::Inet6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        _ => return None,
    };
    let header = msg.header;
    let mut destination = unspecified;
    let mut source = None;
    let mut route = RouteEntry {
        destination: IpNetwork::new(unspecified, 0).ok()?,
        source: None,
        gateway: None,
        preferred_source: None,
        oif: None,
        table: u32::from(header.table),
        scope: u8::from(header.scope),
        protocol: u8::from(header.protocol),
        kind: u8::from(header.kind),
        tos: header.tos,
        priority: None,
        flags: header.flags.bits(),
        other_attributes: Vec::new(),
    };
    for attribute in msg.attributes {
        match attribute {
            RouteAttribute::Destination(a) => destination = route_address(a)?,
            RouteAttribute::Source(a) => source = route_address(a),
            RouteAttribute::Gateway(a) => route.gateway = route_address(a),
            RouteAttribute::PrefSource(a) => route.preferred_source = route_address(a),
            RouteAttribute::Oif(index) => route.oif = Some(index),
            RouteAttribute::Priority(p) => route.priority = Some(p),
            RouteAttribute::Table(t) => route.table = t,
            // Statistics of the kernel's, not part of the route.
            RouteAttribute::CacheInfo(_) => {}
            other => route.other_attributes.push(other),
        }
    }
    route.destination = IpNetwork::new(destination, header.destination_prefix_length).ok()?;
    if let Some(source) = source {
        route.source = IpNetwork::new(source, header.source_prefix_length).ok();
    }
    Some(route)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::test_support::in_private_netns;
    use crate::netlink::{RouteSocket, VethPair};

    #[test]
    fn a_copy_clears_flags_and_keeps_the_rest() {
        let mut route = RouteEntry::new("10.1.0.0/16".parse().unwrap());
        route.flags = RouteFlags::Linkdown.bits();
        route.protocol = 2;
        route.scope = SCOPE_LINK;
        route.preferred_source = Some("10.1.0.5".parse().unwrap());
        let copy = route.in_table(100);
        assert_eq!(copy.table, 100);
        assert_eq!(copy.flags, 0);
        assert_eq!(copy.protocol, 2);
        assert_eq!(copy.scope, SCOPE_LINK);
        assert_eq!(copy.preferred_source, route.preferred_source);
        let msg = route_entry_message(&copy.in_table(70000));
        assert_eq!(msg.header.table, 0);
        assert!(msg.attributes.contains(&RouteAttribute::Table(70000)));
    }

    /// A kernel route copied to another table keeps its protocol, scope,
    /// source and metric, and the original deletes exactly.
    #[test]
    fn kernel_routes_copy_to_another_table() {
        in_private_netns(|| {
            let mut socket = RouteSocket::open_current().unwrap();
            socket
                .create_veth_pair(&VethPair {
                    name: "re-a",
                    peer_name: "re-b",
                    ..VethPair::default()
                })
                .unwrap();
            let link = socket.link_by_name("re-a").unwrap().unwrap();
            socket
                .add_address(link.index, "10.9.0.2/24".parse().unwrap())
                .unwrap();
            socket.set_link_up(link.index).unwrap();
            let subnet: IpNetwork = "10.9.0.0/24".parse().unwrap();
            let listed = socket.list_route_entries(Some(IpFamily::V4)).unwrap();
            let kernel_route = listed
                .iter()
                .find(|r| r.table == RT_TABLE_MAIN && r.destination == subnet)
                .expect("the kernel's prefix route")
                .clone();
            assert_eq!(kernel_route.oif, Some(link.index));
            assert_eq!(kernel_route.scope, SCOPE_LINK);
            assert_eq!(kernel_route.protocol, 2);
            assert_eq!(
                kernel_route.preferred_source,
                Some("10.9.0.2".parse().unwrap())
            );

            socket
                .replace_route_entry(&kernel_route.in_table(100))
                .unwrap();
            let mut default = RouteEntry::new("0.0.0.0/0".parse().unwrap());
            default.gateway = Some("10.9.0.1".parse().unwrap());
            default.oif = Some(link.index);
            default.table = 100;
            socket.add_route_entry(&default).unwrap();
            assert!(socket.add_route_entry(&default).unwrap_err().is_exists());

            let table: Vec<RouteEntry> = socket
                .list_route_entries(None)
                .unwrap()
                .into_iter()
                .filter(|r| r.table == 100)
                .collect();
            assert_eq!(table.len(), 2, "{table:?}");
            let copy = table.iter().find(|r| r.destination == subnet).unwrap();
            // The peer is down: the kernel marks both routes linkdown by
            // itself, the copy too although it was added without flags.
            assert_eq!(kernel_route.flags, RouteFlags::Linkdown.bits());
            assert_eq!(copy.flags, RouteFlags::Linkdown.bits());
            assert_eq!(copy.in_table(100), kernel_route.in_table(100));

            socket.delete_route_entry(&kernel_route).unwrap();
            assert!(socket
                .list_route_entries(None)
                .unwrap()
                .iter()
                .all(|r| !(r.table == RT_TABLE_MAIN && r.destination == subnet)));
            let e = socket.delete_route_entry(&kernel_route).unwrap_err();
            assert!(e.is_not_found(), "{e}");
        });
    }

    /// A route through a gateway outside the link's subnets exists only
    /// with `onlink`; its copy into another table keeps the flag (sbr,
    /// source routing and vrf move such routes), where the kernel would
    /// refuse it without.
    #[test]
    fn onlink_routes_copy_with_their_flag() {
        in_private_netns(|| {
            let mut socket = RouteSocket::open_current().unwrap();
            socket
                .create_veth_pair(&VethPair {
                    name: "ol-a",
                    peer_name: "ol-b",
                    ..VethPair::default()
                })
                .unwrap();
            let link = socket.link_by_name("ol-a").unwrap().unwrap();
            socket
                .add_address(link.index, "10.9.0.2/24".parse().unwrap())
                .unwrap();
            socket.set_link_up(link.index).unwrap();
            let mut route = RouteEntry::new("10.50.0.0/16".parse().unwrap());
            route.gateway = Some("192.168.77.1".parse().unwrap());
            route.oif = Some(link.index);
            let without = socket.add_route_entry(&route).unwrap_err();
            assert!(without.errno().is_some(), "{without}");
            route.flags = RTNH_F_ONLINK;
            socket.add_route_entry(&route).unwrap();
            let listed = socket
                .list_route_entries(Some(IpFamily::V4))
                .unwrap()
                .into_iter()
                .find(|r| r.table == RT_TABLE_MAIN && r.destination == route.destination)
                .expect("the onlink route");
            assert_ne!(listed.flags & RTNH_F_ONLINK, 0);
            socket.replace_route_entry(&listed.in_table(100)).unwrap();
            let copy = socket
                .list_route_entries(Some(IpFamily::V4))
                .unwrap()
                .into_iter()
                .find(|r| r.table == 100 && r.destination == route.destination)
                .expect("the copy in table 100");
            assert_ne!(copy.flags & RTNH_F_ONLINK, 0);
        });
    }
}
