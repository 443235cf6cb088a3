//! host-local alone: the cost of an allocation with an empty store and with
//! a store holding many leases, ours against the reference, and the peak
//! RSS of one ADD.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::{Row, StateRoot};
use crate::measure::{run_ok, summarize, MeasureError};
use crate::testnet::TestNetns;

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct HostLocalFigures {
    pub leases: usize,
    /// [ours, reference] ADD times with an empty store, ms.
    pub empty_add_ms: [Vec<f64>; 2],
    /// [ours, reference] ADD times with `leases` leases, ms.
    pub full_add_ms: [Vec<f64>; 2],
    pub add_rss_kib: [u64; 2],
}

fn config(data_dir: &Path) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "cniVersion": "1.0.0",
        "name": "hlbench",
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": "10.100.0.0/16"}]],
            "dataDir": data_dir
        }
    }))
    .unwrap_or_default()
}

struct Store {
    plugin: PathBuf,
    stdin: Vec<u8>,
    netns: String,
}

impl Store {
    fn call(&self, command: &str, cid: &str) -> Result<crate::measure::RunCost, MeasureError> {
        let policy = crate::testnet::scratch_policy().display().to_string();
        let env = [
            // The bench's scratch dataDir is allowed by the tests' policy.
            (libcni::confine::POLICY_ENV, policy.as_str()),
            ("CNI_COMMAND", command),
            ("CNI_CONTAINERID", cid),
            ("CNI_NETNS", self.netns.as_str()),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/nonexistent"),
        ];
        run_ok(&self.plugin, &env, &self.stdin)
    }
}

/// Gives each side two stores, one empty and one prefilled with `leases`
/// leases (each side with its own binary), then alternates ADD+DEL of a
/// fresh container over the four, so that the empty and the full store are
/// measured in the same stretch of time (measured one after the other, the
/// machine's drift between the two phases moved the ratio by 0.2-0.3).
pub fn measure(
    ours_dir: &Path,
    reference_dir: &Path,
    leases: usize,
    rounds: usize,
    state: &StateRoot,
) -> Result<(HostLocalFigures, Vec<Row>), MeasureError> {
    // Any namespace but our own will do: host-local does not enter it.
    let pod = TestNetns::new("bench-hl");
    let work = state
        .work_dir("cni-hlbench")
        .map_err(|source| MeasureError::StateDir {
            path: state.dir.display().to_string(),
            source,
        })?;
    let mut figs = HostLocalFigures {
        leases,
        ..HostLocalFigures::default()
    };
    // stores[side][0] stays empty, stores[side][1] gets the leases.
    let mut stores = Vec::new();
    for (i, dir) in [ours_dir, reference_dir].iter().enumerate() {
        let mut pair = Vec::new();
        for state in ["empty", "full"] {
            let data = work.join(format!("side{i}-{state}"));
            let _ = std::fs::create_dir_all(&data);
            pair.push(Store {
                plugin: dir.join("host-local"),
                stdin: config(&data),
                netns: pod.path().display().to_string(),
            });
        }
        stores.push(pair);
    }
    for pair in &stores {
        for n in 0..leases {
            pair[1].call("ADD", &format!("fill-{n}"))?;
        }
    }
    let mut rss = [0u64; 2];
    let mut times: [[Vec<f64>; 2]; 2] = Default::default();
    for round in 0..rounds {
        for k in 0..4 {
            // Rotates which of the four goes first.
            let slot = (round + k) % 4;
            let (side, state) = (slot % 2, slot / 2);
            let cid = format!("probe-{round}");
            let store = &stores[side][state];
            let c = store.call("ADD", &cid)?;
            times[state][side].push(c.wall.as_secs_f64() * 1e3);
            rss[side] = rss[side].max(c.max_rss_kib);
            store.call("DEL", &cid)?;
        }
    }
    let [empty, full] = times;
    figs.empty_add_ms = empty;
    figs.full_add_ms = full;
    figs.add_rss_kib = rss;
    let _ = std::fs::remove_dir_all(&work);

    let med = |v: &[f64]| {
        summarize(
            &v.iter()
                .map(|m| std::time::Duration::from_secs_f64(m / 1e3))
                .collect::<Vec<_>>(),
        )
        .median_ms
    };
    let mut rows = vec![
        Row::new(
            "host-local ADD, empty store (median)",
            med(&figs.empty_add_ms[0]),
            med(&figs.empty_add_ms[1]),
            "ms",
        ),
        Row::new(
            format!("host-local ADD, {leases} leases (median)"),
            med(&figs.full_add_ms[0]),
            med(&figs.full_add_ms[1]),
            "ms",
        ),
    ];
    for (i, side) in ["ours", "reference"].iter().enumerate() {
        rows.push(
            Row::new(
                format!("host-local {side}: ADD with {leases} leases vs empty"),
                med(&figs.full_add_ms[i]),
                med(&figs.empty_add_ms[i]),
                "ms",
            )
            .with_target(1.2),
        );
    }
    rows.push(
        Row::new(
            "host-local ADD peak RSS",
            rss[0] as f64 / 1024.0,
            rss[1] as f64 / 1024.0,
            "MiB",
        )
        .with_target(0.5),
    );
    Ok((figs, rows))
}
