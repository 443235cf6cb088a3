//! `"rail"`: two VFs as two rails of one pod, on the fake machine of
//! `support` (veth pairs standing in for VFs).
//!
//! Each VF's host-side peer is moved into a namespace of its own, a rail
//! switch: rail A answers on 10.81.0.1, rail B on 10.82.0.1, and both on
//! the same far address on their loopback, so the pod reaches it through
//! either VF and the rail whose ICMP counters move tells which VF carried
//! a ping. Rail A's IPAM gives the pod its default route, as the first
//! rail of a pod does; rail B's default route then exists only in rail B's
//! own table.

mod support;

use std::thread;

use conformance::testnet::{PluginOutcome, TestNetns};
use rdma_sriov::pf::VfState;
use serde_json::{json, Value};

use support::*;

const POD_A: &str = "10.81.0.2";
const RAIL_A: &str = "10.81.0.1";
const POD_B: &str = "10.82.0.2";
const RAIL_B: &str = "10.82.0.1";
/// On the loopback of both rail switches.
const FAR: &str = "198.51.100.1";

/// What [`Rail::A`] and [`Rail::B`] differ in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rail {
    A,
    B,
}

impl Rail {
    fn network(self) -> &'static str {
        match self {
            Rail::A => "rail-a",
            Rail::B => "rail-b",
        }
    }
    fn ifname(self) -> &'static str {
        match self {
            Rail::A => "net1",
            Rail::B => "net2",
        }
    }
    fn vf(self) -> u32 {
        match self {
            Rail::A => 0,
            Rail::B => 1,
        }
    }
    fn subnet(self) -> &'static str {
        match self {
            Rail::A => "10.81.0.0/24",
            Rail::B => "10.82.0.0/24",
        }
    }
    fn pod_address(self) -> &'static str {
        match self {
            Rail::A => POD_A,
            Rail::B => POD_B,
        }
    }
}

/// The fake host with two VFs, the pod, and the two rail switches.
struct Rails {
    rig: Rig,
    pod: TestNetns,
    switch_a: TestNetns,
    switch_b: TestNetns,
}

impl Rails {
    fn new(tag: &str) -> Rails {
        let rig = Rig::new(tag);
        rig.standard_vf(0, None);
        rig.standard_vf(1, None);
        rig.write_world(&world_with(2, VfState::default(), mlx_devices(2)));
        let rails = Rails {
            pod: TestNetns::new(&format!("{tag}-pod")),
            switch_a: TestNetns::new(&format!("{tag}-sa")),
            switch_b: TestNetns::new(&format!("{tag}-sb")),
            rig,
        };
        for (peer, switch, address) in [
            ("vf0p", &rails.switch_a, RAIL_A),
            ("vf1p", &rails.switch_b, RAIL_B),
        ] {
            rails
                .rig
                .host
                .ip(&["link", "set", peer, "netns", switch.name()]);
            switch.ip(&["addr", "add", &format!("{address}/24"), "dev", peer]);
            switch.ip(&["link", "set", peer, "up"]);
            switch.ip(&["addr", "add", &format!("{FAR}/32"), "dev", "lo"]);
            // A switch takes any source, so traffic that took the wrong
            // rail shows in its counters (and its reply goes nowhere).
            let loose = format!(
                "echo 0 > /proc/sys/net/ipv4/conf/all/rp_filter && \
                 echo 0 > /proc/sys/net/ipv4/conf/{peer}/rp_filter"
            );
            assert!(switch.exec("sh", &["-c", &loose]).status.success());
        }
        rails
    }

    /// The rail's network at `version`: host-local in the rail's subnet,
    /// a default route through the rail's gateway, `"rail": true`, and
    /// `extra` merged over it (a `null` removes a key).
    fn conf(&self, rail: Rail, version: &str, extra: Value) -> Value {
        let mut keys = json!({
            "cniVersion": version,
            "name": rail.network(),
            "deviceID": vf_pci(rail.vf()),
            "rail": true,
            "ipam": {
                "type": "host-local",
                "subnet": rail.subnet(),
                "routes": [{"dst": "0.0.0.0/0"}],
                "dataDir": self.rig.ipam_dir,
            },
        });
        if let (Some(keys), Some(extra)) = (keys.as_object_mut(), extra.as_object()) {
            for (key, value) in extra {
                keys.insert(key.clone(), value.clone());
            }
        }
        self.rig.conf(keys)
    }

    fn run(&self, command: &str, rail: Rail, conf: &Value) -> PluginOutcome {
        self.rig
            .run(command, "c1", &ns_path(&self.pod), rail.ifname(), conf)
    }

    fn add(&self, rail: Rail, conf: &Value) -> PluginOutcome {
        self.run("ADD", rail, conf)
    }

    /// CHECK with ADD's result as prevResult.
    fn check(&self, rail: Rail, conf: &Value, result: &Value) -> PluginOutcome {
        let mut conf = conf.clone();
        conf["prevResult"] = result.clone();
        self.run("CHECK", rail, &conf)
    }

    fn del(&self, rail: Rail, conf: &Value) -> PluginOutcome {
        self.run("DEL", rail, conf)
    }

    /// `(source, table)` of the pod's rules that have a source, both
    /// families.
    fn source_rules(&self) -> Vec<(String, String)> {
        let mut rules = Vec::new();
        for family in ["-4", "-6"] {
            for rule in self.pod.ip_json(&[family, "rule"]).as_array().unwrap() {
                let source = rule["src"].as_str().unwrap_or("all");
                if source != "all" {
                    rules.push((
                        source.to_string(),
                        rule["table"].as_str().unwrap_or_default().to_string(),
                    ));
                }
            }
        }
        rules
    }

    /// `ip -4 route show table <table>` in the pod.
    fn table(&self, table: &str) -> String {
        self.pod.ip(&["-4", "route", "show", "table", table])
    }

    /// `net.ipv4.conf.<ifname>.<name>` in `ns`.
    fn sysctl(ns: &TestNetns, ifname: &str, name: &str) -> String {
        let out = ns.exec(
            "cat",
            &[&format!("/proc/sys/net/ipv4/conf/{ifname}/{name}")],
        );
        assert!(out.status.success(), "{ifname} {name}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Which rail switch received one ping from the pod to `target`, from
    /// `source` if given: `Some('A')`, `Some('B')`, or `None` when the
    /// ping got no answer.
    fn rail_that_answers(&self, target: &str, source: Option<&str>) -> Option<char> {
        let before = (echo_requests(&self.switch_a), echo_requests(&self.switch_b));
        let mut args = vec!["-c", "1", "-W", "2"];
        if let Some(source) = source {
            args.extend(["-I", source]);
        }
        args.push(target);
        if !self.pod.exec("ping", &args).status.success() {
            return None;
        }
        let after = (echo_requests(&self.switch_a), echo_requests(&self.switch_b));
        match (after.0 - before.0, after.1 - before.1) {
            (1, 0) => Some('A'),
            (0, 1) => Some('B'),
            other => panic!("echo requests seen by switches A and B: {other:?}"),
        }
    }
}

/// `Icmp: InEchos` of a namespace (counted per namespace).
fn echo_requests(ns: &TestNetns) -> u64 {
    let out = ns.exec("cat", &["/proc/net/snmp"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let icmp: Vec<&str> = text.lines().filter(|l| l.starts_with("Icmp:")).collect();
    let (Some(names), Some(values)) = (icmp.first(), icmp.get(1)) else {
        panic!("no Icmp lines in {text}");
    };
    let column = names
        .split_whitespace()
        .position(|n| n == "InEchos")
        .unwrap_or_else(|| panic!("no InEchos in {names}"));
    values
        .split_whitespace()
        .nth(column)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no InEchos value in {values}"))
}

fn pair(source: &str, table: &str) -> (String, String) {
    (source.to_string(), table.to_string())
}

/// The case, at 1.0.0 and 1.1.0 (other versions convert the same
/// result, as rdma_sriov.rs tests): two rails in one pod, each with its
/// sysctls, rule and table; traffic from each rail's address leaves by
/// that rail; CHECK passes, then fails when a rule or a sysctl is undone
/// by hand; DEL of one rail takes only its rule and table.
#[test]
fn two_rails_in_one_pod_route_their_own_traffic() {
    for version in ["1.0.0", "1.1.0"] {
        let rails = Rails::new("rail2");
        let conf_a = rails.conf(Rail::A, version, json!({}));
        let conf_b = rails.conf(Rail::B, version, json!({}));

        let out = rails.add(Rail::A, &conf_a);
        out.assert_ok();
        let result_a = out.json();
        let out = rails.add(Rail::B, &conf_b);
        out.assert_ok();
        let result_b = out.json();
        for (result, rail) in [(&result_a, Rail::A), (&result_b, Rail::B)] {
            assert_eq!(result["cniVersion"], version);
            assert_eq!(result["interfaces"][0]["name"], rail.ifname());
            assert_eq!(result["interfaces"][0]["pciID"], vf_pci(rail.vf()));
            assert_eq!(
                result["ips"][0]["address"],
                format!("{}/24", rail.pod_address())
            );
        }

        // Each rail's rule looks up a table of its own.
        assert_eq!(
            rails.source_rules(),
            vec![pair(POD_B, "101"), pair(POD_A, "100")],
            "{version}"
        );
        let table_a = rails.table("100");
        assert!(
            table_a.starts_with(&format!("default via {RAIL_A} dev net1")),
            "{version}: {table_a}"
        );
        assert!(
            table_a.contains(&format!(
                "10.81.0.0/24 dev net1 proto kernel scope link src {POD_A}"
            )),
            "{table_a}"
        );
        assert!(!table_a.contains("net2"), "{table_a}");
        let table_b = rails.table("101");
        assert!(
            table_b.starts_with(&format!("default via {RAIL_B} dev net2")),
            "{version}: {table_b}"
        );
        assert!(
            table_b.contains(&format!(
                "10.82.0.0/24 dev net2 proto kernel scope link src {POD_B}"
            )),
            "{table_b}"
        );
        assert!(!table_b.contains("net1"), "{table_b}");
        // The main table keeps both subnets; its default route is rail
        // A's, the first one IPAM asked for.
        let main = rails.table("main");
        assert!(
            main.starts_with(&format!("default via {RAIL_A} dev net1")),
            "{main}"
        );
        assert!(main.contains("10.82.0.0/24 dev net2"), "{main}");

        for ifname in ["net1", "net2"] {
            for (name, value) in [
                ("arp_ignore", "1"),
                ("arp_announce", "2"),
                ("rp_filter", "2"),
            ] {
                assert_eq!(
                    Rails::sysctl(&rails.pod, ifname, name),
                    value,
                    "{version} {ifname} {name}"
                );
            }
        }

        // Traffic from each rail's address leaves by that rail, though
        // main routes everything through rail A; traffic without a chosen
        // source follows main.
        assert_eq!(rails.rail_that_answers(FAR, Some(POD_A)), Some('A'));
        assert_eq!(rails.rail_that_answers(FAR, Some(POD_B)), Some('B'));
        assert_eq!(rails.rail_that_answers(FAR, None), Some('A'));

        rails.check(Rail::A, &conf_a, &result_a).assert_ok();
        rails.check(Rail::B, &conf_b, &result_b).assert_ok();

        // A rule removed by hand: that rail's CHECK fails, the other's
        // passes.
        rails
            .pod
            .ip(&["rule", "del", "from", POD_B, "lookup", "101"]);
        let out = rails.check(Rail::B, &conf_b, &result_b);
        assert_eq!(out.error_code(), 999);
        let msg = out.json()["msg"].as_str().unwrap().to_string();
        assert_eq!(
            msg,
            format!("rail net2: no rule from {POD_B}/32 lookup 101 in the container")
        );
        // Without its rule, rail B's traffic follows main out of rail A,
        // and its answer has no way back: what the rule is for.
        let seen_by_a = echo_requests(&rails.switch_a);
        assert_eq!(rails.rail_that_answers(FAR, Some(POD_B)), None);
        assert_eq!(echo_requests(&rails.switch_a), seen_by_a + 1);
        rails.check(Rail::A, &conf_a, &result_a).assert_ok();
        rails
            .pod
            .ip(&["rule", "add", "from", POD_B, "lookup", "101"]);
        rails.check(Rail::B, &conf_b, &result_b).assert_ok();
        // A sysctl put back by hand.
        rails.pod.exec(
            "sh",
            &["-c", "echo 0 > /proc/sys/net/ipv4/conf/net2/arp_ignore"],
        );
        let out = rails.check(Rail::B, &conf_b, &result_b);
        assert_eq!(out.error_code(), 999);
        assert_eq!(
            out.json()["msg"],
            "rail net2: net.ipv4.conf.net2.arp_ignore is 0, expected 1"
        );
        rails.pod.exec(
            "sh",
            &["-c", "echo 1 > /proc/sys/net/ipv4/conf/net2/arp_ignore"],
        );
        // The table's default route deleted by hand.
        rails.pod.ip(&["route", "del", "default", "table", "101"]);
        let out = rails.check(Rail::B, &conf_b, &result_b);
        assert_eq!(
            out.json()["msg"],
            format!(
                "rail net2: table 101 of {POD_B}/32 has no default route via {RAIL_B} dev net2"
            )
        );
        rails.pod.ip(&[
            "route", "add", "default", "via", RAIL_B, "dev", "net2", "table", "101",
        ]);
        rails.check(Rail::B, &conf_b, &result_b).assert_ok();

        // DEL of rail A: its rule and table go, rail B's stay and work.
        let host_default = Rails::sysctl(&rails.rig.host, "default", "arp_ignore");
        rails.del(Rail::A, &conf_a).assert_ok();
        assert_eq!(rails.source_rules(), vec![pair(POD_B, "101")]);
        assert_eq!(rails.table("100"), "");
        assert_eq!(rails.table("101"), table_b);
        assert_eq!(rails.rail_that_answers(FAR, Some(POD_B)), Some('B'));
        assert!(
            link(&rails.rig.host, "vf0").is_some(),
            "VF 0 back in the host"
        );
        // The kernel reset the VF's IPv4 settings as it left the pod.
        assert_eq!(
            Rails::sysctl(&rails.rig.host, "vf0", "arp_ignore"),
            host_default
        );
        rails.check(Rail::B, &conf_b, &result_b).assert_ok();
        // Again: nothing left to do.
        rails.del(Rail::A, &conf_a).assert_ok();
        assert_eq!(rails.source_rules(), vec![pair(POD_B, "101")]);

        rails.del(Rail::B, &conf_b).assert_ok();
        assert!(rails.source_rules().is_empty());
        assert_eq!(rails.table("101"), "");
        for rail in [Rail::A, Rail::B] {
            assert!(!rails
                .rig
                .ipam_dir
                .join(rail.network())
                .join(rail.pod_address())
                .exists());
        }
    }
}

/// The pod's namespace destroyed before DEL (the kernel hands physical
/// VFs back to the host, under their pod names): the rules and tables
/// went with it, and DEL of each rail restores its VF and releases its
/// address.
#[test]
fn del_of_rails_with_the_pod_gone() {
    let rails = Rails::new("railgone");
    let conf_a = rails.conf(Rail::A, "1.1.0", json!({}));
    let conf_b = rails.conf(Rail::B, "1.1.0", json!({}));
    rails.add(Rail::A, &conf_a).assert_ok();
    rails.add(Rail::B, &conf_b).assert_ok();
    let pod_path = ns_path(&rails.pod);
    let Rails {
        rig,
        pod,
        switch_a: _switch_a,
        switch_b: _switch_b,
    } = rails;
    rig.return_like_kernel(&pod, "net1", 0);
    rig.return_like_kernel(&pod, "net2", 1);
    drop(pod);

    for (rail, conf) in [(Rail::A, &conf_a), (Rail::B, &conf_b)] {
        rig.run("DEL", "c1", &pod_path, rail.ifname(), conf)
            .assert_ok();
        let vf = format!("vf{}", rail.vf());
        assert!(link(&rig.host, &vf).is_some(), "{vf} back under its name");
        assert!(link(&rig.host, rail.ifname()).is_none());
        assert!(!rig
            .ipam_dir
            .join(rail.network())
            .join(rail.pod_address())
            .exists());
        let record = rig
            .state
            .join("attachments")
            .join(rail.network())
            .join(format!("c1:{}.json", rail.ifname()));
        assert!(!record.exists(), "{}", record.display());
        rig.run("DEL", "c1", &pod_path, rail.ifname(), conf)
            .assert_ok();
    }
}

/// `"rail": {"table": N}` takes table N; a second rail asking for a table
/// already in use is refused with 7 and leaves nothing (its VF back in the
/// host, its address released), the first rail untouched.
#[test]
fn a_configured_table_and_a_table_in_use() {
    let rails = Rails::new("railtab");
    let conf_a = rails.conf(Rail::A, "1.1.0", json!({"rail": {"table": 200}}));
    let out = rails.add(Rail::A, &conf_a);
    out.assert_ok();
    let result_a = out.json();
    assert_eq!(rails.source_rules(), vec![pair(POD_A, "200")]);
    assert!(rails
        .table("200")
        .starts_with(&format!("default via {RAIL_A} dev net1")));

    let conf_b = rails.conf(Rail::B, "1.1.0", json!({"rail": {"table": 200}}));
    let out = rails.add(Rail::B, &conf_b);
    assert_eq!(out.error_code(), 7);
    let msg = out.json()["msg"].as_str().unwrap().to_string();
    assert!(
        msg.starts_with("rail.table 200 is already in use in the pod"),
        "{msg}"
    );
    assert!(
        link(&rails.rig.host, "vf1").is_some(),
        "VF 1 back in the host"
    );
    assert!(link(&rails.pod, "net2").is_none());
    assert!(!rails.rig.ipam_dir.join("rail-b").join(POD_B).exists());
    assert_eq!(rails.source_rules(), vec![pair(POD_A, "200")]);
    rails.check(Rail::A, &conf_a, &result_a).assert_ok();

    rails.del(Rail::A, &conf_a).assert_ok();
    assert!(rails.source_rules().is_empty());
    assert_eq!(rails.table("200"), "");
    // DEL of the refused rail finds nothing of it.
    rails.del(Rail::B, &conf_b).assert_ok();
}

/// The kernel refusing a step after the rule is in (a gateway that is not
/// on the rail's link, from static IPAM): the error is the kernel's, in
/// sbr's words, and nothing is left: no rule, no table, VF in the host.
#[test]
fn a_failure_after_the_rule_leaves_nothing() {
    conformance::testnet::workspace_plugin("static");
    let rails = Rails::new("railfail");
    let conf = rails.conf(
        Rail::A,
        "1.1.0",
        json!({"ipam": {
            "type": "static",
            "addresses": [{"address": format!("{POD_A}/24"), "gateway": "10.99.0.1"}]
        }}),
    );
    let out = rails.add(Rail::A, &conf);
    assert_eq!(out.error_code(), 999);
    let msg = out.json()["msg"].as_str().unwrap().to_string();
    assert!(
        msg.starts_with("Failed to add default route to 10.99.0.1: "),
        "{msg}"
    );
    assert!(rails.source_rules().is_empty());
    assert_eq!(rails.table("100"), "");
    assert!(link(&rails.rig.host, "vf0").is_some());
    assert!(link(&rails.pod, "net1").is_none());
    rails.del(Rail::A, &conf).assert_ok();
}

/// Two rails added at once take two tables: the table is picked under the
/// pod's lock (the one sbr takes).
#[test]
fn rails_added_at_once_take_distinct_tables() {
    let rails = Rails::new("railrace");
    let conf_a = rails.conf(Rail::A, "1.1.0", json!({}));
    let conf_b = rails.conf(Rail::B, "1.1.0", json!({}));
    let (a, b) = thread::scope(|scope| {
        let a = scope.spawn(|| rails.add(Rail::A, &conf_a));
        let b = scope.spawn(|| rails.add(Rail::B, &conf_b));
        (a.join().unwrap(), b.join().unwrap())
    });
    a.assert_ok();
    b.assert_ok();
    let mut tables: Vec<String> = rails.source_rules().into_iter().map(|r| r.1).collect();
    tables.sort();
    assert_eq!(tables, vec!["100", "101"]);
    assert_eq!(rails.rail_that_answers(FAR, Some(POD_A)), Some('A'));
    assert_eq!(rails.rail_that_answers(FAR, Some(POD_B)), Some('B'));
    rails.del(Rail::A, &conf_a).assert_ok();
    rails.del(Rail::B, &conf_b).assert_ok();
    assert!(rails.source_rules().is_empty());
}

/// Another call holding the pod's routing lock past the wait: 11, and the
/// rail's ADD is undone whole.
#[test]
fn a_held_routing_lock_is_try_again_later() {
    use libcni::lock::{FileLock, LockWait};

    let rails = Rails::new("raillock");
    let netns = std::fs::File::open(rails.pod.path()).unwrap();
    let held = FileLock::acquire_open(
        &netns,
        &rails.pod.path(),
        LockWait {
            timeout: std::time::Duration::from_secs(5),
            holder: "the test",
        },
    )
    .unwrap();
    let conf = rails.conf(Rail::A, "1.1.0", json!({}));
    let out = rails.add(Rail::A, &conf);
    assert_eq!(out.error_code(), 11);
    let msg = out.json()["msg"].as_str().unwrap().to_string();
    assert!(msg.ends_with("a rail or sbr) holds it"), "{msg}");
    assert!(link(&rails.rig.host, "vf0").is_some());
    assert!(!rails.rig.ipam_dir.join("rail-a").join(POD_A).exists());
    assert!(rails.source_rules().is_empty());
    drop(held);
    rails.add(Rail::A, &conf).assert_ok();
    rails.del(Rail::A, &conf).assert_ok();
}

/// A VF bound to a userspace driver has no netdev to make a rail of: 7,
/// before anything changes.
#[test]
fn a_userspace_vf_cannot_be_a_rail() {
    let rig = Rig::new("railvfio");
    rig.sysfs_vf(
        0,
        &VfSpec {
            driver: Some("vfio-pci".into()),
            ..VfSpec::default()
        },
    );
    rig.write_world(&world_with(1, VfState::default(), Vec::new()));
    let pod = TestNetns::new("railvfio-pod");
    let conf = rig.conf(json!({"deviceID": vf_pci(0), "rail": true}));
    let out = rig.add("c1", &pod, "net1", &conf);
    assert_eq!(out.error_code(), 7);
    let msg = out.json()["msg"].as_str().unwrap().to_string();
    assert!(
        msg.starts_with(&format!(
            "rail needs the VF's netdev, but VF {} is bound to vfio-pci",
            vf_pci(0)
        )),
        "{msg}"
    );
    assert!(rig.calls().is_empty(), "{:?}", rig.calls());
    assert!(rig.state_of("c1", "net1").is_none());
}
