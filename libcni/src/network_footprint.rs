//! What a network configuration takes on a node that another network on
//! the same node must not also take: the Linux bridges its bridge plugins
//! make or join, and the address ranges its IPAM hands out. Two files
//! that share a bridge with different subnets break the second network
//! ("cni0 already has an IP address different from ..."); overlapping
//! ranges give two pods one address or one route two ways.
//!
//! `cnitool validate` warns about collisions in a config folder; the
//! conformance suite requires the examples folder to have none.

use ipnetwork::IpNetwork;
use serde_json::Value;

/// The bridge plugin's bridge when the config names none.
pub const DEFAULT_BRIDGE: &str = "cni0";

/// The bridges and address ranges of one configuration list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Footprint {
    pub bridges: Vec<String>,
    /// Each range as its network (`10.22.5.9/24` is `10.22.5.0/24`).
    pub subnets: Vec<IpNetwork>,
}

impl Footprint {
    /// Reads a list's JSON (a single-plugin config is read as a list of
    /// itself): bridge plugins' `bridge`, and each IPAM section's
    /// `subnet`, `ranges` and static `addresses`. Values that do not parse
    /// are left out; the plugins report those.
    pub fn of(list: &Value) -> Footprint {
        let plugins: Vec<&Value> = match list.get("plugins").and_then(Value::as_array) {
            Some(plugins) => plugins.iter().collect(),
            None => vec![list],
        };
        let mut footprint = Footprint::default();
        for plugin in plugins {
            if plugin["type"] == "bridge" {
                let bridge = plugin["bridge"]
                    .as_str()
                    .filter(|b| !b.is_empty())
                    .unwrap_or(DEFAULT_BRIDGE);
                footprint.bridges.push(bridge.to_string());
            }
            let ipam = &plugin["ipam"];
            let mut written: Vec<&str> = Vec::new();
            written.extend(ipam["subnet"].as_str());
            for set in ipam["ranges"].as_array().into_iter().flatten() {
                for range in set.as_array().into_iter().flatten() {
                    written.extend(range["subnet"].as_str());
                }
            }
            for address in ipam["addresses"].as_array().into_iter().flatten() {
                written.extend(address["address"].as_str());
            }
            footprint.subnets.extend(
                written
                    .into_iter()
                    .filter_map(|text| text.parse::<IpNetwork>().ok())
                    .filter_map(|net| IpNetwork::new(net.network(), net.prefix()).ok()),
            );
        }
        footprint
    }
}

/// Whether two ranges share an address.
pub fn overlaps(a: &IpNetwork, b: &IpNetwork) -> bool {
    match (a, b) {
        (IpNetwork::V4(x), IpNetwork::V4(y)) => x.contains(y.network()) || y.contains(x.network()),
        (IpNetwork::V6(x), IpNetwork::V6(y)) => x.contains(y.network()) || y.contains(x.network()),
        _ => false,
    }
}

/// Every collision between the labelled footprints, in order, as text for
/// a person: `A and B both use bridge cni0`, `A (10.22.0.0/16) and B
/// (10.22.5.0/24) overlap`.
pub fn collisions(footprints: &[(String, Footprint)]) -> Vec<String> {
    let mut found = Vec::new();
    for (i, (a, fa)) in footprints.iter().enumerate() {
        for (b, fb) in footprints.iter().skip(i + 1) {
            for bridge in &fa.bridges {
                if fb.bridges.contains(bridge) {
                    found.push(format!("{a} and {b} both use bridge {bridge}"));
                }
            }
            for x in &fa.subnets {
                for y in fb.subnets.iter().filter(|y| overlaps(x, y)) {
                    found.push(format!("{a} ({x}) and {b} ({y}) overlap"));
                }
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn footprint_reads_bridges_and_every_ipam_range() {
        let list = json!({"plugins": [
            {"type": "bridge", "ipam": {"type": "host-local", "ranges": [
                [{"subnet": "10.85.0.0/16"}], [{"subnet": "fd00:85::/64"}]
            ]}},
            {"type": "macvlan", "ipam": {"type": "static", "addresses": [{"address": "10.22.5.9/24"}]}},
            {"type": "portmap"}
        ]});
        assert_eq!(
            Footprint::of(&list),
            Footprint {
                bridges: vec!["cni0".into()],
                subnets: vec![
                    "10.85.0.0/16".parse().unwrap(),
                    "fd00:85::/64".parse().unwrap(),
                    "10.22.5.0/24".parse().unwrap(),
                ],
            }
        );
        let single = json!({"type": "bridge", "bridge": "br9", "ipam": {"subnet": "10.1.0.0/16"}});
        assert_eq!(
            Footprint::of(&single),
            Footprint {
                bridges: vec!["br9".into()],
                subnets: vec!["10.1.0.0/16".parse().unwrap()],
            }
        );
    }

    #[test]
    fn collisions_name_both_sides() {
        let a = Footprint::of(&json!({"type": "bridge", "ipam": {"subnet": "10.22.0.0/16"}}));
        let b = Footprint::of(&json!({"type": "bridge", "ipam": {"subnet": "10.22.5.0/24"}}));
        let c = Footprint::of(
            &json!({"type": "bridge", "bridge": "br-c", "ipam": {"subnet": "fd00:22::/64"}}),
        );
        assert_eq!(
            collisions(&[("a".into(), a), ("b".into(), b), ("c".into(), c)]),
            vec![
                "a and b both use bridge cni0".to_string(),
                "a (10.22.0.0/16) and b (10.22.5.0/24) overlap".to_string(),
            ]
        );
    }
}
