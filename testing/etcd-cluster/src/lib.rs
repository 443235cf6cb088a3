//! A throw-away etcd cluster for tests: real `/usr/bin/etcd` members as child
//! processes on loopback ports, data and logs in a temp dir, optionally with
//! TLS (certificates made with the openssl CLI) and auth (user and password).
//!
//! ```no_run
//! use etcd_cluster::{ClusterOptions, EtcdCluster};
//! let mut cluster = EtcdCluster::start(3, ClusterOptions::default())?;
//! cluster.etcdctl(&["put", "/x/a", "1"])?;
//! cluster.kill(0)?;
//! cluster.wait_writable()?; // member 0 may have led: wait for a new leader
//! assert!(cluster.etcdctl(&["get", "--prefix", "/x"])?.contains("/x/a"));
//! cluster.restart(0)?;
//! # Ok::<(), etcd_cluster::HarnessError>(())
//! ```
//!
//! Readiness is a write: after start and restarts the harness has put
//! [`READY_KEY`] through each member, so the key exists and the revision has
//! moved on; keep test data under its own prefix.
//!
//! No member outlives the cluster: `Drop` kills and reaps every member (also
//! when a test panics), and each member gets `PR_SET_PDEATHSIG=SIGKILL` so the
//! kernel kills it should the test process itself be killed.

mod tls;

use std::fs::{self, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tempfile::TempDir;

pub use tls::{TlsFiles, CLIENT_CN};

const ETCD: &str = "/usr/bin/etcd";
const ETCDCTL: &str = "/usr/bin/etcdctl";
/// How long a start or restart may take until writes are served.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// Whole-cluster starts tried when a member finds its port taken (the port
/// was free when picked, but anything may bind it before etcd does).
const START_ATTEMPTS: u32 = 3;
/// etcdctl's `--dial-timeout` and `--command-timeout`.
type Timeouts = (Duration, Duration);
/// etcdctl's own defaults.
const NORMAL: Timeouts = (Duration::from_secs(2), Duration::from_secs(5));
/// The key the readiness polls write (each write is a new revision).
pub const READY_KEY: &str = "/etcd-cluster/ready";
/// Lines of each member's log shown in an error.
const LOG_TAIL_LINES: usize = 30;

/// Why the harness failed. Every variant carries enough text to tell from a
/// test's output what went wrong, so callers can just `?` or `expect` it.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error(
        "etcd not found: install Debian's etcd-server and etcd-client (.ci/install-deps does)"
    )]
    EtcdMissing,
    #[error("a cluster needs at least one member")]
    NoMembers,
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    /// A command (etcdctl, openssl) exited unsuccessfully.
    #[error("`{cmd}` failed ({status}): {stderr}")]
    Command {
        cmd: String,
        status: String,
        stderr: String,
    },
    /// The cluster or a member did not serve writes in time; `logs` holds the
    /// tail of every member's log.
    #[error("etcd not ready: {reason}\n{logs}")]
    NotReady { reason: String, logs: String },
    #[error("member {0} does not exist")]
    NoSuchMember(usize),
    #[error("member {0} is not running")]
    NotRunning(usize),
    #[error("member {0} is already running")]
    AlreadyRunning(usize),
}

impl HarnessError {
    fn io(what: impl Into<String>, source: io::Error) -> Self {
        HarnessError::Io {
            what: what.into(),
            source,
        }
    }
}

/// How the cluster is set up; `Default` is plain http without auth.
#[derive(Debug, Clone, Default)]
pub struct ClusterOptions {
    /// https client URLs with client-certificate auth (see [`TlsFiles`]);
    /// peers talk plain http.
    pub tls: bool,
    /// `(user, password)`: after start, the user is created with the root
    /// role and auth is enabled. etcd requires a `root` user for that; if
    /// `user` is not `root`, `root` is created with the same password.
    pub auth: Option<(String, String)>,
    /// A named network namespace (`/run/netns/<name>`, `lo` up) to run
    /// the members and etcdctl in, on that namespace's loopback: for
    /// clients that run inside a test's fake host.
    pub netns: Option<String>,
}

struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    data_dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

/// A running etcd cluster; dropping it kills every member and deletes its
/// data.
pub struct EtcdCluster {
    members: Vec<Member>,
    token: String,
    tls: Option<TlsFiles>,
    auth: Option<(String, String)>,
    /// Whether `etcdctl` must log in: auth is enabled only after start.
    auth_enabled: bool,
    netns: Option<String>,
    // Last: the directory goes after the members are dead (`Drop` runs first).
    dir: TempDir,
}

impl EtcdCluster {
    /// Starts `members` etcd members and waits until each serves a write
    /// through its own endpoint (at most 20 s; the error shows the members'
    /// logs). A port clash restarts the whole cluster on new ports.
    pub fn start(members: usize, opts: ClusterOptions) -> Result<Self, HarnessError> {
        if !Path::new(ETCD).exists() || !Path::new(ETCDCTL).exists() {
            return Err(HarnessError::EtcdMissing);
        }
        if members == 0 {
            return Err(HarnessError::NoMembers);
        }
        let dir = tempfile::Builder::new()
            .prefix("etcd-cluster-")
            .tempdir()
            .map_err(|e| HarnessError::io("creating the cluster's temp dir", e))?;
        let tls = match opts.tls {
            true => Some(TlsFiles::generate(&dir.path().join("tls"))?),
            false => None,
        };
        let mut cluster = EtcdCluster {
            members: Vec::new(),
            token: String::new(),
            tls,
            auth: opts.auth,
            auth_enabled: false,
            netns: opts.netns,
            dir,
        };
        let all: Vec<usize> = (0..members).collect();
        for attempt in 1..=START_ATTEMPTS {
            cluster.members = new_members(cluster.dir.path(), members, attempt)?;
            cluster.token = unique_token();
            match cluster
                .spawn_new()
                .and_then(|()| cluster.wait_serving(&all))
            {
                Ok(()) => break,
                Err(_) if attempt < START_ATTEMPTS && cluster.port_clash() => cluster.stop_all(),
                Err(e) => return Err(e),
            }
        }
        if let Some((user, password)) = cluster.auth.clone() {
            cluster.enable_auth(&user, &password)?;
        }
        Ok(cluster)
    }

    /// The client URLs of all members, running or not, in member order.
    pub fn endpoints(&self) -> Vec<String> {
        (0..self.members.len())
            .map(|i| self.client_url(i))
            .collect()
    }

    /// The client URL of member `i`.
    ///
    /// # Panics
    /// If there is no member `i`.
    pub fn member_endpoint(&self, i: usize) -> String {
        assert!(i < self.members.len(), "member {i} does not exist");
        self.client_url(i)
    }

    /// The certificates when started with `tls`.
    pub fn tls_files(&self) -> Option<&TlsFiles> {
        self.tls.as_ref()
    }

    /// The PID of each member, `None` for one that is killed.
    pub fn pids(&self) -> Vec<Option<u32>> {
        let pid = |m: &Member| m.child.as_ref().map(Child::id);
        self.members.iter().map(pid).collect()
    }

    /// SIGKILLs member `i` and reaps it. Killing the leader stalls writes
    /// until the others elect a new one (about a second), and a request
    /// already forwarded to the dead leader hangs until its timeout: clients
    /// retry, or a test calls [`wait_writable`](EtcdCluster::wait_writable).
    pub fn kill(&mut self, i: usize) -> Result<(), HarnessError> {
        let member = self
            .members
            .get_mut(i)
            .ok_or(HarnessError::NoSuchMember(i))?;
        let mut child = member.child.take().ok_or(HarnessError::NotRunning(i))?;
        let what = format!("killing etcd member {i} (pid {})", child.id());
        child
            .kill()
            .map_err(|e| HarnessError::io(what.clone(), e))?;
        child.wait().map_err(|e| HarnessError::io(what, e))?;
        Ok(())
    }

    /// SIGSTOPs member `i`: it keeps its sockets, so connections to it are
    /// accepted by the kernel and never answered, and the proposals others
    /// forward to it are lost, as with a host behind a partition. Killing
    /// or dropping the cluster still ends it.
    pub fn freeze(&mut self, i: usize) -> Result<(), HarnessError> {
        self.signal(i, libc::SIGSTOP, "freezing")
    }

    /// SIGCONTs a member that [`freeze`](EtcdCluster::freeze) stopped.
    pub fn thaw(&mut self, i: usize) -> Result<(), HarnessError> {
        self.signal(i, libc::SIGCONT, "thawing")
    }

    fn signal(&mut self, i: usize, signal: libc::c_int, what: &str) -> Result<(), HarnessError> {
        let member = self.members.get(i).ok_or(HarnessError::NoSuchMember(i))?;
        let child = member.child.as_ref().ok_or(HarnessError::NotRunning(i))?;
        let pid = libc::pid_t::try_from(child.id()).unwrap_or(libc::pid_t::MAX);
        // SAFETY: kill(2) on our own unreaped child; no memory is involved.
        if unsafe { libc::kill(pid, signal) } != 0 {
            let what = format!("{what} etcd member {i} (pid {pid})");
            return Err(HarnessError::io(what, std::io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Starts killed member `i` again with its data dir and ports. With a
    /// quorum running it waits until the member serves a write through its
    /// endpoint; without one (say the first of three after [`stop_all`]) it
    /// waits only until the member listens: writes need more members back.
    ///
    /// [`stop_all`]: EtcdCluster::stop_all
    pub fn restart(&mut self, i: usize) -> Result<(), HarnessError> {
        let member = self.members.get(i).ok_or(HarnessError::NoSuchMember(i))?;
        if member.child.is_some() {
            return Err(HarnessError::AlreadyRunning(i));
        }
        self.spawn(i, "existing")?;
        let running = self.pids().iter().flatten().count();
        if running > self.members.len() / 2 {
            self.wait_serving(&[i])
        } else {
            self.wait_peer_serving(i)
        }
    }

    /// Waits until every running member serves a write through its own
    /// endpoint (at most 20 s), say after [`kill`](EtcdCluster::kill).
    pub fn wait_writable(&mut self) -> Result<(), HarnessError> {
        let running: Vec<usize> = (0..self.members.len())
            .filter(|&i| self.members[i].child.is_some())
            .collect();
        if running.is_empty() {
            return Err(self.not_ready("no member is running".to_string()));
        }
        self.wait_serving(&running)
    }

    /// Kills every running member.
    pub fn stop_all(&mut self) {
        for member in &mut self.members {
            if let Some(mut child) = member.child.take() {
                // Neither fails for a child we have not reaped yet.
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    /// Starts every killed member again and waits until all serve writes.
    pub fn restart_all(&mut self) -> Result<(), HarnessError> {
        for i in 0..self.members.len() {
            if self.members[i].child.is_none() {
                self.spawn(i, "existing")?;
            }
        }
        self.wait_serving(&(0..self.members.len()).collect::<Vec<_>>())
    }

    /// The running member that is the leader now, if one of them says so
    /// (`etcdctl endpoint status`: its fifth column is IS LEADER).
    pub fn leader(&self) -> Result<Option<usize>, HarnessError> {
        for i in 0..self.members.len() {
            if self.members[i].child.is_none() {
                continue;
            }
            let status = self.etcdctl_on(i, &["endpoint", "status", "-w", "simple"])?;
            let is_leader = status.split(',').nth(4).map(str::trim) == Some("true");
            if is_leader {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    /// Runs `etcdctl` (API v3) against the running members' endpoints, with
    /// the client certificate under TLS and as the auth user once auth is on;
    /// returns its stdout. A non-zero exit is an error carrying stderr.
    pub fn etcdctl(&self, args: &[&str]) -> Result<String, HarnessError> {
        let running: Vec<usize> = (0..self.members.len())
            .filter(|&i| self.members[i].child.is_some())
            .collect();
        let endpoints: Vec<String> = match running.is_empty() {
            true => self.endpoints(),
            false => running.iter().map(|&i| self.client_url(i)).collect(),
        };
        self.run_etcdctl(&endpoints.join(","), args, NORMAL)
    }

    /// Like [`etcdctl`](EtcdCluster::etcdctl), against member `i` only; a
    /// killed member is an error at once rather than after etcdctl's timeout.
    pub fn etcdctl_on(&self, i: usize, args: &[&str]) -> Result<String, HarnessError> {
        let member = self.members.get(i).ok_or(HarnessError::NoSuchMember(i))?;
        if member.child.is_none() {
            return Err(HarnessError::NotRunning(i));
        }
        self.run_etcdctl(&self.client_url(i), args, NORMAL)
    }

    fn run_etcdctl(
        &self,
        endpoints: &str,
        args: &[&str],
        timeouts: Timeouts,
    ) -> Result<String, HarnessError> {
        self.spawn_etcdctl(endpoints, args, timeouts)?.finish()
    }

    fn spawn_etcdctl(
        &self,
        endpoints: &str,
        args: &[&str],
        (dial, command): Timeouts,
    ) -> Result<Etcdctl, HarnessError> {
        let mut cmd = self.command(ETCDCTL);
        cmd.env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={endpoints}"))
            .arg(format!("--dial-timeout={}ms", dial.as_millis()))
            .arg(format!("--command-timeout={}ms", command.as_millis()));
        if let Some(tls) = &self.tls {
            cmd.arg("--cacert").arg(&tls.ca);
            cmd.arg("--cert").arg(&tls.cert);
            cmd.arg("--key").arg(&tls.key);
        }
        if let (true, Some((user, password))) = (self.auth_enabled, &self.auth) {
            cmd.arg(format!("--user={user}"));
            cmd.arg(format!("--password={password}"));
        }
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let shown = format!("etcdctl --endpoints={endpoints} {}", args.join(" "));
        match cmd.spawn() {
            Ok(child) => Ok(Etcdctl { child, shown }),
            Err(e) => Err(HarnessError::io(format!("running {shown}"), e)),
        }
    }

    /// `program`, inside the cluster's namespace when it has one (`ip netns
    /// exec` enters it and execs the program in the same process, so the
    /// PID is the program's).
    fn command(&self, program: &str) -> Command {
        match &self.netns {
            Some(ns) => {
                let mut cmd = Command::new("ip");
                cmd.args(["netns", "exec", ns, program]);
                cmd
            }
            None => Command::new(program),
        }
    }

    fn client_url(&self, i: usize) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.members[i].client_port)
    }

    fn spawn(&mut self, i: usize, state: &str) -> Result<(), HarnessError> {
        let peer_url = |m: &Member| format!("http://127.0.0.1:{}", m.peer_port);
        let initial_cluster: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}={}", m.name, peer_url(m)))
            .collect();
        let client_url = self.client_url(i);
        let m = &self.members[i];
        let log_err = |e| HarnessError::io(format!("opening {}", m.log.display()), e);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&m.log)
            .map_err(log_err)?;
        let log2 = log.try_clone().map_err(log_err)?;
        let mut cmd = self.command(ETCD);
        cmd.arg(format!("--name={}", m.name))
            .arg(format!("--data-dir={}", m.data_dir.display()))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={}", peer_url(m)))
            .arg(format!("--initial-advertise-peer-urls={}", peer_url(m)))
            .arg(format!("--initial-cluster={}", initial_cluster.join(",")))
            .arg(format!("--initial-cluster-state={state}"))
            .arg(format!("--initial-cluster-token={}", self.token))
            .args(["--heartbeat-interval=100", "--election-timeout=1000"])
            .args(["--logger=zap", "--log-outputs=stderr"]);
        if let Some(tls) = &self.tls {
            cmd.arg("--cert-file").arg(&tls.server_cert);
            cmd.arg("--key-file").arg(&tls.server_key);
            cmd.arg("--trusted-ca-file").arg(&tls.ca);
            cmd.arg("--client-cert-auth");
        }
        cmd.stdin(Stdio::null()).stdout(log).stderr(log2);
        let parent = std::process::id();
        // SAFETY: between fork and exec only async-signal-safe calls (prctl,
        // getppid, _exit) run, and nothing is allocated.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // The harness died before the prctl: no signal will come.
                if libc::getppid() as u32 != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        let child = spawn_from_long_lived_thread(cmd)
            .map_err(|e| HarnessError::io(format!("starting {ETCD} as member {i}"), e))?;
        self.members[i].child = Some(child);
        Ok(())
    }

    /// Spawns the members of a new cluster one by one, each once the one
    /// before serves its peers. A new member first asks the others whether
    /// it is in their cluster already, giving each a second: one whose port
    /// is bound but not served yet would cost that second, a closed port or
    /// a serving member costs nothing.
    fn spawn_new(&mut self) -> Result<(), HarnessError> {
        for i in 0..self.members.len() {
            self.spawn(i, "new")?;
            if i + 1 < self.members.len() {
                self.wait_peer_serving(i)?;
            }
        }
        Ok(())
    }

    /// Polls until each member in `which` serves a put through its own
    /// endpoint; fails early when a member exits.
    fn wait_serving(&mut self, which: &[usize]) -> Result<(), HarnessError> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let put = ["put", READY_KEY, "ok"];
        let mut pending = which.to_vec();
        // A put proposed before there is a leader is dropped and waits out
        // its timeout: short ones first (a put takes some 15 ms), doubled
        // on each miss up to 3.2 s for a slow but working machine.
        let mut timeout = Duration::from_millis(200);
        loop {
            self.check_alive(&pending)?;
            // All members at once: one not serving yet holds up no other.
            let poll = |i| self.spawn_etcdctl(&self.client_url(i), &put, (timeout, timeout));
            let polls: Vec<_> = pending.iter().map(|&i| (i, poll(i))).collect();
            let mut last_err = None;
            pending.clear();
            for (i, poll) in polls {
                if let Err(e) = poll.and_then(Etcdctl::finish) {
                    last_err = Some(format!("member {i}: {e}"));
                    pending.push(i);
                }
            }
            let Some(reason) = last_err else {
                return Ok(());
            };
            if Instant::now() > deadline {
                let reason = format!("no write served in {READY_TIMEOUT:?}: {reason}");
                return Err(self.not_ready(reason));
            }
            thread::sleep(Duration::from_millis(50));
            timeout = (timeout * 2).min(Duration::from_millis(3200));
        }
    }

    /// Polls until member `i` answers HTTP on its peer port: it is up, if
    /// not necessarily part of a quorum.
    fn wait_peer_serving(&mut self, i: usize) -> Result<(), HarnessError> {
        let deadline = Instant::now() + READY_TIMEOUT;
        while !in_netns(self.netns.as_deref(), || {
            serves_http(self.members[i].peer_port)
        }) {
            self.check_alive(&[i])?;
            if Instant::now() > deadline {
                let reason = format!("member {i} not serving peers after {READY_TIMEOUT:?}");
                return Err(self.not_ready(reason));
            }
            thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// An error if a member in `which` has exited (it is then marked killed).
    fn check_alive(&mut self, which: &[usize]) -> Result<(), HarnessError> {
        for &i in which {
            let Some(child) = self.members[i].child.as_mut() else {
                return Err(HarnessError::NotRunning(i));
            };
            if let Ok(Some(status)) = child.try_wait() {
                self.members[i].child = None;
                return Err(self.not_ready(format!("member {i} exited ({status})")));
            }
        }
        Ok(())
    }

    fn enable_auth(&mut self, user: &str, password: &str) -> Result<(), HarnessError> {
        let pw = format!("--new-user-password={password}");
        let mut users = vec!["root"];
        if user != "root" {
            users.push(user);
        }
        for name in users {
            self.etcdctl(&["user", "add", name, "--interactive=false", &pw])?;
            self.etcdctl(&["user", "grant-role", name, "root"])?;
        }
        self.etcdctl(&["auth", "enable"])?;
        self.auth_enabled = true;
        Ok(())
    }

    fn port_clash(&self) -> bool {
        let clashed = |m: &Member| {
            fs::read_to_string(&m.log).is_ok_and(|log| log.contains("address already in use"))
        };
        self.members.iter().any(clashed)
    }

    fn not_ready(&self, reason: String) -> HarnessError {
        let mut logs = String::new();
        for m in &self.members {
            logs += &format!("--- {} ({}), last lines:\n", m.name, m.log.display());
            logs += &log_tail(&m.log);
        }
        HarnessError::NotReady { reason, logs }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// Members with fresh ports, data dirs and logs for one start attempt. All
/// listeners stay open until every port is picked, so no two are the same.
fn new_members(dir: &Path, n: usize, attempt: u32) -> Result<Vec<Member>, HarnessError> {
    let listeners = (0..2 * n)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .collect::<io::Result<Vec<_>>>()
        .map_err(|e| HarnessError::io("binding 127.0.0.1:0 to find a free port", e))?;
    let ports = listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<io::Result<Vec<_>>>()
        .map_err(|e| HarnessError::io("reading a bound port", e))?;
    Ok((0..n)
        .map(|i| Member {
            name: format!("m{i}"),
            client_port: ports[2 * i],
            peer_port: ports[2 * i + 1],
            data_dir: dir.join(format!("m{i}.{attempt}.etcd")),
            log: dir.join(format!("m{i}.{attempt}.log")),
            child: None,
        })
        .collect())
}

/// A cluster token no other cluster on the machine has (and thus no member
/// of another test's cluster joins ours by a port mix-up).
fn unique_token() -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("etcd-cluster-{}-{n}-{nanos}", std::process::id())
}

/// The last lines of a log file (at most its last 64 KiB are read).
fn log_tail(path: &Path) -> String {
    let mut text = String::new();
    let read = fs::File::open(path).and_then(|mut f| {
        let len = f.metadata()?.len();
        f.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)?;
        text = String::from_utf8_lossy(&buf).into_owned();
        Ok(())
    });
    if let Err(e) = read {
        return format!("(cannot read: {e})\n");
    }
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(LOG_TAIL_LINES);
    lines[start..].iter().map(|l| format!("{l}\n")).collect()
}

/// Runs `f` in the network namespace `netns` (on a thread of its own, which
/// alone enters it), or here when there is none. `false`-like results
/// come back when the namespace cannot be entered.
fn in_netns<T: Send + Default>(netns: Option<&str>, f: impl FnOnce() -> T + Send) -> T {
    let Some(ns) = netns else {
        return f();
    };
    let path = format!("/run/netns/{ns}");
    thread::scope(|scope| {
        scope
            .spawn(move || {
                let Ok(file) = std::fs::File::open(&path) else {
                    return T::default();
                };
                // SAFETY: setns on a valid namespace fd changes only this
                // thread's network namespace; the thread ends after `f`.
                if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    return T::default();
                }
                f()
            })
            .join()
            .unwrap_or_default()
    })
}

/// Whether an HTTP server answers on 127.0.0.1:`port`. A listener that is
/// bound but not served yet accepts the connection and then says nothing.
fn serves_http(port: u16) -> bool {
    let timeout = Duration::from_millis(200);
    let addr = (Ipv4Addr::LOCALHOST, port).into();
    let Ok(mut conn) = TcpStream::connect_timeout(&addr, timeout) else {
        return false;
    };
    let mut reply = [0u8; 16];
    conn.set_read_timeout(Some(timeout)).is_ok()
        && conn.write_all(b"GET /version HTTP/1.0\r\n\r\n").is_ok()
        && conn.read(&mut reply).is_ok_and(|n| n > 0)
}

/// A running etcdctl.
struct Etcdctl {
    child: Child,
    /// The command line for errors (without the credentials).
    shown: String,
}

impl Etcdctl {
    /// Waits for etcdctl; its stdout, or an error with its stderr.
    fn finish(self) -> Result<String, HarnessError> {
        let out = self
            .child
            .wait_with_output()
            .map_err(|e| HarnessError::io(format!("running {}", self.shown), e))?;
        // etcdctl prints keys and values as they are; lossy keeps a test
        // going on a binary value instead of failing on it.
        match out.status.success() {
            true => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
            false => Err(HarnessError::Command {
                cmd: self.shown,
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            }),
        }
    }
}

type SpawnRequest = (Command, mpsc::Sender<io::Result<Child>>);

/// Spawns `cmd` from one thread that lives as long as the process.
/// `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits,
/// not the process; a cluster made in one test thread and used from others
/// (a shared cluster, `restart` from another thread) would otherwise lose
/// its members when that thread ends.
fn spawn_from_long_lived_thread(cmd: Command) -> io::Result<Child> {
    static SPAWNER: Mutex<Option<mpsc::Sender<SpawnRequest>>> = Mutex::new(None);
    let mut spawner = SPAWNER
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if spawner.is_none() {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        thread::Builder::new()
            .name("etcd-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })?;
        *spawner = Some(tx);
    }
    let (reply_tx, reply_rx) = mpsc::channel();
    let gone = || io::Error::other("the etcd spawner thread is gone");
    let tx = spawner.as_ref().ok_or_else(gone)?;
    tx.send((cmd, reply_tx)).map_err(|_| gone())?;
    drop(spawner);
    reply_rx.recv().map_err(|_| gone())?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests that need etcd fail with this, never skip: it has to say
    /// what to install.
    #[test]
    fn missing_etcd_says_what_to_install() {
        let msg = HarnessError::EtcdMissing.to_string();
        assert!(msg.starts_with("etcd not found: install Debian's etcd-server and etcd-client"));
        assert!(msg.contains(".ci/install-deps"));
    }

    #[test]
    fn log_tail_keeps_the_last_lines() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("log");
        let text: String = (0..100).map(|i| format!("line {i}\n")).collect();
        fs::write(&path, text).expect("write log");
        let tail = log_tail(&path);
        assert_eq!(tail.lines().count(), LOG_TAIL_LINES);
        assert!(tail.ends_with("line 99\n"));
        assert!(log_tail(&dir.path().join("none")).starts_with("(cannot read"));
    }
}
