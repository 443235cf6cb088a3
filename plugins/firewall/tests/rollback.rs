//! An ADD whose ingress policy fails after the admission was written takes
//! the admission back (the reference leaves it). The failure is made by
//! the host's own objects in the way: an iptables chain that would loop,
//! an nftables base chain where the isolation chain goes.

mod common;

use common::*;
use serde_json::json;

fn policy_conf(backend: &str) -> serde_json::Value {
    let mut prev = prev_result("1.0.0", V4, V6);
    prev["interfaces"] = json!([{"name": "cni-br7"}]);
    with_prev(
        conf(
            "1.0.0",
            json!({"backend": backend, "ingressPolicy": "same-bridge"}),
        ),
        prev,
    )
}

#[test]
fn iptables_admission_taken_back_when_the_policy_fails() {
    let fx = Fixture::new("fwrb-ipt");
    // Stage 2 already jumps to stage 1: stage 1's jump to stage 2 loops.
    for args in [
        vec!["-N", "CNI-ISOLATION-STAGE-1"],
        vec!["-N", "CNI-ISOLATION-STAGE-2"],
        vec!["-A", "CNI-ISOLATION-STAGE-2", "-j", "CNI-ISOLATION-STAGE-1"],
    ] {
        assert!(fx.host.exec("iptables", &args).status.success());
    }
    let out = fx.run("ADD", &policy_conf("iptables"));
    assert_eq!(out.error_code(), 999, "{}", out.stdout);
    assert!(out.stdout.contains("CNI-ISOLATION-STAGE"), "{}", out.stdout);
    let rules = fx.rules("iptables-save");
    // The admission was written (its jump stays, as after a DEL) ...
    assert!(rules.contains(&forward_jump()), "{rules:#?}");
    // ... and its address rules were taken back.
    assert!(!rules.iter().any(|r| r.contains(V4)), "{rules:#?}");
    let rules6 = fx.rules("ip6tables-save");
    assert!(!rules6.iter().any(|r| r.contains(V6)), "{rules6:#?}");
}

#[test]
fn nftables_admission_taken_back_when_the_policy_fails() {
    let fx = Fixture::new("fwrb-nft");
    // A base chain cannot be jumped to.
    fx.nft(&["add", "table", "inet", "cni_plugins_firewall"]);
    fx.nft(&[
        "add",
        "chain",
        "inet",
        "cni_plugins_firewall",
        "isolation_stage_1",
        "{ type filter hook input priority 0; }",
    ]);
    let out = fx.run("ADD", &policy_conf("nftables"));
    assert_eq!(out.error_code(), 999, "{}", out.stdout);
    let table = fx.nft_table();
    // The admission's batch was committed (its admin jump stays) ...
    assert!(table.contains("jump CNI-ADMIN"), "{table}");
    // ... and its address rules were taken back.
    assert!(!table.contains(V4) && !table.contains(V6), "{table}");
}

/// A bridge name no interface can have is refused before any change.
#[test]
fn invalid_bridge_name_changes_nothing() {
    let fx = Fixture::new("fwrb-name");
    let mut conf = policy_conf("nftables");
    conf["prevResult"]["interfaces"][0]["name"] = json!("a-bridge-name-too-long");
    let out = fx.run("ADD", &conf);
    assert_eq!(out.error_code(), 7, "{}", out.stdout);
    assert!(fx.nft_table().is_empty());
}
