//! The fuzzer's private mount and network namespace, and the check that the
//! machine's own network and state folders are unchanged afterwards.
//!
//! The process re-executes itself under `unshare --mount --net
//! --propagation private` (so the namespaces are made before any thread
//! exists), and inside mounts tmpfs over every folder the plugins write
//! and a fresh sysfs (showing only its own links), creates its uplinks as
//! dummy links and its pod namespace. All of it ends with the process.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::mutate::FIFO;
use super::seeds::UPLINKS;

/// Set in the re-executed process's environment.
pub const INSIDE: &str = "CNI_PLUGIN_FUZZ_SANDBOXED";
/// The pod namespace, created inside the private mount namespace.
pub const POD_NETNS: &str = "cnitest-fuzz-pod";
/// Folders the plugins write: state, locks, logs, run files, scratch.
pub const MASKED: &[&str] = &["/var/lib/cni", "/run", "/var/log", "/tmp"];
/// The container ids of a run start with it: a leftover naming it is ours.
pub const MARKER: &str = "cnitest-fuzz";

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("running {0}: {1}")]
    Spawn(String, std::io::Error),
    #[error("{0} failed: {1}")]
    Failed(String, String),
    #[error("{0} is under {1}, which the sandbox hides behind a tmpfs: use a folder elsewhere")]
    Hidden(PathBuf, &'static str),
}

fn run(program: &str, args: &[&str]) -> Result<String, SandboxError> {
    let shown = format!("{program} {}", args.join(" "));
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| SandboxError::Spawn(shown.clone(), e))?;
    if !out.status.success() {
        return Err(SandboxError::Failed(
            shown,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Refuses a folder the run needs to see from inside (plugins, output)
/// when a tmpfs of the sandbox would hide it.
pub fn check_visible(path: &Path) -> Result<(), SandboxError> {
    let abs = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    match MASKED.iter().find(|m| abs.starts_with(m)) {
        Some(m) => Err(SandboxError::Hidden(abs, m)),
        None => Ok(()),
    }
}

/// Re-executes this program with `args` inside new mount and network
/// namespaces; returns its exit code.
pub fn reexec(args: &[String]) -> Result<i32, SandboxError> {
    let exe = std::env::current_exe().map_err(|e| SandboxError::Spawn("current_exe".into(), e))?;
    let status = Command::new("unshare")
        .args(["--mount", "--net", "--propagation", "private", "--"])
        .arg(&exe)
        .args(args)
        .env(INSIDE, "1")
        .status()
        .map_err(|e| SandboxError::Spawn("unshare".into(), e))?;
    Ok(status.code().unwrap_or(128 + 9))
}

/// Inside the namespaces: the machine's root read-only (but `out`),
/// tmpfs mounts, sysfs, uplinks, pod namespace.
pub fn prepare(out: &Path) -> Result<(), SandboxError> {
    // A path key of "/" or "../.." makes a plugin that does not confine
    // its paths (the reference's host-local) write outside the masked
    // folders: the root is read-only here, the output folder excepted.
    let out = out.display().to_string();
    run("mount", &["--bind", &out, &out])?;
    run("mount", &["-o", "remount,bind,ro", "/"])?;
    for dir in MASKED {
        // A missing folder is masked through its parent, so that a plugin
        // creating it writes to the tmpfs and not the machine's disk.
        let target = if Path::new(dir).is_dir() {
            dir.to_string()
        } else {
            Path::new(dir)
                .parent()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        };
        run(
            "mount",
            &["-t", "tmpfs", "-o", "mode=0755", "cnitest-fuzz", &target],
        )?;
    }
    run("mount", &["-t", "sysfs", "cnitest-fuzz", "/sys"])?;
    run("ip", &["link", "set", "lo", "up"])?;
    ensure_uplinks();
    run("ip", &["netns", "add", POD_NETNS])?;
    run("ip", &["-n", POD_NETNS, "link", "set", "lo", "up"])?;
    run("mkfifo", &[FIFO])?;
    Ok(())
}

/// (Re)creates the uplinks the seeds name; host-device moves one into the
/// pod, where it dies with the pod namespace.
pub fn ensure_uplinks() {
    for name in UPLINKS {
        let _ = run("ip", &["link", "add", name, "type", "dummy"]);
        let _ = run("ip", &["link", "set", name, "up"]);
    }
}

/// A new pod namespace, so leftovers of earlier calls do not turn every
/// later ADD into an "already exists" error.
pub fn recycle_pod() {
    let _ = run("ip", &["netns", "del", POD_NETNS]);
    let _ = run("ip", &["netns", "add", POD_NETNS]);
    let _ = run("ip", &["-n", POD_NETNS, "link", "set", "lo", "up"]);
    ensure_uplinks();
}

/// What the machine has that a run could leave behind: namespaces, links,
/// nft tables, and files in the state folders.
#[derive(PartialEq, Eq)]
pub struct HostSnapshot(BTreeSet<String>);

impl HostSnapshot {
    pub fn take() -> HostSnapshot {
        let mut items = BTreeSet::new();
        if let Ok(rd) = std::fs::read_dir("/run/netns") {
            items.extend(
                rd.flatten()
                    .map(|e| format!("netns {}", e.file_name().to_string_lossy())),
            );
        }
        if let Ok(rd) = std::fs::read_dir("/sys/class/net") {
            items.extend(
                rd.flatten()
                    .map(|e| format!("link {}", e.file_name().to_string_lossy())),
            );
        }
        if let Ok(out) = run("nft", &["list", "tables"]) {
            items.extend(out.lines().map(|l| format!("nft {l}")));
        }
        for dir in ["/var/lib/cni", "/run/cni", "/var/log", "/tmp"] {
            walk(Path::new(dir), 3, &mut items);
        }
        HostSnapshot(items)
    }

    /// Items present now and not before: `(ours, others)`, ours being
    /// those naming the run's marker (other engineers' tests may add the
    /// rest at the same time).
    pub fn new_since(&self, before: &HostSnapshot) -> (Vec<String>, Vec<String>) {
        self.0
            .difference(&before.0)
            .cloned()
            .partition(|i| i.contains(MARKER) || i.contains("fuzznet") || i.contains("cni-fz"))
    }
}

fn walk(dir: &Path, depth: usize, items: &mut BTreeSet<String>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let path = e.path();
        items.insert(format!("file {}", path.display()));
        if depth > 0 && e.file_type().is_ok_and(|t| t.is_dir()) {
            walk(&path, depth - 1, items);
        }
    }
}
