//! Shared by the resilience tests: a fake host namespace with the chain a
//! Kubernetes node runs (our bridge with `ipMasq`, host-local, portmap with
//! one mapping), driven through our runtime (`libcni::runtime::CniConfig`)
//! with every plugin started inside the fake host by `ip netns exec`, so the
//! bridge, rules and sysctls live there and never in the machine's own
//! namespace.
//!
//! Plugins run through [`HostExec`], which can SIGKILL a call at a chosen
//! moment, with everything the plugin started (host-local, iptables). After
//! a test, [`TestHost::leftovers`] lists what an attachment left behind:
//! leases, index entries, veths, bridge ports, firewall rules, cache files.
//!
//! Randomness is a seeded generator ([`Rng`]): a run is repeated exactly by
//! setting `RESILIENCE_SEED` to the seed it printed. `RESILIENCE_LONG=1`
//! selects the long variants (more trials, more pods).

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex, Once};
use std::thread;
use std::time::{Duration, Instant};

use conformance::testnet::{bin_dir, TestNetns};
use libcni::conf::{conflist_from_bytes, NetworkConfigList};
use libcni::error::CniError;
use libcni::invoke::{Exec, ExitStatus, InvokeError, PluginEnv};
use libcni::runtime::{CniConfig, GcArgs, RuntimeConf, RuntimeError};
use libcni::types::AnyResult;
use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitid, waitpid, Id, WaitPidFlag};
use nix::unistd::Pid;
use serde_json::{json, Value};

/// The network every resilience test attaches to.
pub const NETWORK: &str = "resnet";
pub const BRIDGE: &str = "cnires0";
pub const IFNAME: &str = "eth0";

/// A plugin call that has not finished after this long is hung: it is
/// killed and the test fails, instead of the test hanging.
pub const HANG_GUARD: Duration = Duration::from_secs(120);

/// `RESILIENCE_LONG=1`: the long variants.
pub fn long_mode() -> bool {
    std::env::var("RESILIENCE_LONG").is_ok_and(|v| v == "1")
}

/// `default` in a normal run, `long` under `RESILIENCE_LONG=1`; an explicit
/// `var` in the environment overrides both.
pub fn count(var: &str, default: usize, long: usize) -> usize {
    if let Some(n) = std::env::var(var).ok().and_then(|v| v.parse().ok()) {
        return n;
    }
    if long_mode() {
        long
    } else {
        default
    }
}

/// splitmix64: small, seeded, and the same on every machine.
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// The seed of `RESILIENCE_SEED` (decimal or 0x-hex) or `default`,
    /// printed so that a failing run can be repeated.
    pub fn from_env(test: &str, default: u64) -> Rng {
        let seed = std::env::var("RESILIENCE_SEED")
            .ok()
            .and_then(|s| match s.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16).ok(),
                None => s.parse().ok(),
            })
            .unwrap_or(default);
        println!("{test}: RESILIENCE_SEED={seed:#x}");
        Rng { state: seed }
    }

    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in `[0, max]`, at microsecond resolution.
    pub fn duration_up_to(&mut self, max: Duration) -> Duration {
        let micros = u64::try_from(max.as_micros()).unwrap_or(u64::MAX);
        Duration::from_micros(self.below(micros.saturating_add(1)))
    }
}

/// Fails early, with the fix, when the plugins are not built.
pub fn require_plugins() {
    for plugin in ["bridge", "host-local", "portmap"] {
        let path = bin_dir().join(plugin);
        assert!(
            path.exists(),
            "{} is missing: run `cargo build --workspace --bins` first",
            path.display()
        );
    }
}

/// Makes this process the reaper of the plugin processes it kills: a
/// killed plugin's children (host-local, iptables) are reparented here
/// rather than to an init that may never reap them.
fn become_subreaper() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: PR_SET_CHILD_SUBREAPER takes an integer flag and no
        // pointers.
        let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        assert_eq!(rc, 0, "prctl(PR_SET_CHILD_SUBREAPER)");
    });
}

/// Which firewall both plugins write through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Backend {
    Iptables,
    Nftables,
}

impl Backend {
    pub const ALL: [Backend; 2] = [Backend::Iptables, Backend::Nftables];

    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Iptables => "iptables",
            Backend::Nftables => "nftables",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Runs each plugin inside the fake host (`ip netns exec`, which also gives
/// it the host's /sys), and SIGKILLs it with its whole process tree at the
/// armed deadline.
pub struct HostExec {
    host: String,
    /// Enter the mount namespace of this process first (`nsenter -m`).
    mount_ns_of: Option<u32>,
    deadline: Mutex<Option<Instant>>,
    kills: AtomicUsize,
}

impl HostExec {
    pub fn new(host: &TestNetns, mount_ns_of: Option<u32>) -> HostExec {
        become_subreaper();
        HostExec {
            host: host.name().to_string(),
            mount_ns_of,
            deadline: Mutex::new(None),
            kills: AtomicUsize::new(0),
        }
    }

    /// `[nsenter -t <pid> -m] ip netns exec <host>`: every program here
    /// execs the next, so the plugin keeps the pid we spawned.
    fn command(&self) -> Command {
        let mut cmd = match self.mount_ns_of {
            Some(pid) => {
                let mut c = Command::new("nsenter");
                c.args(["-t", &pid.to_string(), "-m", "ip"]);
                c
            }
            None => Command::new("ip"),
        };
        cmd.args(["netns", "exec", &self.host]);
        cmd
    }

    /// Plugins still running at `deadline` are killed from now on.
    pub fn arm(&self, deadline: Instant) {
        *self.deadline.lock().unwrap() = Some(deadline);
    }

    pub fn disarm(&self) {
        *self.deadline.lock().unwrap() = None;
    }

    /// How many plugin calls were killed so far.
    pub fn kills(&self) -> usize {
        self.kills.load(Ordering::SeqCst)
    }
}

impl Exec for HostExec {
    fn exec_plugin(
        &self,
        plugin_path: &Path,
        stdin: &[u8],
        env: &PluginEnv,
    ) -> Result<Vec<u8>, InvokeError> {
        let armed = *self.deadline.lock().unwrap();
        let mut child = self
            .command()
            .arg(plugin_path)
            .env_clear()
            .envs(env.iter())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| InvokeError::Spawn {
                path: plugin_path.to_path_buf(),
                source,
            })?;
        let pid = Pid::from_raw(child.id() as i32);
        let mut input = child.stdin.take().unwrap();
        let stdin = stdin.to_vec();
        let writer = thread::spawn(move || {
            let _ = input.write_all(&stdin);
        });
        let stdout = PipeReader::start(child.stdout.take().unwrap());
        let stderr = PipeReader::start(child.stderr.take().unwrap());
        // Waits without reaping, so the pid stays ours until we kill.
        let (exited_tx, exited) = mpsc::channel();
        thread::spawn(move || loop {
            match waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {
                Err(Errno::EINTR) => continue,
                _ => {
                    let _ = exited_tx.send(());
                    return;
                }
            }
        });
        let deadline = armed.unwrap_or_else(|| Instant::now() + HANG_GUARD);
        let waited = exited.recv_timeout(deadline.saturating_duration_since(Instant::now()));
        if waited.is_err() {
            let descendants = kill_tree(pid);
            let _ = child.wait();
            reap(&descendants);
            let _ = writer.join();
            if armed.is_none() {
                panic!(
                    "{} hung for {HANG_GUARD:?}; stderr: {}",
                    plugin_path.display(),
                    String::from_utf8_lossy(&stderr.join(plugin_path))
                );
            }
            self.kills.fetch_add(1, Ordering::SeqCst);
            return Err(InvokeError::Timeout {
                path: plugin_path.to_path_buf(),
                timeout: Duration::ZERO,
            });
        }
        let status = child.wait().map_err(|source| InvokeError::Io {
            path: plugin_path.to_path_buf(),
            source,
        })?;
        let _ = writer.join();
        let stdout = stdout.join(plugin_path);
        let stderr = stderr.join(plugin_path);
        if status.success() {
            return Ok(stdout);
        }
        let exit = match (status.code(), status.signal()) {
            (Some(code), _) => ExitStatus::Code(code),
            (None, Some(signal)) => ExitStatus::Signal(signal),
            (None, None) => ExitStatus::Code(-1),
        };
        match serde_json::from_slice::<CniError>(&stdout) {
            Ok(e) => Err(InvokeError::Plugin(e)),
            Err(_) => Err(InvokeError::FailedWithStderr {
                stderr: String::from_utf8_lossy(&stderr).into_owned(),
                status: exit,
            }),
        }
    }
}

/// How long a pipe may stay open after the plugin exited: only a process
/// the plugin left running could hold it, which is a finding in itself.
const PIPE_GRACE: Duration = Duration::from_secs(5);

/// Reads a pipe to its end on a thread of its own.
struct PipeReader(mpsc::Receiver<Vec<u8>>);

impl PipeReader {
    fn start<R: Read + Send + 'static>(mut pipe: R) -> PipeReader {
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let mut out = Vec::new();
            let _ = pipe.read_to_end(&mut out);
            let _ = tx.send(out);
        });
        PipeReader(rx)
    }

    /// Everything read, once the pipe closed.
    fn join(self, plugin: &Path) -> Vec<u8> {
        self.0.recv_timeout(PIPE_GRACE).unwrap_or_else(|_| {
            panic!(
                "{} exited but something it started still holds its output",
                plugin.display()
            )
        })
    }
}

/// Parent of every process, from /proc.
fn parents() -> BTreeMap<i32, i32> {
    let mut out = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": comm may hold spaces and parens.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        if let Some(ppid) = ppid {
            out.insert(pid, ppid);
        }
    }
    out
}

/// Stops `root` and every process below it, parents before children (a
/// stopped parent cannot reap, so no pid of the tree can be reused while
/// we look), then SIGKILLs them all. Returns the descendants.
fn kill_tree(root: Pid) -> Vec<Pid> {
    let _ = kill(root, Signal::SIGSTOP);
    let mut tree: BTreeSet<i32> = BTreeSet::from([root.as_raw()]);
    let mut quiet_rounds = 0;
    while quiet_rounds < 2 {
        let children: Vec<i32> = parents()
            .into_iter()
            .filter(|(pid, ppid)| tree.contains(ppid) && !tree.contains(pid))
            .map(|(pid, _)| pid)
            .collect();
        if children.is_empty() {
            quiet_rounds += 1;
            // A fork racing the stop shows up on the next look.
            thread::sleep(Duration::from_millis(1));
            continue;
        }
        quiet_rounds = 0;
        for pid in children {
            let _ = kill(Pid::from_raw(pid), Signal::SIGSTOP);
            tree.insert(pid);
        }
    }
    for pid in &tree {
        let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
    }
    tree.into_iter()
        .filter(|p| *p != root.as_raw())
        .map(Pid::from_raw)
        .collect()
}

/// Reaps killed descendants once they have been reparented to us.
fn reap(pids: &[Pid]) {
    for pid in pids {
        for _ in 0..1000 {
            match waitpid(*pid, None) {
                Err(Errno::EINTR) => continue,
                Err(Errno::ECHILD) => thread::sleep(Duration::from_millis(1)),
                _ => break,
            }
        }
    }
}

/// How one ADD ended.
#[derive(Debug)]
pub enum AddOutcome {
    Completed(AnyResult),
    Killed,
    Failed(RuntimeError),
}

/// The configuration of the chain under test.
#[derive(Debug, Clone)]
pub struct ChainConf {
    pub subnet: String,
    pub data_dir: PathBuf,
    pub backend: Backend,
    pub ip_masq: bool,
    pub portmap: bool,
    /// host-local's `lockTimeoutMs`, when set.
    pub lock_timeout_ms: Option<u64>,
}

impl ChainConf {
    pub fn conflist(&self) -> Value {
        let mut ipam = json!({
            "type": "host-local",
            "ranges": [[{"subnet": self.subnet}]],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": self.data_dir,
        });
        if let Some(ms) = self.lock_timeout_ms {
            ipam["lockTimeoutMs"] = json!(ms);
        }
        let mut plugins = vec![json!({
            "type": "bridge",
            "bridge": BRIDGE,
            "isGateway": true,
            "ipMasq": self.ip_masq,
            "ipMasqBackend": self.backend.as_str(),
            "ipam": ipam,
        })];
        if self.portmap {
            plugins.push(json!({
                "type": "portmap",
                "capabilities": {"portMappings": true},
                "backend": self.backend.as_str(),
                "snat": true,
            }));
        }
        json!({"cniVersion": "1.1.0", "name": NETWORK, "plugins": plugins})
    }

    pub fn list(&self) -> NetworkConfigList {
        conflist_from_bytes(&serde_json::to_vec(&self.conflist()).unwrap()).unwrap()
    }
}

/// How a [`TestHost`] is set up.
#[derive(Debug, Clone)]
pub struct HostOptions {
    pub tag: String,
    /// A /24 or larger.
    pub subnet: String,
    pub portmap: bool,
    pub ip_masq: bool,
    pub lock_timeout_ms: Option<u64>,
    /// The environment plugins inherit instead of this process's.
    pub base_env: Option<PluginEnv>,
    /// Plugins run in the mount namespace of this process (where the
    /// lease store may be a small tmpfs); the test reads the store through
    /// `/proc/<pid>/root`.
    pub mount_ns_of: Option<u32>,
    /// The lease store's data folder (default: in the host's work folder).
    pub data_dir: Option<PathBuf>,
}

impl HostOptions {
    pub fn new(tag: &str, subnet: &str) -> HostOptions {
        HostOptions {
            tag: tag.to_string(),
            subnet: subnet.to_string(),
            portmap: true,
            ip_masq: true,
            lock_timeout_ms: None,
            base_env: None,
            mount_ns_of: None,
            data_dir: None,
        }
    }
}

/// A fake host with the chain's network, its lease store and its runtime.
pub struct TestHost {
    pub host: TestNetns,
    pub work: tempfile::TempDir,
    pub exec: std::sync::Arc<HostExec>,
    pub cni: CniConfig,
    pub subnet: String,
    options: HostOptions,
    lists: BTreeMap<Backend, NetworkConfigList>,
}

impl TestHost {
    /// A fresh fake host with the whole chain.
    pub fn new(tag: &str, subnet: &str) -> TestHost {
        TestHost::with_options(HostOptions::new(tag, subnet))
    }

    pub fn with_options(options: HostOptions) -> TestHost {
        require_plugins();
        let host = TestNetns::new(&options.tag);
        let work = tempfile::tempdir().unwrap();
        let exec = std::sync::Arc::new(HostExec::new(&host, options.mount_ns_of));
        // The scratch dataDir is allowed by the tests' node policy
        // (host-local's and tuning's dataDir are confined, issue 28).
        let mut env = options
            .base_env
            .clone()
            .unwrap_or_else(PluginEnv::from_process);
        env.set(
            libcni::confine::POLICY_ENV,
            conformance::testnet::scratch_policy(),
        );
        let cni = CniConfig::with_exec(vec![bin_dir()], exec.clone())
            .with_cache_dir(work.path().join("cache"))
            .with_base_env(env);
        let mut test_host = TestHost {
            host,
            work,
            exec,
            cni,
            subnet: options.subnet.clone(),
            options,
            lists: BTreeMap::new(),
        };
        for backend in Backend::ALL {
            let list = test_host.chain_conf(backend).list();
            test_host.lists.insert(backend, list);
        }
        test_host
    }

    /// The chain of this host with `backend`; change it and call
    /// [`ChainConf::list`] for a variant.
    pub fn chain_conf(&self, backend: Backend) -> ChainConf {
        ChainConf {
            subnet: self.subnet.clone(),
            data_dir: self.data_dir(),
            backend,
            ip_masq: self.options.ip_masq,
            portmap: self.options.portmap,
            lock_timeout_ms: self.options.lock_timeout_ms,
        }
    }

    pub fn list(&self, backend: Backend) -> &NetworkConfigList {
        &self.lists[&backend]
    }

    pub fn data_dir(&self) -> PathBuf {
        match &self.options.data_dir {
            Some(dir) => dir.clone(),
            None => self.work.path().join("leases"),
        }
    }

    /// The lease store as this process sees it (through the plugins'
    /// mount namespace when they have their own).
    pub fn store_dir(&self) -> PathBuf {
        let store = self.data_dir().join(NETWORK);
        match self.options.mount_ns_of {
            Some(pid) => {
                Path::new(&format!("/proc/{pid}/root")).join(store.strip_prefix("/").unwrap())
            }
            None => store,
        }
    }

    pub fn cache_dir(&self) -> PathBuf {
        self.work.path().join("cache")
    }

    /// The attachment of `container_id` in `pod`, with one port mapping.
    pub fn runtime_conf(&self, container_id: &str, pod: &TestNetns, host_port: u16) -> RuntimeConf {
        let mut rt = RuntimeConf {
            container_id: container_id.to_string(),
            netns: pod.path().display().to_string(),
            ifname: IFNAME.to_string(),
            ..RuntimeConf::default()
        };
        rt.capability_args.insert(
            "portMappings".into(),
            json!([{"hostPort": host_port, "containerPort": 80, "protocol": "tcp"}]),
        );
        rt
    }

    pub fn add(&self, backend: Backend, rt: &RuntimeConf) -> Result<AnyResult, RuntimeError> {
        self.cni.add_network_list(self.list(backend), rt)
    }

    /// ADD, with every plugin still running `after` its start killed.
    pub fn add_killed_after(
        &self,
        backend: Backend,
        rt: &RuntimeConf,
        after: Duration,
    ) -> AddOutcome {
        let kills = self.exec.kills();
        self.exec.arm(Instant::now() + after);
        let outcome = self.add(backend, rt);
        self.exec.disarm();
        match outcome {
            Ok(result) => AddOutcome::Completed(result),
            Err(_) if self.exec.kills() > kills => AddOutcome::Killed,
            Err(e) => AddOutcome::Failed(e),
        }
    }

    pub fn del(&self, backend: Backend, rt: &RuntimeConf) -> Result<(), RuntimeError> {
        self.cni.del_network_list(self.list(backend), rt)
    }

    /// GC keeping only `valid` (container IDs on `eth0`).
    pub fn gc(&self, backend: Backend, valid: &[&str]) -> Result<(), RuntimeError> {
        let args = GcArgs {
            valid_attachments: valid
                .iter()
                .map(|id| libcni::runtime::GcAttachment {
                    container_id: id.to_string(),
                    ifname: IFNAME.to_string(),
                })
                .collect(),
        };
        self.cni.gc_network_list(self.list(backend), Some(&args))
    }

    /// Runs a program in the fake host; returns stdout, asserting success.
    pub fn run_in_host(&self, program: &str, args: &[&str]) -> String {
        let out = self.host.exec(program, args);
        assert!(
            out.status.success(),
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The firewall as text: both iptables families (every table, nft and
    /// legacy) and the nftables ruleset, without the dumps' comments.
    pub fn firewall(&self) -> String {
        let mut text = String::new();
        // The legacy tables too: a test may point the plugins at them.
        for program in [
            "iptables-save",
            "ip6tables-save",
            "iptables-legacy-save",
            "ip6tables-legacy-save",
        ] {
            for line in self.run_in_host(program, &[]).lines() {
                if line.starts_with('#') {
                    continue;
                }
                text.push_str(program);
                text.push_str(": ");
                text.push_str(line);
                text.push('\n');
            }
        }
        for line in self.run_in_host("nft", &["list", "ruleset"]).lines() {
            text.push_str("nft: ");
            text.push_str(line.trim());
            text.push('\n');
        }
        text
    }

    /// Chain names in the firewall dump (iptables `:NAME` lines and nft
    /// `chain NAME {` lines), per family.
    pub fn chains(firewall: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for line in firewall.lines() {
            let Some((program, rest)) = line.split_once(": ") else {
                continue;
            };
            if let Some(chain) = rest.strip_prefix(':') {
                if let Some(name) = chain.split_whitespace().next() {
                    out.insert(format!("{program} {name}"));
                }
            } else if let Some(chain) = rest.strip_prefix("chain ") {
                if let Some(name) = chain.split_whitespace().next() {
                    out.insert(format!("{program} {name}"));
                }
            }
        }
        out
    }

    /// After a pod netns is deleted the kernel destroys its veth pair
    /// asynchronously: waits (a bounded time) until no veth is left in the
    /// host. One that stays is reported by [`TestHost::leftovers`].
    pub fn wait_for_veths_gone(&self) {
        conformance::testnet::kernel_settles(|| self.host_veths().is_empty());
    }

    pub fn host_veths(&self) -> Vec<String> {
        self.host
            .links()
            .into_iter()
            .filter(|l| l.starts_with("veth"))
            .collect()
    }

    pub fn bridge_ports(&self) -> Vec<String> {
        if !self.host.links().iter().any(|l| l == BRIDGE) {
            return Vec::new();
        }
        self.host
            .ip_json(&["link", "show", "master", BRIDGE])
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|l| l["ifname"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Lease files (names that are addresses) with their content.
    pub fn leases(&self) -> BTreeMap<String, String> {
        let Ok(dir) = std::fs::read_dir(self.store_dir()) else {
            return BTreeMap::new();
        };
        dir.flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.parse::<std::net::IpAddr>().ok()?;
                let content = std::fs::read_to_string(e.path()).unwrap_or_default();
                Some((name, content))
            })
            .collect()
    }

    /// Files of the store other than leases and the files every store
    /// keeps (`lock`, `last_reserved_ip.*`, the index folder and its
    /// stamp): index entries, temporary files.
    pub fn stray_store_files(&self) -> Vec<String> {
        let mut out = Vec::new();
        let Ok(dir) = std::fs::read_dir(self.store_dir()) else {
            return out;
        };
        for entry in dir.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == "lock"
                || name.starts_with("last_reserved_ip.")
                || name.parse::<std::net::IpAddr>().is_ok()
            {
                continue;
            }
            if name == ".host-local-index" && entry.path().is_dir() {
                for inner in std::fs::read_dir(entry.path()).unwrap().flatten() {
                    let inner = inner.file_name().to_string_lossy().into_owned();
                    // `tmp` is the index's scratch file, rewritten by the
                    // next entry update; a kill can leave it, harmlessly.
                    if inner != "stamp" && inner != "tmp" {
                        out.push(format!("{name}/{inner}"));
                    }
                }
                continue;
            }
            out.push(name);
        }
        out.sort();
        out
    }

    pub fn cache_files(&self) -> Vec<String> {
        let Ok(dir) = std::fs::read_dir(self.cache_dir().join("results")) else {
            return Vec::new();
        };
        let mut out: Vec<String> = dir
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        out.sort();
        out
    }

    /// What the attachments of `container_ids` left while others are
    /// live: leases, index entries and cache files naming them, firewall
    /// lines mentioning them. (Veths and bridge ports name no container:
    /// count them instead.)
    pub fn leftovers_of(&self, container_ids: &[&str]) -> Vec<String> {
        let names = |s: &str| container_ids.iter().any(|id| s.contains(id));
        let mut out = Vec::new();
        for (ip, holder) in self.leases() {
            if names(&holder) {
                out.push(format!("lease {ip} held by {holder:?}"));
            }
        }
        for file in self
            .stray_store_files()
            .into_iter()
            .chain(self.cache_files())
        {
            if names(&file) {
                out.push(format!("file {file}"));
            }
        }
        for line in self.firewall().lines() {
            if names(line) {
                out.push(format!("rule {line}"));
            }
        }
        out
    }

    /// Everything attachments left behind, as readable lines: leases,
    /// stray store files, veths and bridge ports, cache files, firewall
    /// lines naming one of `container_ids` or the pod subnet, and chains
    /// that are not in `baseline_chains`. Empty when nothing is left.
    pub fn leftovers(
        &self,
        container_ids: &[&str],
        baseline_chains: &BTreeSet<String>,
    ) -> Vec<String> {
        let mut out = Vec::new();
        for (ip, holder) in self.leases() {
            out.push(format!("lease {ip} held by {holder:?}"));
        }
        for file in self.stray_store_files() {
            out.push(format!("store file {file}"));
        }
        for veth in self.host_veths() {
            out.push(format!("host veth {veth}"));
        }
        for port in self.bridge_ports() {
            out.push(format!("bridge port {port}"));
        }
        for file in self.cache_files() {
            out.push(format!("cache file {file}"));
        }
        let firewall = self.firewall();
        let subnet_prefix = subnet_text_prefix(&self.subnet);
        for line in firewall.lines() {
            if container_ids.iter().any(|id| line.contains(id)) || line.contains(&subnet_prefix) {
                out.push(format!("rule {line}"));
            }
        }
        for chain in TestHost::chains(&firewall).difference(baseline_chains) {
            out.push(format!("chain {chain}"));
        }
        out
    }
}

/// "10.231.0.0/24" -> "10.231.0." : the text every address of the subnet
/// starts with.
pub fn subnet_text_prefix(subnet: &str) -> String {
    let addr = subnet.split('/').next().unwrap_or(subnet);
    let mut parts: Vec<&str> = addr.split('.').collect();
    parts.pop();
    format!("{}.", parts.join("."))
}

/// The IPv4 addresses (without prefix) of a result.
pub fn result_ips(result: &AnyResult) -> Vec<String> {
    result.to_value()["ips"]
        .as_array()
        .map(|ips| {
            ips.iter()
                .filter_map(|ip| ip["address"].as_str())
                .map(|a| a.split('/').next().unwrap_or(a).to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The median of a few durations.
pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}
