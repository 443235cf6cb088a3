//! The fuzzer's private mount and network namespace, and the check that the
//! machine's own network and state folders are unchanged afterwards.
//!
//! The process re-executes itself under `unshare --mount --net
//! --propagation private` (so the namespaces are made before any thread
//! exists), and inside mounts tmpfs over every folder the plugins write
//! and a fresh sysfs (showing only its own links), creates its uplinks as
//! veth pairs and its pod namespace. All of it ends with the process.

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

/// [`reexec`] with the sandbox's standard output and error in `log`.
pub fn reexec_logged(args: &[String], log: &Path) -> Result<i32, SandboxError> {
    let exe = std::env::current_exe().map_err(|e| SandboxError::Spawn("current_exe".into(), e))?;
    let file = std::fs::File::create(log)
        .map_err(|e| SandboxError::Spawn(log.display().to_string(), e))?;
    let err = file
        .try_clone()
        .map_err(|e| SandboxError::Spawn(log.display().to_string(), e))?;
    let status = Command::new("unshare")
        .args(["--mount", "--net", "--propagation", "private", "--"])
        .arg(&exe)
        .args(args)
        .env(INSIDE, "1")
        .stdout(file)
        .stderr(err)
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

/// (Re)creates the uplinks the seeds name and the simulated VFs' netdevs
/// as veth pairs (the peer is the name plus `p`): this machine's kernel
/// has no dummy links, and with them the uplinks were never made, so every
/// master or device lookup failed before the plugins got further. host-device
/// and rdma-sriov move them into the pod, where they die with it.
pub fn ensure_uplinks() {
    for name in UPLINKS.iter().chain(&FAKE_VF_NETDEVS) {
        let peer = format!("{name}p");
        let _ = run(
            "ip",
            &["link", "add", name, "type", "veth", "peer", "name", &peer],
        );
        let _ = run("ip", &["link", "set", name, "up"]);
        let _ = run("ip", &["link", "set", &peer, "up"]);
    }
}

/// A new pod namespace, so leftovers of earlier calls do not turn every
/// later ADD into an "already exists" error.
pub fn recycle_pod() {
    let _ = run("ip", &["netns", "del", POD_NETNS]);
    let _ = run("ip", &["netns", "add", POD_NETNS]);
    let _ = run("ip", &["-n", POD_NETNS, "link", "set", "lo", "up"]);
    ensure_uplinks();
    // The simulated machine starts again too: its VFs were in the pod,
    // and its record of calls would otherwise grow with the run.
    if Path::new(FAKE_RDMA_ROOT).is_dir() {
        let _ = std::fs::write(Path::new(FAKE_RDMA_ROOT).join("world.json"), fake_world());
    }
}

/// The simulated SR-IOV machine's folder (on the sandbox's /tmp).
const FAKE_RDMA_ROOT: &str = "/tmp/cnitest-fuzz-rdma";
/// The simulated PF: the rdma-sriov seeds' `pf` and its PCI address.
const FAKE_PF: (&str, &str) = ("ens1f0np0", "0000:3b:00.0");
/// The VFs' netdevs (real veth links); VF `i` is function `i + 2` of the
/// PF's slot, so the seeds' deviceID 0000:3b:00.2 is the first.
const FAKE_VF_NETDEVS: [&str; 4] = ["fzvf0", "fzvf1", "fzvf2", "fzvf3"];

/// rdma-sriov's test build (the `fake-hardware` feature, which CI builds
/// as target/debug/rdma-sriov) and the environment that points it at the
/// simulated machine: a fake sysfs with the PF and its VFs, a state
/// folder, and the PF/RDMA model it changes instead of hardware (its
/// netdev side, the VFs' links, is real). No SR-IOV hardware exists here.
#[derive(Clone)]
pub struct FakeRdma {
    pub exe: PathBuf,
    pub env: Vec<(&'static str, String)>,
}

fn fake_world() -> String {
    let devices: Vec<serde_json::Value> = FAKE_VF_NETDEVS
        .iter()
        .enumerate()
        .map(|(i, netdev)| serde_json::json!({"name": format!("mlx5_{i}"), "index": i + 1, "netdev": netdev}))
        .collect();
    serde_json::json!({
        "pfs": {FAKE_PF.0: {"vfs": vec![serde_json::json!({}); FAKE_VF_NETDEVS.len()]}},
        "rdma": {"mode": "exclusive", "devices": devices},
        "calls": [],
    })
    .to_string()
}

/// Builds the simulated machine inside the sandbox (after [`prepare`]).
pub fn fake_rdma(exe: &Path) -> Result<FakeRdma, SandboxError> {
    let root = Path::new(FAKE_RDMA_ROOT);
    let sys = root.join("sys");
    let io = |what: &str, e: std::io::Error| SandboxError::Spawn(what.to_string(), e);
    let pci = |addr: &str| sys.join("bus/pci/devices").join(addr);
    let dir = |p: PathBuf| std::fs::create_dir_all(&p).map_err(|e| io("mkdir", e));
    let link =
        |to: PathBuf, at: PathBuf| std::os::unix::fs::symlink(to, at).map_err(|e| io("symlink", e));
    let (pf, pf_pci) = FAKE_PF;
    dir(pci(pf_pci).join("net").join(pf))?;
    dir(sys.join("class/net").join(pf))?;
    link(pci(pf_pci), sys.join("class/net").join(pf).join("device"))?;
    for driver in ["vfio-pci", "mlx5_core"] {
        dir(sys.join("bus/pci/drivers").join(driver))?;
    }
    for (i, netdev) in FAKE_VF_NETDEVS.iter().enumerate() {
        let vf = format!("0000:3b:00.{}", i + 2);
        dir(pci(&vf).join("net").join(netdev))?;
        dir(pci(&vf).join("infiniband").join(format!("mlx5_{i}")))?;
        link(format!("../{pf_pci}").into(), pci(&vf).join("physfn"))?;
        link(
            format!("../{vf}").into(),
            pci(pf_pci).join(format!("virtfn{i}")),
        )?;
        link(
            sys.join("bus/pci/drivers/mlx5_core"),
            pci(&vf).join("driver"),
        )?;
    }
    std::fs::write(root.join("world.json"), fake_world()).map_err(|e| io("world.json", e))?;
    let path = |p: PathBuf| p.display().to_string();
    Ok(FakeRdma {
        exe: exe.to_path_buf(),
        env: vec![
            ("RDMA_SRIOV_SYSFS_ROOT", path(sys.clone())),
            ("RDMA_SRIOV_STATE_DIR", path(root.join("state"))),
            ("RDMA_SRIOV_FAKE_PF_OPS", path(root.join("world.json"))),
            ("RDMA_SRIOV_LOCK_TIMEOUT_MS", "3000".into()),
        ],
    })
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
