//! The built `ipvlan` binary, run as a runtime runs it, in namespaces this
//! test makes: a fake host whose `master0` is one end of a veth (the other
//! end in a "peer" namespace), and a pod. Our `host-local` is the IPAM
//! plugin (built on demand by `workspace_plugin`).
//!
//! This machine's kernel has no ipvlan, so what runs here is what needs
//! none: configuration errors, DEL, STATUS and GC, and ADD refused by the
//! kernel with nothing left behind. Should the kernel have ipvlan, the
//! same test checks the full ADD instead. Traffic over real ipvlan links
//! is tested in the qemu guest (`qemu/guest-tests.sh`).

use conformance::testnet::{ip, refused_link_names, with_prev, MasterNet, PluginCall, SubLinkRig};
use serde_json::json;

const PLUGIN: &str = env!("CARGO_BIN_EXE_ipvlan");
const NETWORK: &str = "ipvlnet";
const CONTAINER_ID: &str = "ctr-1";
const IFNAME: &str = "net1";

/// The attachment in namespaces of its own (`tag`), with the ipvlan
/// configuration on `master0` and a host-local range of its own.
fn rig(tag: &str, master_in_pod: bool) -> SubLinkRig {
    SubLinkRig::new(
        PLUGIN,
        NETWORK,
        tag,
        master_in_pod,
        (CONTAINER_ID, IFNAME),
        json!({
            "cniVersion": "1.1.0",
            "type": "ipvlan",
        }),
        json!({"subnet": "10.57.0.0/24", "rangeStart": "10.57.0.10"}),
    )
}

/// Whether this kernel makes ipvlan links.
fn kernel_has_ipvlan() -> bool {
    MasterNet::kernel_makes(&["type", "ipvlan", "mode", "l2"])
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
        let fx = rig("ipv-k", master_in_pod);
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
    let fx = rig("ipv-bad", false);
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
    let fx = rig("ipv-del", false);
    let conf = fx.conf(json!({}));
    // A lease of this attachment, as a crashed ADD could leave it.
    fx.run_ipam("ADD", &conf).assert_ok();
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
    let fx = rig("ipv-gc", false);
    let conf = fx.conf(json!({}));
    fx.run("STATUS", &conf).assert_ok();
    fx.run_ipam("ADD", &conf).assert_ok();
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

/// CHECK's steps before the link, and its findings about the link, need
/// no ipvlan in the kernel: the IPAM plugin's verdict passed on as it
/// is, no prevResult (7), the prevResult's interface in another sandbox,
/// a configured master that is gone, no link or another kind under
/// `CNI_IFNAME` (999 with what differs).
#[test]
fn check_finds_what_differs_before_and_at_the_link() {
    let fx = rig("ipv-chk", false);
    let conf = fx.conf(json!({}));
    let prev = fx.assert_check_steps_before_the_link(&conf, "10.57.0.10/24");
    let checked = with_prev(&conf, &prev);
    // No prevResult, chained (no IPAM to ask first): 7 as with IPAM.
    let mut chained = conf.clone();
    chained.as_object_mut().unwrap().remove("ipam");
    assert_eq!(fx.run("CHECK", &chained).error_code(), 7);

    let out = fx.run(
        "CHECK",
        &with_prev(&fx.conf(json!({"master": "gone0"})), &prev),
    );
    assert_eq!(out.error_code(), 7);
    assert_eq!(out.msg(), "failed to lookup master \"gone0\": no such link");

    let out = fx.run("CHECK", &checked);
    assert_eq!(out.error_code(), 999);
    assert_eq!(out.msg(), "Container interface net1 not found");
    fx.pod
        .ip(&["link", "add", IFNAME, "type", "veth", "peer", "name", "x0"]);
    let out = fx.run("CHECK", &checked);
    assert_eq!(out.error_code(), 999);
    assert_eq!(
        out.msg(),
        "Container interface net1 not of type ipvlan (it is veth)"
    );
    fx.run("DEL", &conf).assert_ok();
    fx.assert_nothing_left();
}

/// ADD into a pod namespace that is gone (3) or a path that is no
/// namespace (4) fails before IPAM: no lease, no link.
#[test]
fn add_into_a_missing_or_wrong_netns() {
    let fx = rig("ipv-ns", false);
    fx.assert_add_needs_the_netns(&fx.conf(json!({})));
}

/// `master` is checked as a link name before any kernel call, for every
/// verb that reads it: a 70,000-byte one made the netlink encoder panic
/// (SIGABRT in release builds, no CNI error). Exit status 1 with a code 7
/// error JSON, nothing made.
#[test]
fn master_names_are_checked_before_the_kernel() {
    let fx = rig("ipv-name", false);
    for (master, message) in refused_link_names("master") {
        for command in ["ADD", "CHECK"] {
            let out = fx.run(command, &fx.conf(json!({"master": master})));
            assert_eq!(out.error_code(), 7, "{command}: {}", out.stderr);
            assert_eq!(out.msg(), message, "{command}");
        }
        fx.assert_nothing_left();
    }
    // Chained without `master`: the prevResult's interface names it.
    let key = "prevResult.interfaces[0].name";
    for (name, message) in refused_link_names(key) {
        let mut chained = fx.conf(json!({}));
        let map = chained.as_object_mut().unwrap();
        map.remove("master");
        map.remove("ipam");
        map.insert(
            "prevResult".into(),
            json!({"cniVersion": "1.0.0", "interfaces": [{"name": name}],
                   "ips": [{"address": "10.57.0.2/24"}]}),
        );
        let out = fx.run("ADD", &chained);
        assert_eq!(out.error_code(), 7, "{}", out.stderr);
        assert_eq!(out.msg(), message);
        fx.assert_nothing_left();
    }
}
