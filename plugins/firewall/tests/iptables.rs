//! The iptables backend in a fake host namespace: the scenarios both
//! backends share (tests/scenarios, over 0.4.0, 1.0.0 and 1.1.0 where the
//! reference's firewall_iptables_test runs them) read through
//! `iptables-save` and `ip6tables-save`, plus what only iptables has: the
//! automatic choice without firewalld, and rules written by one plugin
//! removed by the other (the reference binary in /usr/lib/cni).

mod common;
#[macro_use]
mod scenarios;

use std::path::Path;

use common::*;
use scenarios::{Attachment, RuleBackend};
use serde_json::json;

struct Iptables;

run_scenarios!(Iptables);

fn iptables_conf(version: &str) -> serde_json::Value {
    with_prev(
        conf(version, json!({"backend": "iptables"})),
        prev_result(version, V4, V6),
    )
}

fn has_all(rules: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|w| rules.contains(w))
}

/// Each family's save program, with the attachment's address in it as
/// the reference writes it (`/32`, `/128`).
fn families(at: &Attachment) -> [(&'static str, String); 2] {
    [
        ("iptables-save", format!("{}/32", at.v4)),
        ("ip6tables-save", format!("{}/128", at.v6)),
    ]
}

/// The marker of an attachment's address, in any network.
fn marker_of(host: &str, at: &Attachment) -> String {
    format!(
        "-A CNI-FW-ATTACHMENTS -d {host} -m comment --comment \"cni firewall net={} id={} if={IFNAME}\" -j RETURN",
        at.network, at.id
    )
}

/// A family's whole filter table as saved, less the comment lines (they
/// carry the time).
fn saved(fx: &Fixture, save: &str) -> String {
    let out = fx.host.exec(save, &["-t", "filter"]);
    assert!(out.status.success(), "{save}: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
}

impl RuleBackend for Iptables {
    const NAME: &'static str = "iptables";
    const TAG: &'static str = "fwipt";
    const MISSING_JUMP: &'static str = "expected FORWARD rule [-m comment --comment CNI firewall plugin rules -j CNI-FORWARD] not found";
    const MISSING_RULE: &'static str = "expected rule [-d 10.0.0.2/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT] not found";

    fn assert_chains(fx: &Fixture, admin: &str, context: &str) {
        for save in ["iptables-save", "ip6tables-save"] {
            let chains = fx.chains(save);
            for chain in ["CNI-FORWARD", admin] {
                assert!(
                    chains.contains(&chain.to_string()),
                    "{context} {save}: {chains:?}"
                );
            }
            let rules = fx.rules(save);
            assert!(
                has_all(&rules, &[forward_jump(), admin_jump(admin)]),
                "{context} {save}: {rules:#?}"
            );
            // The jump comes first in FORWARD.
            let first = rules.iter().find(|r| r.starts_with("-A FORWARD "));
            assert_eq!(first, Some(&forward_jump()), "{context} {save}");
        }
    }

    fn assert_admitted(fx: &Fixture, at: &Attachment, context: &str) {
        for (save, host) in families(at) {
            let rules = fx.rules(save);
            let mut wanted = address_rules(&host).to_vec();
            wanted.push(marker_of(&host, at));
            assert!(has_all(&rules, &wanted), "{context} {save}: {rules:#?}");
        }
    }

    fn mentions(fx: &Fixture, text: &str) -> bool {
        ["iptables-save", "ip6tables-save"]
            .iter()
            .any(|save| saved(fx, save).contains(text))
    }

    fn snapshot(fx: &Fixture) -> String {
        ["iptables-save", "ip6tables-save"]
            .iter()
            .map(|save| format!("{:#?}{:#?}", fx.chains(save), fx.rules(save)))
            .collect()
    }

    fn entry_jumps(fx: &Fixture) -> Vec<usize> {
        ["iptables-save", "ip6tables-save"]
            .iter()
            .map(|save| {
                fx.rules(save)
                    .iter()
                    .filter(|r| **r == forward_jump())
                    .count()
            })
            .collect()
    }

    fn remove_entry_jump(fx: &Fixture) {
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
        assert!(out.status.success(), "{out:?}");
    }

    fn assert_isolation(fx: &Fixture, bridge: &str) {
        let shared = "-m comment --comment \"CNI firewall plugin rules (ingressPolicy: same-bridge|isolated)\"";
        let own = "-m comment --comment \"CNI firewall plugin rules (ingressPolicy: same-bridge)\"";
        let stage_1 = format!("-A FORWARD {shared} -j CNI-ISOLATION-STAGE-1");
        for save in ["iptables-save", "ip6tables-save"] {
            let rules = fx.rules(save);
            for rule in [
                stage_1.clone(),
                format!("-A CNI-ISOLATION-STAGE-1 -i {bridge} ! -o {bridge} {own} -j CNI-ISOLATION-STAGE-2"),
                format!("-A CNI-ISOLATION-STAGE-1 {shared} -j RETURN"),
                format!("-A CNI-ISOLATION-STAGE-2 -o {bridge} {shared} -j DROP"),
                format!("-A CNI-ISOLATION-STAGE-2 {shared} -j RETURN"),
            ] {
                assert_eq!(
                    rules.iter().filter(|r| **r == rule).count(),
                    1,
                    "{save}: {rule}\n{rules:#?}"
                );
            }
            // The isolation comes before the admission, in FORWARD.
            let at = |rule: &str| rules.iter().position(|r| r == rule);
            let (stage, admission) = (at(&stage_1), at(&forward_jump()));
            assert!(
                stage.is_some() && admission.is_some() && stage < admission,
                "{save}: {rules:#?}"
            );
        }
    }

    fn isolation_kept(fx: &Fixture, bridge: &str) -> bool {
        ["iptables-save", "ip6tables-save"].iter().all(|save| {
            fx.rules(save)
                .iter()
                .any(|r| r.starts_with(&format!("-A CNI-ISOLATION-STAGE-2 -o {bridge} ")))
        })
    }

    fn other_backend_untouched(fx: &Fixture) -> bool {
        fx.nft_table().is_empty()
    }
}

/// Without firewalld, the automatic choice is iptables; `"backend": ""`
/// is how Podman asks for it (its conflist for the default network).
#[test]
fn empty_backend_key_chooses_iptables() {
    let fx = Fixture::new("fwipt-auto");
    fx.run(
        "ADD",
        &with_prev(
            conf("1.1.0", json!({"backend": ""})),
            prev_result("1.1.0", V4, V6),
        ),
    )
    .assert_ok();
    Iptables::assert_admitted(&fx, &Attachment::first(), "automatic choice");
    assert!(fx.nft_table().is_empty());
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
