//! The iptables masquerade backend, inside test namespaces, against the
//! Debian reference bridge plugin run in namespaces of its own.

mod ipmasq_common;

use conformance::testnet::TestNetns;
use ipmasq_common::*;
use libcni::ipmasq::{self, MasqBackend};
use libcni::plugin_conf::GcAttachment;
use serde_json::json;

const NETWORK: &str = "mynet";

fn dual_stack() -> serde_json::Value {
    json!([[{"subnet": "10.88.0.0/16"}], [{"subnet": "fd00:88::/64"}]])
}

fn setup(ns: &TestNetns, network: &str, id: &str, ifname: &str, ips: &[ipnetwork::IpNetwork]) {
    in_ns(ns, || {
        ipmasq::setup(MasqBackend::Iptables, network, id, ifname, ips)
    })
    .unwrap_or_else(|e| panic!("setup {network}/{id}/{ifname}: {e}"));
}

fn teardown(ns: &TestNetns, network: &str, id: &str, ifname: &str, ips: &[ipnetwork::IpNetwork]) {
    in_ns(ns, || ipmasq::teardown(network, id, ifname, ips))
        .unwrap_or_else(|e| panic!("teardown {network}/{id}/{ifname}: {e}"));
}

fn both_families(ns: &TestNetns) -> String {
    format!("{}{}", iptables_nat(ns, false), iptables_nat(ns, true))
}

/// An empty `nat` table, as a teardown leaves it (the table itself stays,
/// as with the reference).
fn empty_nat(ns: &TestNetns) -> String {
    in_ns(ns, || {
        ipmasq::setup(
            MasqBackend::Iptables,
            "x",
            "y",
            "eth0",
            &nets(&["10.0.0.2/24", "fd00::2/64"]),
        )
        .and_then(|()| ipmasq::teardown("x", "y", "eth0", &[]))
    })
    .unwrap();
    both_families(ns)
}

#[test]
fn rules_match_the_reference_plugin_byte_for_byte() {
    let data = tempfile::tempdir().unwrap();
    let host = TestNetns::new("iptm-rh");
    let pod = TestNetns::new("iptm-rp");
    let conf = reference_conf(NETWORK, data.path(), dual_stack(), json!({"ipMasq": true}));
    let ips = result_ips(&run_reference("ADD", &host, &pod, "ctr-one", &conf));
    assert_eq!(ips.len(), 2);

    let ours = TestNetns::new("iptm-ours");
    setup(&ours, NETWORK, "ctr-one", "eth0", &ips);
    let expected = both_families(&host);
    assert_eq!(both_families(&ours), expected);
    // The layout of the checklist, measured from the reference.
    let chain = "CNI-682b5374add02da0403a30b6";
    let comment = r#"--comment "name: \"mynet\" id: \"ctr-one\"""#;
    for line in [
        format!(":{chain} - [0:0]"),
        format!(
            "-A POSTROUTING -s {} -m comment {comment} -j {chain}",
            ipmasq_common::net(&format!("{}/32", ips[0].ip()))
        ),
        format!("-A {chain} -d 10.88.0.0/16 -m comment {comment} -j ACCEPT"),
        format!("-A {chain} ! -d 224.0.0.0/4 -m comment {comment} -j MASQUERADE"),
        format!("-A {chain} ! -d ff00::/8 -m comment {comment} -j MASQUERADE"),
    ] {
        assert!(
            expected.lines().any(|l| l == line),
            "{line} not in\n{expected}"
        );
    }
}

#[test]
fn setup_twice_adds_nothing_and_several_addresses_share_the_chain() {
    let ns = TestNetns::new("iptm-idem");
    let ips = nets(&["10.1.0.5/24", "10.2.0.5/24", "fd00:1::5/64"]);
    setup(&ns, NETWORK, "ctr", "eth0", &ips);
    let once = both_families(&ns);
    setup(&ns, NETWORK, "ctr", "eth0", &ips);
    assert_eq!(both_families(&ns), once);
    // The reference's AppendUnique order: the second subnet's ACCEPT comes
    // after the (shared) MASQUERADE rule.
    let chain = ipmasq::names::iptables_chain(NETWORK, "ctr");
    let targets: Vec<&str> = once
        .lines()
        .filter(|l| l.starts_with(&format!("-A {chain} ")) && !l.contains("fd00"))
        .filter(|l| !l.contains("ff00::/8"))
        .map(|l| l.rsplit(' ').next().unwrap())
        .collect();
    assert_eq!(targets, ["ACCEPT", "MASQUERADE", "ACCEPT"], "{once}");
    assert_eq!(once.matches("-A POSTROUTING").count(), 3);
}

#[test]
fn reference_rules_are_removed_by_our_teardown() {
    let data = tempfile::tempdir().unwrap();
    let conf = reference_conf(NETWORK, data.path(), dual_stack(), json!({"ipMasq": true}));

    // The reference's own ADD then DEL, for the state to end in.
    let ref_host = TestNetns::new("iptm-xh");
    let ref_pod = TestNetns::new("iptm-xp");
    run_reference("ADD", &ref_host, &ref_pod, "ctr-one", &conf).assert_ok();
    run_reference("DEL", &ref_host, &ref_pod, "ctr-one", &conf).assert_ok();
    let after_reference_del = both_families(&ref_host);

    let data2 = tempfile::tempdir().unwrap();
    let conf2 = reference_conf(NETWORK, data2.path(), dual_stack(), json!({"ipMasq": true}));
    let host = TestNetns::new("iptm-yh");
    let pod = TestNetns::new("iptm-yp");
    let ips = result_ips(&run_reference("ADD", &host, &pod, "ctr-one", &conf2));
    assert!(both_families(&host).contains("MASQUERADE"));
    teardown(&host, NETWORK, "ctr-one", "eth0", &ips);
    assert_eq!(both_families(&host), after_reference_del);
    assert!(!after_reference_del.contains("CNI-"));
}

#[test]
fn our_rules_are_removed_by_the_reference_del() {
    let data = tempfile::tempdir().unwrap();
    let host = TestNetns::new("iptm-zh");
    let pod = TestNetns::new("iptm-zp");
    // The reference makes the pod and its addresses, without masquerading;
    // we add the masquerade rules; the reference DEL (masquerading on)
    // must find and remove them.
    let plain = reference_conf(NETWORK, data.path(), dual_stack(), json!({}));
    let ips = result_ips(&run_reference("ADD", &host, &pod, "ctr-one", &plain));
    let before = both_families(&host);
    setup(&host, NETWORK, "ctr-one", "eth0", &ips);
    assert!(both_families(&host).contains("-j CNI-"));
    let masq = reference_conf(NETWORK, data.path(), dual_stack(), json!({"ipMasq": true}));
    run_reference("DEL", &host, &pod, "ctr-one", &masq).assert_ok();
    let after = both_families(&host);
    assert!(!after.contains("CNI-"), "{after}");
    // Nothing else changed (the empty table stays, as after any DEL).
    let scratch = TestNetns::new("iptm-zs");
    let expected_empty = if before.is_empty() {
        empty_nat(&scratch)
    } else {
        before
    };
    assert_eq!(after, expected_empty);
}

#[test]
fn teardown_without_addresses_still_removes_the_chain() {
    // The reference leaks the chain when the interface (and so its
    // addresses) is gone by DEL time; the chain name is enough for us.
    let ns = TestNetns::new("iptm-noip");
    setup(
        &ns,
        NETWORK,
        "ctr",
        "eth0",
        &nets(&["10.3.0.7/16", "fd00:3::7/64"]),
    );
    setup(&ns, NETWORK, "other", "eth0", &nets(&["10.3.0.8/16"]));
    teardown(&ns, NETWORK, "ctr", "eth0", &[]);
    let text = both_families(&ns);
    assert!(
        !text.contains(&ipmasq::names::iptables_chain(NETWORK, "ctr")),
        "{text}"
    );
    assert!(text.contains(&ipmasq::names::iptables_chain(NETWORK, "other")));
    // Again, and for what never existed: no error, no change.
    teardown(&ns, NETWORK, "ctr", "eth0", &[]);
    teardown(&ns, "nosuchnet", "nobody", "eth0", &nets(&["10.9.9.9/24"]));
    assert_eq!(both_families(&ns), text);
}

#[test]
fn legacy_prefix_jump_is_removed() {
    // Old reference versions jumped from `-s <ip>/<prefix>`.
    let ns = TestNetns::new("iptm-legacy");
    let chain = ipmasq::names::iptables_chain(NETWORK, "old");
    let comment = r#""name: \"mynet\" id: \"old\"""#;
    let script = format!(
        "*nat\n:{chain} - [0:0]\n-A POSTROUTING -s 10.4.0.9/16 -m comment --comment {comment} -j {chain}\n-A {chain} -d 10.4.0.0/16 -m comment --comment {comment} -j ACCEPT\nCOMMIT\n"
    );
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", ns.name(), "iptables-restore", "--noflush"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(script.as_bytes())?;
            c.wait()
        })
        .unwrap();
    assert!(out.success());
    assert!(iptables_nat(&ns, false).contains("-s 10.4.0.0/16"));
    teardown(&ns, NETWORK, "old", "eth0", &nets(&["10.4.0.9/16"]));
    assert!(!iptables_nat(&ns, false).contains("CNI-"));
}

#[test]
fn two_interfaces_of_one_container_share_the_chain_until_the_last_goes() {
    let ns = TestNetns::new("iptm-share");
    let chain = ipmasq::names::iptables_chain(NETWORK, "ctr");
    setup(&ns, NETWORK, "ctr", "eth0", &nets(&["10.5.0.2/24"]));
    setup(&ns, NETWORK, "ctr", "net1", &nets(&["10.6.0.2/24"]));
    teardown(&ns, NETWORK, "ctr", "eth0", &nets(&["10.5.0.2/24"]));
    let text = iptables_nat(&ns, false);
    assert!(!text.contains("-s 10.5.0.2/32"), "{text}");
    assert!(text.contains(&format!("-A POSTROUTING -s 10.6.0.2/32 -m comment --comment \"name: \\\"mynet\\\" id: \\\"ctr\\\"\" -j {chain}")), "{text}");
    assert!(text.contains(&format!("-A {chain} ! -d 224.0.0.0/4")));
    teardown(&ns, NETWORK, "ctr", "net1", &nets(&["10.6.0.2/24"]));
    assert!(!iptables_nat(&ns, false).contains("CNI-"));
}

#[test]
fn gc_removes_chains_of_containers_no_longer_valid() {
    let ns = TestNetns::new("iptm-gc");
    setup(
        &ns,
        NETWORK,
        "keep",
        "eth0",
        &nets(&["10.7.0.2/24", "fd00:7::2/64"]),
    );
    setup(
        &ns,
        NETWORK,
        "stale",
        "eth0",
        &nets(&["10.7.0.3/24", "fd00:7::3/64"]),
    );
    setup(&ns, "othernet", "stale", "eth0", &nets(&["10.8.0.3/24"]));
    let valid = [GcAttachment {
        container_id: "keep".into(),
        ifname: "eth0".into(),
    }];
    in_ns(&ns, || ipmasq::gc(NETWORK, &valid)).unwrap();
    let text = both_families(&ns);
    assert!(
        !text.contains(&ipmasq::names::iptables_chain(NETWORK, "stale")),
        "{text}"
    );
    assert!(text.contains(&ipmasq::names::iptables_chain(NETWORK, "keep")));
    assert!(text.contains(&ipmasq::names::iptables_chain("othernet", "stale")));
    assert_eq!(text.matches("-A POSTROUTING").count(), 3);
    // Nothing left to collect: no change.
    in_ns(&ns, || ipmasq::gc(NETWORK, &valid)).unwrap();
    assert_eq!(both_families(&ns), text);
}

#[test]
fn masquerades_traffic_leaving_the_subnet() {
    let net = Routed::new("iptm");
    let pod_ip = net.pod_address();
    assert_eq!(net.source_seen_outside(), pod_ip, "before setup");
    setup(
        &net.host,
        "masqnet",
        "ctr",
        "eth0",
        &nets(&[Routed::POD_IP]),
    );
    assert_eq!(
        net.source_seen_outside().to_string(),
        Routed::HOST_OUTSIDE_IP,
        "after setup"
    );
    teardown(
        &net.host,
        "masqnet",
        "ctr",
        "eth0",
        &nets(&[Routed::POD_IP]),
    );
    assert_eq!(net.source_seen_outside(), pod_ip, "after teardown");
}

#[test]
fn default_backend_is_iptables_where_it_works() {
    let ns = TestNetns::new("iptm-sel");
    assert_eq!(
        in_ns(&ns, || ipmasq::select_backend(None)).unwrap(),
        MasqBackend::Iptables
    );
}

#[test]
fn concurrent_first_setups_neither_fail_nor_duplicate() {
    let ns = TestNetns::new("iptm-conc");
    std::thread::scope(|scope| {
        for i in 0..8 {
            let ns = &ns;
            scope.spawn(move || {
                setup(
                    ns,
                    NETWORK,
                    &format!("c{i}"),
                    "eth0",
                    &nets(&[&format!("10.61.0.{}/24", i + 2)]),
                );
            });
        }
    });
    let text = iptables_nat(&ns, false);
    assert_eq!(text.matches("-A POSTROUTING").count(), 8, "{text}");
    assert_eq!(text.matches("-j MASQUERADE").count(), 8, "{text}");
    assert_eq!(text.matches("-j ACCEPT").count(), 8, "{text}");
}
