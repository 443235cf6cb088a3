//! Shared by the integration tests: the plugin run as a runtime runs it
//! (a fresh process, CNI_* variables, the configuration on stdin), and
//! simulated nodes (each its own nodeName and dataDir) against a real etcd
//! started by the `etcd-cluster` harness.

#![allow(dead_code)]

use std::collections::HashSet;
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;

use serde_json::{json, Value};

pub const PLUGIN: &str = env!("CARGO_BIN_EXE_cluster-ipam");
pub const ADMIN: &str = env!("CARGO_BIN_EXE_cluster-ipam-admin");

/// One simulated node of the cluster.
#[derive(Debug, Clone)]
pub struct Node {
    pub name: String,
    pub data_dir: PathBuf,
}

impl Node {
    pub fn new(root: &Path, name: &str) -> Node {
        Node {
            name: name.to_string(),
            data_dir: root.join(name),
        }
    }

    /// The network's store directory on this node.
    pub fn store(&self, network: &str) -> PathBuf {
        self.data_dir.join(network)
    }

    /// Addresses leased on this node (lease files).
    pub fn leases(&self, network: &str) -> Vec<IpAddr> {
        let Ok(dir) = std::fs::read_dir(self.store(network)) else {
            return Vec::new();
        };
        dir.filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str()?.parse::<IpAddr>().ok())
            .collect()
    }

    /// The blocks the node's record holds.
    pub fn blocks(&self, network: &str) -> Vec<String> {
        let path = self.store(network).join("cluster-blocks.json");
        let Ok(text) = std::fs::read(&path) else {
            return Vec::new();
        };
        let state: Value = serde_json::from_slice(&text).expect("node state is JSON");
        state["blocks"]
            .as_array()
            .map(|blocks| {
                blocks
                    .iter()
                    .filter_map(|b| b["cidr"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn state(&self, network: &str) -> Value {
        let path = self.store(network).join("cluster-blocks.json");
        std::fs::read(&path)
            .ok()
            .and_then(|t| serde_json::from_slice(&t).ok())
            .unwrap_or(Value::Null)
    }
}

/// A network configuration for `node`: `ipam` gets `nodeName`, `dataDir`
/// and `etcd.endpoints`, on top of `ipam_extra`.
pub fn net_conf(network: &str, node: &Node, endpoints: &[String], ipam_extra: Value) -> Value {
    let mut ipam = json!({
        "type": "cluster-ipam",
        "nodeName": node.name,
        "dataDir": node.data_dir,
        "etcd": {"endpoints": endpoints, "timeoutMs": 3000},
    });
    merge(&mut ipam, ipam_extra);
    json!({"cniVersion": "1.1.0", "name": network, "ipam": ipam})
}

/// Merges `extra` into `base`, objects key by key.
pub fn merge(base: &mut Value, extra: Value) {
    match (base, extra) {
        (Value::Object(b), Value::Object(e)) => {
            for (k, v) in e {
                merge(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (b, e) => *b = e,
    }
}

/// A plugin call's outcome.
#[derive(Debug)]
pub struct Outcome {
    pub status: i32,
    pub stdout: Value,
    pub stderr: String,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        self.status == 0
    }

    /// The spec error code, for a failed call.
    pub fn code(&self) -> u64 {
        self.stdout["code"].as_u64().unwrap_or(0)
    }

    pub fn msg(&self) -> String {
        self.stdout["msg"].as_str().unwrap_or_default().to_string()
    }

    /// The addresses of an ADD result.
    pub fn ips(&self) -> Vec<IpAddr> {
        self.stdout["ips"]
            .as_array()
            .map(|ips| {
                ips.iter()
                    .filter_map(|i| i["address"].as_str()?.split('/').next()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    #[track_caller]
    pub fn expect_ok(self, what: &str) -> Outcome {
        assert!(self.ok(), "{what} failed: {} {}", self.stdout, self.stderr);
        self
    }
}

/// The namespace named in `CNI_NETNS`: IPAM never enters it, but the
/// skeleton refuses the plugin's own namespace, so runtimes always pass a
/// container's. One per test process, made by the first test that needs
/// it and removed when the last one holding it ends.
static NETNS: Mutex<(usize, Option<String>)> = Mutex::new((0, None));

/// Holds the test namespace while a test runs.
pub struct NetnsGuard;

pub fn netns() -> NetnsGuard {
    let mut held = NETNS.lock().unwrap_or_else(|e| e.into_inner());
    if held.1.is_none() {
        let name = format!("cnitest-cipam-{}", std::process::id());
        let out = Command::new("ip")
            .args(["netns", "add", &name])
            .output()
            .expect("ip runs");
        assert!(
            out.status.success(),
            "ip netns add {name} (tests run as root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        held.1 = Some(name);
    }
    held.0 += 1;
    NetnsGuard
}

impl Drop for NetnsGuard {
    fn drop(&mut self) {
        let mut held = NETNS.lock().unwrap_or_else(|e| e.into_inner());
        held.0 -= 1;
        if held.0 == 0 {
            if let Some(name) = held.1.take() {
                let _ = Command::new("ip").args(["netns", "delete", &name]).status();
            }
        }
    }
}

fn netns_path() -> String {
    let held = NETNS.lock().unwrap_or_else(|e| e.into_inner());
    let name = held
        .1
        .clone()
        .expect("a test calls common::netns() before running the plugin");
    format!("/run/netns/{name}")
}

/// A node policy file allowing the temporary folder (where the tests keep
/// TLS files and passwords) for credential files, as an administrator
/// would allow a folder; written once per test process, always the same.
pub fn scratch_policy() -> &'static Path {
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let tmp = std::env::temp_dir();
        let path = tmp.join("cni-rs-cluster-ipam-test-policy.json");
        let folder = tmp.display().to_string();
        let policy = json!({"allow": {"credentials": [folder], "state": [folder]}});
        // Renamed into place, 0600: root's, as the plugin demands.
        libcni::state_file::write_atomically(&path, policy.to_string().as_bytes())
            .expect("the tests' policy file");
        path
    })
}

/// A node policy file of a test's own (root's, 0600), as
/// [`scratch_policy`] plus `extra` top-level keys (`clusterIpam` pins).
pub fn policy_with(dir: &Path, extra: Value) -> PathBuf {
    let tmp = std::env::temp_dir().display().to_string();
    let mut policy = json!({"allow": {"credentials": [tmp], "state": [tmp]}});
    merge(&mut policy, extra);
    let path = dir.join("cni-rs-policy.json");
    libcni::state_file::write_atomically(&path, policy.to_string().as_bytes())
        .expect("the test's policy file");
    path
}

/// Runs one verb to the end under the policy file at `policy`.
pub fn run_with_policy(verb: &str, conf: &Value, container: &str, policy: &Path) -> Outcome {
    let mut cmd = command(verb, container, "net1", "");
    cmd.env(libcni::confine::POLICY_ENV, policy);
    let mut child = cmd.spawn().expect("the cluster-ipam binary runs");
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(conf.to_string().as_bytes());
    }
    outcome(child.wait_with_output().expect("plugin process runs"))
}

fn command(verb: &str, container: &str, ifname: &str, cni_args: &str) -> Command {
    let mut cmd = Command::new(PLUGIN);
    cmd.env_clear()
        .env(libcni::confine::POLICY_ENV, scratch_policy())
        .env("CNI_COMMAND", verb)
        .env("CNI_CONTAINERID", container)
        .env("CNI_NETNS", netns_path())
        .env("CNI_IFNAME", ifname)
        .env("CNI_PATH", "/nonexistent")
        .env("CNI_ARGS", cni_args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn outcome(output: Output) -> Outcome {
    Outcome {
        status: output.status.code().unwrap_or(-1),
        stdout: serde_json::from_slice(&output.stdout).unwrap_or(Value::Null),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Runs one verb to the end.
pub fn run(verb: &str, conf: &Value, container: &str, ifname: &str, cni_args: &str) -> Outcome {
    let child = spawn(verb, conf, container, ifname, cni_args);
    outcome(child.wait_with_output().expect("plugin process runs"))
}

/// Starts one verb and leaves it running (for kill tests).
pub fn spawn(verb: &str, conf: &Value, container: &str, ifname: &str, cni_args: &str) -> Child {
    let mut child = command(verb, container, ifname, cni_args)
        .spawn()
        .expect("the cluster-ipam binary runs");
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(conf.to_string().as_bytes());
    }
    child
}

pub fn add(conf: &Value, container: &str) -> Outcome {
    run("ADD", conf, container, "net1", "")
}

pub fn del(conf: &Value, container: &str) -> Outcome {
    run("DEL", conf, container, "net1", "")
}

/// GC keeping `valid` containers (ifname net1).
pub fn gc(conf: &Value, valid: &[&str]) -> Outcome {
    let mut conf = conf.clone();
    conf["cni.dev/valid-attachments"] = valid
        .iter()
        .map(|c| json!({"containerID": c, "ifname": "net1"}))
        .collect();
    run("GC", &conf, "", "", "")
}

pub fn status(conf: &Value) -> Outcome {
    run("STATUS", conf, "", "", "")
}

/// Every key under `prefix` in etcd, by etcdctl (what an operator sees).
pub fn etcd_keys(cluster: &etcd_cluster::EtcdCluster, prefix: &str) -> Vec<String> {
    let out = cluster
        .etcdctl(&["get", "--prefix", "--keys-only", prefix])
        .expect("etcdctl get");
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

/// Block key -> owner, from etcd.
pub fn etcd_blocks(cluster: &etcd_cluster::EtcdCluster, network: &str) -> Vec<(String, String)> {
    let prefix = format!("/cluster-ipam/{network}/blocks/");
    let out = cluster
        .etcdctl(&["get", "--prefix", &prefix])
        .expect("etcdctl get");
    let lines: Vec<&str> = out.lines().filter(|l| !l.is_empty()).collect();
    lines
        .chunks(2)
        .map(|kv| {
            let block = kv[0].trim_start_matches(&prefix).to_string();
            let owner: Value =
                serde_json::from_str(kv.get(1).copied().unwrap_or("{}")).unwrap_or_default();
            (
                block,
                owner["node"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Fails when an address appears twice.
#[track_caller]
pub fn assert_distinct(ips: &[IpAddr]) {
    let mut seen = HashSet::new();
    for ip in ips {
        assert!(seen.insert(*ip), "{ip} handed out twice");
    }
}

/// A cluster, or the reason the test cannot run, as a failure.
pub fn start_etcd(
    members: usize,
    opts: etcd_cluster::ClusterOptions,
) -> (etcd_cluster::EtcdCluster, NetnsGuard) {
    let guard = netns();
    (
        etcd_cluster::EtcdCluster::start(members, opts).unwrap_or_else(|e| panic!("{e}")),
        guard,
    )
}

/// `cluster-ipam-admin --config CONFIG ARGS...`: whether it succeeded, its
/// stdout and its stderr.
pub fn admin(config: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(ADMIN)
        // The nodes' lease folders are scratch folders the policy allows,
        // as the plugin's own runs do.
        .env(libcni::confine::POLICY_ENV, scratch_policy())
        .arg("--config")
        .arg(config)
        .args(args)
        .output()
        .expect("cluster-ipam-admin runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
