//! The nftables backend in a fake host namespace: the iptables tests'
//! cases over 0.4.0, 1.0.0 and 1.1.0 against table inet
//! cni_plugins_firewall, as `nft list` prints it.

mod common;

use std::path::Path;

use common::*;
use serde_json::json;

fn nft_conf(version: &str) -> serde_json::Value {
    with_prev(
        conf(version, json!({"backend": "nftables"})),
        prev_result(version, V4, V6),
    )
}

fn tag(container_id: &str) -> String {
    format!("cni firewall net={NETWORK} id={container_id} if={IFNAME}")
}

/// The four address rules of an attachment, as `nft list` prints them.
fn address_rules(v4: &str, v6: &str, container_id: &str) -> [String; 4] {
    let tag = tag(container_id);
    [
        format!("ip daddr {v4} ct state established,related accept comment \"{tag}\""),
        format!("ip saddr {v4} accept comment \"{tag}\""),
        format!("ip6 daddr {v6} ct state established,related accept comment \"{tag}\""),
        format!("ip6 saddr {v6} accept comment \"{tag}\""),
    ]
}

fn contains_all(table: &str, lines: &[String]) -> bool {
    lines.iter().all(|l| table.lines().any(|t| t.trim() == l))
}

#[test]
fn add_writes_the_table_idempotently() {
    for version in VERSIONS {
        let fx = Fixture::new("fwnft-add");
        let conf = nft_conf(version);
        let out = fx.run("ADD", &conf);
        out.assert_ok();
        assert_eq!(
            ips_of(&out.json()),
            ips_of(&conf["prevResult"]),
            "{version}"
        );
        let table = fx.nft_table();
        assert!(
            table.contains("type filter hook forward priority filter; policy accept;"),
            "{table}"
        );
        assert!(
            contains_all(
                &table,
                &["jump CNI-ADMIN comment \"CNI firewall plugin admin overrides\"".to_string()]
            ),
            "{table}"
        );
        assert!(table.contains("chain CNI-ADMIN {"), "{table}");
        assert!(
            contains_all(&table, &address_rules(V4, V6, CONTAINER_ID)),
            "{version}: {table}"
        );
        fx.run("ADD", &conf).assert_ok();
        assert_eq!(
            table,
            fx.nft_table(),
            "{version}: second ADD changed the table"
        );
        // Nothing went to iptables.
        assert!(fx.rules("iptables-save").is_empty());
    }
}

#[test]
fn custom_admin_chain() {
    let fx = Fixture::new("fwnft-admin");
    let conf = with_prev(
        conf(
            "1.1.0",
            json!({"backend": "nftables", "iptablesAdminChainName": "CNI-foobar"}),
        ),
        prev_result("1.1.0", V4, V6),
    );
    fx.run("ADD", &conf).assert_ok();
    let table = fx.nft_table();
    assert!(table.contains("chain CNI-foobar {"), "{table}");
    assert!(table.contains("jump CNI-foobar comment"), "{table}");
    assert!(!table.contains("CNI-ADMIN"), "{table}");
}

#[test]
fn add_check_del_leaves_the_chains_only() {
    for version in VERSIONS {
        let fx = Fixture::new("fwnft-del");
        let conf = nft_conf(version);
        fx.run("ADD", &conf).assert_ok();
        fx.run("CHECK", &conf).assert_ok();
        fx.run("DEL", &conf).assert_ok();
        let table = fx.nft_table();
        assert!(table.contains("chain forward {"), "{table}");
        assert!(table.contains("jump CNI-ADMIN"), "{table}");
        assert!(!table.contains(V4) && !table.contains(V6), "{table}");
        fx.run("DEL", &conf).assert_ok();
        let out = fx.run("CHECK", &conf);
        assert_eq!(out.error_code(), 999);
        assert_eq!(
            out.json()["msg"],
            "expected rule accepting traffic to 10.0.0.2 not found in inet cni_plugins_firewall forward"
        );
    }
}

/// DEL finds the rules by the attachment's tag, prevResult or not, and
/// before any ADD (no table) it succeeds.
#[test]
fn del_finds_rules_by_tag() {
    let fx = Fixture::new("fwnft-tag");
    fx.run("DEL", &conf("1.0.0", json!({"backend": "nftables"})))
        .assert_ok();
    fx.run("ADD", &nft_conf("1.0.0")).assert_ok();
    fx.run("DEL", &conf("1.0.0", json!({"backend": "nftables"})))
        .assert_ok();
    let table = fx.nft_table();
    assert!(!table.contains(V4) && !table.contains(V6), "{table}");
}

#[test]
fn gc_removes_invalid_attachments_of_its_network() {
    let fx = Fixture::new("fwnft-gc");
    let add = |id: &str, v4: &str, v6: &str, network: &str| {
        let mut c = with_prev(
            conf("1.1.0", json!({"backend": "nftables"})),
            prev_result("1.1.0", v4, v6),
        );
        c["name"] = json!(network);
        fx.call_for("ADD", &c, id, IFNAME)
            .run(Path::new(PLUGIN))
            .assert_ok();
    };
    add("keep", "10.0.0.2", "2001:db8::2", NETWORK);
    add("stale", "10.0.0.3", "2001:db8::3", NETWORK);
    add("other", "10.0.0.4", "2001:db8::4", "othernet");
    let gc = json!({
        "cniVersion": "1.1.0", "name": NETWORK, "type": "firewall", "backend": "nftables",
        "cni.dev/valid-attachments": [{"containerID": "keep", "ifname": IFNAME}],
    });
    fx.run("GC", &gc).assert_ok();
    let table = fx.nft_table();
    assert!(
        contains_all(&table, &address_rules("10.0.0.2", "2001:db8::2", "keep")),
        "{table}"
    );
    assert!(table.contains("ip saddr 10.0.0.4 accept"), "{table}");
    assert!(
        !table.contains("10.0.0.3") && !table.contains("2001:db8::3"),
        "{table}"
    );
}

#[test]
fn status_and_ingress_policy_chains() {
    let fx = Fixture::new("fwnft-pol");
    fx.run("STATUS", &conf("1.1.0", json!({"backend": "nftables"})))
        .assert_ok();
    let mut prev = prev_result("1.1.0", V4, V6);
    prev["interfaces"] = json!([{"name": "cni-br9"}, {"name": IFNAME}]);
    let conf = with_prev(
        conf(
            "1.1.0",
            json!({"backend": "nftables", "ingressPolicy": "same-bridge"}),
        ),
        prev,
    );
    fx.run("ADD", &conf).assert_ok();
    fx.run("ADD", &conf).assert_ok();
    let table = fx.nft_table();
    let shared = "comment \"CNI firewall plugin rules (ingressPolicy: same-bridge|isolated)\"";
    let own = "comment \"CNI firewall plugin rules (ingressPolicy: same-bridge)\"";
    for line in [
        format!("jump isolation_stage_1 {shared}"),
        format!("iifname \"cni-br9\" oifname != \"cni-br9\" jump isolation_stage_2 {own}"),
        format!("oifname \"cni-br9\" drop {shared}"),
        format!("return {shared}"),
    ] {
        assert_eq!(
            table.lines().filter(|l| l.trim() == line).count(),
            if line.starts_with("return") { 2 } else { 1 },
            "{line}\n{table}"
        );
    }
    // The isolation comes before the admission, in the forward chain.
    let forward = table.split("chain forward {").nth(1).unwrap_or_default();
    let stage = forward.find("jump isolation_stage_1").unwrap();
    let admin = forward.find("jump CNI-ADMIN").unwrap();
    assert!(stage < admin, "{table}");
    // DEL leaves the isolation (the bridge may be shared).
    fx.run("DEL", &conf).assert_ok();
    assert!(fx.nft_table().contains("oifname \"cni-br9\" drop"));
}
