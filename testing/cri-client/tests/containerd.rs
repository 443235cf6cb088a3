//! Our plugins under Debian's containerd (1.6), driven over CRI as kubelet
//! drives it: a bridge + portmap conflist of the test's own, containerd's
//! own loopback network, pods reachable on their IP and host port,
//! nothing left after StopPodSandbox and RemovePodSandbox, and a churn of
//! pods by several workers with containerd SIGKILLed and restarted in the
//! middle.
//!
//! containerd runs in a network namespace the test made (the "host" of
//! the pod network), with a private root, state dir, socket and config,
//! and the sandbox image is an OCI archive the test writes. Skipped, with
//! a SKIPPED line, only when containerd (or runc, ctr, busybox-static) is
//! not installed; CI installs them (.ci/install-deps).
//!
//! `CNI_CRI_PLUGIN_DIR` names a folder of already installed plugins to use
//! instead of the workspace's own (for example one the installer filled).

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use conformance::testnet::{self, workspace_plugin, TestNetns};
use cri_client::oci_image::SandboxImage;
use cri_client::{cri, Containerd, ContainerdConfig, CriClient, PodSpec, PortMapping, Release};
use serde_json::json;

const SANDBOX_IMAGE: &str = "cnitest.local/sandbox:httpd";
const BUSYBOX: &str = "/bin/busybox";
const POD_HTTP_PORT: u16 = 8080;
const NETWORK_NAME: &str = "cnitest-cri";
/// The node's veth to the outside namespace (not a pod's).
const NODE_LAN_LINK: &str = "node0";
/// The node's address on its link to the outside namespace (TEST-NET-2).
const NODE_LAN_ADDR: &str = "198.51.100.1";
/// The plugins containerd execs for the conflist below, plus its own
/// loopback network.
const PLUGINS: [&str; 4] = ["loopback", "bridge", "host-local", "portmap"];
/// How long the churn workers wait for a restarted containerd.
const RECONNECT_TIMEOUT: Duration = Duration::from_secs(120);

/// What the tests need that may be missing on a developer machine.
const PROGRAMS: [(&str, &str); 4] = [
    ("containerd", "--version"),
    ("ctr", "--version"),
    ("runc", "--version"),
    ("curl", "--version"),
];
const FILES: [(&str, &str); 1] = [("busybox-static", BUSYBOX)];

fn skip_unless_installed(test: &str) -> bool {
    testnet::skip_unless_installed(
        test,
        &PROGRAMS,
        &FILES,
        "apt-get install containerd runc busybox-static curl",
    )
}

/// What a [`CriNode`] runs.
struct NodeSpec<'a> {
    tag: &'a str,
    bridge: &'a str,
    subnet_base: &'a str,
    release: Release,
    /// The conflist's `cniVersion`: containerd 2 calls STATUS only for
    /// 1.1.0 (go-cni through libcni).
    cni_version: &'a str,
    /// host-local's range holds this many pod addresses (`.10` on) instead
    /// of the whole /24.
    pod_addresses: Option<u8>,
}

/// One containerd with our plugins in a namespace of the test's.
struct CriNode {
    // Dropped in this order: containerd first (it removes what pods are
    // left and stops by PID), then the namespace, then the folder.
    containerd: Containerd,
    netns: TestNetns,
    /// A machine on the node's network: a namespace joined to the node by
    /// a veth, whose traffic to a host port goes through PREROUTING (the
    /// node's own through OUTPUT).
    outside: TestNetns,
    /// host-local's lease folder for the network.
    lease_dir: PathBuf,
    /// One line per plugin exec: `COMMAND plugin ifname containerID netns
    /// CNI_ARGS`.
    call_log: PathBuf,
    /// containerd's CNI `bin_dir` (wrappers around our binaries).
    plugin_dir: PathBuf,
    /// The gateway address on the test's bridge.
    gateway: String,
    subnet: String,
    bridge: String,
    _work: tempfile::TempDir,
}

impl CriNode {
    /// `subnet_base` is a /24 such as `10.244.71` (not 10.88.0.0/16, the
    /// default containerd example network).
    fn start(tag: &str, bridge: &str, subnet_base: &str) -> CriNode {
        CriNode::start_with(NodeSpec {
            tag,
            bridge,
            subnet_base,
            release: Release::Installed,
            cni_version: "1.0.0",
            pod_addresses: None,
        })
    }

    fn start_with(spec: NodeSpec) -> CriNode {
        let NodeSpec {
            tag,
            bridge,
            subnet_base,
            ..
        } = spec;
        let work = tempfile::Builder::new()
            .prefix("cnitest-cri-")
            .tempdir()
            .expect("temp dir");
        let netns = TestNetns::new(tag);
        let outside = TestNetns::new(&format!("{tag}out"));
        netns.ip(&[
            "link",
            "add",
            NODE_LAN_LINK,
            "type",
            "veth",
            "peer",
            "name",
            "lan0",
            "netns",
            outside.name(),
        ]);
        netns.ip(&[
            "addr",
            "add",
            &format!("{NODE_LAN_ADDR}/24"),
            "dev",
            NODE_LAN_LINK,
        ]);
        netns.ip(&["link", "set", NODE_LAN_LINK, "up"]);
        outside.ip(&["addr", "add", "198.51.100.2/24", "dev", "lan0"]);
        outside.ip(&["link", "set", "lan0", "up"]);
        let plugin_dir = work.path().join("bin");
        let call_log = work.path().join("plugin-calls.log");
        logging_plugin_dir(&plugin_dir, &call_log);

        let conf_dir = work.path().join("net.d");
        std::fs::create_dir_all(&conf_dir).expect("conf dir");
        let ipam_dir = work.path().join("ipam");
        let subnet = format!("{subnet_base}.0/24");
        let mut range = json!({ "subnet": subnet });
        if let Some(count) = spec.pod_addresses {
            range["rangeStart"] = json!(format!("{subnet_base}.10"));
            range["rangeEnd"] = json!(format!("{subnet_base}.{}", 9 + count));
        }
        let conflist = json!({
            "cniVersion": spec.cni_version,
            "name": NETWORK_NAME,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": bridge,
                    "isGateway": true,
                    "ipMasq": true,
                    "hairpinMode": true,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[range]],
                        "routes": [{ "dst": "0.0.0.0/0" }],
                        "dataDir": ipam_dir,
                    }
                },
                { "type": "portmap", "capabilities": { "portMappings": true } }
            ]
        });
        std::fs::write(
            conf_dir.join("10-cnitest-cri.conflist"),
            serde_json::to_vec_pretty(&conflist).expect("conflist"),
        )
        .expect("write conflist");

        let containerd = Containerd::start_release(
            ContainerdConfig {
                netns: netns.path(),
                work_dir: work.path().join("containerd"),
                plugin_dir: plugin_dir.clone(),
                conf_dir,
                sandbox_image: SANDBOX_IMAGE.to_string(),
            },
            spec.release,
        )
        .unwrap_or_else(|e| panic!("start containerd: {e}"));

        containerd
            .import_sandbox_image(&SandboxImage {
                reference: SANDBOX_IMAGE,
                busybox: Path::new(BUSYBOX),
                http_port: POD_HTTP_PORT,
                index_html: "cnitest pod\n",
            })
            .unwrap_or_else(|e| panic!("import the sandbox image: {e}"));

        CriNode {
            containerd,
            netns,
            outside,
            lease_dir: ipam_dir.join(NETWORK_NAME),
            call_log,
            plugin_dir,
            gateway: format!("{subnet_base}.1"),
            subnet,
            bridge: bridge.to_string(),
            _work: work,
        }
    }

    fn client(&self) -> CriClient {
        self.containerd
            .client()
            .unwrap_or_else(|e| panic!("CRI client: {e}"))
    }

    fn calls(&self) -> Vec<PluginExec> {
        std::fs::read_to_string(&self.call_log)
            .unwrap_or_default()
            .lines()
            .filter_map(PluginExec::parse)
            .collect()
    }

    /// `curl` from the fake host namespace; the body on success. (Not
    /// busybox's wget: Debian's static busybox 1.35 segfaults in it here.)
    fn http_get(&self, addr: &str, port: u16) -> Result<String, String> {
        self.netns.http_get(addr, port)
    }
}

impl CriNode {
    /// Lease files host-local still holds: those named by an IP address
    /// (its bookkeeping files, such as the last reserved IP, aside).
    fn leases(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.lease_dir) else {
            return Vec::new();
        };
        entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|name| name.parse::<std::net::IpAddr>().is_ok())
            .collect()
    }

    /// The pods' host-side veths.
    fn veths(&self) -> Vec<String> {
        self.netns
            .ip_json(&["link", "show", "type", "veth"])
            .as_array()
            .map(|links| {
                links
                    .iter()
                    .filter_map(|l| l["ifname"].as_str().map(str::to_string))
                    .filter(|name| name != NODE_LAN_LINK)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The host-side veths once the kernel has destroyed the pods' network
    /// namespaces. A pod whose namespace the runtime removed without a DEL
    /// reaching the chain (containerd 2.1's failed sandbox) loses its veth
    /// pair only when the kernel tears that namespace down, and it does so
    /// asynchronously (a workqueue, after RCU grace periods): in a CI run
    /// on a loaded two-core machine the veth was still listed right after
    /// the agent's pass. A veth our DEL should have removed never goes by
    /// itself, so waiting ([`testnet::KERNEL_CLEANUP`], returning as soon
    /// as none is left) still catches a leak.
    fn veths_once_namespaces_are_gone(&self) -> Vec<String> {
        testnet::kernel_settles(|| self.veths().is_empty());
        self.veths()
    }

    /// The namespace's iptables (both families) and nftables rules, as text.
    fn firewall_rules(&self) -> String {
        let mut text = String::new();
        for (program, args) in [
            ("iptables-save", &[][..]),
            ("ip6tables-save", &[][..]),
            ("nft", &["list", "ruleset"][..]),
        ] {
            let out = self.netns.exec(program, args);
            if out.status.success() {
                text.push_str(&String::from_utf8_lossy(&out.stdout));
            }
        }
        text
    }

    /// One `cni-node gc --once` pass (the workspace's node agent) as it runs
    /// on a node: in containerd's network and mount namespaces (its /var/lib
    /// holds go-cni's cache), on containerd's socket, conflist folder and
    /// plugin folder, releasing attachments of any age.
    fn collect_garbage(&self) {
        let containerd = &self.containerd;
        let config = containerd.config();
        let out = Command::new("nsenter")
            .arg(format!("--target={}", containerd.holder_pid()))
            .args(["--mount", "--net"])
            .arg(workspace_plugin("cni-node"))
            .args(["gc", "--once", "--min-age", "0s", "--cri-endpoint"])
            .arg(format!("unix://{}", containerd.socket().display()))
            .arg("--conf-dir")
            .arg(&config.conf_dir)
            .arg("--bin-dir")
            .arg(&self.plugin_dir)
            .output()
            .expect("run cni-node");
        eprintln!(
            "cni-node gc --once: {}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "cni-node gc --once failed");
    }

    /// Asserts that nothing of the given pods is left: no lease, no veth,
    /// no firewall rule naming their sandbox ID or IP, no policy rule
    /// beyond the kernel's three defaults, no sandbox in containerd.
    fn assert_nothing_left(&self, ids: &BTreeSet<String>, ips: &BTreeSet<String>) {
        assert_eq!(
            self.leases(),
            Vec::<String>::new(),
            "host-local leases left"
        );
        assert_eq!(
            self.veths_once_namespaces_are_gone(),
            Vec::<String>::new(),
            "veths left on the host side"
        );
        let rules = self.firewall_rules();
        for needle in ids.iter().chain(ips.iter()) {
            let hits: Vec<&str> = rules
                .lines()
                .filter(|line| testnet::rule_names(line, needle))
                .collect();
            assert!(
                hits.is_empty(),
                "firewall rules left for {needle}: {hits:#?}"
            );
        }
        let policy_rules = self.netns.ip_json(&["rule", "show"]);
        assert_eq!(
            policy_rules.as_array().map(Vec::len),
            Some(3),
            "policy routing rules beyond the defaults: {policy_rules}"
        );
        let left = self
            .client()
            .list_pod_sandboxes(HashMap::new())
            .unwrap_or_else(|e| panic!("ListPodSandbox: {e}"));
        assert!(left.is_empty(), "sandboxes left in containerd: {left:#?}");
    }
}

/// What a SIGKILLed containerd 1.6 left running after every sandbox was
/// removed.
struct Orphans {
    shims: usize,
    /// Sandbox processes under those shims (each holding a pod network
    /// namespace that must hold nothing of ours but `lo`).
    sandbox_processes: usize,
}

impl CriNode {
    /// Stops containerd by PID (SIGTERM) once the shims have gone with
    /// their sandboxes, and asserts that it exited cleanly.
    ///
    /// With `orphans_expected` (after a SIGKILL), shims may stay: containerd
    /// 1.6 starts a sandbox's shim and task before it records them, so a
    /// RunPodSandbox cut short can leave a shim, and sometimes its sandbox
    /// process, that the restarted containerd neither lists nor stops (the
    /// sandbox record itself is listed and removed cleanly). They are
    /// counted, their network namespaces must hold no interface but `lo`
    /// (our DEL removed the pod's), and the harness ends them by PID.
    fn stop_cleanly(&mut self, orphans_expected: bool) -> Orphans {
        // Shims exit within a second of their sandbox's removal; orphans
        // never do, so with orphans expected the wait is short.
        let wait = if orphans_expected { 3 } else { 10 };
        let deadline = Instant::now() + Duration::from_secs(wait);
        let orphans = loop {
            let shims = self.containerd.shims();
            if shims.is_empty() || (orphans_expected && Instant::now() >= deadline) {
                break self.check_orphans(&shims);
            }
            assert!(
                Instant::now() < deadline,
                "shims still running after every sandbox was removed: {shims:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        let status = self.containerd.stop().expect("stop containerd");
        assert!(
            status.is_some_and(|s| s.success()),
            "containerd's exit on SIGTERM: {status:?}; its log:\n{}",
            self.containerd.log()
        );
        orphans
    }

    fn check_orphans(&self, shims: &[i32]) -> Orphans {
        let mut orphans = Orphans {
            shims: shims.len(),
            sandbox_processes: 0,
        };
        for &shim in shims {
            for child in children(shim) {
                orphans.sandbox_processes += 1;
                let out = Command::new("nsenter")
                    .arg(format!("--net=/proc/{child}/ns/net"))
                    .args(["ip", "-j", "link", "show"])
                    .output()
                    .expect("nsenter ip link show");
                let links: serde_json::Value =
                    serde_json::from_slice(&out.stdout).unwrap_or_default();
                let names: Vec<&str> = links
                    .as_array()
                    .map(|a| a.iter().filter_map(|l| l["ifname"].as_str()).collect())
                    .unwrap_or_default();
                assert_eq!(
                    names,
                    ["lo"],
                    "orphaned sandbox process {child} (shim {shim}) still has a pod network"
                );
            }
        }
        orphans
    }
}

/// The child processes of a process.
fn children(pid: i32) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// A folder with one small wrapper per plugin: it appends the call to
/// `log` and execs our binary, so the test sees what containerd ran and in
/// which order. The binaries are the workspace's own (built on demand), or
/// those in `CNI_CRI_PLUGIN_DIR`.
fn logging_plugin_dir(dir: &Path, log: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).expect("plugin dir");
    let installed = std::env::var_os("CNI_CRI_PLUGIN_DIR").map(PathBuf::from);
    for name in PLUGINS {
        let real = match &installed {
            Some(folder) => {
                let path = folder.join(name);
                assert!(
                    path.is_file(),
                    "CNI_CRI_PLUGIN_DIR has no {name}: {}",
                    path.display()
                );
                path
            }
            None => workspace_plugin(name),
        };
        // The runtime's environment names the tests' node policy, which
        // allows the scratch lease folder (host-local's dataDir is
        // confined to the state folders, issue 28).
        let script = format!(
            "#!/bin/sh\nprintf '%s %s %s %s %s %s\\n' \"$CNI_COMMAND\" {name} \"${{CNI_IFNAME:--}}\" \"${{CNI_CONTAINERID:--}}\" \"${{CNI_NETNS:--}}\" \"${{CNI_ARGS:--}}\" >> '{log}'\nexport {policy_var}='{policy}'\nexec '{real}' \"$@\"\n",
            log = log.display(),
            real = real.display(),
            policy_var = libcni::confine::POLICY_ENV,
            policy = conformance::testnet::scratch_policy().display(),
        );
        let path = dir.join(name);
        std::fs::write(&path, script).expect("write plugin wrapper");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .expect("chmod plugin wrapper");
    }
}

/// One line of the call log.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PluginExec {
    command: String,
    plugin: String,
    ifname: String,
    container_id: String,
    netns: String,
    /// `CNI_ARGS` (`;`-separated, no spaces).
    args: String,
}

impl PluginExec {
    fn parse(line: &str) -> Option<PluginExec> {
        let mut f = line.split(' ');
        Some(PluginExec {
            command: f.next()?.to_string(),
            plugin: f.next()?.to_string(),
            ifname: f.next()?.to_string(),
            container_id: f.next()?.to_string(),
            netns: f.next()?.to_string(),
            args: f.next()?.to_string(),
        })
    }
}

fn pod(name: &str, host_port: u16, attempt: u32) -> PodSpec {
    PodSpec {
        name: name.to_string(),
        namespace: "cnitest".to_string(),
        uid: format!("cnitest-uid-{name}"),
        attempt,
        port_mappings: vec![PortMapping {
            protocol: cri::Protocol::Tcp,
            container_port: POD_HTTP_PORT,
            host_port,
            host_ip: String::new(),
        }],
        labels: HashMap::from([("cnitest.pod".to_string(), name.to_string())]),
        log_directory: PathBuf::new(),
    }
}

/// One pod through its whole life, checked at every step.
#[test]
fn containerd_runs_a_pod_on_our_plugins() {
    if skip_unless_installed("containerd_runs_a_pod_on_our_plugins") {
        return;
    }
    single_pod(CriNode::start("cri1", "cnicri1", "10.244.71"));
}

/// The same pod life under containerd 2 (Debian unstable's 2.1, unpacked by
/// .ci/install-deps), with a 1.1.0 conflist: the calls and cleanup kubelet's
/// runtime makes there are the ones 1.6 makes, as far as our plugins see.
#[test]
fn containerd2_runs_a_pod_on_our_plugins() {
    if skip_unless_installed("containerd2_runs_a_pod_on_our_plugins")
        || skip_unless_containerd2("containerd2_runs_a_pod_on_our_plugins")
    {
        return;
    }
    single_pod(CriNode::start_with(NodeSpec {
        tag: "cri3",
        bridge: "cnicri3",
        subnet_base: "10.244.73",
        release: Release::containerd2(),
        cni_version: "1.1.0",
        pod_addresses: None,
    }));
}

/// containerd 2 sets the CRI NetworkReady condition (what kubelet reports
/// as the node's network readiness) from our plugins' STATUS: host-local
/// answers STATUS with code 6 while its range has no free address, so a
/// range of one address taken by a pod makes the node not ready with
/// host-local's message, and ready again once the pod is gone; a plugin
/// missing from bin_dir makes it not ready too, naming the plugin.
#[test]
fn containerd2_network_ready_follows_our_status() {
    let test = "containerd2_network_ready_follows_our_status";
    if skip_unless_installed(test) || skip_unless_containerd2(test) {
        return;
    }
    let node = CriNode::start_with(NodeSpec {
        tag: "cri4",
        bridge: "cnicri4",
        subnet_base: "10.244.74",
        release: Release::containerd2(),
        cni_version: "1.1.0",
        pod_addresses: Some(1),
    });
    let mut client = node.client();
    let ready = |client: &mut CriClient| client.network_condition().expect("CRI Status");

    let condition = ready(&mut client);
    assert!(condition.status, "ready before any pod: {condition:?}");

    let id = client
        .run_pod_sandbox(&pod("only", 30081, 0))
        .unwrap_or_else(|e| {
            panic!(
                "RunPodSandbox: {e}\ncontainerd log:\n{}",
                node.containerd.log()
            )
        });
    let condition = ready(&mut client);
    assert!(
        !condition.status,
        "not ready with the range full: {condition:?}"
    );
    assert!(
        condition
            .message
            .contains("no IP addresses available in range set 0"),
        "NetworkReady's message is host-local's STATUS error: {condition:?}"
    );
    let statuses = node
        .calls()
        .into_iter()
        .filter(|c| c.command == "STATUS" && c.plugin == "host-local")
        .count();
    assert!(
        statuses >= 1,
        "containerd ran host-local's STATUS: {:?}",
        node.calls()
    );

    client.stop_pod_sandbox(&id).expect("StopPodSandbox");
    client.remove_pod_sandbox(&id).expect("RemovePodSandbox");
    let condition = ready(&mut client);
    assert!(
        condition.status,
        "ready again once the address is free: {condition:?}"
    );

    let portmap = node.plugin_dir.join("portmap");
    let parked = node.plugin_dir.join("portmap.parked");
    std::fs::rename(&portmap, &parked).expect("park portmap");
    let missing = ready(&mut client);
    std::fs::rename(&parked, &portmap).expect("restore portmap");
    assert!(!missing.status, "not ready without portmap: {missing:?}");
    assert!(
        missing.message.contains("portmap"),
        "the message names the missing plugin: {missing:?}"
    );
    let condition = ready(&mut client);
    assert!(condition.status, "ready with portmap back: {condition:?}");
}

fn skip_unless_containerd2(test: &str) -> bool {
    if Release::containerd2().is_present() {
        return false;
    }
    libcni::test_skip::skip(
        test,
        &format!(
            "containerd 2 is not unpacked in {} (.ci/install-deps fetches it)",
            cri_client::CONTAINERD2_ROOT
        ),
    );
    true
}

/// One pod's life on a node: its calls, addresses, traffic, and nothing
/// left after Stop and Remove; then a pod that fails without loopback.
fn single_pod(mut node: CriNode) {
    let started = Instant::now();
    let mut client = node.client();
    let version = client.version().expect("CRI Version");
    eprintln!(
        "{} {} (CRI {})",
        version.runtime_name, version.runtime_version, version.runtime_api_version
    );

    let host_port = 30080;
    let id = client
        .run_pod_sandbox(&pod("web", host_port, 0))
        .unwrap_or_else(|e| {
            panic!(
                "RunPodSandbox: {e}\ncontainerd log:\n{}",
                node.containerd.log()
            )
        });
    let status = client.pod_sandbox_status(&id).expect("PodSandboxStatus");
    assert_eq!(status.state, cri::PodSandboxState::SandboxReady);
    assert_eq!(status.metadata.name, "web");
    assert_eq!(status.metadata.namespace, "cnitest");
    let ip = status.ip.clone();
    assert!(
        ip.starts_with(node.subnet.trim_end_matches("0/24")) && ip != node.gateway,
        "the pod's IP {ip:?} should come from the conflist's subnet {}",
        node.subnet
    );

    // containerd's own loopback network (ifname lo) and our chain, in the
    // conflist's order. containerd 1.6.20 (go-cni) sets its networks up
    // concurrently, so loopback's place among the chain's calls varies.
    let adds: Vec<PluginExec> = node
        .calls()
        .into_iter()
        .filter(|c| c.command == "ADD" && c.container_id == id)
        .collect();
    // kubelet's pod identity reaches every plugin in CNI_ARGS.
    for call in &adds {
        let args: BTreeSet<&str> = call.args.split(';').collect();
        for expected in [
            "K8S_POD_NAME=web",
            "K8S_POD_NAMESPACE=cnitest",
            "K8S_POD_UID=cnitest-uid-web",
            &format!("K8S_POD_INFRA_CONTAINER_ID={id}"),
        ] {
            assert!(args.contains(expected), "{expected} missing from {call:?}");
        }
    }
    let loopback: Vec<&PluginExec> = adds.iter().filter(|c| c.plugin == "loopback").collect();
    assert_eq!(loopback.len(), 1, "one loopback ADD: {adds:#?}");
    assert_eq!(loopback[0].ifname, "lo");
    let chain: Vec<(&str, &str)> = adds
        .iter()
        .filter(|c| c.plugin != "loopback")
        .map(|c| (c.plugin.as_str(), c.ifname.as_str()))
        .collect();
    assert_eq!(
        chain,
        [
            ("bridge", "eth0"),
            ("host-local", "eth0"),
            ("portmap", "eth0")
        ],
        "the chain's ADD calls, in order"
    );
    // ... and it left the pod's lo up with 127.0.0.1.
    let pid = status
        .verbose_info
        .as_ref()
        .and_then(|info| info["pid"].as_u64())
        .unwrap_or_else(|| panic!("no pid in the verbose status: {:?}", status.verbose_info));
    let lo = Command::new("nsenter")
        .arg(format!("--net=/proc/{pid}/ns/net"))
        .args(["ip", "-j", "addr", "show", "lo"])
        .output()
        .expect("nsenter ip addr show lo");
    let lo: serde_json::Value = serde_json::from_slice(&lo.stdout).expect("ip -j output");
    assert!(
        lo[0]["flags"]
            .as_array()
            .is_some_and(|f| f.iter().any(|x| x == "UP")),
        "pod lo not up: {lo}"
    );
    assert!(
        lo[0]["addr_info"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x["local"] == "127.0.0.1")),
        "pod lo without 127.0.0.1: {lo}"
    );

    // The pod on the host side: one veth on the test's bridge, one lease.
    let veths = node.veths();
    assert_eq!(veths.len(), 1, "one veth for one pod: {veths:?}");
    let master = node.netns.ip_json(&["link", "show", &veths[0]]);
    assert_eq!(master[0]["master"], node.bridge.as_str());
    assert_eq!(node.leases(), vec![ip.clone()]);

    // Reachable on its IP, and on its host port through portmap's DNAT.
    assert!(node.netns.ping(&ip), "ping {ip} from the host namespace");
    // The sandbox is ready once its process started; httpd may take a
    // moment more to listen (kubelet would wait for a readiness probe).
    let listening = Instant::now() + Duration::from_secs(10);
    let mut body = node.http_get(&ip, POD_HTTP_PORT);
    while body.is_err() && Instant::now() < listening {
        std::thread::sleep(Duration::from_millis(100));
        body = node.http_get(&ip, POD_HTTP_PORT);
    }
    assert_eq!(body.as_deref(), Ok("cnitest pod\n"));
    assert_eq!(
        node.http_get(&node.gateway, host_port).as_deref(),
        Ok("cnitest pod\n"),
        "the pod through its hostPort, from the node itself"
    );
    assert_eq!(
        node.outside.http_get(NODE_LAN_ADDR, host_port).as_deref(),
        Ok("cnitest pod\n"),
        "the pod through its hostPort, from another machine on the node's network"
    );

    client.stop_pod_sandbox(&id).expect("StopPodSandbox");
    // Stopped: the network is gone already.
    assert_eq!(
        node.leases(),
        Vec::<String>::new(),
        "lease after StopPodSandbox"
    );
    assert_eq!(
        node.veths(),
        Vec::<String>::new(),
        "veth after StopPodSandbox"
    );
    assert!(
        node.http_get(&node.gateway, host_port).is_err(),
        "host port still answers after StopPodSandbox"
    );
    assert!(
        node.outside.http_get(NODE_LAN_ADDR, host_port).is_err(),
        "host port still answers the outside after StopPodSandbox"
    );
    client.remove_pod_sandbox(&id).expect("RemovePodSandbox");

    let dels: Vec<(String, bool)> = node
        .calls()
        .into_iter()
        .filter(|c| c.command == "DEL" && c.container_id == id && c.plugin != "host-local")
        .map(|c| (c.plugin, c.netns != "-"))
        .collect();
    eprintln!("DEL calls (plugin, with a netns): {dels:?}");
    assert!(
        dels.iter().any(|(p, _)| p == "bridge") && dels.iter().any(|(p, _)| p == "portmap"),
        "containerd sent no DEL to the chain: {dels:?}"
    );

    node.assert_nothing_left(&BTreeSet::from([id.clone()]), &BTreeSet::from([ip]));

    // Without loopback in bin_dir containerd fails the pod. Its cleanup
    // DELs loopback first, fails there, and keeps the sandbox (state
    // SANDBOX_NOTREADY, ours set up) for a later StopPodSandbox, as kubelet
    // sends: with loopback back, that removes everything.
    let loopback = node.plugin_dir.join("loopback");
    let parked = node.plugin_dir.join("loopback.parked");
    std::fs::rename(&loopback, &parked).expect("park loopback");
    let failed = client.run_pod_sandbox(&pod("no-loopback", host_port, 0));
    std::fs::rename(&parked, &loopback).expect("restore loopback");
    let err = failed.expect_err("RunPodSandbox without loopback in bin_dir");
    assert!(
        err.to_string().contains("loopback"),
        "error should name loopback: {err}"
    );
    let kept = client
        .list_pod_sandboxes(HashMap::new())
        .expect("ListPodSandbox");
    let ids: BTreeSet<String> = node
        .calls()
        .into_iter()
        .filter(|c| c.command == "ADD" && c.plugin == "bridge")
        .map(|c| c.container_id)
        .collect();
    assert_eq!(ids.len(), 2, "a second sandbox reached our bridge");
    if version.runtime_version.starts_with("1.") {
        // containerd 1.6 keeps the failed sandbox (SANDBOX_NOTREADY) for
        // kubelet's StopPodSandbox.
        assert_eq!(
            kept.len(),
            1,
            "the failed sandbox is kept for cleanup: {kept:#?}"
        );
        assert_ne!(kept[0].state, cri::PodSandboxState::SandboxReady as i32);
        assert!(ids.contains(&kept[0].id));
        client
            .stop_pod_sandbox(&kept[0].id)
            .expect("StopPodSandbox of the failed sandbox");
        client
            .remove_pod_sandbox(&kept[0].id)
            .expect("RemovePodSandbox of the failed sandbox");
    } else {
        // containerd 2.1 removes the failed sandbox at once, but its
        // teardown stopped at the missing loopback: no DEL reached our chain
        // (measured: the ADDs of bridge, host-local and portmap, then
        // nothing), so the pod's lease and rules stay with no sandbox left
        // to retry. That is the leak the node agent exists for: one
        // `cni-node gc --once` pass releases it.
        assert_eq!(
            kept.len(),
            0,
            "containerd 2 keeps no failed sandbox: {kept:#?}"
        );
        let failed: Vec<PluginExec> = node
            .calls()
            .into_iter()
            .filter(|c| c.command == "DEL" && c.container_id != id)
            .collect();
        assert_eq!(failed.len(), 0, "a DEL reached the chain: {failed:#?}");
        assert_eq!(node.leases().len(), 1, "the failed pod's lease is left");
        node.collect_garbage();
    }
    node.assert_nothing_left(&ids, &BTreeSet::new());
    node.stop_cleanly(false);
    eprintln!("single pod: {:.1} s", started.elapsed().as_secs_f64());
}

/// What one churn worker saw.
#[derive(Default)]
struct ChurnRecord {
    ids: BTreeSet<String>,
    ips: BTreeSet<String>,
    failures: Vec<String>,
    /// Calls that met a containerd that was down and were retried.
    retried: Vec<&'static str>,
    /// Sandboxes of an interrupted RunPodSandbox, found by label and
    /// removed before the next attempt.
    stale: usize,
    /// RunPodSandbox failures of containerd's own after the restart,
    /// retried.
    containerd_errors: Vec<String>,
}

/// 50 pods created and removed by 4 workers; containerd is SIGKILLed and
/// restarted while they run. Every pod must come up with an IP and answer
/// ping, every call must succeed (retried across the restart, as kubelet
/// retries), and in the end nothing may be left.
#[test]
fn containerd_churn_survives_a_restart() {
    if skip_unless_installed("containerd_churn_survives_a_restart") {
        return;
    }
    const PODS: usize = 50;
    const WORKERS: usize = 4;
    const KILL_AFTER: usize = 20;
    let started = Instant::now();
    let mut node = CriNode::start("cri2", "cnicri2", "10.244.72");
    let socket = node.containerd.socket();
    let netns_name = node.netns.name().to_string();

    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let killed = Arc::new(AtomicBool::new(false));
    let record = Arc::new(Mutex::new(ChurnRecord::default()));
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (next, done, record) = (next.clone(), done.clone(), record.clone());
            let killed = killed.clone();
            let (socket, netns_name) = (socket.clone(), netns_name.clone());
            std::thread::spawn(move || {
                let mut client = reconnect(&socket);
                loop {
                    let n = next.fetch_add(1, Ordering::SeqCst);
                    if n >= PODS {
                        break;
                    }
                    let outcome = pod_life(&mut client, &socket, &netns_name, &killed, n);
                    let mut r = record.lock().unwrap_or_else(|p| p.into_inner());
                    match outcome {
                        Ok(life) => {
                            r.ids.extend(life.ids);
                            r.ips.insert(life.ip);
                            r.retried.extend(life.retried);
                            r.stale += life.stale;
                            r.containerd_errors.extend(life.containerd_errors);
                        }
                        Err(e) => r.failures.push(format!("pod {n}: {e}")),
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();

    // Kill containerd while the workers are busy, then bring it back.
    while done.load(Ordering::SeqCst) < KILL_AFTER {
        std::thread::sleep(Duration::from_millis(20));
    }
    let killed_at = done.load(Ordering::SeqCst);
    killed.store(true, Ordering::SeqCst);
    node.containerd.kill().expect("SIGKILL containerd");
    std::thread::sleep(Duration::from_millis(500));
    node.containerd
        .restart()
        .unwrap_or_else(|e| panic!("restart containerd: {e}"));

    for worker in workers {
        worker.join().expect("churn worker panicked");
    }
    let record = std::mem::take(&mut *record.lock().unwrap_or_else(|p| p.into_inner()));
    eprintln!(
        "churn: {PODS} pods by {WORKERS} workers, containerd killed after {killed_at} done; calls retried across the restart: {:?}; stale sandboxes of interrupted runs: {}; {:.1} s",
        record.retried,
        record.stale,
        started.elapsed().as_secs_f64()
    );
    assert!(
        killed_at < PODS,
        "containerd was killed only after the churn ended"
    );
    assert!(
        !record.retried.is_empty(),
        "no CRI call met the killed containerd: the kill missed the churn"
    );
    eprintln!(
        "RunPodSandbox failures of containerd's own after the restart, retried: {:#?}",
        record.containerd_errors
    );
    assert!(
        record.failures.is_empty(),
        "failed pods: {:#?}",
        record.failures
    );
    assert_eq!(
        record.ips.len(),
        PODS,
        "every pod got an address of its own"
    );

    // Whatever the restart left (a sandbox whose RunPodSandbox was cut
    // short), removed as kubelet's garbage collection would.
    let mut client = node.client();
    let leftover = client
        .list_pod_sandboxes(HashMap::new())
        .expect("ListPodSandbox");
    let mut ids = record.ids.clone();
    for sandbox in &leftover {
        ids.insert(sandbox.id.clone());
        client
            .stop_pod_sandbox(&sandbox.id)
            .expect("StopPodSandbox of a leftover");
        client
            .remove_pod_sandbox(&sandbox.id)
            .expect("RemovePodSandbox of a leftover");
    }
    eprintln!(
        "sandboxes left after the churn and removed: {}",
        leftover.len()
    );
    // Every sandbox ID containerd ever gave our plugins.
    for call in node.calls() {
        if call.command == "ADD" {
            ids.insert(call.container_id);
        }
    }
    node.assert_nothing_left(&ids, &record.ips);
    let orphans = node.stop_cleanly(true);
    eprintln!(
        "left running by the killed containerd: {} shims, {} sandbox processes",
        orphans.shims, orphans.sandbox_processes
    );
    eprintln!("churn test: {:.1} s", started.elapsed().as_secs_f64());
}

struct PodLife {
    ids: Vec<String>,
    ip: String,
    retried: Vec<&'static str>,
    stale: usize,
    containerd_errors: Vec<String>,
}

/// Run, check, stop and remove pod `n`, riding out a containerd restart:
/// a call that finds containerd down waits for it, and a RunPodSandbox cut
/// short is cleaned up (by the pod's label) and tried again with the next
/// attempt number, as kubelet does.
fn pod_life(
    client: &mut CriClient,
    socket: &Path,
    netns_name: &str,
    killed: &AtomicBool,
    n: usize,
) -> Result<PodLife, String> {
    let name = format!("churn-{n}");
    let host_port = 31000 + n as u16;
    let mut life = PodLife {
        ids: Vec::new(),
        ip: String::new(),
        retried: Vec::new(),
        stale: 0,
        containerd_errors: Vec::new(),
    };
    let mut attempt = 0;
    let id = loop {
        match client.run_pod_sandbox(&pod(&name, host_port, attempt)) {
            Ok(id) => break id,
            Err(e) if e.is_unavailable() => {
                life.retried.push("RunPodSandbox");
                *client = reconnect(socket);
            }
            // A restarted containerd 1.6 can fail a first RunPodSandbox in
            // its own storage: a SIGKILL between the snapshotter's rename of
            // a new snapshot folder and its metadata commit leaves the
            // folder under an ID handed out again ("file exists") until the
            // garbage collector's Cleanup removes it. kubelet retries a
            // failed sandbox; so does the worker, a few times, for errors
            // that are not the network's (ours are always failures).
            Err(e)
                if killed.load(Ordering::SeqCst)
                    && !is_network_error(&e)
                    && life.containerd_errors.len() < 10 =>
            {
                life.containerd_errors.push(e.to_string());
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => return Err(format!("RunPodSandbox: {e}")),
        }
        // What the cut-short attempt left, found by the pod's label and
        // removed before the next attempt, as kubelet's cleanup does.
        let labels = HashMap::from([("cnitest.pod".to_string(), name.clone())]);
        let stale = retry(client, socket, &mut life.retried, "ListPodSandbox", |c| {
            c.list_pod_sandboxes(labels.clone())
        })?;
        for sandbox in stale {
            life.stale += 1;
            life.ids.push(sandbox.id.clone());
            retry(client, socket, &mut life.retried, "StopPodSandbox", |c| {
                c.stop_pod_sandbox(&sandbox.id)
            })?;
            retry(client, socket, &mut life.retried, "RemovePodSandbox", |c| {
                c.remove_pod_sandbox(&sandbox.id)
            })?;
        }
        attempt += 1;
    };
    life.ids.push(id.clone());
    let status = retry(client, socket, &mut life.retried, "PodSandboxStatus", |c| {
        c.pod_sandbox_status(&id)
    })?;
    if status.state != cri::PodSandboxState::SandboxReady || status.ip.is_empty() {
        return Err(format!(
            "sandbox {id} not ready or without an IP: {status:?}"
        ));
    }
    life.ip = status.ip.clone();
    let ping = Command::new("ip")
        .args([
            "netns", "exec", netns_name, "ping", "-c", "1", "-W", "2", &status.ip,
        ])
        .output()
        .map_err(|e| format!("ping: {e}"))?;
    if !ping.status.success() {
        return Err(format!("pod {} does not answer ping", status.ip));
    }
    retry(client, socket, &mut life.retried, "StopPodSandbox", |c| {
        c.stop_pod_sandbox(&id)
    })?;
    retry(client, socket, &mut life.retried, "RemovePodSandbox", |c| {
        c.remove_pod_sandbox(&id)
    })?;
    Ok(life)
}

/// Whether a CRI error is the pod network's (a CNI plugin's failure).
fn is_network_error(error: &cri_client::Error) -> bool {
    is_network_message(&error.to_string())
}

/// containerd wraps a network failure as "failed to setup (or destroy)
/// network for sandbox" and go-cni as `plugin type="..." failed`. Only
/// those phrases count: a bare "cni" also matches the test's own temporary
/// paths (/tmp/cnitest-cri-...), which once made a snapshotter error of
/// containerd's look like ours and failed the churn test.
fn is_network_message(text: &str) -> bool {
    text.contains("network for sandbox") || text.contains("plugin type=")
}

#[test]
fn only_the_network_phrases_make_an_error_the_networks() {
    let snapshotter = "rpc error: code = Unknown desc = failed to create containerd container: failed to rename: rename /tmp/cnitest-cri-7KDpHA/containerd/root/io.containerd.snapshotter.v1.overlayfs/snapshots/new-2642213146 /tmp/cnitest-cri-7KDpHA/containerd/root/io.containerd.snapshotter.v1.overlayfs/snapshots/25: file exists";
    assert!(!is_network_message(snapshotter));
    let setup = r#"rpc error: code = Unknown desc = failed to setup network for sandbox "0f3c": plugin type="bridge" name="cnitest" failed (add): failed to allocate for range 0"#;
    assert!(is_network_message(setup));
    let destroy = r#"failed to destroy network for sandbox "0f3c": plugin type="portmap" failed (delete): boom"#;
    assert!(is_network_message(destroy));
}

/// A call retried across a containerd restart (Stop, Remove and Status
/// are idempotent).
fn retry<T>(
    client: &mut CriClient,
    socket: &Path,
    retried: &mut Vec<&'static str>,
    what: &'static str,
    mut call: impl FnMut(&mut CriClient) -> Result<T, cri_client::Error>,
) -> Result<T, String> {
    loop {
        match call(client) {
            Ok(value) => return Ok(value),
            Err(e) if e.is_unavailable() => {
                retried.push(what);
                *client = reconnect(socket);
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// A client once containerd answers again.
fn reconnect(socket: &Path) -> CriClient {
    let deadline = Instant::now() + RECONNECT_TIMEOUT;
    loop {
        if let Ok(mut client) = CriClient::connect(socket) {
            if client.version().is_ok() {
                return client;
            }
        }
        assert!(
            Instant::now() < deadline,
            "containerd did not come back on {} within {} s",
            socket.display(),
            RECONNECT_TIMEOUT.as_secs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
