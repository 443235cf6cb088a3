//! The plugin's own keys (`table`, `gateways`, `addSourceHints`), read the
//! way the reference's Go decoder reads them (keys matched exactly or else
//! case-insensitively, `null` as absent), and which of the previous
//! result's addresses belong to the interface.

use std::net::IpAddr;

use libcni::go_compat::{self, Shape};
use libcni::plugin_conf::PluginConf;
use libcni::types::v100;
use serde_json::Value;

const KEYS: Shape = Shape::Object(&[
    ("table", Shape::Leaf),
    ("gateways", Shape::Leaf),
    ("addSourceHints", Shape::Leaf),
]);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("failed to parse network configuration: {key} must be {expected}")]
    WrongType {
        key: &'static str,
        expected: &'static str,
    },
    #[error("invalid table {0}: a routing table id is between 1 and 4294967295")]
    TableOutOfRange(String),
    #[error("gateways list cannot contain more than 2 entries (one IPv4, one IPv6)")]
    TooManyGateways,
    #[error("invalid static gateway IP address: {0}")]
    InvalidGateway(String),
    #[error("gateways list contains multiple IPv4 addresses: {first} and {second}")]
    MultipleIpv4Gateways { first: IpAddr, second: String },
    #[error("gateways list contains multiple IPv6 addresses: {first} and {second}")]
    MultipleIpv6Gateways { first: IpAddr, second: String },
}

/// The configuration keys of sbr.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SbrConf {
    /// A table the operator manages: ADD then only adds the rules into it.
    pub table: Option<u32>,
    /// `gateways` as written; see [`StaticGateways::parse`].
    pub gateways: Vec<String>,
    /// Keep the subnet routes in the main table, with the address as
    /// source hint, so traffic without a chosen source still goes out of
    /// this interface to its own subnet.
    pub add_source_hints: bool,
}

impl SbrConf {
    pub fn from_conf(conf: &PluginConf) -> Result<SbrConf, ConfigError> {
        let folded = go_compat::fold_keys(conf.raw(), &KEYS);
        let get = |key: &str| folded.get(key).filter(|v| !v.is_null());
        let table = match get("table") {
            None => None,
            Some(Value::Number(n)) => {
                let id = n
                    .as_i64()
                    .ok_or(ConfigError::WrongType {
                        key: "table",
                        expected: "an integer",
                    })
                    .and_then(|id| {
                        u32::try_from(id)
                            .ok()
                            .filter(|id| *id != 0)
                            .ok_or_else(|| ConfigError::TableOutOfRange(id.to_string()))
                    })?;
                Some(id)
            }
            Some(_) => {
                return Err(ConfigError::WrongType {
                    key: "table",
                    expected: "an integer",
                })
            }
        };
        let list_error = ConfigError::WrongType {
            key: "gateways",
            expected: "a list of strings",
        };
        let gateways = match get("gateways") {
            None => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| item.as_str().map(str::to_string))
                .collect::<Option<Vec<String>>>()
                .ok_or(list_error)?,
            Some(_) => return Err(list_error),
        };
        let add_source_hints = match get("addSourceHints") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(ConfigError::WrongType {
                    key: "addSourceHints",
                    expected: "a boolean",
                })
            }
        };
        Ok(SbrConf {
            table,
            gateways,
            add_source_hints,
        })
    }
}

/// The gateways of `gateways`: at most one per family, each replacing the
/// previous result's gateway of its family for every address of that
/// family.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StaticGateways {
    pub v4: Option<IpAddr>,
    pub v6: Option<IpAddr>,
}

impl StaticGateways {
    /// Checks in the reference's order: the count first, then each entry.
    /// IPv4-mapped IPv6 addresses count as IPv4, as in Go.
    pub fn parse(gateways: &[String]) -> Result<StaticGateways, ConfigError> {
        if gateways.len() > 2 {
            return Err(ConfigError::TooManyGateways);
        }
        let mut parsed = StaticGateways::default();
        for text in gateways {
            let ip = go_compat::parse_ip(text)
                .ok_or_else(|| ConfigError::InvalidGateway(text.clone()))?;
            let second = text.clone();
            let slot = match (ip.is_ipv4(), parsed.v4, parsed.v6) {
                (true, Some(first), _) => {
                    return Err(ConfigError::MultipleIpv4Gateways { first, second })
                }
                (false, _, Some(first)) => {
                    return Err(ConfigError::MultipleIpv6Gateways { first, second })
                }
                (true, None, _) => &mut parsed.v4,
                (false, _, None) => &mut parsed.v6,
            };
            *slot = Some(ip);
        }
        Ok(parsed)
    }

    /// The gateway for `address`: the static one of its family, else the
    /// previous result's.
    pub fn for_ip(&self, ip: &v100::IpConfig) -> Option<IpAddr> {
        let fixed = if ip.address.is_ipv4() {
            self.v4
        } else {
            self.v6
        };
        fixed.or(ip.gateway)
    }
}

/// The previous result's addresses sbr routes for `ifname`: those without
/// an interface index, those whose index names `ifname`, and those whose
/// index is past the list (the reference's rule: only an address known to
/// belong to another interface is left out).
pub fn interface_ips<'r>(result: &'r v100::Result, ifname: &str) -> Vec<&'r v100::IpConfig> {
    result
        .ips
        .iter()
        .filter(|ip| match ip.interface {
            None => true,
            Some(index) => result
                .interfaces
                .get(index)
                .is_none_or(|iface| iface.name == ifname),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conf(value: Value) -> Result<SbrConf, ConfigError> {
        let bytes = serde_json::to_vec(&value).unwrap();
        SbrConf::from_conf(&PluginConf::from_slice(&bytes).unwrap())
    }

    fn base(extra: Value) -> Value {
        let mut v = json!({"cniVersion": "1.0.0", "name": "n", "type": "sbr"});
        for (k, val) in extra.as_object().unwrap() {
            v[k] = val.clone();
        }
        v
    }

    #[test]
    fn defaults_and_every_key() {
        assert_eq!(conf(base(json!({}))).unwrap(), SbrConf::default());
        let c = conf(base(
            json!({"table": 5000, "gateways": ["10.0.0.1", "fd00::1"],
            "addSourceHints": true}),
        ))
        .unwrap();
        assert_eq!(c.table, Some(5000));
        assert_eq!(c.gateways, vec!["10.0.0.1", "fd00::1"]);
        assert!(c.add_source_hints);
        let nulls = conf(base(
            json!({"table": null, "gateways": null, "addSourceHints": null}),
        ));
        assert_eq!(nulls.unwrap(), SbrConf::default());
    }

    #[test]
    fn keys_fold_like_go() {
        let c = conf(base(
            json!({"Table": 7, "GATEWAYS": ["10.0.0.1"], "addsourcehints": true}),
        ))
        .unwrap();
        assert_eq!(c.table, Some(7));
        assert_eq!(c.gateways.len(), 1);
        assert!(c.add_source_hints);
    }

    #[test]
    fn wrong_types_and_ranges_are_refused() {
        for bad in [
            json!({"table": "100"}),
            json!({"table": 1.5}),
            json!({"gateways": "10.0.0.1"}),
            json!({"gateways": [1]}),
            json!({"addSourceHints": "true"}),
        ] {
            assert!(
                matches!(conf(base(bad.clone())), Err(ConfigError::WrongType { .. })),
                "{bad}"
            );
        }
        for bad in [0i64, -1, 4_294_967_296] {
            assert_eq!(
                conf(base(json!({ "table": bad }))).unwrap_err(),
                ConfigError::TableOutOfRange(bad.to_string())
            );
        }
        assert_eq!(
            conf(base(json!({"table": 4_294_967_295u64})))
                .unwrap()
                .table,
            Some(u32::MAX)
        );
    }

    fn gateways(list: &[&str]) -> Result<StaticGateways, ConfigError> {
        StaticGateways::parse(&list.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn static_gateways_one_per_family_with_the_reference_messages() {
        let g = gateways(&["192.168.1.254", "fd00::1"]).unwrap();
        assert_eq!(g.v4, Some("192.168.1.254".parse().unwrap()));
        assert_eq!(g.v6, Some("fd00::1".parse().unwrap()));
        assert_eq!(
            gateways(&["::ffff:10.0.0.1"]).unwrap().v4,
            Some("10.0.0.1".parse().unwrap())
        );
        assert_eq!(
            gateways(&["1.1.1.1", "2.2.2.2", "fd00::1"])
                .unwrap_err()
                .to_string(),
            "gateways list cannot contain more than 2 entries (one IPv4, one IPv6)"
        );
        assert_eq!(
            gateways(&["nope"]).unwrap_err().to_string(),
            "invalid static gateway IP address: nope"
        );
        assert_eq!(
            gateways(&["::ffff:1.1.1.1", "2.2.2.2"])
                .unwrap_err()
                .to_string(),
            "gateways list contains multiple IPv4 addresses: 1.1.1.1 and 2.2.2.2"
        );
        assert_eq!(
            gateways(&["fd00::1", "fd00:0::2"]).unwrap_err().to_string(),
            "gateways list contains multiple IPv6 addresses: fd00::1 and fd00:0::2"
        );
    }

    #[test]
    fn static_gateway_replaces_the_result_gateway_of_its_family_only() {
        let g = gateways(&["192.168.1.254"]).unwrap();
        let v4 = v100::IpConfig {
            interface: None,
            address: "192.168.1.209/24".parse().unwrap(),
            gateway: Some("192.168.1.1".parse().unwrap()),
        };
        let v6 = v100::IpConfig {
            interface: None,
            address: "fd00::5/64".parse().unwrap(),
            gateway: Some("fd00::ffff".parse().unwrap()),
        };
        assert_eq!(g.for_ip(&v4), Some("192.168.1.254".parse().unwrap()));
        assert_eq!(g.for_ip(&v6), Some("fd00::ffff".parse().unwrap()));
        let none = StaticGateways::default();
        assert_eq!(none.for_ip(&v4), Some("192.168.1.1".parse().unwrap()));
    }

    #[test]
    fn addresses_of_other_interfaces_are_left_out() {
        let result: v100::Result = serde_json::from_value(json!({
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "eth0"}, {"name": "net1"}],
            "ips": [
                {"address": "10.0.0.2/24", "interface": 0},
                {"address": "192.168.1.209/24", "interface": 1},
                {"address": "192.168.1.210/24"},
                {"address": "192.168.1.211/24", "interface": 7}
            ]
        }))
        .unwrap();
        let mine: Vec<String> = interface_ips(&result, "net1")
            .iter()
            .map(|ip| ip.address.to_string())
            .collect();
        assert_eq!(
            mine,
            ["192.168.1.209/24", "192.168.1.210/24", "192.168.1.211/24"]
        );
    }
}
