//! Traffic through published ports, for both backends, in namespaces:
//! from outside the node, from the node's own address and from
//! 127.0.0.1, hairpin, IPv6, hostIP, UDP port reuse, and rule state.

mod common;

use common::*;
use serde_json::json;

const TCP_PORT: u16 = 8080;
const UDP_PORT: u16 = 5353;
const POD_PORT: u16 = 80;

fn mappings() -> serde_json::Value {
    json!([
        {"hostPort": TCP_PORT, "containerPort": POD_PORT, "protocol": "tcp"},
        {"hostPort": UDP_PORT, "containerPort": POD_PORT, "protocol": "udp"},
    ])
}

fn add(topo: &Topology, backend: Backend, pod: &Pod, mappings: serde_json::Value) {
    let conf = portmap_conf(Some(backend), &pod.result, mappings);
    let out = run_portmap(
        &portmap_bin(),
        &topo.host,
        "ADD",
        &pod.container_id,
        &pod.netns.path(),
        &conf,
    );
    out.assert_ok();
    // The previous result is passed on unchanged (an empty "dns" object,
    // which Go prints, may be left out).
    let mut expected = pod.result.clone();
    if expected["dns"] == json!({}) {
        expected.as_object_mut().unwrap().remove("dns");
    }
    assert_eq!(out.json(), expected);
}

fn del(topo: &Topology, backend: Backend, pod: &Pod, mappings: serde_json::Value) {
    let conf = portmap_conf(Some(backend), &pod.result, mappings);
    run_portmap(
        &portmap_bin(),
        &topo.host,
        "DEL",
        &pod.container_id,
        &pod.netns.path(),
        &conf,
    )
    .assert_ok();
}

fn tcp_and_udp_from_everywhere(backend: Backend) {
    let topo = Topology::new();
    let pod = topo.pod("ctr-a");
    let _server = EchoServer::start(&pod.netns.path(), POD_PORT, "pod-a");
    let outside = topo.outside.path();
    let host = topo.host.path();

    // Nothing is published yet.
    assert!(tcp_get(&outside, addr(HOST_V4, TCP_PORT)).is_err());

    add(&topo, backend, &pod, mappings());

    assert_eq!(tcp_get(&outside, addr(HOST_V4, TCP_PORT)).unwrap(), "pod-a");
    assert_eq!(
        udp_get(&outside, addr(CLIENT_V4, 40001), addr(HOST_V4, UDP_PORT)).unwrap(),
        "pod-a"
    );
    // From the node itself, to its address and to localhost (the output
    // hook, route_localnet and the localhost masquerade).
    assert_eq!(tcp_get(&host, addr(HOST_V4, TCP_PORT)).unwrap(), "pod-a");
    assert_eq!(
        tcp_get(&host, addr("127.0.0.1", TCP_PORT)).unwrap(),
        "pod-a"
    );
    assert_eq!(
        udp_get(&host, addr("127.0.0.1", 40002), addr("127.0.0.1", UDP_PORT)).unwrap(),
        "pod-a"
    );
    let route_localnet = ns_cmd(
        &topo.host,
        "sysctl",
        &["-n", "net.ipv4.conf.cni0.route_localnet"],
    );
    assert_eq!(route_localnet.trim(), "1");
    // IPv6 from outside.
    assert_eq!(tcp_get(&outside, addr(HOST_V6, TCP_PORT)).unwrap(), "pod-a");
    assert_eq!(
        udp_get(&outside, addr(CLIENT_V6, 40003), addr(HOST_V6, UDP_PORT)).unwrap(),
        "pod-a"
    );

    del(&topo, backend, &pod, mappings());
    assert!(tcp_get(&outside, addr(HOST_V4, TCP_PORT)).is_err());
    assert!(tcp_get(&outside, addr(HOST_V6, TCP_PORT)).is_err());
    assert!(tcp_get(&host, addr("127.0.0.1", TCP_PORT)).is_err());
}

fn hairpin(backend: Backend) {
    let topo = Topology::new();
    let pod = topo.pod("ctr-hp");
    let _server = EchoServer::start(&pod.netns.path(), POD_PORT, "pod-hp");
    add(&topo, backend, &pod, mappings());
    // The pod reaches itself through the node's port; masquerading makes
    // the reply come back through the bridge.
    assert_eq!(
        tcp_get(&pod.netns.path(), addr(HOST_V4, TCP_PORT)).unwrap(),
        "pod-hp"
    );
    assert_eq!(
        udp_get(
            &pod.netns.path(),
            addr("0.0.0.0", 40004),
            addr(HOST_V4, UDP_PORT)
        )
        .unwrap(),
        "pod-hp"
    );
}

fn host_ip_restricts_the_address(backend: Backend) {
    let topo = Topology::new();
    let pod = topo.pod("ctr-hip");
    let _server = EchoServer::start(&pod.netns.path(), POD_PORT, "pod-hip");
    let mappings = json!([
        {"hostPort": TCP_PORT, "containerPort": POD_PORT, "protocol": "tcp", "hostIP": HOST_V4},
        // Another family's host IP: skipped for IPv4, used for IPv6.
        {"hostPort": 8081, "containerPort": POD_PORT, "protocol": "tcp", "hostIP": HOST_V6},
    ]);
    add(&topo, backend, &pod, mappings);
    let outside = topo.outside.path();
    assert_eq!(
        tcp_get(&outside, addr(HOST_V4, TCP_PORT)).unwrap(),
        "pod-hip"
    );
    assert!(tcp_get(&outside, addr(HOST_V4_OTHER, TCP_PORT)).is_err());
    assert!(tcp_get(&outside, addr(HOST_V4, 8081)).is_err());
    assert_eq!(tcp_get(&outside, addr(HOST_V6, 8081)).unwrap(), "pod-hip");
    assert!(tcp_get(&outside, addr(HOST_V6, TCP_PORT)).is_err());
}

/// A UDP flow keeps its conntrack entry, and with it the old pod, unless
/// ADD removes the entries of its host port.
fn udp_port_moves_to_the_next_pod(backend: Backend) {
    let topo = Topology::new();
    let pod_a = topo.pod("ctr-ua");
    let pod_b = topo.pod("ctr-ub");
    let _server_a = EchoServer::start(&pod_a.netns.path(), POD_PORT, "pod-a");
    let _server_b = EchoServer::start(&pod_b.netns.path(), POD_PORT, "pod-b");
    let outside = topo.outside.path();
    let client = addr(CLIENT_V4, 40010);
    let client_v6 = addr(CLIENT_V6, 40011);

    add(&topo, backend, &pod_a, mappings());
    assert_eq!(
        udp_get(&outside, client, addr(HOST_V4, UDP_PORT)).unwrap(),
        "pod-a"
    );
    assert_eq!(
        udp_get(&outside, client_v6, addr(HOST_V6, UDP_PORT)).unwrap(),
        "pod-a"
    );
    // Pod A stays up and keeps answering: only the flush can move the
    // flow away from it.
    del(&topo, backend, &pod_a, mappings());
    add(&topo, backend, &pod_b, mappings());
    assert_eq!(
        udp_get(&outside, client, addr(HOST_V4, UDP_PORT)).unwrap(),
        "pod-b"
    );
    assert_eq!(
        udp_get(&outside, client_v6, addr(HOST_V6, UDP_PORT)).unwrap(),
        "pod-b"
    );
}

/// Pod B got pod A's address while A's DEL is still to come: DEL of A
/// must leave B alone, since rules are found by container ID.
fn del_of_one_pod_keeps_the_other(backend: Backend) {
    let topo = Topology::new();
    let pod = topo.pod("ctr-reused");
    let _server = EchoServer::start(&pod.netns.path(), 8001, "a-port");
    let _server2 = EchoServer::start(&pod.netns.path(), 8002, "b-port");
    let outside = topo.outside.path();
    let a = json!([{"hostPort": 9001, "containerPort": 8001, "protocol": "tcp"}]);
    let b = json!([{"hostPort": 9002, "containerPort": 8002, "protocol": "tcp"}]);
    let conf_a = portmap_conf(Some(backend), &pod.result, a.clone());
    let conf_b = portmap_conf(Some(backend), &pod.result, b.clone());
    for (id, conf) in [("ctr-old", &conf_a), ("ctr-new", &conf_b)] {
        run_portmap(
            &portmap_bin(),
            &topo.host,
            "ADD",
            id,
            &pod.netns.path(),
            conf,
        )
        .assert_ok();
    }
    assert_eq!(tcp_get(&outside, addr(HOST_V4, 9001)).unwrap(), "a-port");
    assert_eq!(tcp_get(&outside, addr(HOST_V4, 9002)).unwrap(), "b-port");
    let before = topo.ruleset(backend);
    assert!(before.contains("ctr-new"), "{before}");

    run_portmap(
        &portmap_bin(),
        &topo.host,
        "DEL",
        "ctr-old",
        &pod.netns.path(),
        &conf_a,
    )
    .assert_ok();
    assert!(tcp_get(&outside, addr(HOST_V4, 9001)).is_err());
    assert_eq!(tcp_get(&outside, addr(HOST_V4, 9002)).unwrap(), "b-port");
    let after = topo.ruleset(backend);
    assert!(!after.contains("ctr-old"), "{after}");
    assert!(after.contains("ctr-new"), "{after}");
}

/// After a first pod set up the shared chains, ADD then DEL of another
/// pod leaves exactly the rules there were.
fn del_restores_the_ruleset(backend: Backend) {
    let topo = Topology::new();
    let warm_up = topo.pod("ctr-warm");
    add(&topo, backend, &warm_up, mappings());
    del(&topo, backend, &warm_up, mappings());
    let before = topo.ruleset(backend);

    let pod = topo.pod("ctr-cycle");
    let many = json!([
        {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
        {"hostPort": 8081, "containerPort": 81, "protocol": "udp", "hostIP": HOST_V4},
        {"hostPort": 8082, "containerPort": 82, "protocol": "sctp", "hostIP": HOST_V6},
        {"hostPort": 8083, "containerPort": 83, "protocol": "tcp", "hostIP": "0.0.0.0"},
    ]);
    add(&topo, backend, &pod, many.clone());
    let during = topo.ruleset(backend);
    assert_ne!(during, before);
    del(&topo, backend, &pod, many.clone());
    assert_eq!(topo.ruleset(backend), before);
    // DEL again, and DEL without a namespace: nothing left, no error.
    del(&topo, backend, &pod, many.clone());
    let conf = portmap_conf(Some(backend), &pod.result, many);
    conformance::testnet::PluginCall::new("DEL")
        .var("CNI_CONTAINERID", "ctr-cycle")
        .var("CNI_IFNAME", "eth0")
        .stdin_json(&conf)
        .in_netns(&topo.host)
        .run(&portmap_bin())
        .assert_ok();
    assert_eq!(topo.ruleset(backend), before);
}

macro_rules! for_both_backends {
    ($($test:ident),* $(,)?) => {
        mod nftables {
            use super::*;
            $(#[test] fn $test() { super::$test(Backend::Nftables) })*
        }
        mod iptables {
            use super::*;
            $(#[test] fn $test() { super::$test(Backend::Iptables) })*
        }
    };
}

for_both_backends!(
    tcp_and_udp_from_everywhere,
    hairpin,
    host_ip_restricts_the_address,
    udp_port_moves_to_the_next_pod,
    del_of_one_pod_keeps_the_other,
    del_restores_the_ruleset,
);
