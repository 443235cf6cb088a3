//! `cni-node run`: a GC pass, STATUS of every network and the metrics,
//! every interval, for as long as the node runs.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use libcni::runtime::CniConfig;

use crate::leases::range_use;
use crate::metrics::Metrics;
use crate::pass::{run_pass, PassOptions};
use crate::status::{changes, status_all, NetStatus};

/// The loop's state between rounds: the networks' last STATUS.
#[derive(Debug, Default)]
pub struct Daemon {
    statuses: BTreeMap<String, NetStatus>,
}

impl Daemon {
    /// One round: the GC pass (released attachments to `out`), then
    /// STATUS of the folder's networks (a log line for each change), then
    /// the metrics.
    pub fn round(&mut self, opts: &PassOptions, metrics: &Metrics, out: &mut dyn Write) {
        let report = match run_pass(opts, out) {
            Ok(report) => report,
            Err(e) => {
                log::error!("GC pass failed: {e}");
                metrics.record_failed_pass();
                return;
            }
        };
        metrics.record_pass(&report);
        let cni = CniConfig::new(opts.bin_dirs.clone()).with_cache_dir(&opts.cache_dir);
        let statuses = status_all(&cni, &report.configs);
        for line in changes(&self.statuses, &statuses) {
            log::info!("{line}");
        }
        metrics.record_status(&statuses);
        self.statuses = statuses;
        let uses: Vec<_> = report
            .configs
            .iter()
            .flat_map(|(name, list)| range_use(name, list))
            .collect();
        metrics.record_leases(&uses);
    }

    pub fn statuses(&self) -> &BTreeMap<String, NetStatus> {
        &self.statuses
    }
}

/// Rounds every `interval`, forever.
pub fn run(opts: &PassOptions, interval: Duration, metrics: &Metrics) -> ! {
    let mut daemon = Daemon::default();
    loop {
        {
            let mut stdout = std::io::stdout().lock();
            daemon.round(opts, metrics, &mut stdout);
        }
        std::thread::sleep(interval);
    }
}
