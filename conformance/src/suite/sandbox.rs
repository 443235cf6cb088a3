//! Where the suite's scenarios run: network namespaces it creates (a fake
//! host and pods), private folders, and plugin processes started inside
//! the fake host the way a runtime starts them.
//!
//! Unlike the test helpers of [`crate::testnet`], nothing here panics: a
//! failure to set up becomes an error, which fails the one check that
//! needed it and lets the report go on. Namespace names start with
//! `cnitest-`, so CI's leak check sees any the suite forgets, and every
//! namespace is deleted on drop.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use libcni::invoke::{Exec, InvokeError, PluginEnv, RawExec};
use libcni::netns::NetNs;
use serde_json::Value;

/// How long one plugin run may take before the suite gives up on it.
pub const PLUGIN_TIMEOUT: Duration = Duration::from_secs(60);

/// What went wrong while setting up or running a scenario.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("`{command}` failed: {detail}")]
    Command { command: String, detail: String },
    #[error("cannot run {program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("{program} did not finish within {timeout:?} and was killed")]
    Timeout { program: String, timeout: Duration },
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("netns: {0}")]
    NetNs(#[from] libcni::netns::NetNsError),
    #[error("{0}")]
    Other(String),
}

/// Runs a command and returns its stdout, failing on a non-zero exit.
pub fn run_command(program: &str, args: &[&str]) -> Result<String, SandboxError> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| SandboxError::Spawn {
            program: program.to_string(),
            source,
        })?;
    if !out.status.success() {
        return Err(SandboxError::Command {
            command: format!("{program} {}", args.join(" ")),
            detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A named network namespace (`/run/netns/<name>`), deleted on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates `cnitest-<tag>-<pid>-<n>` with `lo` up.
    pub fn create(tag: &str) -> Result<Netns, SandboxError> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "cnitest-{tag}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        run_command("ip", &["netns", "add", &name])?;
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/run/netns/{}", self.name))
    }

    pub fn path_string(&self) -> String {
        self.path().display().to_string()
    }

    /// `ip -n <ns> <args>`; returns stdout.
    pub fn ip(&self, args: &[&str]) -> Result<String, SandboxError> {
        let mut full = vec!["-n", self.name.as_str()];
        full.extend_from_slice(args);
        run_command("ip", &full)
    }

    /// `ip -n <ns> -j <args>`, parsed.
    pub fn ip_json(&self, args: &[&str]) -> Result<Value, SandboxError> {
        let mut full = vec!["-j"];
        full.extend_from_slice(args);
        let out = self.ip(&full)?;
        if out.trim().is_empty() {
            return Ok(Value::Array(Vec::new()));
        }
        serde_json::from_str(&out)
            .map_err(|e| SandboxError::Other(format!("ip -j {args:?} printed no JSON: {e}")))
    }

    /// Runs a program inside the namespace (`ip netns exec`).
    pub fn exec(&self, program: &str, args: &[&str]) -> Result<String, SandboxError> {
        let mut full = vec!["netns", "exec", self.name.as_str(), program];
        full.extend_from_slice(args);
        run_command("ip", &full)
    }

    /// The link called `name`, as `ip -j link show` describes it.
    pub fn link(&self, name: &str) -> Result<Option<Value>, SandboxError> {
        let links = self.ip_json(&["link", "show"])?;
        Ok(links
            .as_array()
            .and_then(|a| a.iter().find(|l| l["ifname"] == name).cloned()))
    }

    /// Names of the links in the namespace, sorted.
    pub fn link_names(&self) -> Result<Vec<String>, SandboxError> {
        let links = self.ip_json(&["link", "show"])?;
        let mut names: Vec<String> = links
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|l| l["ifname"].as_str().map(str::to_string))
            .collect();
        names.sort();
        Ok(names)
    }

    /// Addresses (`addr/prefix`) of a link, global scope only.
    pub fn addresses(&self, ifname: &str) -> Result<Vec<String>, SandboxError> {
        let out = self.ip_json(&["addr", "show", "dev", ifname, "scope", "global"])?;
        Ok(out
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|l| l["addr_info"].as_array().cloned().unwrap_or_default())
            .filter_map(|a| Some(format!("{}/{}", a["local"].as_str()?, a["prefixlen"])))
            .collect())
    }

    /// Opens the namespace for in-process work (TCP listeners, probes).
    pub fn open(&self) -> Result<NetNs, SandboxError> {
        Ok(NetNs::open(self.path())?)
    }

    /// Deletes the namespace now (a pod whose sandbox went away).
    pub fn delete(self) {
        drop(self)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.name])
            .stderr(Stdio::null())
            .status();
    }
}

/// A private folder under the system temp dir, removed on drop.
#[derive(Debug)]
pub struct WorkDir {
    dir: tempfile::TempDir,
}

impl WorkDir {
    pub fn new(tag: &str) -> Result<WorkDir, SandboxError> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("cni-suite-{tag}-"))
            .tempdir()?;
        Ok(WorkDir { dir })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.dir.path().join(p)
    }
}

/// One exec of a plugin binary with an exact environment, as a runtime
/// does it.
#[derive(Debug, Clone)]
pub struct Call {
    pub env: BTreeMap<String, String>,
    pub stdin: Vec<u8>,
    /// Run inside this namespace (`ip netns exec`): the fake host.
    pub netns: Option<String>,
}

/// What a plugin run printed and how it exited.
#[derive(Debug, Clone)]
pub struct Reply {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Reply {
    /// The success result: exit 0 and one JSON object on stdout.
    pub fn result(&self) -> Result<Value, String> {
        if self.code != 0 {
            return Err(format!(
                "exit {}: {}{}",
                self.code,
                self.stdout.trim(),
                stderr_tail(&self.stderr)
            ));
        }
        serde_json::from_str(&self.stdout)
            .map_err(|e| format!("stdout is not JSON ({e}): {:?}", self.stdout))
    }

    /// Exit 0; stdout is not looked at.
    pub fn success(&self) -> Result<(), String> {
        if self.code == 0 {
            Ok(())
        } else {
            Err(format!(
                "exit {}: {}{}",
                self.code,
                self.stdout.trim(),
                stderr_tail(&self.stderr)
            ))
        }
    }

    /// Exit 0 with nothing on stdout (DEL, CHECK, GC, STATUS).
    pub fn silent_success(&self) -> Result<(), String> {
        self.success()?;
        if self.stdout.trim().is_empty() {
            Ok(())
        } else {
            Err(format!("printed {:?} on success", self.stdout.trim()))
        }
    }

    /// The error object of a failed run: non-zero exit and a JSON object
    /// with a numeric `code` and a string `msg` on stdout.
    pub fn error(&self) -> Result<PluginError, String> {
        if self.code == 0 {
            return Err(format!("succeeded: {}", self.stdout.trim()));
        }
        let v: Value = serde_json::from_str(&self.stdout).map_err(|e| {
            format!(
                "exit {} without an error object on stdout ({e}): {:?}{}",
                self.code,
                self.stdout,
                stderr_tail(&self.stderr)
            )
        })?;
        let code = v["code"]
            .as_u64()
            .ok_or_else(|| format!("error object has no numeric code: {v}"))?;
        let msg = v["msg"]
            .as_str()
            .ok_or_else(|| format!("error object has no msg: {v}"))?
            .to_string();
        let details = v["details"].as_str().unwrap_or_default().to_string();
        Ok(PluginError { code, msg, details })
    }
}

fn stderr_tail(stderr: &str) -> String {
    let s = stderr.trim();
    if s.is_empty() {
        return String::new();
    }
    let tail: String = s
        .chars()
        .rev()
        .take(300)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    format!(" (stderr: {tail})")
}

/// A plugin's error object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginError {
    pub code: u64,
    pub msg: String,
    pub details: String,
}

impl PluginError {
    /// `msg` and `details`, as one text to search.
    pub fn text(&self) -> String {
        format!("{} {}", self.msg, self.details)
    }
}

impl Call {
    pub fn new(command: &str) -> Call {
        let mut env = BTreeMap::new();
        if !command.is_empty() {
            env.insert("CNI_COMMAND".to_string(), command.to_string());
        }
        // The scenarios keep state (tuning's dataDir, ...) in scratch
        // folders, which the tests' node policy allows.
        env.insert(
            libcni::confine::POLICY_ENV.to_string(),
            crate::testnet::scratch_policy().display().to_string(),
        );
        Call {
            env,
            stdin: Vec::new(),
            netns: None,
        }
    }

    pub fn var(mut self, key: &str, value: impl Into<String>) -> Call {
        self.env.insert(key.to_string(), value.into());
        self
    }

    pub fn without(mut self, key: &str) -> Call {
        self.env.remove(key);
        self
    }

    pub fn stdin_json(mut self, conf: &Value) -> Call {
        self.stdin = serde_json::to_vec(conf).unwrap_or_default();
        self
    }

    pub fn stdin_raw(mut self, bytes: &[u8]) -> Call {
        self.stdin = bytes.to_vec();
        self
    }

    pub fn inside(mut self, ns: &Netns) -> Call {
        self.netns = Some(ns.name().to_string());
        self
    }

    /// Runs `plugin` with a cleared environment plus PATH and the call's
    /// variables, killing it after [`PLUGIN_TIMEOUT`].
    pub fn run(&self, plugin: &Path) -> Result<Reply, SandboxError> {
        let mut cmd = match &self.netns {
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
        let child = cmd.spawn().map_err(|source| SandboxError::Spawn {
            program: plugin.display().to_string(),
            source,
        })?;
        wait_with_timeout(
            child,
            &self.stdin,
            PLUGIN_TIMEOUT,
            &plugin.display().to_string(),
        )
    }
}

/// Feeds `stdin`, collects the output, and kills the child after
/// `timeout`.
pub fn wait_with_timeout(
    mut child: Child,
    stdin: &[u8],
    timeout: Duration,
    program: &str,
) -> Result<Reply, SandboxError> {
    if let Some(mut pipe) = child.stdin.take() {
        let input = stdin.to_vec();
        // A plugin may exit without reading its input (VERSION).
        thread::spawn(move || {
            let _ = pipe.write_all(&input);
        });
    }
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let read_all = |pipe: Option<Box<dyn Read + Send>>| {
        thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out_reader = read_all(stdout.map(|p| Box::new(p) as Box<dyn Read + Send>));
    let err_reader = read_all(stderr.map(|p| Box::new(p) as Box<dyn Read + Send>));
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let status = match rx.recv_timeout(timeout) {
        Ok(status) => status?,
        Err(_) => {
            // SAFETY: plain kill(2) on the pid of a child we have not
            // reaped yet (the waiting thread still holds it).
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
            }
            return Err(SandboxError::Timeout {
                program: program.to_string(),
                timeout,
            });
        }
    };
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    Ok(Reply {
        code: status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    })
}

/// Runs plugins for our libcni runtime (`CniConfig`) inside a namespace
/// with `ip netns exec`, as a runtime in that host would: the plugin sees
/// the namespace's links in /sys as well as in netlink.
#[derive(Debug, Clone)]
pub struct NetnsExec {
    netns: String,
    wrapper: PathBuf,
    inner: RawExec,
}

/// The wrapper reads its target from the environment, so one file serves
/// every plugin and namespace.
const WRAPPER_SCRIPT: &str =
    "#!/bin/sh\nexec ip netns exec \"$CNI_SUITE_NETNS\" \"$CNI_SUITE_PLUGIN\"\n";

impl NetnsExec {
    /// `work` is where the wrapper script is written.
    pub fn new(netns: &Netns, work: &Path) -> Result<NetnsExec, SandboxError> {
        use std::os::unix::fs::PermissionsExt;
        let wrapper = work.join("in-netns.sh");
        if !wrapper.exists() {
            std::fs::write(&wrapper, WRAPPER_SCRIPT)?;
            std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))?;
        }
        Ok(NetnsExec {
            netns: netns.name().to_string(),
            wrapper,
            inner: RawExec::new()
                .with_timeout(PLUGIN_TIMEOUT)
                .with_forward_stderr(false),
        })
    }
}

impl Exec for NetnsExec {
    fn exec_plugin(
        &self,
        plugin_path: &Path,
        stdin: &[u8],
        env: &PluginEnv,
    ) -> Result<Vec<u8>, InvokeError> {
        let mut env = env.clone();
        env.set("CNI_SUITE_NETNS", OsString::from(&self.netns));
        env.set("CNI_SUITE_PLUGIN", plugin_path.as_os_str().to_os_string());
        if env.get("PATH").is_none() {
            env.set("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
        }
        self.inner.exec_plugin(&self.wrapper, stdin, &env)
    }
}

/// A TCP server in a namespace that answers every connection with `token`
/// and stops when dropped.
pub struct TcpResponder {
    stop: mpsc::Sender<()>,
    handle: Option<thread::JoinHandle<()>>,
}

impl TcpResponder {
    /// Listens on `0.0.0.0:port` (and nothing else) inside `ns`.
    pub fn start(ns: &Netns, port: u16, token: &str) -> Result<TcpResponder, SandboxError> {
        let netns = ns.open()?;
        let listener = netns
            .run(move || TcpListener::bind(("0.0.0.0", port)))?
            .map_err(|e| SandboxError::Other(format!("cannot listen on port {port}: {e}")))?;
        listener.set_nonblocking(true)?;
        let (stop, stopped) = mpsc::channel::<()>();
        let token = token.to_string();
        let handle = thread::spawn(move || loop {
            match stopped.recv_timeout(Duration::from_millis(5)) {
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                _ => return,
            }
            while let Ok((mut conn, _)) = listener.accept() {
                let _ = conn.set_nonblocking(false);
                let _ = conn.write_all(token.as_bytes());
            }
        });
        Ok(TcpResponder {
            stop,
            handle: Some(handle),
        })
    }
}

impl Drop for TcpResponder {
    fn drop(&mut self) {
        let _ = self.stop.send(());
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Connects from `ns` to `addr:port` and returns what the server sent
/// before closing, or why it failed.
pub fn tcp_fetch(ns: &Netns, addr: IpAddr, port: u16) -> Result<String, String> {
    let netns = ns.open().map_err(|e| e.to_string())?;
    netns
        .run(move || {
            let target = SocketAddr::new(addr, port);
            let mut conn = TcpStream::connect_timeout(&target, Duration::from_secs(3))
                .map_err(|e| format!("connect {target}: {e}"))?;
            let _ = conn.set_read_timeout(Some(Duration::from_secs(3)));
            let mut got = String::new();
            conn.read_to_string(&mut got)
                .map_err(|e| format!("read from {target}: {e}"))?;
            Ok(got)
        })
        .map_err(|e| e.to_string())?
}

/// Whether this kernel lets a bridge filter VLANs
/// (CONFIG_BRIDGE_VLAN_FILTERING): tried on a bridge in a scratch namespace.
pub fn kernel_has_bridge_vlan_filtering() -> Result<bool, SandboxError> {
    let ns = Netns::create("vlanprobe")?;
    Ok(ns
        .ip(&[
            "link",
            "add",
            "probe0",
            "type",
            "bridge",
            "vlan_filtering",
            "1",
        ])
        .is_ok())
}

/// Whether this kernel can make a link of `link_type` (what follows `type`
/// in `ip link add`, such as `["ipvlan", "mode", "l2"]`): tried on a veth
/// parent in a scratch namespace. `Ok(false)` only when the kernel says it
/// knows no such type; any other failure is an error, since then the
/// probe tells nothing.
pub fn kernel_makes_link(link_type: &[&str]) -> Result<bool, SandboxError> {
    let ns = Netns::create("linkprobe")?;
    ns.ip(&[
        "link", "add", "probe0", "type", "veth", "peer", "name", "probe1",
    ])?;
    let mut args = vec!["link", "add", "link", "probe0", "name", "probe2", "type"];
    args.extend_from_slice(link_type);
    match ns.ip(&args) {
        Ok(_) => Ok(true),
        Err(SandboxError::Command { detail, .. }) if detail.contains("Unknown device type") => {
            Ok(false)
        }
        Err(e) => Err(e),
    }
}
