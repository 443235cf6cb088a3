//! The command line.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::pass::PassOptions;

#[derive(Debug, Parser)]
#[command(
    name = "cni-node",
    version,
    about = "Runs CNI GC and STATUS on a node for the container runtime"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// One GC pass: release what pods the runtime no longer lists held.
    /// Prints one line per released attachment; exits 0 when the pass
    /// ran, 1 when it could not (the runtime did not answer: nothing is
    /// released then).
    Gc {
        /// Run one pass and exit (the only mode of `gc`; `run` loops).
        #[arg(long, required = true)]
        once: bool,
        #[command(flatten)]
        pass: PassArgs,
    },
    /// The node agent: a GC pass and STATUS of every network each
    /// interval, metrics on 127.0.0.1 (`/metrics`, `/healthz`).
    Run {
        /// Time between the end of a pass and the start of the next.
        #[arg(long, default_value = "1m", value_parser = parse_duration)]
        interval: Duration,
        /// The metrics port on 127.0.0.1 (0: any free port, logged).
        #[arg(long, default_value_t = 9793)]
        metrics_port: u16,
        /// The TTL of the node's etcd liveness lease in each cluster-ipam
        /// network of the folder (beaten every third of it; at least 2s).
        #[arg(long, default_value = "30s", value_parser = parse_duration)]
        heartbeat_ttl: Duration,
        #[command(flatten)]
        pass: PassArgs,
    },
}

/// Where a pass looks and what it may do.
#[derive(Debug, Clone, Args)]
pub struct PassArgs {
    /// The runtime's CRI endpoint [default: unix:///run/containerd/containerd.sock,
    /// or CRI-O's unix:///var/run/crio/crio.sock when only that exists].
    #[arg(long, env = "CNI_NODE_CRI_ENDPOINT")]
    pub cri_endpoint: Option<String>,
    /// The runtime's conflist folder.
    #[arg(long, default_value = "/etc/cni/net.d")]
    pub conf_dir: PathBuf,
    /// The plugin folders (':'-separated), as the runtime's CNI_PATH.
    #[arg(long, default_value = "/opt/cni/bin", value_delimiter = ':')]
    pub bin_dir: Vec<PathBuf>,
    /// The runtime's CNI cache folder (results/ below it).
    #[arg(long, default_value = "/var/lib/cni")]
    pub cache_dir: PathBuf,
    /// Attachments younger than this are kept even when their sandbox is
    /// not listed (an ADD finished before the runtime records the sandbox).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub min_age: Duration,
    /// Print what would be released; change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

impl PassArgs {
    pub fn options(&self) -> Result<PassOptions, crate::Error> {
        Ok(PassOptions {
            cri_socket: crate::cri::choose_socket(self.cri_endpoint.as_deref())?,
            conf_dir: self.conf_dir.clone(),
            bin_dirs: self.bin_dir.clone(),
            cache_dir: self.cache_dir.clone(),
            min_age: self.min_age,
            dry_run: self.dry_run,
        })
    }
}

/// "5m", "30s", "1h 30m", "0s".
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("{text:?} is not a duration such as 5m or 30s: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_issues() {
        let cli = Cli::try_parse_from(["cni-node", "gc", "--once"]).unwrap();
        let Command::Gc { pass, once } = cli.command else {
            panic!("not gc")
        };
        assert!(once);
        assert_eq!(pass.cri_endpoint, None);
        assert_eq!(pass.conf_dir, PathBuf::from("/etc/cni/net.d"));
        assert_eq!(pass.bin_dir, vec![PathBuf::from("/opt/cni/bin")]);
        assert_eq!(pass.cache_dir, PathBuf::from("/var/lib/cni"));
        assert_eq!(pass.min_age, Duration::from_secs(300));
        assert!(!pass.dry_run);
    }

    #[test]
    fn gc_needs_once_and_a_readable_min_age() {
        assert!(Cli::try_parse_from(["cni-node", "gc"]).is_err());
        let err = Cli::try_parse_from(["cni-node", "gc", "--once", "--min-age", "soon"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"soon\" is not a duration such as 5m or 30s"),
            "{err}"
        );
        let cli = Cli::try_parse_from([
            "cni-node",
            "gc",
            "--once",
            "--min-age",
            "0s",
            "--bin-dir",
            "/a:/b",
            "--dry-run",
        ])
        .unwrap();
        let Command::Gc { pass, .. } = cli.command else {
            panic!("not gc")
        };
        assert_eq!(pass.min_age, Duration::ZERO);
        assert_eq!(pass.bin_dir, vec![PathBuf::from("/a"), PathBuf::from("/b")]);
        assert!(pass.dry_run);
    }

    #[test]
    fn run_loops_every_minute_with_metrics_on_9793() {
        let cli = Cli::try_parse_from(["cni-node", "run"]).unwrap();
        let Command::Run {
            interval,
            metrics_port,
            heartbeat_ttl,
            pass,
        } = cli.command
        else {
            panic!("not run")
        };
        assert_eq!(interval, Duration::from_secs(60));
        assert_eq!(heartbeat_ttl, Duration::from_secs(30));
        assert_eq!(metrics_port, 9793);
        assert_eq!(pass.min_age, Duration::from_secs(300));
    }
}
