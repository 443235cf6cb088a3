//! Podman (Debian's 4.3, CNI network backend) running a container on a
//! network of the plugins under test in the shape Podman writes for its
//! default network (bridge with host-local, portmap, firewall, tuning;
//! cniVersion 0.4.0), with a published port. The plugin folder Podman is
//! given holds only the plugins under test.
//!
//! The fake host's FORWARD policy is DROP, as on hosts where Docker or a
//! distribution firewall set it: the container's own connections to a
//! client namespace behind the host pass only through the firewall
//! plugin's rules, so the check sees the plugin work, not an open policy.
//!
//! Podman runs inside a fake host namespace the check creates, in a mount
//! namespace of its own: a long-lived holder process in the fake host with
//! a sysfs of that namespace (as `ip netns exec` gives, but keeping the
//! cgroup mounts runc needs) and a tmpfs over /var/lib (Podman's CNI
//! result cache goes to /var/lib/cni). Every
//! Podman command enters that holder's network and mount namespaces, so
//! the container namespaces Podman mounts under /run/netns stay visible
//! from one command to the next and invisible to the machine. Its
//! configuration, storage (vfs), runtime state, events log and the
//! network's leases all live in a private folder: CONTAINERS_CONF and
//! CONTAINERS_STORAGE_CONF point there.
//!
//! Facts of these machines the configuration encodes: crun 1.8 fails on
//! the hybrid cgroup layout, runc works; the default ulimits must be
//! nofile=20000 and nproc=32768; cgroupfs, file events. The container's
//! root filesystem is a static busybox (no image registry is reachable).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;

use super::report::Report;
use super::sandbox::{wait_with_timeout, Netns, SandboxError, TcpResponder, WorkDir};

type Step<T> = Result<T, String>;

const NETWORK: &str = "suitenet";
const BRIDGE: &str = "cni-podman9";
const SUBNET: &str = "10.99.0.0/24";
const GATEWAY_IP: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
const CONTAINER: &str = "suite-web";
const HOST_PORT: u16 = 18080;
const CONTAINER_PORT: u16 = 8080;
const TOKEN: &str = "hello from podman";
/// A client namespace behind the fake host, reached from the container
/// through the host's FORWARD chain.
const CLIENT_HOST_IP: &str = "10.98.0.1/24";
const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 98, 0, 2);
const CLIENT_PORT: u16 = 19090;
const CLIENT_TOKEN: &str = "hello from the client";
const BUSYBOX: &str = "/bin/busybox";

/// How long one Podman command may take.
const PODMAN_TIMEOUT: Duration = Duration::from_secs(180);

#[derive(Debug, Clone)]
pub struct PodmanOptions {
    pub plugins: PathBuf,
    pub echo: bool,
}

/// What Podman needs that may be missing, by name.
pub fn missing_prerequisites() -> Vec<String> {
    let mut missing = Vec::new();
    for (tool, package) in [
        ("podman", "podman"),
        ("runc", "runc"),
        ("conmon", "conmon"),
        ("nsenter", "util-linux"),
    ] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            missing.push(format!("{tool} (package {package})"));
        }
    }
    if !Path::new(BUSYBOX).is_file() {
        missing.push(format!("{BUSYBOX} (package busybox-static)"));
    }
    missing
}

/// The private world Podman runs in; everything goes away on drop.
struct Rig {
    host: Netns,
    /// Behind the host on 10.98.0.0/24; the container's traffic to it is
    /// forwarded (and masqueraded) by the host.
    client: Netns,
    work: WorkDir,
    holder: Child,
    netns_before: BTreeSet<String>,
}

fn netns_entries() -> BTreeSet<String> {
    std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect()
}

impl Rig {
    fn new(plugins: &Path) -> Result<Rig, SandboxError> {
        let netns_before = netns_entries();
        let host = Netns::create("podman-h")?;
        let client = Netns::create("podman-c")?;
        host.ip(&[
            "link",
            "add",
            "podman-c0",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            client.name(),
        ])?;
        host.ip(&["address", "add", CLIENT_HOST_IP, "dev", "podman-c0"])?;
        host.ip(&["link", "set", "podman-c0", "up"])?;
        client.ip(&["address", "add", &format!("{CLIENT_IP}/24"), "dev", "eth0"])?;
        client.ip(&["link", "set", "eth0", "up"])?;
        client.ip(&["link", "set", "lo", "up"])?;
        host.exec("iptables", &["-P", "FORWARD", "DROP"])?;
        let work = WorkDir::new("podman")?;
        write_files(&work, plugins)?;
        // The holder: a mount namespace of its own (slave, so nothing
        // mounted in it reaches the machine) in the fake host's network
        // namespace, with a sysfs of that namespace (its links in
        // /sys/class/net) and the machine's cgroup mounts carried over
        // (runc needs them), /var/lib hidden behind a tmpfs. It says ready
        // and waits to be killed.
        let save = work.join("cgroup-save");
        std::fs::create_dir_all(&save)?;
        let script = "set -e; \
            mount --rbind /sys/fs/cgroup \"$0\"; \
            umount -l /sys; \
            mount -t sysfs sysfs /sys; \
            mount --rbind \"$0\" /sys/fs/cgroup; \
            umount -l \"$0\"; \
            mount -t tmpfs tmpfs /var/lib; \
            mkdir -p /var/lib/cni; \
            echo ready; \
            exec sleep 3600";
        let mut holder = Command::new("unshare")
            .args(["--mount", "--propagation", "slave", "--", "nsenter"])
            .arg(format!("--net={}", host.path_string()))
            .args(["--", "sh", "-c", script])
            .arg(&save)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| SandboxError::Spawn {
                program: "unshare".into(),
                source,
            })?;
        let mut line = String::new();
        if let Some(out) = holder.stdout.take() {
            let _ = BufReader::new(out).read_line(&mut line);
        }
        if line.trim() != "ready" {
            let mut err = String::new();
            if let Some(mut e) = holder.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            let _ = holder.kill();
            let _ = holder.wait();
            return Err(SandboxError::Other(format!(
                "the namespace holder did not start: {}",
                err.trim()
            )));
        }
        Ok(Rig {
            host,
            client,
            work,
            holder,
            netns_before,
        })
    }

    /// Runs podman with the private configuration inside the holder's
    /// namespaces.
    fn podman(&self, args: &[&str]) -> Step<String> {
        let pid = self.holder.id().to_string();
        let child = Command::new("nsenter")
            .args(["--target", &pid, "--net", "--mount", "--", "podman"])
            .args(args)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            // Podman's environment reaches the plugins: the tests' node
            // policy allows the scratch lease folder (dataDir is confined).
            .env(
                libcni::confine::POLICY_ENV,
                crate::testnet::scratch_policy(),
            )
            .env("HOME", self.work.path())
            .env("CONTAINERS_CONF", self.work.join("containers.conf"))
            .env("CONTAINERS_STORAGE_CONF", self.work.join("storage.conf"))
            .env(
                "CONTAINERS_REGISTRIES_CONF",
                self.work.join("registries.conf"),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run podman: {e}"))?;
        let reply =
            wait_with_timeout(child, b"", PODMAN_TIMEOUT, "podman").map_err(|e| e.to_string())?;
        if reply.code == 0 {
            Ok(reply.stdout)
        } else {
            Err(format!(
                "podman {} exited {}: {}",
                args.first().copied().unwrap_or_default(),
                reply.code,
                reply.stderr.trim()
            ))
        }
    }

    fn leases(&self) -> Vec<String> {
        std::fs::read_dir(self.work.join("leases").join(NETWORK))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.parse::<IpAddr>().is_ok())
            .collect()
    }

    /// Firewall rules of the fake host that mention `ip` (nftables and
    /// iptables, whichever the plugins used).
    fn rules_mentioning(&self, ip: &str) -> Vec<String> {
        let mut found = Vec::new();
        for (program, args) in [
            ("nft", &["list", "ruleset"][..]),
            ("iptables-save", &[][..]),
            ("ip6tables-save", &[][..]),
        ] {
            if let Ok(out) = self.host.exec(program, args) {
                found.extend(
                    out.lines()
                        .filter(|l| {
                            l.split(|c: char| !(c.is_ascii_digit() || c == '.'))
                                .any(|word| word == ip)
                        })
                        .map(|l| format!("{program}: {}", l.trim())),
                );
            }
        }
        found
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = self.podman(&["rm", "--all", "--force", "--time", "0"]);
        let _ = self.holder.kill();
        let _ = self.holder.wait();
        // Podman names its container namespaces netns-<uuid>; one it made
        // but could not remove (a failed run) is an empty file here.
        for name in netns_entries().difference(&self.netns_before) {
            if name.starts_with("netns-") {
                let _ = Command::new("ip").args(["netns", "delete", name]).status();
            }
        }
    }
}

fn write_files(work: &WorkDir, plugins: &Path) -> Result<(), SandboxError> {
    let plugins = std::fs::canonicalize(plugins)?;
    let toml_str = |p: &Path| json!(p.display().to_string()).to_string();
    let conf = format!(
        "[containers]\n\
         default_ulimits = [\"nofile=20000:20000\", \"nproc=32768:32768\"]\n\
         \n\
         [network]\n\
         network_backend = \"cni\"\n\
         cni_plugin_dirs = [{plugins}]\n\
         network_config_dir = {netconf}\n\
         default_network = \"{NETWORK}\"\n\
         \n\
         [engine]\n\
         runtime = \"runc\"\n\
         cgroup_manager = \"cgroupfs\"\n\
         events_logger = \"file\"\n\
         events_logfile_path = {events}\n\
         tmp_dir = {tmp}\n\
         static_dir = {static_dir}\n\
         volume_path = {volumes}\n",
        plugins = toml_str(&plugins),
        netconf = toml_str(&work.join("net.d")),
        events = toml_str(&work.join("events.log")),
        tmp = toml_str(&work.join("libpod-tmp")),
        static_dir = toml_str(&work.join("libpod")),
        volumes = toml_str(&work.join("volumes")),
    );
    std::fs::write(work.join("containers.conf"), conf)?;
    let storage = format!(
        "[storage]\ndriver = \"vfs\"\nrunroot = {}\ngraphroot = {}\n",
        toml_str(&work.join("runroot")),
        toml_str(&work.join("graphroot"))
    );
    std::fs::write(work.join("storage.conf"), storage)?;
    std::fs::write(work.join("registries.conf"), "")?;
    std::fs::create_dir_all(work.join("net.d"))?;
    // Podman 4's default network, as `podman network create` writes it
    // (only the bridge name, subnet and lease folder are the suite's).
    let network = json!({
        "cniVersion": "0.4.0",
        "name": NETWORK,
        "plugins": [
            {
                "type": "bridge", "bridge": BRIDGE, "isGateway": true, "ipMasq": true,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": SUBNET, "gateway": GATEWAY_IP.to_string()}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": work.join("leases"),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "firewall", "backend": ""},
            {"type": "tuning"},
        ],
    });
    std::fs::write(
        work.join("net.d").join(format!("10-{NETWORK}.conflist")),
        network.to_string(),
    )?;
    // The container's root: a static busybox and a page to serve.
    let rootfs = work.join("rootfs");
    for dir in ["bin", "etc", "www", "proc", "sys", "dev", "tmp", "run"] {
        std::fs::create_dir_all(rootfs.join(dir))?;
    }
    std::fs::copy(BUSYBOX, rootfs.join("bin/busybox"))?;
    for applet in ["sh", "httpd", "sleep", "cat", "ip", "nc"] {
        std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet))?;
    }
    std::fs::write(rootfs.join("www/index.html"), TOKEN)?;
    std::fs::write(rootfs.join("etc/passwd"), "root:x:0:0:root:/:/bin/sh\n")?;
    std::fs::write(rootfs.join("etc/group"), "root:x:0:\n")?;
    Ok(())
}

/// `GET /` over HTTP/1.0 from `ns`; the body of the answer.
fn http_get(ns: &Netns, addr: IpAddr, port: u16) -> Step<String> {
    let netns = ns.open().map_err(|e| e.to_string())?;
    netns
        .run(move || {
            let target = SocketAddr::new(addr, port);
            let mut conn = TcpStream::connect_timeout(&target, Duration::from_secs(3))
                .map_err(|e| format!("connect {target}: {e}"))?;
            let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
            conn.write_all(b"GET / HTTP/1.0\r\nHost: suite\r\n\r\n")
                .map_err(|e| format!("send to {target}: {e}"))?;
            let mut answer = String::new();
            conn.read_to_string(&mut answer)
                .map_err(|e| format!("read from {target}: {e}"))?;
            Ok(answer
                .split_once("\r\n\r\n")
                .map(|(_, body)| body.to_string())
                .unwrap_or_default())
        })
        .map_err(|e| e.to_string())?
}

fn expect_page(rig: &Rig, addr: IpAddr, port: u16) -> Step<String> {
    let body = http_get(&rig.host, addr, port)?;
    if body.trim() == TOKEN {
        Ok(format!("{addr}:{port} served the page"))
    } else {
        Err(format!("{addr}:{port} answered {body:?}"))
    }
}

pub fn run(opts: &PodmanOptions) -> Report {
    if opts.echo {
        println!(
            "podman: a container on a CNI bridge network of the plugins in {}",
            opts.plugins.display()
        );
    }
    let mut report = Report::new(Vec::new(), opts.echo);
    let id = |what: &str| format!("podman: {what}");
    let missing = missing_prerequisites();
    if !missing.is_empty() {
        report.check(
            id("prerequisites"),
            Err(format!(
                "missing {} (conformance/scripts/install-runtime-deps.sh installs them)",
                missing.join(", ")
            )),
        );
        return report;
    }
    let rig = match Rig::new(&opts.plugins) {
        Ok(r) => r,
        Err(e) => {
            report.check(id("setup"), Err(e.to_string()));
            return report;
        }
    };
    let rootfs = rig.work.join("rootfs").display().to_string();
    let publish = format!("{HOST_PORT}:{CONTAINER_PORT}");
    let port_arg = CONTAINER_PORT.to_string();
    let started = rig.podman(&[
        "run",
        "--detach",
        "--name",
        CONTAINER,
        "--network",
        NETWORK,
        "--publish",
        &publish,
        "--rootfs",
        &rootfs,
        "/bin/httpd",
        "-f",
        "-p",
        &port_arg,
        "-h",
        "/www",
    ]);
    report.check(
        id(&format!(
            "run --rootfs (busybox) on CNI network {NETWORK} with -p {publish} (runc, cgroupfs, vfs)"
        )),
        started.as_ref().map(|_| String::new()).map_err(Clone::clone),
    );
    if started.is_err() {
        return report;
    }
    let ip = rig
        .podman(&[
            "inspect",
            "--format",
            &format!("{{{{(index .NetworkSettings.Networks \"{NETWORK}\").IPAddress}}}}"),
            CONTAINER,
        ])
        .and_then(|out| {
            out.trim()
                .parse::<Ipv4Addr>()
                .map_err(|e| format!("podman inspect gave no IPv4 address ({e}): {out:?}"))
        });
    report.check(
        id("the container has an address of the network (podman inspect)"),
        ip.as_ref().map(|ip| ip.to_string()).map_err(Clone::clone),
    );
    let Ok(ip) = ip else {
        return report;
    };
    // httpd needs a moment to listen after the container starts.
    let reachable = (0..50).any(|_| {
        let ok = http_get(&rig.host, IpAddr::V4(ip), CONTAINER_PORT).is_ok();
        if !ok {
            std::thread::sleep(Duration::from_millis(100));
        }
        ok
    });
    report.check(
        id("the container answers on its IP from the host"),
        if reachable {
            expect_page(&rig, IpAddr::V4(ip), CONTAINER_PORT)
        } else {
            http_get(&rig.host, IpAddr::V4(ip), CONTAINER_PORT)
        },
    );
    report.check(
        id("the published port answers from the host (bridge gateway address)"),
        expect_page(&rig, IpAddr::V4(GATEWAY_IP), HOST_PORT),
    );
    report.check(
        id("the published port answers from 127.0.0.1"),
        expect_page(&rig, IpAddr::V4(Ipv4Addr::LOCALHOST), HOST_PORT),
    );
    report.check(
        id("the container reaches a client behind the host (FORWARD policy DROP: firewall's rules)"),
        (|| {
            let _server = TcpResponder::start(&rig.client, CLIENT_PORT, CLIENT_TOKEN)
                .map_err(|e| e.to_string())?;
            let port = CLIENT_PORT.to_string();
            let client = CLIENT_IP.to_string();
            let got = rig.podman(&["exec", CONTAINER, "nc", &client, &port])?;
            if got.trim() == CLIENT_TOKEN {
                Ok(format!("{client}:{port} answered"))
            } else {
                Err(format!("{client}:{port} answered {got:?}"))
            }
        })(),
    );
    let ip_text = ip.to_string();
    let had_rules = !rig.rules_mentioning(&ip_text).is_empty();
    let removed = rig.podman(&["rm", "--force", "--time", "0", CONTAINER]);
    report.check(id("rm succeeds"), removed.map(|_| String::new()));
    report.check(
        id("no IP lease, veth or firewall rule is left after rm"),
        (|| {
            let leases = rig.leases();
            let veths: Vec<String> = rig
                .host
                .link_names()
                .map_err(|e| e.to_string())?
                .into_iter()
                .filter(|n| n.starts_with("veth"))
                .collect();
            let rules = rig.rules_mentioning(&ip_text);
            if !had_rules {
                return Err(format!(
                    "no firewall rule mentioned {ip_text} while the container ran"
                ));
            }
            if leases.is_empty() && veths.is_empty() && rules.is_empty() {
                Ok(String::new())
            } else {
                Err(format!(
                    "leases {leases:?}, veths {veths:?}, rules {rules:?}"
                ))
            }
        })(),
    );
    report.check(
        id("the published port is closed after rm"),
        match http_get(&rig.host, IpAddr::V4(GATEWAY_IP), HOST_PORT) {
            Err(_) => Ok(String::new()),
            Ok(body) => Err(format!("still answers {body:?}")),
        },
    );
    drop(rig);
    report
}
