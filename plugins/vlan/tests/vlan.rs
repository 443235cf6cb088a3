//! The built `vlan` binary, run as a runtime runs it, in namespaces this
//! test makes: a fake host whose `master0` is one end of a veth (the other
//! end in a "peer" namespace), and a pod. Our `host-local` is the IPAM
//! plugin (`cargo build -p host-local` first).
//!
//! This machine's kernel has no 802.1Q links, so what runs here is what
//! needs none: configuration errors, DEL, STATUS and GC, and ADD refused
//! by the kernel with nothing left behind. Should the kernel have them,
//! the same test checks the full ADD instead. Traffic over a real VLAN is
//! tested in the qemu guest (`qemu/guest-tests.sh`).

use std::fs;
use std::process::Command;

use conformance::testnet::{bin_dir, ip, PluginCall, PluginOutcome, TestNetns};
use serde_json::{json, Value};

const PLUGIN: &str = env!("CARGO_BIN_EXE_vlan");
const NETWORK: &str = "vlannet";
const CONTAINER_ID: &str = "ctr-1";
const IFNAME: &str = "net1";

struct Fixture {
    host: TestNetns,
    _peer: TestNetns,
    pod: TestNetns,
    data_dir: tempfile::TempDir,
}

impl Fixture {
    fn new(tag: &str, master_in_pod: bool) -> Fixture {
        let ipam = bin_dir().join("host-local");
        assert!(
            ipam.exists(),
            "{} is missing: run `cargo build -p host-local` first",
            ipam.display()
        );
        let host = TestNetns::new(&format!("{tag}-h"));
        let peer = TestNetns::new(&format!("{tag}-r"));
        let pod = TestNetns::new(&format!("{tag}-p"));
        let master_ns = if master_in_pod { &pod } else { &host };
        master_ns.ip(&[
            "link",
            "add",
            "master0",
            "type",
            "veth",
            "peer",
            "name",
            "peer0",
            "netns",
            peer.name(),
        ]);
        master_ns.ip(&["link", "set", "master0", "up"]);
        Fixture {
            host,
            _peer: peer,
            pod,
            data_dir: tempfile::tempdir().unwrap(),
        }
    }

    fn conf(&self, extra: Value) -> Value {
        let mut conf = json!({
            "cniVersion": "1.1.0",
            "name": NETWORK,
            "type": "vlan",
            "master": "master0",
            "vlanId": 1234,
            "ipam": {
                "type": "host-local",
                "dataDir": self.data_dir.path().display().to_string(),
                "ranges": [[{"subnet": "10.56.0.0/24", "rangeStart": "10.56.0.10"}]],
            },
        });
        for (key, value) in extra.as_object().unwrap() {
            conf[key] = value.clone();
        }
        conf
    }

    fn call(&self, command: &str, conf: &Value) -> PluginCall {
        PluginCall::new(command)
            .attachment(CONTAINER_ID, &self.pod.path(), IFNAME)
            .stdin_json(conf)
            .in_netns(&self.host)
    }

    fn run(&self, command: &str, conf: &Value) -> PluginOutcome {
        self.call(command, conf).run(PLUGIN.as_ref())
    }

    fn leases(&self) -> Vec<String> {
        let Ok(entries) = fs::read_dir(self.data_dir.path().join(NETWORK)) else {
            return Vec::new();
        };
        entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
            .collect()
    }

    fn extra_links(ns: &TestNetns) -> Vec<String> {
        ns.links()
            .into_iter()
            .filter(|l| l != "lo" && l != "master0")
            .collect()
    }

    fn assert_nothing_left(&self) {
        assert_eq!(Fixture::extra_links(&self.pod), Vec::<String>::new());
        assert_eq!(Fixture::extra_links(&self.host), Vec::<String>::new());
        assert_eq!(self.leases(), Vec::<String>::new());
    }
}

/// Whether this kernel makes 802.1Q links, tried in a namespace of its own.
fn kernel_has_vlan() -> bool {
    let scratch = TestNetns::new("vl-probe");
    scratch.ip(&["link", "add", "p0", "type", "veth", "peer", "name", "p1"]);
    Command::new("ip")
        .args([
            "-n",
            scratch.name(),
            "link",
            "add",
            "link",
            "p0",
            "name",
            "p0.5",
        ])
        .args(["type", "vlan", "id", "5"])
        .output()
        .map(|out| out.status.success())
        .unwrap_or(false)
}

/// ADD on a kernel without 802.1Q is a clean CNI error (code 50, naming
/// the module) with nothing made and no lease taken; with linkInContainer
/// too. On a kernel that has them, ADD/CHECK/DEL work instead.
#[test]
fn add_where_the_kernel_lacks_vlan() {
    let has_vlan = kernel_has_vlan();
    for master_in_pod in [false, true] {
        let fx = Fixture::new("vl-k", master_in_pod);
        let conf = fx.conf(json!({"linkInContainer": master_in_pod}));
        let out = fx.run("ADD", &conf);
        if has_vlan {
            out.assert_ok();
            let result = out.json();
            fx.run("CHECK", &with_prev(&conf, &result)).assert_ok();
            fx.run("DEL", &conf).assert_ok();
            fx.assert_nothing_left();
            continue;
        }
        assert_eq!(out.error_code(), 50, "{}", out.stdout);
        let msg = out.json()["msg"].as_str().unwrap().to_string();
        assert!(
            msg.starts_with("failed to create vlan: this kernel has no vlan links")
                && msg.contains("\"8021q\""),
            "{msg}"
        );
        fx.assert_nothing_left();
    }
}

fn with_prev(conf: &Value, prev: &Value) -> Value {
    let mut conf = conf.clone();
    conf["prevResult"] = prev.clone();
    conf
}

/// Configuration errors: code 7, the reference's texts, nothing made.
#[test]
fn bad_configuration_changes_nothing() {
    let fx = Fixture::new("vl-bad", false);
    let mut no_master = fx.conf(json!({}));
    no_master.as_object_mut().unwrap().remove("master");
    let mut no_ipam = fx.conf(json!({}));
    no_ipam.as_object_mut().unwrap().remove("ipam");
    let cases = [
        (no_master, "\"master\" field is required"),
        (no_ipam, "\"ipam\" with a \"type\" is required"),
        (fx.conf(json!({"vlanId": 4095})), "invalid VLAN ID 4095"),
        (fx.conf(json!({"vlanId": -1})), "invalid VLAN ID -1"),
        (
            fx.conf(json!({"mtu": 1600})),
            "invalid MTU 1600, must be [0, master MTU(1500)]",
        ),
        (
            fx.conf(json!({"mtu": -100})),
            "invalid MTU -100, must be [0, master MTU(1500)]",
        ),
        (
            fx.conf(json!({"master": "nothere0"})),
            "failed to lookup master \"nothere0\"",
        ),
        // The master is on the host, not in the pod.
        (
            fx.conf(json!({"linkInContainer": true})),
            "failed to lookup master \"master0\": no such link in the container",
        ),
        (fx.conf(json!({"vlanId": "12"})), "failed to load netconf"),
    ];
    for (conf, message) in cases {
        let out = fx.run("ADD", &conf);
        assert_eq!(out.error_code(), 7, "{conf}: {}", out.stdout);
        let msg = out.json()["msg"].as_str().unwrap().to_string();
        assert!(msg.contains(message), "{msg}");
        fx.assert_nothing_left();
    }
    // STATUS says what is wrong, as ADD would.
    let mut no_ipam = fx.conf(json!({}));
    no_ipam.as_object_mut().unwrap().remove("ipam");
    assert_eq!(fx.run("STATUS", &no_ipam).error_code(), 7);
}

/// DEL is idempotent: no link, twice, without the netns (with and
/// without linkInContainer), without CNI_NETNS, with the master gone; it
/// still releases a lease it finds.
#[test]
fn del_is_idempotent() {
    let fx = Fixture::new("vl-del", false);
    let conf = fx.conf(json!({}));
    // A lease of this attachment, as a crashed ADD could leave it.
    let ipam_add = fx.call("ADD", &conf).run(&bin_dir().join("host-local"));
    ipam_add.assert_ok();
    assert_eq!(fx.leases(), vec!["10.56.0.10".to_string()]);

    fx.run("DEL", &conf).assert_ok();
    assert!(fx.leases().is_empty());
    fx.run("DEL", &conf).assert_ok();

    // The master gone: the reference fails here, DEL must not.
    fx.host.ip(&["link", "del", "master0"]);
    fx.run("DEL", &conf).assert_ok();

    // A link named CNI_IFNAME in the pod goes.
    fx.pod
        .ip(&["link", "add", IFNAME, "type", "veth", "peer", "name", "x0"]);
    fx.run("DEL", &conf).assert_ok();
    assert!(!fx.pod.links().contains(&IFNAME.to_string()));

    // The netns gone, with linkInContainer as well.
    let pod_path = fx.pod.path();
    ip(&["netns", "delete", fx.pod.name()]);
    for extra in [json!({}), json!({"linkInContainer": true})] {
        fx.run("DEL", &fx.conf(extra)).assert_ok();
    }
    assert!(!pod_path.exists());
    // No CNI_NETNS at all.
    PluginCall::new("DEL")
        .var("CNI_CONTAINERID", CONTAINER_ID)
        .var("CNI_IFNAME", IFNAME)
        .stdin_json(&conf)
        .in_netns(&fx.host)
        .run(PLUGIN.as_ref())
        .assert_ok();
    // A configuration ADD would refuse can still be deleted.
    fx.run("DEL", &fx.conf(json!({"vlanId": 9999}))).assert_ok();
}

/// STATUS and GC go to the IPAM plugin.
#[test]
fn status_and_gc_ask_ipam() {
    let fx = Fixture::new("vl-gc", false);
    let conf = fx.conf(json!({}));
    fx.run("STATUS", &conf).assert_ok();
    fx.call("ADD", &conf)
        .run(&bin_dir().join("host-local"))
        .assert_ok();
    assert_eq!(fx.leases().len(), 1);
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([]);
    PluginCall::new("GC")
        .stdin_json(&gc)
        .in_netns(&fx.host)
        .run(PLUGIN.as_ref())
        .assert_ok();
    assert!(fx.leases().is_empty());
}
