//! `cni-installer`: puts the suite's plugins onto a node, as the install
//! step of the DaemonSet in deploy/kubernetes/ does (docs/kubernetes.md).
//!
//! `install` checks every plugin of the image against its `SHA256SUMS`
//! before it touches the node, and refuses with nothing replaced when one
//! does not match or the list does not cover the folder (an unpacked
//! release archive holds more than plugins: `--ignore-unlisted` with its
//! `PLUGINS.SHA256SUMS` installs what that list names and nothing else). Then each plugin
//! is written beside its destination, synced and renamed over it, so a
//! runtime never execs a half-written binary and a plugin running at that
//! moment keeps its old file (writing in place would fail with ETXTBSY).
//! Configuration files come last, once the plugins they name are there,
//! and only where none of that name exists (`--force-conflist` replaces).
//! One line per file says what happened: installed, replaced, unchanged,
//! or kept (a configuration left as the node has it).
//!
//! `sleep` waits for SIGTERM: the DaemonSet's main container, so that the
//! pod stays up (and an image update reruns the install) with nothing
//! else in a `FROM scratch` image.

mod conflist;
mod error;
mod plugins;
mod staged;
mod sums;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use nix::sys::signal::{SigSet, Signal};

use error::InstallerError;

#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Checks the plugins against their checksums, then copies them (and
    /// configuration files) into the node's folders
    Install(InstallArgs),
    /// Waits for SIGTERM or SIGINT, then exits 0 (a DaemonSet's main
    /// container)
    Sleep,
}

#[derive(Args)]
struct InstallArgs {
    /// Folder holding the plugins and their checksum list
    #[arg(long, default_value = "/opt/cni-rs/bin")]
    from: PathBuf,
    /// The node's plugin folder (mounted from the host)
    #[arg(long, default_value = "/host/opt/cni/bin")]
    to: PathBuf,
    /// The checksum list, in `sha256sum` format [default: FROM/SHA256SUMS]
    #[arg(long)]
    sums: Option<PathBuf>,
    /// A network configuration to place in CONF_DIR, or a folder whose
    /// .conflist/.conf/.json files are all placed (a mounted ConfigMap);
    /// may be given more than once
    #[arg(long)]
    conflist: Vec<PathBuf>,
    /// The node's configuration folder (mounted from the host)
    #[arg(long, default_value = "/host/etc/cni/net.d")]
    conf_dir: PathBuf,
    /// Replace a configuration file of the same name that differs (kept
    /// otherwise)
    #[arg(long)]
    force_conflist: bool,
    /// Leave the files of FROM that the list does not name (neither checked
    /// nor installed) instead of refusing the run: for an unpacked release
    /// archive, whose tools and text files sit beside the plugins and whose
    /// PLUGINS.SHA256SUMS names the plugins only
    #[arg(long)]
    ignore_unlisted: bool,
}

/// What a run did to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Installed,
    Replaced,
    Unchanged,
    /// A configuration file of that name differs and was left as it is.
    Kept,
}

impl Outcome {
    fn word(self) -> &'static str {
        match self {
            Outcome::Installed => "installed",
            Outcome::Replaced => "replaced",
            Outcome::Unchanged => "unchanged",
            Outcome::Kept => "kept",
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Install(args) => install(&args),
        Command::Sleep => sleep(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cni-installer: {e}");
            ExitCode::FAILURE
        }
    }
}

fn install(args: &InstallArgs) -> Result<(), InstallerError> {
    let sums_path = args
        .sums
        .clone()
        .unwrap_or_else(|| args.from.join("SHA256SUMS"));
    let list = sums::read_list(&sums_path)?;
    let problems = plugins::check_sources(&args.from, &sums_path, &list, args.ignore_unlisted);
    if !problems.is_empty() {
        return Err(InstallerError::Refused { problems });
    }
    // Checked before the plugins go in, so a bad file refuses the whole run.
    let conflists = conflist::collect(&args.conflist)?;

    let mut counts = [0usize; 4];
    for (outcome, path) in plugins::install(&args.from, &args.to, &list)? {
        counts[outcome as usize] += 1;
        println!("{} {}", outcome.word(), path.display());
    }
    for conf in &conflists {
        let (outcome, path) = conflist::place(conf, &args.conf_dir, args.force_conflist)?;
        counts[outcome as usize] += 1;
        if outcome == Outcome::Kept {
            println!(
                "kept {} (differs from {}; --force-conflist replaces it)",
                path.display(),
                conf.source().display()
            );
        } else {
            println!("{} {}", outcome.word(), path.display());
        }
    }
    println!(
        "done: {} installed, {} replaced, {} unchanged, {} kept",
        counts[Outcome::Installed as usize],
        counts[Outcome::Replaced as usize],
        counts[Outcome::Unchanged as usize],
        counts[Outcome::Kept as usize],
    );
    Ok(())
}

fn sleep() -> Result<(), InstallerError> {
    // As PID 1 of a container the process gets no default signal action;
    // blocked and awaited, SIGTERM ends it at once instead of after the
    // kubelet's grace period.
    let mut signals = SigSet::empty();
    signals.add(Signal::SIGTERM);
    signals.add(Signal::SIGINT);
    signals.thread_block().map_err(InstallerError::Signal)?;
    println!("plugins installed; waiting for SIGTERM");
    let signal = signals.wait().map_err(InstallerError::Signal)?;
    println!("{signal}: exiting");
    Ok(())
}
