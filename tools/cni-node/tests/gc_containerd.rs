//! `cni-node gc --once` beside Debian's containerd (1.6), on a bridge +
//! host-local + portmap + firewall + bandwidth + tuning network.
//!
//! containerd runs as testing/cri-client starts it: in a network
//! namespace of the test's (the node) and a private mount namespace with
//! tmpfs on /run and /var/lib, so its CNI cache (/var/lib/cni), host-local's
//! leases (/var/lib/cni/networks) and tuning's saved settings
//! (/run/cni/tuning) stay in the test. The agent runs where a DaemonSet
//! container with those hostPath mounts would: in both namespaces
//! (`nsenter --target <containerd> --mount --net`), with its defaults for
//! the cache folder.
//!
//! The attachments of a crash are made through our libcni (`cnitool add`
//! in the same namespaces, which caches as containerd's go-cni does) for
//! container IDs containerd does not list; their files are then dated
//! ten minutes back, past the default `--min-age` of 5 minutes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use conformance::testnet::{self, workspace_plugin, TestNetns};
use cri_client::oci_image::SandboxImage;
use cri_client::{cri, Containerd, ContainerdConfig, CriClient, PodSpec, PortMapping};
use serde_json::{json, Value};

const SANDBOX_IMAGE: &str = "cnitest.local/sandbox:httpd";
const BUSYBOX: &str = "/bin/busybox";
const POD_HTTP_PORT: u16 = 8080;
const PLUGINS: [&str; 7] = [
    "loopback",
    "bridge",
    "host-local",
    "portmap",
    "firewall",
    "bandwidth",
    "tuning",
];
/// Where the agent's defaults point inside containerd's mount namespace.
const CACHE_RESULTS: &str = "var/lib/cni/results";
const LEASES: &str = "var/lib/cni/networks";
const TUNING_SAVED: &str = "run/cni/tuning";

/// What the tests need that may be missing on a developer machine.
const PROGRAMS: [(&str, &str); 8] = [
    ("containerd", "--version"),
    ("ctr", "--version"),
    ("runc", "--version"),
    ("nsenter", "--version"),
    ("iptables-save", "--version"),
    ("tc", "-V"),
    ("curl", "--version"),
    ("touch", "--version"),
];
const FILES: [(&str, &str); 1] = [("busybox-static", BUSYBOX)];

fn skip_unless_installed(test: &str) -> bool {
    testnet::skip_unless_installed(
        test,
        &PROGRAMS,
        &FILES,
        "apt-get install containerd runc busybox-static iptables iproute2 curl util-linux",
    )
}

/// A node: containerd in a namespace of the test's, with our plugins and
/// one conflist.
struct Node {
    // Dropped first: containerd removes what pods are left, then its
    // mount namespace (with the orphans' namespaces) ends.
    containerd: Containerd,
    netns: TestNetns,
    network: String,
    conf_dir: PathBuf,
    bin_dir: PathBuf,
    gateway: String,
    _work: tempfile::TempDir,
}

/// An attachment made through libcni for a container containerd does not
/// know.
#[derive(Debug, Clone)]
struct Orphan {
    container_id: String,
    ip: String,
    netns: String,
}

/// A pod containerd runs.
#[derive(Debug, Clone)]
struct Pod {
    id: String,
    ip: String,
}

impl Node {
    fn start(tag: &str, bridge: &str, subnet_base: &str) -> Node {
        let work = tempfile::Builder::new()
            .prefix("cnitest-node-")
            .tempdir()
            .expect("temp dir");
        let netns = TestNetns::new(tag);
        let bin_dir = work.path().join("bin");
        std::fs::create_dir_all(&bin_dir).expect("bin dir");
        for name in PLUGINS {
            std::os::unix::fs::symlink(workspace_plugin(name), bin_dir.join(name))
                .expect("link plugin");
        }
        let network = format!("cnitest-{tag}");
        let conf_dir = work.path().join("net.d");
        std::fs::create_dir_all(&conf_dir).expect("conf dir");
        let conflist = json!({
            // containerd 1.6's go-cni reads only cniVersion (1.1.0 results
            // are unknown to it); our libcni takes the highest it speaks
            // of cniVersions, so the agent runs GC (1.1.0).
            "cniVersion": "1.0.0",
            "cniVersions": ["1.0.0", "1.1.0"],
            "name": network,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": bridge,
                    "isGateway": true,
                    "ipMasq": true,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{ "subnet": format!("{subnet_base}.0/24") }]],
                        "routes": [{ "dst": "0.0.0.0/0" }]
                    }
                },
                { "type": "portmap", "capabilities": { "portMappings": true } },
                { "type": "firewall", "backend": "iptables" },
                {
                    "type": "bandwidth",
                    "ingressRate": 100_000_000u64, "ingressBurst": 1_000_000u64,
                    "egressRate": 100_000_000u64, "egressBurst": 1_000_000u64
                },
                { "type": "tuning", "mtu": 1400 }
            ]
        });
        std::fs::write(
            conf_dir.join("10-cnitest.conflist"),
            serde_json::to_vec_pretty(&conflist).expect("conflist"),
        )
        .expect("write conflist");
        let containerd = Containerd::start(ContainerdConfig {
            netns: netns.path(),
            work_dir: work.path().join("containerd"),
            plugin_dir: bin_dir.clone(),
            conf_dir: conf_dir.clone(),
            sandbox_image: SANDBOX_IMAGE.to_string(),
        })
        .unwrap_or_else(|e| panic!("start containerd: {e}"));
        containerd
            .import_sandbox_image(&SandboxImage {
                reference: SANDBOX_IMAGE,
                busybox: Path::new(BUSYBOX),
                http_port: POD_HTTP_PORT,
                index_html: "cnitest pod\n",
            })
            .unwrap_or_else(|e| panic!("import the sandbox image: {e}"));
        Node {
            containerd,
            netns,
            network,
            conf_dir,
            bin_dir,
            gateway: format!("{subnet_base}.1"),
            _work: work,
        }
    }

    fn client(&self) -> CriClient {
        self.containerd
            .client()
            .unwrap_or_else(|e| panic!("CRI client: {e}"))
    }

    /// containerd's root as its mount namespace sees it.
    fn root(&self) -> PathBuf {
        let pid = self.containerd.pid().expect("containerd runs");
        PathBuf::from(format!("/proc/{pid}/root"))
    }

    /// A command in containerd's mount and network namespaces.
    fn inside(&self, program: &Path, args: &[&str], env: &[(&str, String)]) -> Output {
        let pid = self.containerd.pid().expect("containerd runs");
        Command::new("nsenter")
            .arg(format!("--target={pid}"))
            .args(["--mount", "--net", "--"])
            .arg(program)
            .args(args)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .output()
            .unwrap_or_else(|e| panic!("nsenter {}: {e}", program.display()))
    }

    /// `cni-node gc --once` as the DaemonSet would run it, with `extra`
    /// flags.
    fn gc(&self, extra: &[&str]) -> Output {
        let endpoint = format!("unix://{}", self.containerd.socket().display());
        self.gc_at(&endpoint, extra)
    }

    /// [`Node::gc`] with another CRI endpoint.
    fn gc_at(&self, endpoint: &str, extra: &[&str]) -> Output {
        let conf = self.conf_dir.display().to_string();
        let bin = self.bin_dir.display().to_string();
        let mut args = vec![
            "gc",
            "--once",
            "--cri-endpoint",
            endpoint,
            "--conf-dir",
            &conf,
            "--bin-dir",
            &bin,
        ];
        args.extend_from_slice(extra);
        let out = self.inside(Path::new(env!("CARGO_BIN_EXE_cni-node")), &args, &[]);
        eprintln!(
            "cni-node gc {extra:?}: {}\nstdout:\n{}stderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// An attachment through libcni (`cnitool add`) for a namespace made
    /// inside containerd's mount namespace, with a host port.
    fn orphan(&self, name: &str, host_port: u16) -> Orphan {
        let out = self.inside(Path::new("ip"), &["netns", "add", name], &[]);
        assert!(out.status.success(), "ip netns add {name}: {out:?}");
        let netns = format!("/run/netns/{name}");
        let cap_args = json!({"portMappings": [
            {"hostPort": host_port, "containerPort": POD_HTTP_PORT, "protocol": "tcp"}
        ]});
        let out = self.inside(
            &workspace_plugin("cnitool"),
            &["add", &self.network, &netns],
            &[
                ("NETCONFPATH", self.conf_dir.display().to_string()),
                ("CNI_PATH", self.bin_dir.display().to_string()),
                ("CAP_ARGS", cap_args.to_string()),
            ],
        );
        assert!(
            out.status.success(),
            "cnitool add: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let result: Value = serde_json::from_slice(&out.stdout).expect("cnitool's result");
        let ip = result["ips"][0]["address"]
            .as_str()
            .and_then(|a| a.split('/').next())
            .expect("an address")
            .to_string();
        let container_id = self
            .cache_entries()
            .into_iter()
            .find(|(_, e)| e["netns"] == netns.as_str())
            .map(|(_, e)| e["containerId"].as_str().unwrap_or_default().to_string())
            .expect("cnitool cached the attachment");
        Orphan {
            container_id,
            ip,
            netns: name.to_string(),
        }
    }

    fn remove_netns(&self, name: &str) {
        let out = self.inside(Path::new("ip"), &["netns", "delete", name], &[]);
        assert!(out.status.success(), "ip netns delete {name}: {out:?}");
    }

    fn run_pod(&self, name: &str, host_port: u16) -> Pod {
        let mut client = self.client();
        let spec = PodSpec {
            name: name.to_string(),
            namespace: "cnitest".to_string(),
            uid: format!("cnitest-uid-{name}"),
            attempt: 0,
            port_mappings: vec![PortMapping {
                protocol: cri::Protocol::Tcp,
                container_port: POD_HTTP_PORT,
                host_port,
                host_ip: String::new(),
            }],
            labels: HashMap::new(),
            log_directory: PathBuf::new(),
        };
        let id = client
            .run_pod_sandbox(&spec)
            .unwrap_or_else(|e| panic!("RunPodSandbox: {e}\n{}", self.containerd.log()));
        let status = client.pod_sandbox_status(&id).expect("PodSandboxStatus");
        assert_eq!(status.state, cri::PodSandboxState::SandboxReady);
        Pod { id, ip: status.ip }
    }

    /// The cache's files (name → JSON), as containerd's mount namespace
    /// holds them.
    fn cache_entries(&self) -> BTreeMap<String, Value> {
        read_dir_map(&self.root().join(CACHE_RESULTS), |data| {
            serde_json::from_slice(data).unwrap_or(Value::Null)
        })
    }

    /// host-local's lease files (address → holder).
    fn leases(&self) -> BTreeMap<String, String> {
        read_dir_map(&self.root().join(LEASES).join(&self.network), |data| {
            String::from_utf8_lossy(data).into_owned()
        })
        .into_iter()
        .filter(|(name, _)| name.parse::<std::net::IpAddr>().is_ok())
        .collect()
    }

    /// Dates every cache entry and lease ten minutes back, past the
    /// default --min-age.
    fn age_everything(&self) {
        for dir in [
            self.root().join(CACHE_RESULTS),
            self.root().join(LEASES).join(&self.network),
        ] {
            for name in read_dir_map(&dir, |_| ()).keys() {
                let status = Command::new("touch")
                    .args(["-h", "-d", "10 minutes ago"])
                    .arg(dir.join(name))
                    .status()
                    .expect("touch");
                assert!(status.success());
            }
        }
    }

    /// Everything of the network's attachments on the node, normalised
    /// (no traffic counters, no timestamps).
    fn snapshot(&self) -> Snapshot {
        let text = |out: Output| String::from_utf8_lossy(&out.stdout).into_owned();
        let iptables = text(self.netns.exec("iptables-save", &[]));
        let nft = text(self.netns.exec("nft", &["list", "ruleset"]));
        Snapshot {
            leases: self.leases(),
            cache: self.cache_entries().into_keys().collect(),
            tuning: read_dir_map(&self.root().join(TUNING_SAVED), |_| ())
                .into_keys()
                .collect(),
            rules: normalise_rules(&iptables) + &normalise_rules(&nft),
            qdiscs: text(self.netns.exec("tc", &["qdisc", "show"])),
            links: self.netns.links().into_iter().collect(),
        }
    }

    /// The pod answers ping and HTTP on its address and on the host port
    /// (through the gateway address, the node's own).
    fn assert_pod_serves(&self, pod: &Pod, host_port: u16) {
        assert!(self.netns.ping(&pod.ip), "ping {}", pod.ip);
        assert_eq!(
            self.netns.http_get(&pod.ip, POD_HTTP_PORT).as_deref(),
            Ok("cnitest pod\n")
        );
        assert_eq!(
            self.netns.http_get(&self.gateway, host_port).as_deref(),
            Ok("cnitest pod\n"),
            "host port {host_port}"
        );
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Snapshot {
    leases: BTreeMap<String, String>,
    cache: BTreeSet<String>,
    tuning: BTreeSet<String>,
    rules: String,
    qdiscs: String,
    links: BTreeSet<String>,
}

impl Snapshot {
    /// Everything that names `id` or `ip` (as a whole word).
    fn naming(&self, id: &str, ip: &str) -> Vec<String> {
        let mut found = Vec::new();
        for (addr, holder) in &self.leases {
            if addr == ip || holder.contains(id) {
                found.push(format!("lease {addr}"));
            }
        }
        found.extend(
            self.cache
                .iter()
                .chain(&self.tuning)
                .filter(|n| n.contains(id))
                .map(|n| format!("file {n}")),
        );
        found.extend(
            self.rules
                .lines()
                .filter(|l| testnet::rule_names(l, id) || testnet::rule_names(l, ip))
                .map(|l| format!("rule {l}")),
        );
        found
    }

    /// The cache entries of a network (containerd also caches its own
    /// loopback network, `cni-loopback`).
    fn cache_of(&self, network: &str) -> Vec<String> {
        let prefix = format!("{network}-");
        self.cache
            .iter()
            .filter(|n| n.starts_with(&prefix))
            .cloned()
            .collect()
    }

    fn ifbs(&self) -> Vec<&String> {
        self.links.iter().filter(|l| l.starts_with("bwp")).collect()
    }
}

/// Rules without counters, comments or the save tools' timestamps.
fn normalise_rules(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let line = match line.find(" [") {
            Some(at) if line.starts_with(':') => &line[..at],
            _ => line,
        };
        let mut words: Vec<&str> = line.split_whitespace().collect();
        // nft's `counter packets N bytes M`
        while let Some(at) = words.iter().position(|w| *w == "packets") {
            words.drain(at..(at + 4).min(words.len()));
        }
        out.push_str(&words.join(" "));
        out.push('\n');
    }
    out
}

fn read_dir_map<T>(dir: &Path, read: impl Fn(&[u8]) -> T) -> BTreeMap<String, T> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let data = std::fs::read(e.path()).ok()?;
            Some((name, read(&data)))
        })
        .collect()
}

fn stdout_lines(out: &Output) -> BTreeSet<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn released_line(network: &str, orphan: &Orphan) -> String {
    format!(
        "released network={network} container={} ifname=eth0",
        orphan.container_id
    )
}

/// containerd killed in the middle of RunPodSandbox leaves attachments
/// made and (mostly) cached for sandboxes it never recorded. One pass
/// releases all of them, whether their namespace is still there, gone,
/// or the cache entry was never written, and leaves the live pod alone.
#[test]
fn one_pass_releases_what_crashed_sandboxes_held_and_keeps_the_live_pod() {
    if skip_unless_installed("one_pass_releases_what_crashed_sandboxes_held_and_keeps_the_live_pod")
    {
        return;
    }
    let started = Instant::now();
    let node = Node::start("gc1", "cnigc1", "10.244.81");
    let live = node.run_pod("live", 30081);
    node.assert_pod_serves(&live, 30081);

    // Cached, namespace still there (a shim's netns left pinned).
    let kept_ns = node.orphan("cnitest-orphan-a", 30082);
    // Cached, namespace gone (a reboot).
    let gone_ns = node.orphan("cnitest-orphan-b", 30083);
    node.remove_netns(&gone_ns.netns);
    // ADD finished, cache never written (killed before go-cni cached it).
    let uncached = node.orphan("cnitest-orphan-c", 30084);
    node.remove_netns(&uncached.netns);
    let entry = node
        .cache_entries()
        .into_iter()
        .find(|(_, e)| e["containerId"] == uncached.container_id.as_str())
        .map(|(name, _)| name)
        .expect("cache entry");
    std::fs::remove_file(node.root().join(CACHE_RESULTS).join(entry)).expect("remove entry");

    node.age_everything();
    let before = node.snapshot();
    for orphan in [&kept_ns, &gone_ns, &uncached] {
        let held = before.naming(&orphan.container_id, &orphan.ip);
        assert!(
            held.iter().any(|h| h.starts_with("lease"))
                && held.iter().any(|h| h.starts_with("rule")),
            "the orphan {orphan:?} holds a lease and rules before the pass: {held:#?}"
        );
    }
    assert_eq!(
        before.ifbs().len(),
        4,
        "one ifb per attachment: {:?}",
        before.links
    );
    assert_eq!(before.tuning.len(), 4, "one saved file per attachment");
    let live_before = before.naming(&live.id, &live.ip);

    let out = node.gc(&[]);
    assert!(out.status.success());
    assert_eq!(
        stdout_lines(&out),
        [&kept_ns, &gone_ns, &uncached]
            .iter()
            .map(|o| released_line(&node.network, o))
            .collect::<BTreeSet<_>>()
    );

    let after = node.snapshot();
    for orphan in [&kept_ns, &gone_ns, &uncached] {
        assert_eq!(
            after.naming(&orphan.container_id, &orphan.ip),
            Vec::<String>::new(),
            "left of {orphan:?}"
        );
    }
    assert_eq!(
        after.leases.len(),
        1,
        "only the live pod's lease: {:?}",
        after.leases
    );
    assert_eq!(
        after.cache_of(&node.network),
        vec![format!("{}-{}-eth0", node.network, live.id)],
        "only the live pod's entry"
    );
    assert_eq!(
        after.tuning.len(),
        1,
        "only the live pod's saved file: {:?}",
        after.tuning
    );
    assert_eq!(
        after.ifbs().len(),
        1,
        "only the live pod's ifb: {:?}",
        after.links
    );
    assert!(after.tuning.iter().all(|n| n.starts_with(&live.id)));
    // The orphan whose namespace was left: its veth went with the DEL.
    let out = node.inside(
        Path::new("ip"),
        &["netns", "exec", &kept_ns.netns, "ip", "-o", "link", "show"],
        &[],
    );
    let links = String::from_utf8_lossy(&out.stdout);
    assert!(
        !links.contains("eth0"),
        "eth0 left in the orphan's netns: {links}"
    );

    assert_eq!(after.naming(&live.id, &live.ip), live_before);
    node.assert_pod_serves(&live, 30081);
    eprintln!("crash test: {:.1} s", started.elapsed().as_secs_f64());
}

/// Safety: nothing is released while the agent cannot tell (runtime
/// unreachable), nor anything of a listed sandbox (ready or not), nor an
/// attachment younger than --min-age; passes with nothing to do change
/// nothing. At the end, with the runtime back and the orphan old enough,
/// the same pass does release it (so the checks above could fail).
#[test]
fn nothing_is_released_that_the_agent_cannot_tell_is_dead() {
    if skip_unless_installed("nothing_is_released_that_the_agent_cannot_tell_is_dead") {
        return;
    }
    let started = Instant::now();
    let node = Node::start("gc2", "cnigc2", "10.244.82");
    let ready = node.run_pod("ready", 30091);
    let stopped = node.run_pod("notready", 30092);
    kill_sandbox_process(&node, &stopped.id);
    wait_not_ready(&node, &stopped.id);
    let orphan = node.orphan("cnitest-orphan-d", 30093);

    // Young orphan: kept, and the listed sandboxes kept.
    let first = node.snapshot();
    assert_eq!(first.leases.len(), 3);
    let out = node.gc(&[]);
    assert!(out.status.success());
    assert_eq!(stdout_lines(&out), BTreeSet::new());
    assert_eq!(
        node.snapshot(),
        first,
        "a pass with young attachments changed something"
    );

    // Old, but the runtime does not answer: exit 1, nothing released.
    node.age_everything();
    let aged = node.snapshot();
    let missing = format!("unix://{}", node.containerd.socket().display()) + ".missing";
    let out = node.gc_at(&missing, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout_lines(&out), BTreeSet::new());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("releasing nothing this pass"),
        "the agent says why"
    );
    assert_eq!(
        node.snapshot(),
        aged,
        "an unreachable runtime's pass changed something"
    );

    // A plugin of the chain fails GC (missing from the folder): nothing is
    // reported released, no DEL is sent and the orphan's cache entry stays.
    let plugin = node.bin_dir.join("bandwidth");
    let parked = node.bin_dir.join("bandwidth.parked");
    std::fs::rename(&plugin, &parked).expect("park bandwidth");
    let out = node.gc(&[]);
    std::fs::rename(&parked, &plugin).expect("bandwidth back");
    assert!(out.status.success());
    assert_eq!(stdout_lines(&out), BTreeSet::new());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!(
            "network {}: GC failed; no DEL sent, every cache entry kept: failed to GC plugin bandwidth",
            node.network
        )),
        "the agent says why"
    );
    assert!(
        node.snapshot()
            .naming(&orphan.container_id, &orphan.ip)
            .iter()
            .any(|h| h.starts_with("file ") && !h.ends_with(".json")),
        "the orphan's cache entry was kept"
    );

    // GC passes but a plugin's DEL fails (a wrapper answers DEL with an
    // error): the orphan is not reported released, the failure is logged
    // and counted, its cache entry stays for the next pass.
    std::fs::rename(&plugin, &parked).expect("park bandwidth");
    write_failing_del(&plugin, &parked);
    let out = node.gc(&[]);
    std::fs::remove_file(&plugin).expect("remove the wrapper");
    std::fs::rename(&parked, &plugin).expect("bandwidth back");
    assert!(out.status.success());
    assert_eq!(stdout_lines(&out), BTreeSet::new());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "network {}: DEL of container {} ifname eth0 failed, its cache entry kept: ",
            node.network, orphan.container_id
        )) && stderr.contains("cnitest: DEL refused"),
        "the agent says which DEL failed and why"
    );
    assert!(
        stderr.contains("pass done in ") && stderr.contains(": 0 released, 1 network errors"),
        "the pass counts the failure"
    );
    assert!(
        node.cache_entries()
            .values()
            .any(|e| e["containerId"] == orphan.container_id.as_str()),
        "the orphan's cache entry was kept after its DEL failed"
    );

    // Runtime back: only the orphan goes; ready and not-ready pods stay.
    let out = node.gc(&[]);
    assert!(out.status.success());
    assert_eq!(
        stdout_lines(&out),
        BTreeSet::from([released_line(&node.network, &orphan)])
    );
    let settled = node.snapshot();
    assert_eq!(settled.leases.len(), 2, "{:?}", settled.leases);
    for pod in [&ready, &stopped] {
        assert_eq!(
            settled.naming(&pod.id, &pod.ip),
            aged.naming(&pod.id, &pod.ip),
            "pod {pod:?} changed"
        );
    }

    // Three passes with nothing to do: nothing changes.
    for pass in 0..3 {
        let out = node.gc(&[]);
        assert!(out.status.success(), "pass {pass}");
        assert_eq!(stdout_lines(&out), BTreeSet::new(), "pass {pass}");
        assert_eq!(
            node.snapshot(),
            settled,
            "idle pass {pass} changed something"
        );
    }
    node.assert_pod_serves(&ready, 30091);
    eprintln!("safety test: {:.1} s", started.elapsed().as_secs_f64());
}

/// Puts at `path` a plugin that runs `real` for every command but DEL,
/// which it answers with a CNI error (code 11), as a plugin that cannot
/// reach its state would.
fn write_failing_del(path: &Path, real: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let script = format!(
        "#!/bin/sh\n\
         if [ \"$CNI_COMMAND\" = DEL ]; then\n\
         echo '{{\"cniVersion\":\"1.1.0\",\"code\":11,\"msg\":\"cnitest: DEL refused\"}}'\n\
         exit 1\n\
         fi\n\
         exec {} \"$@\"\n",
        real.display()
    );
    std::fs::write(path, script).expect("write the wrapper");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// Kills a sandbox's process (its pid from containerd's verbose status):
/// containerd then lists it as not ready, with its network still set up.
fn kill_sandbox_process(node: &Node, id: &str) {
    let status = node
        .client()
        .pod_sandbox_status(id)
        .expect("PodSandboxStatus");
    let pid = status
        .verbose_info
        .as_ref()
        .and_then(|info| info["pid"].as_i64())
        .expect("the sandbox's pid in containerd's verbose info");
    let pid = i32::try_from(pid).expect("pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the sandbox");
}

fn wait_not_ready(node: &Node, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = node
            .client()
            .pod_sandbox_status(id)
            .expect("PodSandboxStatus");
        if status.state == cri::PodSandboxState::SandboxNotready {
            return;
        }
        assert!(Instant::now() < deadline, "sandbox {id} still ready");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `cni-node run` ended by PID when the test ends, also on failure.
struct Daemon {
    child: std::process::Child,
    log: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Node {
    /// `cni-node run` in containerd's namespaces (nsenter execs it: the
    /// child's PID is the agent's), metrics on the node's own 127.0.0.1.
    fn start_daemon(&self, port: u16) -> Daemon {
        let pid = self.containerd.pid().expect("containerd runs");
        let log = self._work.path().join("cni-node.log");
        let file = std::fs::File::create(&log).expect("daemon log");
        let child = Command::new("nsenter")
            .arg(format!("--target={pid}"))
            .args(["--mount", "--net", "--"])
            .arg(env!("CARGO_BIN_EXE_cni-node"))
            .args(["run", "--interval", "200ms", "--metrics-port"])
            .arg(port.to_string())
            .arg("--cri-endpoint")
            .arg(format!("unix://{}", self.containerd.socket().display()))
            .arg("--conf-dir")
            .arg(&self.conf_dir)
            .arg("--bin-dir")
            .arg(&self.bin_dir)
            .stdout(file.try_clone().expect("log"))
            .stderr(file)
            .spawn()
            .expect("start cni-node run");
        Daemon { child, log }
    }

    fn metrics(&self, port: u16) -> String {
        let url = format!("http://127.0.0.1:{port}/metrics");
        let out = self
            .netns
            .exec("curl", &["--silent", "--max-time", "10", &url]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits (up to a minute) until the metrics hold every line of `want`.
    fn wait_metrics(&self, port: u16, want: &[String], daemon: &Daemon) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let text = self.metrics(port);
            if want.iter().all(|w| text.lines().any(|l| l == w)) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "metrics never held {want:#?}; last:\n{text}\nagent log:\n{}",
                daemon.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// The daemon: its passes release a crashed attachment, STATUS follows a
/// plugin taken out of the folder and put back (one log line per
/// change), and the metrics say so, with the range's use.
#[test]
fn the_daemon_collects_reports_status_changes_and_serves_metrics() {
    if skip_unless_installed("the_daemon_collects_reports_status_changes_and_serves_metrics") {
        return;
    }
    let started = Instant::now();
    let node = Node::start("gc3", "cnigc3", "10.244.83");
    let live = node.run_pod("live", 30101);
    let orphan = node.orphan("cnitest-orphan-e", 30102);
    node.age_everything();
    let port = 9793;
    let daemon = node.start_daemon(port);
    let net = &node.network;
    node.wait_metrics(
        port,
        &[
            format!("cni_node_released_attachments_total{{network=\"{net}\",plugin=\"bridge\"}} 1"),
            format!("cni_node_released_attachments_total{{network=\"{net}\",plugin=\"tuning\"}} 1"),
            format!("cni_node_network_ready{{network=\"{net}\"}} 1"),
            format!("cni_node_network_status_code{{network=\"{net}\"}} 0"),
            // .1 (gateway) to .254: 253, the live pod's lease used.
            format!(
                "cni_node_host_local_addresses{{network=\"{net}\",range=\"10.244.83.0/24\",state=\"used\"}} 1"
            ),
            format!(
                "cni_node_host_local_addresses{{network=\"{net}\",range=\"10.244.83.0/24\",state=\"free\"}} 252"
            ),
        ],
        &daemon,
    );
    assert_eq!(
        node.snapshot().naming(&orphan.container_id, &orphan.ip),
        Vec::<String>::new()
    );
    assert!(daemon.log().contains(&released_line(net, &orphan)));

    // bandwidth out of the folder: not ready, no code (nothing answered).
    let plugin = node.bin_dir.join("bandwidth");
    let parked = node.bin_dir.join("bandwidth.parked");
    std::fs::rename(&plugin, &parked).expect("park bandwidth");
    node.wait_metrics(
        port,
        &[
            format!("cni_node_network_ready{{network=\"{net}\"}} 0"),
            format!("cni_node_network_status_code{{network=\"{net}\"}} -1"),
        ],
        &daemon,
    );
    std::fs::rename(&parked, &plugin).expect("bandwidth back");
    let text = node.wait_metrics(
        port,
        &[format!("cni_node_network_ready{{network=\"{net}\"}} 1")],
        &daemon,
    );
    assert!(text
        .lines()
        .any(|l| l.starts_with("cni_node_gc_passes_total{outcome=\"ran\"} ")));

    let log = daemon.log();
    let changes: Vec<&str> = log
        .lines()
        .filter(|l| {
            l.contains(&format!("network {net}: ready"))
                || l.contains(&format!("network {net}: not ready"))
        })
        .map(|l| l.split_once("] ").map_or(l, |(_, rest)| rest))
        .collect();
    assert_eq!(changes.len(), 3, "one line per change: {changes:#?}");
    assert_eq!(changes[0], format!("network {net}: ready"));
    assert!(
        changes[1].starts_with(&format!(
            "network {net}: not ready: plugin type=\"bandwidth\""
        )),
        "{}",
        changes[1]
    );
    assert_eq!(changes[2], format!("network {net}: ready"));
    node.assert_pod_serves(&live, 30101);

    // SIGTERM (the pod's termination): exit status 0.
    let mut daemon = daemon;
    let pid = nix::unistd::Pid::from_raw(i32::try_from(daemon.child.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = daemon.child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "cni-node run still runs after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        status.success(),
        "exit on SIGTERM: {status}; log:\n{}",
        daemon.log()
    );
    eprintln!("daemon test: {:.1} s", started.elapsed().as_secs_f64());
}
