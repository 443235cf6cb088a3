//! Devices as sysfs shows them: PCI and auxiliary-bus devices, their
//! netdevs and RDMA devices, the driver bound to them, and the SR-IOV links
//! between a PF and its VFs.
//!
//! Every path is read under a root given to [`Sysfs::new`] (`/sys` in a
//! plugin), so tests lay out a fake tree. The layout read:
//!
//! ```text
//! bus/pci/devices/<pci>/net/<netdev>/          netdevs of a PCI function
//! bus/pci/devices/<pci>/virtio<N>/net/<netdev>/  ... of a virtio-net function
//! bus/pci/devices/<pci>/infiniband/<rdma>/     its RDMA device
//! bus/pci/devices/<pci>/driver              -> .../drivers/<driver>
//! bus/pci/devices/<vf>/physfn               -> ../<pf>
//! bus/pci/devices/<pf>/virtfn<N>            -> ../<vf>
//! bus/auxiliary/devices/<id>/net/, infiniband/  the same for a sub-function
//! class/net/<netdev>/device                 -> the netdev's bus device
//! class/infiniband/<rdma>/                     node_desc, parent, device/driver
//! ```
//!
//! A directory that is missing reads as empty: a device without a netdev
//! has no `net/`. Only other read failures are errors.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The real sysfs.
pub const DEFAULT_SYSFS_ROOT: &str = "/sys";

/// Drivers that bind a PCI function for userspace I/O (DPDK): such a
/// function has no netdev.
pub const USERSPACE_DRIVERS: [&str; 3] = ["vfio-pci", "uio_pci_generic", "igb_uio"];

/// Whether `driver` binds its devices for userspace I/O.
pub fn is_userspace_driver(driver: &str) -> bool {
    USERSPACE_DRIVERS.contains(&driver)
}

/// A PCI address in its full form, `dddd:bb:dd.f` (hex domain, bus and
/// device, function 0-7), as sysfs names PCI devices. Only such a string
/// may become a path component under `bus/pci/devices`.
pub fn is_pci_address(s: &str) -> bool {
    let b = s.as_bytes();
    let hex = |range: std::ops::Range<usize>| {
        b.get(range)
            .is_some_and(|part| part.iter().all(u8::is_ascii_hexdigit))
    };
    b.len() == 12
        && hex(0..4)
        && b.get(4) == Some(&b':')
        && hex(5..7)
        && b.get(7) == Some(&b':')
        && hex(8..10)
        && b.get(10) == Some(&b'.')
        && b.get(11).is_some_and(|c| (b'0'..=b'7').contains(c))
}

/// Whether `name` can be one path component: not empty, no `/`, not `.`
/// or `..`. Device IDs from a configuration are checked with it before
/// they are joined to a sysfs path.
fn is_path_component(name: &str) -> bool {
    !name.is_empty() && !name.contains('/') && name != "." && name != ".." && !name.contains('\0')
}

#[derive(Debug, thiserror::Error)]
pub enum SysfsError {
    #[error("cannot read {}: {source}", .path.display())]
    Io { path: PathBuf, source: io::Error },
}

/// The buses whose devices carry netdevs and RDMA devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bus {
    Pci,
    /// Sub-functions and other parts of a PCI device that its driver
    /// splits off (`mlx5_core.sf.4`).
    Auxiliary,
}

impl Bus {
    /// The name under `bus/`.
    pub fn as_str(self) -> &'static str {
        match self {
            Bus::Pci => "pci",
            Bus::Auxiliary => "auxiliary",
        }
    }
}

/// A device on a bus, by its sysfs name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BusDevice {
    pub bus: Bus,
    pub id: String,
}

impl BusDevice {
    pub fn pci(address: impl Into<String>) -> BusDevice {
        BusDevice {
            bus: Bus::Pci,
            id: address.into(),
        }
    }

    pub fn auxiliary(id: impl Into<String>) -> BusDevice {
        BusDevice {
            bus: Bus::Auxiliary,
            id: id.into(),
        }
    }

    /// The PCI address, for a PCI device.
    pub fn pci_address(&self) -> Option<&str> {
        (self.bus == Bus::Pci).then_some(self.id.as_str())
    }
}

/// A sysfs tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sysfs {
    root: PathBuf,
}

impl Default for Sysfs {
    fn default() -> Self {
        Sysfs::new(DEFAULT_SYSFS_ROOT)
    }
}

impl Sysfs {
    pub fn new(root: impl Into<PathBuf>) -> Sysfs {
        Sysfs { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `bus/<bus>/devices/<id>`.
    pub fn device_dir(&self, device: &BusDevice) -> PathBuf {
        self.root
            .join("bus")
            .join(device.bus.as_str())
            .join("devices")
            .join(&device.id)
    }

    /// `bus/pci/devices/<pci>`.
    pub fn pci_dir(&self, pci: &str) -> PathBuf {
        self.device_dir(&BusDevice::pci(pci))
    }

    /// Whether the device exists. An ID that is not one path component
    /// exists nowhere.
    pub fn exists(&self, device: &BusDevice) -> bool {
        is_path_component(&device.id) && self.device_dir(device).exists()
    }

    /// The device a runtime's `deviceID` names: a PCI device when the PCI
    /// bus has one of that name, else an auxiliary-bus device (device
    /// plugins hand out either).
    pub fn find_device(&self, id: &str) -> Option<BusDevice> {
        [BusDevice::pci(id), BusDevice::auxiliary(id)]
            .into_iter()
            .find(|device| self.exists(device))
    }

    /// The device's netdev names, sorted; empty when it has none. A
    /// virtio-net PCI function keeps its netdev one level down, under its
    /// `virtio<N>` device. After a namespace is destroyed the kernel brings
    /// a physical netdev back under the name it had there (or `devN`), and
    /// this is how it is found again.
    pub fn netdevs(&self, device: &BusDevice) -> Result<Vec<String>, SysfsError> {
        if !is_path_component(&device.id) {
            return Ok(Vec::new());
        }
        let dir = self.device_dir(device);
        let direct = sorted_entries(&dir.join("net"))?;
        if !direct.is_empty() || device.bus != Bus::Pci {
            return Ok(direct);
        }
        let mut names = Vec::new();
        for child in sorted_entries(&dir)? {
            if child.starts_with("virtio") {
                names.extend(sorted_entries(&dir.join(&child).join("net"))?);
            }
        }
        Ok(names)
    }

    /// The RDMA devices sysfs lists under the device (`infiniband/`),
    /// sorted. Soft-RoCE devices have no bus device and are not listed
    /// anywhere here; RDMA netlink finds those by their netdev.
    pub fn rdma_devices(&self, device: &BusDevice) -> Result<Vec<String>, SysfsError> {
        if !is_path_component(&device.id) {
            return Ok(Vec::new());
        }
        sorted_entries(&self.device_dir(device).join("infiniband"))
    }

    /// The name of the driver bound to the device.
    pub fn driver(&self, device: &BusDevice) -> Option<String> {
        if !is_path_component(&device.id) {
            return None;
        }
        link_basename(&self.device_dir(device).join("driver"))
    }

    /// The bus device behind netdev `netdev` (`class/net/<netdev>/device`):
    /// `None` for a virtual netdev (veth, bridge), which has none. The
    /// link of a virtio-net netdev ends at its `virtio<N>` device, whose
    /// parent is the PCI function.
    pub fn device_of_netdev(&self, netdev: &str) -> Option<BusDevice> {
        if !is_path_component(netdev) {
            return None;
        }
        let link = self.root.join("class/net").join(netdev).join("device");
        let name = link_basename(&link)?;
        if is_pci_address(&name) {
            return Some(BusDevice::pci(name));
        }
        let auxiliary = BusDevice::auxiliary(&name);
        if self.exists(&auxiliary) {
            return Some(auxiliary);
        }
        let target = fs::canonicalize(&link).ok()?;
        let parent = target.parent()?.file_name()?.to_str()?;
        is_pci_address(parent).then(|| BusDevice::pci(parent))
    }

    /// The PCI address of netdev `netdev`, when it is a PCI function's.
    pub fn pci_of_netdev(&self, netdev: &str) -> Option<String> {
        self.device_of_netdev(netdev)
            .filter(|d| d.bus == Bus::Pci)
            .map(|d| d.id)
    }

    /// The RDMA devices of netdev `netdev`'s bus device (see
    /// [`Sysfs::rdma_devices`]); empty for a virtual netdev.
    pub fn rdma_devices_of_netdev(&self, netdev: &str) -> Result<Vec<String>, SysfsError> {
        match self.device_of_netdev(netdev) {
            Some(device) => self.rdma_devices(&device),
            None => Ok(Vec::new()),
        }
    }

    /// The PF of SR-IOV VF `pci` (its `physfn` link); `None` when `pci` is
    /// no VF.
    pub fn pf_of_vf(&self, pci: &str) -> Option<String> {
        if !is_path_component(pci) {
            return None;
        }
        link_basename(&self.pci_dir(pci).join("physfn"))
    }

    /// The VFs of PF `pf_pci` as (VF number, PCI address), by number.
    pub fn vfs_of_pf(&self, pf_pci: &str) -> Result<Vec<(u32, String)>, SysfsError> {
        if !is_path_component(pf_pci) {
            return Ok(Vec::new());
        }
        virtfns(&self.pci_dir(pf_pci))
    }

    /// The VFs of the PF whose netdev is `pf_netdev`, by number; `None`
    /// when no such netdev has a bus device.
    pub fn vfs_of_pf_netdev(
        &self,
        pf_netdev: &str,
    ) -> Result<Option<Vec<(u32, String)>>, SysfsError> {
        if !is_path_component(pf_netdev) {
            return Ok(None);
        }
        let device = self.root.join("class/net").join(pf_netdev).join("device");
        if !device.exists() {
            return Ok(None);
        }
        virtfns(&device).map(Some)
    }

    /// The VF number of `vf_pci` on PF `pf_pci`.
    pub fn vf_index(&self, pf_pci: &str, vf_pci: &str) -> Result<Option<u32>, SysfsError> {
        Ok(self
            .vfs_of_pf(pf_pci)?
            .into_iter()
            .find(|(_, pci)| pci == vf_pci)
            .map(|(index, _)| index))
    }

    /// The kernel driver of RDMA device `rdma_device`, as far as sysfs
    /// tells: soft-RoCE names itself in `node_desc` (and its class entry
    /// has a `parent` netdev file), siw too; a hardware device links its
    /// bus device's driver.
    pub fn rdma_driver(&self, rdma_device: &str) -> Option<String> {
        if !is_path_component(rdma_device) {
            return None;
        }
        let dir = self.root.join("class/infiniband").join(rdma_device);
        let node_desc = fs::read_to_string(dir.join("node_desc")).unwrap_or_default();
        if node_desc.trim() == "rxe" || dir.join("parent").exists() {
            return Some("rdma_rxe".to_string());
        }
        if node_desc.trim() == "Software iWARP stack" {
            return Some("siw".to_string());
        }
        link_basename(&dir.join("device/driver"))
    }
}

/// The last component of a symlink's target.
fn link_basename(link: &Path) -> Option<String> {
    let target = fs::read_link(link).ok()?;
    target
        .file_name()
        .and_then(|n| n.to_str())
        .map(str::to_string)
}

/// Entry names of a directory, sorted; a missing directory has none.
fn sorted_entries(dir: &Path) -> Result<Vec<String>, SysfsError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(SysfsError::Io {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut names: Vec<String> = entries
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| entry.file_name().to_str().map(str::to_string))
        .collect();
    names.sort();
    Ok(names)
}

/// `virtfn<N>` links of a PF directory as (N, VF PCI address), by N.
fn virtfns(pf_dir: &Path) -> Result<Vec<(u32, String)>, SysfsError> {
    let mut vfs: Vec<(u32, String)> = sorted_entries(pf_dir)?
        .into_iter()
        .filter_map(|name| {
            let index = name.strip_prefix("virtfn")?.parse::<u32>().ok()?;
            let pci = link_basename(&pf_dir.join(&name))?;
            Some((index, pci))
        })
        .collect();
    vfs.sort();
    Ok(vfs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// PF `pf0` at 0000:af:00.0 with VFs 0000:af:00.2 (netdev `vf0`, RDMA
    /// `mlx5_2`, mlx5_core) and 0000:af:00.3 (vfio-pci); a virtio-net
    /// function 0000:00:03.0 with `eth0`; sub-function `mlx5_core.sf.4`
    /// with `enp1s0f0s4` and RDMA `mlx5_4`.
    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let devices = root.join("bus/pci/devices");
        let pf = devices.join("0000:af:00.0");
        fs::create_dir_all(pf.join("net/pf0")).unwrap();
        for (n, vf) in [(0, "0000:af:00.2"), (1, "0000:af:00.3")] {
            fs::create_dir_all(devices.join(vf)).unwrap();
            symlink(format!("../{vf}"), pf.join(format!("virtfn{n}"))).unwrap();
            symlink("../0000:af:00.0", devices.join(vf).join("physfn")).unwrap();
        }
        fs::create_dir_all(devices.join("0000:af:00.2/net/vf0")).unwrap();
        fs::create_dir_all(devices.join("0000:af:00.2/infiniband/mlx5_2")).unwrap();
        let drivers = root.join("bus/pci/drivers");
        for driver in ["vfio-pci", "mlx5_core"] {
            fs::create_dir_all(drivers.join(driver)).unwrap();
        }
        symlink(
            drivers.join("vfio-pci"),
            devices.join("0000:af:00.3/driver"),
        )
        .unwrap();
        symlink(
            drivers.join("mlx5_core"),
            devices.join("0000:af:00.2/driver"),
        )
        .unwrap();
        let class_net = root.join("class/net");
        for (netdev, target) in [
            ("pf0", pf.clone()),
            ("vf0", devices.join("0000:af:00.2")),
            ("eth0", devices.join("0000:00:03.0/virtio0")),
            (
                "enp1s0f0s4",
                root.join("bus/auxiliary/devices/mlx5_core.sf.4"),
            ),
        ] {
            fs::create_dir_all(class_net.join(netdev)).unwrap();
            symlink(target, class_net.join(netdev).join("device")).unwrap();
        }
        fs::create_dir_all(class_net.join("veth0")).unwrap();
        fs::create_dir_all(devices.join("0000:00:03.0/virtio0/net/eth0")).unwrap();
        let sf = root.join("bus/auxiliary/devices/mlx5_core.sf.4");
        fs::create_dir_all(sf.join("net/enp1s0f0s4")).unwrap();
        fs::create_dir_all(sf.join("infiniband/mlx5_4")).unwrap();
        dir
    }

    #[test]
    fn pci_address_rule() {
        assert!(is_pci_address("0000:af:06.0"));
        assert!(is_pci_address("0000:AF:06.7"));
        for bad in [
            "",
            "af:06.0",
            "0000:af:06.8",
            "0000:af:06.00",
            "0000-af:06.0",
            "000g:af:06.0",
            "../../../etc",
        ] {
            assert!(!is_pci_address(bad), "{bad:?}");
        }
    }

    #[test]
    fn devices_netdevs_rdma_and_drivers() {
        let dir = tree();
        let sysfs = Sysfs::new(dir.path());
        let vf = BusDevice::pci("0000:af:00.2");
        assert!(sysfs.exists(&vf));
        assert_eq!(sysfs.netdevs(&vf).unwrap(), vec!["vf0"]);
        assert_eq!(sysfs.rdma_devices(&vf).unwrap(), vec!["mlx5_2"]);
        assert_eq!(sysfs.driver(&vf).as_deref(), Some("mlx5_core"));
        let vfio = BusDevice::pci("0000:af:00.3");
        assert!(sysfs.netdevs(&vfio).unwrap().is_empty());
        assert!(sysfs.driver(&vfio).is_some_and(|d| is_userspace_driver(&d)));
        // virtio-net keeps its netdev under virtio<N>.
        let virtio = BusDevice::pci("0000:00:03.0");
        assert_eq!(sysfs.netdevs(&virtio).unwrap(), vec!["eth0"]);
        // Nothing there, or not a name at all.
        assert!(!sysfs.exists(&BusDevice::pci("0000:af:00.7")));
        assert!(!sysfs.exists(&BusDevice::pci("..")));
        assert!(sysfs.netdevs(&BusDevice::pci("../..")).unwrap().is_empty());
    }

    #[test]
    fn device_ids_resolve_on_the_pci_then_the_auxiliary_bus() {
        let dir = tree();
        let sysfs = Sysfs::new(dir.path());
        assert_eq!(
            sysfs.find_device("0000:af:00.2"),
            Some(BusDevice::pci("0000:af:00.2"))
        );
        let sf = BusDevice::auxiliary("mlx5_core.sf.4");
        assert_eq!(sysfs.find_device("mlx5_core.sf.4"), Some(sf.clone()));
        assert_eq!(sysfs.netdevs(&sf).unwrap(), vec!["enp1s0f0s4"]);
        assert_eq!(sysfs.rdma_devices(&sf).unwrap(), vec!["mlx5_4"]);
        assert_eq!(sf.pci_address(), None);
        assert_eq!(sysfs.find_device("mlx5_core.sf.9"), None);
        assert_eq!(sysfs.find_device("../../etc"), None);
    }

    #[test]
    fn netdevs_lead_back_to_their_device() {
        let dir = tree();
        let sysfs = Sysfs::new(dir.path());
        assert_eq!(sysfs.pci_of_netdev("vf0").as_deref(), Some("0000:af:00.2"));
        assert_eq!(sysfs.pci_of_netdev("eth0").as_deref(), Some("0000:00:03.0"));
        assert_eq!(
            sysfs.device_of_netdev("enp1s0f0s4"),
            Some(BusDevice::auxiliary("mlx5_core.sf.4"))
        );
        assert_eq!(sysfs.pci_of_netdev("enp1s0f0s4"), None);
        assert_eq!(sysfs.device_of_netdev("veth0"), None);
        assert_eq!(sysfs.device_of_netdev("nope"), None);
        assert_eq!(sysfs.rdma_devices_of_netdev("vf0").unwrap(), vec!["mlx5_2"]);
        assert_eq!(
            sysfs.rdma_devices_of_netdev("enp1s0f0s4").unwrap(),
            vec!["mlx5_4"]
        );
        assert!(sysfs.rdma_devices_of_netdev("veth0").unwrap().is_empty());
    }

    #[test]
    fn sriov_links_between_pf_and_vfs() {
        let dir = tree();
        let sysfs = Sysfs::new(dir.path());
        assert_eq!(
            sysfs.pf_of_vf("0000:af:00.3").as_deref(),
            Some("0000:af:00.0")
        );
        assert_eq!(sysfs.pf_of_vf("0000:af:00.0"), None);
        let vfs = vec![
            (0, "0000:af:00.2".to_string()),
            (1, "0000:af:00.3".to_string()),
        ];
        assert_eq!(sysfs.vfs_of_pf("0000:af:00.0").unwrap(), vfs);
        assert_eq!(sysfs.vfs_of_pf_netdev("pf0").unwrap(), Some(vfs));
        assert_eq!(sysfs.vfs_of_pf_netdev("nope").unwrap(), None);
        assert_eq!(
            sysfs.vf_index("0000:af:00.0", "0000:af:00.3").unwrap(),
            Some(1)
        );
        assert_eq!(
            sysfs.vf_index("0000:af:00.0", "0000:af:00.7").unwrap(),
            None
        );
    }

    #[test]
    fn rdma_driver_names_soft_roce() {
        let dir = tree();
        let sysfs = Sysfs::new(dir.path());
        let rxe = dir.path().join("class/infiniband/rxe0");
        fs::create_dir_all(&rxe).unwrap();
        fs::write(rxe.join("node_desc"), "rxe\n").unwrap();
        assert_eq!(sysfs.rdma_driver("rxe0").as_deref(), Some("rdma_rxe"));
        let siw = dir.path().join("class/infiniband/siw0");
        fs::create_dir_all(&siw).unwrap();
        fs::write(siw.join("node_desc"), "Software iWARP stack\n").unwrap();
        assert_eq!(sysfs.rdma_driver("siw0").as_deref(), Some("siw"));
        let mlx = dir.path().join("class/infiniband/mlx5_2");
        fs::create_dir_all(&mlx).unwrap();
        symlink(
            dir.path().join("bus/pci/devices/0000:af:00.2"),
            mlx.join("device"),
        )
        .unwrap();
        assert_eq!(sysfs.rdma_driver("mlx5_2").as_deref(), Some("mlx5_core"));
        assert_eq!(sysfs.rdma_driver("none0"), None);
    }
}
