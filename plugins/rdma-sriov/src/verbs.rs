//! RDMA port state through libibverbs, queried from inside a namespace.
//!
//! CHECK asks whether the pod can use its RDMA device: the device must open
//! through the verbs library from the pod's namespace and its port must be
//! ACTIVE. [`PortQuery`] is the seam; [`VerbsPortQuery`] is the libibverbs
//! implementation (through `rdma-sys`), the tests' `fake::FakeBackend` the
//! stand-in.

use std::ffi::CStr;
use std::fmt;

use libcni::netns::{NetNs, NetNsError};
use serde::{Deserialize, Serialize};

/// `enum ibv_port_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PortState {
    Nop,
    Down,
    Init,
    Armed,
    #[default]
    Active,
    ActiveDefer,
    #[serde(untagged)]
    Other(u32),
}

impl PortState {
    pub fn from_raw(value: u32) -> PortState {
        match value {
            0 => PortState::Nop,
            1 => PortState::Down,
            2 => PortState::Init,
            3 => PortState::Armed,
            4 => PortState::Active,
            5 => PortState::ActiveDefer,
            other => PortState::Other(other),
        }
    }
}

impl fmt::Display for PortState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortState::Nop => f.write_str("NOP"),
            PortState::Down => f.write_str("DOWN"),
            PortState::Init => f.write_str("INIT"),
            PortState::Armed => f.write_str("ARMED"),
            PortState::Active => f.write_str("ACTIVE"),
            PortState::ActiveDefer => f.write_str("ACTIVE_DEFER"),
            PortState::Other(n) => write!(f, "state {n}"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum VerbsError {
    #[error("libibverbs cannot list RDMA devices: {0}")]
    DeviceList(std::io::Error),
    #[error("RDMA device {device} not visible to libibverbs in netns {netns:?} (devices seen: {seen:?})")]
    DeviceNotFound {
        device: String,
        netns: String,
        seen: Vec<String>,
    },
    #[error("libibverbs cannot open RDMA device {device}: {source}")]
    Open {
        device: String,
        source: std::io::Error,
    },
    #[error("libibverbs cannot query port {port} of RDMA device {device}: {source}")]
    QueryPort {
        device: String,
        port: u8,
        source: std::io::Error,
    },
    #[error(transparent)]
    NetNs(#[from] NetNsError),
    /// A failure of an implementation other than the kernel's (the
    /// simulated hardware of the tests).
    #[error("{0}")]
    Backend(String),
}

/// Port state queries.
pub trait PortQuery: Send + Sync {
    /// The state of `port` (1-based) of `device`, as seen from `netns`.
    fn port_state(&self, netns: &NetNs, device: &str, port: u8) -> Result<PortState, VerbsError>;
}

/// [`PortQuery`] through libibverbs.
#[derive(Debug, Default, Clone, Copy)]
pub struct VerbsPortQuery;

impl PortQuery for VerbsPortQuery {
    fn port_state(&self, netns: &NetNs, device: &str, port: u8) -> Result<PortState, VerbsError> {
        let netns_path = netns.path().display().to_string();
        netns.run(|| {
            // libibverbs finds devices over RDMA netlink (which follows the
            // thread's netns) but reads their attributes from /sys, whose
            // view of namespaced classes follows the netns of the mount.
            // A private mount of sysfs made from inside the namespace gives
            // the pod's view, as `ip netns exec` does; this thread is
            // discarded afterwards. Without the privileges for it the query
            // goes on with the inherited /sys, which is right in shared mode.
            if let Err(e) = remount_sysfs_for_current_netns() {
                log::debug!("verbs query keeps the inherited /sys: {e}");
            }
            query_port_state(device, port, &netns_path)
        })?
    }
}

/// Gives the calling thread its own mount namespace with a sysfs instance
/// that belongs to the thread's network namespace.
fn remount_sysfs_for_current_netns() -> nix::Result<()> {
    use nix::mount::{mount, umount2, MntFlags, MsFlags};
    use nix::sched::{unshare, CloneFlags};
    unshare(CloneFlags::CLONE_NEWNS)?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_SLAVE | MsFlags::MS_REC,
        None::<&str>,
    )?;
    umount2("/sys", MntFlags::MNT_DETACH)?;
    mount(
        Some("sysfs"),
        "/sys",
        Some("sysfs"),
        MsFlags::empty(),
        None::<&str>,
    )
}

/// Owns a device list from `ibv_get_device_list`.
struct DeviceList {
    list: *mut *mut rdma_sys::ibv_device,
    count: usize,
}

impl DeviceList {
    fn get() -> Result<DeviceList, VerbsError> {
        let mut count: libc::c_int = 0;
        // SAFETY: plain FFI call; `count` outlives it.
        let list = unsafe { rdma_sys::ibv_get_device_list(&mut count) };
        if list.is_null() {
            return Err(VerbsError::DeviceList(std::io::Error::last_os_error()));
        }
        Ok(DeviceList {
            list,
            count: usize::try_from(count).unwrap_or(0),
        })
    }

    /// (name, device) pairs; the pointers live as long as the list.
    fn devices(&self) -> Vec<(String, *mut rdma_sys::ibv_device)> {
        (0..self.count)
            .filter_map(|i| {
                // SAFETY: the list holds `count` valid entries.
                let device = unsafe { *self.list.add(i) };
                if device.is_null() {
                    return None;
                }
                // SAFETY: a listed device has a NUL-terminated name.
                let name = unsafe { rdma_sys::ibv_get_device_name(device) };
                if name.is_null() {
                    return None;
                }
                // SAFETY: checked non-null above; libibverbs owns the text.
                let name = unsafe { CStr::from_ptr(name) }
                    .to_string_lossy()
                    .into_owned();
                Some((name, device))
            })
            .collect()
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: `list` came from ibv_get_device_list and is freed once.
        unsafe { rdma_sys::ibv_free_device_list(self.list) }
    }
}

fn query_port_state(device: &str, port: u8, netns: &str) -> Result<PortState, VerbsError> {
    let list = DeviceList::get()?;
    let devices = list.devices();
    let Some((_, handle)) = devices.iter().find(|(name, _)| name == device) else {
        return Err(VerbsError::DeviceNotFound {
            device: device.to_string(),
            netns: netns.to_string(),
            seen: devices.into_iter().map(|(name, _)| name).collect(),
        });
    };
    // SAFETY: `handle` is a device of the live list.
    let context = unsafe { rdma_sys::ibv_open_device(*handle) };
    if context.is_null() {
        return Err(VerbsError::Open {
            device: device.to_string(),
            source: std::io::Error::last_os_error(),
        });
    }
    // SAFETY: all-zero is a valid ibv_port_attr (integers only).
    let mut attr: rdma_sys::ibv_port_attr = unsafe { std::mem::zeroed() };
    // The exported ibv_query_port takes the older, shorter layout; passing
    // the full structure is what the C inline wrapper does too, and avoids
    // the Rust wrapper's unchecked use of the extended-context entry.
    // SAFETY: `context` is open and `attr` is large enough for either layout.
    let rc = unsafe {
        rdma_sys::ibv_query_port(
            context,
            port,
            (&mut attr as *mut rdma_sys::ibv_port_attr).cast::<rdma_sys::_compat_ibv_port_attr>(),
        )
    };
    let query_error = (rc != 0).then(|| std::io::Error::from_raw_os_error(rc.abs()));
    // SAFETY: opened above, closed once.
    unsafe { rdma_sys::ibv_close_device(context) };
    match query_error {
        Some(source) => Err(VerbsError::QueryPort {
            device: device.to_string(),
            port,
            source,
        }),
        None => Ok(PortState::from_raw(attr.state)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_print_as_ibv_devinfo_does() {
        assert_eq!(PortState::from_raw(4).to_string(), "ACTIVE");
        assert_eq!(PortState::from_raw(1).to_string(), "DOWN");
        assert_eq!(PortState::from_raw(9), PortState::Other(9));
        assert_eq!(
            serde_json::to_string(&PortState::ActiveDefer).unwrap(),
            "\"ACTIVE_DEFER\""
        );
        assert_eq!(
            serde_json::from_str::<PortState>("\"ACTIVE\"").unwrap(),
            PortState::Active
        );
    }

    /// This machine has no RDMA device: libibverbs returns an empty list,
    /// and the query must say so rather than crash.
    #[test]
    fn no_device_is_a_clear_error() {
        let host = NetNs::current_thread().unwrap();
        let e = VerbsPortQuery
            .port_state(&host, "mlx5_nonexistent", 1)
            .unwrap_err();
        match e {
            VerbsError::DeviceNotFound { device, seen, .. } => {
                assert_eq!(device, "mlx5_nonexistent");
                assert!(!seen.contains(&device));
            }
            VerbsError::DeviceList(_) => {}
            other => panic!("unexpected error: {other}"),
        }
    }
}
