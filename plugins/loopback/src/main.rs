//! `loopback`: brings the loopback interface of a container up.
//!
//! Container runtimes run it before the pod network (containerd as the
//! network `cni-loopback`, version 0.3.1, ifname `lo`). Whatever
//! `CNI_IFNAME` says, it only ever touches `lo`, as the reference plugin.
//!
//! - ADD sets `lo` up and reports it with its addresses (or passes a
//!   `prevResult` through unchanged);
//! - DEL sets it down, and succeeds when the namespace is already gone;
//! - CHECK verifies that it is up; GC and STATUS have nothing to do.

use std::net::IpAddr;

use libcni::error::{CniError, ErrorCode, ToCniError};
use libcni::netlink::{Address, NetlinkError, RouteSocket};
use libcni::netns::{NetNs, NetNsError};
use libcni::plugin_conf::ConfError;
use libcni::skel::{self, CmdArgs, Plugin};
use libcni::types::{v100, AnyResult};

const LOOPBACK: &str = "lo";
/// The kernel gives `lo` no hardware address; reported as zeros.
const LOOPBACK_MAC: &str = "00:00:00:00:00:00";

#[derive(Debug, thiserror::Error)]
enum LoopbackError {
    #[error(transparent)]
    Conf(#[from] ConfError),
    #[error(transparent)]
    NetNs(#[from] NetNsError),
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
    #[error("no loopback interface in netns {0:?}")]
    NoLoopback(String),
    #[error("loopback interface is down")]
    Down,
    #[error("loopback interface found with non-loopback address {0}")]
    NonLoopbackAddress(IpAddr),
}

impl ToCniError for LoopbackError {
    fn to_cni_error(&self) -> CniError {
        match self {
            LoopbackError::Conf(e) => e.to_cni_error(),
            LoopbackError::NetNs(e) => e.to_cni_error(),
            LoopbackError::Netlink(e) => e.to_cni_error(),
            // The kernel's state is not what the spec promises the pod.
            e @ (LoopbackError::NoLoopback(_)
            | LoopbackError::Down
            | LoopbackError::NonLoopbackAddress(_)) => {
                CniError::new(ErrorCode::Internal, e.to_string())
            }
        }
    }
}

struct Loopback;

impl Plugin for Loopback {
    type Error = LoopbackError;

    fn about(&self) -> String {
        skel::about_string("loopback", env!("CARGO_PKG_VERSION"))
    }

    fn add(&self, args: &CmdArgs) -> Result<AnyResult, LoopbackError> {
        // Like the reference: a bad prevResult fails before any change.
        let prev_result = args.conf.prev_result()?;
        let netns = NetNs::open(&args.netns)?;
        let mut socket = RouteSocket::open_in(&netns)?;
        let lo = socket
            .link_by_name(LOOPBACK)?
            .ok_or_else(|| LoopbackError::NoLoopback(args.netns.clone()))?;
        socket.set_link_up(lo.index)?;
        log::info!("set {LOOPBACK} up in {}", args.netns);
        // The kernel assigns 127.0.0.1/8 and ::1/128 when `lo` comes up.
        let addresses = socket.list_addresses(Some(lo.index))?;
        let ipv4 = first_loopback_address(&addresses, true)?;
        let ipv6 = first_loopback_address(&addresses, false)?;

        if let Some(prev) = prev_result {
            // Chained after another plugin: pass its result through.
            return Ok(prev);
        }
        let mut result = v100::Result::new();
        result.interfaces.push(v100::Interface {
            name: LOOPBACK.to_string(),
            mac: LOOPBACK_MAC.to_string(),
            sandbox: args.netns.clone(),
            ..v100::Interface::default()
        });
        for address in [ipv4, ipv6].into_iter().flatten() {
            result.ips.push(v100::IpConfig {
                interface: Some(0),
                address: address.address,
                gateway: None,
            });
        }
        Ok(AnyResult::V1(result))
    }

    fn del(&self, args: &CmdArgs) -> Result<(), LoopbackError> {
        // Second DEL from containerd (RemovePodSandbox) comes without one.
        let Some(path) = args.netns_path() else {
            return Ok(());
        };
        let netns = match NetNs::open(path) {
            Ok(netns) => netns,
            // Gone, or only the file of an unmounted namespace left: the
            // loopback went with it.
            Err(e @ (NetNsError::NotExist { .. } | NetNsError::NotNetNs { .. })) => {
                log::debug!("nothing to do: {e}");
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        let mut socket = RouteSocket::open_in(&netns)?;
        let Some(lo) = socket.link_by_name(LOOPBACK)? else {
            return Ok(());
        };
        match socket.set_link_down(lo.index) {
            Ok(()) => {
                log::info!("set {LOOPBACK} down in {}", args.netns);
                Ok(())
            }
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn check(&self, args: &CmdArgs) -> Result<(), LoopbackError> {
        let netns = NetNs::open(&args.netns)?;
        let mut socket = RouteSocket::open_in(&netns)?;
        let lo = socket
            .link_by_name(LOOPBACK)?
            .ok_or_else(|| LoopbackError::NoLoopback(args.netns.clone()))?;
        if !lo.up {
            return Err(LoopbackError::Down);
        }
        Ok(())
    }
}

/// The first address of one family, after checking that every address of
/// that family on `lo` really is a loopback address.
fn first_loopback_address(
    addresses: &[Address],
    ipv4: bool,
) -> Result<Option<&Address>, LoopbackError> {
    let mut family = addresses.iter().filter(|a| a.address.is_ipv4() == ipv4);
    if let Some(bad) = family.clone().find(|a| !a.address.ip().is_loopback()) {
        return Err(LoopbackError::NonLoopbackAddress(bad.address.ip()));
    }
    Ok(family.next())
}

fn main() {
    skel::plugin_main(Loopback)
}
