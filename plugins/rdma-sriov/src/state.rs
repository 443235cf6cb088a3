//! Per-attachment state: everything DEL, CHECK and GC need, written before
//! the first change of an ADD and updated as each step is taken, so that an
//! ADD cut short (failure, crash, kill) can still be undone by a later DEL.
//!
//! Layout: `<stateDir>/attachments/<network>/<containerID>:<ifname>.json`.
//! The colon cannot occur in a container ID or an interface name, so every
//! attachment has its own file; each write goes to a temporary file that is
//! renamed over the old one, so a reader never sees half a record.

use std::fs::{self, DirBuilder, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use ipnetwork::IpNetwork;
use libcni::source_routing::SourceRoute;
use serde::{Deserialize, Serialize};

use crate::hwaddr::MacAddr;
use crate::pf::{VfSetting, VfState};

/// Bumped when the record changes incompatibly.
pub const STATE_VERSION: u32 = 1;

pub const DEFAULT_STATE_DIR: &str = "/var/lib/cni/rdma-sriov";

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot write state file {}: {source}", .path.display())]
    Write { path: PathBuf, source: io::Error },
    #[error("cannot read state file {}: {source}", .path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("corrupt state file {}: {source}", .path.display())]
    Corrupt {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("cannot remove state file {}: {source}", .path.display())]
    Remove { path: PathBuf, source: io::Error },
}

/// The VF netdev as the host had it, to give it back the same way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostNetdev {
    pub name: String,
    pub mac: MacAddr,
    pub mtu: u32,
    pub up: bool,
}

/// Where the VF netdev is, as far as the plugin has moved it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "in", rename_all = "camelCase")]
pub enum NetdevLocation {
    /// In the host namespace under `name`.
    Host { name: String },
    /// In the pod namespace under `name` (the temporary name, then
    /// CNI_IFNAME once renamed).
    Pod { name: String },
}

/// The RDMA device of the VF.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RdmaAttachment {
    pub device: String,
    /// Exclusive mode: the device goes with the pod.
    pub move_with_pod: bool,
    /// A move into the pod was started (undo looks for it there first).
    pub in_pod: bool,
}

/// The source routing of a rail ([`crate::rail`]), recorded before its
/// first rule is added.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RailRecord {
    /// The rail's routing table.
    pub table: u32,
    /// The addresses whose rules look it up, with the gateway of the
    /// table's default route of their family.
    pub sources: Vec<SourceRoute>,
}

/// One attachment's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttachmentState {
    pub version: u32,
    pub network: String,
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
    /// The pod's netns path as given to ADD.
    pub netns: String,
    #[serde(rename = "pciAddress")]
    pub pci: String,
    pub pf: String,
    pub vf_index: u32,
    /// Set when the VF is bound to a userspace driver and has no netdev.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub userspace_driver: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_netdev: Option<HostNetdev>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netdev_location: Option<NetdevLocation>,
    /// The PF-side settings before ADD.
    pub original_vf: VfState,
    /// PF-side settings ADD applied (or started to apply), in order.
    #[serde(default)]
    pub applied: Vec<VfSetting>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdma: Option<RdmaAttachment>,
    /// IPAM ADD was started, so an IPAM DEL is owed.
    #[serde(default)]
    pub ipam_allocated: bool,
    /// The network configuration of ADD, for an IPAM DEL when the runtime
    /// gives none (GC).
    pub netconf: serde_json::Value,
    /// What ADD reported, for CHECK.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_mac: Option<MacAddr>,
    #[serde(default)]
    pub addresses: Vec<IpNetwork>,
    /// The device-info file ADD wrote (or updated), removed by teardown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_info_file: Option<PathBuf>,
    /// The rail's rules and table, removed by teardown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rail: Option<RailRecord>,
    /// ADD finished; until then the record describes a partial setup.
    #[serde(default)]
    pub complete: bool,
}

/// The attachment records of one state directory.
#[derive(Debug, Clone)]
pub struct StateStore {
    dir: PathBuf,
}

impl StateStore {
    pub fn new(state_dir: &Path) -> StateStore {
        StateStore {
            dir: state_dir.join("attachments"),
        }
    }

    pub fn network_dir(&self, network: &str) -> PathBuf {
        self.dir.join(network)
    }

    /// The record's path. The three names are validated by the skeleton
    /// (no `/`, no `:` in IDs and interface names).
    pub fn path(&self, network: &str, container_id: &str, ifname: &str) -> PathBuf {
        self.network_dir(network)
            .join(format!("{container_id}:{ifname}.json"))
    }

    pub fn save(&self, state: &AttachmentState) -> Result<(), StateError> {
        let path = self.path(&state.network, &state.container_id, &state.ifname);
        let bytes = serde_json::to_vec_pretty(state).map_err(|e| StateError::Write {
            path: path.clone(),
            source: io::Error::other(e),
        })?;
        write_atomically(&path, &bytes).map_err(|source| StateError::Write { path, source })
    }

    pub fn load(
        &self,
        network: &str,
        container_id: &str,
        ifname: &str,
    ) -> Result<Option<AttachmentState>, StateError> {
        let path = self.path(network, container_id, ifname);
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|source| StateError::Corrupt { path, source }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(StateError::Read { path, source }),
        }
    }

    /// Removes a record; a missing one is already removed.
    pub fn remove(
        &self,
        network: &str,
        container_id: &str,
        ifname: &str,
    ) -> Result<(), StateError> {
        let path = self.path(network, container_id, ifname);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(StateError::Remove { path, source }),
        }
    }

    /// Every record of `network`; unreadable ones come back as errors so
    /// GC can report them without stopping.
    pub fn list(&self, network: &str) -> Vec<Result<AttachmentState, StateError>> {
        let dir = self.network_dir(network);
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Vec::new(),
            Err(source) => return vec![Err(StateError::Read { path: dir, source })],
        };
        let mut paths: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        paths.sort();
        paths
            .into_iter()
            .map(|path| {
                let bytes = fs::read(&path).map_err(|source| StateError::Read {
                    path: path.clone(),
                    source,
                })?;
                serde_json::from_slice(&bytes)
                    .map_err(|source| StateError::Corrupt { path, source })
            })
            .collect()
    }
}

/// Creates `dir` and its parents with mode 0700 (state may hold MACs and
/// addresses of other tenants' pods).
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// Writes `data` to a temporary file beside `path` (mode 0600), flushes it
/// and renames it over `path`.
pub fn write_atomically(path: &Path, data: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::other("state path has no parent directory"))?;
    create_private_dir(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // An unpredictable name made with O_EXCL | O_NOFOLLOW: a file or link
    // planted at a guessable name is never opened, let alone truncated.
    let tmp = dir.join(format!(
        ".{name}.tmp-{}-{:016x}",
        std::process::id(),
        libcni::confine::unpredictable()
    ));
    let written = (|| {
        let mut file = OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        file.write_all(data)?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn sample() -> AttachmentState {
        AttachmentState {
            version: STATE_VERSION,
            network: "rdma-net".into(),
            container_id: "c1".into(),
            ifname: "net1".into(),
            netns: "/run/netns/x".into(),
            pci: "0000:af:00.2".into(),
            pf: "pf0".into(),
            vf_index: 0,
            userspace_driver: None,
            host_netdev: Some(HostNetdev {
                name: "vf0".into(),
                mac: "02:00:00:00:00:01".parse().unwrap(),
                mtu: 1500,
                up: false,
            }),
            netdev_location: Some(NetdevLocation::Pod {
                name: "net1".into(),
            }),
            original_vf: VfState::default(),
            applied: vec![VfSetting::Trust { on: true }],
            rdma: Some(RdmaAttachment {
                device: "mlx5_2".into(),
                move_with_pod: true,
                in_pod: true,
            }),
            ipam_allocated: true,
            netconf: serde_json::json!({"name":"rdma-net"}),
            pod_mac: None,
            addresses: vec!["10.1.0.2/24".parse().unwrap()],
            device_info_file: Some(PathBuf::from("/run/devinfo/x.json")),
            rail: Some(RailRecord {
                table: 100,
                sources: vec![SourceRoute {
                    address: "10.1.0.2/24".parse().unwrap(),
                    gateway: Some("10.1.0.1".parse().unwrap()),
                }],
            }),
            complete: true,
        }
    }

    #[test]
    fn save_load_list_remove() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::new(dir.path());
        assert!(store.load("rdma-net", "c1", "net1").unwrap().is_none());
        let state = sample();
        store.save(&state).unwrap();
        let path = store.path("rdma-net", "c1", "net1");
        assert!(path.ends_with("attachments/rdma-net/c1:net1.json"));
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dir_mode = fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(dir_mode, 0o700);
        assert_eq!(
            store.load("rdma-net", "c1", "net1").unwrap(),
            Some(state.clone())
        );
        let listed = store.list("rdma-net");
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].as_ref().unwrap(), &state);
        assert!(store.list("other").is_empty());
        store.remove("rdma-net", "c1", "net1").unwrap();
        store.remove("rdma-net", "c1", "net1").unwrap();
        assert!(store.load("rdma-net", "c1", "net1").unwrap().is_none());
        // No temporary files are left behind.
        assert_eq!(fs::read_dir(path.parent().unwrap()).unwrap().count(), 0);
    }

    #[test]
    fn corrupt_record_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::new(dir.path());
        let path = store.path("n", "c", "eth0");
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, b"{not json").unwrap();
        assert!(matches!(
            store.load("n", "c", "eth0"),
            Err(StateError::Corrupt { .. })
        ));
        assert!(store.list("n")[0].is_err());
    }
}
