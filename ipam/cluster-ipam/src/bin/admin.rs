//! `cluster-ipam-admin`: shows a cluster-ipam pool and releases the blocks
//! of nodes that are gone. For people; runtimes never run it.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use cluster_ipam::admin::{self, AdminError};
use cluster_ipam::etcd::Etcd;

#[derive(Parser)]
#[command(
    name = "cluster-ipam-admin",
    version,
    about = "Show a cluster-ipam pool on etcd and release the blocks of a node that is gone"
)]
struct Cli {
    /// The network's .conf or .conflist (its cluster-ipam ipam block says
    /// how to reach etcd: endpoints, TLS files, credentials, prefix).
    #[arg(long, short = 'c', value_name = "FILE")]
    config: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Grid, blocks and their owners, reserved addresses, node reports and
    /// each node's last sign of life.
    Show,
    /// The blocks of nodes not alive and silent for longer than PERIOD.
    Reclaimable {
        /// 600, 90s, 10m, 2h or 1d.
        #[arg(long, value_name = "PERIOD", value_parser = admin::parse_period)]
        silent_for: u64,
    },
    /// Delete a gone node's blocks, reservations and report (refused
    /// while the node is alive).
    ReleaseNode {
        /// The node's nodeName.
        node: String,
        /// Release even though the node's last report shows leases.
        #[arg(long)]
        force: bool,
    },
}

fn run(cli: Cli) -> Result<(), AdminError> {
    let cluster = admin::load_network(&cli.config)?;
    let mut etcd = Etcd::new(&cluster.etcd, &cluster.node).map_err(cluster_ipam::Error::from)?;
    match cli.command {
        Command::Show => {
            let view = admin::read_pool(&mut etcd, &cluster)?;
            print!("{}", admin::render(&cluster, &view));
        }
        Command::Reclaimable { silent_for } => {
            let view = admin::read_pool(&mut etcd, &cluster)?;
            let list = admin::reclaimable(&view, silent_for);
            print!("{}", admin::render_reclaimable(&list, silent_for));
        }
        Command::ReleaseNode { node, force } => {
            let released = admin::release_node(&mut etcd, &cluster, &node, force)?;
            println!(
                "released node {node}: {} block(s) [{}], {} reservation(s) [{}]",
                released.blocks.len(),
                released.blocks.join(" "),
                released.reservations.len(),
                released.reservations.join(" ")
            );
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cluster-ipam-admin: {e}");
            ExitCode::FAILURE
        }
    }
}
