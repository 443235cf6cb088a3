//! CHECK: what ADD made is still there, as the prevResult describes it.
//!
//! The configuration is checked as ADD checks it, the IPAM plugin checks
//! its lease, then: the prevResult names `CNI_IFNAME` in this sandbox; the
//! master exists; the container interface is a VLAN link with the
//! configured id, the prevResult's MAC and, when `mtu` is set, that MTU;
//! its addresses and routes are there ([`libcni::iface::check_interface_ips`],
//! [`libcni::iface::check_routes`]).

use libcni::iface::check_mac;
use libcni::invoke::{Delegator, Exec};
use libcni::netlink::sublink::SubLinkKind;
use libcni::netlink::sublink_plugin::{self, MasterSide};
use libcni::skel::CmdArgs;

use crate::config::VlanConf;
use crate::error::VlanError;

pub fn check<E: Exec>(args: &CmdArgs, ipam: &Delegator<E>) -> Result<(), VlanError> {
    let conf = VlanConf::from_conf(&args.conf)?;
    let netns = sublink_plugin::open_container_netns(&args.netns)?;
    let prev = sublink_plugin::check_start::<_, VlanError>(args, ipam, Some(&conf.ipam_type))?;
    let expected = sublink_plugin::expected_interface(&prev, args)?;

    let mut side = MasterSide::open(&netns, conf.link_in_container)?;
    side.find_master(Some(&conf.master))?;
    let mut container = side.into_container();
    let (found, id) =
        sublink_plugin::read_back::<_, VlanError>(&mut container, &args.ifname, "vlan", |kind| {
            match kind {
                SubLinkKind::Vlan { id } => Some(*id),
                _ => None,
            }
        })?;
    check_mac(expected, &found.link)?;
    if id != conf.vlan_id {
        return Err(VlanError::VlanIdMismatch {
            ifname: args.ifname.clone(),
            found: id,
            expected: conf.vlan_id,
        });
    }
    if conf.mtu != 0 && i64::from(found.link.mtu) != conf.mtu {
        return Err(VlanError::MtuMismatch {
            ifname: args.ifname.clone(),
            found: found.link.mtu,
            expected: conf.mtu,
        });
    }
    sublink_plugin::check_addresses_and_routes(&mut container, &found, &prev)?;
    Ok(())
}
