//! Shared by static's integration tests: the built binary run as a runtime
//! runs it (environment, configuration on stdin), with a namespace of the
//! test's own as `CNI_NETNS` (static never enters it, but the skeleton
//! refuses the plugin's own namespace).

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use conformance::testnet::{PluginCall, PluginOutcome, TestNetns};
use serde_json::{json, Value};

#[allow(unused_imports)]
pub use conformance::testnet::ALL_VERSIONS;

pub const OURS: &str = env!("CARGO_BIN_EXE_static");
pub const NETWORK: &str = "mynet";
pub const CONTAINER_ID: &str = "ctr-0";
pub const IFNAME: &str = "eth0";

/// A network configuration of `version` around `ipam`; `extra` keys are
/// merged at the top level.
pub fn conf(version: &str, ipam: Value, extra: Value) -> Value {
    let mut v = json!({"cniVersion": version, "name": NETWORK, "type": "bridge", "ipam": ipam});
    if let (Some(obj), Some(more)) = (v.as_object_mut(), extra.as_object()) {
        for (k, x) in more {
            obj.insert(k.clone(), x.clone());
        }
    }
    v
}

/// One call of a plugin binary.
pub struct Call {
    pub plugin: PathBuf,
    pub command: String,
    pub netns: Option<PathBuf>,
    pub cni_args: String,
}

impl Call {
    pub fn new(plugin: impl AsRef<Path>, command: &str, netns: &TestNetns) -> Call {
        Call {
            plugin: plugin.as_ref().to_path_buf(),
            command: command.to_string(),
            netns: Some(netns.path()),
            cni_args: String::new(),
        }
    }

    /// A call of our binary.
    pub fn ours(command: &str, netns: &TestNetns) -> Call {
        Call::new(OURS, command, netns)
    }

    pub fn cni_args(mut self, args: &str) -> Call {
        self.cni_args = args.to_string();
        self
    }

    pub fn without_netns(mut self) -> Call {
        self.netns = None;
        self
    }

    pub fn run(&self, conf: &Value) -> PluginOutcome {
        self.run_bytes(&serde_json::to_vec(conf).unwrap())
    }

    pub fn run_bytes(&self, stdin: &[u8]) -> PluginOutcome {
        let mut call = PluginCall::new(&self.command)
            .var("CNI_CONTAINERID", CONTAINER_ID)
            .var("CNI_IFNAME", IFNAME);
        if let Some(netns) = &self.netns {
            call = call.var("CNI_NETNS", netns.display().to_string());
        }
        if !self.cni_args.is_empty() {
            call = call.var("CNI_ARGS", &self.cni_args);
        }
        call.stdin = stdin.to_vec();
        call.run(&self.plugin)
    }
}

/// The result of a successful run.
pub fn ok(out: &PluginOutcome) -> Value {
    out.assert_ok();
    out.json()
}

/// The error of a failed run: (code, msg).
pub fn err(out: &PluginOutcome) -> (u64, String) {
    let code = out.error_code();
    (
        code,
        out.json()["msg"].as_str().unwrap_or_default().to_string(),
    )
}

/// Whether results of `version` have the `ips` list (0.3.0 and later).
pub fn has_ips_list(version: &str) -> bool {
    !matches!(version, "0.1.0" | "0.2.0")
}

/// Whether `ips` entries carry `version` (0.3.x and 0.4.0).
pub fn has_ip_version(version: &str) -> bool {
    matches!(version, "0.3.0" | "0.3.1" | "0.4.0")
}

/// The expected `ips` entry for `address` (with `gateway`) in `version`.
pub fn ip_entry(version: &str, address: &str, gateway: Option<&str>) -> Value {
    let mut entry = json!({"address": address});
    if has_ip_version(version) {
        entry["version"] = json!(if address.contains(':') { "6" } else { "4" });
    }
    if let Some(gw) = gateway {
        entry["gateway"] = json!(gw);
    }
    entry
}
