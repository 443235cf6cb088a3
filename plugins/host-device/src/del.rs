//! DEL: the device (and its RDMA devices) back to the host as it was, the
//! address released, the device-info file removed if ADD made it.
//!
//! Where the device is at DEL:
//!
//! - in the pod as `CNI_IFNAME`: moved back and restored;
//! - the pod's namespace is gone (or `CNI_NETNS` is empty, containerd's
//!   second DEL, and the one ADD recorded is gone): a physical device was
//!   returned to the initial namespace by the kernel under its pod name,
//!   alias kept, and is found by that alias and restored. A virtual
//!   device (veth, macvlan) was destroyed with the namespace: nothing is
//!   left to restore. RDMA devices return by themselves.
//! - in neither: already back (a second DEL), nothing to do;
//! - back in the host under a temporary name (a DEL that stopped
//!   halfway): found by its alias too.
//!
//! Unlike the reference, DEL does not resolve `deviceID`/`pciBusID` (a
//! device plugin's device may be gone by then), treats a vanished
//! namespace as "find the device elsewhere" rather than an error, and runs
//! IPAM DEL in every case, so no address leaks. Each part is tried; the
//! first failure is returned, and the state is kept until the device part
//! succeeds so DEL can be run again.

use std::thread;
use std::time::{Duration, Instant};

use libcni::netlink::{LinkIdentity, RouteSocket};
use libcni::netns::{NetNs, NetNsError};
use libcni::skel::CmdArgs;

use crate::config::{NetConf, Selector};
use crate::error::HostDeviceError;
use crate::lookup::find_host_link;
use crate::plugin::{lock_device, store, HostDevice};
use crate::rdma;
use crate::state::{AttachmentState, DeviceInfoChange, SavedLink, StateStore};
use crate::transfer::{move_out_of_pod, restore_in_host, Sides};

/// How long DEL waits for a physical device to come back from a deleted
/// namespace, and how often it looks.
const RETURN_WAIT: Duration = Duration::from_secs(5);
const RETURN_POLL: Duration = Duration::from_millis(100);

pub fn del(plugin: &HostDevice, args: &CmdArgs) -> Result<(), HostDeviceError> {
    let conf = NetConf::load_lenient(&args.conf)?;
    let store = store(&conf, args);
    let state = store.load(&args.container_id, &args.ifname);
    let netns = match (&state, args.netns.is_empty()) {
        (Some(state), true) => state.netns.clone(),
        _ => args.netns.clone(),
    };
    let mut first_error = None;
    let dpdk = state
        .as_ref()
        .map_or_else(|| plugin.dpdk_mode(&conf), |s| s.dpdk);
    let device = if dpdk {
        Ok(())
    } else {
        return_device(plugin, &conf, &args.ifname, &netns, state.as_ref())
    };
    let device_done = device.is_ok();
    if let Err(e) = device {
        // Reported by the skeleton as DEL's error.
        first_error = Some(e);
    }
    if let Some(ipam) = &conf.ipam_type {
        if let Err(source) = plugin.delegator(args).del(ipam, args.conf.bytes()) {
            let e = HostDeviceError::Ipam {
                action: "IPAM DEL",
                plugin: ipam.clone(),
                source,
            };
            // Only the first error is returned (and logged by the
            // skeleton); a second one is logged here, once.
            match first_error {
                Some(_) => log::warn!("DEL of {} (besides the error returned): {e}", args.ifname),
                None => first_error = Some(e),
            }
        }
    }
    if device_done {
        if let Err(e) = forget(&store, &args.container_id, &args.ifname, state.as_ref()) {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// GC's part for an attachment the runtime no longer lists: DEL without
/// IPAM (IPAM GC releases the address).
pub fn release_attachment(
    plugin: &HostDevice,
    conf: &NetConf,
    store: &StateStore,
    state: &AttachmentState,
) -> Result<(), HostDeviceError> {
    if !state.dpdk {
        return_device(plugin, conf, &state.ifname, &state.netns, Some(state))?;
    }
    forget(store, &state.container_id, &state.ifname, Some(state))
}

/// Removes the device-info file if ADD made it, then the state.
fn forget(
    store: &StateStore,
    container_id: &str,
    ifname: &str,
    state: Option<&AttachmentState>,
) -> Result<(), HostDeviceError> {
    if let Some(state) = state {
        if let (Some(DeviceInfoChange::Created), Some(path)) =
            (&state.device_info, &state.device_info_file)
        {
            libcni::device_info::remove(path)?;
        }
    }
    store.remove(container_id, ifname)?;
    Ok(())
}

/// Brings the attachment's device back to the host, wherever it is.
fn return_device(
    plugin: &HostDevice,
    conf: &NetConf,
    ifname: &str,
    netns_path: &str,
    state: Option<&AttachmentState>,
) -> Result<(), HostDeviceError> {
    let host_ns = NetNs::current_thread().map_err(|source| HostDeviceError::NetNs {
        path: "the plugin's own".into(),
        source,
    })?;
    let mut host = RouteSocket::open_current()?;
    let pod_ns = if netns_path.is_empty() {
        None
    } else {
        match NetNs::open(netns_path) {
            Ok(ns) => Some(ns),
            Err(e @ (NetNsError::NotExist { .. } | NetNsError::NotNetNs { .. })) => {
                log::info!("{e}: looking for the device in the host");
                None
            }
            Err(source) => {
                return Err(HostDeviceError::NetNs {
                    path: netns_path.to_string(),
                    source,
                })
            }
        }
    };
    if let Some(pod_ns) = &pod_ns {
        let mut pod = RouteSocket::open_in(pod_ns)?;
        if let Some(pod_link) = pod.link_by_name(ifname)? {
            let saved = match state.and_then(|s| s.host_link.clone()) {
                Some(saved) => saved,
                None => {
                    let alias = pod
                        .link_identity(pod_link.index)?
                        .and_then(|identity| identity.alias)
                        .ok_or_else(|| HostDeviceError::NoOriginalName(ifname.to_string()))?;
                    saved_from_alias(alias, pod_link.index)
                }
            };
            let _lock = lock_device(conf, &saved.name)?;
            let recorded = state.map(|s| s.rdma_devices.as_slice()).unwrap_or(&[]);
            let rdma = rdma::devices_to_return(plugin.rdma.as_ref(), pod_ns, ifname, recorded)
                .and_then(|devices| {
                    rdma::move_all(
                        plugin.rdma.as_ref(),
                        &devices,
                        pod_ns,
                        &host_ns,
                        ifname,
                        "move back to the host",
                    )
                });
            let mut sides = Sides {
                host: &mut host,
                host_ns: &host_ns,
                pod: &mut pod,
                pod_ns,
            };
            move_out_of_pod(&mut sides, &pod_link, &saved).map_err(|source| {
                HostDeviceError::Restore {
                    ifname: ifname.to_string(),
                    source,
                }
            })?;
            log::info!("{ifname} is back in the host as {}", saved.name);
            return rdma;
        }
    }
    restore_leftover(plugin, &mut host, conf, ifname, state, pod_ns.is_none())
}

/// What DEL knows of a device ADD recorded nothing about: the reference
/// left the host name in the alias, and the device is left down, as the
/// reference leaves it.
fn saved_from_alias(alias: String, index: u32) -> SavedLink {
    SavedLink {
        name: alias,
        index,
        mac: String::new(),
        mtu: 0,
        up: false,
        alias: None,
        returns_to_host: false,
    }
}

/// The device is not in the pod: restores it if it is in the host still
/// carrying its alias (returned by the kernel, or left by a DEL that
/// stopped halfway).
///
/// The kernel destroys a namespace some time after its last reference
/// goes (a work queue), so a DEL right after the runtime deleted the pod's
/// namespace can come before a physical device is back. When the state
/// says the device returns by itself, DEL waits for it a little, and then
/// fails with "try again later" keeping the state: a process or mount
/// still holding the namespace keeps the device away, and the runtime's
/// next DEL (or GC) finishes the job.
fn restore_leftover(
    plugin: &HostDevice,
    host: &mut RouteSocket,
    conf: &NetConf,
    ifname: &str,
    state: Option<&AttachmentState>,
    netns_gone: bool,
) -> Result<(), HostDeviceError> {
    let saved = state.and_then(|s| s.host_link.as_ref());
    let deadline = Instant::now() + RETURN_WAIT;
    let found = loop {
        let links = host.list_link_identities()?;
        let found = match saved {
            Some(saved) => links
                .iter()
                .filter(|l| l.alias.as_deref() == Some(saved.name.as_str()))
                // The kernel keeps the index when it can.
                .min_by_key(|l| l.index != saved.index)
                .map(|l| (l.index, saved.clone())),
            None => leftover_by_selector(plugin, host, conf, &links)
                .and_then(|l| Some((l.index, saved_from_alias(l.alias?, l.index)))),
        };
        let expected = netns_gone && saved.is_some_and(|s| s.returns_to_host);
        if found.is_some() || !expected {
            break found;
        }
        if Instant::now() >= deadline {
            let name = saved.map(|s| s.name.clone()).unwrap_or_default();
            return Err(HostDeviceError::NotBackYet {
                ifname: ifname.to_string(),
                name,
                seconds: RETURN_WAIT.as_secs(),
            });
        }
        thread::sleep(RETURN_POLL);
    };
    let Some((index, saved)) = found else {
        log::info!(
            "{ifname} is neither in the container nor in the host: already returned, or a \
             virtual device destroyed with its namespace"
        );
        return Ok(());
    };
    let _lock = lock_device(conf, &saved.name)?;
    log::info!(
        "{ifname} is back in the host (link #{index}): restoring it as {}",
        saved.name
    );
    restore_in_host(host, index, &saved).map_err(|source| HostDeviceError::Restore {
        ifname: ifname.to_string(),
        source,
    })
}

/// Without state: the host link the selector names that carries an alias.
fn leftover_by_selector(
    plugin: &HostDevice,
    host: &mut RouteSocket,
    conf: &NetConf,
    links: &[LinkIdentity],
) -> Option<LinkIdentity> {
    match conf.selector.as_ref()? {
        Selector::Name(name) => links
            .iter()
            .find(|l| l.alias.as_deref() == Some(name.as_str()))
            .cloned(),
        other => match find_host_link(host, &plugin.sysfs, other) {
            Ok(link) => links
                .iter()
                .find(|l| l.index == link.index && l.alias.is_some())
                .cloned(),
            Err(e) => {
                log::debug!("no leftover device: {e}");
                None
            }
        },
    }
}
