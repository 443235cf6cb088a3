//! A VF as sysfs shows it: its PF, VF number, netdev, driver and RDMA
//! device, put together from libcni's sysfs lookups
//! ([`libcni::device::Sysfs`]), with sriov-cni's wording for what it
//! refuses.

use std::path::PathBuf;

use libcni::device::{is_userspace_driver, BusDevice, Sysfs, SysfsError};

#[derive(Debug, thiserror::Error)]
pub enum VfError {
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
    #[error(transparent)]
    Sysfs(#[from] SysfsError),
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
        self.driver.as_deref().filter(|d| is_userspace_driver(d))
    }
}

/// Everything about VF `pci`, which must be a validated PCI address.
pub fn find_vf(sysfs: &Sysfs, pci: &str) -> Result<VfDevice, VfError> {
    let device = BusDevice::pci(pci);
    if !sysfs.exists(&device) {
        return Err(VfError::DeviceNotFound {
            pci: pci.to_string(),
            path: sysfs.device_dir(&device),
        });
    }
    let pf_pci = sysfs.pf_of_vf(pci).ok_or_else(|| VfError::NotAVf {
        pci: pci.to_string(),
    })?;
    let pf_name = sysfs
        .netdevs(&BusDevice::pci(&pf_pci))?
        .into_iter()
        .next()
        .ok_or_else(|| VfError::PfNetdevNotFound {
            pci: pci.to_string(),
        })?;
    let vf_index = sysfs
        .vf_index(&pf_pci, pci)?
        .ok_or_else(|| VfError::VfIndexNotFound {
            pf: pf_name.clone(),
            pci: pci.to_string(),
        })?;
    let rdma_devices = sysfs.rdma_devices(&device)?;
    if rdma_devices.len() > 1 {
        return Err(VfError::SeveralRdmaDevices {
            pci: pci.to_string(),
            devices: rdma_devices,
        });
    }
    let vf = VfDevice {
        pci: pci.to_string(),
        pf_pci,
        pf_name,
        vf_index,
        netdev: sysfs.netdevs(&device)?.into_iter().next(),
        driver: sysfs.driver(&device),
        rdma_device: rdma_devices.into_iter().next(),
    };
    if vf.netdev.is_none() && vf.userspace_driver().is_none() {
        return Err(VfError::NoNetdevNorUserspaceDriver {
            pci: pci.to_string(),
        });
    }
    Ok(vf)
}

/// The VFs of PF `pf` (a netdev name) as (VF number, PCI address), by
/// number.
pub fn vfs_of_pf(sysfs: &Sysfs, pf: &str) -> Result<Vec<(u32, String)>, VfError> {
    sysfs
        .vfs_of_pf_netdev(pf)?
        .ok_or_else(|| VfError::PfNotFound {
            pf: pf.to_string(),
            path: sysfs.root().join("class/net").join(pf).join("device"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
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
        let vf = find_vf(&sysfs, "0000:af:00.2").unwrap();
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
        let vf = find_vf(&Sysfs::new(dir.path()), "0000:af:00.3").unwrap();
        assert_eq!(vf.vf_index, 1);
        assert_eq!(vf.netdev, None);
        assert_eq!(vf.userspace_driver(), Some("vfio-pci"));
        assert_eq!(vf.rdma_device, None);
    }

    #[test]
    fn errors_name_the_device() {
        let dir = tree();
        let sysfs = Sysfs::new(dir.path());
        let e = find_vf(&sysfs, "0000:af:00.7").unwrap_err();
        assert!(matches!(e, VfError::DeviceNotFound { .. }), "{e}");
        assert!(
            e.to_string()
                .starts_with("PCI device 0000:af:00.7 does not exist on this node"),
            "{e}"
        );
        let e = find_vf(&sysfs, "0000:01:00.0").unwrap_err();
        assert_eq!(
            e.to_string(),
            "PCI device 0000:01:00.0 is not an SR-IOV VF (no physfn link)"
        );
        // A VF with neither a netdev nor a userspace driver.
        fs::remove_file(dir.path().join("bus/pci/devices/0000:af:00.3/driver")).unwrap();
        let e = find_vf(&sysfs, "0000:af:00.3").unwrap_err();
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
        let e = find_vf(&sysfs, "0000:af:00.2").unwrap_err();
        assert!(matches!(e, VfError::SeveralRdmaDevices { .. }), "{e}");
    }

    #[test]
    fn lists_vfs_of_a_pf_in_index_order() {
        let dir = tree();
        let sysfs = Sysfs::new(dir.path());
        assert_eq!(
            vfs_of_pf(&sysfs, "pf0").unwrap(),
            vec![
                (0, "0000:af:00.2".to_string()),
                (1, "0000:af:00.3".to_string())
            ]
        );
        assert!(matches!(
            vfs_of_pf(&sysfs, "nope"),
            Err(VfError::PfNotFound { .. })
        ));
    }
}
