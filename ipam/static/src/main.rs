//! `static`: the CNI IPAM plugin that hands out the addresses its
//! configuration (or the runtime) names, with the routes and DNS settings
//! of its configuration. It holds nothing between calls.
//!
//! A drop-in for the reference plugin: same keys, same sources of addresses
//! in the same order of precedence, same results and messages (see
//! [`config`] for the keys and the precedence):
//!
//! ```json
//! { "cniVersion": "1.0.0", "name": "rail0", "type": "macvlan", "master": "eth1",
//!   "capabilities": { "ips": true },
//!   "ipam": { "type": "static",
//!             "addresses": [ { "address": "192.168.10.5/24", "gateway": "192.168.10.1" } ],
//!             "routes": [ { "dst": "0.0.0.0/0" } ],
//!             "dns": { "nameservers": ["192.168.10.1"] } } }
//! ```
//!
//! Addresses come from `ipam.addresses`, then `CNI_ARGS`
//! `IP=10.10.0.1/24,11.11.0.1/24;GATEWAY=10.10.0.254` (added to them), then
//! `args.cni.ips`, then `runtimeConfig.ips` (capability `ips`), each of the
//! last two replacing the list when not empty. Every address must carry its
//! prefix.
//!
//! - ADD returns the addresses (no `interface` index: the calling plugin
//!   sets it), `routes` as written (several default routes stay, in order,
//!   for ECMP) and `dns`, in the configuration's version. With 0.1.0 and
//!   0.2.0 that is one address per family, so more is refused before
//!   anything is printed; no address at all is a valid 0.3.0+ result (the
//!   calling plugin decides whether it can do without).
//! - DEL has nothing to release and reads nothing, so it always succeeds:
//!   with the netns gone, with a configuration that no longer parses.
//! - CHECK reads the configuration as ADD does (`CNI_ARGS` included) and
//!   needs `prevResult`: a configured address found there must have the
//!   configured gateway. As in the reference, an address missing from
//!   `prevResult` passes (the calling plugin checks the interface itself).
//! - GC has nothing to collect and succeeds.
//! - STATUS succeeds when the configuration decodes and has an `ipam`
//!   section. Its addresses are not judged: STATUS gets no runtime
//!   arguments, and those can replace them.
//!
//! Where this differs from the reference:
//! - errors carry spec codes (7 configuration, 4 `CNI_ARGS`, see [`error`])
//!   instead of 999, and a wrong type names the key at fault;
//! - GC and STATUS exist (CNI 1.1);
//! - the reference also decodes the untagged fields of its Go address type,
//!   `Address` (`{"IP": "10.1.1.1", "Mask": "////AA=="}`, which then wins
//!   over `address`) and `Version`; both are read here too, but a mask that
//!   is not a prefix is refused where the reference prints an address no
//!   runtime can read back.

mod config;
mod error;

use libcni::skel::{self, CmdArgs, Plugin};
use libcni::types::{v100, AnyResult};
use libcni::SpecVersion;

use crate::config::StaticConfig;
use crate::error::StaticError;

struct Static;

impl Plugin for Static {
    type Error = StaticError;

    fn about(&self) -> String {
        skel::about_string("static", env!("CARGO_PKG_VERSION"))
    }

    fn add(&self, args: &CmdArgs) -> Result<AnyResult, StaticError> {
        let config = StaticConfig::load(args.conf.raw(), &args.args)?;
        log::info!(
            "addresses {} in network {}",
            list(config.addresses.iter().map(|a| a.address)),
            args.conf.name
        );
        Ok(AnyResult::V1(result(&config)))
    }

    fn del(&self, _args: &CmdArgs) -> Result<(), StaticError> {
        Ok(())
    }

    fn check(&self, args: &CmdArgs) -> Result<(), StaticError> {
        let config = StaticConfig::load(args.conf.raw(), &args.args)?;
        let prev = args
            .conf
            .prev_result()?
            .ok_or(StaticError::PrevResultMissing)?;
        let prev = v100::Result::try_from(prev).map_err(StaticError::PrevResult)?;
        check(&config, &prev, &args.ifname)
    }

    fn gc(&self, _args: &CmdArgs) -> Result<(), StaticError> {
        Ok(())
    }

    fn status(&self, args: &CmdArgs) -> Result<(), StaticError> {
        StaticConfig::check_decodes(args.conf.raw())
    }
}

/// The ADD result, in the current version (the skeleton converts it).
fn result(config: &StaticConfig) -> v100::Result {
    v100::Result {
        cni_version: SpecVersion::CURRENT,
        interfaces: Vec::new(),
        ips: config
            .addresses
            .iter()
            .map(|a| v100::IpConfig {
                interface: None,
                address: a.address,
                gateway: a.gateway,
            })
            .collect(),
        routes: config.routes.clone(),
        dns: config.dns.clone(),
    }
}

/// CHECK: the first `prevResult` entry with a configured address must have
/// the configured gateway, when one is configured.
fn check(config: &StaticConfig, prev: &v100::Result, ifname: &str) -> Result<(), StaticError> {
    use libcni::go_compat::canonical_ip;
    for wanted in &config.addresses {
        let found = prev
            .ips
            .iter()
            .find(|ip| canonical_ip(ip.address.ip()) == wanted.address.ip());
        let (Some(found), Some(gateway)) = (found, wanted.gateway) else {
            continue;
        };
        if found.gateway.map(canonical_ip) != Some(gateway) {
            return Err(StaticError::GatewayMismatch {
                address: wanted.address.ip(),
                ifname: ifname.to_string(),
            });
        }
    }
    Ok(())
}

fn list(items: impl Iterator<Item = impl std::fmt::Display>) -> String {
    let items: Vec<String> = items.map(|i| i.to_string()).collect();
    format!("[{}]", items.join(", "))
}

fn main() {
    skel::plugin_main(Static)
}

// A call allocates little and exits; the arena spares it the system
// allocator's page mapping and unmapping (libcni::arena_alloc says how much).
#[global_allocator]
static ALLOCATOR: libcni::arena_alloc::ArenaAlloc = libcni::arena_alloc::ArenaAlloc::new();
