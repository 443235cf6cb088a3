//! The shape a success result must have in each spec version: which keys
//! may appear where, and what their values look like.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use serde_json::{Map, Value};

/// Checks `result` against the layout of spec `version`. `Err` says what
/// is wrong, naming the key.
pub fn check_result_shape(version: &str, result: &Value) -> Result<(), String> {
    let obj = result
        .as_object()
        .ok_or_else(|| format!("result is not a JSON object: {result}"))?;
    match obj.get("cniVersion").and_then(Value::as_str) {
        Some(v) if v == version => {}
        other => return Err(format!("cniVersion is {other:?}, expected {version:?}")),
    }
    match version {
        "0.1.0" | "0.2.0" => shape_v02(obj),
        "0.3.0" | "0.3.1" | "0.4.0" => shape_v04(obj),
        "1.0.0" | "1.1.0" => shape_v1(obj, version),
        other => Err(format!("unknown spec version {other}")),
    }
}

fn only_keys(what: &str, obj: &Map<String, Value>, allowed: &[&str]) -> Result<(), String> {
    for key in obj.keys() {
        if !allowed.contains(&key.as_str()) {
            return Err(format!(
                "{what} has key {key:?}, not allowed in this version"
            ));
        }
    }
    Ok(())
}

fn object<'a>(what: &str, v: &'a Value) -> Result<&'a Map<String, Value>, String> {
    v.as_object()
        .ok_or_else(|| format!("{what} is not an object: {v}"))
}

fn array<'a>(what: &str, v: Option<&'a Value>) -> Result<&'a [Value], String> {
    match v {
        None => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(other) => Err(format!("{what} is not a list: {other}")),
    }
}

fn cidr(what: &str, v: Option<&Value>) -> Result<IpNetwork, String> {
    v.and_then(Value::as_str)
        .ok_or_else(|| format!("{what} is missing"))?
        .parse::<IpNetwork>()
        .map_err(|e| format!("{what} is not an address/prefix: {e}"))
}

fn opt_ip(what: &str, v: Option<&Value>) -> Result<Option<IpAddr>, String> {
    match v {
        None => Ok(None),
        Some(Value::String(s)) => s
            .parse::<IpAddr>()
            .map(Some)
            .map_err(|e| format!("{what} {s:?} is not an address: {e}")),
        Some(other) => Err(format!("{what} is not a string: {other}")),
    }
}

fn shape_dns(obj: &Map<String, Value>) -> Result<(), String> {
    if let Some(dns) = obj.get("dns") {
        let dns = object("dns", dns)?;
        only_keys("dns", dns, &["nameservers", "domain", "search", "options"])?;
    }
    Ok(())
}

fn shape_routes(routes: &[Value], allowed: &[&str]) -> Result<(), String> {
    for (i, r) in routes.iter().enumerate() {
        let what = format!("routes[{i}]");
        let r = object(&what, r)?;
        only_keys(&what, r, allowed)?;
        cidr(&format!("{what}.dst"), r.get("dst"))?;
        opt_ip(&format!("{what}.gw"), r.get("gw"))?;
    }
    Ok(())
}

fn shape_v02(obj: &Map<String, Value>) -> Result<(), String> {
    only_keys("result", obj, &["cniVersion", "ip4", "ip6", "dns"])?;
    for (key, want_v4) in [("ip4", true), ("ip6", false)] {
        let Some(ipc) = obj.get(key) else { continue };
        let ipc = object(key, ipc)?;
        only_keys(key, ipc, &["ip", "gateway", "routes"])?;
        let net = cidr(&format!("{key}.ip"), ipc.get("ip"))?;
        if net.is_ipv4() != want_v4 {
            return Err(format!("{key}.ip {net} is of the wrong family"));
        }
        opt_ip(&format!("{key}.gateway"), ipc.get("gateway"))?;
        shape_routes(
            array(&format!("{key}.routes"), ipc.get("routes"))?,
            &["dst", "gw"],
        )?;
    }
    shape_dns(obj)
}

fn shape_interfaces(obj: &Map<String, Value>, allowed: &[&str]) -> Result<usize, String> {
    let ifaces = array("interfaces", obj.get("interfaces"))?;
    for (i, iface) in ifaces.iter().enumerate() {
        let what = format!("interfaces[{i}]");
        let iface = object(&what, iface)?;
        only_keys(&what, iface, allowed)?;
        match iface.get("name").and_then(Value::as_str) {
            Some(name) if !name.is_empty() => {}
            _ => return Err(format!("{what} has no name")),
        }
    }
    Ok(ifaces.len())
}

fn shape_ips(
    obj: &Map<String, Value>,
    interfaces: usize,
    with_version: bool,
) -> Result<(), String> {
    let allowed: &[&str] = if with_version {
        &["version", "interface", "address", "gateway"]
    } else {
        &["interface", "address", "gateway"]
    };
    for (i, ipc) in array("ips", obj.get("ips"))?.iter().enumerate() {
        let what = format!("ips[{i}]");
        let ipc = object(&what, ipc)?;
        only_keys(&what, ipc, allowed)?;
        let net = cidr(&format!("{what}.address"), ipc.get("address"))?;
        if with_version {
            let want = if net.is_ipv4() { "4" } else { "6" };
            match ipc.get("version").and_then(Value::as_str) {
                Some(v) if v == want => {}
                other => {
                    return Err(format!(
                        "{what}.version is {other:?}, expected {want:?} for {net}"
                    ))
                }
            }
        }
        if let Some(index) = ipc.get("interface") {
            let index = index
                .as_u64()
                .ok_or_else(|| format!("{what}.interface is not an index: {index}"))?;
            if index as usize >= interfaces {
                return Err(format!(
                    "{what}.interface {index} points past the {interfaces} interfaces"
                ));
            }
        }
        opt_ip(&format!("{what}.gateway"), ipc.get("gateway"))?;
    }
    Ok(())
}

fn shape_v04(obj: &Map<String, Value>) -> Result<(), String> {
    only_keys(
        "result",
        obj,
        &["cniVersion", "interfaces", "ips", "routes", "dns"],
    )?;
    let n = shape_interfaces(obj, &["name", "mac", "sandbox"])?;
    shape_ips(obj, n, true)?;
    shape_routes(array("routes", obj.get("routes"))?, &["dst", "gw"])?;
    shape_dns(obj)
}

fn shape_v1(obj: &Map<String, Value>, version: &str) -> Result<(), String> {
    only_keys(
        "result",
        obj,
        &["cniVersion", "interfaces", "ips", "routes", "dns"],
    )?;
    let n = shape_interfaces(
        obj,
        &["name", "mac", "mtu", "sandbox", "socketPath", "pciID"],
    )?;
    shape_ips(obj, n, false)?;
    let route_keys: &[&str] = if version == "1.0.0" {
        &["dst", "gw"]
    } else {
        &["dst", "gw", "mtu", "advmss", "priority", "table", "scope"]
    };
    shape_routes(array("routes", obj.get("routes"))?, route_keys)?;
    shape_dns(obj)
}

/// The addresses (`addr/prefix`) a result of any version lists.
pub fn result_addresses(result: &Value) -> Vec<String> {
    let mut out: Vec<String> = result["ips"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|ip| ip["address"].as_str().map(str::to_string))
        .collect();
    for key in ["ip4", "ip6"] {
        if let Some(a) = result[key]["ip"].as_str() {
            out.push(a.to_string());
        }
    }
    out
}

/// The same result without what legitimately differs between two
/// attachments or two runtimes: MAC addresses, the host-side veth name
/// (random) and sandbox paths; an empty `dns` object is dropped (Go prints
/// one, the spec allows leaving it out).
pub fn normalize_result(result: &Value) -> Value {
    let mut r = result.clone();
    if let Some(obj) = r.as_object_mut() {
        if obj
            .get("dns")
            .and_then(Value::as_object)
            .is_some_and(Map::is_empty)
        {
            obj.remove("dns");
        }
        if let Some(Value::Array(ifaces)) = obj.get_mut("interfaces") {
            for iface in ifaces {
                if let Some(i) = iface.as_object_mut() {
                    if i.contains_key("mac") {
                        i.insert("mac".into(), Value::String("<mac>".into()));
                    }
                    if i.get("sandbox")
                        .and_then(Value::as_str)
                        .is_some_and(|s| !s.is_empty())
                    {
                        i.insert("sandbox".into(), Value::String("<netns>".into()));
                    }
                    if i.get("name")
                        .and_then(Value::as_str)
                        .is_some_and(|n| n.starts_with("veth"))
                    {
                        i.insert("name".into(), Value::String("<veth>".into()));
                    }
                }
            }
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn accepts_each_versions_layout() {
        let v1 = json!({"cniVersion": "1.0.0",
            "interfaces": [{"name": "eth0", "mac": "aa:bb:cc:dd:ee:ff", "sandbox": "/run/netns/x"}],
            "ips": [{"address": "10.1.0.2/24", "gateway": "10.1.0.1", "interface": 0}],
            "routes": [{"dst": "0.0.0.0/0"}], "dns": {}});
        assert_eq!(check_result_shape("1.0.0", &v1), Ok(()));
        let v04 = json!({"cniVersion": "0.4.0",
            "interfaces": [{"name": "eth0"}],
            "ips": [{"version": "4", "address": "10.1.0.2/24", "interface": 0}]});
        assert_eq!(check_result_shape("0.4.0", &v04), Ok(()));
        let v02 = json!({"cniVersion": "0.2.0", "ip4": {"ip": "10.1.0.2/24", "gateway": "10.1.0.1",
            "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}]}});
        assert_eq!(check_result_shape("0.2.0", &v02), Ok(()));
    }

    #[test]
    fn names_what_is_wrong() {
        let wrong_version = json!({"cniVersion": "1.0.0"});
        assert!(check_result_shape("0.4.0", &wrong_version)
            .unwrap_err()
            .contains("cniVersion"));
        let version_in_1x = json!({"cniVersion": "1.0.0",
            "ips": [{"version": "4", "address": "10.1.0.2/24"}]});
        assert!(check_result_shape("1.0.0", &version_in_1x)
            .unwrap_err()
            .contains("\"version\""));
        let no_version_in_04 = json!({"cniVersion": "0.3.1", "ips": [{"address": "10.1.0.2/24"}]});
        assert!(check_result_shape("0.3.1", &no_version_in_04)
            .unwrap_err()
            .contains("version"));
        let bad_index = json!({"cniVersion": "1.1.0", "interfaces": [],
            "ips": [{"address": "10.1.0.2/24", "interface": 0}]});
        assert!(check_result_shape("1.1.0", &bad_index)
            .unwrap_err()
            .contains("points past"));
        let ips_in_02 = json!({"cniVersion": "0.2.0", "ips": []});
        assert!(check_result_shape("0.2.0", &ips_in_02).is_err());
        let wrong_family = json!({"cniVersion": "0.1.0", "ip4": {"ip": "fd00::2/64"}});
        assert!(check_result_shape("0.1.0", &wrong_family)
            .unwrap_err()
            .contains("family"));
        let route_mtu_in_100 =
            json!({"cniVersion": "1.0.0", "routes": [{"dst": "0.0.0.0/0", "mtu": 1400}]});
        assert!(check_result_shape("1.0.0", &route_mtu_in_100).is_err());
        assert_eq!(
            check_result_shape(
                "1.1.0",
                &json!({"cniVersion": "1.1.0", "routes": [{"dst": "0.0.0.0/0", "mtu": 1400}]})
            ),
            Ok(())
        );
    }

    #[test]
    fn normalizing_hides_only_per_attachment_values() {
        let a = json!({"cniVersion": "1.0.0", "dns": {},
            "interfaces": [{"name": "cni0", "mac": "aa:aa:aa:aa:aa:aa"},
                           {"name": "veth1234abcd", "mac": "bb:bb:bb:bb:bb:bb"},
                           {"name": "eth0", "mac": "cc:cc:cc:cc:cc:cc", "sandbox": "/run/netns/a"}],
            "ips": [{"address": "10.1.0.2/24", "interface": 2}]});
        let b = json!({"cniVersion": "1.0.0",
            "interfaces": [{"name": "cni0", "mac": "dd:aa:aa:aa:aa:aa"},
                           {"name": "veth99999999", "mac": "ee:bb:bb:bb:bb:bb"},
                           {"name": "eth0", "mac": "ff:cc:cc:cc:cc:cc", "sandbox": "/run/netns/b"}],
            "ips": [{"address": "10.1.0.2/24", "interface": 2}]});
        assert_eq!(normalize_result(&a), normalize_result(&b));
        let c = json!({"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.3/24"}]});
        assert_ne!(normalize_result(&a), normalize_result(&c));
    }
}
