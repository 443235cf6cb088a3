//! A pod with two rails, and running sbr (ours or the reference) in it.
//!
//! The pod namespace has `eth0`, a veth to the namespace of rail A, and
//! `net1`, a veth to the namespace of rail B. Each rail answers on its end
//! of the veth and on a "far" address on its loopback, the same far
//! address on both rails, so the pod reaches it through either interface
//! and the rail whose ICMP counters move tells which one carried a ping.
//! The pod's default routes go through eth0 (rail A), as the first plugin
//! of a pod would leave them; sbr then runs for net1.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use conformance::testnet::{PluginCall, PluginOutcome, TestNetns};
use serde_json::{json, Value};

pub const PLUGIN: &str = env!("CARGO_BIN_EXE_sbr");
pub const REFERENCE: &str = "/usr/lib/cni/sbr";

pub const POD_A: &str = "10.10.1.2";
pub const RAIL_A: &str = "10.10.1.1";
pub const POD_B: &str = "10.20.1.2";
pub const RAIL_B: &str = "10.20.1.1";
/// A second address of net1 in another subnet, for two-address tests.
pub const POD_B2: &str = "10.20.101.2";
pub const RAIL_B2: &str = "10.20.101.1";
/// Behind rail B only, routed in the pod through net1 (as the reference
/// test's `192.168.2.0/24 via 192.168.1.2`).
pub const BEHIND_B: &str = "10.21.0.0/16";
/// On the loopback of both rails.
pub const FAR: &str = "198.51.100.1";
pub const POD_A6: &str = "fd10::2";
pub const RAIL_A6: &str = "fd10::1";
pub const POD_B6: &str = "fd20::2";
pub const RAIL_B6: &str = "fd20::1";
pub const FAR6: &str = "2001:db8:ff::1";

pub struct Pod {
    pub pod: TestNetns,
    pub rail_a: TestNetns,
    pub rail_b: TestNetns,
}

/// What to put on the pod's interfaces besides the IPv4 basics.
#[derive(Debug, Clone, Copy, Default)]
pub struct Layout {
    pub ipv6: bool,
    /// `POD_B2` on net1 (and `RAIL_B2` on rail B) too.
    pub second_address: bool,
}

impl Pod {
    pub fn new(layout: Layout) -> Pod {
        let pod = Pod {
            pod: TestNetns::new("sbr-pod"),
            rail_a: TestNetns::new("sbr-ra"),
            rail_b: TestNetns::new("sbr-rb"),
        };
        pod.wire(
            "eth0",
            &pod.rail_a,
            "02:00:00:00:0a:02",
            "02:00:00:00:0a:01",
        );
        pod.wire(
            "net1",
            &pod.rail_b,
            "02:00:00:00:0b:02",
            "02:00:00:00:0b:01",
        );
        for (ns, link, address) in [
            (&pod.pod, "eth0", POD_A),
            (&pod.rail_a, "rail", RAIL_A),
            (&pod.pod, "net1", POD_B),
            (&pod.rail_b, "rail", RAIL_B),
        ] {
            ns.ip(&["addr", "add", &format!("{address}/24"), "dev", link]);
        }
        if layout.second_address {
            pod.pod
                .ip(&["addr", "add", &format!("{POD_B2}/24"), "dev", "net1"]);
            pod.rail_b
                .ip(&["addr", "add", &format!("{RAIL_B2}/24"), "dev", "rail"]);
        }
        for rail in [&pod.rail_a, &pod.rail_b] {
            rail.ip(&["addr", "add", &format!("{FAR}/32"), "dev", "lo"]);
        }
        if layout.ipv6 {
            for (ns, link, address) in [
                (&pod.pod, "eth0", POD_A6),
                (&pod.rail_a, "rail", RAIL_A6),
                (&pod.pod, "net1", POD_B6),
                (&pod.rail_b, "rail", RAIL_B6),
            ] {
                ns.ip(&[
                    "addr",
                    "add",
                    &format!("{address}/64"),
                    "dev",
                    link,
                    "nodad",
                ]);
            }
            for rail in [&pod.rail_a, &pod.rail_b] {
                rail.ip(&["addr", "add", &format!("{FAR6}/128"), "dev", "lo"]);
            }
        }
        for (ns, link) in [
            (&pod.pod, "eth0"),
            (&pod.pod, "net1"),
            (&pod.rail_a, "rail"),
            (&pod.rail_b, "rail"),
        ] {
            ns.ip(&["link", "set", link, "up"]);
        }
        pod.pod
            .ip(&["route", "add", "default", "via", RAIL_A, "dev", "eth0"]);
        pod.pod
            .ip(&["route", "add", BEHIND_B, "via", RAIL_B, "dev", "net1"]);
        if layout.ipv6 {
            pod.pod.ip(&[
                "-6", "route", "add", "default", "via", RAIL_A6, "dev", "eth0",
            ]);
        }
        pod
    }

    /// A veth `name` in the pod whose peer is `rail` in `rail_ns`, both
    /// with fixed MACs so that runs compare (link-local addresses follow).
    fn wire(&self, name: &str, rail_ns: &TestNetns, mac: &str, rail_mac: &str) {
        self.pod.ip(&[
            "link",
            "add",
            name,
            "address",
            mac,
            "type",
            "veth",
            "peer",
            "name",
            "rail",
            "address",
            rail_mac,
            "netns",
            rail_ns.name(),
        ]);
    }

    pub fn path(&self) -> PathBuf {
        self.pod.path()
    }

    /// `ip rule` of the pod, as text.
    pub fn rules(&self) -> String {
        let mut text = self.pod.ip(&["-4", "rule"]);
        text.push_str(&self.pod.ip(&["-6", "rule"]));
        text
    }

    /// `ip -j rule` entries of both families.
    pub fn rules_json(&self) -> Vec<Value> {
        let mut rules = Vec::new();
        for family in ["-4", "-6"] {
            if let Value::Array(list) = self.pod.ip_json(&[family, "rule"]) {
                rules.extend(list);
            }
        }
        rules
    }

    /// Rules with a source: the ones sbr makes.
    pub fn source_rules(&self) -> Vec<Value> {
        self.rules_json()
            .into_iter()
            .filter(|r| r.get("src").is_some_and(|s| s != "all"))
            .collect()
    }

    /// `ip route show table <table>` of one family, as text.
    pub fn table(&self, family: &str, table: &str) -> String {
        self.pod.ip(&[family, "route", "show", "table", table])
    }

    /// Every route of every table, both families, as text.
    pub fn all_routes(&self) -> String {
        let mut text = self.table("-4", "all");
        text.push_str(&self.table("-6", "all"));
        text
    }

    /// Whether `ping` from the pod reaches `target`, from `source` if
    /// given.
    pub fn ping(&self, target: &str, source: Option<&str>) -> bool {
        let mut args = vec!["-c", "1", "-W", "2"];
        if let Some(source) = source {
            args.extend(["-I", source]);
        }
        args.push(target);
        self.pod.exec("ping", &args).status.success()
    }
}

/// Echo requests a namespace has received: `Icmp: InEchos` (IPv4) or
/// `Icmp6InEchos` (IPv6), which count per network namespace.
pub fn echo_requests(ns: &TestNetns, ipv6: bool) -> u64 {
    if ipv6 {
        let out = ns.exec("cat", &["/proc/net/snmp6"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        return text
            .lines()
            .find_map(|l| l.strip_prefix("Icmp6InEchos"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no Icmp6InEchos in {text}"));
    }
    let out = ns.exec("cat", &["/proc/net/snmp"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let icmp: Vec<&str> = text.lines().filter(|l| l.starts_with("Icmp:")).collect();
    let (Some(names), Some(values)) = (icmp.first(), icmp.get(1)) else {
        panic!("no Icmp lines in {text}");
    };
    let column = names
        .split_whitespace()
        .position(|n| n == "InEchos")
        .unwrap_or_else(|| panic!("no InEchos in {names}"));
    values
        .split_whitespace()
        .nth(column)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no InEchos value in {values}"))
}

/// Which rail answered one ping: `Some('A')`, `Some('B')`, or `None` when
/// the ping failed.
pub fn rail_that_answers(pod: &Pod, target: &str, source: Option<&str>) -> Option<char> {
    let ipv6 = target.contains(':');
    let before = (
        echo_requests(&pod.rail_a, ipv6),
        echo_requests(&pod.rail_b, ipv6),
    );
    if !pod.ping(target, source) {
        return None;
    }
    let after = (
        echo_requests(&pod.rail_a, ipv6),
        echo_requests(&pod.rail_b, ipv6),
    );
    match (after.0 - before.0, after.1 - before.1) {
        (1, 0) => Some('A'),
        (0, 1) => Some('B'),
        other => panic!("echo requests seen by rails A and B: {other:?}"),
    }
}

/// net1's addresses and gateways, as the plugin before sbr reports them.
pub fn prev_result(version: &str, netns: &Path, ips: &[(&str, Option<&str>)]) -> Value {
    match version {
        "0.1.0" | "0.2.0" => {
            let mut result = json!({"cniVersion": version});
            for (address, gateway) in ips {
                let key = if address.contains(':') { "ip6" } else { "ip4" };
                let mut config = json!({"ip": address});
                if let Some(gateway) = gateway {
                    config["gateway"] = json!(gateway);
                    config["routes"] = json!([{"dst": default_dst(address), "gw": gateway}]);
                }
                result[key] = config;
            }
            result
        }
        _ => {
            let configs: Vec<Value> = ips
                .iter()
                .map(|(address, gateway)| {
                    let mut ip = json!({"address": address, "interface": 0});
                    if let Some(gateway) = gateway {
                        ip["gateway"] = json!(gateway);
                    }
                    if matches!(version, "0.3.0" | "0.3.1" | "0.4.0") {
                        ip["version"] = json!(if address.contains(':') { "6" } else { "4" });
                    }
                    ip
                })
                .collect();
            let routes: Vec<Value> = ips
                .iter()
                .filter_map(|(address, gateway)| {
                    gateway.map(|gw| json!({"dst": default_dst(address), "gw": gw}))
                })
                .collect();
            json!({
                "routes": routes,
                "cniVersion": version,
                "interfaces": [{
                    "name": "net1",
                    "mac": "02:00:00:00:0b:02",
                    "sandbox": netns.display().to_string()
                }],
                "ips": configs
            })
        }
    }
}

fn default_dst(address: &str) -> &'static str {
    if address.contains(':') {
        "::/0"
    } else {
        "0.0.0.0/0"
    }
}

/// An sbr configuration with `extra` keys and the previous result.
pub fn sbr_conf(version: &str, prev: Option<Value>, extra: Value) -> Value {
    let mut conf = json!({"cniVersion": version, "name": "rail-b", "type": "sbr"});
    if let Some(prev) = prev {
        conf["prevResult"] = prev;
    }
    if let Value::Object(extra) = extra {
        for (k, v) in extra {
            conf[k] = v;
        }
    }
    conf
}

/// The usual configuration: version 1.0.0, net1's IPv4 address with
/// rail B as gateway.
pub fn default_conf(pod: &Pod) -> Value {
    sbr_conf(
        "1.0.0",
        Some(prev_result(
            "1.0.0",
            &pod.path(),
            &[(&format!("{POD_B}/24"), Some(RAIL_B))],
        )),
        json!({}),
    )
}

/// Runs `plugin` for `command` on net1 of the pod.
pub fn call(plugin: &str, command: &str, netns: &Path, conf: &Value) -> PluginOutcome {
    call_ifname(plugin, command, netns, "net1", conf)
}

pub fn call_ifname(
    plugin: &str,
    command: &str,
    netns: &Path,
    ifname: &str,
    conf: &Value,
) -> PluginOutcome {
    PluginCall::new(command)
        .attachment("sbr-test", netns, ifname)
        .stdin_json(conf)
        .run(Path::new(plugin))
}

/// The kernel's rules of a fresh namespace, both families.
pub const KERNEL_RULES: &str = "0:\tfrom all lookup local\n\
32766:\tfrom all lookup main\n\
32767:\tfrom all lookup default\n\
0:\tfrom all lookup local\n\
32766:\tfrom all lookup main\n";
