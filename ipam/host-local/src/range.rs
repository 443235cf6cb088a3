//! One range: a subnet and the inclusive span of addresses handed out from
//! it, with the gateway the result names.
//!
//! Defaults and validation follow the reference so that the same
//! configuration gives the same addresses: the gateway and the first address
//! default to the network address + 1 (the iterator skips the gateway), the
//! last address defaults to the IPv4 broadcast − 1 or the last IPv6 address,
//! and subnets with fewer than two host bits are refused.

use std::fmt;
use std::net::IpAddr;

use ipnetwork::IpNetwork;
use libcni::IpFamily;
use serde::Deserialize;

use crate::addr;

/// A range as written in the configuration: strings, parsed and checked by
/// [`Range::from_spec`]. An empty string counts as absent, as in the
/// reference.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RangeSpec {
    #[serde(default)]
    pub subnet: Option<String>,
    #[serde(default)]
    pub range_start: Option<String>,
    #[serde(default)]
    pub range_end: Option<String>,
    #[serde(default)]
    pub gateway: Option<String>,
}

impl RangeSpec {
    pub fn new(subnet: &str) -> RangeSpec {
        RangeSpec {
            subnet: Some(subnet.to_string()),
            ..RangeSpec::default()
        }
    }

    /// True when the legacy flat form in `ipam` names a subnet.
    pub fn has_subnet(&self) -> bool {
        self.subnet.as_deref().is_some_and(|s| !s.is_empty())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    #[error("missing subnet")]
    MissingSubnet,
    #[error("invalid subnet {0:?}: expected an address and a prefix length, as 10.1.0.0/16")]
    InvalidSubnet(String),
    #[error("invalid {field} {value:?}: not an IP address")]
    InvalidAddress { field: &'static str, value: String },
    #[error("IPNet IP and Mask version mismatch")]
    MappedSubnet,
    #[error("Network {0} too small to allocate from")]
    TooSmall(String),
    #[error("Network has host bits set. For a subnet mask of length {prefix} the network address is {network}")]
    HostBitsSet { prefix: u8, network: IpAddr },
    #[error("RangeStart {start} not in network {subnet}")]
    StartNotInNetwork { start: IpAddr, subnet: String },
    #[error("RangeEnd {end} not in network {subnet}")]
    EndNotInNetwork { end: IpAddr, subnet: String },
    #[error("RangeStart {start} is after RangeEnd {end}")]
    StartAfterEnd { start: IpAddr, end: IpAddr },
    #[error("gateway {gateway} is not of the address family of subnet {subnet}")]
    GatewayFamily { gateway: IpAddr, subnet: String },
}

/// A validated range. `subnet` holds the network address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    pub subnet: IpNetwork,
    pub range_start: IpAddr,
    pub range_end: IpAddr,
    pub gateway: IpAddr,
}

fn parse_optional_ip(
    field: &'static str,
    value: &Option<String>,
) -> Result<Option<IpAddr>, RangeError> {
    match value.as_deref() {
        None | Some("") => Ok(None),
        Some(s) => s
            .parse::<IpAddr>()
            .map(|ip| Some(addr::canonical(ip)))
            .map_err(|_| RangeError::InvalidAddress {
                field,
                value: s.to_string(),
            }),
    }
}

impl Range {
    /// Parses and validates a range, filling in the defaults.
    pub fn from_spec(spec: &RangeSpec) -> Result<Range, RangeError> {
        let subnet_text = match spec.subnet.as_deref() {
            None | Some("") => return Err(RangeError::MissingSubnet),
            Some(s) => s,
        };
        if !subnet_text.contains('/') {
            return Err(RangeError::InvalidSubnet(subnet_text.to_string()));
        }
        let given: IpNetwork = subnet_text
            .parse()
            .map_err(|_| RangeError::InvalidSubnet(subnet_text.to_string()))?;
        if addr::canonical(given.ip()) != given.ip() {
            // An IPv4-mapped address with an IPv6 prefix length names
            // neither an IPv4 nor a sensible IPv6 subnet.
            return Err(RangeError::MappedSubnet);
        }
        let family = IpFamily::of(given.ip());
        let prefix = given.prefix();
        if prefix > family.bits() - 2 {
            return Err(RangeError::TooSmall(format!("{}/{}", given.ip(), prefix)));
        }
        let network = addr::from_u128(
            family,
            addr::to_u128(given.ip()) & addr::mask(family, prefix),
        );
        if network != given.ip() {
            return Err(RangeError::HostBitsSet { prefix, network });
        }
        let subnet = given;
        let subnet_name = format!("{network}/{prefix}");

        let gateway = parse_optional_ip("gateway", &spec.gateway)?.unwrap_or(addr::next(network));
        if IpFamily::of(gateway) != family {
            return Err(RangeError::GatewayFamily {
                gateway,
                subnet: subnet_name,
            });
        }

        let start = parse_optional_ip("rangeStart", &spec.range_start)?;
        let end = parse_optional_ip("rangeEnd", &spec.range_end)?;
        // As in the reference, each end is checked against the other one as
        // given: a start after the given end is "not in network".
        let within = |ip: IpAddr, lower: Option<IpAddr>, upper: Option<IpAddr>| {
            IpFamily::of(ip) == family
                && subnet.contains(ip)
                && lower.is_none_or(|l| addr::to_u128(ip) >= addr::to_u128(l))
                && upper.is_none_or(|u| addr::to_u128(ip) <= addr::to_u128(u))
        };
        if let Some(s) = start {
            if !within(s, None, end) {
                return Err(RangeError::StartNotInNetwork {
                    start: s,
                    subnet: subnet_name,
                });
            }
        }
        if let Some(e) = end {
            if !within(e, start, None) {
                return Err(RangeError::EndNotInNetwork {
                    end: e,
                    subnet: subnet_name,
                });
            }
        }
        let range_start = start.unwrap_or(addr::next(network));
        let range_end = end.unwrap_or_else(|| last_address(subnet));
        if addr::to_u128(range_start) > addr::to_u128(range_end) {
            // Only reachable with a start past the default end (the IPv4
            // broadcast address); the reference would then walk the whole
            // address space.
            return Err(RangeError::StartAfterEnd {
                start: range_start,
                end: range_end,
            });
        }
        Ok(Range {
            subnet: IpNetwork::new(network, prefix).unwrap_or(subnet),
            range_start,
            range_end,
            gateway,
        })
    }

    pub fn family(&self) -> IpFamily {
        IpFamily::of(self.range_start)
    }

    /// True when `ip` is an address this range hands out (gateway included:
    /// the iterator skips it, a request for it is refused separately).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = addr::canonical(ip);
        IpFamily::of(ip) == self.family()
            && self.subnet.contains(ip)
            && addr::to_u128(ip) >= addr::to_u128(self.range_start)
            && addr::to_u128(ip) <= addr::to_u128(self.range_end)
    }

    /// True when the two spans share an address; families never overlap.
    pub fn overlaps(&self, other: &Range) -> bool {
        self.family() == other.family()
            && (self.contains(other.range_start)
                || self.contains(other.range_end)
                || other.contains(self.range_start)
                || other.contains(self.range_end))
    }

    /// Number of addresses in the span (gateway included), saturating.
    pub fn span_len(&self) -> u128 {
        (addr::to_u128(self.range_end) - addr::to_u128(self.range_start)).saturating_add(1)
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.range_start, self.range_end)
    }
}

/// The last address handed out by default: the IPv4 broadcast address is
/// kept back, IPv6 has no broadcast.
fn last_address(subnet: IpNetwork) -> IpAddr {
    let family = IpFamily::of(subnet.ip());
    let host_bits = !addr::mask(family, subnet.prefix()) & addr::mask(family, family.bits());
    let last = addr::from_u128(family, addr::to_u128(subnet.ip()) | host_bits);
    match family {
        IpFamily::V4 => addr::prev(last),
        IpFamily::V6 => last,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn spec(subnet: &str, start: Option<&str>, end: Option<&str>, gw: Option<&str>) -> RangeSpec {
        RangeSpec {
            subnet: Some(subnet.to_string()),
            range_start: start.map(str::to_string),
            range_end: end.map(str::to_string),
            gateway: gw.map(str::to_string),
        }
    }

    fn range(subnet: &str) -> Range {
        Range::from_spec(&RangeSpec::new(subnet)).unwrap()
    }

    #[test]
    fn ipv4_defaults_clean_prefix() {
        let r = range("192.0.2.0/24");
        assert_eq!(r.subnet, "192.0.2.0/24".parse().unwrap());
        assert_eq!(r.range_start, ip("192.0.2.1"));
        assert_eq!(r.range_end, ip("192.0.2.254"));
        assert_eq!(r.gateway, ip("192.0.2.1"));
    }

    #[test]
    fn ipv4_defaults_smaller_subnet() {
        let r = range("192.0.2.0/25");
        assert_eq!(r.range_start, ip("192.0.2.1"));
        assert_eq!(r.range_end, ip("192.0.2.126"));
        assert_eq!(r.gateway, ip("192.0.2.1"));
    }

    #[test]
    fn ipv6_defaults_clean_prefix() {
        let r = range("2001:DB8:1::/64");
        assert_eq!(r.range_start, ip("2001:db8:1::1"));
        assert_eq!(r.range_end, ip("2001:db8:1::ffff:ffff:ffff:ffff"));
        assert_eq!(r.gateway, ip("2001:db8:1::1"));
    }

    #[test]
    fn host_bits_set_is_refused_with_the_network_address() {
        for (subnet, msg) in [
            ("192.0.2.12/24", "Network has host bits set. For a subnet mask of length 24 the network address is 192.0.2.0"),
            ("2001:DB8:1::24:19ff:fee1:c44a/64", "Network has host bits set. For a subnet mask of length 64 the network address is 2001:db8:1::"),
            ("2001:DB8:24:19ff::/63", "Network has host bits set. For a subnet mask of length 63 the network address is 2001:db8:24:19fe::"),
            ("192.168.127.0/23", "Network has host bits set. For a subnet mask of length 23 the network address is 192.168.126.0"),
        ] {
            let e = Range::from_spec(&RangeSpec::new(subnet)).unwrap_err();
            assert_eq!(e.to_string(), msg);
        }
    }

    #[test]
    fn too_small_networks_are_refused() {
        for (subnet, msg) in [
            (
                "192.0.2.0/31",
                "Network 192.0.2.0/31 too small to allocate from",
            ),
            (
                "192.0.2.7/32",
                "Network 192.0.2.7/32 too small to allocate from",
            ),
            (
                "2001:db8::/127",
                "Network 2001:db8::/127 too small to allocate from",
            ),
            (
                "2001:db8::/128",
                "Network 2001:db8::/128 too small to allocate from",
            ),
        ] {
            let e = Range::from_spec(&RangeSpec::new(subnet)).unwrap_err();
            assert_eq!(e.to_string(), msg);
        }
        assert!(Range::from_spec(&RangeSpec::new("192.0.2.0/30")).is_ok());
        assert!(Range::from_spec(&RangeSpec::new("2001:db8::/126")).is_ok());
    }

    #[test]
    fn invalid_start_and_end_are_refused() {
        let e = Range::from_spec(&spec("192.0.2.0/24", Some("192.0.3.0"), None, None)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "RangeStart 192.0.3.0 not in network 192.0.2.0/24"
        );
        let e = Range::from_spec(&spec("192.0.2.0/24", None, Some("192.0.4.0"), None)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "RangeEnd 192.0.4.0 not in network 192.0.2.0/24"
        );
        let e = Range::from_spec(&spec(
            "192.0.2.0/24",
            Some("192.0.2.50"),
            Some("192.0.2.40"),
            None,
        ))
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "RangeStart 192.0.2.50 not in network 192.0.2.0/24"
        );
        // A start past the default end (the broadcast address).
        let e =
            Range::from_spec(&spec("192.0.2.0/24", Some("192.0.2.255"), None, None)).unwrap_err();
        assert_eq!(
            e,
            RangeError::StartAfterEnd {
                start: ip("192.0.2.255"),
                end: ip("192.0.2.254")
            }
        );
        // Wrong family is "not in network".
        let e =
            Range::from_spec(&spec("192.0.2.0/24", Some("2001:db8::1"), None, None)).unwrap_err();
        assert!(matches!(e, RangeError::StartNotInNetwork { .. }));
    }

    #[test]
    fn malformed_fields_are_refused() {
        assert_eq!(
            Range::from_spec(&RangeSpec::default()),
            Err(RangeError::MissingSubnet)
        );
        assert_eq!(
            Range::from_spec(&RangeSpec::new("")),
            Err(RangeError::MissingSubnet)
        );
        for bad in [
            "10.0.0.0",
            "10.0.0.0/33",
            "banana/24",
            "10.0.0/24",
            "::ffff:10.0.0.0/120",
        ] {
            assert!(Range::from_spec(&RangeSpec::new(bad)).is_err(), "{bad}");
        }
        let e = Range::from_spec(&spec("10.0.0.0/24", Some("x"), None, None)).unwrap_err();
        assert_eq!(e.to_string(), "invalid rangeStart \"x\": not an IP address");
        let e =
            Range::from_spec(&spec("10.0.0.0/24", None, None, Some("2001:db8::1"))).unwrap_err();
        assert!(matches!(e, RangeError::GatewayFamily { .. }));
        // Empty strings mean "not given".
        let r = Range::from_spec(&spec("10.0.0.0/24", Some(""), Some(""), Some(""))).unwrap();
        assert_eq!(r, range("10.0.0.0/24"));
    }

    #[test]
    fn parses_all_fields() {
        let r = Range::from_spec(&spec(
            "192.0.2.0/24",
            Some("192.0.2.40"),
            Some("192.0.2.50"),
            Some("192.0.2.254"),
        ))
        .unwrap();
        assert_eq!(r.range_start, ip("192.0.2.40"));
        assert_eq!(r.range_end, ip("192.0.2.50"));
        assert_eq!(r.gateway, ip("192.0.2.254"));
        assert_eq!(r.to_string(), "192.0.2.40-192.0.2.50");
        assert_eq!(r.span_len(), 11);
    }

    #[test]
    fn start_may_be_the_network_address() {
        let r = Range::from_spec(&spec(
            "192.168.1.0/30",
            Some("192.168.1.0"),
            Some("192.168.1.3"),
            None,
        ))
        .unwrap();
        assert_eq!(r.range_start, ip("192.168.1.0"));
        assert_eq!(r.range_end, ip("192.168.1.3"));
    }

    #[test]
    fn contains_v4() {
        let r = Range::from_spec(&spec(
            "192.0.2.0/24",
            Some("192.0.2.40"),
            Some("192.0.2.50"),
            Some("192.0.2.254"),
        ))
        .unwrap();
        assert!(!r.contains(ip("192.0.3.0")));
        assert!(!r.contains(ip("192.0.2.39")));
        assert!(r.contains(ip("192.0.2.40")));
        assert!(r.contains(ip("192.0.2.50")));
        assert!(!r.contains(ip("192.0.2.51")));
        assert!(
            r.contains(ip("::ffff:192.0.2.45")),
            "mapped form is the IPv4 address"
        );
        assert!(!r.contains(ip("2001:db8::40")));
    }

    #[test]
    fn contains_v6() {
        let r = Range::from_spec(&spec(
            "2001:DB8:1::/64",
            Some("2001:db8:1::40"),
            Some("2001:db8:1::50"),
            None,
        ))
        .unwrap();
        assert!(!r.contains(ip("2001:db8:2::")));
        assert!(!r.contains(ip("2001:db8:1::39")));
        assert!(r.contains(ip("2001:db8:1::40")));
        assert!(r.contains(ip("2001:db8:1::50")));
        assert!(!r.contains(ip("2001:db8:1::51")));
    }

    #[test]
    fn overlap_detection_is_commutative() {
        let with = |subnet: &str, start: Option<&str>, end: Option<&str>| {
            Range::from_spec(&spec(subnet, start, end, None)).unwrap()
        };
        let cases = [
            (range("10.0.0.0/24"), range("10.0.1.0/24"), false),
            (range("0.0.0.0/24"), range("::/24"), false),
            (range("10.0.0.0/24"), range("10.0.0.0/24"), true),
            (range("10.0.0.0/20"), range("10.0.1.0/24"), true),
            (
                with("10.0.0.0/24", None, Some("10.0.0.127")),
                with("10.0.0.0/24", Some("10.0.0.128"), None),
                false,
            ),
            (
                with("10.0.0.0/24", None, Some("10.0.0.127")),
                with("10.0.0.0/24", Some("10.0.0.127"), None),
                true,
            ),
        ];
        for (a, b, expected) in cases {
            assert_eq!(a.overlaps(&b), expected, "{a} vs {b}");
            assert_eq!(b.overlaps(&a), expected, "{b} vs {a}");
        }
    }
}
