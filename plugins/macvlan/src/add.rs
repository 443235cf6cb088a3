//! ADD: a macvlan on the master, in the container, with its addresses.
//!
//! 1. The whole configuration is checked, and a layer 2 network in a
//!    version whose results need addresses (0.1.0, 0.2.0) is refused,
//!    before anything is made.
//! 2. The master is found, in the host or (`linkInContainer`) in the
//!    container, and the MTU checked against it.
//! 3. The macvlan is made under a temporary name straight into the
//!    container and renamed to `CNI_IFNAME` there
//!    ([`create_in_container`]).
//! 4. Layer 3: IPAM ADD, then the addresses, ARP/ND notify, the link up
//!    and the routes ([`configure_iface`]). Layer 2: the link up.
//!
//! Unlike the reference, whose rollbacks miss some paths, every failure
//! after step 3 deletes the link and releases the IPAM lease (IPAM DEL
//! also after a failed IPAM ADD, which may have reserved part of what it
//! was asked for).

use std::os::fd::AsFd;

use nix::errno::Errno;

use libcni::iface::{configure_iface, Announce};
use libcni::invoke::{Delegator, Exec};
use libcni::netlink::sublink::{
    create_in_container, default_route_link, ContainerSubLink, Creator, SubLinkError, SubLinkKind,
};
use libcni::netlink::sublink_plugin;
use libcni::netlink::{LinkInfo, RouteSocket};
use libcni::netns::NetNs;
use libcni::skel::CmdArgs;
use libcni::types::v100;
use libcni::version::SpecVersion;

use crate::config::{mode_name, MacvlanConf};
use crate::error::MacvlanError;

/// The master, looked up through `socket` (the host's, or the
/// container's with `linkInContainer`).
pub fn find_master(conf: &MacvlanConf, socket: &mut RouteSocket) -> Result<LinkInfo, MacvlanError> {
    let in_container = conf.link_in_container;
    match &conf.master {
        Some(name) => socket
            .link_by_name(name)?
            .ok_or_else(|| MacvlanError::MasterNotFound {
                master: name.clone(),
                in_container,
            }),
        None => default_route_link(socket)?.ok_or(MacvlanError::NoDefaultRoute { in_container }),
    }
}

pub fn add<E: Exec>(args: &CmdArgs, ipam: &Delegator<E>) -> Result<v100::Result, MacvlanError> {
    let conf = MacvlanConf::from_conf(&args.conf, &args.args)?;
    conf.check_result_expressible()?;
    let netns = sublink_plugin::open_container_netns(&args.netns)?;
    let mut container = RouteSocket::open_in(&netns)?;
    let mut host = if conf.link_in_container {
        None
    } else {
        Some(RouteSocket::open_current()?)
    };
    let master = match host.as_mut() {
        Some(host) => find_master(&conf, host)?,
        None => find_master(&conf, &mut container)?,
    };
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
    let creator = match host.as_mut() {
        Some(socket) => Creator::Outside {
            socket,
            container_netns: netns.as_fd(),
        },
        None => Creator::Inside,
    };
    let link = create_in_container(creator, &mut container, &spec)
        .map_err(|e| master_refused(e, &conf, &master))?;

    let mut attach = Attach {
        args,
        conf: &conf,
        ipam,
        netns: &netns,
        container,
        link,
        lease_taken: false,
    };
    attach.run().inspect_err(|_| attach.undo())
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

/// ADD once the link exists: everything it does is undone on failure.
struct Attach<'a, E: Exec> {
    args: &'a CmdArgs,
    conf: &'a MacvlanConf,
    ipam: &'a Delegator<E>,
    netns: &'a NetNs,
    container: RouteSocket,
    link: LinkInfo,
    /// IPAM ADD was called: DEL releases whatever it reserved.
    lease_taken: bool,
}

impl<E: Exec> Attach<'_, E> {
    fn run(&mut self) -> Result<v100::Result, MacvlanError> {
        let ifname = &self.args.ifname;
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
        match &self.conf.ipam_type {
            Some(plugin) => {
                self.lease_taken = true;
                let allocated =
                    sublink_plugin::ipam_add(self.args, self.ipam, plugin, "IPAM ADD with")?;
                if allocated.ips.is_empty() {
                    return Err(MacvlanError::IpamNoIps);
                }
                result.ips = allocated
                    .ips
                    .into_iter()
                    .map(|ip| v100::IpConfig {
                        interface: Some(0),
                        ..ip
                    })
                    .collect();
                result.routes = allocated.routes;
                result.dns = allocated.dns;
                configure_iface(
                    self.netns,
                    &mut self.container,
                    ifname,
                    &result,
                    Announce { notify: true },
                )?;
            }
            None => self
                .container
                .set_link_up(self.link.index)
                .map_err(|e| e.context(format!("failed to set {ifname:?} up")))?,
        }
        // The configuration's DNS replaces IPAM's when it says anything;
        // the reference replaces it even with nothing.
        if !self.conf.dns.is_empty() {
            result.dns = self.conf.dns.clone();
        }
        Ok(result)
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
