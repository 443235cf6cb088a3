//! ADD: the VF (named by `deviceID`, or the first free one of `pf`), its
//! PF-side settings, its RDMA device and netdev into the pod, IPAM,
//! addresses and routes, and the device-info file the runtime asked for
//! (`runtimeConfig.CNIDeviceInfoFile`: the VF's and its PF's PCI addresses
//! and the RDMA device, for Multus to put in the pod's network-status);
//! with `rail`, the rail's sysctls and routing table ([`crate::rail`]).
//!
//! ADD writes the attachment's state before its first change and records
//! each step as it is taken; a failure then runs the same teardown DEL
//! runs, driven by that record, so a half-done ADD leaves nothing behind
//! (the reference sriov-cni leaves a partial PF-side configuration).

use std::os::fd::AsFd;
use std::thread;
use std::time::Duration;

use libcni::device_info::{self, PciDeviceInfo, Written};
use libcni::iface;
use libcni::netlink::rdma::RdmaNetnsMode;
use libcni::netlink::{LinkInfo, RouteSocket};
use libcni::netns::NetNs;
use libcni::skel::CmdArgs;
use libcni::types::v100;
use nix::errno::Errno;

use crate::alloc::{netns_alive, AllocError, AllocationRecord, VfLock};
use crate::config::{DeviceSelector, NetConf};
use crate::error::PluginError;
use crate::hwaddr::MacAddr;
use crate::netdev::{self, NetdevError};
use crate::pf::VfSetting;
use crate::plugin::{ipam_type, Context, RdmaSriov};
use crate::rail;
use crate::state::{AttachmentState, NetdevLocation, RailRecord, RdmaAttachment, STATE_VERSION};
use crate::teardown::{reclaim_if_stale, teardown, IpamRelease};
use crate::vf::{find_vf, vfs_of_pf, VfDevice};

/// Read-backs of an administrative MAC: some PF drivers apply it
/// asynchronously (sriov-cni polls too).
const MAC_VERIFY_ATTEMPTS: u32 = 10;
const MAC_VERIFY_PAUSE: Duration = Duration::from_millis(50);

pub(crate) fn add(plugin: &RdmaSriov, args: &CmdArgs) -> Result<v100::Result, PluginError> {
    let conf = NetConf::parse(&args.conf, &args.args)?;
    let ctx = plugin.context(conf.state_dir.clone(), conf.sysfs_root.clone());
    let pod = NetNs::open(&args.netns)?;
    let host = NetNs::current_thread()?;
    let network = &args.conf.name;
    if ctx
        .store
        .load(network, &args.container_id, &args.ifname)?
        .is_some()
    {
        return Err(PluginError::AttachmentExists {
            network: network.clone(),
            container_id: args.container_id.clone(),
            ifname: args.ifname.clone(),
        });
    }

    // In pf mode the PF lock is held to the end, so concurrent picks from
    // one PF cannot choose the same VF.
    let (vf, _pf_lock, _vf_lock) = match &conf.device {
        DeviceSelector::Pci(pci) => {
            let lock = VfLock::acquire(&ctx.state_dir, pci, plugin.knobs.lock_timeout)?;
            if let Some(holder) = reclaim_if_stale(plugin, &ctx, pci)? {
                return Err(AllocError::AlreadyAllocated {
                    pci: pci.clone(),
                    owner: holder.describe(),
                }
                .into());
            }
            let vf = find_vf(&ctx.sysfs, pci)?;
            if let Some(expected) = &conf.expected_pf {
                if &vf.pf_name != expected {
                    return Err(PluginError::WrongPf {
                        pci: pci.clone(),
                        actual: vf.pf_name,
                        expected: expected.clone(),
                    });
                }
            }
            (vf, None, lock)
        }
        DeviceSelector::Pf(pf) => {
            let pf_lock = VfLock::acquire(
                &ctx.state_dir,
                &format!("pf-{pf}"),
                plugin.knobs.lock_timeout,
            )?;
            let (vf, lock) = pick_free_vf(plugin, &ctx, pf)?;
            (vf, Some(pf_lock), lock)
        }
    };

    if let (Some(_), Some(driver)) = (&conf.rail, vf.userspace_driver()) {
        return Err(PluginError::RailWithoutNetdev {
            pci: vf.pci.clone(),
            driver: driver.to_string(),
        });
    }

    let rdma = match vf.userspace_driver() {
        Some(driver) => {
            log::info!(
                "VF {} is bound to {driver}: no netdev, no RDMA move",
                vf.pci
            );
            None
        }
        None => Some(plan_rdma(plugin, conf.allow_shared_rdma_netns, &vf, &host)?),
    };
    let original_vf = plugin.backends.pf.vf_state(&vf.pf_name, vf.vf_index)?;
    let mut state = AttachmentState {
        version: STATE_VERSION,
        network: network.clone(),
        container_id: args.container_id.clone(),
        ifname: args.ifname.clone(),
        netns: args.netns.clone(),
        pci: vf.pci.clone(),
        pf: vf.pf_name.clone(),
        vf_index: vf.vf_index,
        userspace_driver: vf.userspace_driver().map(str::to_string),
        host_netdev: None,
        netdev_location: None,
        original_vf,
        applied: Vec::new(),
        rdma,
        ipam_allocated: false,
        netconf: args.conf.raw().clone(),
        pod_mac: None,
        addresses: Vec::new(),
        device_info_file: None,
        rail: None,
        complete: false,
    };
    ctx.store.save(&state)?;

    let error = match setup(plugin, &ctx, &conf, args, &vf, &pod, &host, &mut state) {
        Ok(result) => return Ok(result),
        Err(error) => error,
    };
    // The error itself is logged once, by the skeleton, when returned.
    log::info!("ADD failed; undoing what it did");
    let release = ipam_type(&args.conf).map(|ipam| IpamRelease {
        plugin: ipam,
        netconf: args.conf.bytes().to_vec(),
        env: &plugin.env,
    });
    let problems = teardown(plugin, &ctx, &mut state, release);
    if problems.is_empty() {
        if let Err(e) = ctx
            .store
            .remove(&state.network, &state.container_id, &state.ifname)
        {
            log::warn!("cannot remove the state of the undone ADD: {e}");
        }
        Err(error)
    } else {
        // Kept for a later DEL to finish the job.
        if let Err(e) = ctx.store.save(&state) {
            log::warn!("cannot save the state left for DEL to finish: {e}");
        }
        Err(PluginError::RollbackFailed {
            error: Box::new(error),
            problems,
        })
    }
}

/// The first VF of `pf` that no live pod holds and no other run has
/// locked, returned locked.
fn pick_free_vf(
    plugin: &RdmaSriov,
    ctx: &Context,
    pf: &str,
) -> Result<(VfDevice, VfLock), PluginError> {
    for (index, pci) in vfs_of_pf(&ctx.sysfs, pf)? {
        let held = matches!(ctx.allocs.read(&pci), Ok(Some(r)) if netns_alive(&r.netns));
        if held {
            continue;
        }
        let Ok(lock) = VfLock::acquire(&ctx.state_dir, &pci, Duration::ZERO) else {
            continue;
        };
        if reclaim_if_stale(plugin, ctx, &pci)?.is_some() {
            continue;
        }
        match find_vf(&ctx.sysfs, &pci) {
            Ok(vf) => {
                log::info!("pf {pf}: picked free VF {index} ({pci})");
                return Ok((vf, lock));
            }
            Err(e) => log::info!("pf {pf}: skipping VF {index} ({pci}): {e}"),
        }
    }
    Err(PluginError::NoFreeVf { pf: pf.to_string() })
}

/// Which RDMA device goes with the VF, and whether it moves. Checked
/// before anything changes.
fn plan_rdma(
    plugin: &RdmaSriov,
    allow_shared: bool,
    vf: &VfDevice,
    host: &NetNs,
) -> Result<RdmaAttachment, PluginError> {
    let mode = plugin.backends.rdma.netns_mode()?;
    if mode == RdmaNetnsMode::Shared && !allow_shared {
        return Err(PluginError::SharedMode);
    }
    let device = match &vf.rdma_device {
        Some(device) => device.clone(),
        None => {
            // Auxiliary-bus (SF) and soft-RoCE devices are not under the
            // PCI device in sysfs: find the one bound to the netdev.
            let netdev = vf.netdev.clone().unwrap_or_default();
            plugin
                .backends
                .rdma
                .devices(host)?
                .into_iter()
                .find(|d| d.is_bound_to(&netdev))
                .map(|d| d.name)
                .ok_or_else(|| PluginError::NoRdmaDevice {
                    pci: vf.pci.clone(),
                    netdev,
                })?
        }
    };
    Ok(RdmaAttachment {
        device,
        move_with_pod: mode == RdmaNetnsMode::Exclusive,
        in_pod: false,
    })
}

/// Applies one PF-side setting; a MAC is read back until the PF shows it.
fn apply_vf_setting(
    plugin: &RdmaSriov,
    vf: &VfDevice,
    setting: &VfSetting,
) -> Result<(), PluginError> {
    let pf = &plugin.backends.pf;
    pf.set_vf(&vf.pf_name, vf.vf_index, setting)?;
    if let VfSetting::Mac { mac } = setting {
        let mut reported = MacAddr::ZERO;
        for attempt in 0..MAC_VERIFY_ATTEMPTS {
            reported = pf.vf_state(&vf.pf_name, vf.vf_index)?.admin_mac;
            if reported == *mac {
                return Ok(());
            }
            if attempt + 1 < MAC_VERIFY_ATTEMPTS {
                thread::sleep(MAC_VERIFY_PAUSE);
            }
        }
        return Err(PluginError::MacNotApplied {
            pf: vf.pf_name.clone(),
            vf: vf.vf_index,
            mac: mac.to_string(),
            reported: reported.to_string(),
        });
    }
    Ok(())
}

/// Everything ADD changes, each step recorded in `state` first.
#[allow(clippy::too_many_arguments)]
fn setup(
    plugin: &RdmaSriov,
    ctx: &Context,
    conf: &NetConf,
    args: &CmdArgs,
    vf: &VfDevice,
    pod: &NetNs,
    host: &NetNs,
    state: &mut AttachmentState,
) -> Result<v100::Result, PluginError> {
    for setting in conf.vf_settings() {
        state.applied.push(setting.clone());
        ctx.store.save(state)?;
        apply_vf_setting(plugin, vf, &setting)?;
        log::debug!("{} vf {}: {setting}", vf.pf_name, vf.vf_index);
    }

    // The RDMA device moves before its netdev: a device that cannot move
    // is then refused with its own error before the netdev is touched, and
    // a soft-RoCE device (unregistered by the kernel when its netdev
    // leaves) is still there to be refused.
    if let Some(rdma) = state.rdma.clone().filter(|r| r.move_with_pod) {
        if let Some(r) = state.rdma.as_mut() {
            r.in_pod = true;
        }
        ctx.store.save(state)?;
        plugin
            .backends
            .rdma
            .move_device(&rdma.device, host, pod)
            .map_err(|source| {
                if source.errno() == Some(Errno::EOPNOTSUPP) {
                    PluginError::RdmaMoveUnsupported {
                        device: rdma.device.clone(),
                        driver: ctx
                            .sysfs
                            .rdma_driver(&rdma.device)
                            .unwrap_or_else(|| "(unknown driver)".to_string()),
                    }
                } else {
                    PluginError::RdmaMove {
                        device: rdma.device.clone(),
                        netns: args.netns.clone(),
                        source,
                    }
                }
            })?;
        log::info!("RDMA device {} moved to {}", rdma.device, args.netns);
    }

    let mut pod_link: Option<(RouteSocket, LinkInfo)> = None;
    if let Some(netdev_name) = &vf.netdev {
        let mut host_socket = RouteSocket::open_current()?;
        let link = netdev::find_in_host(&mut host_socket, &ctx.sysfs, &vf.pci, &[])?
            .ok_or_else(|| NetdevError::NotInHost(netdev_name.clone()))?;
        let host_name = link.name.clone();
        state.host_netdev = Some(netdev::host_netdev(&link));
        let temp = netdev::temp_name()?;
        state.netdev_location = Some(NetdevLocation::Host { name: temp.clone() });
        ctx.store.save(state)?;
        netdev::rename_down(&mut host_socket, link.index, &temp)?;
        state.netdev_location = Some(NetdevLocation::Pod { name: temp.clone() });
        ctx.store.save(state)?;
        netdev::move_link(&mut host_socket, link.index, pod.as_fd(), &args.netns)?;
        let mut pod_socket = RouteSocket::open_in(pod)?;
        let index = netdev::rename_in_pod(&mut pod_socket, &temp, &args.ifname)?;
        state.netdev_location = Some(NetdevLocation::Pod {
            name: args.ifname.clone(),
        });
        ctx.store.save(state)?;
        let link =
            netdev::configure_in_pod(&mut pod_socket, index, &args.ifname, conf.mac, conf.mtu)?;
        // Before the rail has an address to answer ARP for.
        if conf.rail.is_some() {
            rail::set_sysctls(pod, &args.ifname)?;
        }
        log::info!(
            "VF {} netdev {host_name} is {} in {}",
            vf.pci,
            args.ifname,
            args.netns
        );
        pod_link = Some((pod_socket, link));
    }

    // What the pod got, for the runtime to publish; IPAM has no part in it.
    // Recorded only when created: DEL removes no file it did not make.
    if let Some(path) = &conf.device_info_file {
        let info = PciDeviceInfo {
            pci_address: vf.pci.clone(),
            pf_pci_address: Some(vf.pf_pci.clone()),
            rdma_device: state.rdma.as_ref().map(|r| r.device.clone()),
            ..PciDeviceInfo::default()
        };
        if device_info::write_pci(path, &info)? == Written::Created {
            state.device_info_file = Some(path.clone());
            ctx.store.save(state)?;
        }
        log::info!("device-info written to {}", path.display());
    }

    let mut result = v100::Result::new();
    if let Some(ipam) = ipam_type(&args.conf) {
        state.ipam_allocated = true;
        ctx.store.save(state)?;
        let ipam_result = match plugin.delegator(&plugin.env).add(&ipam, args.conf.bytes()) {
            Ok(r) => r,
            Err(e) => {
                // A failed IPAM ADD cleans up after itself (host-local
                // releases what it reserved); nothing is owed.
                state.ipam_allocated = false;
                return Err(e.into());
            }
        };
        let ipam_result = v100::Result::try_from(ipam_result)?;
        if ipam_result.ips.is_empty() {
            return Err(PluginError::IpamNoIps);
        }
        result.ips = ipam_result
            .ips
            .into_iter()
            .map(|mut ip| {
                ip.interface = Some(0);
                ip
            })
            .collect();
        result.routes = ipam_result.routes;
        result.dns = ipam_result.dns;
    }

    let (mac, mtu) = match &mut pod_link {
        Some((socket, link)) => {
            // The link is up already (netdev::configure_in_pod); the
            // IPs are all this interface's (interface 0, set above).
            let ips: Vec<&v100::IpConfig> = result.ips.iter().collect();
            iface::add_addresses(socket, link.index, &args.ifname, &ips)?;
            iface::add_routes(socket, link.index, &args.ifname, &result.routes, &ips)?;
            (link.mac_string(), link.mtu)
        }
        // No netdev: the administrative MAC is the VF's address.
        None => {
            let admin = conf.mac.unwrap_or(state.original_vf.admin_mac);
            let text = if admin.is_zero() {
                String::new()
            } else {
                admin.to_string()
            };
            (text, 0)
        }
    };
    if let (Some(rail_conf), Some((socket, link))) = (&conf.rail, pod_link.as_mut()) {
        let _lock = rail::lock_pod(pod, plugin.knobs.lock_timeout)?;
        let record = RailRecord {
            table: rail::pick_table(socket, rail_conf)?,
            sources: rail::sources(&result),
        };
        state.rail = Some(record.clone());
        ctx.store.save(state)?;
        rail::add_routing(socket, link, &record)?;
    }

    result.interfaces.push(v100::Interface {
        name: args.ifname.clone(),
        mac: mac.clone(),
        mtu,
        sandbox: args.netns.clone(),
        pci_id: vf.pci.clone(),
        ..v100::Interface::default()
    });

    state.pod_mac = mac.parse().ok();
    state.addresses = result.ips.iter().map(|ip| ip.address).collect();
    state.complete = true;
    ctx.store.save(state)?;
    ctx.allocs.write(
        &vf.pci,
        &AllocationRecord {
            netns: args.netns.clone(),
            network: args.conf.name.clone(),
            container_id: args.container_id.clone(),
            ifname: args.ifname.clone(),
        },
    )?;
    Ok(result)
}
