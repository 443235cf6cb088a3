//! Helpers shared by the firewall tests (masquerade and spoof check). All of
//! them act inside namespaces the test created.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use conformance::testnet::{PluginCall, PluginOutcome, TestNetns};
use ipnetwork::IpNetwork;
use libcni::netns::NetNs;
use serde_json::{json, Value};

/// Runs `f` on a thread inside `ns` (so the library code and the programs
/// it starts act there).
pub fn in_ns<T: Send>(ns: &TestNetns, f: impl FnOnce() -> T + Send) -> T {
    NetNs::open(ns.path())
        .expect("open test netns")
        .run(f)
        .expect("run in test netns")
}

fn run_in(ns: &TestNetns, program: &str, args: &[&str], stdin: Option<&str>) -> String {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns.name(), program])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    if let Some(mut pipe) = child.stdin.take() {
        if let Some(input) = stdin {
            pipe.write_all(input.as_bytes()).unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?} in {}: {}\ninput:\n{}",
        ns.name(),
        String::from_utf8_lossy(&out.stderr),
        stdin.unwrap_or_default()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `nft list ruleset` in `ns`.
pub fn nft_ruleset(ns: &TestNetns) -> String {
    run_in(ns, "nft", &["list", "ruleset"], None)
}

/// The rules as the kernel holds them (`nft --debug=netlink list ruleset`:
/// expressions and userdata per rule), with rule handles left out so that
/// two namespaces compare equal when their rules do.
pub fn nft_netlink_rules(ns: &TestNetns) -> String {
    run_in(ns, "nft", &["--debug=netlink", "list", "ruleset"], None)
        .lines()
        .map(|line| {
            if line.starts_with("inet ") || line.starts_with("bridge ") || line.starts_with("ip") {
                // "<family> <table> <chain> <handle> [<position>]"
                line.split_whitespace()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" ")
            } else {
                line.to_string()
            }
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

/// `nft -f -` in `ns`.
pub fn nft_apply(ns: &TestNetns, script: &str) {
    run_in(ns, "nft", &["-f", "-"], Some(script));
}

/// `nft -a list chain …`: rule lines with their handles.
pub fn nft_list_chain_with_handles(
    ns: &TestNetns,
    family: &str,
    table: &str,
    chain: &str,
) -> String {
    run_in(
        ns,
        "nft",
        &["-a", "list", "chain", family, table, chain],
        None,
    )
}

/// `iptables-save -t nat` (or ip6tables) without its timestamp comments.
pub fn iptables_nat(ns: &TestNetns, v6: bool) -> String {
    let program = if v6 {
        "ip6tables-save"
    } else {
        "iptables-save"
    };
    run_in(ns, program, &["-t", "nat"], None)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}

pub fn net(s: &str) -> IpNetwork {
    s.parse().unwrap()
}

pub fn nets(list: &[&str]) -> Vec<IpNetwork> {
    list.iter().map(|s| net(s)).collect()
}

/// The Debian reference bridge plugin.
pub fn reference_bridge() -> PathBuf {
    let path = Path::new(conformance::testnet::REFERENCE_DIR).join("bridge");
    assert!(
        path.exists(),
        "{} missing: install the containernetworking-plugins package",
        path.display()
    );
    path
}

/// A bridge configuration for the reference plugin with host-local IPAM
/// storing its leases in `data_dir`.
pub fn reference_conf(name: &str, data_dir: &Path, ranges: Value, extra: Value) -> Value {
    let mut conf = json!({
        "cniVersion": "1.0.0",
        "name": name,
        "type": "bridge",
        "bridge": "cni0",
        "isGateway": true,
        "ipam": {
            "type": "host-local",
            "dataDir": data_dir.display().to_string(),
            "ranges": ranges,
        }
    });
    if let (Some(obj), Some(more)) = (conf.as_object_mut(), extra.as_object()) {
        for (k, v) in more {
            obj.insert(k.clone(), v.clone());
        }
    }
    conf
}

/// Runs the reference bridge in the fake host namespace `host`.
pub fn run_reference(
    command: &str,
    host: &TestNetns,
    pod: &TestNetns,
    container_id: &str,
    conf: &Value,
) -> PluginOutcome {
    PluginCall::new(command)
        .var("CNI_PATH", conformance::testnet::REFERENCE_DIR)
        .attachment(container_id, &pod.path(), "eth0")
        .stdin_json(conf)
        .in_netns(host)
        .run(&reference_bridge())
}

/// The addresses of a successful reference ADD.
pub fn result_ips(outcome: &PluginOutcome) -> Vec<IpNetwork> {
    outcome.assert_ok();
    outcome.json()["ips"]
        .as_array()
        .expect("ips in result")
        .iter()
        .map(|ip| net(ip["address"].as_str().unwrap()))
        .collect()
}

/// Three namespaces: a pod `10.99.0.2/24` behind a host (`10.99.0.1` and
/// `192.0.2.1/24`, forwarding on) in front of an outside `192.0.2.2/24`
/// that routes `10.99.0.0/24` back through the host, so that a connection
/// works with or without masquerading and the outside sees who it came from.
pub struct Routed {
    pub pod: TestNetns,
    pub host: TestNetns,
    pub outside: TestNetns,
}

impl Routed {
    pub const POD_IP: &'static str = "10.99.0.2/24";
    pub const HOST_OUTSIDE_IP: &'static str = "192.0.2.1";
    pub const OUTSIDE_IP: &'static str = "192.0.2.2";

    pub fn new(tag: &str) -> Routed {
        let pod = TestNetns::new(&format!("{tag}p"));
        let host = TestNetns::new(&format!("{tag}h"));
        let outside = TestNetns::new(&format!("{tag}o"));
        host.ip(&[
            "link",
            "add",
            "hp",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            pod.name(),
        ]);
        host.ip(&[
            "link",
            "add",
            "ho",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            outside.name(),
        ]);
        host.ip(&["addr", "add", "10.99.0.1/24", "dev", "hp"]);
        host.ip(&["addr", "add", "192.0.2.1/24", "dev", "ho"]);
        host.ip(&["link", "set", "hp", "up"]);
        host.ip(&["link", "set", "ho", "up"]);
        pod.ip(&["addr", "add", Self::POD_IP, "dev", "eth0"]);
        pod.ip(&["link", "set", "eth0", "up"]);
        pod.ip(&["route", "add", "default", "via", "10.99.0.1"]);
        outside.ip(&["addr", "add", "192.0.2.2/24", "dev", "eth0"]);
        outside.ip(&["link", "set", "eth0", "up"]);
        outside.ip(&["route", "add", "10.99.0.0/24", "via", "192.0.2.1"]);
        // Written from a thread inside the test's host namespace only.
        let forwarding = in_ns(&host, || {
            std::fs::write("/proc/sys/net/ipv4/ip_forward", "1")
        });
        forwarding.expect("enable forwarding in the test host netns");
        Routed { pod, host, outside }
    }

    pub fn pod_address(&self) -> IpAddr {
        net(Self::POD_IP).ip()
    }

    /// Connects from the pod to a listener in the outside namespace and
    /// returns the source address the outside saw.
    pub fn source_seen_outside(&self) -> IpAddr {
        let listener = in_ns(&self.outside, || {
            TcpListener::bind((Self::OUTSIDE_IP, 0)).expect("bind in outside netns")
        });
        let port = listener.local_addr().unwrap().port();
        let target: SocketAddr = format!("{}:{port}", Self::OUTSIDE_IP).parse().unwrap();
        let client = in_ns(&self.pod, move || {
            let mut stream = TcpStream::connect_timeout(&target, Duration::from_secs(5))
                .expect("connect from pod to outside");
            stream.write_all(b"x").unwrap();
            stream
        });
        let (mut accepted, peer) = listener.accept().unwrap();
        let mut byte = [0u8; 1];
        accepted.read_exact(&mut byte).unwrap();
        drop(client);
        peer.ip()
    }
}
