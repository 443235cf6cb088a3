//! Finding the host link a [`Selector`] names, in the plugin's namespace.
//!
//! Names and MACs go to netlink; kernel paths, PCI functions and
//! auxiliary devices go to sysfs for the netdev's name first. sysfs lists
//! the netdevs of the namespace it was mounted in, which for a plugin
//! exec'd by a runtime is the host's.

use std::io;
use std::path::{Path, PathBuf};

use libcni::device::{is_userspace_driver, BusDevice, Sysfs, SysfsError};
use libcni::netlink::{LinkInfo, NetlinkError, RouteSocket};

use crate::config::Selector;

#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error("failed to find host device: no link matches {0}")]
    NotFound(String),
    #[error("failed to find host device: {what} does not exist on this node ({} is missing)", .path.display())]
    DeviceMissing { what: String, path: PathBuf },
    #[error("failed to find host device: {what} has no network interface{}", driver_hint(.driver.as_deref()))]
    NoNetdev {
        what: String,
        driver: Option<String>,
    },
    #[error("failed to find network devices at {}: {source}", .path.display())]
    KernelPath {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("failed to find host device: {0}")]
    Sysfs(#[from] SysfsError),
    #[error("failed to find host device: {0}")]
    Netlink(#[from] NetlinkError),
}

fn driver_hint(driver: Option<&str>) -> String {
    match driver {
        Some(driver) if is_userspace_driver(driver) => {
            format!(" (bound to the userspace driver {driver})")
        }
        Some(driver) => format!(" (driver {driver})"),
        None => " (no driver bound)".to_string(),
    }
}

/// The host link `selector` names.
pub fn find_host_link(
    socket: &mut RouteSocket,
    sysfs: &Sysfs,
    selector: &Selector,
) -> Result<LinkInfo, LookupError> {
    let not_found = || LookupError::NotFound(selector.describe());
    match selector {
        Selector::Name(name) => socket.link_by_name(name)?.ok_or_else(not_found),
        Selector::HwAddr(mac) => {
            let links = socket.list_links()?;
            let mut matching = links.into_iter().filter(|l| &l.mac == mac);
            let first = matching.next().ok_or_else(not_found)?;
            if let Some(other) = matching.next() {
                // Stacked links (vlan, macvlan) can share their parent's
                // MAC; the reference takes the first listed too.
                log::info!(
                    "{} and {} have the MAC; taking {}",
                    first.name,
                    other.name,
                    first.name
                );
            }
            Ok(first)
        }
        Selector::KernelPath(path) => {
            let names = kernel_path_netdevs(sysfs, path)?;
            let links = socket.list_links()?;
            names
                .iter()
                .find_map(|name| links.iter().find(|l| &l.name == name))
                .cloned()
                .ok_or_else(not_found)
        }
        Selector::Device(device) => {
            let name = bus_device_netdev(sysfs, device)?;
            socket.link_by_name(&name)?.ok_or_else(not_found)
        }
    }
}

/// The netdev of a PCI function or auxiliary device: the first one sysfs
/// lists under it (a virtio-net function's is one level down).
pub fn bus_device_netdev(sysfs: &Sysfs, device: &BusDevice) -> Result<String, LookupError> {
    let what = Selector::Device(device.clone()).describe();
    if !sysfs.exists(device) {
        return Err(LookupError::DeviceMissing {
            what,
            path: sysfs.device_dir(device),
        });
    }
    sysfs
        .netdevs(device)?
        .into_iter()
        .next()
        .ok_or_else(|| LookupError::NoNetdev {
            what,
            driver: sysfs.driver(device),
        })
}

/// The netdev names a `kernelpath` gives, sorted: the entries of its
/// `net/` directory as in the reference, or, for the directory of a netdev
/// itself (`/sys/devices/virtual/net/veth0`, which the reference cannot
/// use), that netdev. The path is read under the sysfs root, so a fake
/// tree serves tests.
pub fn kernel_path_netdevs(sysfs: &Sysfs, kernel_path: &str) -> Result<Vec<String>, LookupError> {
    let dir = under_root(sysfs, kernel_path);
    let net = dir.join("net");
    match sorted_names(&net) {
        Ok(names) => return Ok(names),
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            return Err(LookupError::KernelPath {
                path: net,
                source: e,
            })
        }
        Err(_) => {}
    }
    let is_netdev_dir = dir.join("ifindex").is_file()
        && dir.parent().and_then(Path::file_name) == Some("net".as_ref());
    match dir.file_name().and_then(|n| n.to_str()) {
        Some(name) if is_netdev_dir => Ok(vec![name.to_string()]),
        _ => Err(LookupError::KernelPath {
            path: net,
            source: io::Error::new(
                io::ErrorKind::NotFound,
                "no net directory, and not a network device's directory",
            ),
        }),
    }
}

/// `/sys/...` mapped under the sysfs root (itself for the real `/sys`).
fn under_root(sysfs: &Sysfs, sys_path: &str) -> PathBuf {
    let relative = sys_path.strip_prefix("/sys/").unwrap_or(sys_path);
    sysfs.root().join(relative.trim_start_matches('/'))
}

fn sorted_names(dir: &Path) -> io::Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| entry.file_name().to_str().map(str::to_string))
        .collect();
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;

    /// A PCI NIC with netdev `ens1f0`, a virtio-net function, a function
    /// bound to vfio-pci, an auxiliary device with netdev `eth0`, and a
    /// virtual netdev's directory.
    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let pci = root.join("devices/pci0000:00");
        fs::create_dir_all(pci.join("0000:00:03.0/net/ens1f0")).unwrap();
        fs::create_dir_all(pci.join("0000:00:04.0/virtio1/net/eth5")).unwrap();
        fs::create_dir_all(pci.join("0000:00:05.0")).unwrap();
        let bus = root.join("bus/pci/devices");
        fs::create_dir_all(&bus).unwrap();
        for f in ["0000:00:03.0", "0000:00:04.0", "0000:00:05.0"] {
            symlink(pci.join(f), bus.join(f)).unwrap();
        }
        fs::create_dir_all(root.join("bus/pci/drivers/vfio-pci")).unwrap();
        symlink(
            root.join("bus/pci/drivers/vfio-pci"),
            pci.join("0000:00:05.0/driver"),
        )
        .unwrap();
        fs::create_dir_all(root.join("bus/auxiliary/devices/mlx5_core.sf.4/net/eth0")).unwrap();
        let veth = root.join("devices/virtual/net/veth9");
        fs::create_dir_all(&veth).unwrap();
        fs::write(veth.join("ifindex"), "9\n").unwrap();
        dir
    }

    #[test]
    fn bus_devices_give_their_netdev() {
        let dir = tree();
        let sysfs = Sysfs::new(dir.path());
        assert_eq!(
            bus_device_netdev(&sysfs, &BusDevice::pci("0000:00:03.0")).unwrap(),
            "ens1f0"
        );
        assert_eq!(
            bus_device_netdev(&sysfs, &BusDevice::pci("0000:00:04.0")).unwrap(),
            "eth5"
        );
        assert_eq!(
            bus_device_netdev(&sysfs, &BusDevice::auxiliary("mlx5_core.sf.4")).unwrap(),
            "eth0"
        );
        let e = bus_device_netdev(&sysfs, &BusDevice::pci("0000:00:05.0")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed to find host device: PCI device 0000:00:05.0 has no network interface (bound to the userspace driver vfio-pci)"
        );
        let e = bus_device_netdev(&sysfs, &BusDevice::pci("0000:00:09.0")).unwrap_err();
        assert!(matches!(e, LookupError::DeviceMissing { .. }), "{e}");
        assert!(e
            .to_string()
            .contains("PCI device 0000:00:09.0 does not exist"));
    }

    #[test]
    fn kernel_paths_give_net_entries_or_the_netdev_itself() {
        let dir = tree();
        let sysfs = Sysfs::new(dir.path());
        assert_eq!(
            kernel_path_netdevs(&sysfs, "/sys/devices/pci0000:00/0000:00:03.0").unwrap(),
            vec!["ens1f0"]
        );
        assert_eq!(
            kernel_path_netdevs(&sysfs, "/sys/devices/virtual/net/veth9").unwrap(),
            vec!["veth9"]
        );
        let e = kernel_path_netdevs(&sysfs, "/sys/devices/pci0000:00/0000:00:05.0").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("failed to find network devices at"),
            "{e}"
        );
    }
}
