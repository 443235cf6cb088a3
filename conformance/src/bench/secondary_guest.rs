//! The `secondary-guest` group: ADD+DEL time and ADD peak RSS of the
//! plugins whose link types this machine's kernel lacks ([`PLUGINS`]),
//! ours against the reference, measured inside the qemu guest of
//! `testing/qemu-guest` in one boot.
//!
//! The guest runs under TCG (software emulation: the machines of this
//! project have no working KVM), so every absolute figure is many times
//! what it would be on hardware; the ratio of ours to the reference, both
//! taken in the same boot, alternating round by round, is what the group
//! is for, and even that carries emulation's skew (TCG makes system calls
//! and page faults cost differently from CPU work). The rows say so.
//!
//! The guest script (`secondary_guest.sh`) does what [`super::secondary`]
//! does on the host: a fake host namespace per side, a fresh pod per round,
//! peak-RSS rounds first, then timed rounds; each call runs through the
//! `bench-measure` helper (this crate's other binary), which starts the
//! plugin as the host bench does and prints its wall time and
//! `ru_maxrss`. The host reads the `BENCH` lines of the console.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use qemu_guest::{GuestFolder, QemuGuest, GUEST_BIN_DIR};

use super::secondary::SecondaryFigures;
use super::Row;
use crate::measure::summarize;

/// The plugins this group measures, in report order: ipvlan and vlan, and
/// dummy and vrf (ours only for dummy: the reference 1.1.1 has none).
pub const PLUGINS: [&str; 4] = ["ipvlan", "vlan", "dummy", "vrf"];

/// Rounds before the timed ones, run for peak RSS (as on the host).
const RSS_ROUNDS: usize = 3;

/// The guest's plugin folders, one per side.
const OURS_DIR: &str = "/opt/cni/ours";
const REFERENCE_DIR: &str = "/opt/cni/reference";

/// What the figures are, for the report and the JSON.
pub const ENVIRONMENT: &str = "qemu guest under TCG software emulation (no KVM), 1 vCPU, \
     1 GiB; absolute times are emulation's, compare the ratios only";

#[derive(Debug, thiserror::Error)]
pub enum GuestBenchError {
    #[error("the qemu guest: {0}")]
    Guest(#[from] qemu_guest::GuestError),
    #[error("{0} is missing: build it with `cargo build --release -p conformance`")]
    NoHelper(PathBuf),
    #[error("cannot write the guest script {path}: {source}")]
    Script {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no plugin of {0:?} is built in the ours folder")]
    NothingToMeasure(Vec<String>),
    #[error(
        "the guest run failed ({reason}); console in the guest cache's logs/, its end:\n{tail}"
    )]
    Run { reason: String, tail: String },
    #[error("guest output: {0}")]
    Parse(String),
}

/// One `BENCH` line of the guest console.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchLine {
    pub plugin: String,
    /// 0 ours, 1 reference.
    pub side: usize,
    pub round: usize,
    pub verb: String,
    /// The peak-RSS rounds (started by fork) rather than the timed ones.
    pub rss: bool,
    pub ns: u64,
    pub rss_kib: Option<u64>,
    pub exit: i32,
}

/// Reads the fields of one `BENCH key=value ...` line; `None` for any other
/// line, an error for a `BENCH` line that lacks a field or has a bad one.
pub fn parse_bench_line(line: &str) -> Option<Result<BenchLine, String>> {
    let rest = line.strip_prefix("BENCH ")?;
    let fields: BTreeMap<&str, &str> = rest
        .split_whitespace()
        .filter_map(|field| field.split_once('='))
        .collect();
    let get = |key: &str| {
        fields
            .get(key)
            .copied()
            .ok_or_else(|| format!("no {key}= in {line:?}"))
    };
    let number = |key: &str| -> Result<u64, String> {
        get(key)?
            .parse()
            .map_err(|_| format!("{key} is not a number in {line:?}"))
    };
    let parsed = (|| {
        let side = match get("side")? {
            "ours" => 0,
            "reference" => 1,
            other => return Err(format!("unknown side {other:?} in {line:?}")),
        };
        let rss = match get("mode")? {
            "rss" => true,
            "time" => false,
            other => return Err(format!("unknown mode {other:?} in {line:?}")),
        };
        Ok(BenchLine {
            plugin: get("plugin")?.to_string(),
            side,
            round: usize::try_from(number("round")?).map_err(|e| e.to_string())?,
            verb: get("verb")?.to_string(),
            rss,
            ns: number("ns")?,
            rss_kib: fields.get("rss_kib").and_then(|v| v.parse().ok()),
            exit: get("exit")?
                .parse()
                .map_err(|_| format!("exit is not a number in {line:?}"))?,
        })
    })();
    Some(parsed)
}

/// The figures of each plugin in `plugins` from a guest console: per side,
/// ADD+DEL of each timed round whose two calls both exited 0, and the
/// highest ADD peak RSS of the RSS rounds. A plugin with no timed round on
/// our side is an error (the guest's CHECK lines say why).
pub fn figures_from_console(
    console: &str,
    plugins: &[&str],
) -> Result<Vec<SecondaryFigures>, String> {
    let mut lines = Vec::new();
    for parsed in console.lines().filter_map(parse_bench_line) {
        lines.push(parsed?);
    }
    let mut out = Vec::new();
    for &plugin in plugins {
        let mut figs = SecondaryFigures {
            plugin: plugin.to_string(),
            ..SecondaryFigures::default()
        };
        // (side, round) -> [ADD ns, DEL ns] of the timed rounds.
        let mut timed: BTreeMap<(usize, usize), [Option<u64>; 2]> = BTreeMap::new();
        for l in lines.iter().filter(|l| l.plugin == plugin && l.exit == 0) {
            let verb = match l.verb.as_str() {
                "ADD" => 0,
                "DEL" => 1,
                _ => continue,
            };
            if l.rss {
                if verb == 0 {
                    let peak = &mut figs.add_rss_kib[l.side];
                    *peak = (*peak).max(l.rss_kib.unwrap_or(0));
                }
            } else {
                timed.entry((l.side, l.round)).or_default()[verb] = Some(l.ns);
            }
        }
        for ((side, _), calls) in timed {
            if let [Some(add), Some(del)] = calls {
                figs.add_del_ms[side].push((add + del) as f64 / 1e6);
            }
        }
        if figs.add_del_ms[0].is_empty() {
            return Err(format!("no complete timed round of our {plugin}"));
        }
        out.push(figs);
    }
    Ok(out)
}

/// The VERSION times of `plugin` per side, ms: what merely starting the
/// plugin costs in the guest, the floor under its ADD and DEL.
pub fn version_ms_from_console(console: &str, plugin: &str) -> Result<[Vec<f64>; 2], String> {
    let mut out: [Vec<f64>; 2] = Default::default();
    for parsed in console.lines().filter_map(parse_bench_line) {
        let l = parsed?;
        if l.plugin == plugin && l.verb == "VERSION" && l.exit == 0 && !l.rss {
            out[l.side].push(l.ns as f64 / 1e6);
        }
    }
    Ok(out)
}

fn median_ms(samples: &[f64]) -> f64 {
    summarize(
        &samples
            .iter()
            .map(|ms| Duration::from_secs_f64(ms / 1e3))
            .collect::<Vec<_>>(),
    )
    .median_ms
}

/// The table rows of one plugin: as the secondary group's, named as taken
/// in the guest; a plugin the reference lacks has ours alone.
pub fn rows(figs: &SecondaryFigures) -> Vec<Row> {
    let plugin = &figs.plugin;
    let time = format!("{plugin} ADD+DEL (median, qemu TCG guest)");
    let rss = format!("{plugin} ADD peak RSS (qemu TCG guest)");
    let ours_ms = median_ms(&figs.add_del_ms[0]);
    let ours_mib = figs.add_rss_kib[0] as f64 / 1024.0;
    if figs.add_del_ms[1].is_empty() {
        return vec![
            Row::alone(format!("{time}, no reference"), ours_ms, "ms"),
            Row::alone(format!("{rss}, no reference"), ours_mib, "MiB"),
        ];
    }
    vec![
        Row::new(time, ours_ms, median_ms(&figs.add_del_ms[1]), "ms").with_target(0.25),
        Row::new(rss, ours_mib, figs.add_rss_kib[1] as f64 / 1024.0, "MiB").with_target(0.5),
    ]
}

/// What the group measured, and what it could not.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GuestBench {
    pub figures: Vec<SecondaryFigures>,
    /// "ipvlan: not built in ..." and the like.
    pub skipped: Vec<String>,
    /// The guest kernel's release, from its boot line.
    pub guest_kernel: String,
    /// The plugin whose VERSION call was timed, and its times per side
    /// (ms), when both sides have one of [`PLUGINS`].
    pub version_plugin: Option<String>,
    pub version_ms: [Vec<f64>; 2],
    /// Boot, measurements and power-off, seconds.
    pub boot_seconds: f64,
}

impl GuestBench {
    /// The row of the VERSION floor, when it was measured.
    pub fn version_row(&self) -> Option<Row> {
        let plugin = self.version_plugin.as_ref()?;
        if self.version_ms.iter().any(Vec::is_empty) {
            return None;
        }
        Some(Row::new(
            format!("{plugin} VERSION, process start only (median, qemu TCG guest)"),
            median_ms(&self.version_ms[0]),
            median_ms(&self.version_ms[1]),
            "ms",
        ))
    }
}

/// The script the guest runs: the settings, then the fixed part.
fn script_text(rounds: usize, plugins: &[&str], version_plugin: Option<&str>) -> String {
    format!(
        "#!/usr/bin/env bash\n# Written by conformance bench (secondary-guest).\n\
         rounds={rounds}\nrss_rounds={RSS_ROUNDS}\nplugins=\"{}\"\nversion_plugin=\"{}\"\n{}",
        plugins.join(" "),
        version_plugin.unwrap_or(""),
        include_str!("secondary_guest.sh")
    )
}

/// The guest kernel's release from init's `GUEST-BOOT <release>` line
/// (which the firmware's escape codes may precede on the console).
pub fn guest_kernel(console: &str) -> String {
    console
        .lines()
        .find_map(|l| l.split_once("GUEST-BOOT ").map(|(_, release)| release))
        .map_or_else(|| "unknown".to_string(), |r| r.trim().to_string())
}

/// The last lines of a console, for an error.
fn tail(console: &str, lines: usize) -> String {
    let all: Vec<&str> = console.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Boots the guest once and measures every plugin of [`PLUGINS`] built in
/// `ours` (with its host-local), against the one of the same name in
/// `reference` where there is one, over `rounds` timed rounds per side.
pub fn measure(
    ours: &Path,
    reference: &Path,
    rounds: usize,
) -> Result<GuestBench, GuestBenchError> {
    let helper = std::env::current_exe()
        .map_err(|e| GuestBenchError::Parse(format!("cannot find this program: {e}")))?
        .with_file_name("bench-measure");
    if !helper.is_file() {
        return Err(GuestBenchError::NoHelper(helper));
    }
    let mut skipped = Vec::new();
    let mut plugins = Vec::new();
    let mut ours_bins = Vec::new();
    let mut reference_bins = Vec::new();
    let mut version_plugin = None;
    for plugin in PLUGINS {
        if !ours.join(plugin).is_file() {
            skipped.push(format!("{plugin}: not built in {}", ours.display()));
            continue;
        }
        plugins.push(plugin);
        ours_bins.push(ours.join(plugin));
        if reference.join(plugin).is_file() {
            reference_bins.push(reference.join(plugin));
            // The last one both have: vrf, which delegates to no IPAM.
            version_plugin = Some(plugin);
        } else {
            skipped.push(format!(
                "{plugin}: no reference plugin in {}, ours only",
                reference.display()
            ));
        }
    }
    if plugins.is_empty() {
        return Err(GuestBenchError::NothingToMeasure(
            PLUGINS.iter().map(|p| p.to_string()).collect(),
        ));
    }
    // The IPAM plugin the delegating plugins call, each side its own.
    for (dir, bins) in [(ours, &mut ours_bins), (reference, &mut reference_bins)] {
        let ipam = dir.join("host-local");
        if !ipam.is_file() {
            return Err(GuestBenchError::Parse(format!(
                "{} is missing (the plugins' IPAM)",
                ipam.display()
            )));
        }
        bins.push(ipam);
    }
    // A fixed path, so that the guest cache keeps one log of this script
    // rather than one per run.
    let script_dir = std::env::temp_dir().join("cni-bench-secondary-guest");
    let script = script_dir.join("guest-bench.sh");
    std::fs::create_dir_all(&script_dir)
        .and_then(|()| std::fs::write(&script, script_text(rounds, &plugins, version_plugin)))
        .map_err(|source| GuestBenchError::Script {
            path: script.clone(),
            source,
        })?;
    // Generous: a boot takes about 15 s, a round a few seconds per side.
    let limit = Duration::from_secs(180 + 10 * (rounds + RSS_ROUNDS) as u64 * plugins.len() as u64);
    let guest = QemuGuest::prepare()?.with_timeout(limit);
    let run = guest.run_with_folders(
        &script,
        &[
            GuestFolder::new(GUEST_BIN_DIR, [&helper]),
            GuestFolder::new(OURS_DIR, &ours_bins),
            GuestFolder::new(REFERENCE_DIR, &reference_bins),
        ],
    )?;
    let failures: Vec<String> = run.failures().iter().map(|c| c.to_string()).collect();
    if !run.finished || !failures.is_empty() {
        let reason = if failures.is_empty() {
            format!("no ALL-DONE, run.sh {}", run.status)
        } else {
            failures.join("; ")
        };
        return Err(GuestBenchError::Run {
            reason,
            tail: tail(&run.console, 30),
        });
    }
    let figures = figures_from_console(&run.console, &plugins).map_err(GuestBenchError::Parse)?;
    let version_ms = match version_plugin {
        Some(plugin) => {
            version_ms_from_console(&run.console, plugin).map_err(GuestBenchError::Parse)?
        }
        None => Default::default(),
    };
    let guest_kernel = guest_kernel(&run.console);
    Ok(GuestBench {
        figures,
        skipped,
        guest_kernel,
        version_plugin: version_plugin.map(str::to_string),
        version_ms,
        boot_seconds: run.elapsed.as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONSOLE: &str = "\
GUEST-BOOT 6.1.0-57-amd64
BENCH plugin=ipvlan side=ours round=0 verb=ADD mode=rss ns=9000000 rss_kib=1800 exit=0
BENCH plugin=ipvlan side=ours round=0 verb=DEL mode=rss ns=8000000 rss_kib=1700 exit=0
BENCH plugin=ipvlan side=reference round=0 verb=ADD mode=rss ns=30000000 rss_kib=9000 exit=0
BENCH plugin=ipvlan side=reference round=0 verb=DEL mode=rss ns=20000000 rss_kib=9500 exit=0
BENCH plugin=ipvlan side=reference round=1 verb=ADD mode=rss ns=30000000 rss_kib=9200 exit=0
BENCH plugin=ipvlan side=ours round=1 verb=ADD mode=rss ns=9000000 rss_kib=1900 exit=0
BENCH plugin=ipvlan side=ours round=2 verb=ADD mode=time ns=4000000 exit=0
BENCH plugin=ipvlan side=ours round=2 verb=DEL mode=time ns=2000000 exit=0
BENCH plugin=ipvlan side=reference round=2 verb=ADD mode=time ns=20000000 exit=0
BENCH plugin=ipvlan side=reference round=2 verb=DEL mode=time ns=10000000 exit=0
BENCH plugin=ipvlan side=ours round=3 verb=ADD mode=time ns=5000000 exit=0
BENCH plugin=ipvlan side=ours round=3 verb=DEL mode=time ns=0 exit=1
CHECK bench-ipvlan-ours FAIL round 3 DEL
BENCH plugin=dummy side=ours round=2 verb=ADD mode=time ns=3000000 exit=0
BENCH plugin=dummy side=ours round=2 verb=DEL mode=time ns=1500000 exit=0
BENCH plugin=dummy side=ours round=0 verb=ADD mode=rss ns=3000000 rss_kib=1500 exit=0
ALL-DONE
";

    #[test]
    fn bench_lines_are_read_field_by_field() {
        let line = "BENCH plugin=vlan side=reference round=7 verb=DEL mode=time ns=123 exit=0";
        let parsed = parse_bench_line(line).unwrap().unwrap();
        assert_eq!(
            parsed,
            BenchLine {
                plugin: "vlan".into(),
                side: 1,
                round: 7,
                verb: "DEL".into(),
                rss: false,
                ns: 123,
                rss_kib: None,
                exit: 0,
            }
        );
        let rss = parse_bench_line(
            "BENCH plugin=vlan side=ours round=0 verb=ADD mode=rss ns=5 rss_kib=2048 exit=0",
        )
        .unwrap()
        .unwrap();
        assert_eq!((rss.side, rss.rss, rss.rss_kib), (0, true, Some(2048)));
        assert!(parse_bench_line("CHECK bench-vlan-ours PASS").is_none());
        assert!(parse_bench_line("GUEST-BOOT 6.1.0").is_none());
    }

    #[test]
    fn broken_bench_lines_are_errors() {
        for line in [
            "BENCH plugin=vlan side=theirs round=0 verb=ADD mode=time ns=1 exit=0",
            "BENCH plugin=vlan side=ours round=0 verb=ADD mode=fast ns=1 exit=0",
            "BENCH plugin=vlan side=ours round=x verb=ADD mode=time ns=1 exit=0",
            "BENCH plugin=vlan side=ours round=0 verb=ADD mode=time exit=0",
            // What the guest prints when bench-measure itself could not run.
            "BENCH plugin=vlan side=ours round=0 verb=ADD mode=time bench-measure: failed to start",
        ] {
            let parsed = parse_bench_line(line).unwrap();
            assert!(parsed.is_err(), "{line}: {parsed:?}");
        }
        let console = "BENCH plugin=vlan side=ours round=0 verb=ADD mode=time ns=oops exit=0\n";
        assert!(figures_from_console(console, &["vlan"]).is_err());
    }

    #[test]
    fn rounds_sum_add_and_del_and_rss_is_the_peak_of_adds() {
        let figs = figures_from_console(CONSOLE, &["ipvlan", "dummy"]).unwrap();
        let ipvlan = &figs[0];
        // Round 3 of ours failed its DEL: only round 2 counts.
        assert_eq!(ipvlan.add_del_ms[0], vec![6.0]);
        assert_eq!(ipvlan.add_del_ms[1], vec![30.0]);
        // ADDs only: the reference's DEL peak (9500) is not an ADD's.
        assert_eq!(ipvlan.add_rss_kib, [1900, 9200]);
        let dummy = &figs[1];
        assert_eq!(dummy.add_del_ms, [vec![4.5], vec![]]);
        assert_eq!(dummy.add_rss_kib, [1500, 0]);
    }

    #[test]
    fn a_plugin_without_timed_rounds_is_an_error() {
        let err = figures_from_console(CONSOLE, &["vlan"]).unwrap_err();
        assert!(err.contains("vlan"), "{err}");
    }

    #[test]
    fn rows_have_targets_with_a_reference_and_stand_alone_without() {
        let figs = figures_from_console(CONSOLE, &["ipvlan", "dummy"]).unwrap();
        let ipvlan = rows(&figs[0]);
        assert_eq!(ipvlan[0].metric, "ipvlan ADD+DEL (median, qemu TCG guest)");
        assert!((ipvlan[0].ratio - 0.2).abs() < 1e-9, "{:?}", ipvlan[0]);
        assert_eq!(ipvlan[0].meets_target(), Some(true));
        assert_eq!(ipvlan[1].target, Some(0.5));
        let dummy = rows(&figs[1]);
        assert!(dummy[0].metric.ends_with("no reference"), "{:?}", dummy[0]);
        assert!(dummy[0].reference.is_nan() && dummy[0].target.is_none());
    }

    #[test]
    fn version_calls_are_kept_apart_from_add_and_del() {
        let console = "\
BENCH plugin=vrf side=ours round=0 verb=VERSION mode=time ns=90000000 exit=0
BENCH plugin=vrf side=reference round=0 verb=VERSION mode=time ns=120000000 exit=0
BENCH plugin=vrf side=reference round=1 verb=VERSION mode=time ns=0 exit=1
BENCH plugin=vrf side=ours round=0 verb=ADD mode=time ns=5000000 exit=0
";
        let version = version_ms_from_console(console, "vrf").unwrap();
        assert_eq!(version, [vec![90.0], vec![120.0]]);
        let bench = GuestBench {
            figures: Vec::new(),
            skipped: Vec::new(),
            guest_kernel: "6.1".into(),
            version_plugin: Some("vrf".into()),
            version_ms: version,
            boot_seconds: 1.0,
        };
        let row = bench.version_row().unwrap();
        assert!((row.ratio - 0.75).abs() < 1e-9, "{row:?}");
        assert!(row.target.is_none());
        // A VERSION line does not make a timed ADD+DEL round.
        let figs = figures_from_console(console, &["vrf"]);
        assert!(figs.is_err(), "{figs:?}");
    }

    #[test]
    fn the_guest_kernel_is_read_past_escape_codes() {
        let console =
            "Probing EDD... ok\u{1b}[?7l\u{1b}[2JGUEST-BOOT 6.1.0-57-amd64\nGUEST-MODULES x\n";
        assert_eq!(guest_kernel(console), "6.1.0-57-amd64");
        assert_eq!(guest_kernel("no boot line\n"), "unknown");
    }

    #[test]
    fn the_script_starts_with_its_settings() {
        let text = script_text(7, &["ipvlan", "vrf"], Some("vrf"));
        assert!(text.starts_with("#!/usr/bin/env bash\n"), "{text}");
        assert!(text.contains(
            "\nrounds=7\nrss_rounds=3\nplugins=\"ipvlan vrf\"\nversion_plugin=\"vrf\"\n"
        ));
        assert!(script_text(1, &["dummy"], None).contains("\nversion_plugin=\"\"\n"));
        assert!(text.contains(". /test/guest-lib.sh"));
    }
}
