//! The built `vrf` binary, run as a runtime runs it, in namespaces this
//! test makes. This machine's kernel has no VRF devices, so what runs here
//! is what needs none: configuration and version errors, ADD refused by
//! the kernel (code 50 naming the module) with the interface left as it
//! was, DEL in every case that finds nothing to undo, CHECK's refusals,
//! GC and STATUS. Should the kernel have VRFs, the ADD test checks the
//! enslavement instead. The reference's scenarios run in the qemu guest
//! (`qemu/guest-tests.sh`), beside the reference binary.

use conformance::testnet::{
    refused_link_names, PluginCall, PluginOutcome, TestNetns, ALL_VERSIONS,
};
use serde_json::{json, Value};

const PLUGIN: &str = env!("CARGO_BIN_EXE_vrf");
const IFNAME: &str = "net1";

fn conf(version: &str, ns: &TestNetns, extra: Value) -> Value {
    let mut conf = json!({
        "cniVersion": version,
        "name": "vrfnet",
        "type": "vrf",
        "vrfname": "blue",
        "prevResult": {
            "cniVersion": "1.0.0",
            "interfaces": [{"name": IFNAME, "sandbox": ns.path().display().to_string()}],
            "ips": [{"address": "10.61.0.2/24", "interface": 0}],
        },
    });
    for (key, value) in extra.as_object().unwrap() {
        conf[key] = value.clone();
    }
    conf
}

fn call(command: &str, ns: &TestNetns, conf: &Value) -> PluginOutcome {
    PluginCall::new(command)
        .attachment("ctr-vrf", &ns.path(), IFNAME)
        .stdin_json(conf)
        .run(PLUGIN.as_ref())
}

/// A pod with `net1` (one end of a veth, the other end `peer1`) holding
/// 10.61.0.2/24 and a route through it.
fn pod(tag: &str) -> TestNetns {
    let ns = TestNetns::new(tag);
    ns.ip(&[
        "link", "add", IFNAME, "type", "veth", "peer", "name", "peer1",
    ]);
    ns.ip(&["addr", "add", "10.61.0.2/24", "dev", IFNAME]);
    ns.ip(&["link", "set", IFNAME, "up"]);
    ns.ip(&["link", "set", "peer1", "up"]);
    ns.ip(&[
        "route",
        "add",
        "10.62.0.0/16",
        "via",
        "10.61.0.1",
        "dev",
        IFNAME,
    ]);
    ns
}

fn kernel_has_vrf() -> bool {
    let ns = TestNetns::new("vrf-probe");
    ns.exec("ip", &["link", "add", "probe", "type", "vrf", "table", "5"])
        .status
        .success()
}

#[test]
fn versions_before_0_3_1_are_refused() {
    let ns = pod("vrf-ver");
    for version in ALL_VERSIONS {
        let out = call("ADD", &ns, &conf(version, &ns, json!({})));
        if version < "0.3.1" {
            assert_eq!(out.error_code(), 1, "{version}: {}", out.stdout);
        } else {
            // Past the version check: the kernel's answer (code 50 here),
            // or success where the kernel has VRFs.
            if out.code != 0 {
                assert_ne!(out.error_code(), 1, "{version}: {}", out.stdout);
            }
            call("DEL", &ns, &conf(version, &ns, json!({}))).assert_ok();
        }
    }
}

#[test]
fn configuration_errors_change_nothing() {
    let ns = pod("vrf-cfg");
    let before = ns.ip_json(&["-d", "link", "show"]);
    let mut no_name = conf("1.0.0", &ns, json!({}));
    no_name.as_object_mut().unwrap().remove("vrfname");
    for command in ["ADD", "CHECK"] {
        let out = call(command, &ns, &no_name);
        assert_eq!(out.error_code(), 7, "{command}");
        assert_eq!(
            out.json()["msg"],
            "configuration is expected to have a valid vrf name"
        );
    }
    for (extra, command) in [
        (json!({"table": -1}), "ADD"),
        (json!({"table": "5"}), "ADD"),
        (json!({"vrfname": "name/with/slash"}), "ADD"),
        (json!({"vrfname": "much-too-long-vrf-name"}), "CHECK"),
    ] {
        let out = call(command, &ns, &conf("1.0.0", &ns, extra.clone()));
        assert_eq!(out.error_code(), 7, "{extra}: {}", out.stdout);
    }
    let mut no_prev = conf("1.0.0", &ns, json!({}));
    no_prev.as_object_mut().unwrap().remove("prevResult");
    for command in ["ADD", "CHECK"] {
        let out = call(command, &ns, &no_prev);
        assert_eq!(out.error_code(), 7, "{command}");
        assert_eq!(out.json()["msg"], "missing prevResult from earlier plugin");
    }
    assert_eq!(ns.ip_json(&["-d", "link", "show"]), before);
}

#[test]
fn add_on_this_kernel_is_clean_either_way() {
    let ns = pod("vrf-add");
    let routes_before = ns.ip_json(&["route", "show", "table", "all"]);
    let conf = conf("1.0.0", &ns, json!({}));
    let out = call("ADD", &ns, &conf);
    if kernel_has_vrf() {
        out.assert_ok();
        assert_eq!(out.json(), conf["prevResult"]);
        let link = &ns.ip_json(&["link", "show", IFNAME])[0];
        assert_eq!(link["master"], "blue");
        call("CHECK", &ns, &conf).assert_ok();
        call("DEL", &ns, &conf).assert_ok();
        assert!(!ns.links().contains(&"blue".to_string()));
        return;
    }
    assert_eq!(out.error_code(), 50, "{}", out.stdout);
    let msg = out.json()["msg"].as_str().unwrap().to_string();
    assert!(msg.starts_with("cmdAdd failed: "), "{msg}");
    assert!(msg.contains("\"vrf\" kernel module"), "{msg}");
    // Nothing changed: no VRF, the interface without master, its routes.
    assert_eq!(ns.links().len(), 3, "{:?}", ns.links());
    assert!(ns.ip_json(&["link", "show", IFNAME])[0]
        .get("master")
        .is_none());
    assert_eq!(
        ns.ip_json(&["route", "show", "table", "all"]),
        routes_before
    );
}

#[test]
fn add_refusals_before_the_vrf_is_made() {
    let ns = pod("vrf-refuse");
    // The interface is missing.
    let mut missing = conf("1.0.0", &ns, json!({}));
    missing["prevResult"]["interfaces"][0]["name"] = json!("nope");
    let out = PluginCall::new("ADD")
        .attachment("ctr-vrf", &ns.path(), "nope")
        .stdin_json(&missing)
        .run(PLUGIN.as_ref());
    assert_eq!(out.error_code(), 999);
    assert_eq!(
        out.json()["msg"],
        "cmdAdd failed: could not get link by name nope"
    );
    // The interface already has a master.
    ns.ip(&["link", "add", "br0", "type", "bridge"]);
    ns.ip(&["link", "set", IFNAME, "master", "br0"]);
    let out = call("ADD", &ns, &conf("1.0.0", &ns, json!({})));
    assert_eq!(
        out.json()["msg"],
        format!("cmdAdd failed: interface {IFNAME} has already a master set: br0")
    );
    ns.ip(&["link", "set", IFNAME, "nomaster"]);
    // A link of the VRF's name that is no VRF.
    let out = call("ADD", &ns, &conf("1.0.0", &ns, json!({"vrfname": "br0"})));
    assert_eq!(out.json()["msg"], "cmdAdd failed: Netlink br0 is not a VRF");
    // The namespace is gone.
    let out = PluginCall::new("ADD")
        .attachment("ctr-vrf", "/run/netns/cnitest-vrf-absent".as_ref(), IFNAME)
        .stdin_json(&conf("1.0.0", &ns, json!({})))
        .run(PLUGIN.as_ref());
    assert_eq!(out.error_code(), 3, "{}", out.stdout);
    assert!(!ns.links().contains(&"blue".to_string()));
}

#[test]
fn del_finds_nothing_to_undo_and_succeeds() {
    let ns = pod("vrf-del");
    let conf = conf("1.0.0", &ns, json!({}));
    // No VRF of that name.
    call("DEL", &ns, &conf).assert_ok();
    call("DEL", &ns, &conf).assert_ok();
    // A link of that name that is no VRF is left alone.
    ns.ip(&["link", "add", "blue", "type", "bridge"]);
    call("DEL", &ns, &conf).assert_ok();
    assert!(ns.links().contains(&"blue".to_string()));
    // The netns is gone, or not given.
    PluginCall::new("DEL")
        .attachment("ctr-vrf", "/run/netns/cnitest-vrf-gone".as_ref(), IFNAME)
        .stdin_json(&conf)
        .run(PLUGIN.as_ref())
        .assert_ok();
    PluginCall::new("DEL")
        .var("CNI_CONTAINERID", "ctr-vrf")
        .var("CNI_IFNAME", IFNAME)
        .stdin_json(&conf)
        .run(PLUGIN.as_ref())
        .assert_ok();
    // A configuration without a vrf name names nothing to undo.
    let mut no_name = conf.clone();
    no_name.as_object_mut().unwrap().remove("vrfname");
    call("DEL", &ns, &no_name).assert_ok();
    // A path that is not a namespace is an error.
    let out = PluginCall::new("DEL")
        .attachment("ctr-vrf", "/etc/hostname".as_ref(), IFNAME)
        .stdin_json(&conf)
        .run(PLUGIN.as_ref());
    assert_eq!(out.error_code(), 4, "{}", out.stdout);
}

#[test]
fn check_refusals_and_gc_status() {
    let ns = pod("vrf-chk");
    let c = conf("1.0.0", &ns, json!({}));
    let out = call("CHECK", &ns, &c);
    assert_eq!(out.json()["msg"], "VRF blue not found");
    ns.ip(&["link", "add", "blue", "type", "bridge"]);
    let out = call("CHECK", &ns, &c);
    assert_eq!(out.json()["msg"], "Netlink blue is not a VRF");
    let c = conf("1.1.0", &ns, json!({}));
    for command in ["GC", "STATUS"] {
        PluginCall::new(command)
            .stdin_json(&c)
            .run(PLUGIN.as_ref())
            .assert_ok();
    }
}

/// `vrfname` is checked as a link name before any kernel call: ADD and
/// CHECK exit 1 with a code 7 error JSON naming the key, nothing is made
/// or deleted.
#[test]
fn vrf_names_are_checked_before_the_kernel() {
    let ns = pod("vrf-name");
    let before = ns.ip_json(&["-d", "link", "show"]);
    for (name, message) in refused_link_names("vrfname") {
        let bad = conf("1.0.0", &ns, json!({"vrfname": name}));
        for command in ["ADD", "CHECK"] {
            let out = call(command, &ns, &bad);
            assert_eq!(out.error_code(), 7, "{command}: {}", out.stderr);
            assert_eq!(out.msg(), message, "{command}");
        }
        // DEL of a configuration that names no VRF has nothing to delete.
        call("DEL", &ns, &bad).assert_ok();
    }
    assert_eq!(ns.ip_json(&["-d", "link", "show"]), before);
}
