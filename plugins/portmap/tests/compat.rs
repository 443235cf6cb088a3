//! A node can switch between the reference portmap and ours in either
//! direction: the rules are the same, and each removes the other's.
//!
//! iptables: against the Debian reference binary. nftables: that binary
//! predates the nftables backend, so the reference's side is its nftables
//! transaction (the `add`/`flush` commands knftables sends, as in the
//! reference's `portmap_nftables_test.go`) applied with `nft -f`, and its
//! DEL (delete every rule of the three container chains whose comment is
//! the container ID) done with `nft`.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use common::*;
use conformance::testnet::TestNetns;
use serde_json::{json, Value};

fn mappings() -> Value {
    json!([
        {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
        {"hostPort": 8081, "containerPort": 81, "protocol": "udp", "hostIP": HOST_V4},
        {"hostPort": 8082, "containerPort": 82, "protocol": "tcp", "hostIP": HOST_V6},
        {"hostPort": 8083, "containerPort": 83, "protocol": "tcp", "hostIP": "0.0.0.0"},
    ])
}

fn run(binary: &Path, topo: &Topology, command: &str, pod: &Pod, backend: Option<Backend>) {
    let conf = portmap_conf(backend, &pod.result, mappings());
    run_portmap(
        binary,
        &topo.host,
        command,
        &pod.container_id,
        &pod.netns.path(),
        &conf,
    )
    .assert_ok();
}

/// The shared chains exist already (a first pod came and went), so that
/// "before" and "after" are comparable.
fn warmed_up(binary: &Path, backend: Backend) -> (Topology, String) {
    let topo = Topology::new();
    let warm = topo.pod("ctr-warm");
    run(binary, &topo, "ADD", &warm, Some(backend));
    run(binary, &topo, "DEL", &warm, Some(backend));
    let baseline = topo.ruleset(backend);
    (topo, baseline)
}

#[test]
fn iptables_rules_are_the_references() {
    let topo = Topology::new();
    let pod = topo.pod("ctr-same");
    // The reference (1.1.1) knows only iptables and takes no "backend".
    run(&reference_portmap(), &topo, "ADD", &pod, None);
    let theirs = topo.ruleset(Backend::Iptables);
    run(&reference_portmap(), &topo, "DEL", &pod, None);
    run(&portmap_bin(), &topo, "ADD", &pod, Some(Backend::Iptables));
    let ours = topo.ruleset(Backend::Iptables);
    assert!(ours.contains("CNI-DN-"), "{ours}");
    assert_eq!(ours, theirs);
}

#[test]
fn we_delete_what_the_reference_added_in_iptables() {
    let (topo, baseline) = warmed_up(&reference_portmap(), Backend::Iptables);
    let pod = topo.pod("ctr-ref-add");
    run(&reference_portmap(), &topo, "ADD", &pod, None);
    assert_ne!(topo.ruleset(Backend::Iptables), baseline);
    run(&portmap_bin(), &topo, "DEL", &pod, Some(Backend::Iptables));
    assert_eq!(topo.ruleset(Backend::Iptables), baseline);
}

#[test]
fn the_reference_deletes_what_we_added_in_iptables() {
    let (topo, baseline) = warmed_up(&portmap_bin(), Backend::Iptables);
    let pod = topo.pod("ctr-our-add");
    run(&portmap_bin(), &topo, "ADD", &pod, Some(Backend::Iptables));
    assert_ne!(topo.ruleset(Backend::Iptables), baseline);
    run(&reference_portmap(), &topo, "DEL", &pod, None);
    assert_eq!(topo.ruleset(Backend::Iptables), baseline);
}

// ---- nftables ----

const V4: &str = "10.99.0.2";
const V6: &str = "fd00:99::2";

/// The reference's nftables transaction for one family, as knftables
/// writes it; `rules` false gives the shared part only.
fn reference_transaction(family: &str, id: &str, rules: bool) -> String {
    let mut script = format!(
        "add table {family} cni_hostport {{ comment \"CNI portmap plugin\" ; }}
add chain {family} cni_hostport hostports
add chain {family} cni_hostport hostip_hostports
add chain {family} cni_hostport hostports_all
flush chain {family} cni_hostport hostports_all
add rule {family} cni_hostport hostports_all jump hostip_hostports
add rule {family} cni_hostport hostports_all jump hostports
add chain {family} cni_hostport prerouting {{ type nat hook prerouting priority -100 ; }}
flush chain {family} cni_hostport prerouting
add rule {family} cni_hostport prerouting fib daddr type local jump hostports_all
add chain {family} cni_hostport output {{ type nat hook output priority -100 ; }}
flush chain {family} cni_hostport output
add rule {family} cni_hostport output fib daddr type local jump hostports_all
add chain {family} cni_hostport masquerading {{ type nat hook postrouting priority 100 ; }}
"
    );
    if rules {
        let lines = if family == "ip" {
            format!(
                "add rule ip cni_hostport hostports tcp dport 8080 dnat to {V4}:80 comment \"{id}\"
add rule ip cni_hostport hostports ip daddr {HOST_V4} udp dport 8081 dnat to {V4}:81 comment \"{id}\"
add rule ip cni_hostport hostports tcp dport 8083 dnat to {V4}:83 comment \"{id}\"
add rule ip cni_hostport masquerading ip saddr {V4} ip daddr {V4} masquerade comment \"{id}\"
add rule ip cni_hostport masquerading ip saddr 127.0.0.1 ip daddr {V4} masquerade comment \"{id}\"
"
            )
        } else {
            format!(
                "add rule ip6 cni_hostport hostports tcp dport 8080 dnat to [{V6}]:80 comment \"{id}\"
add rule ip6 cni_hostport hostports ip6 daddr {HOST_V6} tcp dport 8082 dnat to [{V6}]:82 comment \"{id}\"
add rule ip6 cni_hostport masquerading ip6 saddr {V6} ip6 daddr {V6} masquerade comment \"{id}\"
"
            )
        };
        script.push_str(&lines);
    }
    script
}

fn reference_add(host: &TestNetns, id: &str, rules: bool) {
    let script = format!(
        "{}{}",
        reference_transaction("ip", id, rules),
        reference_transaction("ip6", id, rules)
    );
    let mut child = Command::new("ip")
        .args(["netns", "exec", host.name(), "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success(), "nft -f failed:\n{script}");
}

/// The reference's DEL: rules of the container chains whose comment is
/// the container ID, deleted by handle.
fn reference_del(host: &TestNetns, id: &str) {
    for family in ["ip", "ip6"] {
        let listing: Value = serde_json::from_str(&ns_cmd(
            host,
            "nft",
            &["-j", "list", "table", family, "cni_hostport"],
        ))
        .unwrap();
        for item in listing["nftables"].as_array().unwrap() {
            let Some(rule) = item.get("rule") else {
                continue;
            };
            let chain = rule["chain"].as_str().unwrap();
            if rule["comment"] == json!(id)
                && ["hostports", "hostip_hostports", "masquerading"].contains(&chain)
            {
                let handle = rule["handle"].to_string();
                ns_cmd(
                    host,
                    "nft",
                    &[
                        "delete",
                        "rule",
                        family,
                        "cni_hostport",
                        chain,
                        "handle",
                        &handle,
                    ],
                );
            }
        }
    }
}

fn our_call(host: &TestNetns, command: &str, id: &str) {
    let prev = fake_result(
        "/run/netns/x",
        &format!("{V4}/24"),
        Some(&format!("{V6}/64")),
    );
    let conf = portmap_conf(Some(Backend::Nftables), &prev, mappings());
    run_portmap(
        &portmap_bin(),
        host,
        command,
        id,
        Path::new("/run/netns/x"),
        &conf,
    )
    .assert_ok();
}

fn ruleset(host: &TestNetns) -> String {
    ns_cmd(host, "nft", &["list", "ruleset"])
}

#[test]
fn nftables_rules_list_like_the_references() {
    let theirs = TestNetns::new("pmcr");
    let ours = TestNetns::new("pmco");
    reference_add(&theirs, "ctr-same", true);
    our_call(&ours, "ADD", "ctr-same");
    assert_eq!(ruleset(&ours), ruleset(&theirs));
}

#[test]
fn we_delete_what_the_reference_added_in_nftables() {
    let shared_only = TestNetns::new("pmcs");
    reference_add(&shared_only, "none", false);
    let host = TestNetns::new("pmcd");
    reference_add(&host, "ctr-ref-add", true);
    // Another container's rules, which must stay.
    reference_add(&host, "ctr-stays", true);
    our_call(&host, "DEL", "ctr-ref-add");
    let after = ruleset(&host);
    assert!(!after.contains("ctr-ref-add"), "{after}");
    reference_del(&host, "ctr-stays");
    assert_eq!(ruleset(&host), ruleset(&shared_only));
}

#[test]
fn the_reference_deletes_what_we_added_in_nftables() {
    let shared_only = TestNetns::new("pmcs");
    reference_add(&shared_only, "none", false);
    let host = TestNetns::new("pmca");
    our_call(&host, "ADD", "ctr-our-add");
    assert_ne!(ruleset(&host), ruleset(&shared_only));
    reference_del(&host, "ctr-our-add");
    assert_eq!(ruleset(&host), ruleset(&shared_only));
}
