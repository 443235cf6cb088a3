//! The built `vlan` binary, run as a runtime runs it, in namespaces this
//! test makes: a fake host whose `master0` is one end of a veth (the other
//! end in a "peer" namespace), and a pod. Our `host-local` is the IPAM
//! plugin (built on demand by `workspace_plugin`).
//!
//! This machine's kernel has no 802.1Q links, so what runs here is what
//! needs none: configuration errors, DEL, STATUS and GC, and ADD refused
//! by the kernel with nothing left behind. Should the kernel have them,
//! the same test checks the full ADD instead. Traffic over a real VLAN is
//! tested in the qemu guest (`qemu/guest-tests.sh`).

use conformance::testnet::{ip, refused_link_names, with_prev, MasterNet, PluginCall, SubLinkRig};
use serde_json::json;

const PLUGIN: &str = env!("CARGO_BIN_EXE_vlan");
const NETWORK: &str = "vlannet";
const CONTAINER_ID: &str = "ctr-1";
const IFNAME: &str = "net1";

/// The attachment in namespaces of its own (`tag`), with the vlan
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
            "type": "vlan",
            "vlanId": 1234,
        }),
        json!({"subnet": "10.56.0.0/24", "rangeStart": "10.56.0.10"}),
    )
}

/// Whether this kernel makes 802.1Q links.
fn kernel_has_vlan() -> bool {
    MasterNet::kernel_makes(&["type", "vlan", "id", "5"])
}

/// ADD on a kernel without 802.1Q is a clean CNI error (code 50, naming
/// the module) with nothing made and no lease taken; with linkInContainer
/// too. On a kernel that has them, ADD/CHECK/DEL work instead.
#[test]
fn add_where_the_kernel_lacks_vlan() {
    let has_vlan = kernel_has_vlan();
    for master_in_pod in [false, true] {
        let fx = rig("vl-k", master_in_pod);
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

/// Configuration errors: code 7, the reference's texts, nothing made.
#[test]
fn bad_configuration_changes_nothing() {
    let fx = rig("vl-bad", false);
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
    let fx = rig("vl-del", false);
    let conf = fx.conf(json!({}));
    // A lease of this attachment, as a crashed ADD could leave it.
    let ipam_add = fx.run_ipam("ADD", &conf);
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
    let fx = rig("vl-gc", false);
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
}

/// CHECK's steps before the link, and its findings about the link, need
/// no 802.1Q in the kernel: the IPAM plugin's verdict passed on as it
/// is, no prevResult (7), the prevResult's interface in another sandbox,
/// the master gone (7), no link or another kind under `CNI_IFNAME` (999
/// with what differs). In versions before 0.4.0 there is no CHECK.
#[test]
fn check_finds_what_differs_before_and_at_the_link() {
    let fx = rig("vl-chk", false);
    let conf = fx.conf(json!({}));
    let prev = fx.assert_check_steps_before_the_link(&conf, "10.56.0.10/24");
    let checked = with_prev(&conf, &prev);

    let out = fx.run("CHECK", &checked);
    assert_eq!(out.error_code(), 999);
    assert_eq!(out.msg(), "Container interface net1 not found");
    fx.pod
        .ip(&["link", "add", IFNAME, "type", "veth", "peer", "name", "x0"]);
    let out = fx.run("CHECK", &checked);
    assert_eq!(out.error_code(), 999);
    assert_eq!(
        out.msg(),
        "Container interface net1 not of type vlan (it is veth)"
    );

    let mut old = checked.clone();
    old["cniVersion"] = json!("0.3.1");
    old["prevResult"]["cniVersion"] = json!("0.3.1");
    let out = fx.run("CHECK", &old);
    assert_eq!(out.error_code(), 1);
    assert_eq!(out.msg(), "config version does not allow CHECK");

    fx.host.ip(&["link", "del", "master0"]);
    let out = fx.run("CHECK", &checked);
    assert_eq!(out.error_code(), 7);
    assert_eq!(
        out.msg(),
        "failed to lookup master \"master0\": no such link"
    );
    fx.run("DEL", &conf).assert_ok();
    fx.assert_nothing_left();
}

/// ADD into a pod namespace that is gone (3) or a path that is no
/// namespace (4) fails before IPAM: no lease, no link.
#[test]
fn add_into_a_missing_or_wrong_netns() {
    let fx = rig("vl-ns", false);
    fx.assert_add_needs_the_netns(&fx.conf(json!({})));
}

/// `master` is checked as a link name before any kernel call, for every
/// verb that reads it: a 70,000-byte one made the netlink encoder panic
/// (SIGABRT in release builds, no CNI error). Exit status 1 with a code 7
/// error JSON, nothing made.
#[test]
fn master_names_are_checked_before_the_kernel() {
    let fx = rig("vl-name", false);
    for (master, message) in refused_link_names("master") {
        for command in ["ADD", "CHECK"] {
            let out = fx.run(command, &fx.conf(json!({"master": master})));
            assert_eq!(out.error_code(), 7, "{command}: {}", out.stderr);
            assert_eq!(out.msg(), message, "{command}");
        }
        fx.assert_nothing_left();
    }
}
