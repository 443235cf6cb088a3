//! A small network for portmap tests, all inside namespaces made here:
//!
//! ```text
//! outside (client)            host (fake node)                 pod
//! vin 10.200.0.2      <->     vout 10.200.0.1, .3              eth0 10.88.0.x
//!     fd00:200::2                  fd00:200::1                      fd00:88::x
//!                             cni0 10.88.0.1, fd00:88::1  <->  (reference bridge)
//! ```
//!
//! Servers and clients run on threads that entered a namespace, with
//! timeouts everywhere, so no test can hang.

#![allow(dead_code)]

use std::fs::File;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use conformance::testnet::{PluginCall, PluginOutcome, TestNetns, REFERENCE_DIR};
use libcni::netns::NetNs;
use nix::sched::{setns, CloneFlags};
use serde_json::{json, Value};

pub const HOST_V4: &str = "10.200.0.1";
/// A second host address, not named by any hostIP.
pub const HOST_V4_OTHER: &str = "10.200.0.3";
pub const CLIENT_V4: &str = "10.200.0.2";
pub const HOST_V6: &str = "fd00:200::1";
pub const CLIENT_V6: &str = "fd00:200::2";
pub const GATEWAY_V4: &str = "10.88.0.1";

const IO_TIMEOUT: Duration = Duration::from_secs(3);
const SERVER_LIFETIME: Duration = Duration::from_secs(120);

/// Our plugin binary.
pub fn portmap_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_portmap"))
}

pub fn reference_portmap() -> PathBuf {
    Path::new(REFERENCE_DIR).join("portmap")
}

/// Runs `program args` inside `ns`, asserting success; returns stdout.
pub fn ns_cmd(ns: &TestNetns, program: &str, args: &[&str]) -> String {
    let out = ns.exec(program, args);
    assert!(
        out.status.success(),
        "{program} {args:?} in {}: {}",
        ns.name(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn sysctl(ns: &TestNetns, settings: &[&str]) {
    let mut args = vec!["-qw"];
    args.extend_from_slice(settings);
    ns_cmd(ns, "sysctl", &args);
}

/// IPv6 addresses usable at once (no duplicate address detection).
fn no_dad(ns: &TestNetns) {
    sysctl(
        ns,
        &[
            "net.ipv6.conf.all.accept_dad=0",
            "net.ipv6.conf.default.accept_dad=0",
        ],
    );
}

/// The fake node and a client outside it.
pub struct Topology {
    pub host: TestNetns,
    pub outside: TestNetns,
    ipam_dir: tempfile::TempDir,
}

impl Topology {
    pub fn new() -> Topology {
        let host = TestNetns::new("pmh");
        let outside = TestNetns::new("pmo");
        no_dad(&host);
        no_dad(&outside);
        sysctl(
            &host,
            &["net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"],
        );
        host.ip(&[
            "link",
            "add",
            "vout",
            "type",
            "veth",
            "peer",
            "name",
            "vin",
            "netns",
            outside.name(),
        ]);
        host.ip(&["addr", "add", "10.200.0.1/24", "dev", "vout"]);
        host.ip(&["addr", "add", "10.200.0.3/24", "dev", "vout"]);
        host.ip(&["addr", "add", "fd00:200::1/64", "dev", "vout"]);
        host.ip(&["link", "set", "vout", "up"]);
        outside.ip(&["addr", "add", "10.200.0.2/24", "dev", "vin"]);
        outside.ip(&["addr", "add", "fd00:200::2/64", "dev", "vin"]);
        outside.ip(&["link", "set", "vin", "up"]);
        outside.ip(&["route", "add", "default", "via", HOST_V4]);
        outside.ip(&["-6", "route", "add", "default", "via", HOST_V6]);
        Topology {
            host,
            outside,
            ipam_dir: tempfile::tempdir().unwrap(),
        }
    }

    /// A pod attached to `cni0` by the reference bridge (dual stack).
    pub fn pod(&self, container_id: &str) -> Pod {
        let netns = TestNetns::new("pmp");
        no_dad(&netns);
        let conf = json!({
            "cniVersion": "1.0.0",
            "name": "test",
            "type": "bridge",
            "bridge": "cni0",
            "isDefaultGateway": true,
            "hairpinMode": true,
            "ipMasq": false,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": "10.88.0.0/16"}], [{"subnet": "fd00:88::/64"}]],
                "dataDir": self.ipam_dir.path().display().to_string(),
            }
        });
        let out = PluginCall::new("ADD")
            .var("CNI_PATH", REFERENCE_DIR)
            .attachment(container_id, &netns.path(), "eth0")
            .stdin_json(&conf)
            .in_netns(&self.host)
            .run(&Path::new(REFERENCE_DIR).join("bridge"));
        out.assert_ok();
        let result = out.json();
        Pod {
            container_id: container_id.to_string(),
            result,
            netns,
        }
    }

    /// The rules of the host as text (see [`ruleset`]).
    pub fn ruleset(&self, backend: Backend) -> String {
        ruleset(&self.host, backend)
    }
}

/// The rules of `host` as text: the nft ruleset, or the nat tables of both
/// iptables families, without counters and timestamps.
pub fn ruleset(host: &TestNetns, backend: Backend) -> String {
    match backend {
        Backend::Nftables => ns_cmd(host, "nft", &["list", "ruleset"]),
        Backend::Iptables => {
            let mut text = String::new();
            for tool in ["iptables-save", "ip6tables-save"] {
                text.push_str(&ns_cmd(host, tool, &["-t", "nat"]));
            }
            normalize_save(&text)
        }
    }
}

/// iptables-save output without comment lines and counters.
pub fn normalize_save(text: &str) -> String {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| match l.find(" [") {
            Some(i) if l.starts_with(':') => l[..i].to_string(),
            _ => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Iptables,
    Nftables,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Iptables => "iptables",
            Backend::Nftables => "nftables",
        }
    }
}

pub struct Pod {
    pub container_id: String,
    /// The bridge's result: the prevResult for portmap.
    pub result: Value,
    pub netns: TestNetns,
}

impl Pod {
    pub fn ip(&self, v6: bool) -> IpAddr {
        let ips = self.result["ips"].as_array().unwrap();
        ips.iter()
            .map(|ip| ip["address"].as_str().unwrap())
            .map(|a| a.split('/').next().unwrap().parse::<IpAddr>().unwrap())
            .find(|ip| ip.is_ipv6() == v6)
            .unwrap()
    }
}

/// A portmap configuration for `pod` with `mappings`.
pub fn portmap_conf(backend: Option<Backend>, prev_result: &Value, mappings: Value) -> Value {
    let mut conf = json!({
        "cniVersion": "1.0.0",
        "name": "test",
        "type": "portmap",
        "snat": true,
        "capabilities": {"portMappings": true},
        "runtimeConfig": {"portMappings": mappings},
        "prevResult": prev_result,
    });
    if let Some(backend) = backend {
        conf["backend"] = json!(backend.name());
    }
    conf
}

/// Runs a portmap binary for `command` in the host namespace.
pub fn run_portmap(
    binary: &Path,
    host: &TestNetns,
    command: &str,
    container_id: &str,
    netns: &Path,
    conf: &Value,
) -> PluginOutcome {
    PluginCall::new(command)
        .attachment(container_id, netns, "eth0")
        .stdin_json(conf)
        .in_netns(host)
        .run(binary)
}

/// Runs `f` on a thread inside the namespace at `path`.
fn spawn_in<T: Send + 'static>(
    path: PathBuf,
    f: impl FnOnce() -> T + Send + 'static,
) -> JoinHandle<T> {
    thread::spawn(move || {
        let file = File::open(&path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
        setns(&file, CloneFlags::CLONE_NEWNET).unwrap();
        f()
    })
}

/// TCP and UDP servers answering every connection or datagram with
/// `identity`, until dropped.
pub struct EchoServer {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl EchoServer {
    /// Listens on `[::]:port` (dual stack) in the namespace at `netns`.
    pub fn start(netns: &Path, port: u16, identity: &str) -> EchoServer {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let mut threads = Vec::new();
        {
            let stop = stop.clone();
            let identity = identity.to_string();
            let ready = ready_tx.clone();
            threads.push(spawn_in(netns.to_path_buf(), move || {
                let listener = TcpListener::bind(("::", port)).unwrap();
                listener.set_nonblocking(true).unwrap();
                ready.send(()).unwrap();
                let start = Instant::now();
                while !stop.load(Ordering::Relaxed) && start.elapsed() < SERVER_LIFETIME {
                    match listener.accept() {
                        Ok((mut stream, _)) => {
                            let _ = stream.set_nonblocking(false);
                            let _ = stream.write_all(identity.as_bytes());
                        }
                        Err(_) => thread::sleep(Duration::from_millis(5)),
                    }
                }
            }));
        }
        {
            let stop = stop.clone();
            let identity = identity.to_string();
            threads.push(spawn_in(netns.to_path_buf(), move || {
                let socket = UdpSocket::bind(("::", port)).unwrap();
                socket
                    .set_read_timeout(Some(Duration::from_millis(50)))
                    .unwrap();
                ready_tx.send(()).unwrap();
                let start = Instant::now();
                let mut buf = [0u8; 64];
                while !stop.load(Ordering::Relaxed) && start.elapsed() < SERVER_LIFETIME {
                    if let Ok((_, peer)) = socket.recv_from(&mut buf) {
                        let _ = socket.send_to(identity.as_bytes(), peer);
                    }
                }
            }));
        }
        for _ in 0..2 {
            ready_rx
                .recv_timeout(IO_TIMEOUT)
                .expect("server did not start");
        }
        EchoServer { stop, threads }
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Connects over TCP from the namespace at `netns` to `target` and
/// returns what the server said.
pub fn tcp_get(netns: &Path, target: SocketAddr) -> Result<String, String> {
    NetNs::open(netns)
        .map_err(|e| e.to_string())?
        .run(move || {
            let mut stream =
                TcpStream::connect_timeout(&target, IO_TIMEOUT).map_err(|e| e.to_string())?;
            stream
                .set_read_timeout(Some(IO_TIMEOUT))
                .map_err(|e| e.to_string())?;
            let mut reply = String::new();
            stream
                .read_to_string(&mut reply)
                .map_err(|e| e.to_string())?;
            Ok(reply)
        })
        .map_err(|e| e.to_string())?
}

/// Sends UDP from `source` (fixed, so tests can reuse a conntrack entry)
/// in the namespace at `netns` to `target`; returns the reply.
pub fn udp_get(netns: &Path, source: SocketAddr, target: SocketAddr) -> Result<String, String> {
    NetNs::open(netns)
        .map_err(|e| e.to_string())?
        .run(move || {
            let socket = UdpSocket::bind(source).map_err(|e| e.to_string())?;
            socket
                .set_read_timeout(Some(Duration::from_millis(700)))
                .map_err(|e| e.to_string())?;
            let mut buf = [0u8; 64];
            let mut last_error = String::from("no reply");
            for _ in 0..3 {
                socket.send_to(b"ping", target).map_err(|e| e.to_string())?;
                match socket.recv_from(&mut buf) {
                    Ok((n, _)) => return Ok(String::from_utf8_lossy(&buf[..n]).into_owned()),
                    Err(e) => last_error = e.to_string(),
                }
            }
            Err(last_error)
        })
        .map_err(|e| e.to_string())?
}

pub fn addr(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip.parse().unwrap(), port)
}

/// Lines of `text` that mention `needle`.
pub fn count_lines(text: &str, needle: &str) -> usize {
    text.lines().filter(|l| l.contains(needle)).count()
}

/// A prevResult for a container that exists only on paper: portmap needs
/// no namespace or link to write rules.
pub fn fake_result(netns: &str, v4: &str, v6: Option<&str>) -> Value {
    let mut ips = vec![json!({"interface": 0, "address": v4})];
    if let Some(v6) = v6 {
        ips.push(json!({"interface": 0, "address": v6}));
    }
    json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "sandbox": netns}],
        "ips": ips,
    })
}
