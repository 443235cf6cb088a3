//! ADD: a veth pair between the container and the host, routed.
//!
//! 1. Check what can be checked without changing the system: the whole
//!    configuration, the container namespace, that `CNI_IFNAME` is free.
//! 2. IPAM ADD (first, as in the reference); an empty result, or an
//!    address without a gateway of its family, is refused.
//! 3. Forwarding on in the host for the families of the addresses.
//! 4. The veth pair in one request (container end `CNI_IFNAME`, host end
//!    `veth` + 8 hex digits, both with the MTU); the host end gets
//!    `accept_ra=0` and is set up.
//! 5. The host end gets each gateway as a /32 (/128) and a host route to
//!    each container address ([`routing::set_up_host_end`]). The reference
//!    does this after step 6; the result is the same, and doing it first
//!    lets the IPv6 duplicate address detection of the gateway run beside
//!    the container's.
//! 6. The container interface: addresses, up, IPAM routes (as
//!    `ConfigureIface`), then each subnet routed through its gateway
//!    ([`routing::route_through_gateways`]).
//! 7. Masquerade, when `ipMasq`.
//! 8. The result: interfaces host veth and container, every IP on
//!    interface 1, DNS from the configuration when it gives any.
//!
//! Each container-specific change of steps 2-7 is recorded in a
//! [`Rollback`] and undone if a later step fails; unlike the reference,
//! which leaves the veth behind, a failed ADD leaves nothing.
//!
//! Debug builds read `CNI_PTP_DEBUG_FAIL_AT_END`: when set, ADD fails with
//! its value after all the work is done, so tests can check the rollback
//! of every step. Release builds do not contain the hook.

use std::convert::Infallible;

use ipnetwork::IpNetwork;
use libcni::iface::{self, Announce, DAD_TIMEOUT};
use libcni::invoke::{Delegator, Exec, InvokeError};
use libcni::ipmasq;
use libcni::netlink::sublink_plugin::{self, open_container_netns, IpamCallError, StepError};
use libcni::netlink::{format_mac, RouteSocket};
use libcni::netns::NetNs;
use libcni::rollback::VethAdd;
use libcni::skel::CmdArgs;
use libcni::sysctl;
use libcni::types::v100;
use libcni::veth::{self, Veth, VethError, VethSpec};
use libcni::IpFamily;

use crate::config::PtpConf;
use crate::error::PtpError;
use crate::rollback::{Rollback, Undo};
use crate::routing;

#[cfg(debug_assertions)]
pub const DEBUG_FAIL_AT_END_ENV: &str = "CNI_PTP_DEBUG_FAIL_AT_END";

/// The index of the container interface in the result (the host veth is
/// 0), which every IP names.
const CONTAINER_INTERFACE: usize = 1;

pub fn add<E: Exec>(args: &CmdArgs, ipam: &Delegator<E>) -> Result<v100::Result, PtpError> {
    let conf = PtpConf::from_conf(&args.conf)?;
    let netns = open_container_netns(&args.netns)?;
    let host = RouteSocket::open_current()?;
    let mut container = RouteSocket::open_in(&netns)?;
    if container.link_by_name(&args.ifname)?.is_some() {
        return Err(VethError::ContainerInterfaceExists {
            ifname: args.ifname.clone(),
            netns: args.netns.clone(),
        }
        .into());
    }
    let mut attach = Attach {
        args,
        conf: &conf,
        ipam,
        netns: &netns,
        host,
        container,
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
    conf: &'a PtpConf,
    ipam: &'a Delegator<E>,
    netns: &'a NetNs,
    host: RouteSocket,
    container: RouteSocket,
    rollback: Rollback,
}

impl<E: Exec> Attach<'_, E> {
    fn run(&mut self) -> Result<v100::Result, PtpError> {
        let mut result = self.allocate()?;
        for family in IpFamily::ALL {
            if result
                .ips
                .iter()
                .any(|ip| IpFamily::of(ip.address.ip()) == family)
            {
                sysctl::enable_forwarding(family).map_err(PtpError::Forwarding)?;
            }
        }
        let veth = self.create_veth()?;
        self.start_host_end(&veth)?;
        log::info!(
            "veth {} in the host, peer {} (MAC {}) in the container",
            veth.host.name,
            self.args.ifname,
            format_mac(&veth.container.mac)
        );

        for ip in &mut result.ips {
            ip.interface = Some(CONTAINER_INTERFACE);
        }
        result.interfaces = vec![
            v100::Interface {
                name: veth.host.name.clone(),
                mac: format_mac(&veth.host.mac),
                ..v100::Interface::default()
            },
            v100::Interface {
                name: self.args.ifname.clone(),
                mac: format_mac(&veth.container.mac),
                sandbox: self.args.netns.clone(),
                ..v100::Interface::default()
            },
        ];

        routing::set_up_host_end(&mut self.host, &veth.host, &result.ips)?;
        log::info!(
            "host routes to {} through {}",
            libcni::logging::joined(result.ips.iter().map(|ip| ip.address.ip())),
            veth.host.name
        );
        let link = iface::configure_iface(
            self.netns,
            &mut self.container,
            &self.args.ifname,
            &result,
            Announce::default(),
        )?;
        routing::route_through_gateways(&mut self.container, &link, &result.ips)?;
        if result.ips.iter().any(|ip| ip.address.is_ipv6()) {
            // The gateway must be usable when ADD returns: the container's
            // first neighbour solicitation for it gets no answer while it
            // is tentative.
            iface::settle_addresses(
                &mut self.host,
                veth.host.index,
                &veth.host.name,
                DAD_TIMEOUT,
            )?;
        }

        if self.conf.ip_masq {
            self.masquerade(&result)?;
        }

        #[cfg(debug_assertions)]
        if let Some(message) = std::env::var_os(DEBUG_FAIL_AT_END_ENV) {
            return Err(PtpError::Injected(message.to_string_lossy().into_owned()));
        }

        if let Some(dns) = &self.conf.dns {
            result.dns = dns.clone();
        }
        Ok(result)
    }

    /// IPAM ADD; the lease is released on rollback.
    fn allocate(&mut self) -> Result<v100::Result, PtpError> {
        let plugin = self.conf.ipam_type.as_str();
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
            return Err(StepError::IpamNoIps.into());
        }
        routing::check_gateways(&result.ips)?;
        Ok(result)
    }

    fn create_veth(&mut self) -> Result<Veth, PtpError> {
        let veth = veth::create(
            &mut self.host,
            &mut self.container,
            &VethSpec {
                container_ifname: &self.args.ifname,
                container_netns: self.netns,
                mtu: self.conf.mtu,
                container_mac: None,
                master: None,
            },
        )?;
        self.rollback.push(Undo::DeleteVeth {
            host_index: veth.host.index,
            host_name: veth.host.name.clone(),
        });
        Ok(veth)
    }

    /// `accept_ra=0` (ptp owns the host end's routes; best effort, as in
    /// the reference), then up.
    fn start_host_end(&mut self, veth: &Veth) -> Result<(), PtpError> {
        let name = &veth.host.name;
        if let Err(e) = sysctl::set(&format!("net/ipv6/conf/{name}/accept_ra"), "0") {
            log::debug!("{e}");
        }
        self.host
            .set_link_up(veth.host.index)
            .map_err(|source| PtpError::HostVethUp {
                name: name.clone(),
                source,
            })
    }

    fn masquerade(&mut self, result: &v100::Result) -> Result<(), PtpError> {
        let ips: Vec<IpNetwork> = result.ips.iter().map(|ip| ip.address).collect();
        let backend = match self.conf.masq_backend {
            Some(backend) => backend,
            None => ipmasq::select_backend(None)?,
        };
        self.rollback
            .push(Undo::TeardownMasquerade { ips: ips.clone() });
        ipmasq::setup(
            backend,
            &self.conf.network,
            &self.args.container_id,
            &self.args.ifname,
            &ips,
        )?;
        Ok(())
    }
}

/// What undoing ADD's steps needs from it.
impl<E: Exec> VethAdd for Attach<'_, E> {
    type Own = Infallible;
    type Error = PtpError;

    fn rollback(&mut self) -> &mut Rollback {
        &mut self.rollback
    }

    fn host_socket(&mut self) -> &mut RouteSocket {
        &mut self.host
    }

    fn release_lease(&mut self) -> Result<(), PtpError> {
        let plugin = &self.conf.ipam_type;
        Ok(sublink_plugin::ipam_del(self.args, self.ipam, plugin)?)
    }

    fn teardown_masquerade(&mut self, ips: &[IpNetwork]) -> Result<(), PtpError> {
        let (network, args) = (&self.conf.network, self.args);
        Ok(ipmasq::teardown(
            network,
            &args.container_id,
            &args.ifname,
            ips,
        )?)
    }

    fn undo_own(&mut self, step: Infallible) -> Result<(), PtpError> {
        match step {}
    }
}
