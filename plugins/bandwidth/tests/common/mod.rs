//! A pod as the reference's tests build one: a fake host namespace and a
//! container namespace joined by a veth (`host-veth` ↔ `container-veth`,
//! host MTU 1024 unless said), and the plugin run in the host namespace as
//! a runtime runs it.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use conformance::testnet::{PluginCall, PluginOutcome, TestNetns};
use serde_json::{json, Value};

pub const PLUGIN: &str = env!("CARGO_BIN_EXE_bandwidth");
pub const REFERENCE: &str = "/usr/lib/cni/bandwidth";
pub const NETWORK: &str = "cni-plugin-bandwidth-test";
pub const CONTAINER_ID: &str = "dummy";
pub const HOST_VETH: &str = "host-veth";
pub const CONTAINER_VETH: &str = "container-veth";
pub const HOST_IP: &str = "10.77.0.1";
pub const CONTAINER_IP: &str = "10.77.0.2";
/// Versions the plugin speaks (the reference's: 0.3.0 on).
pub const VERSIONS: [&str; 5] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

pub struct Pod {
    pub host: TestNetns,
    pub container: TestNetns,
    pub container_id: String,
}

impl Pod {
    pub fn new(tag: &str) -> Pod {
        Pod::with_mtu(tag, 1024)
    }

    pub fn with_mtu(tag: &str, mtu: u32) -> Pod {
        let host = TestNetns::new(&format!("{tag}h"));
        let container = TestNetns::new(&format!("{tag}c"));
        let mtu = mtu.to_string();
        host.ip(&[
            "link",
            "add",
            HOST_VETH,
            "mtu",
            &mtu,
            "type",
            "veth",
            "peer",
            "name",
            CONTAINER_VETH,
            "mtu",
            &mtu,
            "netns",
            container.name(),
        ]);
        host.ip(&["addr", "add", &format!("{HOST_IP}/24"), "dev", HOST_VETH]);
        host.ip(&["link", "set", HOST_VETH, "up"]);
        container.ip(&[
            "addr",
            "add",
            &format!("{CONTAINER_IP}/24"),
            "dev",
            CONTAINER_VETH,
        ]);
        container.ip(&["link", "set", CONTAINER_VETH, "up"]);
        Pod {
            host,
            container,
            container_id: CONTAINER_ID.to_string(),
        }
    }

    /// The previous result a veth plugin would have given, in `version`.
    pub fn prev_result(&self, version: &str) -> Value {
        let sandbox = self.container.path().display().to_string();
        let mut ip = json!({"address": format!("{CONTAINER_IP}/24"), "interface": 1});
        if version.starts_with("0.") {
            ip["version"] = json!("4");
        }
        json!({
            "cniVersion": version,
            "interfaces": [
                {"name": HOST_VETH},
                {"name": CONTAINER_VETH, "sandbox": sandbox},
            ],
            "ips": [ip],
        })
    }

    /// A configuration with `entry`'s keys at the top level and a
    /// previous result.
    pub fn conf(&self, version: &str, entry: Value) -> Value {
        let mut conf = json!({
            "cniVersion": version,
            "name": NETWORK,
            "type": "bandwidth",
            "prevResult": self.prev_result(version),
        });
        if let (Some(conf), Some(entry)) = (conf.as_object_mut(), entry.as_object()) {
            conf.extend(entry.clone());
        }
        conf
    }

    pub fn call(&self, command: &str, conf: &Value) -> PluginOutcome {
        self.call_with(Path::new(PLUGIN), command, conf)
    }

    pub fn call_with(&self, plugin: &Path, command: &str, conf: &Value) -> PluginOutcome {
        PluginCall::new(command)
            .attachment(&self.container_id, &self.container.path(), CONTAINER_VETH)
            .stdin_json(conf)
            .in_netns(&self.host)
            .run(plugin)
    }

    /// `tc -raw -j qdisc show` in the host namespace (raw: limits and raw
    /// buffers are listed).
    pub fn qdiscs(&self) -> Vec<Value> {
        tc_json(&self.host, &["-raw", "qdisc", "show"])
    }

    pub fn qdiscs_of(&self, dev: &str) -> Vec<Value> {
        self.qdiscs()
            .into_iter()
            .filter(|q| q["dev"] == dev)
            .collect()
    }

    pub fn ingress_filters(&self) -> Vec<Value> {
        tc_json(&self.host, &["filter", "show", "dev", HOST_VETH, "ingress"])
            .into_iter()
            .filter(|f| f["options"]["match"].is_object())
            .collect()
    }

    /// The links of the host namespace whose name starts with `bwp`.
    pub fn ifbs(&self) -> Vec<String> {
        self.host
            .links()
            .into_iter()
            .filter(|l| l.starts_with("bwp"))
            .collect()
    }

    pub fn link(&self, name: &str) -> Value {
        let links = self.host.ip_json(&["-d", "link", "show", name]);
        links[0].clone()
    }
}

/// `tc -n <ns> -j <args>` parsed; an empty list when it prints nothing.
pub fn tc_json(ns: &TestNetns, args: &[&str]) -> Vec<Value> {
    let out = std::process::Command::new("tc")
        .args(["-n", ns.name(), "-j"])
        .args(args)
        .output()
        .expect("run tc");
    assert!(
        out.status.success(),
        "tc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    if text.trim().is_empty() {
        return Vec::new();
    }
    let value: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("tc -j {args:?}: {e}: {text}"));
    value.as_array().cloned().unwrap_or_default()
}

/// The tbf qdiscs among `qdiscs`, as (rate, limit) in bytes.
pub fn tbf_rate_limit(qdisc: &Value) -> (u64, u64) {
    assert_eq!(qdisc["kind"], "tbf", "{qdisc}");
    (
        qdisc["options"]["rate"].as_u64().unwrap_or_default(),
        qdisc["options"]["limit"].as_u64().unwrap_or_default(),
    )
}

pub fn reference_plugin() -> PathBuf {
    let path = PathBuf::from(REFERENCE);
    assert!(
        path.is_file(),
        "{REFERENCE} is missing: the side-by-side tests need Debian's containernetworking-plugins"
    );
    path
}

/// Asserts a failed call with `code` and `msg`.
pub fn assert_error(outcome: &PluginOutcome, code: u64, msg: &str) {
    assert_eq!(outcome.error_code(), code, "{}", outcome.stdout);
    assert_eq!(outcome.json()["msg"], msg, "{}", outcome.stdout);
}
