//! CHECK: what ADD made is still there, as the prevResult describes it.
//!
//! The configuration is checked as ADD checks it, the IPAM plugin checks
//! its lease (when there is one), then: the prevResult names `CNI_IFNAME`
//! in this sandbox; the configured master exists (without `master`, the
//! reference fails looking up ""; here there is nothing to look up: the
//! prevResult now names the ipvlan itself, not the chained master); the
//! container interface is an ipvlan in the configured mode with the
//! prevResult's MAC; its addresses and routes are there
//! ([`libcni::iface::check_interface_ips`], [`libcni::iface::check_routes`]).

use libcni::iface::check_mac;
use libcni::invoke::{Delegator, Exec};
use libcni::netlink::sublink::SubLinkKind;
use libcni::netlink::sublink_plugin::{self, MasterSide};
use libcni::skel::CmdArgs;

use crate::config::IpvlanConf;
use crate::error::IpvlanError;

pub fn check<E: Exec>(args: &CmdArgs, ipam: &Delegator<E>) -> Result<(), IpvlanError> {
    let conf = IpvlanConf::from_conf(&args.conf)?;
    let netns = sublink_plugin::open_container_netns(&args.netns)?;
    let prev =
        sublink_plugin::check_start::<_, IpvlanError>(args, ipam, conf.ipam_type.as_deref())?;
    let expected = sublink_plugin::expected_interface(&prev, args)?;

    let mut side = MasterSide::open(&netns, conf.link_in_container)?;
    // Without `master` ADD found it from the prevResult or the default
    // route, which may have changed since: nothing to hold it to.
    if let Some(master) = &conf.master {
        side.find_master(Some(master))?;
    }
    let mut container = side.into_container();
    let (found, mode) = sublink_plugin::read_back::<_, IpvlanError>(
        &mut container,
        &args.ifname,
        "ipvlan",
        |kind| match kind {
            SubLinkKind::IpVlan { mode } => Some(*mode),
            _ => None,
        },
    )?;
    if mode != conf.mode {
        return Err(IpvlanError::ModeMismatch {
            found: mode.to_string(),
            expected: conf.mode.to_string(),
        });
    }
    check_mac(expected, &found.link)?;
    sublink_plugin::check_addresses_and_routes(&mut container, &found, &prev)?;
    Ok(())
}
