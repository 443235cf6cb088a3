//! ADD: attach a container to the bridge.
//!
//! 1. Check everything that can be checked without changing the system:
//!    the whole configuration, the result's expressibility in the
//!    configuration's version, the container namespace, that `CNI_IFNAME`
//!    is free there, and that a link named like the bridge is a bridge.
//! 2. Ensure the bridge (shared, never rolled back).
//! 3. Make the veth pair in one request, the container end born in the pod
//!    namespace; attach the host end (hairpin, isolation, VLANs).
//! 4. MAC spoof check, IPAM, container addresses and routes, gateway
//!    addresses and forwarding, masquerade.
//! 5. Wait for the bridge port to be up, and build the result: interfaces
//!    bridge, host veth, container (then `<bridge>.<vlan>`), every IP on
//!    interface 2.
//!
//! Each container-specific change of steps 3-4 is recorded in a
//! [`Rollback`] and undone if a later step fails.
//!
//! Two things that wait on other processes or the kernel, and that nothing
//! before them needs, run on worker threads beside steps 3-4: the probe for
//! the masquerade backend (from the start of step 3 to the masquerade) and
//! the container interface's DAD and ARP sysctls (from the veth's creation
//! to the addresses). IPAM stays after step 3, as in the reference, since
//! IPAM plugins such as dhcp work through the attached interface.
//!
//! Debug builds read `CNI_BRIDGE_DEBUG_POST_IPAM_ERROR`: when set, ADD fails
//! with its value after all the work is done, so tests can check the
//! rollback (the reference plugin's `debugPostIPAMError`). Release builds
//! do not contain the hook.

use std::thread::{self, Scope};
use std::time::{Duration, Instant};

use ipnetwork::IpNetwork;
use libcni::iface;
use libcni::invoke::{Delegator, Exec, InvokeError};
use libcni::logging;
use libcni::netlink::sublink_plugin::{self, IpamCallError};
use libcni::netlink::{format_mac, LinkInfo, OperState, RouteSocket};
use libcni::netns::NetNs;
use libcni::rollback::VethAdd;
use libcni::skel::CmdArgs;
use libcni::sysctl;
use libcni::types::v100;
use libcni::veth::{self, Veth, VethSpec};

use crate::background::Background;
use crate::bridge_link::{self, Bridge, BridgeSpec};
use crate::bridge_port::{set_port_options, AdminState, PortOptions};
use crate::config::{BridgeConf, MasqBackend};
use crate::container::{self, EarlySysctls, InterfaceSysctls};
use crate::error::BridgeError;
use crate::gateway;
use crate::rollback::{BridgeUndo, Rollback, Undo};
use crate::rules::{AttachmentRules, Masquerade, SpoofCheck};
use crate::vlan::{apply_port_vlans, NetlinkVlans, PortVlans};

/// How long the host veth may take to come up: what the reference's waits
/// add up to (0, 50, 500, 1000, 1000 ms).
const PORT_UP_TIMEOUT: Duration = Duration::from_millis(2550);
/// The first pause between looks at the port: it is normally up at the
/// first look or within a millisecond (the kernel's link watch runs
/// asynchronously), so the pauses start short and double up to
/// [`PORT_UP_MAX_PAUSE`].
const PORT_UP_FIRST_PAUSE: Duration = Duration::from_micros(250);
const PORT_UP_MAX_PAUSE: Duration = Duration::from_millis(100);

#[cfg(debug_assertions)]
pub const DEBUG_POST_IPAM_ERROR_ENV: &str = "CNI_BRIDGE_DEBUG_POST_IPAM_ERROR";

pub fn open_netns(path: &str) -> Result<NetNs, BridgeError> {
    NetNs::open(path).map_err(|source| BridgeError::NetNs {
        path: path.to_string(),
        source,
    })
}

/// A netlink socket inside the container namespace, made by moving this
/// thread there and back ([`NetNs::enter_briefly`]) rather than by a thread
/// that must be started and scheduled. If the thread cannot move back, the
/// error says so ([`BridgeError::left_thread_inside`]) and the verb stops.
pub fn container_socket(netns: &NetNs) -> Result<RouteSocket, BridgeError> {
    let opened = netns
        .enter_briefly(RouteSocket::open_current)
        .map_err(|source| BridgeError::NetNs {
            path: netns.path().display().to_string(),
            source,
        })?;
    Ok(opened?)
}

pub fn add<E: Exec>(
    args: &CmdArgs,
    ipam: &Delegator<E>,
    rules: &dyn AttachmentRules,
) -> Result<v100::Result, BridgeError> {
    let conf = BridgeConf::from_conf(&args.conf, &args.args)?;
    if !conf.result_expressible() {
        return Err(BridgeError::ResultNotExpressible {
            version: conf.version.to_string(),
        });
    }
    let netns = open_netns(&args.netns)?;
    let mut host = RouteSocket::open_current()?;
    let mut container = container_socket(&netns)?;
    if container.link_by_name(&args.ifname)?.is_some() {
        return Err(BridgeError::ContainerInterfaceExists {
            ifname: args.ifname.clone(),
            netns: args.netns.clone(),
        });
    }
    bridge_link::existing_bridge(&mut host, &conf.bridge)?;

    let bridge = bridge_link::ensure_bridge(
        &mut host,
        &BridgeSpec {
            name: &conf.bridge,
            mtu: conf.mtu,
            vlan_filtering: conf.vlan_filtering,
            promisc: conf.promisc_mode,
        },
    )?;
    let mut attach = Attach {
        args,
        conf: &conf,
        ipam,
        rules,
        netns: &netns,
        host,
        container,
        bridge,
        rollback: Rollback::default(),
    };
    match attach.run() {
        Ok(result) => Ok(result),
        Err(error) => {
            attach.roll_back();
            Err(error)
        }
    }
}

/// One ADD in progress.
struct Attach<'a, E: Exec> {
    args: &'a CmdArgs,
    conf: &'a BridgeConf,
    ipam: &'a Delegator<E>,
    rules: &'a dyn AttachmentRules,
    netns: &'a NetNs,
    host: RouteSocket,
    container: RouteSocket,
    bridge: Bridge,
    rollback: Rollback,
}

impl<'a, E: Exec> Attach<'a, E> {
    fn ipam_type(&self) -> &str {
        self.conf.ipam_type.as_deref().unwrap_or_default()
    }

    fn run(&mut self) -> Result<v100::Result, BridgeError> {
        let (conf, rules) = (self.conf, self.rules);
        thread::scope(|scope| {
            // The masquerade backend probe (a netlink round trip, or an
            // `iptables-save` where iptables is not iptables-nft) needs
            // nothing made here: it runs on a worker thread meanwhile.
            let probe =
                (conf.is_layer3() && conf.ip_masq && conf.masq_backend.is_none()).then(|| {
                    Background::start(scope, "masq-probe", move || {
                        rules.probe_masquerade_backend()
                    })
                });
            let (veth, sysctls) = self.make_link(scope)?;
            // IPAM only once the interface exists and is attached, as in
            // the reference: IPAM plugins such as dhcp work through it.
            let allocated = conf.is_layer3().then(|| self.allocate());
            self.configure(veth, sysctls, allocated, probe)
        })
    }

    /// The veth pair, attached to the bridge, with the MAC spoof check;
    /// the container interface's early sysctls are being written.
    fn make_link<'scope>(
        &mut self,
        scope: &'scope Scope<'scope, '_>,
    ) -> Result<(Veth, Option<EarlySysctls<'scope>>), BridgeError>
    where
        'a: 'scope,
    {
        let (args, conf, netns) = (self.args, self.conf, self.netns);
        let veth = self.create_veth()?;
        let sysctls = if conf.is_layer3() {
            Some(container::start_sysctls(
                scope,
                netns,
                &args.ifname,
                conf.enable_dad,
            )?)
        } else {
            None
        };
        self.attach_host_end(&veth)?;
        log::info!(
            "veth {} attached to bridge {}, peer {} (MAC {}) in the container",
            veth.host.name,
            self.bridge.link.name,
            args.ifname,
            format_mac(&veth.container.mac)
        );
        if conf.mac_spoof_check {
            self.rollback
                .push(Undo::Own(BridgeUndo::TeardownSpoofCheck));
            self.rules.setup_spoof_check(&SpoofCheck {
                host_veth: &veth.host.name,
                container_mac: &format_mac(&veth.container.mac),
                container_id: &args.container_id,
                ifname: &args.ifname,
            })?;
        }
        Ok((veth, sysctls))
    }

    /// IPAM ADD; the lease is released on rollback.
    fn allocate(&mut self) -> Result<v100::Result, BridgeError> {
        let plugin = self.conf.ipam_type.as_deref().unwrap_or_default();
        let allocated = self
            .ipam
            .add(plugin, self.args.conf.bytes())
            .map_err(|source| IpamCallError::new("IPAM ADD with", plugin, source))?;
        self.rollback.push(Undo::ReleaseIpam);
        let result = v100::Result::try_from(allocated).map_err(|e| {
            IpamCallError::new(
                "cannot convert the result of",
                plugin,
                InvokeError::Result(e),
            )
        })?;
        if result.ips.is_empty() {
            return Err(BridgeError::IpamNoIps);
        }
        Ok(result)
    }

    /// Addresses, routes, gateway and masquerade (layer 3), then the wait
    /// for the port and the result.
    fn configure(
        &mut self,
        veth: Veth,
        sysctls: Option<EarlySysctls<'_>>,
        allocated: Option<Result<v100::Result, BridgeError>>,
        probe: Option<Background<'_, Result<MasqBackend, BridgeError>>>,
    ) -> Result<v100::Result, BridgeError> {
        let container_mac = format_mac(&veth.container.mac);
        let mut result = v100::Result::new();
        let mut vlan_gateway = None;
        if let Some(allocated) = allocated {
            result = allocated?;
            if let Some(sysctls) = sysctls {
                sysctls.wait()?;
            }
            let gateways = gateway::complete_result(
                &mut result,
                self.conf.is_gateway,
                self.conf.is_default_gateway,
            );
            container::finish_sysctls(
                self.netns,
                InterfaceSysctls {
                    ifname: &self.args.ifname,
                    enable_dad: self.conf.enable_dad,
                    has_ipv6: result.ips.iter().any(|ip| ip.address.is_ipv6()),
                },
            )?;
            // Every IP IPAM gave is the container interface's (the result
            // has no interfaces yet to index).
            let container_ips: Vec<&v100::IpConfig> = result.ips.iter().collect();
            iface::configure_addresses(
                &mut self.container,
                veth.container.index,
                &self.args.ifname,
                &container_ips,
            )?;
            log::info!(
                "addresses {} on {} (from IPAM {})",
                logging::joined(container_ips.iter().map(|ip| ip.address)),
                self.args.ifname,
                self.ipam_type()
            );
            if self.conf.is_gateway && !gateways.is_empty() {
                vlan_gateway = self.add_gateways(&gateways)?;
                gateway::enable_forwarding(&gateways)?;
            }
            if self.conf.ip_masq {
                let ips: Vec<IpNetwork> = result.ips.iter().map(|ip| ip.address).collect();
                self.rollback
                    .push(Undo::TeardownMasquerade { ips: ips.clone() });
                let backend = match probe {
                    Some(probe) => Some(
                        probe
                            .finish()
                            .unwrap_or(Err(BridgeError::WorkerLost("masquerade backend probe")))?,
                    ),
                    None => self.conf.masq_backend,
                };
                self.rules.setup_masquerade(&Masquerade {
                    backend,
                    ..self.masquerade(&ips)
                })?;
            }
            // The routes come last, after the work that needs no RTNL
            // lock. Why: setting the container end up gives the veth its
            // carrier, and the kernel then takes the RTNL lock in workers
            // (linkwatch, then IPv6 address configuration, whose router
            // solicitation and MLD reports the bridge floods to every other
            // port while holding it). A route added right after the up
            // waited for them, the longer the more pods the bridge has
            // (mean RTNL wait in the route request 0.03 ms with 20 pods,
            // 0.14-0.2 ms with 200; 0.04 ms after this change). Bridge ADD
            // measured 0.17 ms faster with 20 pods and with 200, pods
            // alternating between the two orders on one bridge. The final
            // state is the reference's; a failed route is rolled back like
            // any later step.
            iface::add_routes(
                &mut self.container,
                veth.container.index,
                &self.args.ifname,
                &result.routes,
                &container_ips,
            )?;
        } else if !self.conf.disable_container_interface {
            self.container
                .set_link_up(veth.container.index)
                .map_err(|e| e.context(format!("failed to set {:?} up", self.args.ifname)))?;
        }

        let host_end = if self.conf.disable_container_interface {
            // The container end stays down, so the port never comes up.
            self.host.link_by_index(veth.host.index)?
        } else {
            Some(self.wait_port_up(&veth.host)?)
        };
        let host_mac = host_end.map_or_else(|| veth.host.mac.clone(), |l| l.mac);
        let bridge_mac = match self.host.link_by_index(self.bridge.link.index)? {
            Some(now) => now.mac,
            None => self.bridge.link.mac.clone(),
        };

        #[cfg(debug_assertions)]
        if let Some(message) = std::env::var_os(DEBUG_POST_IPAM_ERROR_ENV) {
            return Err(BridgeError::Injected(
                message.to_string_lossy().into_owned(),
            ));
        }

        result.interfaces = vec![
            v100::Interface {
                name: self.bridge.link.name.clone(),
                mac: format_mac(&bridge_mac),
                ..v100::Interface::default()
            },
            v100::Interface {
                name: veth.host.name.clone(),
                mac: format_mac(&host_mac),
                ..v100::Interface::default()
            },
            v100::Interface {
                name: self.args.ifname.clone(),
                mac: container_mac,
                sandbox: self.args.netns.clone(),
                ..v100::Interface::default()
            },
        ];
        if let Some(link) = vlan_gateway {
            result.interfaces.push(v100::Interface {
                name: link.name,
                mac: format_mac(&link.mac),
                ..v100::Interface::default()
            });
        }
        if let Some(dns) = &self.conf.dns {
            result.dns = dns.clone();
        }
        Ok(result)
    }

    fn create_veth(&mut self) -> Result<Veth, BridgeError> {
        let veth = veth::create(
            &mut self.host,
            &mut self.container,
            &VethSpec {
                container_ifname: &self.args.ifname,
                container_netns: self.netns,
                mtu: self.conf.mtu,
                container_mac: self.conf.mac.as_ref().map(|m| m.as_slice()),
                master: Some(self.bridge.link.index),
            },
        )?;
        self.rollback.push(Undo::DeleteVeth {
            host_index: veth.host.index,
            host_name: veth.host.name.clone(),
        });
        Ok(veth)
    }

    /// Gives the host end (already a port of the bridge, see
    /// [`VethSpec::master`]) the port options and VLANs of the
    /// configuration, and sets it up.
    fn attach_host_end(&mut self, veth: &Veth) -> Result<(), BridgeError> {
        let name = &veth.host.name;
        // A bridge port forwards IPv6 at layer 2 whatever its own IPv6
        // state, so the host end needs no link-local address, prefix and
        // multicast routes, DAD or router solicitations. Each of those
        // costs grows with the ports already there: the kernel inserts the
        // port's fe80::/64 and ff00::/8 routes into lists that hold one
        // route per port, and walks every IPv6 route of the host at each
        // up or carrier change of a port that has IPv6, under the RTNL
        // lock that the next pod's ADD waits for. Disabled before the port
        // is up, none of it happens. Best effort, like the accept_ra write
        // the reference makes (kept for the same observable sysctl).
        for (param, value) in [("disable_ipv6", "1"), ("accept_ra", "0")] {
            if let Err(e) = sysctl::set(&format!("net/ipv6/conf/{name}/{param}"), value) {
                log::debug!("{e}");
            }
        }
        let plan = PortVlans::plan(
            self.conf.vlan,
            &self.conf.vlan_trunk,
            self.conf.preserve_default_vlan,
        );
        // Without VLANs to set in between, the options and the up share
        // one request.
        let state = if plan.is_empty() {
            AdminState::Up
        } else {
            AdminState::Unchanged
        };
        set_port_options(
            &mut self.host,
            veth.host.index,
            PortOptions {
                hairpin: self.conf.hairpin_mode,
                isolated: self.conf.port_isolation,
            },
            state,
        )
        .map_err(|e| {
            let up = if state == AdminState::Up {
                " and set it up"
            } else {
                ""
            };
            e.context(format!("failed to set hairpin/isolation on {name:?}{up}"))
        })?;
        if state == AdminState::Up {
            return Ok(());
        }
        apply_port_vlans(
            &mut NetlinkVlans::new(&mut self.host),
            veth.host.index,
            name,
            &plan,
        )?;
        self.host
            .set_link_up(veth.host.index)
            .map_err(|e| e.context(format!("failed to set {name:?} up")))?;
        Ok(())
    }

    /// Puts the gateway addresses on the bridge, or on `<bridge>.<vlan>`
    /// (returned, for the result) in a VLAN network.
    fn add_gateways(
        &mut self,
        gateways: &gateway::Gateways,
    ) -> Result<Option<LinkInfo>, BridgeError> {
        let target = match self.conf.vlan_gateway_name() {
            Some(name) => {
                let plan = PortVlans::plan(self.conf.vlan, &[], self.conf.preserve_default_vlan);
                // VLAN requests on a socket of their own: the gateway code
                // uses the host socket for the links at the same time.
                let mut vlan_socket = RouteSocket::open_current()?;
                let mut vlans = NetlinkVlans::new(&mut vlan_socket);
                Some(gateway::ensure_vlan_gateway(
                    &mut self.host,
                    &mut vlans,
                    &self.bridge.link,
                    &name,
                    &plan,
                )?)
            }
            None => None,
        };
        let link = target.clone().unwrap_or_else(|| self.bridge.link.clone());
        let mut added = false;
        for &gw in gateways.all() {
            added |= gateway::ensure_address(&mut self.host, &link, gw, self.conf.force_address)?;
        }
        // Only with a gateway address just added, as in the reference: a
        // MAC change, even to the same MAC, makes the kernel flush the
        // bridge's neighbour entries, which every ADD would otherwise do
        // to the traffic of the pods already there.
        if target.is_none() && added {
            bridge_link::pin_mac(&mut self.host, &self.bridge)?;
        }
        log::info!(
            "gateway {} on {}{}",
            logging::joined(gateways.all()),
            link.name,
            if added { "" } else { " (already there)" }
        );
        Ok(target)
    }

    fn masquerade<'m>(&'m self, ips: &'m [IpNetwork]) -> Masquerade<'m> {
        Masquerade {
            backend: self.conf.masq_backend,
            network: &self.conf.network,
            container_id: &self.args.container_id,
            ifname: &self.args.ifname,
            ips,
        }
    }

    /// The reference's wait for the bridge port to be operationally up,
    /// looking more often than the reference does.
    fn wait_port_up(&mut self, host_end: &LinkInfo) -> Result<LinkInfo, BridgeError> {
        let deadline = Instant::now() + PORT_UP_TIMEOUT;
        let mut pause = PORT_UP_FIRST_PAUSE;
        loop {
            let Some(link) = self.host.link_by_index(host_end.index)? else {
                return Err(BridgeError::PortNotUp(format!(
                    "{:?} disappeared",
                    host_end.name
                )));
            };
            if link.oper_state == OperState::Up {
                return Ok(link);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(BridgeError::PortNotUp(
                    link.oper_state.to_string().to_lowercase(),
                ));
            }
            thread::sleep(pause.min(left));
            pause = (pause * 2).min(PORT_UP_MAX_PAUSE);
        }
    }
}

/// What undoing ADD's steps needs from it.
impl<E: Exec> VethAdd for Attach<'_, E> {
    type Own = BridgeUndo;
    type Error = BridgeError;

    fn rollback(&mut self) -> &mut Rollback {
        &mut self.rollback
    }

    fn host_socket(&mut self) -> &mut RouteSocket {
        &mut self.host
    }

    fn release_lease(&mut self) -> Result<(), BridgeError> {
        let plugin = self.ipam_type();
        Ok(sublink_plugin::ipam_del(self.args, self.ipam, plugin)?)
    }

    fn teardown_masquerade(&mut self, ips: &[IpNetwork]) -> Result<(), BridgeError> {
        self.rules.teardown_masquerade(&self.masquerade(ips))
    }

    fn undo_own(&mut self, step: BridgeUndo) -> Result<(), BridgeError> {
        match step {
            BridgeUndo::TeardownSpoofCheck => self
                .rules
                .teardown_spoof_check(&self.args.container_id, &self.args.ifname),
        }
    }
}
