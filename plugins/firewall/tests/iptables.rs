//! The iptables backend in a fake host namespace: the reference's
//! firewall_iptables_test over 0.4.0, 1.0.0 and 1.1.0, plus DEL without a
//! prevResult, GC, STATUS, bad input, and rules written by one plugin
//! removed by the other (the reference binary in /usr/lib/cni).

mod common;

use std::path::Path;

use common::*;
use serde_json::json;

fn iptables_conf(version: &str) -> serde_json::Value {
    with_prev(
        conf(version, json!({"backend": "iptables"})),
        prev_result(version, V4, V6),
    )
}

fn has_all(rules: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|w| rules.contains(w))
}

/// ADD passes the prevResult through and writes the whole ruleset in
/// both families; a second ADD changes nothing.
#[test]
fn add_writes_the_reference_ruleset_idempotently() {
    for version in VERSIONS {
        let fx = Fixture::new("fwipt-add");
        let conf = iptables_conf(version);
        let out = fx.run("ADD", &conf);
        out.assert_ok();
        let result = out.json();
        assert_eq!(result["cniVersion"], version);
        assert_eq!(ips_of(&result), ips_of(&conf["prevResult"]), "{version}");

        for (save, host) in [
            ("iptables-save", format!("{V4}/32")),
            ("ip6tables-save", format!("{V6}/128")),
        ] {
            let chains = fx.chains(save);
            for chain in ["CNI-FORWARD", "CNI-ADMIN"] {
                assert!(
                    chains.contains(&chain.to_string()),
                    "{version} {save}: {chains:?}"
                );
            }
            let rules = fx.rules(save);
            let mut wanted = vec![forward_jump(), admin_jump("CNI-ADMIN")];
            wanted.extend(address_rules(&host));
            wanted.push(marker(&host, CONTAINER_ID));
            assert!(has_all(&rules, &wanted), "{version} {save}: {rules:#?}");
            // The jumps come first in their chains.
            let forward: Vec<_> = rules
                .iter()
                .filter(|r| r.starts_with("-A FORWARD "))
                .collect();
            assert_eq!(
                forward.first().map(|r| r.as_str()),
                Some(forward_jump().as_str())
            );
        }

        let before = (fx.rules("iptables-save"), fx.rules("ip6tables-save"));
        fx.run("ADD", &conf).assert_ok();
        let after = (fx.rules("iptables-save"), fx.rules("ip6tables-save"));
        assert_eq!(before, after, "{version}: second ADD changed the rules");
    }
}

#[test]
fn custom_admin_chain_in_both_families() {
    let fx = Fixture::new("fwipt-admin");
    let conf = with_prev(
        conf(
            "1.0.0",
            json!({"backend": "iptables", "iptablesAdminChainName": "CNI-foobar"}),
        ),
        prev_result("1.0.0", V4, V6),
    );
    fx.run("ADD", &conf).assert_ok();
    for save in ["iptables-save", "ip6tables-save"] {
        assert!(
            fx.chains(save).contains(&"CNI-foobar".to_string()),
            "{save}"
        );
        assert!(fx.rules(save).contains(&admin_jump("CNI-foobar")), "{save}");
        assert!(
            !fx.chains(save).contains(&"CNI-ADMIN".to_string()),
            "{save}"
        );
    }
}

/// ADD, CHECK, DEL: chains and jumps stay, the address rules and markers
/// go; a second DEL succeeds; CHECK then names the missing rule.
#[test]
fn add_check_del_leaves_chains_and_jumps_only() {
    for version in VERSIONS {
        let fx = Fixture::new("fwipt-del");
        let conf = iptables_conf(version);
        fx.run("ADD", &conf).assert_ok();
        fx.run("CHECK", &conf).assert_ok();
        fx.run("DEL", &conf).assert_ok();
        for (save, host) in [
            ("iptables-save", format!("{V4}/32")),
            ("ip6tables-save", format!("{V6}/128")),
        ] {
            let rules = fx.rules(save);
            assert!(
                has_all(&rules, &[forward_jump(), admin_jump("CNI-ADMIN")]),
                "{version} {save}: {rules:#?}"
            );
            assert!(
                !rules.iter().any(|r| r.contains(&host)),
                "{version} {save}: address rules left: {rules:#?}"
            );
        }
        fx.run("DEL", &conf).assert_ok();
        let out = fx.run("CHECK", &conf);
        assert_eq!(out.error_code(), 999);
        assert!(
            out.json()["msg"]
                .as_str()
                .unwrap()
                .starts_with("expected rule [-d 10.0.0.2/32 -m conntrack"),
            "{}",
            out.stdout
        );
    }
}

/// CHECK fails on a missing jump with the reference's message.
#[test]
fn check_names_a_missing_jump() {
    let fx = Fixture::new("fwipt-chk");
    let conf = iptables_conf("1.0.0");
    fx.run("ADD", &conf).assert_ok();
    let out = fx.host.exec(
        "iptables",
        &[
            "-D",
            "FORWARD",
            "-m",
            "comment",
            "--comment",
            "CNI firewall plugin rules",
            "-j",
            "CNI-FORWARD",
        ],
    );
    assert!(out.status.success());
    let out = fx.run("CHECK", &conf);
    assert_eq!(out.error_code(), 999);
    assert_eq!(
        out.json()["msg"],
        "expected FORWARD rule [-m comment --comment CNI firewall plugin rules -j CNI-FORWARD] not found"
    );
}

/// DEL without a prevResult removes what the attachment's markers name.
#[test]
fn del_without_prev_result_uses_the_markers() {
    let fx = Fixture::new("fwipt-delnp");
    fx.run("ADD", &iptables_conf("1.0.0")).assert_ok();
    fx.run("DEL", &conf("1.0.0", json!({"backend": "iptables"})))
        .assert_ok();
    let rules = fx.rules("iptables-save");
    assert!(!rules.iter().any(|r| r.contains(V4)), "{rules:#?}");
    assert!(!fx.rules("ip6tables-save").iter().any(|r| r.contains(V6)));
}

/// GC removes the rules of attachments of this network not in the valid
/// list, and leaves the valid ones and other networks' alone.
#[test]
fn gc_removes_invalid_attachments_of_its_network() {
    let fx = Fixture::new("fwipt-gc");
    let add = |id: &str, v4: &str, v6: &str, network: &str| {
        let mut c = with_prev(
            conf("1.1.0", json!({"backend": "iptables"})),
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
        "cniVersion": "1.1.0", "name": NETWORK, "type": "firewall", "backend": "iptables",
        "cni.dev/valid-attachments": [{"containerID": "keep", "ifname": IFNAME}],
    });
    fx.run("GC", &gc).assert_ok();
    let rules = fx.rules("iptables-save");
    assert!(has_all(&rules, &address_rules("10.0.0.2/32")), "{rules:#?}");
    assert!(has_all(&rules, &address_rules("10.0.0.4/32")), "{rules:#?}");
    assert!(!rules.iter().any(|r| r.contains("10.0.0.3")), "{rules:#?}");
    let rules6 = fx.rules("ip6tables-save");
    assert!(has_all(&rules6, &address_rules("2001:db8::2/128")));
    assert!(
        !rules6.iter().any(|r| r.contains("2001:db8::3")),
        "{rules6:#?}"
    );
    assert!(rules.contains(&marker("10.0.0.2/32", "keep")));
}

#[test]
fn status_reports_usable_iptables() {
    let fx = Fixture::new("fwipt-st");
    fx.run("STATUS", &conf("1.1.0", json!({"backend": "iptables"})))
        .assert_ok();
    // Without firewalld, the automatic choice is iptables; `"backend": ""`
    // is how Podman asks for it (its conflist for the default network).
    fx.run(
        "ADD",
        &with_prev(
            conf("1.1.0", json!({"backend": ""})),
            prev_result("1.1.0", V4, V6),
        ),
    )
    .assert_ok();
    assert!(has_all(
        &fx.rules("iptables-save"),
        &address_rules(&format!("{V4}/32"))
    ));
    assert!(fx.nft_table().is_empty());
}

/// Bad input is refused with its code and changes nothing.
#[test]
fn bad_input_changes_nothing() {
    let fx = Fixture::new("fwipt-bad");
    let prev = prev_result("1.0.0", V4, V6);
    let cases = [
        (
            with_prev(
                conf("1.0.0", json!({"ingressPolicy": "closed"})),
                prev.clone(),
            ),
            7,
            "unknown ingress policy: \"closed\"",
        ),
        (
            with_prev(conf("1.0.0", json!({"backend": "iptable"})), prev.clone()),
            7,
            "unknown backend \"iptable\"",
        ),
        (
            conf("1.0.0", json!({"backend": "iptables"})),
            7,
            "missing prevResult from earlier plugin",
        ),
        (
            with_prev(
                conf(
                    "1.0.0",
                    json!({"backend": "iptables", "ingressPolicy": "same-bridge"}),
                ),
                json!({"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24"}]}),
            ),
            7,
            "interface needs to be set for ingress policy \"same-bridge\"",
        ),
        (
            with_prev(
                conf(
                    "1.0.0",
                    json!({"backend": "iptables", "iptablesAdminChainName": "bad name"}),
                ),
                prev.clone(),
            ),
            7,
            "invalid iptablesAdminChainName",
        ),
        (
            with_prev(conf("0.3.1", json!({"backend": "iptables"})), prev.clone()),
            1,
            "",
        ),
    ];
    for (conf, code, message) in cases {
        let out = fx.run("ADD", &conf);
        assert_eq!(out.error_code(), code, "{conf}: {}", out.stdout);
        let msg = out.json()["msg"].as_str().unwrap_or_default().to_string();
        assert!(msg.starts_with(message), "{msg}");
        assert!(fx.rules("iptables-save").is_empty(), "{conf}");
        assert!(fx.rules("ip6tables-save").is_empty(), "{conf}");
    }
}

/// A node switching plugins keeps working: the reference's rules are
/// removed by our DEL, ours by the reference's DEL, and our CHECK accepts
/// the reference's ADD.
#[test]
fn rules_of_one_plugin_are_removed_by_the_other() {
    assert!(
        Path::new(REFERENCE).exists(),
        "{REFERENCE} is missing: this test compares with the Debian reference plugins (apt-get install containernetworking-plugins)"
    );
    let conf = iptables_conf("1.0.0");
    let v4_rules = address_rules(&format!("{V4}/32"));
    let v6_rules = address_rules(&format!("{V6}/128"));

    let fx = Fixture::new("fwipt-x1");
    fx.run_reference("ADD", &conf).assert_ok();
    assert!(has_all(&fx.rules("iptables-save"), &v4_rules));
    fx.run("CHECK", &conf).assert_ok();
    fx.run("DEL", &conf).assert_ok();
    assert!(!fx.rules("iptables-save").iter().any(|r| r.contains(V4)));
    assert!(!fx.rules("ip6tables-save").iter().any(|r| r.contains(V6)));

    let fx = Fixture::new("fwipt-x2");
    fx.run("ADD", &conf).assert_ok();
    assert!(has_all(&fx.rules("ip6tables-save"), &v6_rules));
    fx.run_reference("CHECK", &conf).assert_ok();
    fx.run_reference("DEL", &conf).assert_ok();
    let rules = fx.rules("iptables-save");
    assert!(
        !rules
            .iter()
            .any(|r| r.starts_with("-A CNI-FORWARD") && r.contains(V4)),
        "{rules:#?}"
    );
    assert!(!fx
        .rules("ip6tables-save")
        .iter()
        .any(|r| r.starts_with("-A CNI-FORWARD") && r.contains(V6)));
    // Only our bookkeeping is left, which GC then clears.
    let gc = json!({
        "cniVersion": "1.1.0", "name": NETWORK, "type": "firewall", "backend": "iptables",
        "cni.dev/valid-attachments": [],
    });
    fx.run("GC", &gc).assert_ok();
    assert!(!fx.rules("iptables-save").iter().any(|r| r.contains(V4)));
}

/// Concurrent ADDs into a fresh host (every one sees the chains missing)
/// all keep their rules: the host lock orders them, and no declaration of
/// a chain empties another call's rules.
#[test]
fn concurrent_adds_keep_every_rule() {
    let fx = Fixture::new("fwipt-par");
    let calls: Vec<_> = (2..10)
        .map(|n| {
            let c = with_prev(
                conf("1.0.0", json!({"backend": "iptables"})),
                prev_result("1.0.0", &format!("10.0.0.{n}"), &format!("2001:db8::{n}")),
            );
            fx.call_for("ADD", &c, &format!("par{n}"), IFNAME)
        })
        .collect();
    std::thread::scope(|scope| {
        for call in &calls {
            scope.spawn(move || call.run(Path::new(PLUGIN)).assert_ok().code);
        }
    });
    let rules = fx.rules("iptables-save");
    for n in 2..10 {
        assert!(
            has_all(&rules, &address_rules(&format!("10.0.0.{n}/32"))),
            "10.0.0.{n}: {rules:#?}"
        );
    }
    assert_eq!(
        rules.iter().filter(|r| **r == forward_jump()).count(),
        1,
        "{rules:#?}"
    );
}
