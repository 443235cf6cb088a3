//! `conformance`: checks and benchmarks for a directory of CNI plugins.
//!
//! `conformance bench` measures our plugins side by side with the reference
//! plugins (Debian's containernetworking-plugins in /usr/lib/cni) and prints
//! a table of our figure, the reference's and the ratio.

mod bench;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    Bench {
        /// Directory holding our plugin binaries.
        #[arg(long, default_value = "target/release")]
        ours: PathBuf,
        /// Directory holding the reference plugin binaries.
        #[arg(long, default_value = "/usr/lib/cni")]
        reference: PathBuf,
        /// Rounds per measurement.
        #[arg(long, default_value_t = 300)]
        rounds: usize,
        /// Plugins whose VERSION call is measured.
        #[arg(long, value_delimiter = ',', default_value = "loopback,host-local")]
        plugins: Vec<String>,
        /// Where the raw figures are written as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Bench {
            ours,
            reference,
            rounds,
            plugins,
            json,
        } => {
            let mut rows = Vec::new();
            let mut raw = Vec::new();
            for plugin in &plugins {
                if !ours.join(plugin).exists() {
                    eprintln!("skipping {plugin}: not built in {}", ours.display());
                    continue;
                }
                match bench::version::measure(plugin, &ours, &reference, rounds) {
                    Ok((figs, r)) => {
                        raw.push(figs);
                        rows.extend(r);
                    }
                    Err(e) => {
                        eprintln!("bench failed: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            }
            print!("{}", bench::render_table(&rows));
            if let Some(path) = json {
                let doc = serde_json::json!({"version": raw, "rows": rows});
                if let Err(e) = std::fs::write(&path, doc.to_string()) {
                    eprintln!("cannot write {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
            }
            ExitCode::SUCCESS
        }
    }
}
