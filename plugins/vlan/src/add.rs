//! ADD: an 802.1Q VLAN link on the master, in the container, with its
//! addresses.
//!
//! 1. The whole configuration is checked before anything is made.
//! 2. The master is found, in the host or (`linkInContainer`) in the
//!    container, and the MTU checked against it.
//! 3. The VLAN link is made under a temporary name straight into the
//!    container and renamed to `CNI_IFNAME` there
//!    ([`create_in_container`]).
//! 4. IPAM ADD, then the addresses, the link up and the routes
//!    ([`configure_iface`]; no ARP/ND notify, as in the reference).
//!
//! Unlike the reference, which leaves the link behind when IPAM or the
//! addresses fail, every failure after step 3 deletes the link and
//! releases the IPAM lease (IPAM DEL also after a failed IPAM ADD, which
//! may have reserved part of what it was asked for).

use std::os::fd::AsFd;

use libcni::iface::{configure_iface, Announce};
use libcni::invoke::{Delegator, Exec};
use libcni::netlink::sublink::{create_in_container, ContainerSubLink, Creator, SubLinkKind};
use libcni::netlink::sublink_plugin;
use libcni::netlink::{LinkInfo, RouteSocket};
use libcni::netns::NetNs;
use libcni::skel::CmdArgs;
use libcni::types::v100;
use libcni::version::SpecVersion;

use crate::config::VlanConf;
use crate::error::VlanError;

/// The master, looked up through `socket` (the host's, or the
/// container's with `linkInContainer`).
pub fn find_master(conf: &VlanConf, socket: &mut RouteSocket) -> Result<LinkInfo, VlanError> {
    socket
        .link_by_name(&conf.master)?
        .ok_or_else(|| VlanError::MasterNotFound {
            master: conf.master.clone(),
            in_container: conf.link_in_container,
        })
}

pub fn add<E: Exec>(args: &CmdArgs, ipam: &Delegator<E>) -> Result<v100::Result, VlanError> {
    let conf = VlanConf::from_conf(&args.conf)?;
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
        kind: SubLinkKind::Vlan { id: conf.vlan_id },
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
    attach.run().inspect_err(|_| attach.undo())
}

/// ADD once the link exists: everything it does is undone on failure.
struct Attach<'a, E: Exec> {
    args: &'a CmdArgs,
    conf: &'a VlanConf,
    ipam: &'a Delegator<E>,
    netns: &'a NetNs,
    container: RouteSocket,
    link: LinkInfo,
    /// IPAM ADD was called: DEL releases whatever it reserved.
    lease_taken: bool,
}

impl<E: Exec> Attach<'_, E> {
    fn run(&mut self) -> Result<v100::Result, VlanError> {
        let ifname = &self.args.ifname;
        let plugin = &self.conf.ipam_type;
        self.lease_taken = true;
        let allocated = sublink_plugin::ipam_add(
            self.args,
            self.ipam,
            plugin,
            "failed to execute IPAM delegate",
        )?;
        if allocated.ips.is_empty() {
            return Err(VlanError::IpamNoIps);
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
            Announce::default(),
        )?;
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
        if self.lease_taken {
            let plugin = &self.conf.ipam_type;
            if let Err(e) = self.ipam.del(plugin, self.args.conf.bytes()) {
                log::warn!("rollback: IPAM DEL with {plugin:?}: {e}");
            }
        }
    }
}
