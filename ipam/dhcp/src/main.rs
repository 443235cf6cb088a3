//! `dhcp`: the CNI IPAM plugin that leases addresses from a DHCP server,
//! and (`dhcp daemon`) the daemon that holds and renews those leases.
//!
//! A drop-in for the reference: same configuration, same socket, same
//! protocol (Go `net/rpc` with gob, see [`rpc`]), so our plugin works with
//! the Go daemon and the Go plugin with our daemon.
//!
//! ```json
//! { "cniVersion": "1.0.0", "name": "lan", "type": "macvlan", "master": "eth0",
//!   "ipam": { "type": "dhcp",
//!             "provide": [ { "option": "host-name", "fromArg": "K8S_POD_NAME" } ],
//!             "request": [ { "option": "121" } ] } }
//! ```
//!
//! - ADD: `DHCP.Allocate`; the daemon acquires a lease on `CNI_IFNAME`
//!   inside `CNI_NETNS` (or returns the one it holds for this attachment)
//!   and keeps it renewed. One address, its gateway, the routes of options
//!   121, or 33 and the router.
//! - DEL: `DHCP.Release` (DHCPRELEASE to the server); an attachment the
//!   daemon does not know succeeds.
//! - CHECK: `DHCP.Check`, which reports the lease the daemon holds without
//!   acquiring one (the reference calls Allocate, acquiring a lease when
//!   there is none); the address must be in `prevResult`. Against the Go
//!   daemon, which lacks the method, CHECK only finds the daemon reachable.
//! - GC: `DHCP.GC`; the daemon releases the network's leases whose
//!   attachment is not in `cni.dev/valid-attachments`. The Go daemon lacks
//!   it: nothing is collected and GC succeeds.
//! - STATUS: the daemon must answer (code 50 when it does not).
//!
//! DEL, GC and STATUS read only `daemonSocketPath`, so a configuration
//! whose options no longer parse cannot keep a lease from being released.
//! A GC without `cni.dev/valid-attachments` names no valid attachment and
//! so releases every lease of the network (Go's cnitool sends it that way
//! after deleting each cached attachment).
//!
//! Mixed installations: replies of this daemon claim result version 1.0.0
//! (the 1.1.0 shape is the same), which the Go plugins of CNI before 1.1
//! convert; the Go plugin's CHECK calls Allocate, which this daemon
//! answers with the lease it holds.
//!
//! Errors carry spec codes (see [`error`]) where the reference says 999.

mod client;
mod config;
mod daemon;
mod error;
mod gob;
mod lease;
mod options;
mod packet;
mod rpc;
mod socket_path;

use std::path::{Path, PathBuf};

use libcni::skel::{self, CmdArgs, Plugin};
use libcni::types::{v100, AnyResult};

use crate::config::DhcpConfig;
use crate::error::DhcpError;
use crate::gob::Value;
use crate::rpc::{CallArgs, RpcError};

struct Dhcp;

/// The call's arguments as the reference sends them: the namespace path
/// made absolute (the daemon runs elsewhere).
fn call_args(args: &CmdArgs) -> CallArgs {
    let netns = if args.netns.is_empty() {
        String::new()
    } else {
        std::path::absolute(&args.netns)
            .unwrap_or_else(|_| PathBuf::from(&args.netns))
            .to_string_lossy()
            .into_owned()
    };
    let path = args
        .path
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(":");
    CallArgs {
        container_id: args.container_id.clone(),
        netns,
        ifname: args.ifname.clone(),
        args: args.args.clone(),
        path,
        stdin_data: args.stdin_data.clone(),
    }
}

fn call(socket: &str, method: &'static str, args: &CmdArgs) -> Result<Value, DhcpError> {
    socket_path::confine(socket)?;
    rpc::call(Path::new(socket), method, &call_args(args))
        .map_err(|e| DhcpError::from_call(method, e))
}

/// A call to one of this daemon's own methods: `Ok(None)` when the daemon
/// is the Go one, which does not have it.
fn call_ours(
    socket: &str,
    method: &'static str,
    args: &CmdArgs,
) -> Result<Option<Value>, DhcpError> {
    socket_path::confine(socket)?;
    match rpc::call(Path::new(socket), method, &call_args(args)) {
        Ok(value) => Ok(Some(value)),
        Err(e) if e.is_unknown_method() => {
            log::info!("the DHCP daemon has no {method} (the Go daemon): skipped");
            Ok(None)
        }
        Err(e) => Err(DhcpError::from_call(method, e)),
    }
}

fn result_of(method: &'static str, value: &Value) -> Result<v100::Result, DhcpError> {
    rpc::result_from_value(value).map_err(|source| DhcpError::Call { method, source })
}

impl Plugin for Dhcp {
    type Error = DhcpError;

    fn about(&self) -> String {
        skel::about_string("dhcp", env!("CARGO_PKG_VERSION"))
    }

    fn add(&self, args: &CmdArgs) -> Result<AnyResult, DhcpError> {
        let config = DhcpConfig::load(&args.stdin_data, &args.args)?;
        let reply = call(&config.socket_path, rpc::METHOD_ALLOCATE, args)?;
        let leased = match result_of(rpc::METHOD_ALLOCATE, &reply) {
            Ok(leased) => leased,
            Err(e) => {
                // A lease this ADD cannot hand out is not left behind.
                if let Err(release) = call(&config.socket_path, rpc::METHOD_RELEASE, args) {
                    log::warn!("releasing the unusable lease failed: {release}");
                }
                return Err(e);
            }
        };
        log::info!(
            "DHCP lease of {}; routes: {} (from the daemon at {})",
            libcni::logging::joined(leased.ips.iter().map(|ip| ip.address)),
            libcni::logging::joined(leased.routes.iter().map(libcni::logging::RouteText)),
            config.socket_path
        );
        Ok(AnyResult::V1(leased))
    }

    fn del(&self, args: &CmdArgs) -> Result<(), DhcpError> {
        let socket = config::socket_path(&args.stdin_data)?;
        call(&socket, rpc::METHOD_RELEASE, args)?;
        log::info!("DHCP lease released (daemon at {socket})");
        Ok(())
    }

    fn check(&self, args: &CmdArgs) -> Result<(), DhcpError> {
        let config = DhcpConfig::load(&args.stdin_data, &args.args)?;
        let Some(reply) = call_ours(&config.socket_path, rpc::METHOD_CHECK, args)? else {
            return Ok(());
        };
        let leased = result_of(rpc::METHOD_CHECK, &reply)?;
        let Some(prev) = args.conf.prev_result()? else {
            return Ok(());
        };
        let prev = v100::Result::try_from(prev).map_err(DhcpError::PrevResult)?;
        for ip in &leased.ips {
            let canonical = libcni::go_compat::canonical_ip;
            if !prev
                .ips
                .iter()
                .any(|p| canonical(p.address.ip()) == canonical(ip.address.ip()))
            {
                return Err(DhcpError::LeaseMismatch {
                    leased: ip.address.ip(),
                    ifname: args.ifname.clone(),
                });
            }
        }
        Ok(())
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), DhcpError> {
        let socket = config::socket_path(&args.stdin_data)?;
        call_ours(&socket, rpc::METHOD_GC, args).map(|_| ())
    }

    fn status(&self, args: &CmdArgs) -> Result<(), DhcpError> {
        let socket = config::socket_path(&args.stdin_data)?;
        socket_path::confine(&socket)?;
        match rpc::call(Path::new(&socket), rpc::METHOD_STATUS, &call_args(args)) {
            Ok(_) => Ok(()),
            // The Go daemon answered: it is there.
            Err(e) if e.is_unknown_method() => Ok(()),
            Err(
                source @ (RpcError::Dial(_)
                | RpcError::Io(_)
                | RpcError::Gob(_)
                | RpcError::Protocol(_)
                | RpcError::Remote(_)),
            ) => Err(DhcpError::Unavailable { socket, source }),
        }
    }
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("daemon") {
        std::process::exit(daemon::main(&argv[2..]));
    }
    skel::plugin_main(Dhcp)
}
