//! CHECK: the VRF exists (with the configured table, when one is set) and
//! `CNI_IFNAME` is one of its members. The prevResult must be there, as
//! for ADD; it is not otherwise read (the interface's own plugin checks
//! its addresses).

use libcni::netlink::sublink_plugin;
use libcni::netlink::RouteSocket;
use libcni::skel::CmdArgs;

use crate::add::find_vrf;
use crate::config::VrfConf;
use crate::error::VrfError;

pub fn check(args: &CmdArgs) -> Result<(), VrfError> {
    let conf = VrfConf::from_conf(&args.conf)?;
    args.conf
        .prev_result()?
        .ok_or(VrfError::PrevResultMissing)?;
    let netns = sublink_plugin::open_container_netns(&args.netns)?;
    let mut socket = RouteSocket::open_in(&netns)?;
    let vrf = find_vrf(&mut socket, &conf.vrf_name)?
        .ok_or_else(|| VrfError::VrfMissing(conf.vrf_name.clone()))?;
    if let Some(expected) = conf.table.filter(|&t| t != vrf.table) {
        return Err(VrfError::CheckTable {
            vrf: conf.vrf_name,
            found: vrf.table,
            expected,
        });
    }
    let member = socket
        .link_by_name(&args.ifname)?
        .is_some_and(|iface| iface.master == Some(vrf.link.index));
    if !member {
        return Err(VrfError::NotMember {
            ifname: args.ifname.clone(),
            vrf: conf.vrf_name,
        });
    }
    Ok(())
}
