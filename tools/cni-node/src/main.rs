//! `cni-node`: see the library's documentation.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use cni_node::cli::{Cli, Command, PassArgs};
use cni_node::heartbeat::{self, HeartbeatHandle, HeartbeatOptions};
use cni_node::metrics::{serve, Metrics};
use cni_node::pass::run_pass;

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let cli = Cli::parse();
    match cli.command {
        Command::Gc { pass, .. } => gc_once(&pass),
        Command::Run {
            interval,
            metrics_port,
            heartbeat_ttl,
            pass,
        } => run(&pass, interval, metrics_port, heartbeat_ttl),
    }
}

/// One pass: 0 when it ran (a network's own failure is logged and leaves
/// that network alone), 1 when it could not.
fn gc_once(args: &PassArgs) -> ExitCode {
    let outcome = args.options().and_then(|opts| {
        let mut stdout = std::io::stdout().lock();
        run_pass(&opts, &mut stdout)
    });
    match outcome {
        Ok(report) if report.runtime_error.is_none() => {
            log::info!(
                "pass done in {} ms: {} released, {} network errors",
                report.duration.as_millis(),
                report.released().count(),
                report.error_count()
            );
            ExitCode::SUCCESS
        }
        Ok(_) => ExitCode::FAILURE,
        Err(e) => {
            log::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// The daemon; returns only when it cannot start.
fn run(args: &PassArgs, interval: Duration, port: u16, heartbeat_ttl: Duration) -> ExitCode {
    let opts = match args.options() {
        Ok(opts) => opts,
        Err(e) => {
            log::error!("{e}");
            return ExitCode::FAILURE;
        }
    };
    // Before any thread starts, so that every thread blocks them and the
    // waiter below takes them (plugins exec'd later get a clear mask: std
    // resets it in the child).
    let heartbeats = Arc::new(Mutex::new(None));
    if let Err(e) = exit_on_sigterm(heartbeats.clone()) {
        log::error!("cannot set up SIGTERM handling: {e}");
        return ExitCode::FAILURE;
    }
    let metrics = Arc::new(Metrics::new());
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    match serve(addr, metrics.clone()) {
        Ok(server) => log::info!("metrics on http://{}/metrics", server.addr),
        Err(e) => {
            log::error!("{e}");
            return ExitCode::FAILURE;
        }
    }
    let heartbeat_opts = HeartbeatOptions {
        conf_dir: opts.conf_dir.clone(),
        ttl: heartbeat_ttl,
        rescan: interval,
    };
    match heartbeat::spawn(heartbeat_opts, metrics.clone()) {
        Ok(handle) => {
            if let Ok(mut slot) = heartbeats.lock() {
                *slot = Some(handle);
            }
        }
        Err(e) => {
            log::error!("cannot start the heartbeat thread: {e}");
            return ExitCode::FAILURE;
        }
    }
    cni_node::daemon::run(&opts, interval, &metrics)
}

/// How long SIGTERM waits for the heartbeats to revoke their leases (each
/// etcd call is bounded by its network's `etcd.timeoutMs`); past it the
/// leases expire by themselves within their TTL.
const STOP_BOUND: Duration = Duration::from_secs(20);

/// SIGTERM or SIGINT (the pod's termination, ^C) end the daemon with
/// status 0. A pass cut short leaves nothing a later pass cannot finish:
/// a plugin already running completes on its own, and an attachment whose
/// cache entry was not yet removed is DELeted again (DEL is idempotent).
///
/// The heartbeats are stopped first (their leases revoked), so the node is
/// shown silent at once rather than after the TTL.
fn exit_on_sigterm(heartbeats: Arc<Mutex<Option<HeartbeatHandle>>>) -> Result<(), std::io::Error> {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    set.thread_block().map_err(std::io::Error::from)?;
    std::thread::Builder::new()
        .name("signals".to_string())
        .spawn(move || {
            if let Ok(signal) = set.wait() {
                log::info!("{signal}: exiting");
            }
            let handle = heartbeats.lock().ok().and_then(|mut slot| slot.take());
            if let Some(handle) = handle {
                if !handle.stop(STOP_BOUND) {
                    log::warn!("heartbeats not stopped within {STOP_BOUND:?}: their leases expire by themselves");
                }
            }
            std::process::exit(0);
        })?;
    Ok(())
}
