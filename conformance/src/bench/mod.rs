//! Benchmarks of our plugins against the reference plugins, side by side in
//! one run. Candidates are alternated run by run so that drift of a shared
//! machine (other load, CPU frequency) hits both sides alike.

pub mod chain;
pub mod chart;
pub mod host_local;
pub mod portmap_scale;
pub mod version;
pub mod workers;

use std::fmt::Write as _;
use std::time::Duration;

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
        let _ = writeln!(
            out,
            "| {} | {:.3} {} | {:.3} {} | {} | {} | {} |",
            r.metric, r.ours, r.unit, r.reference, r.unit, ratio, target, met
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
