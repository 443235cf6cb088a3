//! ADD: an ipvlan on the master, in the container, with its addresses.
//!
//! 1. The whole configuration is checked before anything is made, the
//!    prevResult decoded, and the source of the addresses settled: IPAM,
//!    or without `ipam.type` the prevResult's IPs (ipvlan chained behind
//!    another plugin); with neither, ADD fails here.
//! 2. The master is found ([`find_master`]) and the MTU checked.
//! 3. The ipvlan is made under a temporary name straight into the
//!    container and renamed to `CNI_IFNAME` there
//!    ([`create_in_container`]).
//! 4. IPAM ADD when configured; then the addresses, ARP/ND notify, the
//!    link up and the routes ([`configure_iface`]).
//!
//! Unlike the reference, which deletes nothing on failure, every failure
//! after step 3 deletes the link and releases the IPAM lease (IPAM DEL
//! also after a failed IPAM ADD, which may have reserved part of what it
//! was asked for).

use std::os::fd::AsFd;

use libcni::iface::Announce;
use libcni::invoke::{Delegator, Exec};
use libcni::netlink::sublink::{
    create_in_container, default_route_link, ContainerSubLink, Creator, SubLinkKind,
};
use libcni::netlink::sublink_plugin::{self, NewSubLink};
use libcni::netlink::{LinkInfo, RouteSocket};
use libcni::skel::CmdArgs;
use libcni::types::v100;

use crate::config::{ConfigError, IpvlanConf};
use crate::error::IpvlanError;

/// The prevResult in the 1.x layout, if the configuration has one.
pub fn prev_result(args: &CmdArgs) -> Result<Option<v100::Result>, IpvlanError> {
    match args.conf.prev_result()? {
        Some(prev) => v100::Result::try_from(prev)
            .map(Some)
            .map_err(IpvlanError::PrevResult),
        None => Ok(None),
    }
}

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
            [only] if !only.name.is_empty() => Ok(Some(only.name.clone())),
            _ => Err(ConfigError::ChainedMaster),
        },
    }
}

/// The master, looked up through `socket` (the host's, or the
/// container's with `linkInContainer`).
pub fn find_master(
    name: Option<&str>,
    in_container: bool,
    socket: &mut RouteSocket,
) -> Result<LinkInfo, IpvlanError> {
    match name {
        Some(name) => socket
            .link_by_name(name)?
            .ok_or_else(|| IpvlanError::MasterNotFound {
                master: name.to_string(),
                in_container,
            }),
        None => default_route_link(socket)?.ok_or(IpvlanError::NoDefaultRoute { in_container }),
    }
}

pub fn add<E: Exec>(args: &CmdArgs, ipam: &Delegator<E>) -> Result<v100::Result, IpvlanError> {
    let conf = IpvlanConf::from_conf(&args.conf)?;
    let prev = prev_result(args)?;
    let chained_ips = match (&conf.ipam_type, &prev) {
        (Some(_), _) => None,
        (None, Some(prev)) if !prev.ips.is_empty() => Some(prev.clone()),
        (None, _) => return Err(ConfigError::NoAddressSource.into()),
    };
    let master_name = master_name(&conf, prev.as_ref())?;
    let netns = sublink_plugin::open_container_netns(&args.netns)?;
    let mut container = RouteSocket::open_in(&netns)?;
    let mut host = if conf.link_in_container {
        None
    } else {
        Some(RouteSocket::open_current()?)
    };
    let master = match host.as_mut() {
        Some(host) => find_master(master_name.as_deref(), false, host)?,
        None => find_master(master_name.as_deref(), true, &mut container)?,
    };
    let spec = ContainerSubLink {
        ifname: &args.ifname,
        parent: master.index,
        kind: SubLinkKind::IpVlan { mode: conf.mode },
        mtu: conf.check_mtu(master.mtu)?,
        mac: None,
    };
    let creator = match host.as_mut() {
        Some(socket) => Creator::Outside {
            socket,
            container_netns: netns.as_fd(),
        },
        None => Creator::Inside,
    };
    let link = create_in_container(creator, &mut container, &spec)?;
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

    let mut new = NewSubLink::new(args, ipam, &netns, container, link);
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
        return Err(IpvlanError::IpamNoIps);
    }
    Ok(new.configure(source, Announce { notify: true }, &conf.dns)?)
}
