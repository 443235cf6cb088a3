//! End to end: our `bridge` plugin with `"ipam": {"type": "static"}` puts
//! two pods on one bridge in a fake host namespace, one pod addressed by
//! `ipam.addresses`, the other by `runtimeConfig.ips`; the addresses and
//! routes static returned are on the pods' interfaces, and the pods reach
//! each other and the gateway over IPv4 and IPv6.

mod common;

use common::{ok, NETWORK};
use conformance::testnet::{bin_dir, PluginCall, PluginOutcome, TestNetns};
use serde_json::{json, Value};

const BRIDGE: &str = "cni-st0";
const IFNAME: &str = "eth0";

fn bridge_binary() -> std::path::PathBuf {
    let path = bin_dir().join("bridge");
    assert!(
        path.exists(),
        "{} is missing: run `cargo build -p bridge` first",
        path.display()
    );
    // The bridge finds static through CNI_PATH, which is the same folder.
    assert!(
        bin_dir().join("static").exists(),
        "static is missing from {}: run `cargo build -p static`",
        bin_dir().display()
    );
    path
}

fn bridge_conf(extra: Value) -> Value {
    let mut c = json!({
        "cniVersion": "1.0.0",
        "name": NETWORK,
        "type": "bridge",
        "bridge": BRIDGE,
        "isGateway": true,
        "capabilities": {"ips": true},
        "ipam": {
            "type": "static",
            "addresses": [
                {"address": "10.77.0.2/24", "gateway": "10.77.0.1"},
                {"address": "fd77::2/64", "gateway": "fd77::1"}
            ],
            "routes": [
                {"dst": "0.0.0.0/0"},
                {"dst": "::/0"},
                {"dst": "192.0.2.0/24", "gw": "10.77.0.1"}
            ],
            "dns": {"nameservers": ["10.77.0.53"], "search": ["pods.example"]}
        }
    });
    if let (Some(obj), Some(more)) = (c.as_object_mut(), extra.as_object()) {
        for (k, v) in more {
            obj.insert(k.clone(), v.clone());
        }
    }
    c
}

fn run_bridge(
    host: &TestNetns,
    command: &str,
    pod: &TestNetns,
    cid: &str,
    c: &Value,
) -> PluginOutcome {
    PluginCall::new(command)
        .attachment(cid, &pod.path(), IFNAME)
        .stdin_json(c)
        .in_netns(host)
        .run(&bridge_binary())
}

/// `addr/prefix` of the global addresses of `eth0` in `pod`, sorted.
fn addresses(pod: &TestNetns) -> Vec<String> {
    let v = pod.ip_json(&["addr", "show", "dev", IFNAME]);
    let mut out: Vec<String> = v[0]["addr_info"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["scope"] == "global")
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap_or(""), a["prefixlen"]))
        .collect();
    out.sort();
    out
}

/// The gateway of the route to `dst` in `pod` (`-4` or `-6`).
fn route_gateway(pod: &TestNetns, family: &str, dst: &str) -> Option<String> {
    pod.ip_json(&[family, "route", "show", dst])
        .as_array()?
        .iter()
        .find_map(|r| r["gateway"].as_str().map(str::to_string))
}

/// A few tries: IPv6 neighbours need their DAD and discovery first.
fn pings(from: &TestNetns, to: &str) -> bool {
    (0..5).any(|_| from.ping(to))
}

#[test]
fn two_pods_on_a_bridge_reach_each_other_with_static_addresses() {
    let host = TestNetns::new("st-e2e-h");
    let pod_a = TestNetns::new("st-e2e-a");
    let pod_b = TestNetns::new("st-e2e-b");

    // Pod A: the configuration's addresses.
    let conf_a = bridge_conf(json!({}));
    let result_a = ok(&run_bridge(&host, "ADD", &pod_a, "pod-a", &conf_a));
    assert_eq!(
        result_a["ips"],
        json!([
            {"interface": 2, "address": "10.77.0.2/24", "gateway": "10.77.0.1"},
            {"interface": 2, "address": "fd77::2/64", "gateway": "fd77::1"}
        ])
    );
    assert_eq!(
        result_a["dns"],
        json!({"nameservers": ["10.77.0.53"], "search": ["pods.example"]})
    );

    // Pod B: the runtime's addresses, which replace the configuration's.
    let conf_b = bridge_conf(json!({"runtimeConfig": {"ips": ["10.77.0.3/24", "fd77::3/64"]}}));
    let result_b = ok(&run_bridge(&host, "ADD", &pod_b, "pod-b", &conf_b));
    let addresses_b: Vec<&str> = result_b["ips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|ip| ip["address"].as_str().unwrap())
        .collect();
    assert_eq!(addresses_b, ["10.77.0.3/24", "fd77::3/64"]);

    // What static returned is on the interfaces, routes included.
    assert_eq!(addresses(&pod_a), ["10.77.0.2/24", "fd77::2/64"]);
    assert_eq!(addresses(&pod_b), ["10.77.0.3/24", "fd77::3/64"]);
    for pod in [&pod_a, &pod_b] {
        assert_eq!(
            route_gateway(pod, "-4", "default").as_deref(),
            Some("10.77.0.1")
        );
        assert_eq!(
            route_gateway(pod, "-6", "default").as_deref(),
            Some("fd77::1")
        );
        assert_eq!(
            route_gateway(pod, "-4", "192.0.2.0/24").as_deref(),
            Some("10.77.0.1")
        );
    }

    // Traffic: pod to pod and pod to the bridge's gateway, both families.
    for (from, to) in [
        (&pod_a, "10.77.0.3"),
        (&pod_b, "10.77.0.2"),
        (&pod_a, "10.77.0.1"),
        (&pod_a, "fd77::3"),
        (&pod_b, "fd77::2"),
        (&pod_b, "fd77::1"),
    ] {
        assert!(pings(from, to), "{} cannot reach {to}", from.name());
    }

    // CHECK through the bridge asks static too.
    for (pod, cid, c, result) in [
        (&pod_a, "pod-a", &conf_a, &result_a),
        (&pod_b, "pod-b", &conf_b, &result_b),
    ] {
        let mut with_prev = c.clone();
        with_prev["prevResult"] = result.clone();
        run_bridge(&host, "CHECK", pod, cid, &with_prev).assert_ok();
    }

    // DEL: the pods' interfaces go, twice is fine.
    for (pod, cid, c) in [(&pod_a, "pod-a", &conf_a), (&pod_b, "pod-b", &conf_b)] {
        for _ in 0..2 {
            run_bridge(&host, "DEL", pod, cid, c).assert_ok();
        }
        assert_eq!(pod.links(), ["lo"]);
    }
}
