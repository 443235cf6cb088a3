//! CHECK: what ADD made is still there, as the prevResult describes it.
//!
//! The configuration is checked as ADD checks it, the IPAM plugin (for a
//! layer 3 network) checks its lease, then: the prevResult names
//! `CNI_IFNAME` in this sandbox; the container interface is a tun/tap
//! device with the prevResult's MAC, a port of `bridge` when one is
//! configured, with the prevResult's addresses and routes. The reference
//! checks only the addresses and routes.

use libcni::iface::{check_interface_ips, check_mac, check_routes};
use libcni::invoke::{Delegator, Exec};
use libcni::netlink::sublink_plugin::{self, CheckError};
use libcni::netlink::RouteSocket;
use libcni::skel::CmdArgs;

use crate::add::find_bridge;
use crate::config::TapConf;
use crate::error::TapError;

/// `IFLA_INFO_KIND` of tun and tap devices.
const TUN_KIND: &str = "tun";

pub fn check<E: Exec>(args: &CmdArgs, ipam: &Delegator<E>) -> Result<(), TapError> {
    let conf = TapConf::from_conf(&args.conf, &args.args)?;
    let netns = sublink_plugin::open_container_netns(&args.netns)?;
    let prev = sublink_plugin::check_start::<_, TapError>(args, ipam, conf.ipam_type.as_deref())?;
    let expected = sublink_plugin::expected_interface(&prev, args)?;

    let mut container = RouteSocket::open_in(&netns)?;
    let link = container
        .link_by_name(&args.ifname)?
        .ok_or_else(|| CheckError::LinkMissing(args.ifname.clone()))?;
    if link.kind.as_deref() != Some(TUN_KIND) {
        return Err(CheckError::WrongKind {
            ifname: args.ifname.clone(),
            wanted: "tap",
            kind: link.kind.clone().unwrap_or_else(|| "none".into()),
        }
        .into());
    }
    check_mac(expected, &link)?;
    if let Some(name) = &conf.bridge {
        let bridge = find_bridge(&mut container, name)?;
        if link.master != Some(bridge.index) {
            return Err(TapError::NotBridgePort {
                ifname: args.ifname.clone(),
                bridge: name.clone(),
            });
        }
    }
    check_interface_ips(&mut container, &link, &prev)?;
    check_routes(&mut container, &prev.routes)?;
    Ok(())
}
