//! Benchmarks of our plugins against the reference plugins, side by side in
//! one run. Candidates are alternated run by run so that drift of a shared
//! machine (other load, CPU frequency) hits both sides alike.

pub mod chain;
pub mod chart;
pub mod cluster_ipam;
pub mod host_local;
pub mod portmap_scale;
pub mod secondary;
pub mod secondary_guest;
pub mod version;
pub mod workers;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the plugins keep their state during a run (host-local stores,
/// the runtime's result caches): a directory of its own under a parent
/// chosen once per run.
///
/// Why not always the temporary directory: the plugins create and delete
/// files on every ADD and DEL, and on an ext4 file system without a
/// journal (the root of the test VMs) creating a file first checks every
/// free inode of its block group that was freed in the last 60 to 360
/// seconds, one buffer lookup each, before it may reuse one. A file
/// creation then costs from 10 µs to 1 ms depending on how many files any
/// program deleted nearby in the past minutes: measured, a host-local ADD
/// went from 1 to 2 ms within one series of pods, and its 1000-lease
/// figure moved between 0.98 and 1.32 times its empty figure from run to
/// run, with the same binary. Journaled file systems skip that check, so
/// the figures would describe the VM's disk rather than the plugins. A
/// tmpfs (`/dev/shm`) has no such history; `--state-dir` picks another
/// place, for instance to measure a real disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateRoot {
    pub dir: PathBuf,
    /// What the directory's file system is, for the report.
    pub file_system: String,
}

impl StateRoot {
    /// `requested`, or `/dev/shm` where it is a tmpfs, or the temporary
    /// directory.
    pub fn choose(requested: Option<&Path>) -> StateRoot {
        let dir = match requested {
            Some(dir) => dir.to_path_buf(),
            None if file_system_of(Path::new("/dev/shm")) == "tmpfs" => PathBuf::from("/dev/shm"),
            None => std::env::temp_dir(),
        };
        let file_system = file_system_of(&dir);
        StateRoot { dir, file_system }
    }

    /// A fresh directory for this run: `<dir>/<name>-<pid>`.
    pub fn work_dir(&self, name: &str) -> Result<PathBuf, std::io::Error> {
        let dir = self.dir.join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }

    /// The line the report prints about it.
    pub fn report_line(&self) -> String {
        format!(
            "plugin state (host-local stores, runtime caches) under {} ({})",
            self.dir.display(),
            self.file_system
        )
    }
}

/// `tmpfs`, `ext4`, ... as far as the bench tells them apart.
fn file_system_of(path: &Path) -> String {
    use nix::sys::statfs::{
        statfs, BTRFS_SUPER_MAGIC, EXT4_SUPER_MAGIC, TMPFS_MAGIC, XFS_SUPER_MAGIC,
    };
    let Ok(stat) = statfs(path) else {
        return "unknown".to_string();
    };
    let kind = stat.filesystem_type();
    let known = [
        (TMPFS_MAGIC, "tmpfs"),
        (EXT4_SUPER_MAGIC, "ext2/3/4"),
        (XFS_SUPER_MAGIC, "xfs"),
        (BTRFS_SUPER_MAGIC, "btrfs"),
    ];
    known.iter().find(|(magic, _)| *magic == kind).map_or_else(
        || format!("file system {:#x}", kind.0),
        |(_, name)| name.to_string(),
    )
}

/// How long [`settle`] leaves the kernel to finish deferred work.
const SETTLE: Duration = Duration::from_millis(20);

/// Lets the kernel finish what the previous plugin call left for later,
/// before the next call is timed, so that neither side's figures include
/// the other side's after-effects. nf_tables frees a transaction's deleted
/// rules and chains after an RCU grace period, and the next nfnetlink
/// socket to close in the same network namespace, any program's, waits
/// for that work (measured: our portmap ADD took 2.5 ms or 7-9 ms
/// depending on whether the reference's DEL had just run). Closing a
/// socket here does that wait outside the timing, for the calling thread's
/// namespace only (the kernel keeps the work per namespace since about
/// 6.10): call this on the thread that starts the timed plugin. The pause
/// lets RCU callbacks queued by link deletions drain, which the next link
/// deletion would otherwise wait for.
pub fn settle() {
    if let Ok(mut socket) = libcni::nftables::NfTablesSocket::open() {
        // A socket that has sent something is bound, and only a bound
        // socket's close flushes the deferred work; a plain drop would
        // park it instead.
        let _ = socket.probe();
        socket.close_now();
    }
    std::thread::sleep(SETTLE);
}

/// How long [`wait_for_namespace_cleanup`] waits at most.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(60);
/// How often it looks, and how many equal looks in a row count as done.
const CLEANUP_POLL: Duration = Duration::from_millis(100);
const CLEANUP_STEADY_POLLS: usize = 5;

/// Waits until the kernel has freed the network namespaces deleted before
/// the call: it tears them down afterwards on a workqueue, for seconds
/// after 200 pods, holding RTNL while it unregisters their links, which
/// would slow whatever is timed next. Done when the slab count of live
/// `net_namespace` objects has stopped changing; without
/// `/proc/slabinfo`, a fixed pause.
pub fn wait_for_namespace_cleanup() {
    let live = || -> Option<u64> {
        let slabs = std::fs::read_to_string("/proc/slabinfo").ok()?;
        let line = slabs.lines().find(|l| l.starts_with("net_namespace "))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    let start = std::time::Instant::now();
    let (mut last, mut steady) = (live(), 0);
    if last.is_none() {
        std::thread::sleep(Duration::from_secs(5));
        return;
    }
    while steady < CLEANUP_STEADY_POLLS && start.elapsed() < CLEANUP_TIMEOUT {
        std::thread::sleep(CLEANUP_POLL);
        let now = live();
        steady = if now == last { steady + 1 } else { 0 };
        last = now;
    }
}

/// One printed row: a metric, our figure, the reference's, and the ratio.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    pub metric: String,
    pub ours: f64,
    pub reference: f64,
    pub unit: String,
    /// ours / reference.
    pub ratio: f64,
    /// The target the project set for the ratio, if any (at most this).
    pub target: Option<f64>,
}

impl Row {
    pub fn new(metric: impl Into<String>, ours: f64, reference: f64, unit: &str) -> Row {
        Row {
            metric: metric.into(),
            ours,
            reference,
            unit: unit.to_string(),
            ratio: ours / reference,
            target: None,
        }
    }

    /// A figure with nothing to compare it with: reference and ratio are
    /// NaN (`null` in the JSON, `-` in the table).
    pub fn alone(metric: impl Into<String>, ours: f64, unit: &str) -> Row {
        Row::new(metric, ours, f64::NAN, unit)
    }

    pub fn with_target(mut self, target: f64) -> Row {
        self.target = Some(target);
        self
    }

    pub fn meets_target(&self) -> Option<bool> {
        self.target.map(|t| self.ratio <= t)
    }
}

/// A plain-text table, as the README shows it.
pub fn render_table(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| metric | ours | reference | ratio | target | met |\n| --- | ---: | ---: | ---: | ---: | --- |"
    );
    for r in rows {
        let target = r.target.map(|t| format!("<= {t:.2}")).unwrap_or_default();
        let met = match r.meets_target() {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "",
        };
        let ratio = if r.ratio.is_finite() {
            format!("{:.2}", r.ratio)
        } else {
            "-".to_string()
        };
        let reference = if r.reference.is_finite() {
            format!("{:.3} {}", r.reference, r.unit)
        } else {
            "-".to_string()
        };
        let _ = writeln!(
            out,
            "| {} | {:.3} {} | {} | {} | {} | {} |",
            r.metric, r.ours, r.unit, reference, ratio, target, met
        );
    }
    out
}

/// When and where the figures were taken, for the README.
pub fn machine_line() -> String {
    let now = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    format!("measured {now} on Linux {kernel}, {cpus} CPUs")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requested_state_dir_is_used_and_named_by_its_file_system() {
        let tmpfs = tempfile::tempdir_in("/dev/shm").expect("/dev/shm");
        let state = StateRoot::choose(Some(tmpfs.path()));
        assert_eq!(state.dir, tmpfs.path());
        assert_eq!(state.file_system, "tmpfs");
        let work = state.work_dir("cni-bench-test").unwrap();
        assert!(work.is_dir());
        assert!(work.starts_with(tmpfs.path()));
        assert!(
            state.report_line().contains("(tmpfs)"),
            "{}",
            state.report_line()
        );
    }

    #[test]
    fn by_default_state_goes_to_a_tmpfs_where_there_is_one() {
        let state = StateRoot::choose(None);
        if file_system_of(Path::new("/dev/shm")) == "tmpfs" {
            assert_eq!(state.dir, Path::new("/dev/shm"));
        } else {
            assert_eq!(state.dir, std::env::temp_dir());
        }
    }

    #[test]
    fn a_figure_without_reference_shows_dashes_and_json_nulls() {
        let table = render_table(&[Row::alone("blocks claimed", 20.0, "")]);
        assert!(
            table.contains("| blocks claimed | 20.000  | - | - |  |  |"),
            "{table}"
        );
        let json = serde_json::to_value(Row::alone("x", 1.0, "s")).unwrap();
        assert!(
            json["reference"].is_null() && json["ratio"].is_null(),
            "{json}"
        );
    }

    #[test]
    fn a_missing_directory_has_an_unknown_file_system() {
        assert_eq!(
            file_system_of(Path::new("/nonexistent/cni-bench")),
            "unknown"
        );
    }
}
