//! ADD: an ipvlan on the master, in the container, with its addresses.
//!
//! 1. The whole configuration is checked before anything is made, the
//!    prevResult decoded, and the source of the addresses settled: IPAM,
//!    or without `ipam.type` the prevResult's IPs (ipvlan chained behind
//!    another plugin); with neither, ADD fails here.
//! 2. The master is found ([`MasterSide::find_master`]) and the MTU checked.
//! 3. The ipvlan is made under a temporary name straight into the
//!    container and renamed to `CNI_IFNAME` there
//!    ([`MasterSide::create`]).
//! 4. IPAM ADD when configured; then the addresses, ARP/ND notify, the
//!    link up and the routes ([`configure_iface`]).
//!
//! Unlike the reference, which deletes nothing on failure, every failure
//! after step 3 deletes the link and releases the IPAM lease (IPAM DEL
//! also after a failed IPAM ADD, which may have reserved part of what it
//! was asked for).

use libcni::iface::Announce;
use libcni::invoke::{Delegator, Exec};
use libcni::netlink::sublink::{ContainerSubLink, SubLinkKind};
use libcni::netlink::sublink_plugin::{self, MasterSide, NewSubLink, StepError};
use libcni::skel::CmdArgs;
use libcni::types::v100;

use crate::config::{ConfigError, IpvlanConf};
use crate::error::IpvlanError;

/// The master's name: `master`, else the prevResult's single named
/// interface when chained, else `None` (the default route's link).
pub fn master_name(
    conf: &IpvlanConf,
    prev: Option<&v100::Result>,
) -> Result<Option<String>, ConfigError> {
    if let Some(name) = &conf.master {
        return Ok(Some(name.clone()));
    }
    match prev {
        None => Ok(None),
        Some(prev) => match prev.interfaces.as_slice() {
            [only] if !only.name.is_empty() => {
                libcni::link_name::check_key("prevResult.interfaces[0].name", &only.name)?;
                Ok(Some(only.name.clone()))
            }
            _ => Err(ConfigError::ChainedMaster),
        },
    }
}

pub fn add<E: Exec>(args: &CmdArgs, ipam: &Delegator<E>) -> Result<v100::Result, IpvlanError> {
    let conf = IpvlanConf::from_conf(&args.conf)?;
    let prev = sublink_plugin::prev_result::<IpvlanError>(args)?;
    let chained_ips = match (&conf.ipam_type, &prev) {
        (Some(_), _) => None,
        (None, Some(prev)) if !prev.ips.is_empty() => Some(prev.clone()),
        (None, _) => return Err(ConfigError::NoAddressSource.into()),
    };
    let master_name = master_name(&conf, prev.as_ref())?;
    let netns = sublink_plugin::open_container_netns(&args.netns)?;
    let mut side = MasterSide::open(&netns, conf.link_in_container)?;
    let master = side.find_master(master_name.as_deref())?;
    let spec = ContainerSubLink {
        ifname: &args.ifname,
        parent: master.index,
        kind: SubLinkKind::IpVlan { mode: conf.mode },
        mtu: conf.check_mtu(master.mtu)?,
        mac: None,
    };
    let link = side.create(&netns, &spec)?;
    log::info!(
        "created ipvlan {} (mode {}) on master {} in the container",
        args.ifname,
        match conf.mode {
            libcni::netlink::sublink::IpVlanMode::L2 => "l2",
            libcni::netlink::sublink::IpVlanMode::L3 => "l3",
            libcni::netlink::sublink::IpVlanMode::L3S => "l3s",
            _ => "other",
        },
        master.name
    );

    let mut new = NewSubLink::new(args, ipam, &netns, side.into_container(), link);
    attach(&mut new, &conf, chained_ips).inspect_err(|_| new.undo())
}

/// ADD once the link exists: the addresses of the chained prevResult, or
/// IPAM's.
fn attach<E: Exec>(
    new: &mut NewSubLink<'_, E>,
    conf: &IpvlanConf,
    chained: Option<v100::Result>,
) -> Result<v100::Result, IpvlanError> {
    let source = match (chained, &conf.ipam_type) {
        (Some(prev), _) => prev,
        (None, Some(plugin)) => new.lease(plugin, "IPAM ADD with")?,
        (None, None) => return Err(ConfigError::NoAddressSource.into()),
    };
    if source.ips.is_empty() {
        return Err(StepError::IpamNoIps.into());
    }
    Ok(new.configure(source, Announce { notify: true }, &conf.dns)?)
}
