//! Finding a VF, its PF and its RDMA device in sysfs.
//!
//! Layout used (all under a configurable root, `/sys` by default, so tests
//! and guests can lay out a fake tree):
//!
//! ```text
//! bus/pci/devices/<vf-pci>/physfn         -> ../<pf-pci>
//! bus/pci/devices/<vf-pci>/net/<ifname>/   the VF netdev, when bound to a netdev driver
//! bus/pci/devices/<vf-pci>/driver         -> .../drivers/<driver>
//! bus/pci/devices/<vf-pci>/infiniband/<rdma-dev>/
//! bus/pci/devices/<pf-pci>/virtfn<N>      -> ../<vf-pci>
//! bus/pci/devices/<pf-pci>/net/<pf-ifname>/
//! class/net/<pf-ifname>/device            -> the PF's PCI directory
//! class/infiniband/<rdma-dev>/            node_desc, device/driver
//! ```

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The real sysfs.
pub const DEFAULT_SYSFS_ROOT: &str = "/sys";

/// Drivers that bind a VF for userspace I/O: such a VF has no netdev.
pub const USERSPACE_DRIVERS: [&str; 3] = ["vfio-pci", "uio_pci_generic", "igb_uio"];

#[derive(Debug, thiserror::Error)]
pub enum SysfsError {
    /// The address is well formed but names no device here: the device
    /// plugin handed out a VF that has gone (the PF's `sriov_numvfs`
    /// changed) or the configuration names another node's device.
    #[error("PCI device {pci} does not exist on this node ({} is missing): check deviceID, and that the PF still has this VF (its sriov_numvfs)", .path.display())]
    DeviceNotFound { pci: String, path: PathBuf },
    #[error("PCI device {pci} is not an SR-IOV VF (no physfn link)")]
    NotAVf { pci: String },
    #[error("PF network device not found for VF {pci}")]
    PfNetdevNotFound { pci: String },
    #[error("unable to get VF ID with PF: {pf} and VF pci address {pci}")]
    VfIndexNotFound { pf: String, pci: String },
    #[error("the VF {pci} does not have a interface name or a dpdk driver")]
    NoNetdevNorUserspaceDriver { pci: String },
    #[error("discovered more than one RDMA device {devices:?} for VF {pci}. Unsupported state")]
    SeveralRdmaDevices { pci: String, devices: Vec<String> },
    #[error("PF {pf:?} not found at {}", .path.display())]
    PfNotFound { pf: String, path: PathBuf },
    #[error("cannot read {}: {source}", .path.display())]
    Io { path: PathBuf, source: io::Error },
}

/// What sysfs tells about a VF.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VfDevice {
    pub pci: String,
    pub pf_pci: String,
    pub pf_name: String,
    pub vf_index: u32,
    /// The netdev name, when a netdev driver is bound.
    pub netdev: Option<String>,
    /// The bound driver's name.
    pub driver: Option<String>,
    /// The RDMA device sysfs lists under the VF (`infiniband/`); devices of
    /// the auxiliary bus and soft-RoCE do not appear there.
    pub rdma_device: Option<String>,
}

impl VfDevice {
    /// Bound to a userspace driver (DPDK-style), so it has no netdev.
    pub fn userspace_driver(&self) -> Option<&str> {
        if self.netdev.is_some() {
            return None;
        }
        self.driver
            .as_deref()
            .filter(|d| USERSPACE_DRIVERS.contains(d))
    }
}

/// A sysfs tree.
#[derive(Debug, Clone)]
pub struct Sysfs {
    root: PathBuf,
}

impl Sysfs {
    pub fn new(root: impl Into<PathBuf>) -> Sysfs {
        Sysfs { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn pci_dir(&self, pci: &str) -> PathBuf {
        self.root.join("bus/pci/devices").join(pci)
    }

    fn class_net_device(&self, netdev: &str) -> PathBuf {
        self.root.join("class/net").join(netdev).join("device")
    }

    /// Everything about VF `pci`. `pci` must already be validated as a PCI
    /// address (it becomes a path component).
    pub fn vf(&self, pci: &str) -> Result<VfDevice, SysfsError> {
        let dir = self.pci_dir(pci);
        if !dir.exists() {
            return Err(SysfsError::DeviceNotFound {
                pci: pci.to_string(),
                path: dir,
            });
        }
        let physfn = dir.join("physfn");
        let pf_pci = link_basename(&physfn).ok_or_else(|| SysfsError::NotAVf {
            pci: pci.to_string(),
        })?;
        let pf_name = sorted_entries(&physfn.join("net"))?
            .into_iter()
            .next()
            .ok_or_else(|| SysfsError::PfNetdevNotFound {
                pci: pci.to_string(),
            })?;
        let vf_index = virtfns(&physfn)?
            .into_iter()
            .find(|(_, vf_pci)| vf_pci == pci)
            .map(|(index, _)| index)
            .ok_or_else(|| SysfsError::VfIndexNotFound {
                pf: pf_name.clone(),
                pci: pci.to_string(),
            })?;
        let netdev = self.netdevs_of(pci)?.into_iter().next();
        let driver = link_basename(&dir.join("driver"));
        let rdma_devices = sorted_entries(&dir.join("infiniband"))?;
        if rdma_devices.len() > 1 {
            return Err(SysfsError::SeveralRdmaDevices {
                pci: pci.to_string(),
                devices: rdma_devices,
            });
        }
        let vf = VfDevice {
            pci: pci.to_string(),
            pf_pci,
            pf_name,
            vf_index,
            netdev,
            driver,
            rdma_device: rdma_devices.into_iter().next(),
        };
        if vf.netdev.is_none() && vf.userspace_driver().is_none() {
            return Err(SysfsError::NoNetdevNorUserspaceDriver {
                pci: pci.to_string(),
            });
        }
        Ok(vf)
    }

    /// Netdev names under the device, sorted; empty when it has none. After
    /// a namespace is destroyed the kernel brings a VF netdev back under the
    /// name it had in the pod (or `devN`), and this is how it is found.
    pub fn netdevs_of(&self, pci: &str) -> Result<Vec<String>, SysfsError> {
        sorted_entries(&self.pci_dir(pci).join("net"))
    }

    /// The VFs of PF `pf` (a netdev name) as (index, PCI address), by index.
    pub fn vfs_of_pf(&self, pf: &str) -> Result<Vec<(u32, String)>, SysfsError> {
        let device = self.class_net_device(pf);
        if !device.exists() {
            return Err(SysfsError::PfNotFound {
                pf: pf.to_string(),
                path: device,
            });
        }
        virtfns(&device)
    }

    /// The kernel driver of an RDMA device, as far as sysfs tells:
    /// soft-RoCE names itself in `node_desc` and has no bus device, a
    /// hardware device links its bus device's driver.
    pub fn rdma_driver(&self, rdma_device: &str) -> Option<String> {
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
    /// `mlx5_2`) and 0000:af:00.3 (vfio-pci), plus a device without physfn.
    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let devices = dir.path().join("bus/pci/devices");
        let pf = devices.join("0000:af:00.0");
        fs::create_dir_all(pf.join("net/pf0")).unwrap();
        for (n, vf) in [(0, "0000:af:00.2"), (1, "0000:af:00.3")] {
            let vf_dir = devices.join(vf);
            fs::create_dir_all(&vf_dir).unwrap();
            symlink(format!("../{vf}"), pf.join(format!("virtfn{n}"))).unwrap();
            symlink("../0000:af:00.0", vf_dir.join("physfn")).unwrap();
        }
        fs::create_dir_all(devices.join("0000:af:00.2/net/vf0")).unwrap();
        fs::create_dir_all(devices.join("0000:af:00.2/infiniband/mlx5_2")).unwrap();
        let drivers = dir.path().join("bus/pci/drivers");
        fs::create_dir_all(drivers.join("vfio-pci")).unwrap();
        fs::create_dir_all(drivers.join("mlx5_core")).unwrap();
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
        fs::create_dir_all(dir.path().join("class/net/pf0")).unwrap();
        symlink(&pf, dir.path().join("class/net/pf0/device")).unwrap();
        fs::create_dir_all(devices.join("0000:01:00.0/net/eth9")).unwrap();
        dir
    }

    #[test]
    fn finds_pf_index_netdev_and_rdma_device() {
        let dir = tree();
        let sysfs = Sysfs::new(dir.path());
        let vf = sysfs.vf("0000:af:00.2").unwrap();
        assert_eq!(vf.pf_pci, "0000:af:00.0");
        assert_eq!(vf.pf_name, "pf0");
        assert_eq!(vf.vf_index, 0);
        assert_eq!(vf.netdev.as_deref(), Some("vf0"));
        assert_eq!(vf.driver.as_deref(), Some("mlx5_core"));
        assert_eq!(vf.rdma_device.as_deref(), Some("mlx5_2"));
        assert_eq!(vf.userspace_driver(), None);
    }

    #[test]
    fn userspace_bound_vf_has_no_netdev() {
        let dir = tree();
        let vf = Sysfs::new(dir.path()).vf("0000:af:00.3").unwrap();
        assert_eq!(vf.vf_index, 1);
        assert_eq!(vf.netdev, None);
        assert_eq!(vf.userspace_driver(), Some("vfio-pci"));
        assert_eq!(vf.rdma_device, None);
    }

    #[test]
    fn errors_name_the_device() {
        let dir = tree();
        let sysfs = Sysfs::new(dir.path());
        let e = sysfs.vf("0000:af:00.7").unwrap_err();
        assert!(matches!(e, SysfsError::DeviceNotFound { .. }), "{e}");
        let e = sysfs.vf("0000:01:00.0").unwrap_err();
        assert_eq!(
            e.to_string(),
            "PCI device 0000:01:00.0 is not an SR-IOV VF (no physfn link)"
        );
        // A VF with neither a netdev nor a userspace driver.
        fs::remove_file(dir.path().join("bus/pci/devices/0000:af:00.3/driver")).unwrap();
        let e = sysfs.vf("0000:af:00.3").unwrap_err();
        assert_eq!(
            e.to_string(),
            "the VF 0000:af:00.3 does not have a interface name or a dpdk driver"
        );
        // A second RDMA device under one VF is refused.
        fs::create_dir_all(
            dir.path()
                .join("bus/pci/devices/0000:af:00.2/infiniband/mlx5_9"),
        )
        .unwrap();
        let e = sysfs.vf("0000:af:00.2").unwrap_err();
        assert!(matches!(e, SysfsError::SeveralRdmaDevices { .. }), "{e}");
    }

    #[test]
    fn lists_vfs_of_a_pf_in_index_order() {
        let dir = tree();
        let sysfs = Sysfs::new(dir.path());
        assert_eq!(
            sysfs.vfs_of_pf("pf0").unwrap(),
            vec![
                (0, "0000:af:00.2".to_string()),
                (1, "0000:af:00.3".to_string())
            ]
        );
        assert!(matches!(
            sysfs.vfs_of_pf("nope"),
            Err(SysfsError::PfNotFound { .. })
        ));
    }

    #[test]
    fn rdma_driver_names_soft_roce() {
        let dir = tree();
        let sysfs = Sysfs::new(dir.path());
        let rxe = dir.path().join("class/infiniband/rxe0");
        fs::create_dir_all(&rxe).unwrap();
        fs::write(rxe.join("node_desc"), "rxe\n").unwrap();
        assert_eq!(sysfs.rdma_driver("rxe0").as_deref(), Some("rdma_rxe"));
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
