//! Shared by the bridge plugin's integration tests: a fake host namespace
//! and a pod namespace per test, the built `bridge` binary run inside the
//! fake host (so the bridge, forwarding sysctls and firewall rules live
//! there, never in the machine's own namespace), and our `host-local` as
//! the IPAM plugin (`cargo build -p host-local` first).

#![allow(dead_code)]

use std::path::PathBuf;

use conformance::testnet::{bin_dir, PluginCall, PluginOutcome, TestNetns};
use serde_json::{json, Value};

pub use conformance::testnet::ALL_VERSIONS;

pub const PLUGIN: &str = env!("CARGO_BIN_EXE_bridge");
pub const BRIDGE: &str = "cni-br0";
pub const NETWORK: &str = "testConfig";
pub const CONTAINER_ID: &str = "dummy-0";
pub const IFNAME: &str = "eth0";

/// The versions whose result layout has `interfaces` (0.3.0 and later).
pub fn has_interfaces(version: &str) -> bool {
    !matches!(version, "0.1.0" | "0.2.0")
}

pub fn has_check(version: &str) -> bool {
    matches!(version, "0.4.0" | "1.0.0" | "1.1.0")
}

/// A fake host, a pod and an IPAM data directory.
pub struct Fixture {
    pub host: TestNetns,
    pub pod: TestNetns,
    pub data_dir: tempfile::TempDir,
}

impl Fixture {
    pub fn new(tag: &str) -> Fixture {
        let ipam = bin_dir().join("host-local");
        assert!(
            ipam.exists(),
            "{} is missing: run `cargo build -p host-local` first",
            ipam.display()
        );
        Fixture {
            host: TestNetns::new(&format!("{tag}-h")),
            pod: TestNetns::new(&format!("{tag}-p")),
            data_dir: tempfile::tempdir().unwrap(),
        }
    }

    /// Another pod namespace on the same host.
    pub fn new_pod(&self, tag: &str) -> TestNetns {
        TestNetns::new(tag)
    }

    /// An `ipam` section for host-local with one range set per subnet.
    pub fn ipam(&self, subnets: &[&str]) -> Value {
        let ranges: Vec<Value> = subnets.iter().map(|s| json!([{"subnet": s}])).collect();
        json!({
            "type": "host-local",
            "dataDir": self.data_dir.path().display().to_string(),
            "ranges": ranges,
        })
    }

    pub fn call(&self, command: &str, conf: &Value) -> PluginCall {
        self.call_for(command, conf, CONTAINER_ID, &self.pod, IFNAME)
    }

    pub fn call_for(
        &self,
        command: &str,
        conf: &Value,
        container_id: &str,
        pod: &TestNetns,
        ifname: &str,
    ) -> PluginCall {
        PluginCall::new(command)
            .attachment(container_id, &pod.path(), ifname)
            .stdin_json(conf)
            .in_netns(&self.host)
    }

    pub fn run(&self, call: PluginCall) -> PluginOutcome {
        call.run(PLUGIN.as_ref())
    }

    pub fn add(&self, conf: &Value) -> PluginOutcome {
        self.run(self.call("ADD", conf))
    }

    pub fn del(&self, conf: &Value) -> PluginOutcome {
        self.run(self.call("DEL", conf))
    }

    pub fn check(&self, conf: &Value) -> PluginOutcome {
        self.run(self.call("CHECK", conf))
    }

    /// Addresses host-local has leased in this test's network.
    pub fn leases(&self) -> Vec<String> {
        conformance::testnet::host_local_leases(&self.data_dir.path().join(NETWORK))
    }

    pub fn data_path(&self) -> PathBuf {
        self.data_dir.path().to_path_buf()
    }

    /// `ip -d -j link show <dev>` in the host namespace.
    pub fn host_link(&self, dev: &str) -> Value {
        self.host.ip_json(&["-d", "link", "show", "dev", dev])[0].clone()
    }

    pub fn host_has_link(&self, dev: &str) -> bool {
        self.host.links().iter().any(|l| l == dev)
    }

    /// Non-link-local addresses of `dev` in `ns`, as `addr/prefix`.
    pub fn addresses(ns: &TestNetns, dev: &str) -> Vec<String> {
        let v = ns.ip_json(&["addr", "show", "dev", dev]);
        let mut out: Vec<String> = v[0]["addr_info"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|a| a["scope"] != "link")
                    .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
                    .collect()
            })
            .unwrap_or_default();
        out.sort();
        out
    }

    /// Links of the host namespace whose name starts with `veth`.
    pub fn host_veths(&self) -> Vec<String> {
        self.host
            .links()
            .into_iter()
            .filter(|l| l.starts_with("veth"))
            .collect()
    }
}

/// A configuration of the given version with extra keys merged in.
pub fn conf(version: &str, extra: Value) -> Value {
    let mut v = json!({
        "cniVersion": version,
        "name": NETWORK,
        "type": "bridge",
        "bridge": BRIDGE,
    });
    if let (Some(obj), Some(more)) = (v.as_object_mut(), extra.as_object()) {
        for (k, x) in more {
            obj.insert(k.clone(), x.clone());
        }
    }
    v
}

/// Adds a prevResult (what a runtime passes to CHECK and DEL).
pub fn with_prev_result(mut conf: Value, result: &Value) -> Value {
    conf["prevResult"] = result.clone();
    conf
}

/// Pings until it answers (an IPv6 gateway address needs its DAD to
/// finish first), at most a few seconds.
pub fn ping_eventually(from: &TestNetns, addr: &str) -> bool {
    (0..5).any(|_| from.ping(addr))
}

/// `sysctl -n` inside `ns`.
pub fn sysctl(ns: &TestNetns, key: &str) -> String {
    let out = ns.exec("sysctl", &["-n", key]);
    assert!(out.status.success(), "sysctl {key}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `sysctl -w key=value` inside `ns`.
pub fn set_sysctl(ns: &TestNetns, key: &str, value: &str) {
    let out = ns.exec("sysctl", &["-q", "-w", &format!("{key}={value}")]);
    assert!(out.status.success(), "sysctl -w {key}={value}: {out:?}");
}

pub fn is_mac(v: &Value) -> bool {
    v.as_str()
        .is_some_and(|m| m.len() == 17 && m.split(':').count() == 6)
}

/// Checks the ADD result's layout for `version`: interfaces bridge, host
/// veth, container (0.3.0 and later), each expected `(address, gateway)`
/// on interface 2, or the ip4/ip6 layout of 0.1.0/0.2.0.
pub fn assert_result(
    version: &str,
    result: &Value,
    pod: &TestNetns,
    expected: &[(&str, Option<&str>)],
) {
    assert_eq!(result["cniVersion"], version, "{result}");
    if !has_interfaces(version) {
        assert!(result.get("interfaces").is_none(), "{result}");
        for (address, gateway) in expected {
            let key = if address.contains(':') { "ip6" } else { "ip4" };
            assert_eq!(result[key]["ip"], *address, "{result}");
            if let Some(gw) = gateway {
                assert_eq!(result[key]["gateway"], *gw, "{result}");
            }
        }
        return;
    }
    let interfaces = result["interfaces"].as_array().unwrap();
    assert_eq!(interfaces.len(), 3, "{result}");
    assert_eq!(interfaces[0]["name"], BRIDGE);
    assert!(is_mac(&interfaces[0]["mac"]), "{result}");
    assert!(interfaces[0].get("sandbox").is_none());
    let host_veth = interfaces[1]["name"].as_str().unwrap();
    assert!(
        host_veth.starts_with("veth") && host_veth.len() == 12,
        "{host_veth}"
    );
    assert!(is_mac(&interfaces[1]["mac"]), "{result}");
    assert_eq!(interfaces[2]["name"], IFNAME);
    assert!(is_mac(&interfaces[2]["mac"]), "{result}");
    assert_eq!(
        interfaces[2]["sandbox"],
        pod.path().display().to_string(),
        "{result}"
    );
    let ips = result["ips"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    assert_eq!(ips.len(), expected.len(), "{result}");
    for (ip, (address, gateway)) in ips.iter().zip(expected) {
        assert_eq!(ip["address"], *address, "{result}");
        assert_eq!(ip["interface"], 2, "{result}");
        if let Some(gw) = gateway {
            assert_eq!(ip["gateway"], *gw, "{result}");
        }
        // 0.3.x/0.4.0 name the family; 1.x does not.
        let family = if address.contains(':') { "6" } else { "4" };
        if version.starts_with("0.") {
            assert_eq!(ip["version"], family, "{result}");
        } else {
            assert!(ip.get("version").is_none(), "{result}");
        }
    }
}
