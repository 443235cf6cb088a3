//! Debian's containerd, started by a test with everything private: its
//! root, state dir, socket and config live in the test's folder, and it
//! runs inside the test's network namespace, so the pod network it builds
//! through the CNI plugins never touches the machine's own network.
//!
//! containerd runs in a mount namespace of its own, held open by a small
//! holder process, with fresh tmpfs mounts on `/run` and `/var/lib`: the
//! paths containerd 1.6 and its shims write to whatever the config says
//! (`/run/containerd/s/` shim sockets, go-cni's `/var/lib/cni` result
//! cache) stay inside the test, and a restarted containerd joins the same
//! mount namespace, where the shims it left behind live.

use std::fs;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::{CriClient, Error};

/// How long containerd may take to open its socket: about a second here,
/// much more on a loaded CI machine.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a SIGTERMed process may take before it gets SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// The snapshotter, as on a real node. Not `native`: in containerd 1.6 a
/// SIGKILL between its rename of a new snapshot folder and the metadata
/// commit leaves a folder under an ID the database hands out again, and
/// every later snapshot (so every RunPodSandbox) fails with "file exists".
/// overlayfs removes such orphans (its Cleanup) when the restarted
/// containerd's garbage collector first runs.
const SNAPSHOTTER: &str = "overlayfs";
/// A PATH with Debian's runc (/usr/sbin) and the runc shim (/usr/bin).
const DAEMON_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Where `.ci/install-deps` unpacks containerd 2 from Debian's unstable
/// suite (never installed): `usr/bin/{containerd,containerd-shim-runc-v2,ctr}`
/// and `.version`.
pub const CONTAINERD2_ROOT: &str = "/var/cache/cni-rs-test/containerd-2";

/// Which containerd a test runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release {
    /// The one on PATH: Debian 12's package, containerd 1.6.
    Installed,
    /// An unpacked package: its `usr/bin` (daemon, runc shim, ctr) comes
    /// first on the daemon's PATH; runc stays Debian 12's.
    Unpacked(PathBuf),
}

impl Release {
    /// containerd 2 as `.ci/install-deps` unpacks it ([`CONTAINERD2_ROOT`]).
    pub fn containerd2() -> Release {
        Release::Unpacked(PathBuf::from(CONTAINERD2_ROOT))
    }

    /// Whether its daemon, shim and ctr are there (a test that needs them
    /// skips without, and fails under CI).
    pub fn is_present(&self) -> bool {
        match self {
            Release::Installed => true,
            Release::Unpacked(root) => ["containerd", "containerd-shim-runc-v2", "ctr"]
                .iter()
                .all(|bin| root.join("usr/bin").join(bin).is_file()),
        }
    }

    fn daemon_path(&self) -> String {
        match self {
            Release::Installed => DAEMON_PATH.to_string(),
            Release::Unpacked(root) => {
                format!("{}:{DAEMON_PATH}", root.join("usr/bin").display())
            }
        }
    }

    fn ctr(&self) -> PathBuf {
        match self {
            Release::Installed => PathBuf::from("ctr"),
            Release::Unpacked(root) => root.join("usr/bin/ctr"),
        }
    }
}

/// Where and how to run containerd.
#[derive(Debug, Clone)]
pub struct ContainerdConfig {
    /// The network namespace containerd runs in (the pod network's "host").
    pub netns: PathBuf,
    /// The test's private folder: root, state, socket, config and log.
    pub work_dir: PathBuf,
    /// The CNI `bin_dir`: our plugins.
    pub plugin_dir: PathBuf,
    /// The CNI `conf_dir`: the test's conflist.
    pub conf_dir: PathBuf,
    /// The sandbox ("pause") image reference, imported beforehand.
    pub sandbox_image: String,
}

/// A running containerd; stopped by PID on drop.
pub struct Containerd {
    config: ContainerdConfig,
    release: Release,
    holder: Child,
    daemon: Option<Child>,
    starts: u32,
}

impl ContainerdConfig {
    pub fn socket(&self) -> PathBuf {
        self.work_dir.join("containerd.sock")
    }

    pub fn config_file(&self) -> PathBuf {
        self.work_dir.join("config.toml")
    }

    pub fn log_file(&self) -> PathBuf {
        self.work_dir.join("containerd.log")
    }

    /// The containerd config (version 2, as 1.6 reads it): the CRI plugin
    /// with our plugin folder and the test's conflist folder, runc through
    /// the v2 shim, the overlayfs snapshotter (see [`SNAPSHOTTER`]),
    /// network namespaces pinned under the state dir.
    pub fn toml(&self) -> String {
        let d = |p: &Path| toml_string(&p.display().to_string());
        let work = &self.work_dir;
        format!(
            r#"version = 2
root = {root}
state = {state}
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
]

[grpc]
  address = {socket}

[debug]
  level = "info"

[plugins."io.containerd.internal.v1.opt"]
  path = {opt}

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = {image}
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  # containerd gives sandboxes oom_score_adj -998; lowering a score needs
  # CAP_SYS_RESOURCE, which a CI container may lack (this machine's does):
  # keep scores at containerd's own or above.
  restrict_oom_score_adj = true

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = {snapshotter}
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = {runc_root}
        SystemdCgroup = false

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = {bin_dir}
    conf_dir = {conf_dir}
    max_conf_num = 1
"#,
            root = d(&work.join("root")),
            state = d(&work.join("state")),
            socket = d(&self.socket()),
            opt = d(&work.join("opt")),
            image = toml_string(&self.sandbox_image),
            snapshotter = toml_string(SNAPSHOTTER),
            runc_root = d(&work.join("runc")),
            bin_dir = d(&self.plugin_dir),
            conf_dir = d(&self.conf_dir),
        )
    }
}

/// A TOML basic string.
fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl Containerd {
    /// Writes the config, starts the mount-namespace holder in the test's
    /// network namespace, then containerd in both; returns once the CRI
    /// answers.
    pub fn start(config: ContainerdConfig) -> Result<Containerd, Error> {
        Containerd::start_release(config, Release::Installed)
    }

    /// [`Containerd::start`] for a given release of containerd. containerd
    /// 2 reads the same (version 2) config: it migrates it at start.
    pub fn start_release(config: ContainerdConfig, release: Release) -> Result<Containerd, Error> {
        fs::create_dir_all(&config.work_dir)
            .map_err(|e| Error::io(format!("create {}", config.work_dir.display()), e))?;
        fs::write(config.config_file(), config.toml())
            .map_err(|e| Error::io(format!("write {}", config.config_file().display()), e))?;
        let holder = start_holder(&config)?;
        let mut containerd = Containerd {
            config,
            release,
            holder,
            daemon: None,
            starts: 0,
        };
        containerd.start_daemon()?;
        Ok(containerd)
    }

    pub fn config(&self) -> &ContainerdConfig {
        &self.config
    }

    pub fn socket(&self) -> PathBuf {
        self.config.socket()
    }

    /// The PID of the process that holds containerd's network and mount
    /// namespaces (its /run and /var/lib, go-cni's cache among them): a
    /// tool that must see the node as containerd does enters them
    /// (`nsenter --target PID --mount --net`).
    pub fn holder_pid(&self) -> u32 {
        self.holder.id()
    }

    /// The daemon's PID, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.daemon.as_ref().map(Child::id)
    }

    /// A new CRI client on this containerd's socket.
    pub fn client(&self) -> Result<CriClient, Error> {
        CriClient::connect(&self.socket())
    }

    /// containerd's log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.config.log_file()).unwrap_or_default()
    }

    /// Writes the sandbox image as an OCI archive in the work dir and
    /// imports it ([`crate::oci_image::write_archive`], then
    /// [`Containerd::import_image`]): what a test does before its first
    /// RunPodSandbox.
    pub fn import_sandbox_image(
        &self,
        image: &crate::oci_image::SandboxImage<'_>,
    ) -> Result<(), Error> {
        let archive = self.config.work_dir.join("sandbox-image.tar");
        crate::oci_image::write_archive(image, &archive)?;
        self.import_image(&archive)
    }

    /// `ctr images import` of an OCI archive into the CRI's namespace
    /// (`k8s.io`), unpacked for the CRI's snapshotter.
    pub fn import_image(&self, archive: &Path) -> Result<(), Error> {
        let socket = self.socket();
        let out = Command::new(self.release.ctr())
            .arg("--address")
            .arg(&socket)
            .args(["--namespace", "k8s.io", "images", "import"])
            .args(["--snapshotter", SNAPSHOTTER, "--platform", "linux/amd64"])
            .arg(archive)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| Error::io("run ctr images import", e))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(Error::Command {
                program: "ctr images import".to_string(),
                status: out.status,
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            })
        }
    }

    /// SIGKILL, as a crash or an OOM kill would: no cleanup at all. The
    /// shims and the sandboxes keep running.
    pub fn kill(&mut self) -> Result<(), Error> {
        if let Some(mut daemon) = self.daemon.take() {
            signal(&daemon, Signal::SIGKILL)?;
            daemon
                .wait()
                .map_err(|e| Error::io("wait for containerd", e))?;
        }
        Ok(())
    }

    /// Starts containerd again with the same config and state (after
    /// [`Containerd::kill`]); it recovers its sandboxes from its state.
    pub fn restart(&mut self) -> Result<(), Error> {
        self.kill()?;
        self.start_daemon()
    }

    /// SIGTERM, then SIGKILL after a grace period; returns the exit status.
    pub fn stop(&mut self) -> Result<Option<ExitStatus>, Error> {
        match self.daemon.take() {
            Some(mut daemon) => terminate(&mut daemon).map(Some),
            None => Ok(None),
        }
    }

    fn start_daemon(&mut self) -> Result<(), Error> {
        self.starts += 1;
        let log_path = self.config.log_file();
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| Error::io(format!("open {}", log_path.display()), e))?;
        let log_err = log
            .try_clone()
            .map_err(|e| Error::io(format!("open {}", log_path.display()), e))?;
        let daemon = Command::new("nsenter")
            .arg(format!("--target={}", self.holder.id()))
            .args(["--mount", "--net", "containerd", "--config"])
            .arg(self.config.config_file())
            .env("PATH", self.release.daemon_path())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|e| Error::io("start containerd (nsenter)", e))?;
        self.daemon = Some(daemon);
        self.wait_ready()
    }

    fn wait_ready(&mut self) -> Result<(), Error> {
        let socket = self.socket();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(daemon) = self.daemon.as_mut() {
                if let Ok(Some(status)) = daemon.try_wait() {
                    self.daemon = None;
                    return Err(Error::Exited {
                        status,
                        log: self.log(),
                    });
                }
            }
            if socket.exists() {
                if let Ok(mut client) = CriClient::connect(&socket) {
                    if client.version().is_ok() {
                        return Ok(());
                    }
                }
            }
            if Instant::now() > deadline {
                return Err(Error::NotReady {
                    socket,
                    seconds: START_TIMEOUT.as_secs(),
                    log: self.log(),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The processes that run in the holder's mount namespace besides the
    /// holder and the daemon: containerd's shims (one per sandbox, gone
    /// once the sandbox is removed). They descend from processes this
    /// harness started.
    pub fn shims(&self) -> Vec<i32> {
        let holder = self.holder.id() as i32;
        let daemon = self.pid().map(|p| p as i32);
        let Some(mount_ns) = mount_ns_of(holder) else {
            return Vec::new();
        };
        let Ok(entries) = fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|&pid| pid != holder && Some(pid) != daemon)
            .filter(|&pid| mount_ns_of(pid) == Some(mount_ns))
            .collect()
    }
}

impl Drop for Containerd {
    /// Also on a failed test: remove what sandboxes are left (containerd
    /// tears their networks down), stop containerd by PID, end the shims it
    /// left and their sandboxes, then the holder, which ends the private
    /// mount namespace.
    fn drop(&mut self) {
        if self.daemon.is_some() {
            if let Ok(mut client) = self.client() {
                let _ = client.remove_all_sandboxes();
            }
        }
        let _ = self.stop();
        // Sandboxes still running (containerd was down, or their removal
        // failed): their processes are the shims' children (each shim is
        // the subreaper of its sandbox's init).
        let shims = self.shims();
        for pid in children_of(&shims).into_iter().chain(shims) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = kill(Pid::from_raw(self.holder.id() as i32), Signal::SIGKILL);
        let _ = self.holder.wait();
    }
}

/// The holder: a process in the test's network namespace and a new mount
/// namespace (slave of the machine's, so nothing mounted there leaks out)
/// with tmpfs on /run and /var/lib, sleeping until the harness kills it.
/// It touches a file in the work dir once its mounts are in place.
fn start_holder(config: &ContainerdConfig) -> Result<Child, Error> {
    let ready = config.work_dir.join("holder-ready");
    let script = format!(
        "mount -t tmpfs cnitest-run /run && mount -t tmpfs cnitest-varlib /var/lib && \
         touch '{}' && exec sleep infinity",
        ready.display()
    );
    let mut holder = Command::new("nsenter")
        .arg(format!("--net={}", config.netns.display()))
        .args(["unshare", "--mount", "--propagation", "slave", "sh", "-c"])
        .arg(&script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::io("start the mount namespace holder (nsenter, unshare)", e))?;
    let deadline = Instant::now() + START_TIMEOUT;
    while !ready.exists() {
        if let Ok(Some(status)) = holder.try_wait() {
            let mut stderr = String::new();
            if let Some(mut pipe) = holder.stderr.take() {
                let _ = pipe.read_to_string(&mut stderr);
            }
            return Err(Error::Command {
                program: "the mount namespace holder".to_string(),
                status,
                stderr,
            });
        }
        if Instant::now() > deadline {
            let _ = holder.kill();
            let _ = holder.wait();
            return Err(Error::io(
                "the mount namespace holder",
                std::io::Error::new(std::io::ErrorKind::TimedOut, "its mounts did not complete"),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(holder)
}

/// Processes whose parent is one of `parents`.
fn children_of(parents: &[i32]) -> Vec<i32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| parent_of(pid).is_some_and(|ppid| parents.contains(&ppid)))
        .collect()
}

/// The parent PID from `/proc/<pid>/stat` (the field after the command
/// name, which is in parentheses and may itself hold spaces).
fn parent_of(pid: i32) -> Option<i32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(1)?.parse().ok()
}

fn mount_ns_of(pid: i32) -> Option<u64> {
    fs::metadata(format!("/proc/{pid}/ns/mnt"))
        .ok()
        .map(|m| m.ino())
}

fn signal(child: &Child, sig: Signal) -> Result<(), Error> {
    let pid = child.id() as i32;
    kill(Pid::from_raw(pid), sig).map_err(|source| Error::Signal { pid, source })
}

fn terminate(child: &mut Child) -> Result<ExitStatus, Error> {
    if let Ok(Some(status)) = child.try_wait() {
        return Ok(status);
    }
    signal(child, Signal::SIGTERM)?;
    let deadline = Instant::now() + STOP_GRACE;
    loop {
        if let Some(status) = child
            .try_wait()
            .map_err(|e| Error::io("wait for containerd", e))?
        {
            return Ok(status);
        }
        if Instant::now() > deadline {
            signal(child, Signal::SIGKILL)?;
            return child
                .wait()
                .map_err(|e| Error::io("wait for containerd", e));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
