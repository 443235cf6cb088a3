//! IP address helpers shared by ranges, configuration and the store.
//!
//! Ranges are walked address by address, so addresses are handled as
//! integers of their family's width; an IPv4 address never compares equal
//! to an IPv6 one.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use libcni::IpFamily;

/// The address in its own family's canonical form: an IPv4-mapped IPv6
/// address (`::ffff:a.b.c.d`) is the IPv4 address, as the reference treats
/// it.
pub fn canonical(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

pub fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// The address of `family` with integer value `n` (truncated to the width).
pub fn from_u128(family: IpFamily, n: u128) -> IpAddr {
    match family {
        // Truncation to 32 bits is the intent: IPv4 arithmetic wraps there.
        IpFamily::V4 => IpAddr::V4(Ipv4Addr::from((n & 0xffff_ffff) as u32)),
        IpFamily::V6 => IpAddr::V6(Ipv6Addr::from(n)),
    }
}

/// The next address of the same family, wrapping at the top.
pub fn next(ip: IpAddr) -> IpAddr {
    let family = IpFamily::of(ip);
    let max = max_value(family);
    let n = to_u128(ip);
    from_u128(family, if n == max { 0 } else { n + 1 })
}

/// The address before `ip`, wrapping at zero.
pub fn prev(ip: IpAddr) -> IpAddr {
    let family = IpFamily::of(ip);
    let n = to_u128(ip);
    from_u128(family, if n == 0 { max_value(family) } else { n - 1 })
}

fn max_value(family: IpFamily) -> u128 {
    match family {
        IpFamily::V4 => u128::from(u32::MAX),
        IpFamily::V6 => u128::MAX,
    }
}

/// The netmask of `prefix` bits as an integer of the family's width.
pub fn mask(family: IpFamily, prefix: u8) -> u128 {
    let bits = u32::from(family.bits());
    let prefix = u32::from(prefix).min(bits);
    if prefix == 0 {
        return 0;
    }
    let ones = u128::MAX << (128 - prefix);
    ones >> (128 - bits)
}

/// Parses `<ip>` or `<ip>/<prefix>` (the prefix is checked, then dropped),
/// the form of requested addresses in `CNI_ARGS`, `args.cni.ips` and
/// `runtimeConfig.ips`.
pub fn parse_ip_maybe_prefix(s: &str) -> Option<IpAddr> {
    let ip = match s.split_once('/') {
        Some((addr, prefix)) => {
            let ip: IpAddr = addr.parse().ok()?;
            let prefix: u8 = prefix.parse().ok()?;
            if prefix > IpFamily::of(ip).bits() {
                return None;
            }
            ip
        }
        None => s.parse().ok()?,
    };
    Some(canonical(ip))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn next_and_prev_step_within_the_family() {
        assert_eq!(next(ip("10.0.0.255")), ip("10.0.1.0"));
        assert_eq!(next(ip("255.255.255.255")), ip("0.0.0.0"));
        assert_eq!(prev(ip("10.0.1.0")), ip("10.0.0.255"));
        assert_eq!(next(ip("2001:db8::ffff")), ip("2001:db8::1:0"));
        assert_eq!(
            next(ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")),
            ip("::")
        );
        assert_eq!(
            prev(ip("::")),
            ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")
        );
    }

    #[test]
    fn masks() {
        assert_eq!(mask(IpFamily::V4, 24), 0xffff_ff00);
        assert_eq!(mask(IpFamily::V4, 0), 0);
        assert_eq!(mask(IpFamily::V4, 32), 0xffff_ffff);
        assert_eq!(
            mask(IpFamily::V6, 64),
            0xffff_ffff_ffff_ffff_0000_0000_0000_0000
        );
        assert_eq!(mask(IpFamily::V6, 128), u128::MAX);
    }

    #[test]
    fn requested_ip_forms() {
        assert_eq!(parse_ip_maybe_prefix("10.1.2.10"), Some(ip("10.1.2.10")));
        assert_eq!(parse_ip_maybe_prefix("10.1.2.11/24"), Some(ip("10.1.2.11")));
        assert_eq!(
            parse_ip_maybe_prefix("2001:db8:1::11/64"),
            Some(ip("2001:db8:1::11"))
        );
        assert_eq!(
            parse_ip_maybe_prefix("::ffff:10.0.0.1"),
            Some(ip("10.0.0.1"))
        );
        for bad in [
            "",
            "10.1.2",
            "10.1.2.3/",
            "10.1.2.3/33",
            "x/24",
            "10.1.2.3/-1",
            "1.2.3.4/2/3",
        ] {
            assert_eq!(parse_ip_maybe_prefix(bad), None, "{bad}");
        }
    }
}
