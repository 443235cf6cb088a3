//! CHECK: what ADD made is still there, as the prevResult describes it.
//!
//! The configuration is checked as ADD checks it (so a master that has
//! gone fails), the IPAM plugin checks its lease (layer 3 only), then:
//! the prevResult names `CNI_IFNAME` in this sandbox; the master exists;
//! the container interface is a macvlan in the configured mode with the
//! prevResult's MAC; its addresses and routes are there
//! ([`libcni::iface::check_interface_ips`], [`libcni::iface::check_routes`]).

use libcni::iface::check_mac;
use libcni::invoke::{Delegator, Exec};
use libcni::netlink::sublink::SubLinkKind;
use libcni::netlink::sublink_plugin::{self, MasterSide};
use libcni::skel::CmdArgs;

use crate::config::MacvlanConf;
use crate::error::MacvlanError;

pub fn check<E: Exec>(args: &CmdArgs, ipam: &Delegator<E>) -> Result<(), MacvlanError> {
    let conf = MacvlanConf::from_conf(&args.conf, &args.args)?;
    let netns = sublink_plugin::open_container_netns(&args.netns)?;
    let prev =
        sublink_plugin::check_start::<_, MacvlanError>(args, ipam, conf.ipam_type.as_deref())?;
    let expected = sublink_plugin::expected_interface(&prev, args)?;

    let mut side = MasterSide::open(&netns, conf.link_in_container)?;
    side.find_master(conf.master.as_deref())?;
    let mut container = side.into_container();
    let (found, mode) = sublink_plugin::read_back::<_, MacvlanError>(
        &mut container,
        &args.ifname,
        "macvlan",
        |kind| match kind {
            SubLinkKind::MacVlan { mode, .. } => Some(*mode),
            _ => None,
        },
    )?;
    if mode != conf.mode {
        return Err(MacvlanError::ModeMismatch {
            found: mode.to_string(),
            expected: conf.mode.to_string(),
        });
    }
    check_mac(expected, &found.link)?;
    sublink_plugin::check_addresses_and_routes(&mut container, &found, &prev)?;
    Ok(())
}
