//! ADD: a macvlan on the master, in the container, with its addresses.
//!
//! 1. The whole configuration is checked, and a layer 2 network in a
//!    version whose results need addresses (0.1.0, 0.2.0) is refused,
//!    before anything is made.
//! 2. The master is found, in the host or (`linkInContainer`) in the
//!    container, and the MTU checked against it.
//! 3. The macvlan is made under a temporary name straight into the
//!    container and renamed to `CNI_IFNAME` there
//!    ([`MasterSide::create`]).
//! 4. Layer 3: IPAM ADD, then the addresses, ARP/ND notify, the link up
//!    and the routes ([`configure_iface`]). Layer 2: the link up.
//!
//! Unlike the reference, whose rollbacks miss some paths, every failure
//! after step 3 deletes the link and releases the IPAM lease (IPAM DEL
//! also after a failed IPAM ADD, which may have reserved part of what it
//! was asked for).

use nix::errno::Errno;

use libcni::iface::Announce;
use libcni::invoke::{Delegator, Exec};
use libcni::netlink::sublink::{ContainerSubLink, SubLinkError, SubLinkKind};
use libcni::netlink::sublink_plugin::{self, MasterSide, NewSubLink, StepError};
use libcni::netlink::LinkInfo;
use libcni::skel::CmdArgs;
use libcni::types::v100;

use crate::config::{mode_name, MacvlanConf};
use crate::error::MacvlanError;

pub fn add<E: Exec>(args: &CmdArgs, ipam: &Delegator<E>) -> Result<v100::Result, MacvlanError> {
    let conf = MacvlanConf::from_conf(&args.conf, &args.args)?;
    conf.check_result_expressible()?;
    let netns = sublink_plugin::open_container_netns(&args.netns)?;
    let mut side = MasterSide::open(&netns, conf.link_in_container)?;
    let master = side.find_master(conf.master.as_deref())?;
    let spec = ContainerSubLink {
        ifname: &args.ifname,
        parent: master.index,
        kind: SubLinkKind::MacVlan {
            mode: conf.mode,
            bc_queue_len: conf.bc_queue_len,
        },
        mtu: conf.check_mtu(master.mtu)?,
        mac: conf.mac.as_ref().map(|m| m.as_slice()),
    };
    let link = side
        .create(&netns, &spec)
        .map_err(|e| master_refused(e, &conf, &master))?;
    log::info!(
        "created macvlan {} (mode {}, MAC {}) on master {} in the container",
        args.ifname,
        mode_name(conf.mode),
        link.mac_string(),
        master.name
    );

    let mut new = NewSubLink::new(args, ipam, &netns, side.into_container(), link);
    attach(&mut new, &conf).inspect_err(|_| new.undo())
}

/// ADD once the link exists: addresses from IPAM, or layer 2 only.
fn attach<E: Exec>(
    new: &mut NewSubLink<'_, E>,
    conf: &MacvlanConf,
) -> Result<v100::Result, MacvlanError> {
    let Some(plugin) = &conf.ipam_type else {
        return Ok(new.configure_layer2(&conf.dns)?);
    };
    let lease = new.lease(plugin, "IPAM ADD with")?;
    if lease.ips.is_empty() {
        return Err(StepError::IpamNoIps.into());
    }
    Ok(new.configure(lease, Announce { notify: true }, &conf.dns)?)
}

/// The kernel's EINVAL for a new macvlan says the master cannot take one
/// in this mode (passthru rules, a non-Ethernet master): a configuration
/// problem, worded so.
fn master_refused(error: SubLinkError, conf: &MacvlanConf, master: &LinkInfo) -> MacvlanError {
    match &error {
        SubLinkError::Create { source, .. } if source.errno() == Some(Errno::EINVAL) => {
            MacvlanError::MasterRefused {
                master: master.name.clone(),
                mode: mode_name(conf.mode),
                source: Box::new(error),
            }
        }
        _ => MacvlanError::SubLink(error),
    }
}
