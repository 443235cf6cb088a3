//! `conformance`: checks and benchmarks for a directory of CNI plugins.
//!
//! `conformance bench` measures our plugins side by side with the reference
//! plugins (Debian's containernetworking-plugins in /usr/lib/cni), through
//! the same runtime, and prints a table of our figure, the reference's and
//! the ratio. Needs root: it works in network namespaces it creates.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use conformance::bench::{self, Row};
use conformance::suite::known_issues::KnownIssues;
use conformance::suite::{self, Group, SuiteOptions};

#[derive(Parser)]
#[command(
    name = "conformance",
    about = "CNI plugin conformance checks and benchmarks"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Benchmarks against the reference plugins, printed as a table.
    Bench(BenchArgs),
    /// Conformance checks of a directory of plugins: one line per check
    /// and a closing `N passed, N failed` line; exits 1 if any failed.
    Suite(SuiteArgs),
    /// The same networks run by the Go cnitool and our cnitool, over our
    /// plugins and the reference plugins: results must agree.
    CrossRuntime(CrossRuntimeArgs),
    /// Podman (CNI backend) running a container with a published port on
    /// a bridge network of the plugins.
    Podman(PodmanArgs),
    /// Redraws the ADD-latency chart from a `bench --json` file.
    Chart(ChartArgs),
}

#[derive(clap::Args)]
struct ChartArgs {
    /// A file written by `bench --json`.
    json: PathBuf,
    /// Where the SVG is written.
    #[arg(long)]
    out: PathBuf,
    /// The chain group whose growth series are drawn.
    #[arg(long, default_value = "chain_portmap")]
    group: String,
    /// Legend of our side, when the file does not name it (files before
    /// 2026-12-02 do not).
    #[arg(long)]
    ours_label: Option<String>,
    /// Legend of the reference side, when the file does not name it
    /// (default: the Debian package of /usr/lib/cni on this machine).
    #[arg(long)]
    reference_label: Option<String>,
}

#[derive(clap::Args)]
struct CrossRuntimeArgs {
    /// Directory holding our plugin binaries.
    #[arg(long, default_value = "target/debug")]
    ours: PathBuf,
    /// Directory holding the reference plugin binaries.
    #[arg(long, default_value = "/usr/lib/cni")]
    reference: PathBuf,
    /// Our cnitool.
    #[arg(long, default_value = "target/debug/cnitool")]
    cnitool: PathBuf,
    /// The Go cnitool (conformance/scripts/build-go-cnitool.sh builds it).
    #[arg(long, default_value = "target/go-cnitool/cnitool")]
    go_cnitool: PathBuf,
}

#[derive(clap::Args)]
struct PodmanArgs {
    /// Directory holding the plugin binaries Podman uses.
    plugins: PathBuf,
}

#[derive(clap::Args)]
struct SuiteArgs {
    /// Directory holding the plugin binaries under test.
    plugins: PathBuf,
    /// Configuration files to validate and run (every .conf, .conflist and
    /// .json file in it).
    #[arg(long)]
    examples: Option<PathBuf>,
    /// Which groups of checks run (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Group>,
    /// Which plugin types' own scenarios run (default: every type found);
    /// the folder's other plugins still serve as IPAM delegates and in the
    /// chain and example groups.
    #[arg(long, value_delimiter = ',')]
    types: Vec<String>,
    /// Known-issue list: `auto` uses the Debian reference list for
    /// /usr/lib/cni.
    #[arg(long, value_enum, default_value = "auto")]
    known_issues: KnownIssues,
}

#[derive(clap::Args)]
struct BenchArgs {
    /// Directory holding our plugin binaries: by default the build users
    /// install (`cargo plugins`).
    #[arg(long, default_value = "target/x86_64-unknown-linux-musl/release")]
    ours: PathBuf,
    /// Directory holding the reference plugin binaries.
    #[arg(long, default_value = "/usr/lib/cni")]
    reference: PathBuf,
    /// Which benchmarks: version, host-local, cluster-ipam, chain,
    /// chain-portmap, chain-portmap-nftables, workers, portmap-scale,
    /// portmap-scale-nftables, secondary (the -nftables groups tell both
    /// sides' bridge `ipMasqBackend: nftables` and portmap `backend:
    /// nftables`; the reference 1.1.1 has no such backends and stays on
    /// iptables). secondary measures each secondary-network plugin alone
    /// (macvlan, host-device, static, tuning, sbr), rest the other main and
    /// meta plugins (ptp, bandwidth, firewall) the same way; one we have
    /// not built is skipped, with the reason.
    /// cluster-ipam (against our host-local, on a local etcd cluster) is
    /// skipped, with the reason, where /usr/bin/etcd or the plugin is
    /// missing. secondary-guest (not in the default list: only when named;
    /// about 5 minutes at 20 rounds) boots the qemu guest of testing/qemu-guest once and measures there
    /// the plugins whose link types this kernel lacks (ipvlan, vlan, vrf,
    /// and dummy, ours only); the guest runs under software emulation
    /// (TCG), so only its ratios mean something. It needs the guest
    /// prepared (testing/qemu-guest/scripts/prepare.sh) and the
    /// bench-measure binary beside this one.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "version,host-local,cluster-ipam,chain,chain-portmap,chain-portmap-nftables,workers,portmap-scale,portmap-scale-nftables,secondary,rest"
    )]
    only: Vec<String>,
    /// ADD+DEL rounds per side of each plugin of the secondary and rest
    /// groups.
    #[arg(long, default_value_t = 20)]
    secondary_rounds: usize,
    /// Timed ADD+DEL rounds per side of each plugin of the secondary-guest
    /// group (after 3 rounds for peak RSS).
    #[arg(long, default_value_t = 20)]
    guest_rounds: usize,
    /// Rounds of the VERSION measurement.
    #[arg(long, default_value_t = 300)]
    version_rounds: usize,
    /// Plugins whose VERSION call is measured.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "loopback,host-local,bridge"
    )]
    plugins: Vec<String>,
    /// One-pod ADD+DEL rounds per side.
    #[arg(long, default_value_t = 20)]
    chain_rounds: usize,
    /// Pods added one by one (then deleted) per side for the growth figures.
    #[arg(long, default_value_t = 200)]
    growth_pods: usize,
    /// Growth series per side (each `--growth-pods` pods); the growth ratio
    /// pools their first and last 20 pods.
    #[arg(long, default_value_t = 3)]
    growth_series: usize,
    /// Leases in the full host-local store.
    #[arg(long, default_value_t = 1000)]
    leases: usize,
    /// host-local ADD+DEL rounds per store state and side.
    #[arg(long, default_value_t = 50)]
    host_local_rounds: usize,
    /// cluster-ipam and host-local ADD+DEL rounds each, inside a block.
    #[arg(long, default_value_t = 50)]
    cluster_ipam_rounds: usize,
    /// cluster-ipam ADDs that claim a block (each on a fresh node).
    #[arg(long, default_value_t = 50)]
    cluster_ipam_claims: usize,
    /// cluster-ipam nodes adding pods at once, one thread each.
    #[arg(long, default_value_t = 20)]
    cluster_ipam_nodes: usize,
    /// Pods each of those nodes adds, one after the other.
    #[arg(long, default_value_t = 50)]
    cluster_ipam_pods: usize,
    /// Parallel workers for the many-pods-at-once figure.
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// Pods added by the workers, per side.
    #[arg(long, default_value_t = 200)]
    worker_pods: usize,
    /// Pods whose port mappings are present for the portmap-scale figures.
    #[arg(long, default_value_t = 500)]
    portmap_pods: usize,
    /// portmap ADD+DEL rounds per side, with no pods' rules and with
    /// `--portmap-pods` pods' rules.
    #[arg(long, default_value_t = 20)]
    portmap_rounds: usize,
    /// Where the raw figures are written as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Where the chart of ADD latency against attached pods is written (SVG).
    #[arg(long)]
    chart: Option<PathBuf>,
    /// Where the plugins keep their state during the run (host-local
    /// stores, runtime caches): by default /dev/shm where it is a tmpfs,
    /// else the temporary directory (see `bench::StateRoot` for why).
    #[arg(long)]
    state_dir: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Bench(args) => match run_bench(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("bench failed: {e}");
                ExitCode::FAILURE
            }
        },
        Cmd::Suite(args) => run_suite(args),
        Cmd::CrossRuntime(args) => finish(&suite::cross_runtime::run(
            &suite::cross_runtime::CrossOptions {
                ours: args.ours,
                reference: args.reference,
                cnitool: args.cnitool,
                go_cnitool: args.go_cnitool,
                echo: true,
            },
        )),
        Cmd::Chart(args) => match run_chart(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("chart failed: {e}");
                ExitCode::FAILURE
            }
        },
        Cmd::Podman(args) => finish(&suite::podman::run(&suite::podman::PodmanOptions {
            plugins: args.plugins,
            echo: true,
        })),
    }
}

fn run_suite(args: SuiteArgs) -> ExitCode {
    let opts = SuiteOptions {
        plugins: args.plugins,
        examples: args.examples,
        groups: if args.only.is_empty() {
            Group::ALL.to_vec()
        } else {
            args.only
        },
        types: args.types,
        known_issues: args.known_issues,
        echo: true,
    };
    finish(&suite::run(&opts))
}

/// Prints the closing lines; success when nothing failed.
fn finish(report: &suite::report::Report) -> ExitCode {
    print!("{}", report.summary());
    if report.totals().failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn run_bench(a: &BenchArgs) -> Result<(), String> {
    let mut rows: Vec<Row> = Vec::new();
    let mut raw = serde_json::Map::new();
    // Groups that could not run here, with the reason, for the report.
    let mut skipped: Vec<String> = Vec::new();
    let wants = |name: &str| a.only.iter().any(|o| o == name);
    let state = bench::StateRoot::choose(a.state_dir.as_deref());
    eprintln!("{}", state.report_line());
    if wants("version") {
        let mut figs = Vec::new();
        for plugin in &a.plugins {
            if !a.ours.join(plugin).exists() {
                eprintln!("skipping {plugin}: not built in {}", a.ours.display());
                continue;
            }
            let (f, r) = bench::version::measure(plugin, &a.ours, &a.reference, a.version_rounds)
                .map_err(|e| e.to_string())?;
            figs.push(f);
            rows.extend(r);
        }
        raw.insert(
            "version".into(),
            serde_json::to_value(figs).unwrap_or_default(),
        );
    }
    if wants("host-local") {
        let (f, r) = bench::host_local::measure(
            &a.ours,
            &a.reference,
            a.leases,
            a.host_local_rounds,
            &state,
        )
        .map_err(|e| e.to_string())?;
        raw.insert(
            "host_local".into(),
            serde_json::to_value(f).unwrap_or_default(),
        );
        rows.extend(r);
    }
    if wants("cluster-ipam") {
        match bench::cluster_ipam::unavailable(&a.ours) {
            Some(reason) => {
                eprintln!("skipping cluster-ipam: {reason}");
                raw.insert(
                    "cluster_ipam".into(),
                    serde_json::json!({ "skipped": reason }),
                );
                skipped.push(format!("cluster-ipam skipped: {reason}"));
            }
            None => {
                let runs = bench::cluster_ipam::ClusterIpamRuns {
                    rounds: a.cluster_ipam_rounds,
                    claims: a.cluster_ipam_claims,
                    nodes: a.cluster_ipam_nodes,
                    pods_per_node: a.cluster_ipam_pods,
                };
                let (f, r) = bench::cluster_ipam::measure(&a.ours, runs, &state)
                    .map_err(|e| e.to_string())?;
                raw.insert(
                    "cluster_ipam".into(),
                    serde_json::to_value(f).unwrap_or_default(),
                );
                rows.extend(r);
            }
        }
    }
    let mut growth: Option<(String, bench::chain::ChainFigures)> = None;
    for (name, portmap, backend) in [
        ("chain", false, None),
        ("chain-portmap", true, None),
        ("chain-portmap-nftables", true, Some("nftables")),
    ] {
        if wants(name) {
            let (f, r) = bench::chain::measure(
                &a.ours,
                &a.reference,
                bench::chain::ChainRuns {
                    rounds: a.chain_rounds,
                    growth_pods: a.growth_pods,
                    growth_series: a.growth_series,
                },
                portmap,
                backend,
                &state,
            )
            .map_err(|e| e.to_string())?;
            raw.insert(
                name.replace('-', "_"),
                serde_json::to_value(&f).unwrap_or_default(),
            );
            rows.extend(r);
            // The chart shows the chain as configured by default (the
            // iptables backends here), the longest one measured.
            if backend.is_none() {
                growth = Some((name.to_string(), f));
            }
        }
    }
    if wants("workers") {
        let (f, r) =
            bench::workers::measure(&a.ours, &a.reference, a.workers, a.worker_pods, &state)
                .map_err(|e| e.to_string())?;
        raw.insert(
            "workers".into(),
            serde_json::to_value(f).unwrap_or_default(),
        );
        rows.extend(r);
    }
    for (group, backend) in [
        ("portmap-scale", None),
        ("portmap-scale-nftables", Some("nftables")),
    ] {
        if wants(group) {
            let (f, r) = bench::portmap_scale::measure(
                &a.ours,
                &a.reference,
                a.portmap_pods,
                a.portmap_rounds,
                backend,
            )
            .map_err(|e| e.to_string())?;
            raw.insert(
                group.replace('-', "_"),
                serde_json::to_value(f).unwrap_or_default(),
            );
            rows.extend(r);
        }
    }
    for (group, plugins) in [
        ("secondary", &bench::secondary::PLUGINS[..]),
        ("rest", &bench::secondary::REST[..]),
    ] {
        if !wants(group) {
            continue;
        }
        let mut figs = Vec::new();
        for &plugin in plugins {
            if !a.ours.join(plugin).exists() {
                skipped.push(format!(
                    "{group} {plugin}: not built in {}",
                    a.ours.display()
                ));
                continue;
            }
            let (f, r) = bench::secondary::measure(
                plugin,
                &a.ours,
                &a.reference,
                a.secondary_rounds,
                &state,
            )
            .map_err(|e| e.to_string())?;
            figs.push(f);
            rows.extend(r);
        }
        raw.insert(group.into(), serde_json::to_value(figs).unwrap_or_default());
    }
    if wants("secondary-guest") {
        let guest = bench::secondary_guest::measure(&a.ours, &a.reference, a.guest_rounds)
            .map_err(|e| format!("secondary-guest: {e}"))?;
        for reason in &guest.skipped {
            skipped.push(format!("secondary-guest {reason}"));
        }
        skipped.push(format!(
            "secondary-guest: measured in a {} (guest kernel {}, {:.0} s boot)",
            bench::secondary_guest::ENVIRONMENT,
            guest.guest_kernel,
            guest.boot_seconds
        ));
        for figs in &guest.figures {
            rows.extend(bench::secondary_guest::rows(figs));
        }
        rows.extend(guest.version_row());
        raw.insert(
            "secondary_guest".into(),
            serde_json::to_value(&guest.figures).unwrap_or_default(),
        );
        raw.insert(
            "secondary_guest_environment".into(),
            serde_json::json!({
                "measured_in": bench::secondary_guest::ENVIRONMENT,
                "guest_kernel": guest.guest_kernel,
                "boot_seconds": guest.boot_seconds,
                "version_plugin": guest.version_plugin,
                "version_ms": guest.version_ms,
                "skipped": guest.skipped,
            }),
        );
    }
    let ours_label = ours_label(&a.ours);
    let reference_label = reference_label(&a.reference);
    if let (Some(path), Some((name, figs))) = (&a.chart, &growth) {
        let svg = growth_chart(
            name,
            &figs.growth_add_ms,
            &bench::machine_line(),
            [&ours_label, &reference_label],
        );
        std::fs::write(path, svg).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    println!("{}", bench::machine_line());
    println!("{}", state.report_line());
    for line in &skipped {
        println!("{line}");
    }
    print!("{}", bench::render_table(&rows));
    if let Some(path) = &a.json {
        raw.insert(
            "rows".into(),
            serde_json::to_value(&rows).unwrap_or_default(),
        );
        raw.insert("machine".into(), bench::machine_line().into());
        raw.insert("ours_label".into(), ours_label.into());
        raw.insert("reference_label".into(), reference_label.into());
        raw.insert("state_dir".into(), state.dir.display().to_string().into());
        raw.insert("state_file_system".into(), state.file_system.into());
        std::fs::write(path, serde_json::Value::Object(raw).to_string())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

/// The ADD-latency chart of one chain group: the pointwise median of each
/// side's growth series, ours first (drawn again alone on its own scale).
fn growth_chart(
    group: &str,
    growth_add_ms: &[Vec<Vec<f64>>; 2],
    machine: &str,
    labels: [&str; 2],
) -> String {
    let plugins = match group.replace('_', "-").as_str() {
        "chain" => "bridge + host-local",
        "chain-portmap" => "bridge + host-local + portmap",
        "chain-portmap-nftables" => "bridge + host-local + portmap (nftables)",
        other => return format!("<!-- unknown chain group {other} -->\n"),
    }
    .to_string();
    let series = growth_add_ms[0].len().min(growth_add_ms[1].len());
    let pods = growth_add_ms[0].first().map_or(0, Vec::len);
    let title = format!("ADD latency against pods already attached: {plugins}");
    let subtitle = format!(
        "{pods} pods added one by one per side, pointwise median of {series} series; {machine}"
    );
    let ours = bench::chain::pointwise_median(&growth_add_ms[0]);
    let reference = bench::chain::pointwise_median(&growth_add_ms[1]);
    bench::chart::svg(
        &title,
        &subtitle,
        &[
            bench::chart::Series {
                label: labels[0],
                colour: "#1f77b4",
                values: &ours,
            },
            bench::chart::Series {
                label: labels[1],
                colour: "#d62728",
                values: &reference,
            },
        ],
    )
}

fn run_chart(a: &ChartArgs) -> Result<(), String> {
    let text = std::fs::read_to_string(&a.json)
        .map_err(|e| format!("cannot read {}: {e}", a.json.display()))?;
    let raw: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", a.json.display()))?;
    let growth: [Vec<Vec<f64>>; 2] = raw
        .get(&a.group)
        .and_then(|g| g.get("growth_add_ms"))
        .and_then(|g| serde_json::from_value(g.clone()).ok())
        .ok_or_else(|| {
            format!(
                "{} has no growth series of group {} (growth_add_ms)",
                a.json.display(),
                a.group
            )
        })?;
    let label = |key: &str, given: &Option<String>, fallback: &dyn Fn() -> String| {
        given
            .clone()
            .or_else(|| raw.get(key).and_then(|v| v.as_str()).map(str::to_string))
            .unwrap_or_else(fallback)
    };
    let ours = label("ours_label", &a.ours_label, &|| {
        ours_label(std::path::Path::new(
            "target/x86_64-unknown-linux-musl/release",
        ))
    });
    let reference = label("reference_label", &a.reference_label, &|| {
        reference_label(std::path::Path::new("/usr/lib/cni"))
    });
    let machine = raw.get("machine").and_then(|v| v.as_str()).unwrap_or("");
    let svg = growth_chart(&a.group, &growth, machine, [&ours, &reference]);
    std::fs::write(&a.out, svg).map_err(|e| format!("cannot write {}: {e}", a.out.display()))
}

/// Legend of our side: the suite's version and where the plugins came from.
fn ours_label(dir: &std::path::Path) -> String {
    format!(
        "ours: cni-rs {} ({})",
        env!("CARGO_PKG_VERSION"),
        dir.display()
    )
}

/// Legend of the reference side: the Debian package (and version) that
/// installed `dir/bridge` when dpkg knows it, else the folder.
fn reference_label(dir: &std::path::Path) -> String {
    let dpkg = |args: &[&str]| {
        std::process::Command::new("dpkg-query")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let bridge = dir.join("bridge");
    let package = dpkg(&["-S", &bridge.to_string_lossy()])
        .and_then(|line| line.split(':').next().map(str::to_string));
    match package.and_then(|p| dpkg(&["-W", "-f", "${Version}", &p]).map(|v| (p, v))) {
        Some((package, version)) => format!("reference: Debian {package} {version}"),
        None => format!("reference: plugins in {}", dir.display()),
    }
}
