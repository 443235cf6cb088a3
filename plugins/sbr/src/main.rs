//! `sbr`: source-based routing for a container interface, as a chained
//! plugin after the one that made the interface.
//!
//! A pod with several interfaces (one per GPU rail, say) has one main
//! routing table, so replies leave by the default route's interface
//! whatever address they come from. sbr gives each address of `CNI_IFNAME`
//! (from the previous result) a table of its own holding the interface's
//! routes and a default route through its gateway, and a rule
//! `from <address> lookup <table>`: traffic from that address leaves by
//! that interface ([`add`]).
//!
//! - ADD: see [`add`]; the previous result is passed on unchanged.
//! - DEL: see [`del`]; done when the namespace, the interface or the rules
//!   are already gone.
//! - CHECK: see [`check`] (the reference's does nothing).
//! - GC: sbr keeps nothing outside the container's namespace, whose rules
//!   and tables go with it, so there is nothing to collect.
//! - STATUS: sbr needs nothing but the kernel; it reports a configuration
//!   that ADD would refuse.
//!
//! Keys: `table` (rules only, into an operator's table), `gateways` (one
//! static gateway per family, instead of the result's), `addSourceHints`
//! (keep the subnet routes in the main table with a source hint). The
//! Debian reference binary (1.1.1) knows none of them; they are those of
//! the current reference. Calls on one container are serialised by a lock
//! on its namespace file ([`lock`]).
//!
//! Deliberate differences from the reference, each towards changing less
//! by accident: a previous result with no address for the interface is
//! refused instead of stripping the interface's routes; the interface must
//! exist in `table` mode too; a table holding routes of someone else's is
//! never chosen; DEL also empties the tables of the rules it deleted, and
//! succeeds when the namespace is gone (the reference fails, and creates
//! an empty file at the path); the lock wait is bounded; ADD undoes its
//! partial work when a step fails.

mod add;
mod check;
mod config;
mod del;
mod error;
mod lock;

use libcni::netlink::{LinkInfo, RouteSocket};
use libcni::netns::{NetNs, NetNsError};
use libcni::skel::{self, CmdArgs, Plugin};
use libcni::types::{v100, AnyResult};

use crate::config::{interface_ips, SbrConf, StaticGateways};
use crate::error::SbrError;
use crate::lock::{lock_netns, LOCK_WAIT};

struct Sbr;

/// The previous result and the addresses of it that are the interface's.
struct Chained {
    result: AnyResult,
    current: v100::Result,
}

impl Chained {
    fn from_args(args: &CmdArgs) -> Result<Chained, SbrError> {
        let result = args.conf.prev_result()?.ok_or(SbrError::NotChained)?;
        let current = v100::Result::try_from(result.clone()).map_err(SbrError::PrevResult)?;
        if current.ips.is_empty() {
            return Err(SbrError::NoIps(args.ifname.clone()));
        }
        Ok(Chained { result, current })
    }

    fn interface_ips(&self, ifname: &str) -> Result<Vec<&v100::IpConfig>, SbrError> {
        let ips = interface_ips(&self.current, ifname);
        if ips.is_empty() {
            return Err(SbrError::NoIpsOnInterface(ifname.to_string()));
        }
        // Found here rather than by the kernel halfway through ADD.
        if let Some(ip) = ips.iter().find(|ip| {
            ip.gateway
                .is_some_and(|gw| gw.is_ipv4() != ip.address.is_ipv4())
        }) {
            return Err(SbrError::GatewayFamily {
                address: ip.address,
                gateway: ip.gateway,
            });
        }
        Ok(ips)
    }
}

/// The configuration's gateways where they count: `table` mode ignores
/// them, as the reference does.
fn static_gateways(conf: &SbrConf) -> Result<StaticGateways, SbrError> {
    match conf.table {
        Some(_) => {
            if !conf.gateways.is_empty() {
                log::warn!("gateways are ignored with table");
            }
            Ok(StaticGateways::default())
        }
        None => Ok(StaticGateways::parse(&conf.gateways)?),
    }
}

fn open_netns(path: &str) -> Result<NetNs, SbrError> {
    NetNs::open(path).map_err(|source| SbrError::NetNs {
        path: path.to_string(),
        source,
    })
}

/// A netlink socket bound to the container's namespace, made by moving
/// this thread there and back rather than by starting a thread
/// ([`NetNs::run`]): a call of sbr is short, and a thread's start and
/// scheduling were a large part of it on a busy node. A thread that cannot
/// move back ends the verb with that error.
fn container_socket(netns: &NetNs) -> Result<RouteSocket, SbrError> {
    let opened = netns
        .enter_briefly(RouteSocket::open_current)
        .map_err(|source| SbrError::NetNs {
            path: netns.path().display().to_string(),
            source,
        })?;
    Ok(opened?)
}

fn find_link(socket: &mut RouteSocket, args: &CmdArgs) -> Result<LinkInfo, SbrError> {
    socket
        .link_by_name(&args.ifname)?
        .ok_or_else(|| SbrError::InterfaceNotFound {
            ifname: args.ifname.clone(),
            netns: args.netns.clone(),
        })
}

impl Plugin for Sbr {
    type Error = SbrError;

    fn about(&self) -> String {
        skel::about_string("sbr", env!("CARGO_PKG_VERSION"))
    }

    fn add(&self, args: &CmdArgs) -> Result<AnyResult, SbrError> {
        // Everything the input can get wrong is found before any change.
        let conf = SbrConf::from_conf(&args.conf)?;
        let chained = Chained::from_args(args)?;
        let ips = chained.interface_ips(&args.ifname)?;
        let gateways = static_gateways(&conf)?;
        let netns = open_netns(&args.netns)?;
        let _lock = lock_netns(&netns, LOCK_WAIT)?;
        let mut socket = container_socket(&netns)?;
        let link = find_link(&mut socket, args)?;
        add::setup(&mut socket, &link, &ips, &conf, &gateways)?;
        Ok(chained.result)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), SbrError> {
        // Only the table matters here. A `table` ADD would have refused
        // made nothing to undo.
        let table = match SbrConf::from_conf(&args.conf) {
            Ok(conf) => conf.table,
            Err(e) => {
                log::info!("nothing to undo: ADD refuses this configuration ({e})");
                return Ok(());
            }
        };
        // containerd's second DEL comes without a namespace.
        let Some(path) = args.netns_path() else {
            return Ok(());
        };
        let netns = match NetNs::open(path) {
            Ok(netns) => netns,
            // The rules and tables went with the namespace.
            Err(e @ (NetNsError::NotExist { .. } | NetNsError::NotNetNs { .. })) => {
                log::debug!("nothing to do: {e}");
                return Ok(());
            }
            Err(source) => {
                return Err(SbrError::NetNs {
                    path: args.netns.clone(),
                    source,
                })
            }
        };
        let _lock = lock_netns(&netns, LOCK_WAIT)?;
        let mut socket = container_socket(&netns)?;
        let Some(link) = socket.link_by_name(&args.ifname)? else {
            log::debug!("{} is gone: nothing to do", args.ifname);
            return Ok(());
        };
        del::tidy(&mut socket, &link, table)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), SbrError> {
        let conf = SbrConf::from_conf(&args.conf)?;
        let chained = Chained::from_args(args)?;
        let ips = chained.interface_ips(&args.ifname)?;
        let gateways = static_gateways(&conf)?;
        let netns = open_netns(&args.netns)?;
        let mut socket = container_socket(&netns)?;
        // ADD made its rules for this interface: its absence now is a
        // finding, reported as the others (see `error`).
        let link = find_link(&mut socket, args).map_err(|e| match e {
            SbrError::InterfaceNotFound { .. } => SbrError::Check(e.to_string()),
            e => e,
        })?;
        check::verify(&mut socket, &link, &ips, &conf, &gateways)
    }

    fn gc(&self, _args: &CmdArgs) -> Result<(), SbrError> {
        Ok(())
    }

    fn status(&self, args: &CmdArgs) -> Result<(), SbrError> {
        let conf = SbrConf::from_conf(&args.conf)?;
        static_gateways(&conf)?;
        Ok(())
    }
}

fn main() {
    skel::plugin_main(Sbr)
}

// A call allocates little and exits; the arena spares it the system
// allocator's page mapping and unmapping (libcni::arena_alloc says how much).
#[global_allocator]
static ALLOCATOR: libcni::arena_alloc::ArenaAlloc = libcni::arena_alloc::ArenaAlloc::new();
