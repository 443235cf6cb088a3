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

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use rustix::fs::OFlags;

use crate::config_file::{self, Symlinks};
use crate::confine::{ConfineError, Confined, Place, Places};
use crate::error::{CniError, ErrorCode, ToCniError};

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
    /// The path is outside the device-info folders (code 7).
    #[error(transparent)]
    Confine(#[from] ConfineError),
}

impl ToCniError for DeviceInfoError {
    /// A refused path is the configuration's fault (7); the rest is I/O.
    fn to_cni_error(&self) -> CniError {
        match self {
            DeviceInfoError::Confine(e) => e.to_cni_error(),
            other => CniError::new(ErrorCode::Io, other.to_string()),
        }
    }
}

/// The configuration key the path comes from.
pub const KEY: &str = "runtimeConfig.CNIDeviceInfoFile";

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
/// the `pci` map replace theirs, other keys and maps stay, and the file
/// keeps its owner and mode (it is rewritten in place, never replaced or
/// chmod'ed). A file that is not a JSON object, or whose `type` is another
/// device type, is left alone. `path` must be inside the device-info
/// folders ([`Place::DeviceInfo`]); nothing on the way may be a link.
pub fn write_pci(path: &Path, info: &PciDeviceInfo) -> Result<Written, DeviceInfoError> {
    write_pci_in(&Places::node()?, path, info)
}

/// As [`write_pci`], with the node's places given.
pub fn write_pci_in(
    places: &Places,
    path: &Path,
    info: &PciDeviceInfo,
) -> Result<Written, DeviceInfoError> {
    let confined = places.confine(KEY, Place::DeviceInfo, path)?;
    let read_err = |source| DeviceInfoError::Read {
        path: path.to_path_buf(),
        source,
    };
    let write_err = |source| DeviceInfoError::Write {
        path: path.to_path_buf(),
        source,
    };
    let existing = match confined.open(OFlags::RDWR | OFlags::NONBLOCK, 0, None) {
        Ok(file) => Some(file),
        Err(ConfineError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => None,
        Err(ConfineError::Io { source, .. }) => return Err(read_err(source)),
        Err(e) => return Err(e.into()),
    };
    let Some(file) = existing else {
        create_new(&confined, &to_bytes(&info.to_value())).map_err(write_err)?;
        return Ok(Written::Created);
    };
    let bytes = config_file::read_bounded_file(
        file.try_clone().map_err(read_err)?,
        path,
        config_file::DEVICE_INFO_CAP,
    )
    .map_err(read_err)?;
    let theirs = match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(theirs)) => theirs,
        Ok(_) | Err(_) => {
            log::warn!(
                "{} is not a device-info object; left as it is",
                path.display()
            );
            return Ok(Written::LeftAlone);
        }
    };
    if let Some(kind) = theirs
        .get("type")
        .and_then(Value::as_str)
        .filter(|k| *k != "pci")
    {
        log::info!(
            "{} describes a {kind:?} device; left as it is",
            path.display()
        );
        return Ok(Written::LeftAlone);
    }
    rewrite_in_place(&file, &to_bytes(&merge(theirs, info.to_value()))).map_err(write_err)?;
    Ok(Written::Updated)
}

fn to_bytes(value: &Value) -> Vec<u8> {
    // A value of strings only always serialises.
    let mut bytes = serde_json::to_vec_pretty(value).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// Replaces the content of an open file, keeping the file itself.
fn rewrite_in_place(file: &File, bytes: &[u8]) -> io::Result<()> {
    file.set_len(0)?;
    file.write_all_at(bytes, 0)
}

/// Removes the file; one that is already gone is fine. Callers remove
/// only a file their ADD created ([`Written::Created`], recorded), and
/// only inside the device-info folders, never through a link.
pub fn remove(path: &Path) -> Result<(), DeviceInfoError> {
    remove_in(&Places::node()?, path)
}

/// As [`remove`], with the node's places given.
pub fn remove_in(places: &Places, path: &Path) -> Result<(), DeviceInfoError> {
    let confined = places.confine(KEY, Place::DeviceInfo, path)?;
    confined.remove().map_err(|e| match e {
        ConfineError::Io { source, .. } => DeviceInfoError::Remove {
            path: path.to_path_buf(),
            source,
        },
        other => other.into(),
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

/// Creates the file, with its missing folders (0755): the runtime
/// (Multus) reads it as another user than the plugin may run as, so unlike
/// private state it is world-readable (0644). Written under a temporary
/// name made with `O_EXCL` and renamed without replacing: a file that
/// appeared meanwhile is someone else's.
fn create_new(confined: &Confined, bytes: &[u8]) -> io::Result<()> {
    use rustix::fs::{Mode, RenameFlags};
    let (parent, name) = confined.parent_creating(0o755).map_err(io::Error::other)?;
    let tmp = format!(
        ".{}.{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id(),
        crate::confine::unpredictable()
    );
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let file = File::from(rustix::fs::openat(
        &parent,
        &tmp,
        flags,
        Mode::from_raw_mode(0o644),
    )?);
    let written = (|| {
        // The umask must not take the runtime's read access away.
        rustix::fs::fchmod(&file, Mode::from_raw_mode(0o644))?;
        file.write_all_at(bytes, 0)?;
        rustix::fs::renameat_with(&parent, &tmp, &parent, name, RenameFlags::NOREPLACE)?;
        Ok(())
    })();
    if written.is_err() {
        let _ = rustix::fs::unlinkat(&parent, &tmp, rustix::fs::AtFlags::empty());
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    /// The test's folder allowed for device-info files.
    fn places(dir: &Path) -> Places {
        let policy = crate::confine::Policy {
            allow: crate::confine::Allow {
                device_info: vec![dir.to_path_buf()],
                ..Default::default()
            },
            ..Default::default()
        };
        Places::with_policy(policy, "/etc/cni/cni-rs-policy.json")
    }

    fn info() -> PciDeviceInfo {
        PciDeviceInfo {
            pci_address: "0000:af:00.2".into(),
            rdma_device: Some("mlx5_2".into()),
            ..PciDeviceInfo::default()
        }
    }

    #[test]
    fn a_new_file_is_created_with_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("devinfo/cni/net1-abc-net1.json");
        assert_eq!(
            write_pci_in(&places(dir.path()), &path, &info()).unwrap(),
            Written::Created
        );
        assert_eq!(
            read(&path).unwrap().unwrap(),
            json!({"type": "pci", "version": "1.1.0",
                   "pci": {"pci-address": "0000:af:00.2", "rdma-device": "mlx5_2"}})
        );
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        remove_in(&places(dir.path()), &path).unwrap();
        remove_in(&places(dir.path()), &path).unwrap();
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
        assert_eq!(
            write_pci_in(&places(dir.path()), &path, &info()).unwrap(),
            Written::LeftAlone
        );
        assert_eq!(read(&path).unwrap().unwrap(), theirs);
    }

    #[test]
    fn an_existing_file_keeps_what_we_do_not_know() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.json");
        fs::write(
            &path,
            serde_json::to_vec(&json!({"type": "pci", "version": "1.0.0",
                "pci": {"pci-address": "0000:af:00.2", "pf-pci-address": "0000:af:00.0"},
                "extra": 1}))
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            write_pci_in(&places(dir.path()), &path, &info()).unwrap(),
            Written::Updated
        );
        assert_eq!(
            read(&path).unwrap().unwrap(),
            json!({"type": "pci", "version": "1.1.0", "extra": 1,
                   "pci": {"pci-address": "0000:af:00.2", "pf-pci-address": "0000:af:00.0",
                           "rdma-device": "mlx5_2"}})
        );
        // Not ours to replace: left as it is.
        fs::write(&path, b"garbage").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(
            write_pci_in(&places(dir.path()), &path, &info()).unwrap(),
            Written::LeftAlone
        );
        assert_eq!(fs::read(&path).unwrap(), b"garbage");
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "never chmod'ed");
    }

    /// Issue 28's finding 2: a device-info path outside the device-info
    /// folders is refused (code 7), and links inside them are not
    /// followed: nothing outside is read, merged, chmod'ed or removed.
    #[test]
    fn paths_outside_or_through_links_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let allowed = dir.path().join("devinfo");
        fs::create_dir(&allowed).unwrap();
        let places = places(&allowed);
        let victim = dir.path().join("config.json");
        fs::write(&victim, br#"{"auths":{}}"#).unwrap();
        fs::set_permissions(&victim, fs::Permissions::from_mode(0o600)).unwrap();
        let e = write_pci_in(&places, &victim, &info()).unwrap_err();
        assert_eq!(e.to_cni_error().code, ErrorCode::InvalidNetworkConfig);
        assert!(
            e.to_string().starts_with(&format!(
                "runtimeConfig.CNIDeviceInfoFile {victim:?} is outside the folders allowed for deviceInfo"
            )),
            "{e}"
        );
        assert!(remove_in(&places, &victim).is_err());
        let link = allowed.join("link.json");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(write_pci_in(&places, &link, &info()).is_err());
        remove_in(&places, &link).unwrap();
        assert!(!link.exists(), "the link itself goes");
        assert_eq!(fs::read(&victim).unwrap(), br#"{"auths":{}}"#);
        let mode = fs::metadata(&victim).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
