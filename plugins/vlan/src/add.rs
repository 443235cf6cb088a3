//! ADD: an 802.1Q VLAN link on the master, in the container, with its
//! addresses.
//!
//! 1. The whole configuration is checked before anything is made.
//! 2. The master is found, in the host or (`linkInContainer`) in the
//!    container, and the MTU checked against it.
//! 3. The VLAN link is made under a temporary name straight into the
//!    container and renamed to `CNI_IFNAME` there
//!    ([`MasterSide::create`]).
//! 4. IPAM ADD, then the addresses, the link up and the routes
//!    ([`configure_iface`]; no ARP/ND notify, as in the reference).
//!
//! Unlike the reference, which leaves the link behind when IPAM or the
//! addresses fail, every failure after step 3 deletes the link and
//! releases the IPAM lease (IPAM DEL also after a failed IPAM ADD, which
//! may have reserved part of what it was asked for).

use libcni::iface::Announce;
use libcni::invoke::{Delegator, Exec};
use libcni::netlink::sublink::{ContainerSubLink, SubLinkKind};
use libcni::netlink::sublink_plugin::{self, MasterSide, NewSubLink, StepError};
use libcni::skel::CmdArgs;
use libcni::types::v100;

use crate::config::VlanConf;
use crate::error::VlanError;

pub fn add<E: Exec>(args: &CmdArgs, ipam: &Delegator<E>) -> Result<v100::Result, VlanError> {
    let conf = VlanConf::from_conf(&args.conf)?;
    let netns = sublink_plugin::open_container_netns(&args.netns)?;
    let mut side = MasterSide::open(&netns, conf.link_in_container)?;
    let master = side.find_master(Some(&conf.master))?;
    let spec = ContainerSubLink {
        ifname: &args.ifname,
        parent: master.index,
        kind: SubLinkKind::Vlan { id: conf.vlan_id },
        mtu: conf.check_mtu(master.mtu)?,
        mac: None,
    };
    let link = side.create(&netns, &spec)?;
    log::info!(
        "created VLAN {} (id {}) on master {} in the container",
        args.ifname,
        conf.vlan_id,
        master.name
    );

    let mut new = NewSubLink::new(args, ipam, &netns, side.into_container(), link);
    attach(&mut new, &conf).inspect_err(|_| new.undo())
}

/// ADD once the link exists: the lease (vlan always has IPAM) on it.
fn attach<E: Exec>(
    new: &mut NewSubLink<'_, E>,
    conf: &VlanConf,
) -> Result<v100::Result, VlanError> {
    let lease = new.lease(&conf.ipam_type, "failed to execute IPAM delegate")?;
    if lease.ips.is_empty() {
        return Err(StepError::IpamNoIps.into());
    }
    Ok(new.configure(lease, Announce::default(), &conf.dns)?)
}
