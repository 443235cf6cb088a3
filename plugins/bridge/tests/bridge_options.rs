//! Configuration options of the built `bridge` binary against real
//! namespaces: bridge creation, gateway addresses, MACs, port options,
//! forwarding, VLANs, rollback and refusals.

mod bridge_common;

use bridge_common::*;
use conformance::testnet::PluginCall;
use serde_json::{json, Value};

fn ipv4(fx: &Fixture, version: &str, extra: Value) -> Value {
    let mut c = conf(version, json!({"ipam": fx.ipam(&["10.1.2.0/24"])}));
    if let (Some(obj), Some(more)) = (c.as_object_mut(), extra.as_object()) {
        for (k, v) in more {
            obj.insert(k.clone(), v.clone());
        }
    }
    c
}

fn flags(link: &Value) -> Vec<String> {
    link["flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect()
}

fn slave_data(fx: &Fixture, dev: &str) -> Value {
    fx.host_link(dev)["linkinfo"]["info_slave_data"].clone()
}

/// Nothing of the attachment is left: no container interface, no host
/// veth, no lease.
fn assert_nothing_left(fx: &Fixture) {
    assert_eq!(fx.pod.links(), vec!["lo"]);
    assert!(fx.host_veths().is_empty(), "{:?}", fx.host.links());
    assert!(fx.leases().is_empty(), "{:?}", fx.leases());
}

/// Reference: "creates a bridge" / "handles an existing bridge".
#[test]
fn bridge_is_created_or_reused() {
    for version in ["0.3.1", "1.1.0"] {
        let fx = Fixture::new("brc");
        let c = ipv4(&fx, version, json!({}));
        fx.add(&c).assert_ok();
        let bridge = fx.host_link(BRIDGE);
        assert_eq!(bridge["linkinfo"]["info_kind"], "bridge");
        assert!(flags(&bridge).contains(&"UP".to_string()));
        assert!(!flags(&bridge).contains(&"PROMISC".to_string()));
        assert_eq!(bridge["promiscuity"], 0);
        fx.del(&c).assert_ok();

        let fx = Fixture::new("bre");
        fx.host.ip(&["link", "add", BRIDGE, "type", "bridge"]);
        let index = fx.host_link(BRIDGE)["ifindex"].clone();
        fx.add(&c).assert_ok();
        assert_eq!(fx.host_link(BRIDGE)["ifindex"], index, "{version}");
        fx.del(&c).assert_ok();
    }
}

#[test]
fn a_link_named_like_the_bridge_must_be_a_bridge() {
    let fx = Fixture::new("nbr");
    fx.host.ip(&[
        "link", "add", BRIDGE, "type", "veth", "peer", "name", "other0",
    ]);
    let out = fx.add(&ipv4(&fx, "1.0.0", json!({})));
    assert_eq!(out.error_code(), 999);
    assert_eq!(
        out.json()["msg"],
        format!("\"{BRIDGE}\" already exists but is not a bridge")
    );
    assert_nothing_left(&fx);
}

#[test]
fn bridge_mtu_and_veth_mtu() {
    let fx = Fixture::new("mtu");
    let c = ipv4(&fx, "1.0.0", json!({"mtu": 1400}));
    let result = fx.add(&c).assert_ok().json();
    assert_eq!(fx.host_link(BRIDGE)["mtu"], 1400);
    let host_veth = result["interfaces"][1]["name"].as_str().unwrap();
    assert_eq!(fx.host_link(host_veth)["mtu"], 1400);
    assert_eq!(
        fx.pod.ip_json(&["link", "show", "dev", IFNAME])[0]["mtu"],
        1400
    );
    fx.del(&c).assert_ok();
}

/// Reference: "ensure bridge address" (IPv4; IPv6 overlapping and not),
/// through ADD with `isGateway`, a gateway already on the bridge, without
/// and with `forceAddress`.
#[test]
fn gateway_address_rules() {
    for (existing, subnet, gateway, conflicts) in [
        ("10.0.0.1/8", "10.1.0.0/16", "10.1.0.1/16", true),
        (
            "2001:db8:1::1/48",
            "2001:db8:1:2::/64",
            "2001:db8:1:2::1/64",
            true,
        ),
        (
            "2001:db8:1:2::1/64",
            "fd00:1234::/64",
            "fd00:1234::1/64",
            false,
        ),
    ] {
        let fx = Fixture::new("gwa");
        fx.host.ip(&["link", "add", BRIDGE, "type", "bridge"]);
        fx.host.ip(&["addr", "add", existing, "dev", BRIDGE]);
        let c = conf(
            "1.0.0",
            json!({"isGateway": true, "ipam": fx.ipam(&[subnet])}),
        );
        let out = fx.add(&c);
        if conflicts {
            assert_eq!(out.error_code(), 999, "{existing} vs {gateway}");
            assert_eq!(
                out.json()["msg"],
                format!("\"{BRIDGE}\" already has an IP address different from {gateway}")
            );
            // Refused after IPAM: the lease and the veth are rolled back.
            assert_nothing_left(&fx);
            assert_eq!(Fixture::addresses(&fx.host, BRIDGE), vec![existing]);

            let mut forced = c.clone();
            forced["forceAddress"] = json!(true);
            fx.add(&forced).assert_ok();
            assert_eq!(Fixture::addresses(&fx.host, BRIDGE), vec![gateway]);
            fx.del(&forced).assert_ok();
        } else {
            out.assert_ok();
            let mut both = vec![existing.to_string(), gateway.to_string()];
            both.sort();
            assert_eq!(Fixture::addresses(&fx.host, BRIDGE), both);
            fx.del(&c).assert_ok();
        }
    }
}

/// Reference: "ensure promiscuous mode on bridge".
#[test]
fn promiscuous_bridge() {
    let fx = Fixture::new("prm");
    let c = ipv4(
        &fx,
        "1.0.0",
        json!({"promiscMode": true, "isGateway": true}),
    );
    let result = fx.add(&c).assert_ok().json();
    let bridge = fx.host_link(BRIDGE);
    assert!(flags(&bridge).contains(&"PROMISC".to_string()), "{bridge}");
    let with_prev = with_prev_result(c.clone(), &result);
    fx.check(&with_prev).assert_ok();
    // CHECK compares the bridge's state with the configuration.
    let mut plain = with_prev.clone();
    plain["promiscMode"] = json!(false);
    let out = fx.check(&plain);
    assert!(
        out.json()["msg"].as_str().unwrap().contains("Promisc Mode"),
        "{}",
        out.stdout
    );
    fx.del(&with_prev).assert_ok();
    assert!(flags(&fx.host_link(BRIDGE)).contains(&"PROMISC".to_string()));

    let both = ipv4(
        &fx,
        "1.0.0",
        json!({"promiscMode": true, "hairpinMode": true}),
    );
    let out = fx.add(&both);
    assert_eq!(out.error_code(), 7);
    assert_eq!(
        out.json()["msg"],
        "cannot set hairpin mode and promiscuous mode at the same time"
    );
}

/// Reference: "creates a bridge with a stable MAC addresses".
#[test]
fn bridge_mac_is_stable_across_add_and_del() {
    for subnet in ["10.1.2.0/24", "2001:db8:42::/64"] {
        for version in ["0.3.0", "1.0.0"] {
            let fx = Fixture::new("smac");
            fx.host.ip(&["link", "add", BRIDGE, "type", "bridge"]);
            let before = fx.host_link(BRIDGE)["address"].clone();
            let c = conf(
                version,
                json!({"isDefaultGateway": true, "ipam": fx.ipam(&[subnet])}),
            );
            let result = fx.add(&c).assert_ok().json();
            assert_eq!(result["interfaces"][0]["mac"], before, "{subnet} {version}");
            assert_eq!(fx.host_link(BRIDGE)["address"], before);
            fx.del(&c).assert_ok();
            assert_eq!(
                fx.host_link(BRIDGE)["address"],
                before,
                "after its last port left"
            );
        }
    }
}

/// A bridge whose MAC dropped to zeros when its last port left; the
/// reference fails the next ADD with "could not set bridge's mac".
#[test]
fn zero_mac_bridge_does_not_break_add() {
    let fx = Fixture::new("zmac");
    fx.host.ip(&["link", "add", BRIDGE, "type", "bridge"]);
    fx.host.ip(&[
        "link", "add", "port0", "type", "veth", "peer", "name", "port1",
    ]);
    fx.host.ip(&["link", "set", "port0", "master", BRIDGE]);
    fx.host.ip(&["link", "del", "port0"]);
    assert_eq!(fx.host_link(BRIDGE)["address"], "00:00:00:00:00:00");

    let c = ipv4(&fx, "1.0.0", json!({"isGateway": true}));
    let result = fx.add(&c).assert_ok().json();
    let mac = fx.host_link(BRIDGE)["address"].clone();
    assert_ne!(mac, "00:00:00:00:00:00");
    assert_eq!(result["interfaces"][0]["mac"], mac);
    assert!(ping_eventually(&fx.pod, "10.1.2.1"));
    fx.del(&c).assert_ok();
    assert_eq!(fx.host_link(BRIDGE)["address"], mac, "pinned");
}

fn container_mac(fx: &Fixture) -> Value {
    fx.pod.ip_json(&["link", "show", "dev", IFNAME])[0]["address"].clone()
}

/// Reference: "uses an explicit MAC addresses for the container iface"
/// from CNI_ARGS, from args and from RuntimeConfig (spelled as in the
/// reference's test: Go matches keys case-insensitively). CNI_ARGS carries
/// `IgnoreUnknown=1` because the IPAM plugin sees the same variable and
/// does not know `MAC`.
#[test]
fn container_mac_precedence() {
    const EXPECTED: &str = "02:00:00:00:00:00";
    let cases = [
        (json!({}), "IgnoreUnknown=1;MAC=02:00:00:00:00:00"),
        (
            json!({"args": {"cni": {"mac": EXPECTED}}}),
            "IgnoreUnknown=1;MAC=02:00:00:00:04:56",
        ),
        (
            json!({"args": {"cni": {"mac": "02:00:00:00:07:89"}},
                "RuntimeConfig": {"mac": EXPECTED}}),
            "IgnoreUnknown=1;MAC=02:00:00:00:04:56",
        ),
    ];
    for version in ALL_VERSIONS {
        for (extra, cni_args) in &cases {
            let fx = Fixture::new("mac");
            let c = ipv4(&fx, version, extra.clone());
            let result = fx
                .run(fx.call("ADD", &c).var("CNI_ARGS", *cni_args))
                .assert_ok()
                .json();
            assert_eq!(container_mac(&fx), EXPECTED, "{version} {extra}");
            if has_interfaces(version) {
                assert_eq!(result["interfaces"][2]["mac"], EXPECTED);
            }
            fx.run(fx.call("DEL", &c).var("CNI_ARGS", *cni_args))
                .assert_ok();
        }
    }
}

/// Reference: "checks ip release in case of error", with the test-only
/// failure injected after all the work (debug builds only).
#[test]
#[cfg_attr(
    not(debug_assertions),
    ignore = "the failure hook exists in debug builds only"
)]
fn failure_after_ipam_releases_everything() {
    for version in ALL_VERSIONS {
        let fx = Fixture::new("rel");
        let c = ipv4(&fx, version, json!({"isGateway": true}));
        let out = fx.run(
            fx.call("ADD", &c)
                .var("CNI_BRIDGE_DEBUG_POST_IPAM_ERROR", "debugPostIPAMError"),
        );
        assert_eq!(out.error_code(), 999, "{version}");
        assert_eq!(out.json()["msg"], "debugPostIPAMError");
        assert_nothing_left(&fx);
        // The network itself works for the next container.
        fx.add(&c).assert_ok();
        assert_eq!(fx.leases().len(), 1);
        fx.del(&c).assert_ok();
    }
}

/// Reference: "should fail when both IPAM and DisableContainerInterface
/// are set" and "should set the container veth peer state down".
#[test]
fn disabled_container_interface() {
    for version in ALL_VERSIONS {
        let fx = Fixture::new("dci");
        let with_ipam = ipv4(&fx, version, json!({"disableContainerInterface": true}));
        let out = fx.add(&with_ipam);
        assert_eq!(out.error_code(), 7, "{version}");
        assert_eq!(
            out.json()["msg"],
            "cannot use IPAM when DisableContainerInterface flag is set"
        );
        assert!(!fx.host_has_link(BRIDGE), "refused before any change");

        let l2 = conf(version, json!({"disableContainerInterface": true}));
        let out = fx.add(&l2);
        if !has_interfaces(version) {
            assert_eq!(out.error_code(), 1);
            assert_eq!(fx.pod.links(), vec!["lo"]);
            continue;
        }
        let result = out.assert_ok().json();
        assert_result(version, &result, &fx.pod, &[]);
        let eth0 = &fx.pod.ip_json(&["link", "show", "dev", IFNAME])[0];
        assert!(!flags(eth0).contains(&"UP".to_string()), "{eth0}");
        assert_eq!(eth0["operstate"], "DOWN");
        let host_veth = &fx.host_veths()[0];
        assert_eq!(fx.host_link(host_veth)["master"], BRIDGE);
        fx.del(&l2).assert_ok();
        assert_nothing_left(&fx);
    }
}

/// Reference: "when port-isolation is off/on".
#[test]
fn port_isolation_flag() {
    for version in ALL_VERSIONS.into_iter().filter(|v| has_interfaces(v)) {
        for isolated in [false, true] {
            let fx = Fixture::new("iso");
            let c = conf(version, json!({"portIsolation": isolated}));
            let result = fx.add(&c).assert_ok().json();
            let host_veth = result["interfaces"][1]["name"].as_str().unwrap();
            assert_eq!(
                slave_data(&fx, host_veth)["isolated"],
                isolated,
                "{version}"
            );
            fx.del(&c).assert_ok();
        }
    }
}

#[test]
fn isolated_ports_cannot_talk_to_each_other() {
    let fx = Fixture::new("isot");
    let c = ipv4(
        &fx,
        "1.0.0",
        json!({"isGateway": true, "portIsolation": true}),
    );
    fx.add(&c).assert_ok();
    let pod2 = fx.new_pod("isot-p2");
    fx.run(fx.call_for("ADD", &c, "dummy-1", &pod2, IFNAME))
        .assert_ok();
    assert!(
        ping_eventually(&fx.pod, "10.1.2.1"),
        "the host is reachable"
    );
    assert!(!fx.pod.ping("10.1.2.3"), "the other isolated port is not");
    fx.run(fx.call_for("DEL", &c, "dummy-1", &pod2, IFNAME))
        .assert_ok();
    fx.del(&c).assert_ok();
}

#[test]
fn hairpin_mode_flag() {
    for hairpin in [false, true] {
        let fx = Fixture::new("hp");
        let c = ipv4(&fx, "1.0.0", json!({"hairpinMode": hairpin}));
        let result = fx.add(&c).assert_ok().json();
        let host_veth = result["interfaces"][1]["name"].as_str().unwrap();
        assert_eq!(slave_data(&fx, host_veth)["hairpin"], hairpin);
        fx.del(&c).assert_ok();
    }
}

/// The host end is a bridge port: IPv6 is off on it (no link-local
/// address, routes or DAD of its own, which cost the host more with every
/// port), and the pod's IPv6 still crosses it to the bridge.
#[test]
fn host_veth_has_no_ipv6_of_its_own() {
    let fx = Fixture::new("v6port");
    let c = conf(
        "1.0.0",
        json!({"isGateway": true, "ipam": fx.ipam(&["10.1.2.0/24", "fd00:6::/64"])}),
    );
    let result = fx.add(&c).assert_ok().json();
    let host_veth = result["interfaces"][1]["name"].as_str().unwrap();
    assert_eq!(
        sysctl(&fx.host, &format!("net.ipv6.conf.{host_veth}.disable_ipv6")),
        "1"
    );
    assert_eq!(
        sysctl(&fx.host, &format!("net.ipv6.conf.{host_veth}.accept_ra")),
        "0"
    );
    let addrs = fx.host.ip_json(&["-6", "addr", "show", "dev", host_veth]);
    let on_port: Vec<_> = addrs
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|link| link["addr_info"].as_array().cloned().unwrap_or_default())
        .collect();
    assert!(
        on_port.is_empty(),
        "IPv6 addresses on {host_veth}: {on_port:?}"
    );
    // The bridge keeps its own IPv6 and the pod reaches it through the port.
    assert!(ping_eventually(&fx.pod, "fd00:6::1"));
    assert!(ping_eventually(&fx.host, "fd00:6::2"));
    fx.del(&c).assert_ok();
}

fn machine_sysctl(key: &str) -> String {
    std::fs::read_to_string(format!("/proc/sys/{key}"))
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn gateway_turns_forwarding_on_in_the_host_namespace_only() {
    let machine_v4 = machine_sysctl("net/ipv4/ip_forward");
    let machine_v6 = machine_sysctl("net/ipv6/conf/all/forwarding");

    let fx = Fixture::new("fwd");
    // A new namespace copies its IPv4 `conf/all` settings, ip_forward among
    // them, from the machine's initial namespace (devconf_inherit_init_net
    // is 0 by default), so on a machine with forwarding on (any Kubernetes
    // node, a Podman host, one that ran the README's gateway network) both
    // namespaces start with it on. The test sets the state it asserts from.
    for ns in [&fx.host, &fx.pod] {
        set_sysctl(ns, "net.ipv4.ip_forward", "0");
        set_sysctl(ns, "net.ipv6.conf.all.forwarding", "0");
    }
    let no_gateway = conf("1.0.0", json!({"ipam": fx.ipam(&["10.1.2.0/24"])}));
    fx.add(&no_gateway).assert_ok();
    assert_eq!(sysctl(&fx.host, "net.ipv4.ip_forward"), "0");
    fx.del(&no_gateway).assert_ok();

    let dual = conf(
        "1.0.0",
        json!({"isGateway": true, "ipam": fx.ipam(&["10.1.2.0/24", "fd00:5::/64"])}),
    );
    fx.add(&dual).assert_ok();
    assert_eq!(sysctl(&fx.host, "net.ipv4.ip_forward"), "1");
    assert_eq!(sysctl(&fx.host, "net.ipv6.conf.all.forwarding"), "1");
    assert_eq!(sysctl(&fx.pod, "net.ipv4.ip_forward"), "0");
    fx.del(&dual).assert_ok();

    assert_eq!(machine_sysctl("net/ipv4/ip_forward"), machine_v4);
    assert_eq!(machine_sysctl("net/ipv6/conf/all/forwarding"), machine_v6);
}

#[test]
fn container_interface_sysctls() {
    let fx = Fixture::new("dad");
    let c = conf("1.0.0", json!({"ipam": fx.ipam(&["2001:db8:7::/64"])}));
    fx.add(&c).assert_ok();
    assert_eq!(sysctl(&fx.pod, "net.ipv6.conf.eth0.accept_dad"), "0");
    assert_eq!(sysctl(&fx.pod, "net.ipv4.conf.eth0.arp_notify"), "1");
    assert_eq!(sysctl(&fx.pod, "net.ipv6.conf.eth0.keep_addr_on_down"), "1");
    fx.del(&c).assert_ok();

    let fx = Fixture::new("dad2");
    let c = conf(
        "1.0.0",
        json!({"enabledad": true, "ipam": fx.ipam(&["2001:db8:7::/64"])}),
    );
    fx.add(&c).assert_ok();
    assert_eq!(sysctl(&fx.pod, "net.ipv6.conf.eth0.accept_dad"), "1");
    assert_eq!(sysctl(&fx.pod, "net.ipv6.conf.eth0.enhanced_dad"), "1");
    // ADD waited for duplicate address detection.
    let addrs = fx.pod.ip_json(&["-6", "addr", "show", "dev", IFNAME]);
    for addr in addrs[0]["addr_info"].as_array().unwrap() {
        assert!(addr.get("tentative").is_none(), "{addr}");
    }
    fx.del(&c).assert_ok();
}

/// This kernel has no bridge VLAN filtering (`CONFIG_BRIDGE_VLAN_FILTERING`),
/// so every VLAN configuration of the reference suite must fail, clearly
/// and without leftovers. The VLAN decisions themselves are unit-tested
/// against a fake (`src/vlan/tests.rs`).
#[test]
fn vlan_configurations_fail_clearly_without_kernel_support() {
    let trunk = json!([{"id": 101}, {"minID": 200, "maxID": 210}]);
    let cases = [
        json!({"vlan": 100}),
        json!({"vlanTrunk": trunk}),
        json!({"vlan": 100, "vlanTrunk": trunk}),
        json!({"vlan": 100, "preserveDefaultVlan": false}),
    ];
    for extra in &cases {
        let fx = Fixture::new("vlan");
        let c = conf("1.0.0", extra.clone());
        let out = fx.add(&c);
        assert_eq!(out.error_code(), 999, "{extra}");
        let msg = out.json()["msg"].as_str().unwrap().to_string();
        assert!(msg.contains("CONFIG_BRIDGE_VLAN_FILTERING"), "{msg}");
        assert!(
            msg.contains(&format!("create bridge \"{BRIDGE}\"")),
            "{msg}"
        );
        assert!(!fx.host_has_link(BRIDGE));
        assert_nothing_left(&fx);
        fx.del(&c).assert_ok();
    }

    // L3 with a VLAN on an existing bridge: refused at the port, before
    // IPAM.
    let fx = Fixture::new("vlan3");
    fx.host.ip(&["link", "add", BRIDGE, "type", "bridge"]);
    let c = conf(
        "1.0.0",
        json!({"vlan": 100, "isDefaultGateway": true, "ipam": fx.ipam(&["10.1.2.0/24"])}),
    );
    let out = fx.add(&c);
    let msg = out.json()["msg"].as_str().unwrap().to_string();
    assert!(msg.contains("CONFIG_BRIDGE_VLAN_FILTERING"), "{msg}");
    assert!(msg.contains("to bridge port \"veth"), "{msg}");
    assert_nothing_left(&fx);
    assert!(!fx.host_has_link(&format!("{BRIDGE}.100")));
    fx.del(&c).assert_ok();
}

#[test]
fn bad_configurations_are_refused_before_any_change() {
    let fx = Fixture::new("bad");
    for (extra, code, text) in [
        (
            json!({"vlan": 5000}),
            7,
            "invalid VLAN ID 5000 (must be between 0 and 4094)",
        ),
        (
            json!({"vlan": -100}),
            7,
            "invalid VLAN ID -100 (must be between 0 and 4094)",
        ),
        (
            json!({"vlanTrunk": [{"minID": 100}]}),
            7,
            "minID and maxID should be configured simultaneously, maxID is missing",
        ),
        (
            json!({"ipMasq": true, "ipMasqBackend": "ebtables"}),
            2,
            "ipMasqBackend: unknown ipmasq backend \"ebtables\"",
        ),
        (
            json!({"isGateway": "yes"}),
            7,
            "isGateway must be a boolean",
        ),
        (json!({"mtu": 20}), 7, "invalid MTU 20"),
        (
            json!({"bridge": "a/b"}),
            7,
            "invalid bridge \"a/b\": interface name contains / or : or whitespace characters",
        ),
        (
            json!({"runtimeConfig": {"mac": "ff:ff:ff:ff:ff:ff"}}),
            7,
            "invalid MAC address",
        ),
    ] {
        let out = fx.add(&ipv4(&fx, "1.0.0", extra.clone()));
        assert_eq!(out.error_code(), code, "{extra}");
        let msg = out.json()["msg"].as_str().unwrap().to_string();
        assert!(msg.contains(text), "{extra}: {msg}");
    }
    let out = fx.run(
        fx.call("ADD", &ipv4(&fx, "1.0.0", json!({})))
            .var("CNI_ARGS", "FOO=1"),
    );
    assert_eq!(out.error_code(), 4);
    assert!(!fx.host_has_link(BRIDGE));
    assert_nothing_left(&fx);
    assert!(!fx.data_path().join(NETWORK).exists(), "IPAM never ran");
}

/// `bridge` is checked as a link name before any kernel call, and
/// `CNI_IFNAME` with control characters is refused (code 4) as the
/// reference refuses whitespace in it: nothing made, IPAM never run.
#[test]
fn link_names_are_checked_before_any_change() {
    let fx = Fixture::new("lnk");
    for (bridge, message) in conformance::testnet::refused_link_names("bridge") {
        let out = fx.add(&ipv4(&fx, "1.0.0", json!({"bridge": bridge})));
        assert_eq!(out.error_code(), 7, "{}", out.stderr);
        assert_eq!(out.msg(), message);
    }
    let out = fx.run(
        fx.call("ADD", &ipv4(&fx, "1.0.0", json!({})))
            .var("CNI_IFNAME", "eth\u{1b}0"),
    );
    assert_eq!(out.error_code(), 4, "{}", out.stderr);
    assert_eq!(out.msg(), "interface name contains control characters");
    assert!(!fx.host_has_link(BRIDGE));
    assert_nothing_left(&fx);
    assert!(!fx.data_path().join(NETWORK).exists(), "IPAM never ran");
}

/// The spec: an interface of the requested name already in the container
/// is an error. It is found before anything is created.
#[test]
fn existing_container_interface_is_an_error() {
    let fx = Fixture::new("exi");
    fx.pod.ip(&[
        "link", "add", IFNAME, "type", "veth", "peer", "name", "peer0",
    ]);
    let out = fx.add(&ipv4(&fx, "1.0.0", json!({})));
    assert_eq!(out.error_code(), 999);
    assert_eq!(
        out.json()["msg"],
        format!(
            "container interface \"eth0\" already exists in netns \"{}\"",
            fx.pod.path().display()
        )
    );
    assert!(!fx.host_has_link(BRIDGE));
    assert!(fx.host_veths().is_empty());
    assert!(fx.leases().is_empty());
}

#[test]
fn container_namespace_must_exist_and_be_a_namespace() {
    let fx = Fixture::new("nns");
    let c = ipv4(&fx, "1.0.0", json!({}));
    let missing = PluginCall::new("ADD")
        .attachment(
            CONTAINER_ID,
            "/run/netns/cnitest-does-not-exist".as_ref(),
            IFNAME,
        )
        .stdin_json(&c)
        .in_netns(&fx.host);
    let out = fx.run(missing);
    assert_eq!(out.error_code(), 3);
    let not_ns = PluginCall::new("ADD")
        .attachment(CONTAINER_ID, "/etc/hostname".as_ref(), IFNAME)
        .stdin_json(&c)
        .in_netns(&fx.host);
    assert_eq!(fx.run(not_ns).error_code(), 4);
    assert!(!fx.host_has_link(BRIDGE));
}

/// The host's NAT rules as text: `iptables-save -t nat` and the nftables
/// ruleset.
fn host_nat_rules(fx: &Fixture) -> String {
    let mut text = String::new();
    for (program, args) in [
        ("iptables-save", &["-t", "nat"][..]),
        ("nft", &["list", "ruleset"][..]),
    ] {
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", fx.host.name(), program])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{program}: {out:?}");
        text.push_str(&String::from_utf8_lossy(&out.stdout));
    }
    text
}

/// Routes are the last step of ADD, after the masquerade: a route the
/// kernel refuses (a gateway on no subnet of the pod) fails the ADD and
/// undoes everything, the masquerade rules too, with either backend.
#[test]
fn a_refused_route_undoes_everything_including_the_masquerade() {
    for backend in ["iptables", "nftables"] {
        let fx = Fixture::new("rte");
        let mut ipam = fx.ipam(&["10.1.2.0/24"]);
        ipam["routes"] = json!([{"dst": "192.168.77.0/24", "gw": "172.31.9.9"}]);
        let c = conf(
            "1.0.0",
            json!({"ipam": ipam, "isGateway": true, "ipMasq": true, "ipMasqBackend": backend}),
        );
        let out = fx.add(&c);
        assert_eq!(out.error_code(), 999, "{backend}");
        let msg = out.json()["msg"].as_str().unwrap_or_default().to_string();
        assert!(
            msg.contains("failed to add route '192.168.77.0/24 via 172.31.9.9 dev eth0'"),
            "{msg}"
        );
        assert_nothing_left(&fx);
        let rules = host_nat_rules(&fx);
        assert!(
            !rules.contains("10.1.2."),
            "{backend}: masquerade left:\n{rules}"
        );
        // The same network without the bad route works.
        let c = ipv4(
            &fx,
            "1.0.0",
            json!({"ipMasq": true, "ipMasqBackend": backend}),
        );
        fx.add(&c).assert_ok();
        assert!(host_nat_rules(&fx).contains("10.1.2."), "{backend}");
        fx.del(&c).assert_ok();
        assert!(!host_nat_rules(&fx).contains("10.1.2."), "{backend}");
    }
}
