//! The built `ipvlan` binary, run as a runtime runs it, in namespaces this
//! test makes: a fake host whose `master0` is one end of a veth (the other
//! end in a "peer" namespace), and a pod. Our `host-local` is the IPAM
//! plugin (`cargo build -p host-local` first).
//!
//! This machine's kernel has no ipvlan, so what runs here is what needs
//! none: configuration errors, DEL, STATUS and GC, and ADD refused by the
//! kernel with nothing left behind. Should the kernel have ipvlan, the
//! same test checks the full ADD instead. Traffic over real ipvlan links
//! is tested in the qemu guest (`qemu/guest-tests.sh`).

use std::fs;
use std::process::Command;

use conformance::testnet::{bin_dir, ip, PluginCall, PluginOutcome, TestNetns};
use serde_json::{json, Value};

const PLUGIN: &str = env!("CARGO_BIN_EXE_ipvlan");
const NETWORK: &str = "ipvlnet";
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
            "type": "ipvlan",
            "master": "master0",
            "ipam": {
                "type": "host-local",
                "dataDir": self.data_dir.path().display().to_string(),
                "ranges": [[{"subnet": "10.57.0.0/24", "rangeStart": "10.57.0.10"}]],
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

/// Whether this kernel makes ipvlan links, tried in a namespace of its own.
fn kernel_has_ipvlan() -> bool {
    let scratch = TestNetns::new("ipv-probe");
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
            "p0i",
        ])
        .args(["type", "ipvlan", "mode", "l2"])
        .output()
        .map(|out| out.status.success())
        .unwrap_or(false)
}

fn with_prev(conf: &Value, prev: &Value) -> Value {
    let mut conf = conf.clone();
    conf["prevResult"] = prev.clone();
    conf
}

/// ADD on a kernel without ipvlan is a clean CNI error (code 50, naming
/// the module) with nothing made and no lease taken: with IPAM, chained
/// (master and IPs from the prevResult), and with linkInContainer. On a
/// kernel that has ipvlan, ADD/CHECK/DEL work instead.
#[test]
fn add_where_the_kernel_lacks_ipvlan() {
    let has_ipvlan = kernel_has_ipvlan();
    let chained_prev = json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "master0"}],
        "ips": [{"address": "10.57.0.2/24", "gateway": "10.57.0.1", "interface": 0}],
    });
    for (master_in_pod, chained) in [(false, false), (true, false), (false, true)] {
        let fx = Fixture::new("ipv-k", master_in_pod);
        let mut conf = fx.conf(json!({"linkInContainer": master_in_pod, "mode": "l3"}));
        if chained {
            let map = conf.as_object_mut().unwrap();
            map.remove("ipam");
            map.remove("master");
            map.insert("prevResult".into(), chained_prev.clone());
        }
        let out = fx.run("ADD", &conf);
        if has_ipvlan {
            out.assert_ok();
            let result = out.json();
            let check_conf = with_prev(&conf, &result);
            fx.run("CHECK", &check_conf).assert_ok();
            fx.run("DEL", &conf).assert_ok();
            fx.assert_nothing_left();
            continue;
        }
        assert_eq!(out.error_code(), 50, "{}", out.stdout);
        let msg = out.json()["msg"].as_str().unwrap().to_string();
        assert!(
            msg.starts_with("failed to create ipvlan: this kernel has no ipvlan links")
                && msg.contains("\"ipvlan\" kernel module"),
            "{msg}"
        );
        fx.assert_nothing_left();
    }
}

/// Configuration errors: code 7 with the reference's texts where it has
/// them, nothing made.
#[test]
fn bad_configuration_changes_nothing() {
    let fx = Fixture::new("ipv-bad", false);
    let mut no_ipam = fx.conf(json!({}));
    no_ipam.as_object_mut().unwrap().remove("ipam");
    let mut chained_two = fx.conf(json!({}));
    let map = chained_two.as_object_mut().unwrap();
    map.remove("master");
    map.remove("ipam");
    map.insert(
        "prevResult".into(),
        json!({"cniVersion": "1.0.0", "interfaces": [{"name": "a"}, {"name": "b"}],
               "ips": [{"address": "10.57.0.2/24"}]}),
    );
    let mut no_master = fx.conf(json!({}));
    no_master.as_object_mut().unwrap().remove("master");
    let cases = [
        (
            fx.conf(json!({"mode": "bridge"})),
            "unknown ipvlan mode: \"bridge\"",
        ),
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
        (
            fx.conf(json!({"linkInContainer": true})),
            "failed to lookup master \"master0\": no such link in the container",
        ),
        (no_ipam, "no addresses for the ipvlan link"),
        (
            chained_two,
            "chained master failure. PrevResult lacks a single named interface",
        ),
        // No master and no default route in the fake host.
        (no_master, "no default route interface found"),
        (fx.conf(json!({"mode": 2})), "failed to load netconf"),
    ];
    for (conf, message) in cases {
        let out = fx.run("ADD", &conf);
        assert_eq!(out.error_code(), 7, "{conf}: {}", out.stdout);
        let msg = out.json()["msg"].as_str().unwrap().to_string();
        assert!(msg.contains(message), "{msg}");
        fx.assert_nothing_left();
    }
}

/// DEL is idempotent: no link, twice, without the netns (with and
/// without linkInContainer), without CNI_NETNS, with the master gone and
/// with no master to be found; it still releases a lease it finds.
#[test]
fn del_is_idempotent() {
    let fx = Fixture::new("ipv-del", false);
    let conf = fx.conf(json!({}));
    // A lease of this attachment, as a crashed ADD could leave it.
    fx.call("ADD", &conf)
        .run(&bin_dir().join("host-local"))
        .assert_ok();
    assert_eq!(fx.leases(), vec!["10.57.0.10".to_string()]);

    fx.run("DEL", &conf).assert_ok();
    assert!(fx.leases().is_empty());
    fx.run("DEL", &conf).assert_ok();

    // The master gone, or none configured and no default route: the
    // reference resolves the master on DEL and fails; DEL must not.
    fx.host.ip(&["link", "del", "master0"]);
    fx.run("DEL", &conf).assert_ok();
    let mut no_master = conf.clone();
    no_master.as_object_mut().unwrap().remove("master");
    fx.run("DEL", &no_master).assert_ok();

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
}

/// STATUS and GC go to the IPAM plugin when there is one.
#[test]
fn status_and_gc_ask_ipam() {
    let fx = Fixture::new("ipv-gc", false);
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
    // Chained, without IPAM: nothing to ask.
    let mut chained = conf.clone();
    chained.as_object_mut().unwrap().remove("ipam");
    fx.run("STATUS", &chained).assert_ok();
}
