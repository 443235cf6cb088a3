//! Shared by the firewall plugin's tests: a fake host namespace the plugin
//! runs in (so every rule lands there, never in the machine's own
//! namespace), a container namespace for `CNI_NETNS`, configurations
//! with the reference test's prevResult, and readers of the host's rules.

#![allow(dead_code)]

use std::path::PathBuf;

use conformance::testnet::{PluginCall, PluginOutcome, TestNetns};
use serde_json::{json, Value};

pub const PLUGIN: &str = env!("CARGO_BIN_EXE_firewall");
pub const REFERENCE: &str = "/usr/lib/cni/firewall";
pub const NETWORK: &str = "test";
pub const CONTAINER_ID: &str = "dummy";
pub const IFNAME: &str = "eth0";
/// The versions the plugin speaks (the reference's: 0.4.0 and later).
pub const VERSIONS: [&str; 3] = ["0.4.0", "1.0.0", "1.1.0"];
pub const V4: &str = "10.0.0.2";
pub const V6: &str = "2001:db8:1:2::1";

/// The reference test's previous result: one interface, an IPv4 and an
/// IPv6 address.
pub fn prev_result(version: &str, v4: &str, v6: &str) -> Value {
    let mut ips = vec![
        json!({"address": format!("{v4}/24"), "gateway": "10.0.0.1", "interface": 0}),
        json!({"address": format!("{v6}/64"), "gateway": "2001:db8:1:2::", "interface": 0}),
    ];
    if version == "0.4.0" {
        ips[0]["version"] = json!("4");
        ips[1]["version"] = json!("6");
    }
    json!({
        "cniVersion": version,
        "interfaces": [{"name": IFNAME, "sandbox": "/var/run/netns/whatever"}],
        "ips": ips,
    })
}

/// A firewall configuration with `extra` keys merged in.
pub fn conf(version: &str, extra: Value) -> Value {
    let mut conf = json!({
        "cniVersion": version,
        "name": NETWORK,
        "type": "firewall",
    });
    if let (Some(obj), Some(extra)) = (conf.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            obj.insert(k.clone(), v.clone());
        }
    }
    conf
}

pub fn with_prev(mut conf: Value, prev: Value) -> Value {
    conf["prevResult"] = prev;
    conf
}

/// A fake host and a container.
pub struct Fixture {
    pub host: TestNetns,
    pub container: TestNetns,
    /// `DBUS_SYSTEM_BUS_ADDRESS` for the plugin: a bus without firewalld
    /// unless a test sets its own, so the machine's bus never decides.
    pub system_bus: String,
}

impl Fixture {
    pub fn new(tag: &str) -> Fixture {
        Fixture {
            host: TestNetns::new(&format!("{tag}-h")),
            container: TestNetns::new(&format!("{tag}-c")),
            system_bus: "unix:path=/nonexistent/cnitest-no-bus".to_string(),
        }
    }

    pub fn call(&self, command: &str, conf: &Value) -> PluginCall {
        self.call_for(command, conf, CONTAINER_ID, IFNAME)
    }

    pub fn call_for(
        &self,
        command: &str,
        conf: &Value,
        container_id: &str,
        ifname: &str,
    ) -> PluginCall {
        PluginCall::new(command)
            .attachment(container_id, &self.container.path(), ifname)
            .var("DBUS_SYSTEM_BUS_ADDRESS", &self.system_bus)
            .stdin_json(conf)
            .in_netns(&self.host)
    }

    pub fn run(&self, command: &str, conf: &Value) -> PluginOutcome {
        self.call(command, conf).run(&PathBuf::from(PLUGIN))
    }

    pub fn run_reference(&self, command: &str, conf: &Value) -> PluginOutcome {
        self.call(command, conf).run(&PathBuf::from(REFERENCE))
    }

    /// The host's filter table of one family, as `iptables-save` prints
    /// its rules (`-A …` lines only).
    pub fn rules(&self, save: &str) -> Vec<String> {
        let out = self.host.exec(save, &["-t", "filter"]);
        assert!(out.status.success(), "{save}: {:?}", out);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with("-A "))
            .map(str::to_string)
            .collect()
    }

    /// The chains of one family's filter table.
    pub fn chains(&self, save: &str) -> Vec<String> {
        let out = self.host.exec(save, &["-t", "filter"]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.strip_prefix(':'))
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_string)
            .collect()
    }

    /// `nft list table inet cni_plugins_firewall` in the host, or "" when
    /// the table does not exist.
    pub fn nft_table(&self) -> String {
        let out = self
            .host
            .exec("nft", &["list", "table", "inet", "cni_plugins_firewall"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn nft(&self, args: &[&str]) {
        let out = self.host.exec("nft", args);
        assert!(out.status.success(), "nft {args:?}: {out:?}");
    }

    pub fn sysctl(&self, key: &str, value: &str) {
        let out = self
            .host
            .exec("sysctl", &["-q", "-w", &format!("{key}={value}")]);
        assert!(out.status.success(), "sysctl {key}: {out:?}");
    }
}

/// The reference's per-address rules, as saved.
pub fn address_rules(host: &str) -> [String; 2] {
    [
        format!("-A CNI-FORWARD -d {host} -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"),
        format!("-A CNI-FORWARD -s {host} -j ACCEPT"),
    ]
}

pub fn forward_jump() -> String {
    "-A FORWARD -m comment --comment \"CNI firewall plugin rules\" -j CNI-FORWARD".to_string()
}

pub fn admin_jump(admin: &str) -> String {
    format!(
        "-A CNI-FORWARD -m comment --comment \"CNI firewall plugin admin overrides\" -j {admin}"
    )
}

/// The marker of an attachment's address.
pub fn marker(host: &str, container_id: &str) -> String {
    format!(
        "-A CNI-FW-ATTACHMENTS -d {host} -m comment --comment \"cni firewall net={NETWORK} id={container_id} if={IFNAME}\" -j RETURN"
    )
}

/// The result's IPs, to compare a passed-through result with the input.
pub fn ips_of(result: &Value) -> Value {
    result["ips"].clone()
}
