//! The built `host-device` binary, run as a runtime runs it, against the
//! kernel. The "host" is a namespace of the test: its device `hd0` is one
//! end of a veth whose other end (`peer0`, 10.10.0.254/24) is in a third
//! namespace standing for the network beyond the NIC, so traffic from the
//! pod crosses the moved device. IPAM is this workspace's `static` or
//! `host-local` (built on first use). Every test checks the kernel's state
//! (`ip -j`) and, where a device was handed over, that the pod reaches the
//! peer through it.
//!
//! A veth is the only movable device this kernel has (no dummy, no PCI
//! NIC, no netdevsim); what is true of physical devices only (returned to
//! the initial namespace when the pod's namespace dies) is tested in the
//! qemu guest (tests/qemu.rs).

use std::fs;
use std::path::{Path, PathBuf};

use conformance::testnet::{
    refused_link_names, workspace_plugin, PluginCall, PluginOutcome, TestNetns, ALL_VERSIONS,
};
use serde_json::{json, Value};

const PLUGIN: &str = env!("CARGO_BIN_EXE_host-device");
const NETWORK: &str = "hdnet";
const CONTAINER_ID: &str = "ctr-1";
const IFNAME: &str = "net1";
const DEVICE: &str = "hd0";
const DEVICE_MAC: &str = "02:00:00:aa:00:01";
const DEVICE_MTU: u64 = 1400;
const PEER_IP: &str = "10.10.0.254";
const POD_IP: &str = "10.10.0.1";

struct Fixture {
    host: TestNetns,
    pod: Option<TestNetns>,
    peer: TestNetns,
    /// The pod namespace's path, also after it is deleted.
    pod_path: PathBuf,
    data_dir: tempfile::TempDir,
}

impl Fixture {
    fn new(tag: &str) -> Fixture {
        let pod = TestNetns::new(&format!("{tag}-p"));
        let mut fixture = Fixture {
            host: TestNetns::new(&format!("{tag}-h")),
            peer: TestNetns::new(&format!("{tag}-r")),
            pod_path: pod.path(),
            pod: Some(pod),
            data_dir: tempfile::tempdir().unwrap(),
        };
        fixture.add_device(DEVICE, DEVICE_MAC, "peer0");
        fixture
            .peer
            .ip(&["addr", "add", &format!("{PEER_IP}/24"), "dev", "peer0"]);
        fixture.peer.ip(&["link", "set", "peer0", "up"]);
        fixture
    }

    /// A veth end `name` in the host, up, MTU 1400, its peer in the peer
    /// namespace.
    fn add_device(&mut self, name: &str, mac: &str, peer_name: &str) {
        self.host.ip(&[
            "link",
            "add",
            name,
            "address",
            mac,
            "mtu",
            &DEVICE_MTU.to_string(),
            "type",
            "veth",
            "peer",
            "name",
            peer_name,
            "netns",
            self.peer.name(),
        ]);
        self.host.ip(&["link", "set", name, "up"]);
    }

    fn pod(&self) -> &TestNetns {
        self.pod.as_ref().expect("the pod namespace was deleted")
    }

    fn static_ipam(&self) -> Value {
        json!({
            "type": "static",
            "addresses": [{"address": format!("{POD_IP}/24"), "gateway": PEER_IP}],
            "routes": [{"dst": "10.20.0.0/16"}],
        })
    }

    fn host_local_ipam(&self) -> Value {
        json!({
            "type": "host-local",
            "dataDir": self.leases_dir().display().to_string(),
            "ranges": [[{"subnet": "10.10.0.0/24", "rangeStart": "10.10.0.10", "gateway": PEER_IP}]],
        })
    }

    fn leases_dir(&self) -> PathBuf {
        self.data_dir.path().join("leases")
    }

    /// The addresses host-local has leased in this network.
    fn leases(&self) -> Vec<String> {
        let dir = self.leases_dir().join(NETWORK);
        let mut names: Vec<String> = fs::read_dir(&dir)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("10."))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    fn state_dir(&self) -> PathBuf {
        self.data_dir.path().join("state")
    }

    fn state_files(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(self.state_dir().join(NETWORK))
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    fn conf(&self, version: &str, extra: Value) -> Value {
        let mut conf = json!({
            "cniVersion": version,
            "name": NETWORK,
            "type": "host-device",
            "dataDir": self.state_dir().display().to_string(),
        });
        for (key, value) in extra.as_object().cloned().unwrap_or_default() {
            conf[key] = value;
        }
        conf
    }

    fn call(&self, command: &str, conf: &Value, ifname: &str, netns: &Path) -> PluginOutcome {
        // The IPAM plugins of this workspace, built on first use.
        let static_ipam = workspace_plugin("static");
        workspace_plugin("host-local");
        let cni_path = static_ipam.parent().unwrap().display().to_string();
        PluginCall::new(command)
            .attachment(CONTAINER_ID, netns, ifname)
            .var("CNI_PATH", cni_path)
            .stdin_json(conf)
            .in_netns(&self.host)
            .run(Path::new(PLUGIN))
    }

    fn add(&self, conf: &Value) -> PluginOutcome {
        self.call("ADD", conf, IFNAME, &self.pod_path)
    }

    fn del(&self, conf: &Value) -> PluginOutcome {
        self.call("DEL", conf, IFNAME, &self.pod_path)
    }

    /// CHECK with `result` as prevResult.
    fn check(&self, conf: &Value, result: &Value) -> PluginOutcome {
        let mut conf = conf.clone();
        conf["prevResult"] = result.clone();
        self.call("CHECK", &conf, IFNAME, &self.pod_path)
    }

    /// Deletes the pod namespace, as a runtime does before a late DEL.
    fn delete_pod(&mut self) {
        self.pod = None;
        assert!(!self.pod_path.exists());
    }
}

/// `ip -j -d link show <name>` in `ns`, or `None`.
fn link(ns: &TestNetns, name: &str) -> Option<Value> {
    ns.ip_json(&["-d", "link", "show"])
        .as_array()
        .and_then(|links| links.iter().find(|l| l["ifname"] == name).cloned())
}

fn addresses(ns: &TestNetns, name: &str) -> Vec<String> {
    ns.ip_json(&["addr", "show", "dev", name])
        .as_array()
        .and_then(|a| a.first())
        .and_then(|l| l["addr_info"].as_array())
        .map(|infos| {
            infos
                .iter()
                .filter(|i| i["family"] == "inet")
                .map(|i| format!("{}/{}", i["local"].as_str().unwrap(), i["prefixlen"]))
                .collect()
        })
        .unwrap_or_default()
}

/// Waits for something the kernel does asynchronously, such as
/// destroying a deleted namespace's links.
fn eventually(what: &str, done: impl FnMut() -> bool) {
    assert!(
        conformance::testnet::kernel_settles(done),
        "not seen: {what}"
    );
}

fn is_up(link: &Value) -> bool {
    link["flags"]
        .as_array()
        .is_some_and(|f| f.iter().any(|x| x == "UP"))
}

/// The device is in the host as it was made: name, MAC, MTU, up, no alias.
fn assert_device_home(f: &Fixture) {
    let dev = link(&f.host, DEVICE).unwrap_or_else(|| panic!("{DEVICE} is not in the host"));
    assert_eq!(dev["address"], DEVICE_MAC, "{dev}");
    assert_eq!(dev["mtu"], DEVICE_MTU, "{dev}");
    assert!(is_up(&dev), "{dev}");
    assert!(dev.get("ifalias").is_none(), "{dev}");
    assert!(link(f.pod(), IFNAME).is_none());
}

/// The device is in the pod as `net1`, up, carrying its host name as
/// alias, and gone from the host.
fn assert_device_in_pod(f: &Fixture) {
    let dev = link(f.pod(), IFNAME).unwrap_or_else(|| panic!("{IFNAME} is not in the pod"));
    assert_eq!(dev["address"], DEVICE_MAC, "{dev}");
    assert_eq!(dev["ifalias"], DEVICE, "{dev}");
    assert!(is_up(&dev), "{dev}");
    assert!(link(&f.host, DEVICE).is_none());
}

#[test]
fn device_by_name_with_static_ipam_crosses_and_comes_back_restored() {
    let f = Fixture::new("hdname");
    let conf = f.conf(
        "1.1.0",
        json!({"device": DEVICE, "ipam": f.static_ipam(), "dns": {"nameservers": ["10.10.0.53"]}}),
    );
    let out = f.add(&conf);
    out.assert_ok();
    let result = out.json();
    assert_eq!(
        result["interfaces"],
        json!([{"name": IFNAME, "mac": DEVICE_MAC, "sandbox": f.pod_path.display().to_string()}])
    );
    assert_eq!(
        result["ips"],
        json!([{"address": format!("{POD_IP}/24"), "gateway": PEER_IP, "interface": 0}])
    );
    assert_eq!(result["routes"], json!([{"dst": "10.20.0.0/16"}]));
    assert_eq!(result["dns"], json!({"nameservers": ["10.10.0.53"]}));
    assert_device_in_pod(&f);
    assert_eq!(addresses(f.pod(), IFNAME), vec![format!("{POD_IP}/24")]);
    assert!(f.pod().ping(PEER_IP), "pod cannot reach the peer");
    assert!(f.peer.ping(POD_IP), "peer cannot reach the pod");
    f.check(&conf, &result).assert_ok();

    // What a chained tuning or the workload may do in the pod.
    f.pod().ip(&[
        "link",
        "set",
        IFNAME,
        "address",
        "02:00:00:bb:00:02",
        "mtu",
        "1300",
    ]);
    f.del(&conf).assert_ok();
    assert_device_home(&f);
    assert!(f.state_files().is_empty(), "{:?}", f.state_files());
    // A second DEL finds nothing to do.
    f.del(&conf).assert_ok();
    assert_device_home(&f);
}

#[test]
fn device_by_hwaddr_and_by_kernelpath_with_host_local() {
    let f = Fixture::new("hdsel");
    for selector in [
        json!({"hwaddr": DEVICE_MAC.to_uppercase()}),
        json!({"kernelpath": format!("/sys/devices/virtual/net/{DEVICE}")}),
    ] {
        let mut extra = selector.clone();
        extra["ipam"] = f.host_local_ipam();
        let conf = f.conf("1.0.0", extra);
        let out = f.add(&conf);
        out.assert_ok();
        assert_device_in_pod(&f);
        let leases = f.leases();
        assert_eq!(leases.len(), 1, "{selector}: {leases:?}");
        assert_eq!(
            addresses(f.pod(), IFNAME),
            vec![format!("{}/24", leases[0])]
        );
        assert!(
            f.pod().ping(PEER_IP),
            "{selector}: pod cannot reach the peer"
        );
        f.check(&conf, &out.json()).assert_ok();
        f.del(&conf).assert_ok();
        assert_device_home(&f);
        assert!(f.leases().is_empty(), "{selector}: lease kept");
    }
}

/// The selector of highest precedence wins when several are given, as in
/// the reference (which refuses none of these combinations).
#[test]
fn device_wins_over_hwaddr_and_runtime_keys_fold_case() {
    let mut f = Fixture::new("hdprec");
    f.add_device("hd1", "02:00:00:aa:00:09", "peer1");
    let conf = f.conf(
        "1.0.0",
        json!({"Device": DEVICE, "hwaddr": "02:00:00:aa:00:09"}),
    );
    f.add(&conf).assert_ok();
    assert_device_in_pod(&f);
    assert!(link(&f.host, "hd1").is_some());
    f.del(&conf).assert_ok();
    assert_device_home(&f);
}

#[test]
fn del_after_the_pod_namespace_is_gone_releases_the_lease() {
    for empty_netns in [false, true] {
        let mut f = Fixture::new("hdgone");
        let conf = f.conf(
            "1.0.0",
            json!({"device": DEVICE, "ipam": f.host_local_ipam()}),
        );
        f.add(&conf).assert_ok();
        assert_eq!(f.leases().len(), 1);
        assert_eq!(f.state_files().len(), 1);
        f.delete_pod();
        // Kernel fact: a veth is destroyed with the namespace it is in, and
        // its peer with it; nothing comes back to the host. (A physical
        // device would come back: see tests/qemu.rs.)
        assert!(link(&f.host, DEVICE).is_none());
        eventually("the veth's peer is destroyed", || {
            link(&f.peer, "peer0").is_none()
        });
        let netns = if empty_netns {
            PathBuf::new()
        } else {
            f.pod_path.clone()
        };
        let out = f.call("DEL", &conf, IFNAME, &netns);
        out.assert_ok();
        assert!(f.leases().is_empty(), "the address leaked");
        assert!(f.state_files().is_empty(), "{:?}", f.state_files());
        f.call("DEL", &conf, IFNAME, &netns).assert_ok();
    }
}

#[test]
fn del_without_netns_uses_the_recorded_one() {
    let f = Fixture::new("hdnons");
    let conf = f.conf("1.0.0", json!({"device": DEVICE}));
    f.add(&conf).assert_ok();
    f.call("DEL", &conf, IFNAME, Path::new("")).assert_ok();
    assert_device_home(&f);
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let f = Fixture::new("hdbad");
    let cases = [
        (
            json!({}),
            7,
            r#"specify either "device", "hwaddr", "kernelpath" or "pciBusID""#.to_string(),
        ),
        (
            json!({"device": "nosuch0", "ipam": f.static_ipam()}),
            7,
            "failed to find host device: no link matches device \"nosuch0\"".to_string(),
        ),
        (
            json!({"hwaddr": "02:00:00:00:00:77"}),
            7,
            "failed to find host device: no link matches hwaddr 02:00:00:00:00:77".to_string(),
        ),
        (
            json!({"hwaddr": "02:00:00:00:00"}),
            7,
            "failed to parse MAC address \"02:00:00:00:00\"".to_string(),
        ),
        (
            json!({"kernelpath": "/etc"}),
            7,
            "kernel device path \"/etc\" must be absolute and begin with /sys/devices/".to_string(),
        ),
        (
            json!({"kernelpath": "/sys/devices/virtual/net/nosuch0"}),
            7,
            "failed to find network devices at".to_string(),
        ),
        (
            json!({"pciBusID": "0000:7f:00.0"}),
            7,
            "PCI device 0000:7f:00.0 does not exist on this node".to_string(),
        ),
        (
            json!({"device": 5}),
            7,
            "failed to load netconf".to_string(),
        ),
    ];
    let links_before = (f.host.links(), f.pod().links());
    for (extra, code, message) in cases {
        let out = f.add(&f.conf("1.0.0", extra.clone()));
        assert_eq!(out.error_code(), code, "{extra}: {}", out.stdout);
        let msg = out.json()["msg"].as_str().unwrap_or_default().to_string();
        assert!(msg.contains(&message), "{extra}: {msg}");
        assert_eq!((f.host.links(), f.pod().links()), links_before, "{extra}");
        assert!(f.state_files().is_empty(), "{extra}");
    }
    assert_device_home(&f);
    // The pod namespace must exist for ADD.
    let out = f.call(
        "ADD",
        &f.conf("1.0.0", json!({"device": DEVICE})),
        IFNAME,
        Path::new("/run/netns/cnitest-no-such-ns"),
    );
    assert_eq!(out.error_code(), 3, "{}", out.stdout);
    assert_device_home(&f);
}

#[test]
fn a_failed_add_puts_the_device_back() {
    let f = Fixture::new("hdroll");
    // The pod already has a net1.
    f.pod().ip(&[
        "link", "add", IFNAME, "type", "veth", "peer", "name", "other0",
    ]);
    let conf = f.conf("1.0.0", json!({"device": DEVICE}));
    let out = f.add(&conf);
    assert_eq!(out.error_code(), 999);
    assert!(
        out.stdout
            .contains("the container already has an interface of that name"),
        "{}",
        out.stdout
    );
    let dev = link(&f.host, DEVICE).unwrap();
    assert!(is_up(&dev) && dev.get("ifalias").is_none(), "{dev}");
    assert!(f.state_files().is_empty());
    assert!(link(f.pod(), IFNAME).unwrap()["ifalias"].is_null());
    f.pod().ip(&["link", "del", IFNAME]);

    // IPAM refuses: the device comes back too.
    let conf = f.conf(
        "1.0.0",
        json!({"device": DEVICE, "ipam": {"type": "static", "addresses": [{"address": "not-an-ip"}]}}),
    );
    let out = f.add(&conf);
    assert_ne!(out.code, 0);
    assert_device_home(&f);
    assert!(f.state_files().is_empty());

    // IPAM succeeds without an address: the reference's error, and (unlike
    // the reference) the device comes back.
    let conf = f.conf(
        "1.0.0",
        json!({"device": DEVICE, "ipam": {"type": "static"}}),
    );
    let out = f.add(&conf);
    assert_eq!(out.error_code(), 999, "{}", out.stdout);
    assert!(
        out.stdout
            .contains("IPAM plugin returned missing IP config"),
        "{}",
        out.stdout
    );
    assert_device_home(&f);
    assert!(f.state_files().is_empty());

    // IPAM works, but the address cannot be put on the link (a route via a
    // gateway outside every subnet): device back, address released.
    let mut ipam = f.host_local_ipam();
    ipam["routes"] = json!([{"dst": "10.30.0.0/16", "gw": "192.0.2.1"}]);
    let out = f.add(&f.conf("1.0.0", json!({"device": DEVICE, "ipam": ipam})));
    assert_eq!(out.error_code(), 999, "{}", out.stdout);
    assert_device_home(&f);
    assert!(f.leases().is_empty(), "the address leaked");
    assert!(f.state_files().is_empty());
}

/// Without IPAM, 0.1.0 and 0.2.0 cannot express the result: refused with
/// code 1 before anything stays moved. Every later version gets the
/// interface; 1.1.0 adds nothing for a veth (no PCI address).
#[test]
fn every_spec_version() {
    let f = Fixture::new("hdver");
    for version in ALL_VERSIONS {
        let conf = f.conf(version, json!({"device": DEVICE}));
        let out = f.add(&conf);
        if matches!(version, "0.1.0" | "0.2.0") {
            assert_eq!(out.error_code(), 1, "{version}: {}", out.stdout);
            assert!(out.stdout.contains("cannot convert: no valid IP addresses"));
            assert_device_home(&f);
            continue;
        }
        out.assert_ok();
        let result = out.json();
        assert_eq!(result["cniVersion"], version);
        assert_eq!(
            result["interfaces"],
            json!([{"name": IFNAME, "mac": DEVICE_MAC, "sandbox": f.pod_path.display().to_string()}]),
            "{version}"
        );
        let check = f.check(&conf, &result);
        if version.starts_with("0.3") {
            assert_eq!(check.error_code(), 1, "{version}: {}", check.stdout);
            assert!(check.stdout.contains("config version does not allow CHECK"));
        } else {
            check.assert_ok();
        }
        f.del(&conf).assert_ok();
        assert_device_home(&f);
    }
    for version in ALL_VERSIONS {
        let conf = f.conf(version, json!({"device": DEVICE, "ipam": f.static_ipam()}));
        let out = f.add(&conf);
        out.assert_ok();
        let result = out.json();
        if matches!(version, "0.1.0" | "0.2.0") {
            assert_eq!(result["ip4"]["ip"], format!("{POD_IP}/24"), "{version}");
        } else {
            assert_eq!(
                result["ips"][0]["address"],
                format!("{POD_IP}/24"),
                "{version}"
            );
        }
        assert!(f.pod().ping(PEER_IP), "{version}");
        f.del(&conf).assert_ok();
        assert_device_home(&f);
    }
    let conf = f.conf("1.1.0", json!({"device": DEVICE, "ipam": f.static_ipam()}));
    f.call("STATUS", &conf, "", Path::new("")).assert_ok();
    // STATUS asks the IPAM plugin, and reports when it cannot.
    let conf = f.conf(
        "1.1.0",
        json!({"device": DEVICE, "ipam": {"type": "no-such-ipam"}}),
    );
    let out = f.call("STATUS", &conf, "", Path::new(""));
    assert_eq!(out.error_code(), 999, "{}", out.stdout);
    assert!(out.stdout.contains("no-such-ipam"), "{}", out.stdout);
}

#[test]
fn check_finds_what_differs() {
    let f = Fixture::new("hdchk");
    let conf = f.conf("1.0.0", json!({"device": DEVICE, "ipam": f.static_ipam()}));
    let out = f.add(&conf);
    out.assert_ok();
    let result = out.json();
    let mut other_mac = result.clone();
    other_mac["interfaces"][0]["mac"] = json!("02:00:00:00:00:99");
    let e = f.check(&conf, &other_mac);
    assert_eq!(e.error_code(), 999);
    assert!(
        e.stdout.contains("doesn't match container Mac"),
        "{}",
        e.stdout
    );
    let mut other_sandbox = result.clone();
    other_sandbox["interfaces"][0]["sandbox"] = json!("/run/netns/elsewhere");
    let e = f.check(&conf, &other_sandbox);
    assert_eq!(e.error_code(), 999);
    assert!(e.stdout.contains("Sandbox in prevResult"), "{}", e.stdout);
    // Nothing to compare with: the configuration's fault, not a finding.
    let e = f.call("CHECK", &conf, IFNAME, &f.pod_path);
    assert_eq!(e.error_code(), 7);
    assert!(
        e.stdout.contains("Required prevResult missing"),
        "{}",
        e.stdout
    );
    // IPAM CHECK runs first and its verdict is passed on.
    let mut other_gateway = result.clone();
    other_gateway["ips"][0]["gateway"] = json!("10.10.0.77");
    let e = f.check(&conf, &other_gateway);
    assert_eq!(e.error_code(), 999);
    assert!(
        e.stdout.contains("static: Failed to match addr"),
        "{}",
        e.stdout
    );
    f.pod()
        .ip(&["addr", "del", &format!("{POD_IP}/24"), "dev", IFNAME]);
    let e = f.check(&conf, &result);
    assert_eq!(e.error_code(), 999);
    assert!(e.stdout.contains("Failed to match addr"), "{}", e.stdout);
    f.del(&conf).assert_ok();
    assert_device_home(&f);
}

/// As in the reference's test: a host name taken while the device is in
/// the pod makes DEL fail with the device left in the pod, up; once the
/// name is free DEL succeeds.
#[test]
fn del_fails_while_the_host_name_is_taken_and_leaves_the_device_in_the_pod() {
    let f = Fixture::new("hdtaken");
    let conf = f.conf("1.0.0", json!({"device": DEVICE}));
    f.add(&conf).assert_ok();
    f.host.ip(&[
        "link", "add", DEVICE, "type", "veth", "peer", "name", "squat0",
    ]);
    let out = f.del(&conf);
    assert_eq!(out.error_code(), 999);
    assert!(
        out.stdout
            .contains("the host has another interface of that name"),
        "{}",
        out.stdout
    );
    let dev = link(f.pod(), IFNAME).unwrap();
    assert!(is_up(&dev), "{dev}");
    assert_eq!(f.state_files().len(), 1);
    f.host.ip(&["link", "del", DEVICE]);
    f.del(&conf).assert_ok();
    assert_device_home(&f);
}

/// The host's `eth0` moved as `net1` into a pod that has its own `eth0`:
/// the pod's stays, and DEL brings the host's back as `eth0`.
#[test]
fn a_host_eth0_into_a_pod_with_its_own_eth0() {
    let mut f = Fixture::new("hdeth0");
    f.add_device("eth0", "02:00:00:aa:00:0e", "peer2");
    f.pod().ip(&[
        "link", "add", "eth0", "type", "veth", "peer", "name", "podpeer0",
    ]);
    let conf = f.conf("1.0.0", json!({"device": "eth0"}));
    f.add(&conf).assert_ok();
    let moved = link(f.pod(), IFNAME).unwrap();
    assert_eq!(moved["address"], "02:00:00:aa:00:0e");
    assert!(link(f.pod(), "eth0").is_some());
    f.del(&conf).assert_ok();
    assert!(link(f.pod(), "eth0").is_some());
    let back = link(&f.host, "eth0").unwrap();
    assert_eq!(back["address"], "02:00:00:aa:00:0e");
}

/// DEL undoes an ADD made by the reference plugin (Debian's 1.1.1 in
/// /usr/lib/cni), which leaves only the alias: the name comes back.
#[test]
fn del_undoes_the_reference_plugins_add() {
    let reference = Path::new("/usr/lib/cni/host-device");
    assert!(
        reference.exists(),
        "this test is about the reference plugin: install containernetworking-plugins"
    );
    let f = Fixture::new("hdref");
    let conf = f.conf("1.0.0", json!({"device": DEVICE}));
    PluginCall::new("ADD")
        .attachment(CONTAINER_ID, &f.pod_path, IFNAME)
        .stdin_json(&conf)
        .in_netns(&f.host)
        .run(reference)
        .assert_ok();
    assert_eq!(link(f.pod(), IFNAME).unwrap()["ifalias"], DEVICE);
    assert!(f.state_files().is_empty());
    f.del(&conf).assert_ok();
    let dev = link(&f.host, DEVICE).unwrap();
    assert_eq!(dev["address"], DEVICE_MAC);
    assert!(dev.get("ifalias").is_none(), "{dev}");
    assert!(link(f.pod(), IFNAME).is_none());
    f.del(&conf).assert_ok();
}

/// GC returns the devices of attachments the runtime no longer lists and
/// leaves the listed ones; without any list it touches no device.
#[test]
fn gc_returns_devices_of_attachments_no_longer_listed() {
    let mut f = Fixture::new("hdgc");
    f.add_device("hd1", "02:00:00:aa:00:09", "peer1");
    let first = f.conf("1.1.0", json!({"device": DEVICE}));
    let second = f.conf("1.1.0", json!({"device": "hd1"}));
    f.add(&first).assert_ok();
    f.call("ADD", &second, "net2", &f.pod_path).assert_ok();
    assert_eq!(f.state_files().len(), 2);

    f.call(
        "GC",
        &f.conf("1.1.0", json!({"device": DEVICE})),
        "",
        Path::new(""),
    )
    .assert_ok();
    assert_eq!(
        f.state_files().len(),
        2,
        "GC without a list touched devices"
    );

    let mut gc = f.conf("1.1.0", json!({"device": DEVICE}));
    gc["cni.dev/valid-attachments"] = json!([{"containerID": CONTAINER_ID, "ifname": "net2"}]);
    f.call("GC", &gc, "", Path::new("")).assert_ok();
    assert_device_home(&f);
    assert!(link(f.pod(), "net2").is_some());
    assert!(link(&f.host, "hd1").is_none());
    assert_eq!(f.state_files(), vec![format!("{CONTAINER_ID}@net2.json")]);
    f.call("DEL", &second, "net2", &f.pod_path).assert_ok();
    assert!(link(&f.host, "hd1").is_some());
}

/// What the kernel does with a physical device when its pod's namespace
/// is destroyed, simulated by hand (a veth would be destroyed instead):
/// the device appears in the host under its pod name with its alias kept.
/// DEL, with the namespace gone, finds it by the alias and restores it.
#[test]
fn a_device_returned_under_its_pod_name_is_restored() {
    let mut f = Fixture::new("hdback");
    let conf = f.conf(
        "1.0.0",
        json!({"device": DEVICE, "ipam": f.host_local_ipam()}),
    );
    f.add(&conf).assert_ok();
    f.pod().ip(&["link", "set", IFNAME, "mtu", "1300"]);
    f.pod().ip(&["link", "set", IFNAME, "netns", f.host.name()]);
    let returned = link(&f.host, IFNAME).unwrap();
    assert_eq!(returned["ifalias"], DEVICE);
    f.delete_pod();
    f.del(&conf).assert_ok();
    let dev = link(&f.host, DEVICE).unwrap();
    assert_eq!(dev["address"], DEVICE_MAC);
    assert_eq!(dev["mtu"], DEVICE_MTU);
    assert!(is_up(&dev) && dev.get("ifalias").is_none(), "{dev}");
    assert!(link(&f.host, IFNAME).is_none());
    assert!(f.leases().is_empty());
    assert!(f.state_files().is_empty());
}

/// A physical device that has not come back from a deleted namespace
/// (something still holds it) makes DEL fail with "try again later" after
/// a bounded wait, keeping the state for the next DEL; the address is
/// released all the same. Simulated: the state is edited to say the veth
/// is physical, since this kernel destroys a veth with its namespace.
#[test]
fn a_physical_device_not_back_yet_is_try_again_later() {
    let mut f = Fixture::new("hdlate");
    let conf = f.conf(
        "1.0.0",
        json!({"device": DEVICE, "ipam": f.host_local_ipam()}),
    );
    f.add(&conf).assert_ok();
    let state_path = f
        .state_dir()
        .join(NETWORK)
        .join(format!("{CONTAINER_ID}@{IFNAME}.json"));
    let mut state: Value = serde_json::from_slice(&fs::read(&state_path).unwrap()).unwrap();
    assert_eq!(
        state["hostLink"]["returnsToHost"], false,
        "a veth is virtual"
    );
    state["hostLink"]["returnsToHost"] = json!(true);
    fs::write(&state_path, serde_json::to_vec(&state).unwrap()).unwrap();
    f.delete_pod();
    let out = f.del(&conf);
    assert_eq!(out.error_code(), 11, "{}", out.stdout);
    assert!(out.stdout.contains("has not come back"), "{}", out.stdout);
    assert!(
        f.state_files().len() == 1,
        "the state must stay for the next DEL"
    );
    assert!(f.leases().is_empty(), "the address leaked");
}

/// Two pods handed the same device at once: one gets it, the other fails
/// cleanly (the device is not in the host any more), and nothing is left
/// half-moved; a per-device lock orders the two.
#[test]
fn two_adds_of_one_device_at_once() {
    let f = Fixture::new("hdrace");
    let other_pod = TestNetns::new("hdrace-q");
    let conf = f.conf("1.0.0", json!({"device": DEVICE}));
    for round in 0..5 {
        let (a, b) = std::thread::scope(|scope| {
            let a = scope.spawn(|| f.call("ADD", &conf, IFNAME, &f.pod_path));
            let b = scope.spawn(|| {
                PluginCall::new("ADD")
                    .attachment("ctr-2", &other_pod.path(), IFNAME)
                    .stdin_json(&conf)
                    .in_netns(&f.host)
                    .run(Path::new(PLUGIN))
            });
            (a.join().unwrap(), b.join().unwrap())
        });
        assert_eq!(
            [a.code, b.code].iter().filter(|c| **c == 0).count(),
            1,
            "round {round}: {} / {}",
            a.stdout,
            b.stdout
        );
        let (winner, loser, winner_id) = if a.code == 0 {
            (f.pod(), &b, CONTAINER_ID)
        } else {
            (&other_pod, &a, "ctr-2")
        };
        assert_eq!(loser.error_code(), 7, "round {round}: {}", loser.stdout);
        let moved = link(winner, IFNAME).unwrap();
        assert_eq!(moved["ifalias"], DEVICE);
        assert!(is_up(&moved), "{moved}");
        assert_eq!(f.state_files(), vec![format!("{winner_id}@{IFNAME}.json")]);
        // No temporary name left anywhere.
        for ns in [&f.host, f.pod(), &other_pod] {
            assert!(
                !ns.links().iter().any(|l| l.starts_with("veth")),
                "round {round}: {:?}",
                ns.links()
            );
        }
        PluginCall::new("DEL")
            .attachment(winner_id, &winner.path(), IFNAME)
            .stdin_json(&conf)
            .in_netns(&f.host)
            .run(Path::new(PLUGIN))
            .assert_ok();
        assert_device_home(&f);
    }
}

/// `device` is checked as a link name before any kernel call: a
/// 70,000-byte one made the netlink encoder panic (SIGABRT in release
/// builds, no CNI error). Exit status 1 with a code 7 error JSON, the
/// device left where it is.
#[test]
fn device_names_are_checked_before_the_kernel() {
    let f = Fixture::new("hdname");
    let links_before = (f.host.links(), f.pod().links());
    for (device, message) in refused_link_names("device") {
        let out = f.add(&f.conf("1.0.0", json!({"device": device})));
        assert_eq!(out.error_code(), 7, "{}", out.stderr);
        assert_eq!(out.msg(), message);
        assert_eq!((f.host.links(), f.pod().links()), links_before);
        assert!(f.state_files().is_empty());
    }
    assert_device_home(&f);
}
