//! The built `tap` binary, run as a runtime runs it, in namespaces this
//! test makes, with our `host-local` as IPAM (built on demand by
//! `workspace_plugin`). The kernel's view is read back with `ip -j -d`
//! and the tun driver's sysfs files (owner, group, flags) inside the pod;
//! traffic by attaching to the tap as its owner would (a python3 snippet
//! that drops to the owner's uid before `TUNSETIFF`) and catching the
//! pod's ARP request on it.
//!
//! Debian's reference plugins (1.1.1) have no tap, so there is nothing to
//! run side by side here; the reference's test scenarios (ADD/CHECK/DEL
//! at every version with owner and group 0, a bridge port, a second DEL)
//! are among these.

use std::path::{Path, PathBuf};

use conformance::testnet::{
    refused_link_names, workspace_plugin, HostLocalStore, PluginCall, PluginOutcome, TestNetns,
    ALL_VERSIONS,
};
use serde_json::{json, Value};

const PLUGIN: &str = env!("CARGO_BIN_EXE_tap");
const NETWORK: &str = "tapnet";
const CONTAINER_ID: &str = "ctr-tap";
const IFNAME: &str = "tapifc";

struct Fixture {
    pod: TestNetns,
    store: HostLocalStore,
    cni_path: PathBuf,
}

impl Fixture {
    fn new(tag: &str) -> Fixture {
        let host_local = workspace_plugin("host-local");
        Fixture {
            pod: TestNetns::new(tag),
            store: HostLocalStore::new(NETWORK),
            cni_path: host_local.parent().unwrap().to_path_buf(),
        }
    }

    /// A layer 3 network (host-local) with `extra` keys on top.
    fn conf(&self, version: &str, extra: Value) -> Value {
        let mut conf = json!({
            "cniVersion": version,
            "name": NETWORK,
            "type": "tap",
            "ipam": {
                "type": "host-local",
                "dataDir": self.store.data_dir(),
                "ranges": [[{"subnet": "10.59.0.0/24", "gateway": "10.59.0.1"}]],
                "routes": [{"dst": "10.98.0.0/16"}],
            },
        });
        for (key, value) in extra.as_object().unwrap() {
            conf[key] = value.clone();
        }
        conf
    }

    fn l2_conf(&self, version: &str, extra: Value) -> Value {
        let mut conf = self.conf(version, extra);
        conf.as_object_mut().unwrap().remove("ipam");
        conf
    }

    fn call(&self, command: &str, conf: &Value) -> PluginOutcome {
        self.call_with(command, conf, "")
    }

    fn call_with(&self, command: &str, conf: &Value, cni_args: &str) -> PluginOutcome {
        PluginCall::new(command)
            .var("CNI_PATH", self.cni_path.display().to_string())
            .var("CNI_ARGS", cni_args)
            .attachment(CONTAINER_ID, &self.pod.path(), IFNAME)
            .stdin_json(conf)
            .run(PLUGIN.as_ref())
    }

    fn check(&self, conf: &Value, result: &Value) -> PluginOutcome {
        let mut conf = conf.clone();
        conf["prevResult"] = result.clone();
        self.call("CHECK", &conf)
    }

    /// `ip -d -j link show NAME` in the pod; `Null` when there is none.
    fn link(&self, name: &str) -> Value {
        let out = self
            .pod
            .exec("ip", &["-d", "-j", "link", "show", "dev", name]);
        if !out.status.success() {
            return Value::Null;
        }
        serde_json::from_slice::<Value>(&out.stdout).unwrap()[0].clone()
    }

    /// A sysfs attribute of the tap, read inside the pod.
    fn sysfs(&self, name: &str, attribute: &str) -> String {
        let path = format!("/sys/class/net/{name}/{attribute}");
        let out = self.pod.exec("cat", &[&path]);
        assert!(out.status.success(), "cat {path}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn leases(&self) -> Vec<String> {
        self.store.leases()
    }

    /// Only `lo` and the links the test made itself are in the pod.
    fn assert_pod_links(&self, expected: &[&str]) {
        let mut links = self.pod.links();
        links.sort();
        let mut expected: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
        expected.push("lo".to_string());
        expected.sort();
        assert_eq!(links, expected);
    }
}

fn ipv4_of(f: &Fixture, name: &str) -> Vec<String> {
    f.pod.ip_json(&["-4", "addr", "show", "dev", name])[0]["addr_info"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|i| format!("{}/{}", i["local"].as_str().unwrap(), i["prefixlen"]))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn layer_3_add_check_del_at_every_version() {
    let f = Fixture::new("tap-l3");
    for version in ALL_VERSIONS {
        let conf = f.conf(version, json!({"owner": 0, "group": 0}));
        let out = f.call("ADD", &conf);
        out.assert_ok();
        let result = out.json();
        let link = f.link(IFNAME);
        assert_eq!(link["linkinfo"]["info_kind"], "tun", "{version}");
        assert_eq!(link["linkinfo"]["info_data"]["type"], "tap", "{version}");
        assert_eq!(link["linkinfo"]["info_data"]["persist"], true, "{version}");
        assert!(
            link["flags"].as_array().unwrap().contains(&json!("UP")),
            "{version}"
        );
        let addresses = ipv4_of(&f, IFNAME);
        assert_eq!(addresses.len(), 1, "{version}");
        match version {
            "0.1.0" | "0.2.0" => {
                assert_eq!(result["ip4"]["ip"], json!(addresses[0]), "{version}");
                assert!(result.get("ip6").is_none(), "{version}");
            }
            _ => {
                assert_eq!(result["interfaces"][0]["mac"], link["address"], "{version}");
                assert_eq!(result["interfaces"][0]["name"], IFNAME);
                assert_eq!(
                    result["interfaces"][0]["sandbox"],
                    json!(f.pod.path().display().to_string())
                );
                assert_eq!(result["ips"][0]["address"], json!(addresses[0]));
            }
        }
        let mtu_reported = result["interfaces"][0].get("mtu").is_some();
        assert_eq!(mtu_reported, version == "1.1.0", "{version}: {result}");
        // IPAM's route, through the range's gateway.
        let route = f.pod.ip_json(&["route", "show", "10.98.0.0/16"]);
        assert_eq!(route[0]["gateway"], "10.59.0.1", "{version}");
        assert_eq!(
            f.pod
                .exec(
                    "sysctl",
                    &["-n", &format!("net.ipv4.conf.{IFNAME}.arp_notify")]
                )
                .stdout,
            b"1\n"
        );
        let check = f.check(&conf, &result);
        if version >= "0.4.0" {
            check.assert_ok();
        } else {
            assert_ne!(check.code, 0, "{version}: CHECK is not in this version");
        }
        f.call("DEL", &conf).assert_ok();
        f.assert_pod_links(&[]);
        assert!(f.leases().is_empty(), "{version}");
        f.call("DEL", &conf).assert_ok();
    }
}

#[test]
fn layer_2_without_ipam() {
    let f = Fixture::new("tap-l2");
    for version in ALL_VERSIONS {
        let conf = f.l2_conf(version, json!({}));
        let out = f.call("ADD", &conf);
        if version < "0.3.0" {
            // No form for a result without addresses: refused, nothing made.
            assert_eq!(out.error_code(), 1, "{version}: {}", out.stdout);
            f.assert_pod_links(&[]);
            continue;
        }
        out.assert_ok();
        let result = out.json();
        assert!(
            result.get("ips").is_none_or(|ips| ips == &json!([])),
            "{result}"
        );
        let link = f.link(IFNAME);
        assert!(link["flags"].as_array().unwrap().contains(&json!("UP")));
        assert!(ipv4_of(&f, IFNAME).is_empty());
        if version >= "0.4.0" {
            f.check(&conf, &result).assert_ok();
        }
        f.call("DEL", &conf).assert_ok();
        f.assert_pod_links(&[]);
    }
    assert!(f.leases().is_empty());
}

#[test]
fn every_key_reaches_the_tap() {
    let f = Fixture::new("tap-keys");
    let conf = f.l2_conf(
        "1.1.0",
        json!({"multiQueue": true, "mtu": 9000, "mac": "02:00:00:00:59:01",
               "owner": 1000, "group": 100, "args": {"ignored": true},
               "dns": {"nameservers": ["10.59.0.53"]}}),
    );
    let out = f.call("ADD", &conf);
    out.assert_ok();
    let result = out.json();
    let link = f.link(IFNAME);
    assert_eq!(link["linkinfo"]["info_data"]["multi_queue"], true);
    assert_eq!(link["mtu"], 9000);
    assert_eq!(link["address"], "02:00:00:00:59:01");
    assert_eq!(result["interfaces"][0]["mac"], "02:00:00:00:59:01");
    assert_eq!(result["interfaces"][0]["mtu"], 9000);
    assert_eq!(result["dns"]["nameservers"][0], "10.59.0.53");
    assert_eq!(f.sysfs(IFNAME, "owner"), "1000");
    assert_eq!(f.sysfs(IFNAME, "group"), "100");
    let flags =
        u32::from_str_radix(f.sysfs(IFNAME, "tun_flags").trim_start_matches("0x"), 16).unwrap();
    assert_ne!(flags & 0x0100, 0, "IFF_MULTI_QUEUE in {flags:#x}");
    f.check(&conf, &result).assert_ok();
    f.call("DEL", &conf).assert_ok();
    f.assert_pod_links(&[]);
}

#[test]
fn without_owner_and_group_the_tap_has_no_owner() {
    let f = Fixture::new("tap-noown");
    let conf = f.l2_conf("1.0.0", json!({}));
    f.call("ADD", &conf).assert_ok();
    assert_eq!(f.sysfs(IFNAME, "owner"), "-1");
    assert_eq!(f.sysfs(IFNAME, "group"), "-1");
    let link = f.link(IFNAME);
    assert!(
        link["linkinfo"]["info_data"].get("user").is_none(),
        "{link}"
    );
    assert_eq!(link["linkinfo"]["info_data"]["multi_queue"], false);
    f.call("DEL", &conf).assert_ok();
    // Owner only, then group only.
    let conf = f.l2_conf("1.0.0", json!({"owner": 1234}));
    f.call("ADD", &conf).assert_ok();
    assert_eq!(f.sysfs(IFNAME, "owner"), "1234");
    assert_eq!(f.sysfs(IFNAME, "group"), "-1");
    f.call("DEL", &conf).assert_ok();
    let conf = f.l2_conf("1.0.0", json!({"group": 4321}));
    f.call("ADD", &conf).assert_ok();
    assert_eq!(f.sysfs(IFNAME, "owner"), "-1");
    assert_eq!(f.sysfs(IFNAME, "group"), "4321");
    f.call("DEL", &conf).assert_ok();
}

#[test]
fn mac_from_runtime_config_then_cni_args_then_the_key() {
    let f = Fixture::new("tap-mac");
    let mut conf = f.l2_conf("1.0.0", json!({"mac": "02:00:00:00:00:01"}));
    let args = "IgnoreUnknown=1;MAC=02:00:00:00:00:02";
    for (cni_args, runtime, expected) in [
        ("", None, "02:00:00:00:00:01"),
        (args, None, "02:00:00:00:00:02"),
        (args, Some("02:00:00:00:00:03"), "02:00:00:00:00:03"),
    ] {
        if let Some(mac) = runtime {
            conf["runtimeConfig"] = json!({"mac": mac});
        }
        let out = f.call_with("ADD", &conf, cni_args);
        out.assert_ok();
        assert_eq!(f.link(IFNAME)["address"], expected);
        assert_eq!(out.json()["interfaces"][0]["mac"], expected);
        f.call_with("DEL", &conf, cni_args).assert_ok();
    }
    // A bad MAC from CNI_ARGS is the runtime's error (4), before anything.
    let out = f.call_with("ADD", &f.l2_conf("1.0.0", json!({})), "MAC=nonsense");
    assert_eq!(out.error_code(), 4, "{}", out.stdout);
    f.assert_pod_links(&[]);
}

#[test]
fn a_bridge_in_the_container_gets_the_tap_as_port() {
    let f = Fixture::new("tap-br");
    f.pod.ip(&["link", "add", "br1", "type", "bridge"]);
    let conf = f.conf("1.0.0", json!({"bridge": "br1", "owner": 0, "group": 0}));
    let out = f.call("ADD", &conf);
    out.assert_ok();
    let result = out.json();
    assert_eq!(f.link(IFNAME)["master"], "br1");
    f.check(&conf, &result).assert_ok();
    // CHECK notices the tap leaving the bridge.
    f.pod.ip(&["link", "set", IFNAME, "nomaster"]);
    let check = f.check(&conf, &result);
    assert_eq!(check.error_code(), 999);
    assert!(
        check.stdout.contains("is not a port of bridge br1"),
        "{}",
        check.stdout
    );
    f.call("DEL", &conf).assert_ok();
    f.assert_pod_links(&["br1"]);

    // A bridge that is not there: refused before anything is made.
    let conf = f.conf("1.0.0", json!({"bridge": "br-missing"}));
    let out = f.call("ADD", &conf);
    assert_eq!(out.error_code(), 7);
    assert!(
        out.stdout.contains("failed to get bridge br-missing"),
        "{}",
        out.stdout
    );
    f.assert_pod_links(&["br1"]);
    assert!(f.leases().is_empty());
}

#[test]
fn check_finds_what_differs() {
    let f = Fixture::new("tap-chk");
    let conf = f.conf("1.0.0", json!({}));
    let out = f.call("ADD", &conf);
    out.assert_ok();
    let result = out.json();
    let mut wrong_mac = result.clone();
    wrong_mac["interfaces"][0]["mac"] = json!("02:00:00:00:00:99");
    let check = f.check(&conf, &wrong_mac);
    assert!(
        check.stdout.contains("doesn't match the MAC found"),
        "{}",
        check.stdout
    );
    let check = f.call("CHECK", &conf);
    assert_eq!(check.error_code(), 7, "{}", check.stdout);
    assert_eq!(check.json()["msg"], "Required prevResult missing");
    f.pod.ip(&["addr", "flush", "dev", IFNAME]);
    let check = f.check(&conf, &result);
    assert!(
        check.stdout.contains("Failed to match addr"),
        "{}",
        check.stdout
    );
    f.call("DEL", &conf).assert_ok();
    // Another kind of link under the name (layer 2: no IPAM CHECK first).
    f.pod.ip(&["link", "add", IFNAME, "type", "bridge"]);
    let check = f.check(&f.l2_conf("1.0.0", json!({})), &result);
    assert!(check.stdout.contains("not of type tap"), "{}", check.stdout);
}

/// ADD onto a name a bridge holds fails at the rename, after the tap was
/// made.
fn assert_rename_refused(out: &PluginOutcome) {
    assert_eq!(out.error_code(), 999, "{}", out.stdout);
    assert!(
        out.stdout
            .contains("failed to rename tap to \\\"tapifc\\\""),
        "{}",
        out.stdout
    );
}

#[test]
fn a_failed_add_leaves_nothing() {
    let f = Fixture::new("tap-undo");
    // The name is taken: the rename fails after the tap was made.
    f.pod.ip(&["link", "add", IFNAME, "type", "bridge"]);
    let out = f.call("ADD", &f.conf("1.0.0", json!({})));
    assert_rename_refused(&out);
    f.assert_pod_links(&[IFNAME]);
    assert!(f.leases().is_empty());
    f.pod.ip(&["link", "del", IFNAME]);
    // A route IPAM asks for cannot be added: after IPAM ADD.
    let mut conf = f.conf("1.0.0", json!({}));
    conf["ipam"]["routes"] = json!([{"dst": "10.97.0.0/16", "gw": "10.200.0.1"}]);
    let out = f.call("ADD", &conf);
    assert_ne!(out.code, 0);
    assert!(out.stdout.contains("failed to add route"), "{}", out.stdout);
    f.assert_pod_links(&[]);
    assert!(f.leases().is_empty());
    // An MTU the tap cannot take: refused with the configuration now,
    // before the tap is made (the kernel refused it after, with 999).
    let out = f.call("ADD", &f.l2_conf("1.0.0", json!({"mtu": 70000})));
    assert_eq!(out.error_code(), 7, "{}", out.stdout);
    assert_eq!(
        out.msg(),
        "invalid mtu 70000: must be 0 (the kernel's default) or from 68 to 65521"
    );
    f.assert_pod_links(&[]);
}

#[test]
fn selinux_context_on_a_node_without_selinux_is_refused_cleanly() {
    if Path::new("/sys/fs/selinux/enforce").exists() {
        println!("SKIPPED: this node has SELinux; the refusal is for nodes without it");
        return;
    }
    let f = Fixture::new("tap-se");
    let conf = f.conf(
        "1.0.0",
        json!({"selinuxContext": "system_u:system_r:container_t:s0"}),
    );
    let out = f.call("ADD", &conf);
    assert_eq!(out.error_code(), 50, "{}", out.stdout);
    assert!(
        out.stdout.contains("SELinux is not enabled on this node"),
        "{}",
        out.stdout
    );
    f.assert_pod_links(&[]);
    assert!(f.leases().is_empty());
}

/// The helper the labelled path runs (the plugin binary with its helper
/// flag) makes a persistent tap with owner, group and multi-queue in the
/// namespace it runs in, and prints the name the kernel gave it.
#[test]
fn the_helper_makes_a_persistent_tap_in_its_namespace() {
    let f = Fixture::new("tap-help");
    let out = f.pod.exec(
        PLUGIN,
        &["--cni-tap-create", "tphelper%d", "1", "1001", "-"],
    );
    assert!(out.status.success(), "{out:?}");
    let name = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(name, "tphelper0");
    let link = f.link(&name);
    assert_eq!(link["linkinfo"]["info_data"]["persist"], true);
    assert_eq!(link["linkinfo"]["info_data"]["multi_queue"], true);
    assert_eq!(f.sysfs(&name, "owner"), "1001");
    assert_eq!(f.sysfs(&name, "group"), "-1");
    // A second run gets a new device, never the existing one.
    let out = f
        .pod
        .exec(PLUGIN, &["--cni-tap-create", "tphelper%d", "0", "-", "-"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "tphelper1");
    let out = f.pod.exec(PLUGIN, &["--cni-tap-create", "bad"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn del_with_the_netns_gone_twice_and_without_cni_netns() {
    let f = Fixture::new("tap-del");
    let conf = f.conf("1.1.0", json!({}));
    f.call("ADD", &conf).assert_ok();
    assert_eq!(f.leases().len(), 1);
    let gone = PluginCall::new("DEL")
        .var("CNI_PATH", f.cni_path.display().to_string())
        .attachment(CONTAINER_ID, "/run/netns/cnitest-tap-gone".as_ref(), IFNAME)
        .stdin_json(&conf)
        .run(PLUGIN.as_ref());
    gone.assert_ok();
    assert!(f.leases().is_empty(), "IPAM DEL ran with the netns gone");
    // The tap itself is deleted by a DEL that has the netns.
    f.call("DEL", &conf).assert_ok();
    f.assert_pod_links(&[]);
    f.call("DEL", &conf).assert_ok();
    PluginCall::new("DEL")
        .var("CNI_PATH", f.cni_path.display().to_string())
        .var("CNI_CONTAINERID", CONTAINER_ID)
        .var("CNI_IFNAME", IFNAME)
        .stdin_json(&conf)
        .run(PLUGIN.as_ref())
        .assert_ok();
    // Bad CNI_ARGS do not stop a DEL (the reference fails it).
    f.call("ADD", &conf).assert_ok();
    f.call_with("DEL", &conf, "UNKNOWN=1").assert_ok();
    f.assert_pod_links(&[]);
}

#[test]
fn gc_and_status() {
    let f = Fixture::new("tap-gc");
    let conf = f.conf("1.1.0", json!({}));
    let call = |command: &str, conf: &Value| {
        PluginCall::new(command)
            .var("CNI_PATH", f.cni_path.display().to_string())
            .stdin_json(conf)
            .run(PLUGIN.as_ref())
    };
    call("STATUS", &conf).assert_ok();
    call("STATUS", &f.l2_conf("1.1.0", json!({}))).assert_ok();
    f.call("ADD", &conf).assert_ok();
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": CONTAINER_ID, "ifname": IFNAME}]);
    call("GC", &gc).assert_ok();
    assert_eq!(f.leases().len(), 1);
    gc["cni.dev/valid-attachments"] = json!([]);
    call("GC", &gc).assert_ok();
    assert!(f.leases().is_empty());
    call("GC", &f.l2_conf("1.1.0", json!({}))).assert_ok();
    f.call("DEL", &conf).assert_ok();
}

#[test]
fn configuration_errors_change_nothing() {
    let f = Fixture::new("tap-bad");
    for (extra, code) in [
        (json!({"mtu": -1}), 7),
        (json!({"mtu": 67}), 7),
        (json!({"mtu": 65522}), 7),
        (json!({"owner": -1}), 7),
        (json!({"multiQueue": "yes"}), 7),
        (json!({"mac": "01:00:5e:00:00:01"}), 7),
        (json!({"bridge": 5}), 7),
    ] {
        let out = f.call("ADD", &f.conf("1.0.0", extra.clone()));
        assert_eq!(out.error_code(), code, "{extra}: {}", out.stdout);
    }
    let out = f.call_with("ADD", &f.conf("1.0.0", json!({})), "FOO=bar");
    assert_eq!(out.error_code(), 4);
    assert!(out.stdout.contains("ARGS: unknown args"), "{}", out.stdout);
    let out = PluginCall::new("ADD")
        .var("CNI_PATH", f.cni_path.display().to_string())
        .attachment(
            CONTAINER_ID,
            "/run/netns/cnitest-tap-absent".as_ref(),
            IFNAME,
        )
        .stdin_json(&f.conf("1.0.0", json!({})))
        .run(PLUGIN.as_ref());
    assert_eq!(out.error_code(), 3);
    f.assert_pod_links(&[]);
    assert!(f.leases().is_empty());
}

/// Attaches to the tap as a process of `uid`/`gid` would (the file opened
/// as root, privileges dropped before `TUNSETIFF`, so only the tap's
/// owner or group can let it in), prints `attached` or the error, then
/// the first frame the kernel sends out of the tap: ethertype and, for
/// ARP, the address asked for.
const ATTACH_SCRIPT: &str = r#"
import fcntl, os, select, socket, struct, sys
name, uid, gid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fd = os.open("/dev/net/tun", os.O_RDWR)
os.setgroups([])
os.setresgid(gid, gid, gid)
os.setresuid(uid, uid, uid)
TUNSETIFF, IFF_TAP, IFF_NO_PI = 0x400454CA, 0x0002, 0x1000
try:
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TAP | IFF_NO_PI))
except OSError as e:
    print("refused", e.errno, flush=True)
    sys.exit(0)
print("attached", flush=True)
while True:
    ready, _, _ = select.select([fd], [], [], 10)
    if not ready:
        print("no frame", flush=True)
        sys.exit(0)
    frame = os.read(fd, 2048)
    ethertype = struct.unpack("!H", frame[12:14])[0]
    if ethertype == 0x0806:
        print("arp", socket.inet_ntoa(frame[38:42]), flush=True)
        sys.exit(0)
"#;

/// Runs [`ATTACH_SCRIPT`] in the pod as `uid`/`gid`; while it waits for a
/// frame, pings `target` from the pod (the ping fails: nobody answers;
/// its ARP request is the frame).
fn attach_and_catch_arp(f: &Fixture, uid: u32, gid: u32, target: &str) -> Vec<String> {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut child = Command::new("ip")
        .args([
            "netns",
            "exec",
            f.pod.name(),
            "python3",
            "-c",
            ATTACH_SCRIPT,
            IFNAME,
        ])
        .args([uid.to_string(), gid.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let mut seen = vec![first.clone()];
    if first == "attached" {
        f.pod.exec("ping", &["-c", "1", "-W", "1", target]);
        seen.extend(lines.map_while(Result::ok));
    }
    child.wait().unwrap();
    seen
}

/// The tap carries traffic once a process it lets in attaches: with
/// owner and group set, an unprivileged process needs both (the tun
/// driver's rule), and then reads the pod's ARP request for a neighbour;
/// with only an owner, the uid suffices.
#[test]
fn the_owner_attaches_and_traffic_flows() {
    let f = Fixture::new("tap-traffic");
    let conf = f.conf("1.0.0", json!({"owner": 4001, "group": 4002}));
    f.call("ADD", &conf).assert_ok();
    assert_eq!(
        attach_and_catch_arp(&f, 4001, 4002, "10.59.0.77"),
        ["attached", "arp 10.59.0.77"]
    );
    for (uid, gid) in [(4001, 4999), (4999, 4002), (4999, 4999)] {
        assert_eq!(
            attach_and_catch_arp(&f, uid, gid, "10.59.0.78"),
            [format!("refused {EPERM}")],
            "uid {uid} gid {gid}"
        );
    }
    f.call("DEL", &conf).assert_ok();

    let conf = f.conf("1.0.0", json!({"owner": 4001}));
    f.call("ADD", &conf).assert_ok();
    assert_eq!(
        attach_and_catch_arp(&f, 4001, 4999, "10.59.0.79"),
        ["attached", "arp 10.59.0.79"]
    );
    assert_eq!(
        attach_and_catch_arp(&f, 4999, 4999, "10.59.0.79"),
        [format!("refused {EPERM}")]
    );
    f.call("DEL", &conf).assert_ok();
}

/// `EPERM`, as Python reports it.
const EPERM: i32 = 1;

/// `bridge` is checked as a link name before any kernel call: a
/// 70,000-byte one made the netlink encoder panic (SIGABRT in release
/// builds, no CNI error). Exit status 1 with a code 7 error JSON, no tap
/// and no lease.
#[test]
fn bridge_names_are_checked_before_the_kernel() {
    let f = Fixture::new("tap-name");
    for (bridge, message) in refused_link_names("bridge") {
        let out = f.call("ADD", &f.conf("1.0.0", json!({"bridge": bridge})));
        assert_eq!(out.error_code(), 7, "{}", out.stderr);
        assert_eq!(out.msg(), message);
        f.assert_pod_links(&[]);
        assert!(f.leases().is_empty());
    }
}
