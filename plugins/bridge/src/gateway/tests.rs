use conformance::testnet::TestNetns;
use libcni::netns::NetNs;

use super::*;
use crate::vlan::fake::{Entry, RecordingVlans, VlanCall};

fn net(s: &str) -> IpNetwork {
    s.parse().unwrap()
}

fn ip_config(address: &str, gateway: Option<&str>) -> v100::IpConfig {
    v100::IpConfig {
        interface: None,
        address: net(address),
        gateway: gateway.map(|g| g.parse().unwrap()),
    }
}

fn result_with(ips: Vec<v100::IpConfig>, routes: Vec<Route>) -> v100::Result {
    v100::Result {
        ips,
        routes,
        ..v100::Result::new()
    }
}

#[test]
fn first_host_of_a_subnet() {
    assert_eq!(
        first_host(net("10.1.2.7/24")),
        Some("10.1.2.1".parse().unwrap())
    );
    assert_eq!(
        first_host(net("2001:db8::5/64")),
        Some("2001:db8::1".parse().unwrap())
    );
    assert_eq!(first_host(net("255.255.255.255/32")), None);
}

#[test]
fn gateways_are_computed_per_family_and_ips_point_at_the_container() {
    let mut r = result_with(
        vec![
            ip_config("192.168.0.2/24", None),
            ip_config("fd00::2/64", None),
            ip_config("2001:db8::2/64", Some("2001:db8::fe")),
        ],
        vec![],
    );
    let gws = complete_result(&mut r, true, true);
    assert_eq!(gws.v4, vec![net("192.168.0.1/24")]);
    assert_eq!(gws.v6, vec![net("fd00::1/64"), net("2001:db8::fe/64")]);
    assert!(r.ips.iter().all(|ip| ip.interface == Some(2)));
    assert_eq!(r.ips[0].gateway, Some("192.168.0.1".parse().unwrap()));
    // One default route per family, through the family's first gateway.
    assert_eq!(
        r.routes,
        vec![
            Route::new(net("0.0.0.0/0"), Some("192.168.0.1".parse().unwrap())),
            Route::new(net("::/0"), Some("fd00::1".parse().unwrap())),
        ]
    );
}

#[test]
fn without_is_gateway_nothing_goes_on_the_host() {
    let mut r = result_with(vec![ip_config("10.0.0.2/24", None)], vec![]);
    let gws = complete_result(&mut r, false, false);
    assert!(gws.is_empty());
    assert_eq!(r.ips[0].gateway, None);
    assert!(r.routes.is_empty());
    assert_eq!(r.ips[0].interface, Some(2));
}

#[test]
fn an_existing_default_route_with_a_gateway_is_kept_alone() {
    let existing = Route::new(net("0.0.0.0/0"), Some("10.0.0.254".parse().unwrap()));
    let mut r = result_with(
        vec![ip_config("10.0.0.2/24", Some("10.0.0.1"))],
        vec![existing.clone()],
    );
    complete_result(&mut r, true, true);
    assert_eq!(r.routes, vec![existing]);
    // A default route without a gateway does not count.
    let no_gw = Route::new(net("0.0.0.0/0"), None);
    let mut r = result_with(vec![ip_config("10.0.0.2/24", None)], vec![no_gw.clone()]);
    complete_result(&mut r, true, true);
    assert_eq!(r.routes.len(), 2);
    assert_eq!(r.routes[0], no_gw);
}

#[test]
fn address_rules_of_the_reference() {
    use AddressPlan::*;
    // IPv4: any other address conflicts.
    let have = [net("10.0.0.1/8")];
    assert_eq!(plan_address(&have, net("10.0.0.1/8"), false), AlreadyThere);
    assert_eq!(
        plan_address(&have, net("10.1.2.3/16"), false),
        Conflict(net("10.0.0.1/8"))
    );
    assert_eq!(
        plan_address(&have, net("10.1.2.3/16"), true),
        Add {
            remove: vec![net("10.0.0.1/8")]
        }
    );
    assert_eq!(
        plan_address(&[net("192.168.9.1/24")], net("10.1.2.3/16"), false),
        Conflict(net("192.168.9.1/24"))
    );
    // IPv6: overlapping subnets conflict, others coexist; other families
    // are ignored.
    let have = [
        net("2001:db8:1::1/48"),
        net("fe80::1/64"),
        net("10.0.0.1/8"),
    ];
    assert_eq!(
        plan_address(&have, net("2001:db8:1:2::1/64"), false),
        Conflict(net("2001:db8:1::1/48"))
    );
    assert_eq!(
        plan_address(&[net("2001:db8:1:2::1/64")], net("fd00:1234::1/64"), false),
        Add { remove: vec![] }
    );
    assert_eq!(
        plan_address(&[], net("10.0.0.1/24"), false),
        Add { remove: vec![] }
    );
}

fn addresses(ns: &TestNetns, dev: &str, family: &str) -> Vec<String> {
    let v = ns.ip_json(&[family, "addr", "show", "dev", dev]);
    v[0]["addr_info"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
        .collect()
}

fn bridge_in(ns: &TestNetns) -> (RouteSocket, LinkInfo) {
    ns.ip(&["link", "add", "br0", "type", "bridge"]);
    ns.ip(&["link", "set", "br0", "up"]);
    let netns = NetNs::open(ns.path()).unwrap();
    let mut socket = RouteSocket::open_in(&netns).unwrap();
    let link = socket.link_by_name("br0").unwrap().unwrap();
    (socket, link)
}

/// The reference's "ensure bridge address" cases, on a real bridge in a
/// namespace of the test's own.
#[test]
fn ensure_address_on_a_real_bridge() {
    for (first, second, family) in [
        ("10.0.0.1/8", "10.1.2.3/16", "-4"),
        ("2001:db8:1::1/48", "2001:db8:1:2::1/64", "-6"),
        ("2001:db8:1:2::1/64", "fd00:1234::1/64", "-6"),
    ] {
        let ns = TestNetns::new("gwaddr");
        let (mut socket, bridge) = bridge_in(&ns);
        let overlap =
            net(first).contains(net(second).ip()) || net(second).contains(net(first).ip());
        let conflicting = family == "-4" || overlap;
        let global = |ns: &TestNetns| {
            let mut a: Vec<String> = addresses(ns, "br0", family)
                .into_iter()
                .filter(|a| !a.starts_with("fe80"))
                .collect();
            a.sort();
            a
        };

        assert!(ensure_address(&mut socket, &bridge, net(first), false).unwrap());
        assert_eq!(global(&ns), vec![first.to_string()]);
        // Again: nothing to do.
        assert!(!ensure_address(&mut socket, &bridge, net(first), false).unwrap());
        assert_eq!(global(&ns), vec![first.to_string()]);

        let second_try = ensure_address(&mut socket, &bridge, net(second), false);
        if conflicting {
            let e = second_try.unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("\"br0\" already has an IP address different from {second}")
            );
            assert_eq!(global(&ns), vec![first.to_string()]);
        } else {
            assert!(second_try.unwrap());
        }

        let forced = ensure_address(&mut socket, &bridge, net(second), true).unwrap();
        assert_eq!(forced, conflicting, "added only where it was not there yet");
        let mut expected = if conflicting {
            vec![second.to_string()]
        } else {
            vec![first.to_string(), second.to_string()]
        };
        expected.sort();
        assert_eq!(global(&ns), expected, "{first} then {second}");
    }
}

/// `isGateway` with `vlan`: the `<bridge>.<vlan>` interface. The VLAN
/// table is the recording fake because this machine's kernel lacks bridge
/// VLAN filtering; the links themselves are real.
#[test]
fn vlan_gateway_interface_is_made_once_and_reused() {
    let ns = TestNetns::new("vlangw");
    let (mut socket, bridge) = bridge_in(&ns);
    let mut vlans = RecordingVlans::default();
    let plan = PortVlans::plan(Some(100), &[], false);

    let gw = ensure_vlan_gateway(&mut socket, &mut vlans, &bridge, "br0.100", &plan).unwrap();
    assert_eq!(gw.name, "br0.100");
    assert!(gw.up);
    assert_eq!(gw.master, None, "the address end is not a bridge port");
    // Its peer is the bridge port, in VLAN 100 only.
    let port = socket.link_by_index(gw.parent.unwrap()).unwrap().unwrap();
    assert_eq!(port.master, Some(bridge.index));
    assert!(port.name.starts_with("veth"), "{}", port.name);
    assert!(port.up);
    assert_eq!(vlans.calls.first(), Some(&VlanCall::List(port.index)));
    assert_eq!(vlans.tables[&port.index][&100], Entry::ACCESS);

    let calls = vlans.calls.len();
    let again = ensure_vlan_gateway(&mut socket, &mut vlans, &bridge, "br0.100", &plan).unwrap();
    assert_eq!(again.index, gw.index);
    assert_eq!(vlans.calls.len(), calls, "reused without VLAN changes");

    ensure_address(&mut socket, &again, net("10.1.2.1/24"), false).unwrap();
    assert_eq!(addresses(&ns, "br0.100", "-4"), vec!["10.1.2.1/24"]);
}

#[test]
fn half_made_vlan_gateway_is_removed() {
    let ns = TestNetns::new("vlangwx");
    let (mut socket, bridge) = bridge_in(&ns);
    let mut vlans = RecordingVlans {
        unsupported: true,
        ..RecordingVlans::default()
    };
    let plan = PortVlans::plan(Some(100), &[], false);
    let e = ensure_vlan_gateway(&mut socket, &mut vlans, &bridge, "br0.100", &plan).unwrap_err();
    assert!(
        e.to_string().contains("CONFIG_BRIDGE_VLAN_FILTERING"),
        "{e}"
    );
    let mut links = ns.links();
    links.sort();
    assert_eq!(links, vec!["br0", "lo"]);
}
