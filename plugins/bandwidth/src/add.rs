//! ADD: shape the container's veth from the host side.
//!
//! 1. Validate the configuration; require a previous result (also when
//!    there is nothing to shape, where the reference dereferences nil).
//! 2. Nothing to shape: pass the previous result on unchanged.
//! 3. Find the host veth ([`crate::host`]).
//! 4. Ingress: the shaper on the host veth's root.
//! 5. Egress: the ifb (host veth's MTU, up, no queue of its own, named
//!    after network and container, with an alias saying so for GC), a tbf
//!    on its root, the host veth's ingress qdisc and the redirect filters.
//!    The ifb joins the result's interfaces.
//!
//! Every step records what it made; on a failure everything made is
//! taken back in reverse order, so a failed ADD leaves no qdisc and no
//! ifb (the reference leaves both).

use libcni::netlink::link_identity::MAX_ALIAS_BYTES;
use libcni::netlink::sublink_plugin::open_container_netns;
use libcni::netlink::tc::{PschedClock, QdiscOptions, INGRESS_HANDLE, TC_H_INGRESS};
use libcni::netlink::{LinkInfo, RouteSocket};
use libcni::nftables::AddressField;
use libcni::skel::CmdArgs;
use libcni::types::{v100, AnyResult};
use libcni::SpecVersion;

use crate::config::{self, Bandwidth, ShapedTraffic};
use crate::error::BandwidthError;
use crate::host;
use crate::shaping::{self, Made};
use crate::tbf;

/// The start of the alias of every ifb this plugin makes; GC deletes only
/// devices that carry it.
pub const ALIAS_PREFIX: &str = "cni-bandwidth";

pub fn add(args: &CmdArgs) -> Result<AnyResult, BandwidthError> {
    let bandwidth = config::parse(args)?;
    let prev = args.conf.prev_result()?.ok_or(BandwidthError::NotChained)?;
    let Some(bandwidth) = bandwidth.filter(|b| !b.is_zero()) else {
        return Ok(prev);
    };
    let mut result = match prev.convert_to(SpecVersion::CURRENT) {
        Ok(AnyResult::V1(result)) => result,
        Ok(other) => {
            return Err(BandwidthError::PrevResult(
                libcni::types::ResultError::UnsupportedVersion(other.version().to_string()),
            ))
        }
        Err(e) => return Err(BandwidthError::PrevResult(e)),
    };
    let netns = open_container_netns(&args.netns)?;
    let mut socket = RouteSocket::open_current()?;
    let host_veth = host::host_veth(&mut socket, &netns, &args.ifname, &result.interfaces)?;
    let clock = PschedClock::read().map_err(BandwidthError::Clock)?;

    let mut made = Vec::new();
    let shaped = shape(&mut socket, args, &bandwidth, &host_veth, clock, &mut made);
    match shaped {
        Ok(ifb) => {
            let limit_text = |limit: Option<config::Limit>| {
                limit.map_or_else(
                    || "unlimited".to_string(),
                    |l| format!("{} bit/s, burst {} bit", l.rate, l.burst),
                )
            };
            log::info!(
                "shaping on {}: to the container {}; from it {}{}; traffic shaped: {}",
                host_veth.name,
                limit_text(bandwidth.ingress),
                limit_text(bandwidth.egress),
                ifb.as_ref()
                    .map(|i| format!(" (through ifb {})", i.name))
                    .unwrap_or_default(),
                match &bandwidth.traffic {
                    ShapedTraffic::All => "all".to_string(),
                    ShapedTraffic::AllBut(nets) =>
                        format!("all but {}", libcni::logging::joined(nets)),
                    ShapedTraffic::Only(nets) => format!("only {}", libcni::logging::joined(nets)),
                }
            );
            result.interfaces.extend(ifb);
            Ok(AnyResult::V1(result))
        }
        Err(cause) => Err(undo(&mut socket, made, cause)),
    }
}

/// Steps 4 and 5; returns the ifb for the result.
fn shape(
    socket: &mut RouteSocket,
    args: &CmdArgs,
    bandwidth: &Bandwidth,
    host_veth: &LinkInfo,
    clock: PschedClock,
    made: &mut Vec<Made>,
) -> Result<Option<v100::Interface>, BandwidthError> {
    if let Some(limit) = bandwidth.ingress {
        shaping::add_root_shaper(
            socket,
            host_veth.index,
            tbf::tbf(limit, clock),
            &bandwidth.traffic,
            AddressField::Source,
            clock,
            made,
        )?;
    }
    let Some(limit) = bandwidth.egress else {
        return Ok(None);
    };
    let name = config::ifb_name(&args.conf.name, &args.container_id);
    socket
        .create_ifb(&name, host_veth.mtu)
        .map_err(BandwidthError::AddIfb)?;
    made.push(Made::Ifb(name.clone()));
    if let Some(alias) = alias(&args.conf.name, &args.container_id) {
        socket.set_alias(name.as_str(), Some(&alias))?;
    }
    let ifb = socket
        .link_by_name(&name)?
        .ok_or_else(|| BandwidthError::IfbMissing(format!("{name}: Link not found")))?;
    // The ifb's own shaper takes everything redirected to it; which
    // traffic is redirected is the filters' choice.
    shaping::add_root_shaper(
        socket,
        ifb.index,
        tbf::tbf(limit, clock),
        &ShapedTraffic::All,
        AddressField::Destination,
        clock,
        made,
    )?;
    socket.add_qdisc(
        host_veth.index,
        INGRESS_HANDLE,
        TC_H_INGRESS,
        &QdiscOptions::Ingress,
    )?;
    made.push(Made::IngressQdisc(host_veth.index));
    for filter in shaping::redirect_filters(host_veth.index, ifb.index, &bandwidth.traffic) {
        socket.add_u32_filter(&filter)?;
    }
    Ok(Some(v100::Interface {
        name,
        mac: ifb.mac_string(),
        ..v100::Interface::default()
    }))
}

/// `cni-bandwidth:<network>:<container ID>`, or without the container ID
/// when that would be too long for the kernel; `None` when even the
/// network name does not fit (GC then leaves the device alone).
pub fn alias(network: &str, container_id: &str) -> Option<String> {
    [
        format!("{ALIAS_PREFIX}:{network}:{container_id}"),
        format!("{ALIAS_PREFIX}:{network}"),
    ]
    .into_iter()
    .find(|alias| alias.len() < MAX_ALIAS_BYTES)
}

/// The network an ifb's alias names, if the alias is this plugin's.
pub fn alias_network(alias: &str) -> Option<&str> {
    let rest = alias.strip_prefix(ALIAS_PREFIX)?.strip_prefix(':')?;
    // Network names and container IDs have no ':'.
    Some(rest.split(':').next().unwrap_or(rest))
}

/// Takes back what a failed ADD made, newest first; failures to do so are
/// added to the cause.
fn undo(socket: &mut RouteSocket, made: Vec<Made>, cause: BandwidthError) -> BandwidthError {
    let undo_failures: Vec<String> = made
        .iter()
        .rev()
        .filter_map(|step| step.undo(socket).err().map(|e| e.to_string()))
        .collect();
    if undo_failures.is_empty() {
        cause
    } else {
        BandwidthError::UndoFailed {
            cause: Box::new(cause),
            undo_failures,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alias_names_network_and_container_and_falls_back_when_long() {
        let full = alias("net1", "abc").unwrap();
        assert_eq!(full, "cni-bandwidth:net1:abc");
        assert_eq!(alias_network(&full), Some("net1"));
        let long_id = "c".repeat(300);
        assert_eq!(
            alias("net1", &long_id).as_deref(),
            Some("cni-bandwidth:net1")
        );
        assert_eq!(alias_network("cni-bandwidth:net1"), Some("net1"));
        assert_eq!(alias(&"n".repeat(300), "x"), None);
        assert_eq!(alias_network("someone else's"), None);
        assert_eq!(alias_network("cni-bandwidthX:net1"), None);
    }
}
