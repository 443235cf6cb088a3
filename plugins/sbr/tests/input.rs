//! Bad input refused with a CNI error before any change, and every spec
//! version's result.

mod common;

use common::*;
use conformance::testnet::{PluginOutcome, ALL_VERSIONS};
use serde_json::json;

/// Refused with `code`, the message containing `text`, and the pod's
/// rules and routes untouched.
fn assert_refused(pod: &Pod, out: &PluginOutcome, code: u64, text: &str) {
    assert_eq!(out.error_code(), code, "{}", out.stdout);
    let msg = out.json()["msg"].as_str().unwrap_or_default().to_string();
    assert!(msg.contains(text), "message {msg:?} lacks {text:?}");
    assert_eq!(pod.rules(), KERNEL_RULES, "rules changed");
    assert!(
        pod.table("-4", "main").contains("net1"),
        "main routes changed"
    );
}

#[test]
fn without_a_usable_previous_result() {
    let pod = Pod::new(Layout::default());
    for version in ["0.2.0", "1.0.0"] {
        let out = call(
            PLUGIN,
            "ADD",
            &pod.path(),
            &sbr_conf(version, None, json!({})),
        );
        assert_refused(
            &pod,
            &out,
            7,
            "This plugin must be called as chained plugin",
        );
    }
    let prev = json!({"cniVersion": "1.0.0", "ips": []});
    let out = call(
        PLUGIN,
        "ADD",
        &pod.path(),
        &sbr_conf("1.0.0", Some(prev), json!({})),
    );
    assert_refused(&pod, &out, 7, "No IP addresses supplied on interface: net1");
    for prev in [json!({"cniVersion": "1.0.0", "ips": 5}), json!([1])] {
        let out = call(
            PLUGIN,
            "ADD",
            &pod.path(),
            &sbr_conf("1.0.0", Some(prev), json!({})),
        );
        assert_refused(&pod, &out, 6, "prevResult");
    }
    let prev = prev_result(
        "1.0.0",
        &pod.path(),
        &[(&format!("{POD_B}/24"), Some(RAIL_B6))],
    );
    let out = call(
        PLUGIN,
        "ADD",
        &pod.path(),
        &sbr_conf("1.0.0", Some(prev), json!({})),
    );
    assert_refused(&pod, &out, 7, "the gateway fd20::1 of the other IP family");
    let prev = json!({"cniVersion": "7.0.0", "ips": []});
    let out = call(
        PLUGIN,
        "ADD",
        &pod.path(),
        &sbr_conf("1.0.0", Some(prev), json!({})),
    );
    assert_refused(&pod, &out, 1, "7.0.0");
}

#[test]
fn an_interface_the_pod_does_not_have() {
    let pod = Pod::new(Layout::default());
    let conf = default_conf(&pod);
    // The result names net1 but CNI_IFNAME is net9: no address is net9's.
    let out = call_ifname(PLUGIN, "ADD", &pod.path(), "net9", &conf);
    assert_refused(&pod, &out, 7, "belongs to interface net9");
    // Addresses without an interface index count for any name.
    let mut prev = conf["prevResult"].clone();
    prev["ips"][0].as_object_mut().unwrap().remove("interface");
    let conf = sbr_conf("1.0.0", Some(prev), json!({}));
    let out = call_ifname(PLUGIN, "ADD", &pod.path(), "net9", &conf);
    assert_refused(&pod, &out, 4, "Cannot find network interface net9");
    // To CHECK, a missing interface is a finding (999), as in the other
    // plugins of the suite.
    let out = call_ifname(PLUGIN, "CHECK", &pod.path(), "net9", &conf);
    assert_refused(&pod, &out, 999, "Cannot find network interface net9");
    // Also in table mode, where the reference would add the rule anyway.
    let table = sbr_conf(
        "1.0.0",
        conf.get("prevResult").cloned(),
        json!({"table": 5000}),
    );
    let out = call_ifname(PLUGIN, "ADD", &pod.path(), "net9", &table);
    assert_refused(&pod, &out, 4, "Cannot find network interface net9");
}

#[test]
fn bad_keys_are_refused_with_the_reference_messages() {
    let pod = Pod::new(Layout::default());
    let prev = default_conf(&pod)["prevResult"].clone();
    for (extra, text) in [
        (
            json!({"gateways": ["10.20.1.254", "10.20.1.253"]}),
            "gateways list contains multiple IPv4 addresses: 10.20.1.254 and 10.20.1.253",
        ),
        (
            json!({"gateways": ["fd00::1", "fd00::2"]}),
            "gateways list contains multiple IPv6 addresses: fd00::1 and fd00::2",
        ),
        (
            json!({"gateways": ["1.1.1.1", "fd00::1", "2.2.2.2"]}),
            "gateways list cannot contain more than 2 entries (one IPv4, one IPv6)",
        ),
        (
            json!({"gateways": ["gateway"]}),
            "invalid static gateway IP address: gateway",
        ),
        (
            json!({"gateways": "10.20.1.254"}),
            "gateways must be a list",
        ),
        (json!({"table": "100"}), "table must be an integer"),
        (json!({"table": 0}), "invalid table 0"),
        (json!({"table": -5}), "invalid table -5"),
        (
            json!({"addSourceHints": 1}),
            "addSourceHints must be a boolean",
        ),
    ] {
        let conf = sbr_conf("1.0.0", Some(prev.clone()), extra.clone());
        let out = call(PLUGIN, "ADD", &pod.path(), &conf);
        assert_refused(&pod, &out, 7, text);
        // STATUS reports what ADD would refuse.
        let conf = sbr_conf("1.1.0", Some(prev.clone()), extra);
        let out = call(PLUGIN, "STATUS", &pod.path(), &conf);
        assert_eq!(out.error_code(), 7, "{}", out.stdout);
    }
    // Keys spelled in another case are read, as Go reads them.
    let conf = sbr_conf(
        "1.0.0",
        Some(prev),
        json!({"Gateways": ["10.20.1.254", "10.20.1.253"]}),
    );
    let out = call(PLUGIN, "ADD", &pod.path(), &conf);
    assert_refused(&pod, &out, 7, "multiple IPv4 addresses");
}

#[test]
fn a_netns_path_that_is_no_namespace() {
    let pod = Pod::new(Layout::default());
    let conf = default_conf(&pod);
    let out = call(PLUGIN, "ADD", std::path::Path::new("/etc/hostname"), &conf);
    assert_eq!(out.error_code(), 4, "{}", out.stdout);
    let out = call(
        PLUGIN,
        "ADD",
        std::path::Path::new("/run/netns/cnitest-none"),
        &conf,
    );
    assert_eq!(out.error_code(), 3, "{}", out.stdout);
    assert!(!std::path::Path::new("/run/netns/cnitest-none").exists());
}

#[test]
fn gc_and_status() {
    let pod = Pod::new(Layout::default());
    let conf = sbr_conf("1.1.0", None, json!({"table": 5000}));
    call(PLUGIN, "STATUS", &pod.path(), &conf).assert_ok();
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "x", "ifname": "net1"}]);
    call(PLUGIN, "GC", &pod.path(), &gc).assert_ok();
    // Neither exists before 1.1.0.
    let old = sbr_conf("1.0.0", None, json!({}));
    assert_eq!(call(PLUGIN, "STATUS", &pod.path(), &old).error_code(), 1);
}

/// The previous result in each version's layout comes back as it went in;
/// the routing is the same whatever the version; CHECK exists from 0.4.0.
#[test]
fn every_spec_version() {
    for version in ALL_VERSIONS {
        let pod = Pod::new(Layout {
            ipv6: true,
            ..Layout::default()
        });
        let prev = prev_result(
            version,
            &pod.path(),
            &[
                (&format!("{POD_B}/24"), Some(RAIL_B)),
                (&format!("{POD_B6}/64"), Some(RAIL_B6)),
            ],
        );
        let conf = sbr_conf(version, Some(prev.clone()), json!({}));
        let out = call(PLUGIN, "ADD", &pod.path(), &conf);
        out.assert_ok();
        assert_eq!(out.json(), prev, "{version}: passed on unchanged");

        let rules = pod.source_rules();
        assert_eq!(rules.len(), 2, "{version}: {rules:?}");
        assert_eq!(
            rail_that_answers(&pod, FAR, Some(POD_B)),
            Some('B'),
            "{version}"
        );
        assert_eq!(
            rail_that_answers(&pod, FAR6, Some(POD_B6)),
            Some('B'),
            "{version}"
        );

        let check = call(PLUGIN, "CHECK", &pod.path(), &conf);
        if matches!(version, "0.1.0" | "0.2.0" | "0.3.0" | "0.3.1") {
            assert_eq!(check.error_code(), 1, "{version}");
            assert!(check.stdout.contains("config version does not allow CHECK"));
        } else {
            check.assert_ok();
        }
        call(PLUGIN, "DEL", &pod.path(), &conf).assert_ok();
        assert_eq!(pod.rules(), KERNEL_RULES, "{version}");
    }
}
