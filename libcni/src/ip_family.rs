//! The IP address family, one type for the whole suite: netlink dumps and
//! rules, conntrack, the firewall backends and IPAM all say "IPv4 or IPv6"
//! with it.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnetwork::IpNetwork;

/// IPv4 or IPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IpFamily {
    V4,
    V6,
}

impl IpFamily {
    /// Both families, IPv4 first (the order the plugins work in).
    pub const ALL: [IpFamily; 2] = [IpFamily::V4, IpFamily::V6];

    pub fn of(ip: IpAddr) -> IpFamily {
        match ip {
            IpAddr::V4(_) => IpFamily::V4,
            IpAddr::V6(_) => IpFamily::V6,
        }
    }

    pub fn of_network(network: &IpNetwork) -> IpFamily {
        IpFamily::of(network.ip())
    }

    /// The address width in bits, which is also the prefix length of a
    /// single address (32, 128).
    pub fn bits(self) -> u8 {
        match self {
            IpFamily::V4 => 32,
            IpFamily::V6 => 128,
        }
    }

    /// `0.0.0.0` or `::`.
    pub fn unspecified(self) -> IpAddr {
        match self {
            IpFamily::V4 => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpFamily::V6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        }
    }
}

impl fmt::Display for IpFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IpFamily::V4 => "ipv4",
            IpFamily::V6 => "ipv6",
        })
    }
}

/// The nf_tables family of a family's own tables (`ip`, `ip6`), where
/// iptables-nft keeps `iptables` and `ip6tables` rules.
impl From<IpFamily> for crate::nftables::Family {
    fn from(family: IpFamily) -> crate::nftables::Family {
        match family {
            IpFamily::V4 => crate::nftables::Family::Ip,
            IpFamily::V6 => crate::nftables::Family::Ip6,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_of_addresses_and_their_widths() {
        let v4: IpAddr = "10.0.0.1".parse().unwrap();
        let v6: IpAddr = "fd00::1".parse().unwrap();
        assert_eq!(IpFamily::of(v4), IpFamily::V4);
        assert_eq!(IpFamily::of(v6), IpFamily::V6);
        let net: IpNetwork = "fd00::/64".parse().unwrap();
        assert_eq!(IpFamily::of_network(&net), IpFamily::V6);
        assert_eq!(IpFamily::V4.bits(), 32);
        assert_eq!(IpFamily::V6.bits(), 128);
        assert_eq!(IpFamily::V6.unspecified().to_string(), "::");
        assert_eq!(IpFamily::V4.to_string(), "ipv4");
        assert_eq!(crate::nftables::Family::from(IpFamily::V6).name(), "ip6");
    }
}
