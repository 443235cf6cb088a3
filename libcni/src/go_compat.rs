//! What Go's standard library accepts, for plugins that must read the
//! reference plugins' input the way they do.
//!
//! - JSON keys: Go's `encoding/json` matches an object key to a struct field
//!   exactly or else case-insensitively, so `"RuntimeConfig"` reaches a field
//!   tagged `runtimeConfig` (the reference tests send it so). serde matches
//!   exactly; [`fold_keys`] renames the keys of a JSON value onto the names a
//!   [`Shape`] declares, level by level, and serde then decodes the result.
//! - Addresses: Go's `net` package treats an IPv4-mapped IPv6 address
//!   (`::ffff:10.0.0.1`) as the IPv4 address it maps, also inside a CIDR,
//!   where the prefix then counts the last 32 bits only. [`parse_ip`] and
//!   [`parse_cidr`] give the same addresses and prefixes.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use serde_json::{Map, Value};

/// The keys of a Go struct, as far as decoding needs them.
#[derive(Debug, Clone, Copy)]
pub enum Shape {
    /// Decoded as it is (strings, numbers, or objects left to serde).
    Leaf,
    /// A struct: field names as its JSON tags spell them, each with the
    /// shape of its value.
    Object(&'static [(&'static str, Shape)]),
    /// A list (Go slice) of values of one shape.
    List(&'static Shape),
}

/// `libcni::types::Route`, as the Go library's `types.Route` decodes it.
pub const ROUTE: Shape = Shape::Object(&[
    ("dst", Shape::Leaf),
    ("gw", Shape::Leaf),
    ("mtu", Shape::Leaf),
    ("advmss", Shape::Leaf),
    ("priority", Shape::Leaf),
    ("table", Shape::Leaf),
    ("scope", Shape::Leaf),
]);

/// `libcni::types::Dns`, as the Go library's `types.DNS` decodes it.
pub const DNS: Shape = Shape::Object(&[
    ("nameservers", Shape::Leaf),
    ("domain", Shape::Leaf),
    ("search", Shape::Leaf),
    ("options", Shape::Leaf),
]);

/// `value` with every object key that matches a name of `shape` spelled as
/// that name, recursively. Matching is Go's: an exact match wins, otherwise
/// an ASCII case-insensitive one, and of two names that differ only in case
/// the first declared takes the folded keys (as Go gives them to the first
/// field). Keys matching no name are kept as they are; values of another
/// type than the shape expects are kept too, for serde to report.
///
/// Go lets the last of several keys for one field win; a `serde_json` map
/// does not keep the order of keys, so here an exact spelling wins over
/// folded ones, and among folded ones the first in sorted order.
pub fn fold_keys(value: &Value, shape: &Shape) -> Value {
    match (shape, value) {
        (Shape::Object(fields), Value::Object(object)) => {
            Value::Object(fold_object(object, fields))
        }
        (Shape::List(item), Value::Array(items)) => {
            Value::Array(items.iter().map(|v| fold_keys(v, item)).collect())
        }
        _ => value.clone(),
    }
}

fn fold_object(
    object: &Map<String, Value>,
    fields: &[(&'static str, Shape)],
) -> Map<String, Value> {
    let mut folded = Map::new();
    // Which fields got their value from an exact spelling.
    let mut exact = vec![false; fields.len()];
    for (key, value) in object {
        let field = fields
            .iter()
            .position(|(name, _)| name == key)
            .map(|i| (i, true))
            .or_else(|| {
                fields
                    .iter()
                    .position(|(name, _)| name.eq_ignore_ascii_case(key))
                    .map(|i| (i, false))
            });
        let Some((index, is_exact)) = field else {
            folded.insert(key.clone(), value.clone());
            continue;
        };
        let (name, shape) = &fields[index];
        if folded.contains_key(*name) && (exact[index] || !is_exact) {
            continue;
        }
        exact[index] = is_exact;
        folded.insert((*name).to_string(), fold_keys(value, shape));
    }
    folded
}

/// The address Go's `net.ParseIP` gives, with an IPv4-mapped IPv6 address
/// as IPv4. Leading zeros in IPv4, zones and surrounding spaces are refused,
/// as in Go.
pub fn parse_ip(text: &str) -> Option<IpAddr> {
    text.parse::<IpAddr>().ok().map(canonical_ip)
}

/// `ip/prefix` as Go's `net.ParseCIDR` reads it, keeping the host bits of
/// `ip` (`10.0.0.5/24` stays so). The prefix is decimal digits only (leading
/// zeros allowed) and at most the address's bit length; an IPv4-mapped
/// address becomes IPv4 with the prefix over its last 32 bits (0 when the
/// prefix ends before them, which is what Go prints).
pub fn parse_cidr(text: &str) -> Option<IpNetwork> {
    let (ip, prefix) = text.split_once('/')?;
    let ip: IpAddr = ip.parse().ok()?;
    if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Digits beyond the largest prefix only make it larger; stop early
    // rather than overflow.
    let prefix = prefix.bytes().try_fold(0u32, |n, b| {
        (n <= 128).then(|| n * 10 + u32::from(b - b'0'))
    })?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let prefix = u8::try_from(prefix).ok().filter(|p| u32::from(*p) <= max)?;
    canonical_network(ip, prefix)
}

/// An IPv4-mapped IPv6 address as the IPv4 address it maps; others as they
/// are.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// `ip/prefix` with an IPv4-mapped `ip` turned into IPv4, the prefix then
/// counting its last 32 bits.
pub fn canonical_network(ip: IpAddr, prefix: u8) -> Option<IpNetwork> {
    match (ip, canonical_ip(ip)) {
        (IpAddr::V6(_), mapped @ IpAddr::V4(_)) => {
            IpNetwork::new(mapped, prefix.saturating_sub(96)).ok()
        }
        _ => IpNetwork::new(ip, prefix).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const INNER: Shape = Shape::Object(&[("ips", Shape::Leaf)]);
    const ADDRESS: Shape = Shape::Object(&[("address", Shape::Leaf), ("Address", Shape::Leaf)]);
    const TOP: Shape = Shape::Object(&[
        ("runtimeConfig", INNER),
        ("routes", Shape::List(&ROUTE)),
        ("addresses", Shape::List(&ADDRESS)),
    ]);

    #[test]
    fn keys_fold_onto_declared_names_at_every_level() {
        let v = json!({
            "RuntimeConfig": {"IPS": ["10.0.0.1/24"], "other": 1},
            "ROUTES": [{"DST": "0.0.0.0/0", "Gw": "10.0.0.1"}],
            "unknown": {"IPS": 1}
        });
        assert_eq!(
            fold_keys(&v, &TOP),
            json!({
                "runtimeConfig": {"ips": ["10.0.0.1/24"], "other": 1},
                "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}],
                "unknown": {"IPS": 1}
            })
        );
    }

    #[test]
    fn exact_spelling_wins_over_folded() {
        let v = json!({"runtimeConfig": {"ips": ["a"]}, "RUNTIMECONFIG": {"ips": ["b"]}});
        assert_eq!(fold_keys(&v, &TOP)["runtimeConfig"]["ips"][0], "a");
        let v = json!({"RUNTIMECONFIG": {"ips": ["b"]}, "runtimeConfig": {"ips": ["a"]}});
        assert_eq!(fold_keys(&v, &TOP)["runtimeConfig"]["ips"][0], "a");
    }

    #[test]
    fn names_differing_in_case_each_keep_their_exact_key() {
        let v = json!({"addresses": [{"address": "s", "Address": {"IP": "x"}}]});
        assert_eq!(fold_keys(&v, &TOP), v);
        // A folded spelling goes to the first declared name, as in Go.
        let v = json!({"addresses": [{"ADDRESS": "s"}]});
        assert_eq!(fold_keys(&v, &TOP)["addresses"][0], json!({"address": "s"}));
    }

    #[test]
    fn other_types_are_left_for_serde() {
        let v = json!({"runtimeConfig": 5, "routes": {"dst": 1}});
        assert_eq!(fold_keys(&v, &TOP), v);
        assert_eq!(fold_keys(&json!(null), &TOP), json!(null));
    }

    #[test]
    fn ip_parsing_matches_go() {
        assert_eq!(parse_ip("10.0.0.1"), Some("10.0.0.1".parse().unwrap()));
        assert_eq!(
            parse_ip("::ffff:10.0.0.1"),
            Some("10.0.0.1".parse().unwrap())
        );
        assert_eq!(
            parse_ip("2001:db8::1"),
            Some("2001:db8::1".parse().unwrap())
        );
        for bad in ["", "010.0.0.1", " 10.0.0.1", "fe80::1%eth0", "10.0.0", "x"] {
            assert_eq!(parse_ip(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn cidr_parsing_matches_go() {
        let net = |s: &str| parse_cidr(s).map(|n| n.to_string());
        assert_eq!(net("10.0.0.5/24").as_deref(), Some("10.0.0.5/24"));
        assert_eq!(net("10.0.0.5/024").as_deref(), Some("10.0.0.5/24"));
        assert_eq!(net("10.0.0.5/0").as_deref(), Some("10.0.0.5/0"));
        assert_eq!(net("10.0.0.5/00").as_deref(), Some("10.0.0.5/0"));
        assert_eq!(net("2001:db8::5/64").as_deref(), Some("2001:db8::5/64"));
        assert_eq!(net("::ffff:10.0.0.5/120").as_deref(), Some("10.0.0.5/24"));
        assert_eq!(net("::ffff:10.0.0.5/64").as_deref(), Some("10.0.0.5/0"));
        for bad in [
            "10.0.0.5",
            "10.0.0.5/",
            "10.0.0.5/33",
            "10.0.0.5/+2",
            "10.0.0.5/ 2",
            "/24",
            "10.0.0.5/24/1",
            "2001:db8::/129",
            "10.0.0.5/999999999999",
            "x/1",
        ] {
            assert_eq!(parse_cidr(bad), None, "{bad:?}");
        }
    }
}
