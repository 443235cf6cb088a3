//! What Go's standard library accepts, for plugins that must read the
//! reference plugins' input the way they do.
//!
//! - JSON keys: Go's `encoding/json` matches an object key to a struct field
//!   exactly or else case-insensitively, so `"RuntimeConfig"` reaches a field
//!   tagged `runtimeConfig` (the reference tests send it so). serde matches
//!   exactly; [`fold_keys`] renames the keys of a JSON value onto the names a
//!   [`Shape`] declares, level by level, and serde then decodes the result.
//!   Code that reads one key at a time from a JSON object uses [`get`];
//!   a decoder that must see the JSON text itself (the order of a map's
//!   keys, a key given twice, which a [`Value`] loses) implements
//!   [`GoStruct`] and decodes with [`deserialize_struct`]. All three match
//!   keys with [`field_for_key`].
//! - Addresses: Go's `net` package treats an IPv4-mapped IPv6 address
//!   (`::ffff:10.0.0.1`) as the IPv4 address it maps, also inside a CIDR,
//!   where the prefix then counts the last 32 bits only. [`parse_ip`] and
//!   [`parse_cidr`] give the same addresses and prefixes.

use std::fmt;
use std::marker::PhantomData;
use std::net::IpAddr;

use ipnetwork::IpNetwork;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
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

/// The field of a Go struct that the object key `key` decodes into, as
/// Go's decoder picks it: the field named exactly `key`, else the first
/// (in declaration order) whose name equals `key` ignoring ASCII case.
/// `names` are the struct's JSON names in declaration order.
pub fn field_for_key<S: AsRef<str>>(names: &[S], key: &str) -> Option<usize> {
    names
        .iter()
        .position(|name| name.as_ref() == key)
        .or_else(|| {
            names
                .iter()
                .position(|name| name.as_ref().eq_ignore_ascii_case(key))
        })
}

/// The value Go's decoder gives the field `name`, read from `object` one
/// key at a time: the key spelled `name`, else the first key (in the map's
/// order) that [`field_for_key`] matches to it. Exact only for structs
/// with no other field whose name differs from `name` in case alone
/// (that one would take the folded keys first); use [`fold_keys`] there.
pub fn get<'a>(object: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    object.get(name).or_else(|| {
        object
            .iter()
            .find(|(key, _)| field_for_key(&[name], key).is_some())
            .map(|(_, value)| value)
    })
}

/// A Go struct decoded straight from the JSON text by
/// [`deserialize_struct`], its keys matched as Go matches them.
pub trait GoStruct: Default {
    /// The fields' JSON names, in declaration order.
    const FIELDS: &'static [&'static str];
    /// Decodes the value of field `FIELDS[index]` from `map` (one
    /// `next_value` call) into `self`.
    fn decode_field<'de, A: MapAccess<'de>>(
        &mut self,
        index: usize,
        map: &mut A,
    ) -> Result<(), A::Error>;
}

/// Decodes a `T` from a JSON object as Go's decoder would: each key goes
/// to the field [`field_for_key`] picks, keys of no field are skipped, and
/// a key given again (in any spelling of the same field) overwrites the
/// value, so the last one wins (where [`fold_keys`], with no key order to
/// go by, lets the exact spelling win).
pub fn deserialize_struct<'de, T: GoStruct, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<T, D::Error> {
    struct StructVisitor<T>(PhantomData<T>);
    impl<'de, T: GoStruct> Visitor<'de> for StructVisitor<T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
            let mut value = T::default();
            while let Some(key) = map.next_key::<String>()? {
                match field_for_key(T::FIELDS, &key) {
                    Some(index) => value.decode_field(index, &mut map)?,
                    None => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(value)
        }
    }
    deserializer.deserialize_map(StructVisitor(PhantomData))
}

fn fold_object(
    object: &Map<String, Value>,
    fields: &[(&'static str, Shape)],
) -> Map<String, Value> {
    let mut folded = Map::new();
    let names: Vec<&str> = fields.iter().map(|(name, _)| *name).collect();
    // Which fields got their value from an exact spelling.
    let mut exact = vec![false; fields.len()];
    for (key, value) in object {
        let Some(index) = field_for_key(&names, key) else {
            folded.insert(key.clone(), value.clone());
            continue;
        };
        let (name, shape) = &fields[index];
        let is_exact = name == key;
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
    fn one_key_at_a_time_as_go_matches_it() {
        let v = json!({"MTU": 1, "mtu": 2, "HostPort": 3, "other": 4});
        let object = v.as_object().unwrap();
        assert_eq!(get(object, "mtu"), Some(&json!(2)));
        assert_eq!(get(object, "hostPort"), Some(&json!(3)));
        assert_eq!(get(object, "runtimeConfig"), None);
        assert_eq!(field_for_key(&["address", "Address"], "ADDRESS"), Some(0));
        assert_eq!(field_for_key(&["address", "Address"], "Address"), Some(1));
        assert_eq!(field_for_key(&["address"], "addresses"), None);
    }

    /// `{"mac": ..., "runtimeConfig": {"mac": ...}}`, noting the fields in
    /// the order their keys came.
    #[derive(Debug, Default, PartialEq)]
    struct Conf {
        mac: Option<String>,
        runtime_config: Option<Box<Conf>>,
        seen: Vec<&'static str>,
    }

    impl GoStruct for Conf {
        const FIELDS: &'static [&'static str] = &["mac", "runtimeConfig"];
        fn decode_field<'de, A: MapAccess<'de>>(
            &mut self,
            index: usize,
            map: &mut A,
        ) -> Result<(), A::Error> {
            self.seen.push(Self::FIELDS[index]);
            match index {
                0 => self.mac = map.next_value()?,
                _ => self.runtime_config = map.next_value()?,
            }
            Ok(())
        }
    }

    impl<'de> serde::Deserialize<'de> for Conf {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            deserialize_struct(d)
        }
    }

    fn decode(text: &str) -> Result<Conf, serde_json::Error> {
        serde_json::from_str(text)
    }

    #[test]
    fn structs_decode_from_the_text_as_go_decodes_them() {
        let conf = decode(
            r#"{"RuntimeConfig": {"MAC": "c2:11:22:33:44:66"}, "other": [1, {"mac": 2}],
                "Mac": "x"}"#,
        )
        .unwrap();
        assert_eq!(conf.mac.as_deref(), Some("x"));
        assert_eq!(conf.seen, ["runtimeConfig", "mac"]);
        let inner = conf.runtime_config.unwrap();
        assert_eq!(inner.mac.as_deref(), Some("c2:11:22:33:44:66"));
        // The last key of a field wins, whatever its spelling.
        let conf = decode(r#"{"mac": "a", "MAC": "b"}"#).unwrap();
        assert_eq!(
            (conf.mac.as_deref(), conf.seen),
            (Some("b"), vec!["mac", "mac"])
        );
        let conf = decode(r#"{"MAC": "b", "mac": "a"}"#).unwrap();
        assert_eq!(conf.mac.as_deref(), Some("a"));
        assert_eq!(
            decode(r#"{"runtimeConfig": null}"#).unwrap().runtime_config,
            None
        );
        for bad in [r#"[]"#, r#"{"mac": 5}"#, r#"{"runtimeConfig": 5}"#] {
            assert!(decode(bad).is_err(), "{bad}");
        }
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
