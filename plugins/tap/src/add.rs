//! ADD: a persistent tap in the container, with its addresses.
//!
//! 1. The whole configuration is checked, a layer 2 network in a version
//!    whose results need addresses (0.1.0, 0.2.0) is refused, and so is
//!    `selinuxContext` on a node without SELinux, before anything is made.
//! 2. The container namespace is opened and the `bridge`, when set, looked
//!    up there.
//! 3. The tap is made inside the container under a temporary name
//!    (`tap` + 8 random hex digits + a number the kernel picks; see
//!    [`crate::tuntap`]), given its MTU and MAC while down, renamed to
//!    `CNI_IFNAME` and made a port of the bridge.
//! 4. Layer 3: IPAM ADD, then the addresses, ARP/ND notify, the link up
//!    and the routes ([`configure_iface`]). Layer 2: the link up.
//!
//! Unlike the reference, whose rollback misses the layer 3 path, every
//! failure after step 3 deletes the tap and releases the IPAM lease. The
//! reference sets only `arp_notify`; here `ndisc_notify` comes with it, as
//! for macvlan, so IPv6 neighbours learn the MAC at once too. The result's
//! DNS is the configuration's when it says anything, else IPAM's (the
//! reference replaces it even with nothing).

use std::path::Path;

use libcni::iface::{configure_iface, Announce};
use libcni::invoke::{Delegator, Exec};
use libcni::link_name;
use libcni::netlink::sublink_plugin::{self, StepError};
use libcni::netlink::{LinkInfo, RouteSocket};
use libcni::netns::NetNs;
use libcni::skel::CmdArgs;
use libcni::types::v100;

use crate::config::TapConf;
use crate::error::TapError;
use crate::tuntap::{self, TapSpec, TunError};

/// Prefix of the temporary name (with 8 hex digits and the kernel's
/// number: 12 or 13 bytes).
const TEMP_PREFIX: &str = "tap";

/// The plugin's own binary, run as the helper for `selinuxContext`.
const SELF_EXE: &str = "/proc/self/exe";

/// The bridge named `name` in the container.
pub fn find_bridge(container: &mut RouteSocket, name: &str) -> Result<LinkInfo, TapError> {
    container
        .link_by_name(name)?
        .ok_or_else(|| TapError::BridgeNotFound(name.to_string()))
}

pub fn add<E: Exec>(args: &CmdArgs, ipam: &Delegator<E>) -> Result<v100::Result, TapError> {
    let conf = TapConf::from_conf(&args.conf, &args.args)?;
    conf.check_result_expressible()?;
    if let Some(context) = &conf.selinux_context {
        if !tuntap::selinux_enabled() {
            return Err(TunError::SelinuxAbsent(context.clone()).into());
        }
    }
    let netns = sublink_plugin::open_container_netns(&args.netns)?;
    let mut container = RouteSocket::open_in(&netns)?;
    let bridge = match &conf.bridge {
        Some(name) => Some(find_bridge(&mut container, name)?),
        None => None,
    };
    let spec = TapSpec {
        template: format!(
            "{}%d",
            link_name::random_name(TEMP_PREFIX).map_err(TapError::Random)?
        ),
        multi_queue: conf.multi_queue,
        owner: conf.owner,
        group: conf.group,
    };
    let temp_name = netns.run(|| match &conf.selinux_context {
        Some(context) => tuntap::create_with_helper(Path::new(SELF_EXE), &spec, Some(context)),
        None => tuntap::create_persistent_tap(&spec),
    })??;
    let Some(tap) = container.link_by_name(&temp_name)? else {
        return Err(TapError::Vanished(temp_name));
    };

    let mut attach = Attach {
        args,
        conf: &conf,
        ipam,
        netns: &netns,
        container,
        index: tap.index,
        bridge,
        lease_taken: false,
    };
    attach.run().inspect_err(|_| attach.undo())
}

/// ADD once the tap exists: everything it does is undone on failure.
struct Attach<'a, E: Exec> {
    args: &'a CmdArgs,
    conf: &'a TapConf,
    ipam: &'a Delegator<E>,
    netns: &'a NetNs,
    container: RouteSocket,
    /// The tap's index: it does not change with the rename.
    index: u32,
    bridge: Option<LinkInfo>,
    /// IPAM ADD was called: DEL releases whatever it reserved.
    lease_taken: bool,
}

impl<E: Exec> Attach<'_, E> {
    fn run(&mut self) -> Result<v100::Result, TapError> {
        let ifname = &self.args.ifname;
        let index = self.index;
        if let Some(mtu) = self.conf.mtu {
            self.container
                .set_mtu(index, mtu)
                .map_err(|e| e.context("failed to set the tap's MTU"))?;
        }
        if let Some(mac) = &self.conf.mac {
            self.container
                .set_mac(index, mac)
                .map_err(|e| e.context("failed to set the tap's MAC"))?;
        }
        self.container
            .set_name(index, ifname)
            .map_err(|e| e.context(format!("failed to rename tap to {ifname:?}")))?;
        if let Some(bridge) = &self.bridge {
            self.container
                .set_master(index, Some(bridge.index))
                .map_err(|e| {
                    e.context(format!(
                        "failed to set tap {ifname} as a port of bridge {}",
                        bridge.name
                    ))
                })?;
        }
        let link = self
            .container
            .link_by_index(index)?
            .ok_or_else(|| TapError::Vanished(ifname.clone()))?;
        let id_text = |id: Option<u32>| id.map_or_else(|| "any".to_string(), |id| id.to_string());
        log::info!(
            "created tap {ifname} (MAC {}, {}, owner {}, group {}){}",
            link.mac_string(),
            if self.conf.multi_queue {
                "multi-queue"
            } else {
                "single queue"
            },
            id_text(self.conf.owner),
            id_text(self.conf.group),
            self.bridge
                .as_ref()
                .map(|b| format!(" on bridge {}", b.name))
                .unwrap_or_default()
        );

        let mut result = v100::Result::new();
        result.interfaces = vec![sublink_plugin::container_interface(self.args, &link)];
        match &self.conf.ipam_type {
            Some(plugin) => {
                self.lease_taken = true;
                let allocated =
                    sublink_plugin::ipam_add(self.args, self.ipam, plugin, "IPAM ADD with")?;
                if allocated.ips.is_empty() {
                    return Err(StepError::IpamNoIps.into());
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
                .set_link_up(index)
                .map_err(|e| e.context("failed to set tap interface up"))?,
        }
        if !self.conf.dns.is_empty() {
            result.dns = self.conf.dns.clone();
        }
        Ok(result)
    }

    /// Deletes the tap and releases the lease; failures are logged, the
    /// error that caused the undo is what ADD reports.
    fn undo(&mut self) {
        if let Err(e) = self.container.delete_link(self.index) {
            if !e.is_not_found() {
                log::warn!("rollback: delete tap #{}: {e}", self.index);
            }
        }
        if let (true, Some(plugin)) = (self.lease_taken, &self.conf.ipam_type) {
            if let Err(e) = self.ipam.del(plugin, self.args.conf.bytes()) {
                log::warn!("rollback: IPAM DEL with {plugin}: {e}");
            }
        }
    }
}
