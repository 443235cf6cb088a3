//! The built `bridge` binary's firewall rules (ipMasq with each backend,
//! macspoofchk) and its GC and STATUS, in the fake host namespace.

mod bridge_common;

use bridge_common::*;
use conformance::testnet::{PluginCall, TestNetns};
use serde_json::{json, Value};

fn run_in(ns: &TestNetns, program: &str, args: &[&str]) -> String {
    let out = ns.exec(program, args);
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn iptables_nat(ns: &TestNetns) -> String {
    run_in(ns, "iptables", &["-w", "-t", "nat", "-S"])
}

/// Rules of `chain` in `table` of `family` in `ns` (empty when the chain
/// or table does not exist).
fn nft_rules(ns: &TestNetns, family: &str, table: &str, chain: &str) -> Vec<Value> {
    let out = ns.exec("nft", &["-j", "list", "chain", family, table, chain]);
    if !out.status.success() {
        return Vec::new();
    }
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["nftables"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|item| item.get("rule").cloned())
        .collect()
}

fn masq_rules(ns: &TestNetns) -> Vec<Value> {
    nft_rules(ns, "inet", "cni_plugins_masquerade", "masq_checks")
}

/// A third namespace outside the pod network, reachable from the fake
/// host over a veth, with no route back to the pods: only masqueraded
/// traffic gets answers.
fn external_network(fx: &Fixture) -> TestNetns {
    let external = TestNetns::new("masq-x");
    fx.host.ip(&[
        "link",
        "add",
        "uplink",
        "type",
        "veth",
        "peer",
        "name",
        "wan0",
        "netns",
        external.name(),
    ]);
    fx.host
        .ip(&["addr", "add", "192.0.2.1/24", "dev", "uplink"]);
    fx.host.ip(&["link", "set", "uplink", "up"]);
    external.ip(&["addr", "add", "192.0.2.2/24", "dev", "wan0"]);
    external.ip(&["link", "set", "wan0", "up"]);
    external
}

/// Reference: "configures a bridge and ipMasq rules with ipMasqBackend"
/// default, iptables and nftables; here also with traffic that only
/// masquerading lets through.
#[test]
fn ip_masquerade_with_each_backend() {
    for backend in [None, Some("iptables"), Some("nftables")] {
        for version in ["0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
            let fx = Fixture::new("masq");
            let _external = external_network(&fx);
            let mut c = conf(
                version,
                json!({"isDefaultGateway": true, "ipMasq": true,
                    "ipam": fx.ipam(&["10.1.2.0/24"])}),
            );
            if let Some(b) = backend {
                c["ipMasqBackend"] = json!(b);
            }
            let result = fx.add(&c).assert_ok().json();
            assert_eq!(result["ips"][0]["address"], "10.1.2.2/24");
            match backend {
                // The default is iptables while iptables works.
                None | Some("iptables") => {
                    let nat = iptables_nat(&fx.host);
                    let jump = nat
                        .lines()
                        .find(|l| l.starts_with("-A POSTROUTING -s 10.1.2.2/32"))
                        .unwrap_or_else(|| panic!("{nat}"));
                    assert!(jump.contains("-j CNI-"), "{nat}");
                    assert!(nat.contains("-j MASQUERADE"), "{nat}");
                    assert!(masq_rules(&fx.host).is_empty());
                }
                _ => {
                    let rules = masq_rules(&fx.host);
                    assert_eq!(rules.len(), 1, "{rules:?}");
                    let comment = rules[0]["comment"].as_str().unwrap();
                    assert!(comment.contains("id: dummy-0"), "{comment}");
                    assert!(!iptables_nat(&fx.host).contains("10.1.2.2"));
                }
            }
            assert!(
                ping_eventually(&fx.pod, "192.0.2.2"),
                "{backend:?} {version}: masqueraded traffic"
            );

            fx.del(&with_prev_result(c.clone(), &result)).assert_ok();
            assert!(!iptables_nat(&fx.host).contains("CNI-"), "{backend:?}");
            assert!(masq_rules(&fx.host).is_empty());
        }
    }
}

#[test]
fn without_masquerade_the_external_network_is_unreachable() {
    let fx = Fixture::new("nomasq");
    let _external = external_network(&fx);
    let c = conf(
        "1.0.0",
        json!({"isDefaultGateway": true, "ipam": fx.ipam(&["10.1.2.0/24"])}),
    );
    fx.add(&c).assert_ok();
    assert!(ping_eventually(&fx.pod, "192.0.2.1"), "the host answers");
    assert!(
        !fx.pod.ping("192.0.2.2"),
        "no route back without masquerade"
    );
    fx.del(&c).assert_ok();
}

/// containerd's second DEL (no netns, no prevResult) still removes the
/// masquerade rules, with either backend.
#[test]
fn masquerade_is_removed_by_a_del_without_netns() {
    for backend in ["iptables", "nftables"] {
        let fx = Fixture::new("masqd");
        let c = conf(
            "1.0.0",
            json!({"isGateway": true, "ipMasq": true, "ipMasqBackend": backend,
                "ipam": fx.ipam(&["10.1.2.0/24"])}),
        );
        fx.add(&c).assert_ok();
        // The pod namespace vanished before any DEL.
        fx.pod.ip(&["link", "del", IFNAME]);
        let out = fx.run(
            PluginCall::new("DEL")
                .var("CNI_CONTAINERID", CONTAINER_ID)
                .var("CNI_IFNAME", IFNAME)
                .stdin_json(&c)
                .in_netns(&fx.host),
        );
        out.assert_ok();
        assert!(!iptables_nat(&fx.host).contains("CNI-"), "{backend}");
        assert!(masq_rules(&fx.host).is_empty(), "{backend}");
        assert!(fx.leases().is_empty());
    }
}

fn spoofchk_rules(ns: &TestNetns) -> [usize; 3] {
    [
        "PREROUTING",
        "cni-br-iface-dummy-0-eth0",
        "cni-br-iface-dummy-0-eth0-mac",
    ]
    .map(|chain| {
        nft_rules(ns, "bridge", "nat", chain)
            .iter()
            .filter(|r| r["comment"] == "macspoofchk-dummy-0-eth0")
            .count()
    })
}

/// Reference: "configures mac spoof-check (no mac spoofing)"; here also
/// with a spoofed MAC that must not get through.
#[test]
fn mac_spoof_check() {
    for version in ALL_VERSIONS {
        let fx = Fixture::new("spf");
        let c = conf(
            version,
            json!({"isGateway": true, "macspoofchk": true, "ipam": fx.ipam(&["10.1.2.0/24"])}),
        );
        fx.add(&c).assert_ok();
        assert_eq!(spoofchk_rules(&fx.host), [1, 1, 2], "{version}");
        assert!(
            ping_eventually(&fx.pod, "10.1.2.1"),
            "{version}: own MAC passes"
        );
        fx.pod
            .ip(&["link", "set", IFNAME, "address", "02:00:00:00:ba:d0"]);
        fx.host.ip(&["neigh", "flush", "dev", BRIDGE]);
        assert!(
            !fx.pod.ping("10.1.2.1"),
            "{version}: spoofed MAC is dropped"
        );
        fx.del(&c).assert_ok();
        assert_eq!(spoofchk_rules(&fx.host), [0, 0, 0], "{version}");
    }
}

/// A failure after every step of ADD takes back the rules too.
#[test]
#[cfg_attr(
    not(debug_assertions),
    ignore = "the failure hook exists in debug builds only"
)]
fn failed_add_removes_its_rules() {
    for backend in ["iptables", "nftables"] {
        let fx = Fixture::new("rbk");
        let c = conf(
            "1.0.0",
            json!({"isGateway": true, "ipMasq": true, "ipMasqBackend": backend,
                "macspoofchk": true, "ipam": fx.ipam(&["10.1.2.0/24"])}),
        );
        let out = fx.run(
            fx.call("ADD", &c)
                .var("CNI_BRIDGE_DEBUG_POST_IPAM_ERROR", "injected"),
        );
        assert_eq!(out.json()["msg"], "injected");
        assert_eq!(spoofchk_rules(&fx.host), [0, 0, 0]);
        assert!(masq_rules(&fx.host).is_empty());
        assert!(!iptables_nat(&fx.host).contains("CNI-"));
        assert!(fx.leases().is_empty());
        assert!(fx.host_veths().is_empty());
        assert_eq!(fx.pod.links(), vec!["lo"]);
    }
}

fn gc(fx: &Fixture, c: &Value, valid: Value) -> conformance::testnet::PluginOutcome {
    let mut c = c.clone();
    c["cni.dev/valid-attachments"] = valid;
    fx.run(PluginCall::new("GC").stdin_json(&c).in_netns(&fx.host))
}

#[test]
fn gc_removes_masquerade_and_leases_of_stale_attachments() {
    let fx = Fixture::new("gc");
    let c = conf(
        "1.1.0",
        json!({"isGateway": true, "ipMasq": true, "ipMasqBackend": "nftables",
            "ipam": fx.ipam(&["10.1.2.0/24"])}),
    );
    fx.add(&c).assert_ok();
    let pod2 = fx.new_pod("gc-p2");
    fx.run(fx.call_for("ADD", &c, "dummy-1", &pod2, IFNAME))
        .assert_ok();
    assert_eq!(masq_rules(&fx.host).len(), 2);
    assert_eq!(fx.leases(), vec!["10.1.2.2", "10.1.2.3"]);

    gc(
        &fx,
        &c,
        json!([{"containerID": CONTAINER_ID, "ifname": IFNAME}]),
    )
    .assert_ok();
    let rules = masq_rules(&fx.host);
    assert_eq!(rules.len(), 1);
    assert!(rules[0]["comment"]
        .as_str()
        .unwrap()
        .contains("id: dummy-0"));
    assert_eq!(fx.leases(), vec!["10.1.2.2"]);

    gc(&fx, &c, json!([])).assert_ok();
    assert!(masq_rules(&fx.host).is_empty());
    assert!(fx.leases().is_empty());

    // GC is refused before 1.1.0 by the skeleton.
    let old = conf("1.0.0", json!({"ipam": fx.ipam(&["10.1.2.0/24"])}));
    assert_eq!(gc(&fx, &old, json!([])).error_code(), 1);
}

fn status(fx: &Fixture, c: &Value) -> conformance::testnet::PluginOutcome {
    fx.run(PluginCall::new("STATUS").stdin_json(c).in_netns(&fx.host))
}

#[test]
fn status_follows_the_ipam_plugin() {
    let fx = Fixture::new("st");
    assert_eq!(
        status(&fx, &conf("1.1.0", json!({}))).code,
        0,
        "L2 is ready"
    );

    let mut ipam = fx.ipam(&["10.1.2.0/24"]);
    ipam["ranges"] = json!([[{"subnet": "10.1.2.0/24",
        "rangeStart": "10.1.2.10", "rangeEnd": "10.1.2.10"}]]);
    let c = conf("1.1.0", json!({"ipam": ipam}));
    status(&fx, &c).assert_ok();
    fx.add(&c).assert_ok();
    // The only address is taken: IPAM, and so the bridge, cannot serve
    // another ADD.
    let out = status(&fx, &c);
    assert_eq!(out.code, 1, "{}", out.stdout);
    let ipam_status = PluginCall::new("STATUS")
        .stdin_json(&c)
        .in_netns(&fx.host)
        .run(&conformance::testnet::bin_dir().join("host-local"));
    assert_eq!(
        out.json()["code"],
        ipam_status.json()["code"],
        "IPAM's own code"
    );
    fx.del(&c).assert_ok();
    status(&fx, &c).assert_ok();

    let missing = conf("1.1.0", json!({"ipam": {"type": "no-such-ipam"}}));
    let out = status(&fx, &missing);
    assert_eq!(out.code, 1);
    assert!(out.json()["msg"].as_str().unwrap().contains("no-such-ipam"));
}
