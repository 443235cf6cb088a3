//! Network namespaces made by a test, and running plugin binaries in them.
//!
//! Every namespace name starts with `cnitest-` so that CI can tell whether
//! a test leaked one. Namespaces are deleted on drop, also when the test
//! fails, and nothing here touches the machine's own network setup.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::Value;

/// A named network namespace (`/run/netns/<name>`), deleted on drop.
pub struct TestNetns {
    name: String,
}

impl TestNetns {
    /// Creates `cnitest-<tag>-<pid>-<n>` with `lo` up. Panics on failure,
    /// which is what a test wants.
    pub fn new(tag: &str) -> TestNetns {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "cnitest-{tag}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        assert!(
            name.len() <= 64,
            "netns name {name} too long; use a shorter tag"
        );
        ip(&["netns", "add", &name]);
        let ns = TestNetns { name };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/run/netns/{}", self.name))
    }

    /// `ip -n <ns> <args>`, asserting success; returns stdout.
    pub fn ip(&self, args: &[&str]) -> String {
        let mut full = vec!["-n", &self.name];
        full.extend_from_slice(args);
        ip(&full)
    }

    /// `ip -n <ns> -j <args>` parsed as JSON.
    pub fn ip_json(&self, args: &[&str]) -> Value {
        let mut full = vec!["-j"];
        full.extend_from_slice(args);
        let out = self.ip(&full);
        if out.trim().is_empty() {
            return Value::Array(Vec::new());
        }
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("ip -j {args:?}: {e}: {out}"))
    }

    /// Runs a command inside the namespace (`ip netns exec`).
    pub fn exec(&self, program: &str, args: &[&str]) -> std::process::Output {
        Command::new("ip")
            .args(["netns", "exec", &self.name, program])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("ip netns exec {program}: {e}"))
    }

    /// Whether `ping -c 1` from this namespace reaches `addr`.
    pub fn ping(&self, addr: &str) -> bool {
        let out = self.exec("ping", &["-c", "1", "-W", "2", addr]);
        out.status.success()
    }

    /// `curl`s `http://addr:port/index.html` from this namespace (10 s at
    /// most): the body, or curl's error.
    pub fn http_get(&self, addr: &str, port: u16) -> Result<String, String> {
        let url = format!("http://{addr}:{port}/index.html");
        let out = self.exec(
            "curl",
            &["--silent", "--show-error", "--max-time", "10", &url],
        );
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "curl {url}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// Interface names in the namespace.
    pub fn links(&self) -> Vec<String> {
        self.ip_json(&["link", "show"])
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|l| l["ifname"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for TestNetns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.name])
            .status();
    }
}

/// What a test needs from the machine and lacks: each program of
/// `programs` (name, an argument it answers with success, such as
/// `--version`) that does not run, and the name of each file of `files`
/// (what provides it, path) that is missing.
pub fn missing_tools(
    programs: &[(&'static str, &str)],
    files: &[(&'static str, &str)],
) -> Vec<&'static str> {
    let runs = |program: &str, arg: &str| {
        Command::new(program)
            .arg(arg)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let programs = programs
        .iter()
        .filter(|(program, arg)| !runs(program, arg))
        .map(|(program, _)| *program);
    let files = files
        .iter()
        .filter(|(_, path)| !Path::new(path).is_file())
        .map(|(provider, _)| *provider);
    programs.chain(files).collect()
}

/// Whether `test` must skip (through `libcni::test_skip`, a failure under
/// `.ci/run`) because [`missing_tools`] lists something; `install` says
/// how to get it.
#[track_caller]
pub fn skip_unless_installed(
    test: &str,
    programs: &[(&'static str, &str)],
    files: &[(&'static str, &str)],
    install: &str,
) -> bool {
    let missing = missing_tools(programs, files);
    if missing.is_empty() {
        return false;
    }
    libcni::test_skip::skip(
        test,
        &format!("not installed: {} ({install})", missing.join(", ")),
    );
    true
}

/// Whether a line of `iptables-save` or `nft list ruleset` names `needle`
/// (an address or a container ID) as a whole word: `10.1.0.1` does not
/// name `10.1.0.10`, and an ID is not named by a longer one.
pub fn rule_names(line: &str, needle: &str) -> bool {
    line.match_indices(needle).any(|(at, _)| {
        let before = line[..at].chars().next_back();
        let after = line[at + needle.len()..].chars().next();
        let part = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '.');
        !part(before) && !part(after)
    })
}

/// How long a test waits for what the kernel finishes asynchronously, such
/// as destroying a deleted namespace's links (a workqueue, after RCU grace
/// periods): on a loaded two-core CI machine that took over a second, so
/// the bound is generous. A wait ends as soon as its condition holds; only
/// a real leak pays the whole bound.
pub const KERNEL_CLEANUP: std::time::Duration = std::time::Duration::from_secs(60);

/// Polls `done` until it holds or [`KERNEL_CLEANUP`] has passed; whether
/// it held. Every 5 ms for the first second, then every 50 ms: the
/// cleanup usually ends within tens of milliseconds, and tests wait for it
/// in each of hundreds of trials (a doubling pause overshot it by up to
/// 40 ms each time, 8 s per resilience test).
pub fn kernel_settles(mut done: impl FnMut() -> bool) -> bool {
    let started = std::time::Instant::now();
    loop {
        if done() {
            return true;
        }
        let waited = started.elapsed();
        if waited >= KERNEL_CLEANUP {
            return false;
        }
        let pause = if waited < std::time::Duration::from_secs(1) {
            5
        } else {
            50
        };
        std::thread::sleep(std::time::Duration::from_millis(pause));
    }
}

/// `ip <args>`, asserting success; returns stdout.
pub fn ip(args: &[&str]) -> String {
    let out = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run ip: {e}"));
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The node policy file every [`PluginCall`] names in
/// `CNI_RS_POLICY_FILE`: it allows the system's temporary folder and
/// `/dev/shm` (the bench's state root), where tests keep their scratch
/// state, logs and device-info files, for every place (`libcni::confine`),
/// as a node's administrator would allow a folder. Tests of the
/// confinement itself name their own policy with [`PluginCall::var`].
///
/// One file per process (`cni-rs-test-policy-uid<N>-<pid>.json`), removed
/// when the process exits; a file left by a process that was killed is
/// removed by the next one of the same user. One per real user too: unit
/// tests also run as an unprivileged user mapped to root in a user
/// namespace (.ci/run), who can neither replace root's files in the
/// sticky /tmp nor pass a file owned by an unmapped user (seen as 65534)
/// for root's.
pub fn scratch_policy() -> &'static Path {
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let tmp = std::env::temp_dir();
        let prefix = format!("cni-rs-test-policy-uid{}-", outside_uid());
        remove_stale_policies(&tmp, &prefix);
        let path = tmp.join(format!("{prefix}{}.json", std::process::id()));
        let mut folders = vec![tmp.display().to_string()];
        if Path::new("/dev/shm").is_dir() && tmp != Path::new("/dev/shm") {
            folders.push("/dev/shm".to_string());
        }
        let policy = serde_json::json!({"allow": {
            "logs": folders, "state": folders, "deviceInfo": folders, "credentials": folders,
        }});
        let mut text = serde_json::to_vec_pretty(&policy).unwrap_or_default();
        text.push(b'\n');
        // A state file's atomic write: 0600, renamed into place.
        if let Err(e) = libcni::state_file::write_atomically(&path, &text) {
            panic!(
                "cannot write the tests' policy file {}: {e}",
                path.display()
            );
        }
        remove_at_exit(&path);
        path
    })
}

/// The policy file to remove when the process exits, and that process
/// (a forked child that calls `exit` must not remove its parent's file).
static POLICY_TO_REMOVE: std::sync::OnceLock<(std::ffi::CString, u32)> = std::sync::OnceLock::new();

/// Removes `path` at `exit` (the test harness and the conformance binary
/// both end through it).
fn remove_at_exit(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    extern "C" fn remove_policy() {
        if let Some((path, owner)) = POLICY_TO_REMOVE.get() {
            if *owner == std::process::id() {
                // SAFETY: a NUL-terminated path that lives for the process.
                unsafe { libc::unlink(path.as_ptr()) };
            }
        }
    }
    let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return;
    };
    if POLICY_TO_REMOVE.set((c_path, std::process::id())).is_ok() {
        // SAFETY: registers a function without arguments that only reads
        // a static and unlinks a file.
        unsafe { libc::atexit(remove_policy) };
    }
}

/// Removes this user's policy files whose process is gone (killed before
/// its exit handler ran).
fn remove_stale_policies(tmp: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix))
            .and_then(|n| n.strip_suffix(".json"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// This process's user as the initial user namespace sees it (the first
/// line of /proc/self/uid_map that maps our uid), else our uid.
fn outside_uid() -> u32 {
    let uid = nix::unistd::geteuid().as_raw();
    let map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
    map.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace().map(|f| f.parse::<u32>().ok());
            Some((fields.next()??, fields.next()??, fields.next()??))
        })
        .find(|(inside, _, count)| uid >= *inside && uid - inside < *count)
        .map_or(uid, |(inside, outside, _)| outside + (uid - inside))
}

/// Where the workspace's built binaries are: `$CNI_TEST_BIN_DIR`; else,
/// for a test binary (cargo puts it in `<target dir>/debug/deps`), the
/// folder above its own, so a target dir moved by `CARGO_TARGET_DIR` or
/// cargo's config is followed; else the `target/debug` folder next to this
/// crate.
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CNI_TEST_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf));
    if let Some(deps) = exe_dir.filter(|dir| dir.file_name() == Some("deps".as_ref())) {
        if let Some(profile_dir) = deps.parent() {
            return profile_dir.to_path_buf();
        }
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("target")
        .join("debug")
}

/// The Debian reference plugins.
pub const REFERENCE_DIR: &str = "/usr/lib/cni";

/// One exec of a plugin binary, as a runtime does it.
#[derive(Debug, Clone, Default)]
pub struct PluginCall {
    pub env: BTreeMap<String, String>,
    pub stdin: Vec<u8>,
    /// Run inside this namespace (`ip netns exec`), e.g. a fake host netns.
    pub in_netns: Option<String>,
}

/// What a plugin run printed and returned.
#[derive(Debug, Clone)]
pub struct PluginOutcome {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl PluginOutcome {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}): {:?}\nstderr: {}",
                self.stdout, self.stderr
            )
        })
    }

    pub fn assert_ok(&self) -> &Self {
        assert_eq!(
            self.code, 0,
            "plugin failed: stdout {} stderr {}",
            self.stdout, self.stderr
        );
        self
    }

    /// The error's `msg` ("" when the output has none).
    pub fn msg(&self) -> String {
        self.json()["msg"].as_str().unwrap_or_default().to_string()
    }

    /// The spec error code printed on stdout (asserting exit status 1).
    pub fn error_code(&self) -> u64 {
        assert_eq!(self.code, 1, "expected failure, got: {}", self.stdout);
        self.json()["code"]
            .as_u64()
            .unwrap_or_else(|| panic!("no code in {}", self.stdout))
    }
}

impl PluginCall {
    /// A call with CNI_COMMAND and the given variables; CNI_PATH defaults to
    /// the workspace's binaries.
    pub fn new(command: &str) -> PluginCall {
        let mut env = BTreeMap::new();
        env.insert("CNI_COMMAND".to_string(), command.to_string());
        env.insert("CNI_PATH".to_string(), bin_dir().display().to_string());
        env.insert(
            libcni::confine::POLICY_ENV.to_string(),
            scratch_policy().display().to_string(),
        );
        PluginCall {
            env,
            stdin: Vec::new(),
            in_netns: None,
        }
    }

    pub fn var(mut self, key: &str, value: impl Into<String>) -> Self {
        self.env.insert(key.to_string(), value.into());
        self
    }

    /// Sets CNI_CONTAINERID, CNI_NETNS and CNI_IFNAME at once.
    pub fn attachment(self, container_id: &str, netns: &Path, ifname: &str) -> Self {
        self.var("CNI_CONTAINERID", container_id)
            .var("CNI_NETNS", netns.display().to_string())
            .var("CNI_IFNAME", ifname)
    }

    pub fn stdin_json(mut self, conf: &Value) -> Self {
        self.stdin = serde_json::to_vec(conf).unwrap_or_default();
        self
    }

    pub fn in_netns(mut self, ns: &TestNetns) -> Self {
        self.in_netns = Some(ns.name().to_string());
        self
    }

    /// Runs `plugin` with a cleared environment plus PATH and the call's
    /// variables.
    pub fn run(&self, plugin: &Path) -> PluginOutcome {
        let mut cmd = match &self.in_netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(plugin);
                c
            }
            None => Command::new(plugin),
        };
        cmd.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .envs(&self.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", plugin.display()));
        if let Some(mut input) = child.stdin.take() {
            let _ = input.write_all(&self.stdin);
        }
        let out = child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("wait {}: {e}", plugin.display()));
        PluginOutcome {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// Every spec version, as strings, oldest first.
pub const ALL_VERSIONS: [&str; 7] = [
    "0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0",
];

/// The workspace's own build of plugin `name` (the binary of the package of
/// that name), for tests that need it beside the plugin under test, such as
/// host-local as IPAM. Never a copy from elsewhere on the machine: a test
/// about our plugins must not pass or fail because of another build.
///
/// Under `cargo test` (cargo is in `$CARGO`), the first call for a name in
/// a test process runs `cargo build -p <name> --bin <name>`, so the binary
/// exists and matches the sources. That is safe: cargo releases the build
/// directory's lock before it runs test binaries (checked with cargo 1.95:
/// a test's nested build of another package completes), so the nested
/// build waits only for other cargo processes, as any build does. Its
/// artifact message gives the path, wherever the target directory is.
///
/// With `CNI_TEST_BIN_DIR` set (CI, after building the workspace) or
/// outside cargo, the binary must already be in [`bin_dir`].
///
/// Panics, naming the `cargo build` to run, when the binary cannot be had.
pub fn workspace_plugin(name: &str) -> PathBuf {
    use std::sync::Mutex;
    static BUILT: Mutex<BTreeMap<String, PathBuf>> = Mutex::new(BTreeMap::new());
    // A test that panicked while holding the lock left the map intact.
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(path) = built.get(name) {
        return path.clone();
    }
    let cargo =
        std::env::var_os("CARGO").filter(|_| std::env::var_os("CNI_TEST_BIN_DIR").is_none());
    let path = match cargo {
        Some(cargo) => build_with_cargo(Path::new(&cargo), name),
        None => {
            let path = bin_dir().join(name);
            assert!(
                path.is_file(),
                "{} is missing: this test needs the workspace's own {name}; run `cargo build -p {name}`",
                path.display()
            );
            path
        }
    };
    built.insert(name.to_string(), path.clone());
    path
}

/// `cargo build -p <name> --bin <name>`, returning the executable's path
/// from cargo's JSON messages.
fn build_with_cargo(cargo: &Path, name: &str) -> PathBuf {
    let out = Command::new(cargo)
        .args(["build", "--message-format=json", "-p", name, "--bin", name])
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {} to build {name}: {e}; run `cargo build -p {name}`",
                cargo.display()
            )
        });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "this test needs the workspace's own {name}, and `cargo build -p {name}` failed:\n{stderr}"
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == name)
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| {
            panic!("`cargo build -p {name}` succeeded but named no {name} executable; run `cargo build -p {name}`")
        })
}

/// The prevResult a runtime hands CHECK and DEL: `conf` with `prev` in it.
pub fn with_prev(conf: &Value, prev: &Value) -> Value {
    let mut conf = conf.clone();
    conf["prevResult"] = prev.clone();
    conf
}

/// `base` with each top-level key of the object `extra` set over it: a
/// test's one-off keys on its usual configuration.
pub fn merged(mut base: Value, extra: &Value) -> Value {
    if let Some(extra) = extra.as_object() {
        for (key, value) in extra {
            base[key] = value.clone();
        }
    }
    base
}

/// Link names every configuration key naming a link refuses, each with
/// the error message for `key` (code 7): a name past the 65535 bytes of a
/// netlink attribute (netlink-packet-route panicked encoding it, and
/// release builds abort), a control character (escaped in the message),
/// a separator.
pub fn refused_link_names(key: &str) -> Vec<(String, String)> {
    vec![
        (
            "m".repeat(70_000),
            format!("invalid {key} of 70000 bytes: interface name is too long (at most 15 bytes)"),
        ),
        (
            "eth\u{1b}[0m".to_string(),
            format!(
                r#"invalid {key} "eth\u{{1b}}[0m": interface name contains control characters"#
            ),
        ),
        (
            "a/b".to_string(),
            format!(
                r#"invalid {key} "a/b": interface name contains / or : or whitespace characters"#
            ),
        ),
    ]
}

/// A host-local `dataDir` of a test's own (removed on drop) and the leases
/// host-local keeps in it for one network.
pub struct HostLocalStore {
    dir: tempfile::TempDir,
    network: String,
}

impl HostLocalStore {
    pub fn new(network: &str) -> HostLocalStore {
        HostLocalStore {
            dir: tempfile::tempdir().unwrap_or_else(|e| panic!("temporary dataDir: {e}")),
            network: network.to_string(),
        }
    }

    pub fn data_dir(&self) -> String {
        self.dir.path().display().to_string()
    }

    /// An `ipam` object: host-local in this store with one range set of
    /// the one `range` (`{"subnet": …, …}`).
    pub fn ipam(&self, range: Value) -> Value {
        serde_json::json!({
            "type": "host-local",
            "dataDir": self.data_dir(),
            "ranges": [[range]],
        })
    }

    /// The addresses host-local holds for the network (its lease files).
    pub fn leases(&self) -> Vec<String> {
        host_local_leases(&self.dir.path().join(&self.network))
    }
}

/// The addresses host-local holds in one network's store folder (its
/// lease files, named by address), sorted; none when the folder is absent.
pub fn host_local_leases(store: &std::path::Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(store) else {
        return Vec::new();
    };
    let mut leases: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
        .collect();
    leases.sort();
    leases
}

/// What the plugins that put a sub-link of a host interface into a pod
/// (macvlan, ipvlan, vlan) are tested on: a fake host namespace whose
/// `master0` is one end of a veth, the other end (`peer0`, down and
/// without addresses) in a "peer" namespace standing for the network
/// beyond the NIC, and a pod namespace. With `master_in_pod`, `master0`
/// is in the pod instead (`linkInContainer`).
pub struct MasterNet {
    pub host: TestNetns,
    pub peer: TestNetns,
    pub pod: TestNetns,
}

impl MasterNet {
    /// The name of the master link.
    pub const MASTER: &'static str = "master0";

    /// Namespaces `<tag>-h`, `<tag>-r` (peer) and `<tag>-p` (pod).
    pub fn new(tag: &str, master_in_pod: bool) -> MasterNet {
        let net = MasterNet {
            host: TestNetns::new(&format!("{tag}-h")),
            peer: TestNetns::new(&format!("{tag}-r")),
            pod: TestNetns::new(&format!("{tag}-p")),
        };
        let master_ns = if master_in_pod { &net.pod } else { &net.host };
        master_ns.ip(&[
            "link",
            "add",
            Self::MASTER,
            "type",
            "veth",
            "peer",
            "name",
            "peer0",
            "netns",
            net.peer.name(),
        ]);
        master_ns.ip(&["link", "set", Self::MASTER, "up"]);
        net
    }

    /// `peer0` up with `cidr`, for traffic across the master.
    pub fn peer_address(&self, cidr: &str) {
        self.peer.ip(&["addr", "add", cidr, "dev", "peer0"]);
        self.peer.ip(&["link", "set", "peer0", "up"]);
    }

    /// A plugin call for the attachment (`container_id`, `ifname`) in the
    /// pod, run from the host namespace.
    pub fn call(
        &self,
        command: &str,
        container_id: &str,
        ifname: &str,
        conf: &Value,
    ) -> PluginCall {
        PluginCall::new(command)
            .attachment(container_id, &self.pod.path(), ifname)
            .stdin_json(conf)
            .in_netns(&self.host)
    }

    /// The links of `ns` besides `lo` and the master.
    pub fn extra_links(ns: &TestNetns) -> Vec<String> {
        ns.links()
            .into_iter()
            .filter(|l| l != "lo" && l != Self::MASTER)
            .collect()
    }

    /// Neither the pod nor the host has a link besides `lo` and the
    /// master: nothing made, or all of it deleted.
    pub fn assert_no_links_left(&self) {
        assert_eq!(MasterNet::extra_links(&self.pod), Vec::<String>::new());
        assert_eq!(MasterNet::extra_links(&self.host), Vec::<String>::new());
    }

    /// Whether this kernel makes a link `ip link add link <parent> …
    /// <kind_args>` (`["type", "ipvlan"]`, `["type", "vlan", "id", "5"]`),
    /// tried in a scratch namespace of its own.
    pub fn kernel_makes(kind_args: &[&str]) -> bool {
        let scratch = TestNetns::new("probe");
        scratch.ip(&["link", "add", "p0", "type", "veth", "peer", "name", "p1"]);
        Command::new("ip")
            .args([
                "-n",
                scratch.name(),
                "link",
                "add",
                "link",
                "p0",
                "name",
                "p0s",
            ])
            .args(kind_args)
            .output()
            .map(|out| out.status.success())
            .unwrap_or(false)
    }
}

/// One attachment (`container_id`, `ifname`) of a sub-link plugin's
/// binary in a [`MasterNet`], with host-local leasing from a
/// [`HostLocalStore`] and the plugin's usual configuration: what the
/// macvlan, ipvlan and vlan tests share. Derefs to the [`MasterNet`].
pub struct SubLinkRig {
    pub net: MasterNet,
    pub store: HostLocalStore,
    pub plugin: PathBuf,
    pub container_id: &'static str,
    pub ifname: &'static str,
    /// The plugin's configuration without `ipam`: [`SubLinkRig::conf`]
    /// adds the store's, since its `dataDir` is only known here.
    conf_without_ipam: Value,
    /// The one host-local range (`{"subnet": …, …}`) of [`SubLinkRig::ipam`].
    ipam_range: Value,
    /// `routes` for [`SubLinkRig::ipam`], for a plugin whose tests send
    /// traffic through the pod's default route.
    ipam_routes: Option<Value>,
}

impl std::ops::Deref for SubLinkRig {
    type Target = MasterNet;
    fn deref(&self) -> &MasterNet {
        &self.net
    }
}

impl SubLinkRig {
    /// The namespaces of [`MasterNet::new`] and a store for `network`;
    /// builds the workspace's host-local if needed ([`workspace_plugin`]).
    /// [`SubLinkRig::conf`] is `plugin_keys` (the plugin's own: `type`,
    /// `cniVersion`, ...) with `name` (`network`), `master`
    /// ([`MasterNet::MASTER`]) and `ipam` (host-local in `ipam_range`).
    pub fn new(
        plugin: &str,
        network: &str,
        tag: &str,
        master_in_pod: bool,
        (container_id, ifname): (&'static str, &'static str),
        plugin_keys: Value,
        ipam_range: Value,
    ) -> SubLinkRig {
        workspace_plugin("host-local");
        let conf_without_ipam = merged(
            serde_json::json!({"name": network, "master": MasterNet::MASTER}),
            &plugin_keys,
        );
        SubLinkRig {
            net: MasterNet::new(tag, master_in_pod),
            store: HostLocalStore::new(network),
            plugin: PathBuf::from(plugin),
            container_id,
            ifname,
            conf_without_ipam,
            ipam_range,
            ipam_routes: None,
        }
    }

    /// The rig with `routes` in its `ipam`.
    pub fn with_ipam_routes(mut self, routes: Value) -> SubLinkRig {
        self.ipam_routes = Some(routes);
        self
    }

    /// host-local in this rig's store, with its range (and routes).
    pub fn ipam(&self) -> Value {
        let mut ipam = self.store.ipam(self.ipam_range.clone());
        if let Some(routes) = &self.ipam_routes {
            ipam["routes"] = routes.clone();
        }
        ipam
    }

    /// The plugin's usual configuration with [`SubLinkRig::ipam`], and
    /// each top-level key of `extra` set over it ([`merged`]).
    pub fn conf(&self, extra: Value) -> Value {
        let mut conf = self.conf_without_ipam.clone();
        conf["ipam"] = self.ipam();
        merged(conf, &extra)
    }

    /// A call of the attachment, from the host namespace.
    pub fn call(&self, command: &str, conf: &Value) -> PluginCall {
        self.net.call(command, self.container_id, self.ifname, conf)
    }

    /// The plugin run for the attachment.
    pub fn run(&self, command: &str, conf: &Value) -> PluginOutcome {
        self.call(command, conf).run(&self.plugin)
    }

    /// host-local itself run for the attachment: a lease as an earlier
    /// ADD would have left it, or IPAM's own verdict to compare with.
    pub fn run_ipam(&self, command: &str, conf: &Value) -> PluginOutcome {
        self.call(command, conf)
            .run(&workspace_plugin("host-local"))
    }

    pub fn leases(&self) -> Vec<String> {
        self.store.leases()
    }

    /// No link besides `lo` and the master in pod or host, and no lease.
    pub fn assert_nothing_left(&self) {
        self.assert_no_links_left();
        assert_eq!(self.leases(), Vec::<String>::new());
    }

    /// CHECK's steps before the link, which need no link in the kernel;
    /// `conf` has host-local IPAM and nothing is leased yet. A
    /// prevResult names the attachment's interface in the pod with
    /// `address`, and:
    /// - with no lease, the plugin's CHECK fails with the IPAM plugin's
    ///   own code and message: IPAM is asked first, and its verdict is
    ///   passed on as it is, not rewritten;
    /// - after a lease is taken (as ADD would have left it), CHECK
    ///   without prevResult is 7 "Required prevResult missing": there is
    ///   nothing to compare the link with;
    /// - a prevResult whose interface is in another sandbox is 999,
    ///   since the link it names is not the one in this pod.
    ///
    /// Returns the prevResult, with the lease held, for the plugin's own
    /// findings about the link.
    pub fn assert_check_steps_before_the_link(&self, conf: &Value, address: &str) -> Value {
        let prev = serde_json::json!({
            "cniVersion": "1.1.0",
            "interfaces": [{"name": self.ifname, "sandbox": self.pod.path().display().to_string()}],
            "ips": [{"address": address, "interface": 0}],
        });
        let checked = with_prev(conf, &prev);
        let from_ipam = self.run_ipam("CHECK", &checked);
        let out = self.run("CHECK", &checked);
        assert_eq!(out.error_code(), from_ipam.error_code());
        assert_eq!(out.msg(), from_ipam.msg());
        self.run_ipam("ADD", conf).assert_ok();

        let out = self.run("CHECK", conf);
        assert_eq!(out.error_code(), 7);
        assert_eq!(out.msg(), "Required prevResult missing");

        let mut elsewhere = prev.clone();
        elsewhere["interfaces"][0]["sandbox"] = serde_json::json!("/run/netns/other");
        let out = self.run("CHECK", &with_prev(conf, &elsewhere));
        assert_eq!(out.error_code(), 999);
        assert!(
            out.msg()
                .starts_with("Sandbox in prevResult /run/netns/other doesn't match"),
            "{}",
            out.msg()
        );
        prev
    }

    /// ADD of `conf` into a pod namespace that is gone (3) or a path that
    /// is no namespace (4) fails naming it, before IPAM: nothing left.
    pub fn assert_add_needs_the_netns(&self, conf: &Value) {
        for (netns, code) in [("/run/netns/cnitest-gone", 3), ("/etc/hostname", 4)] {
            let out = PluginCall::new("ADD")
                .attachment(self.container_id, netns.as_ref(), self.ifname)
                .stdin_json(conf)
                .in_netns(&self.host)
                .run(&self.plugin);
            assert_eq!(out.error_code(), code, "{netns}: {}", out.stdout);
            assert!(
                out.msg().starts_with("failed to open netns"),
                "{netns}: {}",
                out.stdout
            );
            self.assert_nothing_left();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_names_whole_addresses_and_ids_only() {
        let line = "-A CNI-DN-1a2b -d 10.1.0.1/32 -p tcp -m comment --comment \"id: 1a2b\" -j DNAT";
        assert!(rule_names(line, "10.1.0.1"));
        assert!(rule_names(line, "1a2b"));
        assert!(!rule_names(line, "10.1.0.10"));
        assert!(!rule_names(line, "10.1.0"));
        assert!(!rule_names(line, "1a2"));
        assert!(!rule_names("ip saddr 10.1.0.10 accept", "10.1.0.1"));
    }

    #[test]
    fn missing_tools_names_what_does_not_run_or_exist() {
        let missing = missing_tools(
            &[
                ("true", "ignored"),
                ("cnitest-no-such-program", "--version"),
            ],
            &[
                ("an existing file", "/proc/self/status"),
                ("no-such-package", "/nonexistent/cnitest"),
            ],
        );
        assert_eq!(missing, vec!["cnitest-no-such-program", "no-such-package"]);
    }
}
