//! The device-info file of the NPWG device-info spec 1.1.0: what a plugin
//! tells the runtime (Multus copies it into the pod's network-status
//! annotation) about the device behind an attachment.
//!
//! The runtime passes the path as `runtimeConfig.CNIDeviceInfoFile`
//! (capability `CNIDeviceInfoFile`). The file may already exist, filled
//! from the device plugin's file: then the plugin updates it, keeping what
//! it does not know about; otherwise it writes its own, creating the
//! directory. Writes are atomic ([`crate::state_file`]), so a reader never
//! sees half a file.
//!
//! Only the `pci` type is built here (the one plugins of this suite have
//! facts for). A file of another type (`vdpa`, `vhost-user`, `memif`) is
//! the device plugin's account of a device we do not describe: it is left
//! as it is, not turned into a `pci` file beside its own map.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::config_file::{self, Symlinks};
use crate::state_file;

/// The spec version written.
pub const DEVICE_INFO_VERSION: &str = "1.1.0";

/// Where NPWG runtimes put the files of CNI plugins.
pub const CNI_DEVICE_INFO_DIR: &str = "/var/run/k8s.cni.cncf.io/devinfo/cni";

#[derive(Debug, thiserror::Error)]
pub enum DeviceInfoError {
    #[error("cannot read device-info file {}: {source}", .path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("cannot write device-info file {}: {source}", .path.display())]
    Write { path: PathBuf, source: io::Error },
    #[error("cannot remove device-info file {}: {source}", .path.display())]
    Remove { path: PathBuf, source: io::Error },
}

/// The facts of a `pci` device-info (`pci` map of the spec).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PciDeviceInfo {
    /// The function's address (`dddd:bb:dd.f`); required by the spec.
    pub pci_address: String,
    /// The PF of an SR-IOV VF.
    pub pf_pci_address: Option<String>,
    pub rdma_device: Option<String>,
    pub representor_device: Option<String>,
    pub vhost_net: Option<String>,
}

impl PciDeviceInfo {
    /// The spec's JSON object.
    pub fn to_value(&self) -> Value {
        let mut pci = Map::new();
        pci.insert("pci-address".into(), self.pci_address.clone().into());
        for (key, value) in [
            ("pf-pci-address", &self.pf_pci_address),
            ("rdma-device", &self.rdma_device),
            ("representor-device", &self.representor_device),
            ("vhost-net", &self.vhost_net),
        ] {
            if let Some(value) = value {
                pci.insert(key.into(), value.clone().into());
            }
        }
        let mut info = Map::new();
        info.insert("type".into(), "pci".into());
        info.insert("version".into(), DEVICE_INFO_VERSION.into());
        info.insert("pci".into(), Value::Object(pci));
        Value::Object(info)
    }
}

/// What [`write_pci`] found at the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// There was no file: this one is the plugin's own.
    Created,
    /// A file was there and was updated.
    Updated,
    /// A file of another device type was there and was left as it is.
    LeftAlone,
}

/// Writes `info` to `path`, or merges it into the file there: our keys of
/// the `pci` map replace theirs, other keys and maps stay. A file that is
/// not a JSON object is replaced (it could not be a device-info); one whose
/// `type` is another device type is left alone.
pub fn write_pci(path: &Path, info: &PciDeviceInfo) -> Result<Written, DeviceInfoError> {
    let existing = match read_file(path) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(DeviceInfoError::Read {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let ours = info.to_value();
    let (value, written) = match existing {
        None => (ours, Written::Created),
        Some(bytes) => match serde_json::from_slice::<Value>(&bytes) {
            Ok(Value::Object(theirs)) => match theirs.get("type").and_then(Value::as_str) {
                Some(kind) if kind != "pci" => {
                    log::info!(
                        "{} describes a {kind:?} device; left as it is",
                        path.display()
                    );
                    return Ok(Written::LeftAlone);
                }
                _ => (merge(theirs, ours), Written::Updated),
            },
            Ok(_) | Err(_) => {
                log::warn!(
                    "{} is not a device-info object; replacing it",
                    path.display()
                );
                (ours, Written::Updated)
            }
        },
    };
    // A value of strings only always serialises.
    let mut bytes = serde_json::to_vec_pretty(&value).unwrap_or_default();
    bytes.push(b'\n');
    write_shared(path, &bytes).map_err(|source| DeviceInfoError::Write {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(written)
}

/// Removes the file; one that is already gone is fine.
pub fn remove(path: &Path) -> Result<(), DeviceInfoError> {
    state_file::remove_if_exists(path).map_err(|source| DeviceInfoError::Remove {
        path: path.to_path_buf(),
        source,
    })
}

/// The device-info of `path` as JSON, `None` when there is no file.
pub fn read(path: &Path) -> Result<Option<Value>, DeviceInfoError> {
    match read_file(path) {
        Ok(bytes) => Ok(serde_json::from_slice(&bytes).ok()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(DeviceInfoError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The file's bytes, bounded ([`config_file::DEVICE_INFO_CAP`]): the
/// path comes from `runtimeConfig`, so it may name a FIFO or a device. A
/// symbolic link is not followed: the runtime writes the file itself.
pub fn read_file(path: &Path) -> io::Result<Vec<u8>> {
    config_file::read_bounded(path, config_file::DEVICE_INFO_CAP, Symlinks::Refuse)
}

fn merge(mut theirs: Map<String, Value>, ours: Value) -> Value {
    let Value::Object(ours) = ours else {
        return Value::Object(theirs);
    };
    for (key, value) in ours {
        match (theirs.get_mut(&key), value) {
            (Some(Value::Object(their_map)), Value::Object(our_map)) => {
                their_map.extend(our_map);
            }
            (_, value) => {
                theirs.insert(key, value);
            }
        }
    }
    Value::Object(theirs)
}

/// The runtime (Multus) reads the file as another user than the plugin
/// may run as, so unlike private state it is world-readable (0644); its
/// directory is created 0755.
fn write_shared(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)?;
    }
    state_file::write_atomically(path, bytes)?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o644))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::os::unix::fs::PermissionsExt;

    fn info() -> PciDeviceInfo {
        PciDeviceInfo {
            pci_address: "0000:af:00.2".into(),
            rdma_device: Some("mlx5_2".into()),
            ..PciDeviceInfo::default()
        }
    }

    #[test]
    fn a_new_file_is_created_with_its_directory() {
        let root = tempfile::tempdir().unwrap();
        let path = root.path().join("devinfo/cni/net1-abc-net1.json");
        assert_eq!(write_pci(&path, &info()).unwrap(), Written::Created);
        assert_eq!(
            read(&path).unwrap().unwrap(),
            json!({"type": "pci", "version": "1.1.0",
                   "pci": {"pci-address": "0000:af:00.2", "rdma-device": "mlx5_2"}})
        );
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        remove(&path).unwrap();
        remove(&path).unwrap();
        assert_eq!(read(&path).unwrap(), None);
    }

    /// Every key of the spec's `pci` map, spelled as the spec spells it;
    /// absent facts are left out rather than written empty.
    #[test]
    fn every_pci_key_has_the_spec_name() {
        let full = PciDeviceInfo {
            pci_address: "0000:af:00.2".into(),
            pf_pci_address: Some("0000:af:00.0".into()),
            rdma_device: Some("mlx5_2".into()),
            representor_device: Some("pf0vf2".into()),
            vhost_net: Some("/dev/vhost-net".into()),
        };
        assert_eq!(
            full.to_value(),
            json!({"type": "pci", "version": "1.1.0", "pci": {
                "pci-address": "0000:af:00.2", "pf-pci-address": "0000:af:00.0",
                "rdma-device": "mlx5_2", "representor-device": "pf0vf2",
                "vhost-net": "/dev/vhost-net"}})
        );
        let bare = PciDeviceInfo {
            pci_address: "0000:af:00.2".into(),
            ..PciDeviceInfo::default()
        };
        assert_eq!(
            bare.to_value()["pci"],
            json!({"pci-address": "0000:af:00.2"})
        );
    }

    #[test]
    fn a_file_of_another_device_type_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("net1.json");
        let theirs = json!({"type": "vdpa", "version": "1.1.0",
            "vdpa": {"parent-device": "vdpa:0000:65:00.3", "driver": "vhost"}});
        fs::write(&path, serde_json::to_vec(&theirs).unwrap()).unwrap();
        assert_eq!(write_pci(&path, &info()).unwrap(), Written::LeftAlone);
        assert_eq!(read(&path).unwrap().unwrap(), theirs);
    }

    #[test]
    fn an_existing_file_keeps_what_we_do_not_know() {
        let root = tempfile::tempdir().unwrap();
        let path = root.path().join("x.json");
        fs::write(
            &path,
            serde_json::to_vec(&json!({"type": "pci", "version": "1.0.0",
                "pci": {"pci-address": "0000:af:00.2", "pf-pci-address": "0000:af:00.0"},
                "extra": 1}))
            .unwrap(),
        )
        .unwrap();
        assert_eq!(write_pci(&path, &info()).unwrap(), Written::Updated);
        assert_eq!(
            read(&path).unwrap().unwrap(),
            json!({"type": "pci", "version": "1.1.0", "extra": 1,
                   "pci": {"pci-address": "0000:af:00.2", "pf-pci-address": "0000:af:00.0",
                           "rdma-device": "mlx5_2"}})
        );
        fs::write(&path, b"garbage").unwrap();
        assert_eq!(write_pci(&path, &info()).unwrap(), Written::Updated);
        assert_eq!(read(&path).unwrap().unwrap()["type"], "pci");
    }
}
