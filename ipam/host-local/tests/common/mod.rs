//! Helpers shared by the integration tests: running a plugin binary (ours
//! or the reference) the way a runtime does, and a network namespace to
//! name in `CNI_NETNS`.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{json, Value};

pub const OURS: &str = env!("CARGO_BIN_EXE_host-local");
/// The reference plugin of the Debian package containernetworking-plugins.
pub const REFERENCE: &str = "/usr/lib/cni/host-local";

pub const ALL_VERSIONS: [&str; 7] = [
    "0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0",
];

/// A named network namespace for `CNI_NETNS`, deleted on drop. IPAM never
/// enters it, but the skeleton refuses ADD and DEL for the plugin's own
/// namespace, so runtimes always pass a container's.
pub struct TestNetns {
    name: String,
}

impl TestNetns {
    pub fn new(tag: &str) -> TestNetns {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "hl-{tag}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let out = Command::new("ip")
            .args(["netns", "add", &name])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ip netns add {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        TestNetns { name }
    }

    pub fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }
}

impl Drop for TestNetns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.name])
            .status();
    }
}

/// What one plugin run gave.
#[derive(Debug)]
pub struct Outcome {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Outcome {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }

    /// Asserts success and returns the printed JSON (`Null` when nothing
    /// was printed).
    pub fn ok(&self) -> Value {
        assert_eq!(self.code, 0, "plugin failed: {self:?}");
        if self.stdout.trim().is_empty() {
            Value::Null
        } else {
            self.json()
        }
    }

    /// Asserts failure and returns (code, msg) of the error JSON.
    pub fn err(&self) -> (u64, String) {
        assert_ne!(self.code, 0, "plugin succeeded: {self:?}");
        let v = self.json();
        (
            v["code"]
                .as_u64()
                .unwrap_or_else(|| panic!("no code: {self:?}")),
            v["msg"].as_str().unwrap_or_default().to_string(),
        )
    }
}

/// One call: command, container ID, ifname, netns path, CNI_ARGS, config.
#[derive(Debug, Clone)]
pub struct Call<'a> {
    pub binary: &'a str,
    pub command: &'a str,
    pub container_id: &'a str,
    pub ifname: &'a str,
    pub netns: &'a str,
    pub cni_args: &'a str,
}

impl<'a> Call<'a> {
    pub fn new(
        binary: &'a str,
        command: &'a str,
        container_id: &'a str,
        netns: &'a str,
    ) -> Call<'a> {
        Call {
            binary,
            command,
            container_id,
            ifname: "eth0",
            netns,
            cni_args: "",
        }
    }

    pub fn ifname(mut self, ifname: &'a str) -> Call<'a> {
        self.ifname = ifname;
        self
    }

    pub fn cni_args(mut self, args: &'a str) -> Call<'a> {
        self.cni_args = args;
        self
    }

    pub fn run(&self, conf: &Value) -> Outcome {
        let policy = ScratchPolicy::new();
        let mut cmd = Command::new(self.binary);
        cmd.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env(libcni::confine::POLICY_ENV, policy.path())
            .env("CNI_COMMAND", self.command)
            .env("CNI_PATH", "/usr/lib/cni")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (key, value) in [
            ("CNI_CONTAINERID", self.container_id),
            ("CNI_IFNAME", self.ifname),
            ("CNI_NETNS", self.netns),
            ("CNI_ARGS", self.cni_args),
        ] {
            if !value.is_empty() {
                cmd.env(key, value);
            }
        }
        run_with_stdin(cmd, conf)
    }
}

/// A node policy file allowing the temporary folder for state, where the
/// tests keep their lease stores (`ipam.dataDir` is confined to the state
/// folders, issue 28), as a node's administrator would allow a folder.
/// One per call, removed when dropped: nothing is left in /tmp.
pub struct ScratchPolicy(tempfile::NamedTempFile);

impl ScratchPolicy {
    pub fn new() -> ScratchPolicy {
        let policy = json!({"allow": {"state": [std::env::temp_dir()]}});
        // Made 0600 by the test's user, root: what the plugin demands.
        let file = tempfile::Builder::new()
            .prefix("cni-rs-test-policy-")
            .suffix(".json")
            .tempfile()
            .expect("policy file");
        fs::write(file.path(), policy.to_string()).expect("write policy file");
        ScratchPolicy(file)
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

pub fn run_with_stdin(mut cmd: Command, conf: &Value) -> Outcome {
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let input = serde_json::to_vec(conf).unwrap();
    // The plugin may exit before reading stdin (VERSION); ignore EPIPE.
    let _ = child.stdin.take().unwrap().write_all(&input);
    let out = child.wait_with_output().unwrap();
    Outcome {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A network configuration handing out `ranges` from `data_dir`.
pub fn conf(version: &str, name: &str, data_dir: &Path, ranges: Value) -> Value {
    json!({
        "cniVersion": version,
        "name": name,
        "type": "ipvlan",
        "master": "foo0",
        "ipam": {
            "type": "host-local",
            "dataDir": data_dir,
            "ranges": ranges,
        }
    })
}

/// The lease files of a network directory (names that are addresses).
pub fn leases(data_dir: &Path, network: &str) -> BTreeSet<String> {
    let dir = data_dir.join(network);
    let Ok(entries) = fs::read_dir(&dir) else {
        return BTreeSet::new();
    };
    entries
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
        .collect()
}

pub fn read(path: impl AsRef<Path>) -> String {
    fs::read_to_string(path.as_ref()).unwrap_or_else(|e| panic!("{}: {e}", path.as_ref().display()))
}

pub fn store_dir(data_dir: &Path, network: &str) -> PathBuf {
    data_dir.join(network)
}

/// The reference binary must be installed: interop is part of what these
/// tests prove, so its absence is a failure, not a skip.
pub fn require_reference() {
    assert!(
        Path::new(REFERENCE).is_file(),
        "{REFERENCE} is missing: install the Debian package containernetworking-plugins"
    );
}

/// The addresses of an ADD result in any version, in result order.
pub fn result_addresses(result: &Value) -> Vec<String> {
    if let Some(ips) = result["ips"].as_array() {
        return ips
            .iter()
            .map(|ip| ip["address"].as_str().unwrap().to_string())
            .collect();
    }
    ["ip4", "ip6"]
        .iter()
        .filter_map(|k| result[k]["ip"].as_str().map(str::to_string))
        .collect()
}
