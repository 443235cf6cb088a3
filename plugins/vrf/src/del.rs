//! DEL: `CNI_IFNAME` leaves the VRF, and the VRF goes with its last
//! member. Idempotent and best effort:
//!
//! - no `CNI_NETNS`, or a namespace already gone: nothing to do;
//! - no VRF of that name (or a link of that name that is no VRF): nothing
//!   of this plugin's is there;
//! - the interface is missing, or is not a member of this VRF: it is left
//!   alone, and the VRF still goes if it has no members. The reference
//!   fails here (`resetMaster: could not get link by name`), so a second
//!   DEL after the interface's own plugin deleted it fails; upstream PR
//!   #1282 makes it succeed, and so does this plugin;
//! - a configuration without a usable `vrfname` names nothing to undo:
//!   success, with a log line (the reference fails).
//!
//! The interface's addresses and routes stay as the VRF left them: DEL
//! runs before the interface's own plugin deletes it.

use libcni::netlink::RouteSocket;
use libcni::netns::NetNs;
use libcni::skel::CmdArgs;

use crate::add::find_vrf;
use crate::config::VrfConf;
use crate::error::VrfError;

pub fn del(args: &CmdArgs) -> Result<(), VrfError> {
    let conf = match VrfConf::from_conf(&args.conf) {
        Ok(conf) => conf,
        Err(e) => {
            log::info!("nothing to delete: {e}");
            return Ok(());
        }
    };
    if args.netns.is_empty() {
        return Ok(());
    }
    let netns = match NetNs::open(&args.netns) {
        Ok(netns) => netns,
        Err(e) if e.is_not_exist() => return Ok(()),
        Err(source) => {
            return Err(VrfError::DelNetNs {
                path: args.netns.clone(),
                source,
            })
        }
    };
    let mut socket = RouteSocket::open_in(&netns)?;
    let vrf = match find_vrf(&mut socket, &conf.vrf_name) {
        Ok(Some(vrf)) => vrf,
        Ok(None) | Err(VrfError::NotAVrf(_)) => return Ok(()),
        Err(e) => return Err(e),
    };
    if let Some(iface) = socket.link_by_name(&args.ifname)? {
        if iface.master == Some(vrf.link.index) {
            match socket.set_master(iface.index, None) {
                Ok(()) => log::info!("{} left VRF {}", args.ifname, vrf.link.name),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    let has_members = socket
        .list_links()?
        .iter()
        .any(|link| link.master == Some(vrf.link.index));
    if !has_members {
        match socket.delete_link(vrf.link.index) {
            Ok(()) => log::info!("deleted VRF {}, which has no member left", vrf.link.name),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
