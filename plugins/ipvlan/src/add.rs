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

use libcni::iface::{configure_iface, Announce};
use libcni::invoke::{Delegator, Exec};
use libcni::netlink::sublink::{
    create_in_container, default_route_link, ContainerSubLink, Creator, SubLinkKind,
};
use libcni::netlink::sublink_plugin;
use libcni::netlink::{LinkInfo, RouteSocket};
use libcni::netns::NetNs;
use libcni::skel::CmdArgs;
use libcni::types::v100;
use libcni::version::SpecVersion;

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

    let mut attach = Attach {
        args,
        conf: &conf,
        ipam,
        netns: &netns,
        container,
        link,
        lease_taken: false,
    };
    attach.run(chained_ips).inspect_err(|_| attach.undo())
}

/// ADD once the link exists: everything it does is undone on failure.
struct Attach<'a, E: Exec> {
    args: &'a CmdArgs,
    conf: &'a IpvlanConf,
    ipam: &'a Delegator<E>,
    netns: &'a NetNs,
    container: RouteSocket,
    link: LinkInfo,
    /// IPAM ADD was called: DEL releases whatever it reserved.
    lease_taken: bool,
}

impl<E: Exec> Attach<'_, E> {
    fn run(&mut self, chained: Option<v100::Result>) -> Result<v100::Result, IpvlanError> {
        let ifname = &self.args.ifname;
        let source = match (chained, &self.conf.ipam_type) {
            (Some(prev), _) => prev,
            (None, Some(plugin)) => self.allocate(plugin)?,
            (None, None) => return Err(ConfigError::NoAddressSource.into()),
        };
        if source.ips.is_empty() {
            return Err(IpvlanError::IpamNoIps);
        }
        let mut result = v100::Result::new();
        result.interfaces = vec![v100::Interface {
            name: ifname.clone(),
            mac: self.link.mac_string(),
            // `interfaces[].mtu` is new in spec 1.1.0.
            mtu: if self.args.version() >= SpecVersion::V1_1_0 {
                self.link.mtu
            } else {
                0
            },
            sandbox: self.args.netns.clone(),
            ..v100::Interface::default()
        }];
        result.ips = source
            .ips
            .into_iter()
            .map(|ip| v100::IpConfig {
                interface: Some(0),
                ..ip
            })
            .collect();
        result.routes = source.routes;
        result.dns = source.dns;
        configure_iface(
            self.netns,
            &mut self.container,
            ifname,
            &result,
            Announce { notify: true },
        )?;
        // The configuration's DNS replaces IPAM's when it says anything;
        // the reference replaces it even with nothing.
        if !self.conf.dns.is_empty() {
            result.dns = self.conf.dns.clone();
        }
        Ok(result)
    }

    fn allocate(&mut self, plugin: &str) -> Result<v100::Result, IpvlanError> {
        self.lease_taken = true;
        Ok(sublink_plugin::ipam_add(
            self.args,
            self.ipam,
            plugin,
            "IPAM ADD with",
        )?)
    }

    /// Deletes the link and releases the lease; failures are logged, the
    /// error that caused the undo is what ADD reports.
    fn undo(&mut self) {
        if let Err(e) = self.container.delete_link(self.link.index) {
            if !e.is_not_found() {
                log::warn!("rollback: delete {:?}: {e}", self.args.ifname);
            }
        }
        if let (true, Some(plugin)) = (self.lease_taken, &self.conf.ipam_type) {
            if let Err(e) = self.ipam.del(plugin, self.args.conf.bytes()) {
                log::warn!("rollback: IPAM DEL with {plugin:?}: {e}");
            }
        }
    }
}
