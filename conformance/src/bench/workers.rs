//! Many pods added at once: `workers` threads share one network per side
//! and add `pods` pods in all, as a node does when a deployment scales up.
//! Wall time, failures and duplicate addresses are counted; then every pod
//! is deleted again.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use libcni::netns::NetNs;

use super::chain::{ChainError, Network, Side};
use super::{Row, StateRoot};
use crate::testnet::TestNetns;

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct WorkerFigures {
    pub workers: usize,
    pub pods: usize,
    /// [ours, reference]
    pub wall_s: [f64; 2],
    pub failures: [usize; 2],
    pub duplicate_ips: [usize; 2],
}

struct SideOutcome {
    wall_s: f64,
    failures: usize,
    duplicates: usize,
}

fn run_side(net: &Network, workers: usize, pods: usize) -> SideOutcome {
    let next = AtomicUsize::new(0);
    let live: Mutex<HashSet<String>> = Mutex::new(HashSet::new());
    let failures = AtomicUsize::new(0);
    let duplicates = AtomicUsize::new(0);
    let attached: Mutex<Vec<(TestNetns, libcni::runtime::RuntimeConf)>> = Mutex::new(Vec::new());
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= pods {
                    break;
                }
                let pod = TestNetns::new("bench-w");
                let rt = net.runtime_conf(&pod, 5000 + n, false);
                match net.add_with_ip(&rt) {
                    Ok((_, Some(ip))) => {
                        let fresh = live.lock().map(|mut l| l.insert(ip)).unwrap_or(false);
                        if !fresh {
                            duplicates.fetch_add(1, Ordering::Relaxed);
                        }
                        if let Ok(mut a) = attached.lock() {
                            a.push((pod, rt));
                        }
                    }
                    Ok((_, None)) | Err(_) => {
                        failures.fetch_add(1, Ordering::Relaxed);
                        let _ = net.del(&rt);
                    }
                }
            });
        }
    });
    let wall_s = start.elapsed().as_secs_f64();
    for (_pod, rt) in attached.into_inner().unwrap_or_default() {
        let _ = net.del(&rt);
    }
    SideOutcome {
        wall_s,
        failures: failures.into_inner(),
        duplicates: duplicates.into_inner(),
    }
}

/// Both sides in turn (ours first), each in its own fake host namespace.
pub fn measure(
    ours_dir: &Path,
    reference_dir: &Path,
    workers: usize,
    pods: usize,
    state: &StateRoot,
) -> Result<(WorkerFigures, Vec<Row>), ChainError> {
    let mut figs = WorkerFigures {
        workers,
        pods,
        ..WorkerFigures::default()
    };
    for (i, (side, dir)) in [(Side::Ours, ours_dir), (Side::Reference, reference_dir)]
        .into_iter()
        .enumerate()
    {
        let host = TestNetns::new("bench-wh");
        let host_ns = NetNs::open(host.path())?;
        let run_dir = state.work_dir("cni-bench-workers")?;
        let work = run_dir.join(format!("workers-{i}"));
        let dir = dir.to_path_buf();
        let work2 = work.clone();
        let outcome = host_ns.run(move || -> Result<SideOutcome, ChainError> {
            let net = Network::new(side, &dir, &work2, false, None)?;
            // The first ADD creates the bridge; keep it out of the timing.
            let warm = TestNetns::new("bench-ww");
            let rt = net.runtime_conf(&warm, 0, false);
            net.add(&rt)?;
            net.del(&rt)?;
            Ok(run_side(&net, workers, pods))
        })??;
        let _ = std::fs::remove_dir_all(&run_dir);
        figs.wall_s[i] = outcome.wall_s;
        figs.failures[i] = outcome.failures;
        figs.duplicate_ips[i] = outcome.duplicates;
    }
    let rows = vec![
        Row::new(
            format!("{pods} pods by {workers} workers: wall time"),
            figs.wall_s[0],
            figs.wall_s[1],
            "s",
        )
        .with_target(1.0 / 3.0),
        Row::new(
            format!("{pods} pods by {workers} workers: failures"),
            figs.failures[0] as f64,
            figs.failures[1] as f64,
            "",
        ),
        Row::new(
            format!("{pods} pods by {workers} workers: duplicate IPs"),
            figs.duplicate_ips[0] as f64,
            figs.duplicate_ips[1] as f64,
            "",
        ),
    ];
    Ok((figs, rows))
}
