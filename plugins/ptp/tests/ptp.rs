//! The built `ptp` binary, run as a runtime runs it, against the kernel:
//! each test makes a fake host namespace (where the plugin runs, and where
//! the host ends, gateway addresses, host routes and masquerade rules go)
//! and pod namespaces, with our `host-local` as IPAM (built on demand by
//! `conformance::testnet::workspace_plugin`). Tests check the kernel's
//! state (`ip -j`, `iptables-save`, `nft`), the IPAM leases, and traffic
//! (ping from pods to their gateway, to each other, and out through
//! masquerade). Where useful the Debian reference ptp runs beside ours on
//! the same configuration and the two kernel states are compared.
//!
//! The scenarios of the reference's `ptp_test.go` run over every spec
//! version.

use std::path::{Path, PathBuf};

use conformance::testnet::{workspace_plugin, PluginCall, PluginOutcome, TestNetns, ALL_VERSIONS};
use libcni::ipmasq::names;
use serde_json::{json, Value};

const PLUGIN: &str = env!("CARGO_BIN_EXE_ptp");
const REFERENCE: &str = "/usr/lib/cni/ptp";
const NETWORK: &str = "ptpnet";
const IFNAME: &str = "ptp0";
const SUBNET: &str = "10.1.2.0/24";
const GATEWAY: &str = "10.1.2.1";
const SUBNET6: &str = "2001:db8:1::/66";
const GATEWAY6: &str = "2001:db8:1::1";

/// A fake host with its IPAM store; pods come and go.
struct Host {
    ns: TestNetns,
    data_dir: tempfile::TempDir,
}

impl Host {
    fn new(tag: &str) -> Host {
        Host {
            ns: TestNetns::new(tag),
            data_dir: tempfile::tempdir().unwrap(),
        }
    }

    fn ipam(&self, ranges: Value, routes: Value) -> Value {
        json!({
            "type": "host-local",
            "dataDir": self.data_dir.path().display().to_string(),
            "ranges": ranges,
            "routes": routes,
        })
    }

    /// One IPv4 range, a default route.
    fn conf(&self, version: &str, extra: Value) -> Value {
        let mut conf = json!({
            "cniVersion": version,
            "name": NETWORK,
            "type": "ptp",
            "ipam": self.ipam(json!([[{"subnet": SUBNET}]]), json!([{"dst": "0.0.0.0/0"}])),
        });
        merge(&mut conf, extra);
        conf
    }

    fn dual_stack_conf(&self, version: &str, extra: Value) -> Value {
        let mut conf = json!({
            "cniVersion": version,
            "name": NETWORK,
            "type": "ptp",
            "ipam": self.ipam(
                json!([[{"subnet": SUBNET}], [{"subnet": "2001:db8:1::0/66"}]]),
                json!([{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16"}, {"dst": "1.2.3.4/32"}]),
            ),
        });
        merge(&mut conf, extra);
        conf
    }

    fn call(&self, command: &str, conf: &Value, id: &str, netns: &Path) -> PluginOutcome {
        self.call_with(command, conf, id, netns, &[])
    }

    fn call_with(
        &self,
        command: &str,
        conf: &Value,
        id: &str,
        netns: &Path,
        vars: &[(&str, &str)],
    ) -> PluginOutcome {
        let mut call = PluginCall::new(command)
            .var("CNI_PATH", ipam_dir().display().to_string())
            .attachment(id, netns, IFNAME)
            .stdin_json(conf)
            .in_netns(&self.ns);
        for (key, value) in vars {
            call = call.var(key, *value);
        }
        call.run(Path::new(PLUGIN))
    }

    /// A call without a container (GC, STATUS).
    fn call_bare(&self, command: &str, conf: &Value) -> PluginOutcome {
        PluginCall::new(command)
            .var("CNI_PATH", ipam_dir().display().to_string())
            .stdin_json(conf)
            .in_netns(&self.ns)
            .run(Path::new(PLUGIN))
    }

    fn reference_add(&self, conf: &Value, id: &str, netns: &Path) -> PluginOutcome {
        PluginCall::new("ADD")
            .var("CNI_PATH", "/usr/lib/cni")
            .attachment(id, netns, IFNAME)
            .stdin_json(conf)
            .in_netns(&self.ns)
            .run(Path::new(REFERENCE))
    }

    /// The addresses host-local holds for the network.
    fn leases(&self) -> Vec<String> {
        conformance::testnet::host_local_leases(&self.data_dir.path().join(NETWORK))
    }

    /// The host's veth ends.
    fn veths(&self) -> Vec<String> {
        self.ns
            .links()
            .into_iter()
            .filter(|l| l.starts_with("veth"))
            .collect()
    }

    /// The kernel deletes the host end of a pair whose other end's
    /// namespace is gone in its deferred namespace cleanup: waits for it.
    fn wait_for_veths_to_go(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !self.veths().is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "the kernel did not remove {:?} with their namespace",
                self.veths()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    fn iptables_nat(&self, program: &str) -> String {
        let out = self.ns.exec(program, &["-t", "nat"]);
        assert!(
            out.status.success(),
            "{program}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `nft list` of the masquerade table; empty when there is none.
    fn nft_masquerade(&self) -> String {
        let out = self
            .ns
            .exec("nft", &["list", "table", "inet", "cni_plugins_masquerade"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn sysctl(&self, key: &str) -> String {
        let out = self.ns.exec("sysctl", &["-n", key]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Asserts nothing of container `id` is left on the host: no veth, no
    /// lease, no masquerade rule of either backend.
    fn assert_clean(&self, id: &str) {
        assert!(
            self.veths().is_empty(),
            "host veths left: {:?}",
            self.veths()
        );
        assert!(self.leases().is_empty(), "leases left: {:?}", self.leases());
        let chain = names::iptables_chain(NETWORK, id);
        for program in ["iptables-save", "ip6tables-save"] {
            let rules = self.iptables_nat(program);
            assert!(
                !rules.contains(&chain),
                "{program} still has {chain}:\n{rules}"
            );
        }
        let hash = names::nft_instance_hash(NETWORK, IFNAME, id);
        let nft = self.nft_masquerade();
        assert!(!nft.contains(&hash), "nft rule of {id} left:\n{nft}");
    }
}

fn ipam_dir() -> PathBuf {
    workspace_plugin("host-local")
        .parent()
        .expect("a binary path has a parent")
        .to_path_buf()
}

fn merge(conf: &mut Value, extra: Value) {
    if let Value::Object(extra) = extra {
        for (key, value) in extra {
            conf[key] = value;
        }
    }
}

/// `conf` with `prevResult` (for CHECK and DEL).
fn with_prev(conf: &Value, prev: &Value) -> Value {
    let mut conf = conf.clone();
    conf["prevResult"] = prev.clone();
    conf
}

fn full_dns() -> Value {
    json!({
        "nameservers": ["10.1.2.123"],
        "domain": "some.domain.test",
        "search": ["search.test"],
        "options": ["option1:foo"],
    })
}

fn link(ns: &TestNetns, name: &str) -> Value {
    let links = ns.ip_json(&["-d", "link", "show", name]);
    links[0].clone()
}

fn addresses(ns: &TestNetns, name: &str) -> Vec<String> {
    let info = ns.ip_json(&["addr", "show", "dev", name]);
    info[0]["addr_info"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter(|a| a["scope"] != "link")
                .map(|a| format!("{}/{}", a["local"].as_str().unwrap_or(""), a["prefixlen"]))
                .collect()
        })
        .unwrap_or_default()
}

/// `ip route` of one family as text lines, host veth names replaced by
/// `VETH` so two hosts compare.
fn routes(ns: &TestNetns, family: &str) -> Vec<String> {
    let text = ns.ip(&[family, "route", "show"]);
    let mut lines: Vec<String> = text
        .lines()
        .map(|line| {
            line.split_whitespace()
                .map(|word| {
                    if word.starts_with("veth") {
                        "VETH"
                    } else {
                        word
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    lines.sort();
    lines
}

fn assert_route(ns: &TestNetns, family: &str, expected: &str) {
    let found = routes(ns, family);
    assert!(
        found.iter().any(|r| r == expected),
        "route {expected:?} missing in {found:#?}"
    );
}

fn is_02(version: &str) -> bool {
    matches!(version, "0.1.0" | "0.2.0")
}

fn allows_check(version: &str) -> bool {
    !matches!(version, "0.1.0" | "0.2.0" | "0.3.0" | "0.3.1")
}

/// The reference test's flow: STATUS (1.1.0), ADD, the result's shape
/// and DNS, the kernel's state, a ping to the gateway, CHECK, DEL, the
/// link gone; with ipMasq, mtu 5000 and a full `dns` block.
#[test]
fn reference_flow_over_every_version() {
    for version in ALL_VERSIONS {
        for backend in [None, Some("iptables"), Some("nftables")] {
            let host = Host::new("ptpflow");
            let pod = TestNetns::new("ptpflow-p");
            let id = "ctr-flow";
            let mut extra = json!({"ipMasq": true, "mtu": 5000, "dns": full_dns()});
            if let Some(backend) = backend {
                extra["ipMasqBackend"] = json!(backend);
            }
            let conf = host.conf(version, extra);
            let context = format!("{version} {backend:?}");

            let status = host.call_bare("STATUS", &conf);
            if version == "1.1.0" {
                status.assert_ok();
            } else {
                assert_ne!(status.code, 0, "{context}: STATUS before 1.1.0");
            }

            let added = host.call("ADD", &conf, id, &pod.path());
            added.assert_ok();
            let result = added.json();
            assert_eq!(result["cniVersion"], version, "{context}");
            if is_02(version) {
                assert_eq!(
                    result["ip4"]["ip"].as_str().unwrap().split('/').nth(1),
                    Some("24")
                );
                assert_eq!(result["ip4"]["gateway"], GATEWAY, "{context}");
            } else {
                let interfaces = result["interfaces"].as_array().unwrap();
                assert_eq!(interfaces.len(), 2, "{context}: {result}");
                let host_veth = interfaces[0]["name"].as_str().unwrap();
                assert!(
                    host_veth.starts_with("veth") && host_veth.len() == 12,
                    "{host_veth}"
                );
                assert_eq!(interfaces[0]["mac"].as_str().unwrap().len(), 17);
                assert!(interfaces[0].get("sandbox").is_none());
                assert_eq!(interfaces[1]["name"], IFNAME);
                assert_eq!(interfaces[1]["sandbox"], pod.path().display().to_string());
                assert_eq!(interfaces[1]["mac"].as_str().unwrap().len(), 17);
                let ips = result["ips"].as_array().unwrap();
                assert_eq!(ips.len(), 1);
                assert_eq!(ips[0]["interface"], 1);
                assert_eq!(ips[0]["gateway"], GATEWAY);
                // 0.3.x and 0.4.0 name the family, 1.x does not.
                if version.starts_with('1') {
                    assert!(ips[0].get("version").is_none(), "{context}");
                } else {
                    assert_eq!(ips[0]["version"], "4", "{context}");
                }
            }
            assert_eq!(result["dns"], full_dns(), "{context}");

            // The kernel: both ends with the MTU, the container's routes
            // through the gateway, the gateway on the host end, a host
            // route back, forwarding and accept_ra.
            let address = addresses(&pod, IFNAME);
            assert_eq!(address.len(), 1, "{address:?}");
            let ip = address[0].split('/').next().unwrap().to_string();
            assert_eq!(link(&pod, IFNAME)["mtu"], 5000);
            assert_eq!(link(&pod, IFNAME)["linkinfo"]["info_kind"], "veth");
            assert_route(
                &pod,
                "-4",
                &format!("{GATEWAY} dev {IFNAME} scope link src {ip}"),
            );
            assert_route(
                &pod,
                "-4",
                &format!("{SUBNET} via {GATEWAY} dev {IFNAME} src {ip}"),
            );
            assert_route(&pod, "-4", &format!("default via {GATEWAY} dev {IFNAME}"));
            assert!(
                !routes(&pod, "-4")
                    .iter()
                    .any(|r| r.contains("proto kernel")),
                "the connected route must be gone: {:?}",
                routes(&pod, "-4")
            );
            let veths = host.veths();
            assert_eq!(veths.len(), 1);
            assert_eq!(link(&host.ns, &veths[0])["mtu"], 5000);
            assert_eq!(
                addresses(&host.ns, &veths[0]),
                vec![format!("{GATEWAY}/32")]
            );
            assert_route(&host.ns, "-4", &format!("{ip} dev VETH scope host"));
            assert_eq!(host.sysctl("net.ipv4.ip_forward"), "1");
            assert_eq!(
                host.sysctl(&format!("net.ipv6.conf.{}.accept_ra", veths[0])),
                "0"
            );
            match backend {
                Some("nftables") => {
                    let comment =
                        String::from_utf8(names::nft_rule_comment(NETWORK, IFNAME, id)).unwrap();
                    let nft = host.nft_masquerade();
                    assert!(
                        nft.contains(&format!(
                            "ip saddr {ip} ip daddr != {SUBNET} masquerade comment \"{comment}\""
                        )),
                        "{context}:\n{nft}"
                    );
                }
                _ => {
                    let chain = names::iptables_chain(NETWORK, id);
                    let rules = host.iptables_nat("iptables-save");
                    assert!(rules.contains(&format!("-A POSTROUTING -s {ip}/32 -m comment --comment \"name: \\\"{NETWORK}\\\" id: \\\"{id}\\\"\" -j {chain}")), "{context}:\n{rules}");
                    assert!(
                        rules.contains(&format!("-A {chain} ! -d 224.0.0.0/4")),
                        "{rules}"
                    );
                }
            }
            assert!(
                pod.ping(GATEWAY),
                "{context}: the pod cannot ping its gateway"
            );
            assert_eq!(host.leases(), vec![ip.clone()]);

            let checked = host.call("CHECK", &with_prev(&conf, &result), id, &pod.path());
            if allows_check(version) {
                checked.assert_ok();
            } else {
                assert_eq!(checked.error_code(), 1, "{context}: {}", checked.stdout);
                assert!(checked
                    .stdout
                    .contains("config version does not allow CHECK"));
            }

            host.call("DEL", &with_prev(&conf, &result), id, &pod.path())
                .assert_ok();
            assert!(!pod.links().iter().any(|l| l == IFNAME), "{context}");
            host.assert_clean(id);
            // Again: DEL is idempotent.
            host.call("DEL", &with_prev(&conf, &result), id, &pod.path())
                .assert_ok();
        }
    }
}

/// Two addresses, IPAM routes through the v4 gateway; every route and
/// address as the reference plugin makes them, side by side.
#[test]
fn dual_stack_matches_the_reference() {
    let ours = Host::new("ptpds");
    let theirs = Host::new("ptpdsref");
    let our_pod = TestNetns::new("ptpds-p");
    let their_pod = TestNetns::new("ptpdsref-p");
    let id = "ctr-ds";
    let our_conf = ours.dual_stack_conf("1.0.0", json!({"ipMasq": true}));
    let their_conf = theirs.dual_stack_conf("1.0.0", json!({"ipMasq": true}));

    let added = ours.call("ADD", &our_conf, id, &our_pod.path());
    added.assert_ok();
    let result = added.json();
    let reference = theirs.reference_add(&their_conf, id, &their_pod.path());
    reference.assert_ok();
    let reference = reference.json();

    let ips = result["ips"].as_array().unwrap();
    assert_eq!(ips.len(), 2);
    let ip6 = ips[1]["address"]
        .as_str()
        .unwrap()
        .split('/')
        .next()
        .unwrap();
    assert_route(
        &our_pod,
        "-6",
        &format!("{SUBNET6} via {GATEWAY6} dev {IFNAME} src {ip6} metric 1024 pref medium"),
    );
    assert_eq!(ips, reference["ips"].as_array().unwrap());
    assert_eq!(result["routes"], reference["routes"]);
    // The reference prints an empty `dns` object, ours leaves it out.
    let dns = |r: &Value| r.get("dns").cloned().unwrap_or(json!({}));
    assert_eq!(dns(&result), dns(&reference));
    assert_eq!(result["interfaces"].as_array().unwrap().len(), 2);

    for family in ["-4", "-6"] {
        assert_eq!(
            routes(&our_pod, family),
            routes(&their_pod, family),
            "pod {family}"
        );
        assert_eq!(
            routes(&ours.ns, family),
            routes(&theirs.ns, family),
            "host {family}"
        );
    }
    assert_eq!(addresses(&our_pod, IFNAME), addresses(&their_pod, IFNAME));
    assert_eq!(
        addresses(&ours.ns, &ours.veths()[0]),
        addresses(&theirs.ns, &theirs.veths()[0])
    );
    for program in ["iptables-save", "ip6tables-save"] {
        let strip = |text: String| -> Vec<String> {
            text.lines()
                .filter(|l| l.starts_with("-A") || l.starts_with(':'))
                .map(|l| l.split(" [").next().unwrap_or(l).to_string())
                .collect()
        };
        assert_eq!(
            strip(ours.iptables_nat(program)),
            strip(theirs.iptables_nat(program)),
            "{program}"
        );
    }
    assert_eq!(ours.sysctl("net.ipv6.conf.all.forwarding"), "1");

    assert!(our_pod.ping(GATEWAY));
    assert!(
        our_pod.ping(GATEWAY6),
        "v6 gateway unreachable right after ADD"
    );
    ours.call("CHECK", &with_prev(&our_conf, &result), id, &our_pod.path())
        .assert_ok();
    ours.call("DEL", &with_prev(&our_conf, &result), id, &our_pod.path())
        .assert_ok();
    ours.assert_clean(id);
}

/// The container reaches the outside through the host, masqueraded: the
/// outside namespace has no route to the pod subnet, so its replies come
/// back only to the host's address.
#[test]
fn masquerade_carries_traffic_out_with_both_backends() {
    for backend in ["iptables", "nftables"] {
        let host = Host::new("ptpmasq");
        let pod = TestNetns::new("ptpmasq-p");
        let outside = TestNetns::new("ptpmasq-o");
        host.ns.ip(&[
            "link",
            "add",
            "uplink0",
            "type",
            "veth",
            "peer",
            "name",
            "peer0",
            "netns",
            outside.name(),
        ]);
        host.ns
            .ip(&["addr", "add", "192.0.2.2/24", "dev", "uplink0"]);
        host.ns.ip(&["link", "set", "uplink0", "up"]);
        outside.ip(&["addr", "add", "192.0.2.1/24", "dev", "peer0"]);
        outside.ip(&["link", "set", "peer0", "up"]);

        let conf = host.conf("1.0.0", json!({"ipMasq": true, "ipMasqBackend": backend}));
        let added = host.call("ADD", &conf, "ctr-out", &pod.path());
        added.assert_ok();
        assert!(pod.ping("192.0.2.1"), "{backend}: no way out");
        host.call(
            "DEL",
            &with_prev(&conf, &added.json()),
            "ctr-out",
            &pod.path(),
        )
        .assert_ok();
        host.assert_clean("ctr-out");

        // Without masquerade the replies have no way back.
        let plain = host.conf("1.0.0", json!({}));
        let added = host.call("ADD", &plain, "ctr-plain", &pod.path());
        added.assert_ok();
        assert!(
            !pod.ping("192.0.2.1"),
            "{backend}: reached the outside unmasqueraded"
        );
        host.call("DEL", &plain, "ctr-plain", &pod.path())
            .assert_ok();
    }
}

/// Two pods of one network reach each other through the host (each host
/// end holds the same gateway), and the host reaches both.
#[test]
fn two_pods_reach_each_other_through_the_host() {
    let host = Host::new("ptptwo");
    let first = TestNetns::new("ptptwo-a");
    let second = TestNetns::new("ptptwo-b");
    let conf = host.conf("1.1.0", json!({}));
    let a = host.call("ADD", &conf, "ctr-a", &first.path());
    a.assert_ok();
    let b = host.call("ADD", &conf, "ctr-b", &second.path());
    b.assert_ok();
    let ip_of = |result: &Value| {
        result["ips"][0]["address"]
            .as_str()
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .to_string()
    };
    let (ip_a, ip_b) = (ip_of(&a.json()), ip_of(&b.json()));
    assert_ne!(ip_a, ip_b);
    assert_eq!(host.veths().len(), 2);
    for veth in host.veths() {
        assert_eq!(addresses(&host.ns, &veth), vec![format!("{GATEWAY}/32")]);
    }
    assert!(second.ping(&ip_a), "second pod cannot reach the first");
    assert!(first.ping(&ip_b), "first pod cannot reach the second");
    let out = host.ns.exec("ping", &["-c", "1", "-W", "2", &ip_a]);
    assert!(out.status.success(), "host cannot reach the pod");

    host.call("DEL", &with_prev(&conf, &a.json()), "ctr-a", &first.path())
        .assert_ok();
    // The other pod keeps its gateway and route.
    assert!(second.ping(GATEWAY));
    assert_eq!(host.leases(), vec![ip_b]);
    host.call("DEL", &with_prev(&conf, &b.json()), "ctr-b", &second.path())
        .assert_ok();
    assert!(host.veths().is_empty());
}

/// DNS in the result: IPAM's when the config gives none, the config's
/// when it gives any field, empty when it gives empty lists.
#[test]
fn dns_follows_the_reference_rule() {
    let host = Host::new("ptpdns");
    let resolv = host.data_dir.path().join("resolv.conf");
    std::fs::write(
        &resolv,
        "nameserver 192.0.2.53\nsearch example.test\noptions ndots:2\n",
    )
    .unwrap();
    let base = |extra: Value| {
        let mut conf = host.conf("1.0.0", extra);
        conf["ipam"]["resolvConf"] = json!(resolv.display().to_string());
        conf
    };
    let cases = [
        (
            json!({}),
            json!({"nameservers": ["192.0.2.53"], "search": ["example.test"], "options": ["ndots:2"]}),
        ),
        (
            json!({"dns": {"nameservers": ["10.1.2.123"]}}),
            json!({"nameservers": ["10.1.2.123"]}),
        ),
        (
            json!({"dns": {"domain": "only.test"}}),
            json!({"domain": "only.test"}),
        ),
        (
            json!({"dns": {"search": ["s.test"]}}),
            json!({"search": ["s.test"]}),
        ),
        (
            json!({"dns": {"options": ["timeout:1"]}}),
            json!({"options": ["timeout:1"]}),
        ),
        (
            json!({"dns": {"nameservers": [], "search": [], "options": []}}),
            Value::Null,
        ),
        (
            json!({"dns": {}}),
            json!({"nameservers": ["192.0.2.53"], "search": ["example.test"], "options": ["ndots:2"]}),
        ),
    ];
    for (extra, expected) in cases {
        let pod = TestNetns::new("ptpdns-p");
        let conf = base(extra.clone());
        let added = host.call("ADD", &conf, "ctr-dns", &pod.path());
        added.assert_ok();
        let dns = added.json().get("dns").cloned().unwrap_or(Value::Null);
        let dns = if dns == json!({}) { Value::Null } else { dns };
        assert_eq!(dns, expected, "config {extra}");
        host.call("DEL", &conf, "ctr-dns", &pod.path()).assert_ok();
    }
}

/// DEL of an attachment never made, with and without a netns, in every
/// version.
#[test]
fn del_of_an_unconfigured_ptp0_succeeds() {
    let host = Host::new("ptpdel0");
    let pod = TestNetns::new("ptpdel0-p");
    for version in ALL_VERSIONS {
        let conf = host.conf(version, json!({"ipMasq": true}));
        host.call("DEL", &conf, "never", &pod.path()).assert_ok();
        host.call_with("DEL", &conf, "never", Path::new(""), &[("CNI_NETNS", "")])
            .assert_ok();
    }
}

/// The netns gone before DEL: the lease is released and the masquerade
/// rules removed (found by prevResult and by the attachment's identity),
/// with both backends.
#[test]
fn del_with_the_netns_gone_releases_lease_and_rules() {
    for backend in ["iptables", "nftables"] {
        let host = Host::new("ptpgone");
        let pod = TestNetns::new("ptpgone-p");
        let path = pod.path();
        let conf = host.conf("1.0.0", json!({"ipMasq": true, "ipMasqBackend": backend}));
        let added = host.call("ADD", &conf, "ctr-gone", &path);
        added.assert_ok();
        assert_eq!(host.leases().len(), 1);
        drop(pod);
        assert!(!path.exists());
        host.wait_for_veths_to_go();
        host.call("DEL", &with_prev(&conf, &added.json()), "ctr-gone", &path)
            .assert_ok();
        host.assert_clean("ctr-gone");

        // containerd's second DEL: no netns, no prevResult.
        let pod = TestNetns::new("ptpgone-p");
        let added = host.call("ADD", &conf, "ctr-gone2", &pod.path());
        added.assert_ok();
        let path = pod.path();
        drop(pod);
        host.wait_for_veths_to_go();
        host.call_with("DEL", &conf, "ctr-gone2", &path, &[("CNI_NETNS", "")])
            .assert_ok();
        host.assert_clean("ctr-gone2");
    }
}

/// Bad input: a spec error with the right code, and nothing changed.
#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let host = Host::new("ptpbad");
    let pod = TestNetns::new("ptpbad-p");
    let mut no_ipam = host.conf("1.0.0", json!({}));
    no_ipam.as_object_mut().unwrap().remove("ipam");
    let cases = [
        (no_ipam, 7),
        (host.conf("1.0.0", json!({"ipam": {"type": ""}})), 7),
        (
            host.conf(
                "1.0.0",
                json!({"ipMasq": true, "ipMasqBackend": "ebtables"}),
            ),
            2,
        ),
        (host.conf("1.0.0", json!({"mtu": 10})), 7),
        (host.conf("1.0.0", json!({"mtu": "big"})), 7),
        (host.conf("1.0.0", json!({"ipMasq": "yes"})), 7),
        (
            host.conf("1.0.0", json!({"dns": {"nameservers": "10.0.0.1"}})),
            7,
        ),
        (host.conf("9.9.9", json!({})), 1),
        // An IPAM plugin that is not there.
        (
            host.conf("1.0.0", json!({"ipam": {"type": "no-such-ipam"}})),
            999,
        ),
    ];
    for (conf, code) in cases {
        let out = host.call("ADD", &conf, "ctr-bad", &pod.path());
        assert_eq!(out.error_code(), code, "{conf}: {}", out.stdout);
        assert!(!pod.links().iter().any(|l| l == IFNAME), "{conf}");
        host.assert_clean("ctr-bad");
    }
    // Not JSON.
    let out = PluginCall::new("ADD")
        .attachment("ctr-bad", &pod.path(), IFNAME)
        .in_netns(&host.ns)
        .run(Path::new(PLUGIN));
    assert_eq!(out.error_code(), 6);
    // A netns that does not exist: 3; a path that is not a netns: 4.
    let conf = host.conf("1.0.0", json!({}));
    let out = host.call(
        "ADD",
        &conf,
        "ctr-bad",
        Path::new("/run/netns/cnitest-none-here"),
    );
    assert_eq!(out.error_code(), 3, "{}", out.stdout);
    let out = host.call("ADD", &conf, "ctr-bad", Path::new("/etc/hostname"));
    assert_eq!(out.error_code(), 4, "{}", out.stdout);
    host.assert_clean("ctr-bad");

    // CNI_IFNAME already taken in the pod: refused before IPAM, the link
    // left as it was.
    pod.ip(&[
        "link", "add", IFNAME, "type", "veth", "peer", "name", "other0",
    ]);
    let out = host.call("ADD", &conf, "ctr-bad", &pod.path());
    assert_eq!(out.error_code(), 999, "{}", out.stdout);
    assert!(out.stdout.contains("already exists"), "{}", out.stdout);
    assert!(pod.links().iter().any(|l| l == IFNAME));
    host.assert_clean("ctr-bad");
}

/// A failure after the veth, the lease and the rules exist undoes all of
/// them (the reference leaves the veth behind): a route IPAM asks for that
/// the kernel refuses, and the debug hook at the very end.
#[test]
fn failed_add_undoes_its_own_work() {
    let host = Host::new("ptproll");
    let pod = TestNetns::new("ptproll-p");
    let mut conf = host.conf("1.0.0", json!({"ipMasq": true}));
    conf["ipam"]["routes"] = json!([{"dst": "192.168.0.0/16", "gw": "10.99.99.99"}]);
    let out = host.call("ADD", &conf, "ctr-roll", &pod.path());
    assert_eq!(out.error_code(), 999, "{}", out.stdout);
    assert!(out.stdout.contains("192.168.0.0/16"), "{}", out.stdout);
    assert!(!pod.links().iter().any(|l| l == IFNAME));
    host.assert_clean("ctr-roll");

    for backend in ["iptables", "nftables"] {
        let conf = host.conf("1.0.0", json!({"ipMasq": true, "ipMasqBackend": backend}));
        let out = host.call_with(
            "ADD",
            &conf,
            "ctr-roll",
            &pod.path(),
            &[("CNI_PTP_DEBUG_FAIL_AT_END", "injected failure")],
        );
        assert_eq!(out.error_code(), 999);
        assert!(out.stdout.contains("injected failure"));
        assert!(!pod.links().iter().any(|l| l == IFNAME), "{backend}");
        host.assert_clean("ctr-roll");
        // And the same ADD then works.
        let added = host.call("ADD", &conf, "ctr-roll", &pod.path());
        added.assert_ok();
        host.call(
            "DEL",
            &with_prev(&conf, &added.json()),
            "ctr-roll",
            &pod.path(),
        )
        .assert_ok();
        host.assert_clean("ctr-roll");
    }
}

/// CHECK finds what changed since ADD, in the reference's words.
#[test]
fn check_reports_what_changed() {
    let host = Host::new("ptpchk");
    let pod = TestNetns::new("ptpchk-p");
    let conf = host.conf("1.0.0", json!({}));
    let added = host.call("ADD", &conf, "ctr-chk", &pod.path());
    added.assert_ok();
    let result = added.json();
    let check = |conf: &Value| host.call("CHECK", conf, "ctr-chk", &pod.path());

    let out = check(&conf);
    assert_eq!(out.error_code(), 7);
    assert!(
        out.stdout.contains("ptp: Required prevResult missing"),
        "{}",
        out.stdout
    );

    let mut wrong_mac = result.clone();
    wrong_mac["interfaces"][1]["mac"] = json!("02:00:00:00:00:01");
    let out = check(&with_prev(&conf, &wrong_mac));
    assert!(
        out.stdout
            .contains("Mac 02:00:00:00:00:01 doesn't match container Mac"),
        "{}",
        out.stdout
    );

    let mut other_sandbox = result.clone();
    other_sandbox["interfaces"][1]["sandbox"] = json!("/run/netns/elsewhere");
    let out = check(&with_prev(&conf, &other_sandbox));
    assert!(
        out.stdout.contains("doesn't match configured netns"),
        "{}",
        out.stdout
    );

    check(&with_prev(&conf, &result)).assert_ok();
    pod.ip(&["route", "del", "default"]);
    let out = check(&with_prev(&conf, &result));
    assert!(
        out.stdout.contains("Expected Route 0.0.0.0/0"),
        "{}",
        out.stdout
    );

    let ip = result["ips"][0]["address"].as_str().unwrap().to_string();
    pod.ip(&["addr", "del", &ip, "dev", IFNAME]);
    let out = check(&with_prev(&conf, &result));
    assert!(
        out.stdout.contains("Failed to match addr"),
        "{}",
        out.stdout
    );

    host.call("DEL", &with_prev(&conf, &result), "ctr-chk", &pod.path())
        .assert_ok();
    host.assert_clean("ctr-chk");
}

/// GC removes the masquerade rules and leases of attachments no longer
/// valid, and keeps the valid ones'; STATUS asks the IPAM plugin.
#[test]
fn gc_and_status() {
    for backend in ["iptables", "nftables"] {
        let host = Host::new("ptpgc");
        let keep_pod = TestNetns::new("ptpgc-k");
        let stale_pod = TestNetns::new("ptpgc-s");
        let conf = host.conf("1.1.0", json!({"ipMasq": true, "ipMasqBackend": backend}));
        host.call("ADD", &conf, "ctr-keep", &keep_pod.path())
            .assert_ok();
        host.call("ADD", &conf, "ctr-stale", &stale_pod.path())
            .assert_ok();
        assert_eq!(host.leases().len(), 2);

        let mut gc = conf.clone();
        gc["cni.dev/valid-attachments"] = json!([{"containerID": "ctr-keep", "ifname": IFNAME}]);
        host.call_bare("GC", &gc).assert_ok();
        assert_eq!(host.leases().len(), 1);
        let (kept, gone) = match backend {
            "iptables" => (
                names::iptables_chain(NETWORK, "ctr-keep"),
                names::iptables_chain(NETWORK, "ctr-stale"),
            ),
            _ => (
                names::nft_instance_hash(NETWORK, IFNAME, "ctr-keep"),
                names::nft_instance_hash(NETWORK, IFNAME, "ctr-stale"),
            ),
        };
        let rules = match backend {
            "iptables" => host.iptables_nat("iptables-save"),
            _ => host.nft_masquerade(),
        };
        assert!(rules.contains(&kept), "{backend}: {rules}");
        assert!(!rules.contains(&gone), "{backend}: {rules}");
        assert!(keep_pod.ping(GATEWAY));

        host.call_bare("STATUS", &conf).assert_ok();
        let mut no_ipam = conf.clone();
        no_ipam.as_object_mut().unwrap().remove("ipam");
        assert_eq!(host.call_bare("STATUS", &no_ipam).error_code(), 7);

        host.call("DEL", &conf, "ctr-keep", &keep_pod.path())
            .assert_ok();
        host.call("DEL", &conf, "ctr-stale", &stale_pod.path())
            .assert_ok();
        host.assert_clean("ctr-keep");
    }
}
