//! The nftables masquerade backend, inside test namespaces.
//!
//! The Debian reference plugins (1.1.1) predate the nftables backend, so the
//! reference here is what its code sends to `nft` (the knftables
//! transaction text, as in `plg:pkg/ip/ipmasq_nftables_linux_test.go`),
//! applied with `nft` in a namespace of its own. Our rules, written over
//! netlink, must list exactly like those.

mod ipmasq_common;

use conformance::testnet::TestNetns;
use ipmasq_common::*;
use libcni::ipmasq::{self, MasqBackend};
use libcni::plugin_conf::GcAttachment;

const HEADER: &str = r#"add table inet cni_plugins_masquerade { comment "Masquerading for plugins from github.com/containernetworking/plugins" ; }
add chain inet cni_plugins_masquerade masq_checks { comment "Masquerade traffic from certain IPs to any (non-multicast) IP outside their subnet" ; }
add chain inet cni_plugins_masquerade postrouting { type nat hook postrouting priority 100 ; }
flush chain inet cni_plugins_masquerade postrouting
add rule inet cni_plugins_masquerade postrouting ip daddr == 224.0.0.0/4  return
add rule inet cni_plugins_masquerade postrouting ip6 daddr == ff00::/8  return
add rule inet cni_plugins_masquerade postrouting goto masq_checks
"#;

/// The reference's rules for its four test containers, in its order.
const REFERENCE_RULES: &str = r#"add rule inet cni_plugins_masquerade masq_checks ip saddr == 192.168.1.1 ip daddr != 192.168.1.0/24 masquerade comment "6fd94d501e58f0aa-287fc69eff0574a2, net: unit-test, if: eth0, id: one"
add rule inet cni_plugins_masquerade masq_checks ip saddr == 192.168.1.2 ip daddr != 192.168.1.0/24 masquerade comment "6fd94d501e58f0aa-d750b2c8f0f25d5f, net: unit-test, if: eth0, id: two"
add rule inet cni_plugins_masquerade masq_checks ip6 saddr == 2001:db8::2 ip6 daddr != 2001:db8::/64 masquerade comment "6fd94d501e58f0aa-d750b2c8f0f25d5f, net: unit-test, if: eth0, id: two"
add rule inet cni_plugins_masquerade masq_checks ip saddr == 192.168.99.5 ip daddr != 192.168.99.0/24 masquerade comment "6fd94d501e58f0aa-a4d4adb82b669cfe, net: unit-test, if: eth0, id: three"
add rule inet cni_plugins_masquerade masq_checks ip saddr == 10.0.0.5 ip daddr != 10.0.0.0/24 masquerade comment "82783ef24bdc7036-acb19d111858e348, net: alternate, if: net1, id: three"
add rule inet cni_plugins_masquerade masq_checks ip saddr == 10.0.0.6 ip daddr != 10.0.0.0/24 masquerade comment "82783ef24bdc7036-acb19d111858e348, net: alternate, if: net1, id: three"
add rule inet cni_plugins_masquerade masq_checks ip saddr == 10.0.1.7 ip daddr != 10.0.1.0/24 masquerade comment "82783ef24bdc7036-acb19d111858e348, net: alternate, if: net1, id: three"
add rule inet cni_plugins_masquerade masq_checks ip6 saddr == 2001:db8::5 ip6 daddr != 2001:db8::/64 masquerade comment "82783ef24bdc7036-acb19d111858e348, net: alternate, if: net1, id: three"
add rule inet cni_plugins_masquerade masq_checks ip6 saddr == 2001:db8::6 ip6 daddr != 2001:db8::/64 masquerade comment "82783ef24bdc7036-acb19d111858e348, net: alternate, if: net1, id: three"
add rule inet cni_plugins_masquerade masq_checks ip6 saddr == 2001:db8:1::7 ip6 daddr != 2001:db8:1::/64 masquerade comment "82783ef24bdc7036-acb19d111858e348, net: alternate, if: net1, id: three"
"#;

/// The four containers of the reference test: (network, ifname, id, addresses).
fn containers() -> Vec<(
    &'static str,
    &'static str,
    &'static str,
    Vec<ipnetwork::IpNetwork>,
)> {
    vec![
        ("unit-test", "eth0", "one", nets(&["192.168.1.1/24"])),
        (
            "unit-test",
            "eth0",
            "two",
            nets(&["192.168.1.2/24", "2001:db8::2/64"]),
        ),
        ("unit-test", "eth0", "three", nets(&["192.168.99.5/24"])),
        (
            "alternate",
            "net1",
            "three",
            nets(&[
                "10.0.0.5/24",
                "10.0.0.6/24",
                "10.0.1.7/24",
                "2001:db8::5/64",
                "2001:db8::6/64",
                "2001:db8:1::7/64",
            ]),
        ),
    ]
}

fn setup_all(ns: &TestNetns) {
    for (network, ifname, id, ips) in containers() {
        in_ns(ns, || {
            ipmasq::setup(MasqBackend::Nftables, network, id, ifname, &ips)
        })
        .unwrap_or_else(|e| panic!("setup {network}/{id}: {e}"));
    }
}

/// The reference's rule for `192.168.1.1` added again for container "four".
const FOUR_RULE: &str = r#"add rule inet cni_plugins_masquerade masq_checks ip saddr == 192.168.1.1 ip daddr != 192.168.1.0/24 masquerade comment "6fd94d501e58f0aa-e766de567ef6c543, net: unit-test, if: eth0, id: four"
"#;

/// What the reference's teardown does: delete, by handle, the rules of
/// `masq_checks` whose comment starts with `prefix`.
fn reference_teardown(ns: &TestNetns, prefix: &str) {
    let listing = nft_list_chain_with_handles(ns, "inet", "cni_plugins_masquerade", "masq_checks");
    let mut script = String::new();
    for line in listing.lines() {
        if !line.contains(&format!("comment \"{prefix}")) {
            continue;
        }
        let handle = line.rsplit("# handle ").next().unwrap().trim();
        script.push_str(&format!(
            "delete rule inet cni_plugins_masquerade masq_checks handle {handle}\n"
        ));
    }
    assert!(
        !script.is_empty(),
        "no rule with comment prefix {prefix}:\n{listing}"
    );
    nft_apply(ns, &script);
}

fn masq_rule_lines(ruleset: &str) -> Vec<&str> {
    ruleset
        .lines()
        .map(str::trim)
        .filter(|l| l.ends_with('"') && l.contains(" masquerade comment "))
        .collect()
}

#[test]
fn ruleset_lists_exactly_like_the_references() {
    let ours = TestNetns::new("nftm-ours");
    let reference = TestNetns::new("nftm-ref");
    setup_all(&ours);
    nft_apply(&reference, &format!("{HEADER}{REFERENCE_RULES}"));
    let ours_text = nft_ruleset(&ours);
    assert_eq!(ours_text, nft_ruleset(&reference));
    // Not only printed alike: the same expressions and comment bytes.
    let expressions = nft_netlink_rules(&ours);
    assert_eq!(expressions, nft_netlink_rules(&reference));
    assert!(expressions.contains("[ payload load 3b @ network header + 16 => reg 1 ]"));
    // And it is the layout of the checklist, not an empty agreement.
    assert!(ours_text.contains("type nat hook postrouting priority srcnat; policy accept;"));
    assert!(ours_text.contains(
        "ip6 saddr 2001:db8::2 ip6 daddr != 2001:db8::/64 masquerade comment \"6fd94d501e58f0aa-d750b2c8f0f25d5f, net: unit-test, if: eth0, id: two\""
    ));
    assert_eq!(masq_rule_lines(&ours_text).len(), 10);
}

#[test]
fn setup_again_replaces_instead_of_adding() {
    let ns = TestNetns::new("nftm-idem");
    setup_all(&ns);
    let once = nft_ruleset(&ns);
    setup_all(&ns);
    // Every attachment's rules were deleted and added again, at the end of
    // the chain, in the same order as the first time.
    assert_eq!(nft_ruleset(&ns), once);
    // A changed address replaces the attachment's old rule.
    in_ns(&ns, || {
        ipmasq::setup(
            MasqBackend::Nftables,
            "unit-test",
            "one",
            "eth0",
            &nets(&["192.168.1.9/24"]),
        )
    })
    .unwrap();
    let text = nft_ruleset(&ns);
    assert!(!text.contains("ip saddr 192.168.1.1 "));
    assert!(text.contains("ip saddr 192.168.1.9 ip daddr != 192.168.1.0/24 masquerade"));
    assert_eq!(masq_rule_lines(&text).len(), 10);
}

#[test]
fn teardown_removes_one_attachment_even_when_its_address_was_reused() {
    let ours = TestNetns::new("nftm-td");
    let reference = TestNetns::new("nftm-tdref");
    setup_all(&ours);
    in_ns(&ours, || {
        ipmasq::setup(
            MasqBackend::Nftables,
            "unit-test",
            "four",
            "eth0",
            &nets(&["192.168.1.1/24"]),
        )
    })
    .unwrap();
    // Teardown is by comment: the addresses passed do not matter.
    in_ns(&ours, || ipmasq::teardown("unit-test", "one", "eth0", &[])).unwrap();

    nft_apply(&reference, &format!("{HEADER}{REFERENCE_RULES}{FOUR_RULE}"));
    reference_teardown(&reference, "6fd94d501e58f0aa-287fc69eff0574a2");
    let text = nft_ruleset(&ours);
    assert_eq!(text, nft_ruleset(&reference));
    assert!(text.contains("ip saddr 192.168.1.1 ip daddr != 192.168.1.0/24 masquerade comment \"6fd94d501e58f0aa-e766de567ef6c543"));
    assert!(!text.contains("id: one\""));

    // Tearing down again, or something never set up, changes nothing.
    in_ns(&ours, || ipmasq::teardown("unit-test", "one", "eth0", &[])).unwrap();
    in_ns(&ours, || {
        ipmasq::teardown("nosuchnet", "x", "eth0", &nets(&["10.1.1.1/24"]))
    })
    .unwrap();
    assert_eq!(nft_ruleset(&ours), text);
}

#[test]
fn teardown_without_any_table_succeeds() {
    let ns = TestNetns::new("nftm-empty");
    in_ns(&ns, || {
        ipmasq::teardown("net", "id", "eth0", &nets(&["10.0.0.2/24"]))
    })
    .unwrap();
    in_ns(&ns, || ipmasq::gc("net", &[])).unwrap();
    assert_eq!(nft_ruleset(&ns), "");
}

#[test]
fn rules_of_the_reference_are_removed_by_our_teardown() {
    let ns = TestNetns::new("nftm-refours");
    nft_apply(&ns, &format!("{HEADER}{REFERENCE_RULES}"));
    for (network, ifname, id, ips) in containers() {
        in_ns(&ns, || ipmasq::teardown(network, id, ifname, &ips)).unwrap();
    }
    // What the reference leaves after tearing everything down: the table
    // and the chains, with only the postrouting rules.
    let empty = TestNetns::new("nftm-refempty");
    nft_apply(&empty, HEADER);
    assert_eq!(nft_ruleset(&ns), nft_ruleset(&empty));
}

#[test]
fn rules_we_write_are_found_and_removed_by_the_references_teardown() {
    let ns = TestNetns::new("nftm-oursref");
    setup_all(&ns);
    for prefix in [
        "6fd94d501e58f0aa-287fc69eff0574a2",
        "6fd94d501e58f0aa-d750b2c8f0f25d5f",
        "6fd94d501e58f0aa-a4d4adb82b669cfe",
        "82783ef24bdc7036-acb19d111858e348",
    ] {
        reference_teardown(&ns, prefix);
    }
    let empty = TestNetns::new("nftm-oursempty");
    nft_apply(&empty, HEADER);
    assert_eq!(nft_ruleset(&ns), nft_ruleset(&empty));
}

#[test]
fn gc_keeps_only_valid_attachments_of_the_network() {
    let ns = TestNetns::new("nftm-gc");
    setup_all(&ns);
    in_ns(&ns, || {
        ipmasq::setup(
            MasqBackend::Nftables,
            "unit-test",
            "four",
            "eth0",
            &nets(&["192.168.1.1/24"]),
        )
    })
    .unwrap();
    let attachment = |id: &str, ifname: &str| GcAttachment {
        container_id: id.into(),
        ifname: ifname.into(),
    };
    // As in the reference test: "four" goes, "one" stays (listed though
    // present), the other network is untouched.
    in_ns(&ns, || {
        ipmasq::gc(
            "unit-test",
            &[
                attachment("two", "eth0"),
                attachment("three", "eth0"),
                attachment("one", "eth0"),
            ],
        )
    })
    .unwrap();
    in_ns(&ns, || {
        ipmasq::gc("alternate", &[attachment("three", "net1")])
    })
    .unwrap();
    let text = nft_ruleset(&ns);
    assert!(!text.contains("id: four\""));
    assert_eq!(masq_rule_lines(&text).len(), 10);
    let reference = TestNetns::new("nftm-gcref");
    nft_apply(&reference, &format!("{HEADER}{REFERENCE_RULES}"));
    assert_eq!(text, nft_ruleset(&reference));

    // The interface is part of an attachment: same id, other ifname is stale.
    in_ns(&ns, || {
        ipmasq::gc("alternate", &[attachment("three", "eth0")])
    })
    .unwrap();
    assert_eq!(masq_rule_lines(&nft_ruleset(&ns)).len(), 4);
    in_ns(&ns, || ipmasq::gc("unit-test", &[])).unwrap();
    let empty = TestNetns::new("nftm-gcempty");
    nft_apply(&empty, HEADER);
    assert_eq!(nft_ruleset(&ns), nft_ruleset(&empty));
}

#[test]
fn masquerades_traffic_leaving_the_subnet() {
    let net = Routed::new("nftm");
    let pod_ip = net.pod_address();
    assert_eq!(net.source_seen_outside(), pod_ip, "before setup");
    in_ns(&net.host, || {
        ipmasq::setup(
            MasqBackend::Nftables,
            "masqnet",
            "ctr",
            "eth0",
            &nets(&[Routed::POD_IP]),
        )
    })
    .unwrap();
    assert_eq!(
        net.source_seen_outside().to_string(),
        Routed::HOST_OUTSIDE_IP,
        "after setup"
    );
    in_ns(&net.host, || {
        ipmasq::teardown("masqnet", "ctr", "eth0", &nets(&[Routed::POD_IP]))
    })
    .unwrap();
    assert_eq!(net.source_seen_outside(), pod_ip, "after teardown");
}

#[test]
fn unknown_backend_is_a_config_error() {
    let err = ipmasq::select_backend(Some("pf")).unwrap_err();
    assert_eq!(
        libcni::error::ToCniError::to_cni_error(&err).code,
        libcni::ErrorCode::InvalidNetworkConfig
    );
}

#[test]
fn concurrent_first_setups_leave_one_shared_layout() {
    let ns = TestNetns::new("nftm-conc");
    std::thread::scope(|scope| {
        for i in 0..8 {
            let ns = &ns;
            scope.spawn(move || {
                let ips = nets(&[&format!("10.60.0.{}/24", i + 2)]);
                in_ns(ns, || {
                    ipmasq::setup(
                        MasqBackend::Nftables,
                        "conc",
                        &format!("c{i}"),
                        "eth0",
                        &ips,
                    )
                })
                .unwrap();
            });
        }
    });
    let text = nft_ruleset(&ns);
    assert_eq!(masq_rule_lines(&text).len(), 8, "{text}");
    assert_eq!(text.matches("goto masq_checks").count(), 1, "{text}");
    assert_eq!(text.matches("ip daddr 224.0.0.0/4 return").count(), 1);
}

#[test]
fn later_setups_keep_the_shared_chain_and_repair_it_when_changed() {
    let ns = TestNetns::new("nftm-shared");
    let setup = |id: &str, ip: &str| {
        in_ns(&ns, || {
            ipmasq::setup(MasqBackend::Nftables, "shared", id, "eth0", &nets(&[ip]))
        })
        .unwrap()
    };
    let postrouting =
        || nft_list_chain_with_handles(&ns, "inet", "cni_plugins_masquerade", "postrouting");
    setup("a", "10.70.0.2/24");
    let first = postrouting();
    setup("b", "10.70.0.3/24");
    // The same rules with the same handles: not flushed and written again.
    assert_eq!(postrouting(), first);
    assert_eq!(masq_rule_lines(&nft_ruleset(&ns)).len(), 2);

    // Changed by hand: the next ADD restores the layout.
    let goto = first
        .lines()
        .find(|l| l.contains("goto masq_checks"))
        .and_then(|l| l.rsplit("# handle ").next())
        .unwrap()
        .trim()
        .to_string();
    nft_apply(
        &ns,
        &format!("delete rule inet cni_plugins_masquerade postrouting handle {goto}\n"),
    );
    setup("c", "10.70.0.4/24");
    let repaired = postrouting();
    assert_ne!(repaired, first);
    let strip_handles = |text: &str| -> Vec<String> {
        text.lines()
            .map(|l| l.split(" # handle ").next().unwrap_or(l).to_string())
            .collect()
    };
    assert_eq!(strip_handles(&repaired), strip_handles(&first));
    assert_eq!(masq_rule_lines(&nft_ruleset(&ns)).len(), 3);
}
