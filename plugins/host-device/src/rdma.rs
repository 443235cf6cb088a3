//! The RDMA devices that go with the netdev.
//!
//! In the RDMA subsystem's shared mode (the default) every namespace sees
//! every RDMA device, so nothing moves. In exclusive mode a device lives in
//! one namespace, and a pod given a netdev without its RDMA device could
//! not use RDMA on it: ADD moves the device's RDMA devices into the pod
//! and DEL brings them back. When the pod's namespace is destroyed the
//! kernel returns them to the initial namespace by itself.
//!
//! Which RDMA devices: those sysfs lists under the netdev's bus device
//! (PCI function or auxiliary device), and those whose port RDMA netlink
//! reports bound to the netdev. Soft-RoCE and soft-iWARP devices cannot
//! change namespace (their drivers lack what the kernel needs for it) and
//! are left alone.
//!
//! A kernel without RDMA, a netdev without RDMA devices: nothing to do,
//! and no error.

use libcni::device::Sysfs;
use libcni::netlink::rdma::{RdmaError, RdmaNetnsMode, RdmaOps};
use libcni::netns::NetNs;

use crate::error::HostDeviceError;

/// Kernel drivers of RDMA devices that cannot change namespace.
const UNMOVABLE_DRIVERS: [&str; 2] = ["rdma_rxe", "siw"];

/// The subsystem's mode, `None` when the kernel has no RDMA.
fn mode(ops: &dyn RdmaOps) -> Result<Option<RdmaNetnsMode>, RdmaError> {
    match ops.netns_mode() {
        Ok(mode) => Ok(Some(mode)),
        Err(RdmaError::Unavailable { reason }) => {
            log::debug!("no RDMA subsystem ({reason}): no RDMA device to move");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// ADD, before the netdev moves: the RDMA devices to move with host
/// netdev `netdev`.
pub fn devices_to_move(
    ops: &dyn RdmaOps,
    sysfs: &Sysfs,
    host_ns: &NetNs,
    netdev: &str,
) -> Result<Vec<String>, HostDeviceError> {
    let listed = sysfs.rdma_devices_of_netdev(netdev).unwrap_or_else(|e| {
        log::warn!("cannot list the RDMA devices of {netdev} in sysfs: {e}");
        Vec::new()
    });
    let failed = |source| HostDeviceError::RdmaMode {
        netdev: netdev.to_string(),
        source,
    };
    let mode = match mode(ops) {
        Ok(Some(mode)) => mode,
        Ok(None) => return Ok(Vec::new()),
        // Without an RDMA device in sysfs, a failing query is no reason to
        // refuse a plain netdev.
        Err(e) if listed.is_empty() => {
            log::info!("cannot read the RDMA netns mode ({e}); {netdev} lists no RDMA device");
            return Ok(Vec::new());
        }
        Err(e) => return Err(failed(e)),
    };
    if mode == RdmaNetnsMode::Shared {
        if !listed.is_empty() {
            log::info!(
                "RDMA netns mode is shared: {} stay visible to every namespace",
                libcni::logging::joined(&listed)
            );
        }
        return Ok(Vec::new());
    }
    let mut devices = listed;
    match ops.devices(host_ns) {
        Ok(visible) => {
            for device in visible.into_iter().filter(|d| d.is_bound_to(netdev)) {
                if !devices.contains(&device.name) {
                    devices.push(device.name);
                }
            }
        }
        Err(e) if devices.is_empty() => {
            log::info!("cannot list RDMA devices ({e}); {netdev} lists none in sysfs");
        }
        Err(e) => return Err(failed(e)),
    }
    devices.retain(|device| match sysfs.rdma_driver(device) {
        Some(driver) if UNMOVABLE_DRIVERS.contains(&driver.as_str()) => {
            // A warning: in exclusive mode the pod gets the netdev without
            // the RDMA device an operator may expect to follow it.
            log::warn!(
                "RDMA device {device} ({driver}) cannot change namespace: not moved with \
                 {netdev} (the kernel unregisters it when its netdev leaves)"
            );
            false
        }
        _ => true,
    });
    Ok(devices)
}

/// DEL, before the netdev moves back: the RDMA devices in the pod that go
/// back with `ifname`: those bound to it and those ADD recorded.
pub fn devices_to_return(
    ops: &dyn RdmaOps,
    pod_ns: &NetNs,
    ifname: &str,
    recorded: &[String],
) -> Result<Vec<String>, HostDeviceError> {
    let failed = |source| HostDeviceError::RdmaMode {
        netdev: ifname.to_string(),
        source,
    };
    match mode(ops) {
        Ok(Some(RdmaNetnsMode::Exclusive)) => {}
        Ok(Some(RdmaNetnsMode::Shared) | None) => return Ok(Vec::new()),
        Err(e) if recorded.is_empty() => {
            log::info!("cannot read the RDMA netns mode ({e}); no RDMA device recorded");
            return Ok(Vec::new());
        }
        Err(e) => return Err(failed(e)),
    }
    let visible = match ops.devices(pod_ns) {
        Ok(visible) => visible,
        Err(e) if recorded.is_empty() => {
            log::info!("cannot list the container's RDMA devices ({e}); none recorded");
            return Ok(Vec::new());
        }
        Err(e) => return Err(failed(e)),
    };
    Ok(visible
        .into_iter()
        .filter(|d| d.is_bound_to(ifname) || recorded.contains(&d.name))
        .map(|d| d.name)
        .collect())
}

/// Moves the RDMA devices from one namespace to the other; on a failure
/// those already moved go back, and the error names the device.
pub fn move_all(
    ops: &dyn RdmaOps,
    devices: &[String],
    from: &NetNs,
    to: &NetNs,
    netdev: &str,
    step: &'static str,
) -> Result<(), HostDeviceError> {
    for (i, device) in devices.iter().enumerate() {
        if let Err(source) = ops.move_device(device, from, to) {
            for moved in devices[..i].iter().rev() {
                if let Err(e) = ops.move_device(moved, to, from) {
                    log::warn!("cannot move RDMA device {moved} back: {e}");
                }
            }
            return Err(HostDeviceError::Rdma {
                device: device.clone(),
                netdev: netdev.to_string(),
                step,
                source,
            });
        }
    }
    Ok(())
}

/// CHECK: the recorded RDMA devices are in the pod (exclusive mode).
pub fn check_in_pod(
    ops: &dyn RdmaOps,
    pod_ns: &NetNs,
    ifname: &str,
    recorded: &[String],
) -> Result<(), HostDeviceError> {
    if recorded.is_empty() {
        return Ok(());
    }
    let failed = |source| HostDeviceError::RdmaMode {
        netdev: ifname.to_string(),
        source,
    };
    if mode(ops).map_err(failed)? != Some(RdmaNetnsMode::Exclusive) {
        return Ok(());
    }
    let visible = ops.devices(pod_ns).map_err(failed)?;
    for device in recorded {
        if !visible.iter().any(|d| &d.name == device) {
            return Err(HostDeviceError::RdmaMissing {
                device: device.clone(),
                ifname: ifname.to_string(),
            });
        }
    }
    Ok(())
}
