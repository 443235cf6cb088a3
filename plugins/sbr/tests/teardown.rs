//! DEL in every state a runtime can call it in, and the undo of a failed
//! ADD.

mod common;

use common::*;
use conformance::testnet::PluginCall;
use serde_json::json;

#[test]
fn del_twice_and_del_without_netns() {
    let pod = Pod::new(Layout::default());
    let conf = default_conf(&pod);
    call(PLUGIN, "ADD", &pod.path(), &conf).assert_ok();
    let del = call(PLUGIN, "DEL", &pod.path(), &conf);
    del.assert_ok();
    assert_eq!(del.stdout, "", "DEL prints nothing");
    assert_eq!(pod.rules(), KERNEL_RULES);
    call(PLUGIN, "DEL", &pod.path(), &conf).assert_ok();
    assert_eq!(pod.rules(), KERNEL_RULES);

    // containerd's second DEL: no namespace, no previous result.
    let bare = sbr_conf("1.0.0", None, json!({}));
    PluginCall::new("DEL")
        .var("CNI_CONTAINERID", "sbr-test")
        .var("CNI_NETNS", "")
        .var("CNI_IFNAME", "net1")
        .stdin_json(&bare)
        .run(std::path::Path::new(PLUGIN))
        .assert_ok();
}

/// The reference test: DEL with a bare configuration (no prevResult)
/// finds the rules by the interface's addresses.
#[test]
fn del_needs_no_previous_result() {
    let pod = Pod::new(Layout {
        ipv6: true,
        ..Layout::default()
    });
    let prev = prev_result(
        "1.0.0",
        &pod.path(),
        &[
            (&format!("{POD_B}/24"), Some(RAIL_B)),
            (&format!("{POD_B6}/64"), Some(RAIL_B6)),
        ],
    );
    call(
        PLUGIN,
        "ADD",
        &pod.path(),
        &sbr_conf("1.0.0", Some(prev), json!({})),
    )
    .assert_ok();
    assert_eq!(pod.source_rules().len(), 2);
    call(
        PLUGIN,
        "DEL",
        &pod.path(),
        &sbr_conf("1.0.0", None, json!({})),
    )
    .assert_ok();
    assert_eq!(pod.rules(), KERNEL_RULES);
    assert_eq!(pod.table("-4", "100"), "");
    assert_eq!(pod.table("-6", "101"), "");
}

/// The namespace is gone: DEL succeeds and leaves no file behind (the
/// reference fails here, and its lock creates an empty file at the path).
#[test]
fn del_with_the_netns_gone() {
    let pod = Pod::new(Layout::default());
    let conf = default_conf(&pod);
    call(PLUGIN, "ADD", &pod.path(), &conf).assert_ok();
    let path = pod.path();
    conformance::testnet::ip(&["netns", "delete", pod.pod.name()]);
    assert!(!path.exists());
    call(PLUGIN, "DEL", &path, &conf).assert_ok();
    assert!(!path.exists(), "DEL created {path:?}");
    // A path that is not a namespace is not ours to clean either.
    call(PLUGIN, "DEL", std::path::Path::new("/etc/hostname"), &conf).assert_ok();
}

/// The interface is gone (its plugin's DEL ran first): nothing to do.
#[test]
fn del_with_the_interface_gone() {
    let pod = Pod::new(Layout::default());
    let conf = default_conf(&pod);
    call(PLUGIN, "ADD", &pod.path(), &conf).assert_ok();
    pod.pod.ip(&["link", "del", "net1"]);
    call(PLUGIN, "DEL", &pod.path(), &conf).assert_ok();
    // Its routes went with it.
    assert_eq!(pod.table("-4", "100"), "");
}

/// DEL leaves rules and tables that only look like sbr's: a rule from an
/// address that is not the interface's, and a table also used by a rule
/// DEL keeps.
#[test]
fn del_takes_only_what_is_the_interfaces() {
    let pod = Pod::new(Layout::default());
    let conf = default_conf(&pod);
    pod.pod
        .ip(&["rule", "add", "from", "10.20.1.99", "lookup", "100"]);
    call(PLUGIN, "ADD", &pod.path(), &conf).assert_ok();
    // 100 was taken by the foreign rule.
    let ours: Vec<_> = pod
        .source_rules()
        .into_iter()
        .filter(|r| r["src"] == POD_B)
        .collect();
    assert_eq!(ours.len(), 1);
    assert_eq!(ours[0]["table"], "101");
    // Someone else adds a rule to sbr's table as well.
    pod.pod.ip(&["rule", "add", "fwmark", "9", "lookup", "101"]);
    call(PLUGIN, "DEL", &pod.path(), &conf).assert_ok();
    let rules = pod.pod.ip(&["rule"]);
    assert!(!rules.contains(&format!("from {POD_B} ")), "{rules}");
    assert!(rules.contains("from 10.20.1.99 lookup 100"), "{rules}");
    assert!(
        pod.table("-4", "101").contains("default via"),
        "a table still looked up is kept"
    );
}

/// A failing step (the second address's gateway is unreachable) takes
/// back everything the first address got: rule, table, main routes.
#[test]
fn a_failed_add_leaves_nothing() {
    let pod = Pod::new(Layout {
        ipv6: true,
        second_address: true,
    });
    let rules_before = pod.rules();
    let routes_before = pod.all_routes();
    let mut prev = prev_result(
        "1.0.0",
        &pod.path(),
        &[
            (&format!("{POD_B}/24"), Some(RAIL_B)),
            (&format!("{POD_B6}/64"), Some(RAIL_B6)),
            (&format!("{POD_B2}/24"), Some("10.99.0.1")),
        ],
    );
    prev["ips"][2]["interface"] = json!(null);
    let conf = sbr_conf("1.0.0", Some(prev), json!({}));
    let out = call(PLUGIN, "ADD", &pod.path(), &conf);
    assert_eq!(out.error_code(), 999);
    assert!(
        out.json()["msg"]
            .as_str()
            .unwrap()
            .starts_with("Failed to add default route to 10.99.0.1: "),
        "{}",
        out.stdout
    );
    assert_eq!(pod.rules(), rules_before);
    assert_eq!(pod.all_routes(), routes_before);

    // Nothing holds table 100: the next ADD takes it.
    call(PLUGIN, "ADD", &pod.path(), &default_conf(&pod)).assert_ok();
    assert_eq!(pod.source_rules()[0]["table"], "100");
}
