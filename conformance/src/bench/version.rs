//! The cost of a VERSION call, against an exec of /bin/true and against the
//! reference plugin of the same name.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::Row;
use crate::measure::{run_ok, summarize, MeasureError};

const VERSION_ENV: &[(&str, &str)] = &[("CNI_COMMAND", "VERSION")];
const VERSION_STDIN: &[u8] = br#"{"cniVersion":"1.1.0"}"#;

#[derive(Debug, Clone, serde::Serialize)]
pub struct VersionFigures {
    pub plugin: String,
    pub ours_ms: Vec<f64>,
    pub reference_ms: Vec<f64>,
    pub true_ms: Vec<f64>,
    pub ours_rss_kib: u64,
    pub reference_rss_kib: u64,
}

/// Measures VERSION of `plugin` from both directories and /bin/true,
/// alternating the three on every round.
pub fn measure(
    plugin: &str,
    ours_dir: &Path,
    reference_dir: &Path,
    rounds: usize,
) -> Result<(VersionFigures, Vec<Row>), MeasureError> {
    let ours = ours_dir.join(plugin);
    let reference = reference_dir.join(plugin);
    let truth = PathBuf::from("/bin/true");
    let mut figs = VersionFigures {
        plugin: plugin.to_string(),
        ours_ms: Vec::with_capacity(rounds),
        reference_ms: Vec::with_capacity(rounds),
        true_ms: Vec::with_capacity(rounds),
        ours_rss_kib: 0,
        reference_rss_kib: 0,
    };
    let (mut t_ours, mut t_ref, mut t_true) = (Vec::new(), Vec::new(), Vec::new());
    // Warm the page cache so the first round does not measure disk reads.
    for p in [&ours, &reference, &truth] {
        run_ok(p, VERSION_ENV, VERSION_STDIN)?;
    }
    for round in 0..rounds {
        // Rotate the order each round.
        let order: [usize; 3] = match round % 3 {
            0 => [0, 1, 2],
            1 => [1, 2, 0],
            _ => [2, 0, 1],
        };
        for which in order {
            match which {
                0 => {
                    let c = run_ok(&ours, VERSION_ENV, VERSION_STDIN)?;
                    figs.ours_rss_kib = figs.ours_rss_kib.max(c.max_rss_kib);
                    t_ours.push(c.wall);
                }
                1 => {
                    let c = run_ok(&reference, VERSION_ENV, VERSION_STDIN)?;
                    figs.reference_rss_kib = figs.reference_rss_kib.max(c.max_rss_kib);
                    t_ref.push(c.wall);
                }
                _ => t_true.push(run_ok(&truth, VERSION_ENV, VERSION_STDIN)?.wall),
            }
        }
    }
    let to_ms = |v: &[Duration]| v.iter().map(|d| d.as_secs_f64() * 1e3).collect::<Vec<_>>();
    figs.ours_ms = to_ms(&t_ours);
    figs.reference_ms = to_ms(&t_ref);
    figs.true_ms = to_ms(&t_true);
    let (so, sr, st) = (summarize(&t_ours), summarize(&t_ref), summarize(&t_true));
    let rows = vec![
        Row::new(
            format!("{plugin} VERSION vs /bin/true (median)"),
            so.median_ms,
            st.median_ms,
            "ms",
        )
        .with_target(2.0),
        Row::new(
            format!("{plugin} VERSION vs reference (median)"),
            so.median_ms,
            sr.median_ms,
            "ms",
        ),
        Row::new(
            format!("{plugin} VERSION peak RSS vs reference"),
            figs.ours_rss_kib as f64 / 1024.0,
            figs.reference_rss_kib as f64 / 1024.0,
            "MiB",
        )
        .with_target(0.5),
    ];
    Ok((figs, rows))
}
