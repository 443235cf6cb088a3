//! The MAC spoof check, inside test namespaces, against the Debian
//! reference bridge plugin (which has `macspoofchk`).

mod ipmasq_common;

use bridge::spoofchk;
use conformance::testnet::TestNetns;
use ipmasq_common::*;
use serde_json::json;

fn bridge_nat(ns: &TestNetns) -> String {
    let ruleset = nft_ruleset(ns);
    // Only the bridge table: the reference's run also leaves other tables.
    let start = ruleset.find("table bridge nat {").unwrap_or(ruleset.len());
    let rest = &ruleset[start..];
    let end = rest.find("\n}\n").map(|i| i + 3).unwrap_or(rest.len());
    rest[..end].to_string()
}

/// Rule count per chain of `table bridge nat`.
fn rules_in(table: &str, chain: &str) -> Option<usize> {
    let header = format!("\tchain {chain} {{\n");
    let start = table.find(&header)? + header.len();
    let body = &table[start..];
    let body = &body[..body.find("\t}")?];
    Some(
        body.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("type "))
            .count(),
    )
}

fn v4_only() -> serde_json::Value {
    json!([[{"subnet": "10.77.0.0/24"}]])
}

/// Host veth name and container MAC of a reference ADD result.
fn veth_and_mac(outcome: &conformance::testnet::PluginOutcome) -> (String, String) {
    outcome.assert_ok();
    let result = outcome.json();
    let veth = result["interfaces"][1]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let mac = result["interfaces"][2]["mac"].as_str().unwrap().to_string();
    (veth, mac)
}

#[test]
fn rules_match_the_reference_plugin() {
    let data = tempfile::tempdir().unwrap();
    let host = TestNetns::new("spf-rh");
    let pod = TestNetns::new("spf-rp");
    let conf = reference_conf(
        "spoofnet",
        data.path(),
        v4_only(),
        json!({"macspoofchk": true}),
    );
    let (veth, mac) = veth_and_mac(&run_reference("ADD", &host, &pod, "dummy-0", &conf));

    let ours = TestNetns::new("spf-ours");
    in_ns(&ours, || spoofchk::setup("dummy-0", "eth0", &veth, &mac)).unwrap();
    let table = bridge_nat(&ours);
    assert_eq!(table, bridge_nat(&host));
    // The same expressions and comment bytes, not only the same text.
    let bridge_rules = |ns: &TestNetns| -> String {
        let dump = nft_netlink_rules(ns);
        let start = dump.find("bridge nat ").expect("bridge rules in dump");
        let rules: Vec<&str> = dump[start..]
            .lines()
            .take_while(|l| !l.starts_with("table "))
            .filter(|l| !(l.starts_with("inet ") || l.starts_with("ip")))
            .collect();
        rules.join("\n")
    };
    assert_eq!(bridge_rules(&ours), bridge_rules(&host));
    // As the reference test counts them.
    assert_eq!(rules_in(&table, "PREROUTING"), Some(1), "{table}");
    assert_eq!(rules_in(&table, "cni-br-iface-dummy-0-eth0"), Some(1));
    assert_eq!(rules_in(&table, "cni-br-iface-dummy-0-eth0-mac"), Some(2));
    assert!(table.contains(&format!(
        "iifname \"{veth}\" jump cni-br-iface-dummy-0-eth0 comment \"macspoofchk-dummy-0-eth0\""
    )));
    assert!(table.contains(&format!(
        "ether saddr {mac} return comment \"macspoofchk-dummy-0-eth0\""
    )));
}

#[test]
fn setup_twice_keeps_one_set_and_teardown_removes_all() {
    let ns = TestNetns::new("spf-idem");
    let setup = || spoofchk::setup("dummy-0", "eth0", "veth1234", "02:00:00:00:00:01");
    in_ns(&ns, setup).unwrap();
    in_ns(&ns, || {
        spoofchk::setup("other", "eth0", "veth9999", "02:00:00:00:00:09")
    })
    .unwrap();
    let once = bridge_nat(&ns);
    in_ns(&ns, setup).unwrap();
    let twice = bridge_nat(&ns);
    assert_eq!(rules_in(&twice, "PREROUTING"), Some(2), "{twice}");
    assert_eq!(rules_in(&twice, "cni-br-iface-dummy-0-eth0"), Some(1));
    assert_eq!(rules_in(&twice, "cni-br-iface-dummy-0-eth0-mac"), Some(2));
    assert_eq!(twice.len(), once.len());

    in_ns(&ns, || spoofchk::teardown("dummy-0", "eth0")).unwrap();
    let after = bridge_nat(&ns);
    assert_eq!(rules_in(&after, "PREROUTING"), Some(1), "{after}");
    assert_eq!(rules_in(&after, "cni-br-iface-dummy-0-eth0"), None);
    assert_eq!(rules_in(&after, "cni-br-iface-dummy-0-eth0-mac"), None);
    assert_eq!(rules_in(&after, "cni-br-iface-other-eth0-mac"), Some(2));
    assert!(!after.contains("macspoofchk-dummy-0-eth0"));

    // Again, and for something never set up: fine, nothing changes.
    in_ns(&ns, || spoofchk::teardown("dummy-0", "eth0")).unwrap();
    in_ns(&ns, || spoofchk::teardown("never", "eth0")).unwrap();
    assert_eq!(bridge_nat(&ns), after);
}

#[test]
fn teardown_without_any_table_succeeds() {
    let ns = TestNetns::new("spf-empty");
    in_ns(&ns, || spoofchk::teardown("x", "eth0")).unwrap();
    assert_eq!(nft_ruleset(&ns), "");
}

#[test]
fn invalid_input_is_rejected_before_touching_anything() {
    let ns = TestNetns::new("spf-bad");
    assert!(in_ns(&ns, || spoofchk::setup("x", "eth0", "veth1", "not-a-mac")).is_err());
    assert!(in_ns(&ns, || spoofchk::setup(
        "x",
        "eth0",
        "a-name-too-long!",
        "02:00:00:00:00:01"
    ))
    .is_err());
    assert_eq!(nft_ruleset(&ns), "");
}

#[test]
fn reference_rules_are_removed_by_our_teardown_and_ours_by_the_reference_del() {
    let conf_for = |dir: &std::path::Path, spoof: bool| {
        reference_conf("spoofnet", dir, v4_only(), json!({"macspoofchk": spoof}))
    };
    // Reference ADD and DEL, for the state to end in.
    let data = tempfile::tempdir().unwrap();
    let ref_host = TestNetns::new("spf-xh");
    let ref_pod = TestNetns::new("spf-xp");
    run_reference(
        "ADD",
        &ref_host,
        &ref_pod,
        "dummy-0",
        &conf_for(data.path(), true),
    )
    .assert_ok();
    run_reference(
        "DEL",
        &ref_host,
        &ref_pod,
        "dummy-0",
        &conf_for(data.path(), true),
    )
    .assert_ok();
    let expected = bridge_nat(&ref_host);
    assert_eq!(rules_in(&expected, "PREROUTING"), Some(0), "{expected}");

    // Reference ADD, our teardown.
    let data = tempfile::tempdir().unwrap();
    let host = TestNetns::new("spf-yh");
    let pod = TestNetns::new("spf-yp");
    run_reference("ADD", &host, &pod, "dummy-0", &conf_for(data.path(), true)).assert_ok();
    in_ns(&host, || spoofchk::teardown("dummy-0", "eth0")).unwrap();
    assert_eq!(bridge_nat(&host), expected);

    // Our setup (on a pod the reference made without the check), the
    // reference's DEL.
    let data = tempfile::tempdir().unwrap();
    let host = TestNetns::new("spf-zh");
    let pod = TestNetns::new("spf-zp");
    let (veth, mac) = veth_and_mac(&run_reference(
        "ADD",
        &host,
        &pod,
        "dummy-0",
        &conf_for(data.path(), false),
    ));
    in_ns(&host, || spoofchk::setup("dummy-0", "eth0", &veth, &mac)).unwrap();
    assert_eq!(rules_in(&bridge_nat(&host), "PREROUTING"), Some(1));
    run_reference("DEL", &host, &pod, "dummy-0", &conf_for(data.path(), true)).assert_ok();
    assert_eq!(bridge_nat(&host), expected);
}

/// A bridge in a test namespace with two ports: the pod's and a peer's.
/// With the check on the pod's port, frames with the pod's MAC pass and
/// frames with any other source MAC are dropped.
#[test]
fn frames_with_a_spoofed_source_mac_are_dropped() {
    let host = TestNetns::new("spf-fh");
    let pod = TestNetns::new("spf-fp");
    let peer = TestNetns::new("spf-fq");
    host.ip(&["link", "add", "br0", "type", "bridge"]);
    host.ip(&["link", "set", "br0", "up"]);
    for (port, ns, addr) in [
        ("vpod", &pod, "10.50.0.2/24"),
        ("vpeer", &peer, "10.50.0.3/24"),
    ] {
        host.ip(&[
            "link",
            "add",
            port,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            ns.name(),
        ]);
        host.ip(&["link", "set", port, "master", "br0"]);
        host.ip(&["link", "set", port, "up"]);
        ns.ip(&["addr", "add", addr, "dev", "eth0"]);
        ns.ip(&["link", "set", "eth0", "up"]);
    }
    pod.ip(&["link", "set", "eth0", "address", "02:00:00:00:aa:01"]);
    let forget_neighbours = || {
        pod.ip(&["neigh", "flush", "dev", "eth0"]);
        peer.ip(&["neigh", "flush", "dev", "eth0"]);
    };
    assert!(pod.ping("10.50.0.3"), "no connectivity to start with");

    in_ns(&host, || {
        spoofchk::setup("ctr", "eth0", "vpod", "02:00:00:00:aa:01")
    })
    .unwrap();
    forget_neighbours();
    assert!(pod.ping("10.50.0.3"), "the real MAC must pass");

    pod.ip(&["link", "set", "eth0", "address", "02:00:00:00:bb:02"]);
    forget_neighbours();
    assert!(!pod.ping("10.50.0.3"), "a spoofed MAC must be dropped");

    in_ns(&host, || spoofchk::teardown("ctr", "eth0")).unwrap();
    forget_neighbours();
    assert!(pod.ping("10.50.0.3"), "after teardown any MAC passes again");
}
