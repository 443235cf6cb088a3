//! The nftables backend in a fake host namespace: the scenarios both
//! backends share (tests/scenarios, over 0.4.0, 1.0.0 and 1.1.0 where the
//! iptables tests run them) read from table inet cni_plugins_firewall as
//! `nft list` prints it.

mod common;
#[macro_use]
mod scenarios;

use common::*;
use scenarios::{Attachment, RuleBackend};

struct Nftables;

run_scenarios!(Nftables);

/// The comment that names an attachment on its rules.
fn tag(at: &Attachment) -> String {
    format!("cni firewall net={} id={} if={IFNAME}", at.network, at.id)
}

/// The four address rules of an attachment, as `nft list` prints them.
fn address_rules(at: &Attachment) -> [String; 4] {
    let (tag, v4, v6) = (tag(at), &at.v4, &at.v6);
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

/// How many lines of `table` are `line`, indentation aside.
fn count(table: &str, line: &str) -> usize {
    table.lines().filter(|l| l.trim() == line).count()
}

fn admin_jump(admin: &str) -> String {
    format!("jump {admin} comment \"CNI firewall plugin admin overrides\"")
}

impl RuleBackend for Nftables {
    const NAME: &'static str = "nftables";
    const TAG: &'static str = "fwnft";
    const MISSING_JUMP: &'static str =
        "expected rule \"jump CNI-ADMIN\" not found in inet cni_plugins_firewall forward";
    const MISSING_RULE: &'static str =
        "expected rule accepting traffic to 10.0.0.2 not found in inet cni_plugins_firewall forward";

    fn assert_chains(fx: &Fixture, admin: &str, context: &str) {
        let table = fx.nft_table();
        assert!(table.contains("chain forward {"), "{context}: {table}");
        assert!(
            table.contains("type filter hook forward priority filter; policy accept;"),
            "{context}: {table}"
        );
        assert!(
            contains_all(&table, &[admin_jump(admin)]),
            "{context}: {table}"
        );
        assert!(
            table.contains(&format!("chain {admin} {{")),
            "{context}: {table}"
        );
    }

    fn assert_admitted(fx: &Fixture, at: &Attachment, context: &str) {
        let table = fx.nft_table();
        assert!(
            contains_all(&table, &address_rules(at)),
            "{context}: {table}"
        );
    }

    fn mentions(fx: &Fixture, text: &str) -> bool {
        fx.nft_table().contains(text)
    }

    fn snapshot(fx: &Fixture) -> String {
        fx.nft_table()
    }

    fn entry_jumps(fx: &Fixture) -> Vec<usize> {
        vec![count(&fx.nft_table(), &admin_jump("CNI-ADMIN"))]
    }

    fn remove_entry_jump(fx: &Fixture) {
        let chain = ["inet", "cni_plugins_firewall", "forward"];
        let out = fx
            .host
            .exec("nft", &[&["-a", "list", "chain"][..], &chain].concat());
        let listing = String::from_utf8_lossy(&out.stdout);
        let handle = listing
            .lines()
            .find(|l| l.trim().starts_with(&admin_jump("CNI-ADMIN")))
            .and_then(|l| l.rsplit_once("# handle "))
            .map(|(_, handle)| handle.trim().to_string());
        let Some(handle) = handle else {
            panic!("no admin jump in {listing}");
        };
        fx.nft(&[&["delete", "rule"][..], &chain, &["handle", &handle]].concat());
    }

    fn assert_isolation(fx: &Fixture, bridge: &str) {
        let table = fx.nft_table();
        let shared = "comment \"CNI firewall plugin rules (ingressPolicy: same-bridge|isolated)\"";
        let own = "comment \"CNI firewall plugin rules (ingressPolicy: same-bridge)\"";
        for (line, times) in [
            (format!("jump isolation_stage_1 {shared}"), 1),
            (
                format!(
                    "iifname \"{bridge}\" oifname != \"{bridge}\" jump isolation_stage_2 {own}"
                ),
                1,
            ),
            (format!("oifname \"{bridge}\" drop {shared}"), 1),
            // One in each stage.
            (format!("return {shared}"), 2),
        ] {
            assert_eq!(count(&table, &line), times, "{line}\n{table}");
        }
        // The isolation comes before the admission, in the forward chain.
        let forward = table.split("chain forward {").nth(1).unwrap_or_default();
        let stage = forward.find("jump isolation_stage_1");
        let admin = forward.find("jump CNI-ADMIN");
        assert!(
            stage.is_some() && admin.is_some() && stage < admin,
            "{table}"
        );
    }

    fn isolation_kept(fx: &Fixture, bridge: &str) -> bool {
        fx.nft_table()
            .contains(&format!("oifname \"{bridge}\" drop"))
    }

    fn other_backend_untouched(fx: &Fixture) -> bool {
        fx.rules("iptables-save").is_empty() && fx.rules("ip6tables-save").is_empty()
    }
}
