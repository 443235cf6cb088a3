//! A DHCP lab: a fake host namespace with a bridge and a real dnsmasq on
//! it, container namespaces whose `eth0` is a veth port of that bridge, and
//! a daemon (ours or the reference) on a socket of the test's own.

#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use conformance::testnet::{PluginCall, PluginOutcome, TestNetns};
use serde_json::{json, Value};
use tempfile::TempDir;

pub const REFERENCE_DHCP: &str = "/usr/lib/cni/dhcp";
const DNSMASQ: &str = "/usr/sbin/dnsmasq";
pub const SERVER_IP: &str = "192.168.1.1";
pub const FIRST_IP: &str = "192.168.1.5";

pub fn ours() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_dhcp"))
}

/// Polls `condition` every 200 ms until it holds or `limit` passes.
pub fn wait_for(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn signal(pid: u32, name: &str) {
    let _ = Command::new("kill").args([name, &pid.to_string()]).status();
}

/// dnsmasq serving 192.168.1.0/24 on a bridge in its own namespace.
pub struct Lab {
    pub host: TestNetns,
    pub dir: TempDir,
    dnsmasq: Child,
    ports: u32,
}

impl Lab {
    /// Addresses from .5 to `last`, leases of 2 minutes (dnsmasq's
    /// shortest), T1 after `t1_secs` when given.
    pub fn start(tag: &str, last: &str, t1_secs: Option<u32>) -> Lab {
        let extra: Vec<String> = t1_secs
            .map(|t1| format!("--dhcp-option=option:T1,{t1}"))
            .into_iter()
            .collect();
        Lab::start_with(tag, last, &extra)
    }

    /// As [`Lab::start`], with more dnsmasq arguments.
    pub fn start_with(tag: &str, last: &str, extra: &[String]) -> Lab {
        let host = TestNetns::new(tag);
        host.ip(&["link", "add", "dhcpbr0", "type", "bridge"]);
        host.ip(&["addr", "add", "192.168.1.1/24", "dev", "dhcpbr0"]);
        host.ip(&["link", "set", "dhcpbr0", "up"]);
        let dir = tempfile::tempdir().expect("tempdir");
        let dnsmasq = spawn_dnsmasq(&host, dir.path(), last, extra);
        let lab = Lab {
            host,
            dir,
            dnsmasq,
            ports: 0,
        };
        lab.wait_started(1);
        lab
    }

    /// Stops dnsmasq (its lease file stays).
    pub fn stop_server(&mut self) {
        let _ = self.dnsmasq.kill();
        let _ = self.dnsmasq.wait();
    }

    /// Stops dnsmasq and starts it again with another range (and more
    /// arguments), keeping its lease file and log.
    pub fn restart_server(&mut self, last: &str, first: &str, extra: &[String]) {
        let _ = self.dnsmasq.kill();
        let _ = self.dnsmasq.wait();
        let started = self.count("DHCP, sockets bound");
        let mut args = extra.to_vec();
        args.push(format!("--dhcp-range={first},{last},255.255.255.0,2m"));
        self.dnsmasq = spawn_dnsmasq(&self.host, self.dir.path(), "", &args);
        self.wait_started(started + 1);
    }

    fn wait_started(&self, times: usize) {
        assert!(
            wait_for(Duration::from_secs(10), || self
                .count("DHCP, sockets bound")
                >= times),
            "dnsmasq did not start: {}",
            self.log()
        );
    }

    /// A container namespace whose `ifname` is a port of the lab's bridge.
    pub fn container(&mut self, tag: &str, ifname: &str) -> TestNetns {
        let ns = TestNetns::new(tag);
        self.ports += 1;
        let port = format!("dhcpp{}", self.ports);
        self.host.ip(&[
            "link",
            "add",
            &port,
            "type",
            "veth",
            "peer",
            "name",
            ifname,
            "netns",
            ns.name(),
        ]);
        self.host.ip(&["link", "set", &port, "master", "dhcpbr0"]);
        self.host.ip(&["link", "set", &port, "up"]);
        ns.ip(&["link", "set", ifname, "up"]);
        ns
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("dnsmasq.log")).unwrap_or_default()
    }

    /// dnsmasq's lease file: (expiry, address, client id) per lease.
    pub fn leases(&self) -> Vec<(u64, String, String)> {
        // dnsmasq rewrites the file in place: a read can see it empty or
        // half written, so two reads 50 ms apart must agree.
        let path = self.dir.path().join("leases");
        let mut text = fs::read_to_string(&path).unwrap_or_default();
        loop {
            std::thread::sleep(Duration::from_millis(50));
            let again = fs::read_to_string(&path).unwrap_or_default();
            if again == text {
                break;
            }
            text = again;
        }
        text.lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                Some((
                    fields.first()?.parse().ok()?,
                    fields.get(2)?.to_string(),
                    fields.get(4).unwrap_or(&"").to_string(),
                ))
            })
            .collect()
    }

    pub fn leased(&self, ip: &str) -> bool {
        self.leases().iter().any(|(_, address, _)| address == ip)
    }

    pub fn expiry_of(&self, ip: &str) -> Option<u64> {
        self.leases()
            .into_iter()
            .find(|(_, address, _)| address == ip)
            .map(|(expiry, _, _)| expiry)
    }

    /// How many times the log says `what` (e.g. "DHCPACK(dhcpbr0) 192.168.1.5").
    pub fn count(&self, what: &str) -> usize {
        self.log().matches(what).count()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.dnsmasq.kill();
        let _ = self.dnsmasq.wait();
    }
}

/// A DHCP daemon process on a socket in its own directory.
pub struct Daemon {
    child: Option<Child>,
    pub socket: PathBuf,
    pub state: PathBuf,
    pub log: PathBuf,
}

impl Daemon {
    /// Our daemon, its leases under `state`.
    pub fn ours(dir: &Path, state: &Path, extra: &[&str]) -> Daemon {
        let mut args = vec!["-statedir".to_string(), state.display().to_string()];
        args.extend(extra.iter().map(|s| s.to_string()));
        Daemon::start(&ours(), dir, state, &args)
    }

    /// The Go reference daemon.
    pub fn reference(dir: &Path, extra: &[&str]) -> Daemon {
        let args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        Daemon::start(Path::new(REFERENCE_DHCP), dir, &dir.join("unused"), &args)
    }

    fn start(bin: &Path, dir: &Path, state: &Path, args: &[String]) -> Daemon {
        let socket = dir.join(format!("dhcp-{}.sock", rand_tag()));
        let log = dir.join(format!("daemon-{}.log", rand_tag()));
        let log_file = fs::File::create(&log).expect("daemon log");
        let child = Command::new(bin)
            .arg("daemon")
            .arg("-socketpath")
            .arg(&socket)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log"))
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {} daemon: {e}", bin.display()));
        let daemon = Daemon {
            child: Some(child),
            socket,
            state: state.to_path_buf(),
            log,
        };
        // The socket file exists a moment before it accepts connections.
        assert!(
            wait_for(Duration::from_secs(10), || {
                std::os::unix::net::UnixStream::connect(&daemon.socket).is_ok()
            }),
            "daemon did not listen: {}",
            daemon.log_text()
        );
        daemon
    }

    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM by PID and wait for the exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(child.id(), "-TERM");
            let _ = child.wait();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn rand_tag() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

pub fn conf(version: &str, socket: &Path) -> Value {
    json!({
        "cniVersion": version,
        "name": "dhcpnet",
        "type": "macvlan",
        "ipam": {"type": "dhcp", "daemonSocketPath": socket.display().to_string()}
    })
}

pub fn run(
    plugin: &Path,
    command: &str,
    ns: &TestNetns,
    container_id: &str,
    ifname: &str,
    conf: &Value,
) -> PluginOutcome {
    PluginCall::new(command)
        .attachment(container_id, &ns.path(), ifname)
        .stdin_json(conf)
        .run(plugin)
}

/// The address of an ADD result in any version (0.1.0/0.2.0: `ip4.ip`).
pub fn address_of(result: &Value) -> String {
    result["ips"][0]["address"]
        .as_str()
        .or_else(|| result["ip4"]["ip"].as_str())
        .unwrap_or_else(|| panic!("no address in {result}"))
        .to_string()
}

/// dnsmasq on the lab's bridge; `last` ends the default range from .5
/// (none when empty: `extra` then has its own `--dhcp-range`).
fn spawn_dnsmasq(host: &TestNetns, dir: &Path, last: &str, extra: &[String]) -> Child {
    let mut args = vec![
        "netns".to_string(),
        "exec".to_string(),
        host.name().to_string(),
        DNSMASQ.to_string(),
        "--no-daemon".into(),
        "--port=0".into(),
        "--conf-file=-".into(),
        "--interface=dhcpbr0".into(),
        "--bind-interfaces".into(),
        "--dhcp-sequential-ip".into(),
        "--user=root".into(),
        "--pid-file=".into(),
        "--log-dhcp".into(),
        format!("--dhcp-leasefile={}", dir.join("leases").display()),
        format!("--log-facility={}", dir.join("dnsmasq.log").display()),
    ];
    if !last.is_empty() {
        args.push(format!("--dhcp-range={FIRST_IP},{last},255.255.255.0,2m"));
    }
    args.extend(extra.iter().cloned());
    Command::new("ip")
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("cannot start dnsmasq (package dnsmasq-base)")
}
