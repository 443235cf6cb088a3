//! Undoing an attachment as its state record describes it: what DEL, GC,
//! the reclaim of a dead pod's VF and a failed ADD all run.
//!
//! Every step runs even when an earlier one failed; a step that succeeds
//! is cleared from the record, so a later attempt retries only the rest.
//! Failures come back as an [`ErrorList`], each with its own spec code.

use std::os::fd::AsFd;

use libcni::device_info;
use libcni::error::ErrorList;
use libcni::invoke::PluginEnv;
use libcni::netlink::rdma::RdmaError;
use libcni::netlink::RouteSocket;
use libcni::netns::{NetNs, NetNsError};

use crate::alloc::{netns_alive, AllocationRecord};
use crate::error::PluginError;
use crate::netdev;
use crate::pf::VfSetting;
use crate::plugin::{ipam_type_of_value, Context, RdmaSriov};
use crate::rail;
use crate::state::{AttachmentState, NetdevLocation};

/// How a teardown releases the IPAM allocation.
pub(crate) struct IpamRelease<'a> {
    pub plugin: String,
    pub netconf: Vec<u8>,
    pub env: &'a PluginEnv,
}

impl<'a> IpamRelease<'a> {
    /// The IPAM of the configuration ADD recorded (GC and reclaim have no
    /// other).
    pub fn recorded(state: &AttachmentState, env: &'a PluginEnv) -> Option<IpamRelease<'a>> {
        ipam_type_of_value(&state.netconf).map(|plugin| IpamRelease {
            plugin,
            netconf: serde_json::to_vec(&state.netconf).unwrap_or_default(),
            env,
        })
    }
}

/// Undoes what `state` records, in the reverse order of ADD.
pub(crate) fn teardown(
    plugin: &RdmaSriov,
    ctx: &Context,
    state: &mut AttachmentState,
    ipam: Option<IpamRelease<'_>>,
) -> ErrorList {
    let mut problems = ErrorList::new();
    let host = match NetNs::current_thread() {
        Ok(host) => host,
        Err(e) => {
            problems.push(&PluginError::NetNs(e));
            return problems;
        }
    };
    let pod = match NetNs::open(&state.netns) {
        Ok(pod) => Some(pod),
        // Gone (or only an unmounted file left): the kernel has already
        // returned physical netdevs and RDMA devices to the host.
        Err(e @ (NetNsError::NotExist { .. } | NetNsError::NotNetNs { .. })) => {
            log::info!("pod netns is gone ({e}); releasing from the host side");
            None
        }
        Err(e) => {
            problems.push(&PluginError::NetNs(e));
            None
        }
    };

    if let Some(record) = state.rail.clone() {
        match &pod {
            Some(pod) => {
                let ifname = match &state.netdev_location {
                    Some(NetdevLocation::Pod { name }) => Some(name.as_str()),
                    Some(NetdevLocation::Host { .. }) | None => None,
                };
                match rail::remove_routing(pod, ifname, &record, plugin.knobs.lock_timeout) {
                    Ok(()) => state.rail = None,
                    Err(list) => problems.append_in("rail routing", list),
                }
            }
            // Its rules and table went with the namespace.
            None => state.rail = None,
        }
    }

    if let Some(path) = state.device_info_file.clone() {
        match device_info::remove(&path) {
            Ok(()) => state.device_info_file = None,
            Err(e) => problems.push(&PluginError::DeviceInfo(e)),
        }
    }

    if state.ipam_allocated {
        match ipam {
            Some(release) => match plugin
                .delegator(release.env)
                .del(&release.plugin, &release.netconf)
            {
                Ok(()) => state.ipam_allocated = false,
                Err(e) => problems.push_in("IPAM DEL", &PluginError::Ipam(e)),
            },
            None => state.ipam_allocated = false,
        }
    }

    if let Some(location) = state.netdev_location.clone() {
        match return_netdev(ctx, state, &location, pod.as_ref(), &host) {
            Ok(()) => state.netdev_location = None,
            Err(e) => problems.push_in("VF netdev", &e),
        }
    }

    if let Some(rdma) = state.rdma.as_mut().filter(|r| r.in_pod) {
        let rdma_ops = &plugin.backends.rdma;
        match &pod {
            Some(pod) => match rdma_ops.devices(pod) {
                Ok(devices) if devices.iter().any(|d| d.name == rdma.device) => {
                    match rdma_ops.move_device(&rdma.device, pod, &host) {
                        Ok(()) => {
                            log::info!("RDMA device {} back in the host", rdma.device);
                            rdma.in_pod = false;
                        }
                        Err(e) => problems.push_in(
                            format!(
                                "failed to restore RDMA device {} to the host netns",
                                rdma.device
                            ),
                            &PluginError::Rdma(e),
                        ),
                    }
                }
                // Never got there, or already back.
                Ok(_) => rdma.in_pod = false,
                // ib_core gone since ADD: there is no device to move.
                Err(e @ RdmaError::Unavailable { .. }) => {
                    log::warn!("RDMA device {} not restored: {e}", rdma.device);
                    rdma.in_pod = false;
                }
                Err(e) => problems.push_in("RDMA devices of the pod netns", &PluginError::Rdma(e)),
            },
            None => rdma.in_pod = false,
        }
    }

    let mut restored: Vec<&VfSetting> = Vec::new();
    let mut pf_failed = false;
    for setting in state.applied.iter().rev() {
        if restored.iter().any(|s| s.same_kind(setting)) {
            continue;
        }
        restored.push(setting);
        match setting.restore_from(&state.original_vf) {
            Some(original) => {
                if let Err(e) = plugin
                    .backends
                    .pf
                    .set_vf(&state.pf, state.vf_index, &original)
                {
                    pf_failed = true;
                    problems.push_in(format!("restore {original}"), &PluginError::Pf(e));
                }
            }
            None => log::warn!(
                "{} vf {}: cannot restore {setting}: the PF never reported its original value",
                state.pf,
                state.vf_index
            ),
        }
    }
    if !pf_failed {
        state.applied.clear();
    }

    match ctx.allocs.read(&state.pci) {
        Ok(Some(record))
            if record.is_owned_by(&state.network, &state.container_id, &state.ifname) =>
        {
            if let Err(e) = ctx.allocs.remove(&state.pci) {
                problems.push(&PluginError::Alloc(e));
            }
        }
        Ok(_) => {}
        Err(e) => problems.push(&PluginError::Alloc(e)),
    }
    problems
}

/// Brings the VF netdev back to the host as it was.
fn return_netdev(
    ctx: &Context,
    state: &AttachmentState,
    location: &NetdevLocation,
    pod: Option<&NetNs>,
    host: &NetNs,
) -> Result<(), PluginError> {
    let Some(original) = &state.host_netdev else {
        return Ok(());
    };
    let mut hints: Vec<String> = Vec::new();
    match location {
        NetdevLocation::Pod { name } => {
            if let Some(pod) = pod {
                let mut pod_socket = RouteSocket::open_in(pod)?;
                if let Some(temp) = netdev::send_back_from_pod(&mut pod_socket, name, host.as_fd())?
                {
                    hints.push(temp);
                }
            }
        }
        NetdevLocation::Host { name } => hints.push(name.clone()),
    }
    let hint_refs: Vec<&str> = hints.iter().map(String::as_str).collect();
    let mut host_socket = RouteSocket::open_current()?;
    match netdev::find_in_host(&mut host_socket, &ctx.sysfs, &state.pci, &hint_refs)? {
        Some(link) => {
            netdev::restore_in_host(&mut host_socket, &link, original)?;
            log::info!(
                "VF {} netdev back in the host as {}",
                state.pci,
                original.name
            );
        }
        // Unbound or being rebound: nothing is left to give back.
        None => log::warn!(
            "VF {} netdev not found in the host or the pod; it was not restored",
            state.pci
        ),
    }
    Ok(())
}

/// The live holder of VF `pci`, if any. A holder whose netns is gone is
/// stale: its attachment is torn down (the VF gets back its name, MAC, MTU
/// and PF-side settings of before that pod, and the address is released)
/// and its record dropped. Call with the VF locked.
pub(crate) fn reclaim_if_stale(
    plugin: &RdmaSriov,
    ctx: &Context,
    pci: &str,
) -> Result<Option<AllocationRecord>, PluginError> {
    let Some(record) = ctx.allocs.read(pci)? else {
        return Ok(None);
    };
    if netns_alive(&record.netns) {
        return Ok(Some(record));
    }
    log::info!(
        "VF {pci}: reclaiming it from {}, whose netns is gone",
        record.describe()
    );
    if !record.container_id.is_empty() {
        if let Some(mut stale) =
            ctx.store
                .load(&record.network, &record.container_id, &record.ifname)?
        {
            let env = plugin.attachment_env(&stale);
            let release = IpamRelease::recorded(&stale, &env);
            let problems = teardown(plugin, ctx, &mut stale, release);
            if !problems.is_empty() {
                // Kept for a later DEL or GC to finish the job.
                ctx.store.save(&stale)?;
                return Err(PluginError::Teardown(problems));
            }
            ctx.store
                .remove(&stale.network, &stale.container_id, &stale.ifname)?;
        }
    }
    ctx.allocs.remove(pci)?;
    Ok(None)
}
