//! What ADD changed on the host, kept until DEL has put it back.
//!
//! Where the original is kept: in two places, on purpose.
//!
//! - The link's alias (`IFLA_IFALIAS`) holds its host name while it is in
//!   the pod, as the reference does. The alias travels with the device:
//!   when the pod's namespace is destroyed, the kernel returns a physical
//!   device to the initial namespace under its pod name, and the alias is
//!   how DEL (ours or the reference's) recognises it there. Keeping the
//!   reference's format also lets either plugin's DEL undo the other's ADD.
//! - A state file per attachment, `<dataDir>/<network>/<containerID>@<ifname>.json`,
//!   holds what the alias cannot: MAC, MTU, whether the link was up, the
//!   alias it had before, the RDMA devices moved with it and what was
//!   done to the device-info file. It is written before the first change,
//!   so a crash halfway through ADD still leaves DEL what it needs, and is
//!   removed once DEL is done. `@` cannot occur in a container ID, so the
//!   name splits one way only.
//!
//! Without a state file (an ADD by the reference plugin, or a lost file)
//! DEL restores the name from the alias and leaves MAC and MTU as found.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use libcni::state_file;
use serde::{Deserialize, Serialize};

/// Layout version of the state files.
pub const STATE_VERSION: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot write host-device state {}: {source}", .path.display())]
    Write { path: PathBuf, source: io::Error },
    #[error("cannot remove host-device state {}: {source}", .path.display())]
    Remove { path: PathBuf, source: io::Error },
    #[error("cannot read host-device state directory {}: {source}", .path.display())]
    List { path: PathBuf, source: io::Error },
}

/// A host link as it was before ADD.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SavedLink {
    pub name: String,
    pub index: u32,
    /// `aa:bb:...`; empty for a link without a hardware address.
    pub mac: String,
    pub mtu: u32,
    pub up: bool,
    /// The alias it had; ADD replaces it with the host name.
    #[serde(default)]
    pub alias: Option<String>,
    /// The kernel gives it back to the initial namespace when the pod's
    /// namespace is destroyed (a physical device); a virtual one (veth,
    /// macvlan) is destroyed with the namespace instead.
    #[serde(default)]
    pub returns_to_host: bool,
}

/// What ADD did to the device-info file, so DEL can undo it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum DeviceInfoChange {
    /// ADD created it: DEL removes it.
    Created,
    /// It was there (from the runtime): DEL leaves it to its owner.
    Updated,
}

/// One attachment's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttachmentState {
    pub version: u32,
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
    /// `CNI_NETNS` of the ADD: DEL without one (containerd's second DEL)
    /// looks there.
    pub netns: String,
    /// DPDK mode: nothing was moved.
    #[serde(default)]
    pub dpdk: bool,
    /// The host link that went into the pod; `None` in DPDK mode.
    #[serde(default)]
    pub host_link: Option<SavedLink>,
    #[serde(default)]
    pub pci_address: Option<String>,
    /// RDMA devices moved into the pod with the link (exclusive mode).
    #[serde(default)]
    pub rdma_devices: Vec<String>,
    #[serde(default)]
    pub device_info: Option<DeviceInfoChange>,
    #[serde(default)]
    pub device_info_file: Option<PathBuf>,
}

/// The state files of one network.
#[derive(Debug, Clone)]
pub struct StateStore {
    dir: PathBuf,
}

impl StateStore {
    /// `network` is a validated CNI network name: one path component.
    pub fn new(data_dir: &Path, network: &str) -> StateStore {
        StateStore {
            dir: data_dir.join(network),
        }
    }

    pub fn path(&self, container_id: &str, ifname: &str) -> PathBuf {
        self.dir.join(format!("{container_id}@{ifname}.json"))
    }

    /// The record of an attachment. An unreadable or undecodable file
    /// counts as none (logged): DEL then works from the alias alone.
    pub fn load(&self, container_id: &str, ifname: &str) -> Option<AttachmentState> {
        read(&self.path(container_id, ifname))
    }

    pub fn save(&self, state: &AttachmentState) -> Result<(), StateError> {
        let path = self.path(&state.container_id, &state.ifname);
        // Plain data of strings and numbers always serialises.
        let bytes = serde_json::to_vec_pretty(state).unwrap_or_default();
        state_file::write_atomically(&path, &bytes)
            .map_err(|source| StateError::Write { path, source })
    }

    pub fn remove(&self, container_id: &str, ifname: &str) -> Result<(), StateError> {
        let path = self.path(container_id, ifname);
        state_file::remove_if_exists(&path).map_err(|source| StateError::Remove { path, source })
    }

    /// Every record of the network (GC).
    pub fn list(&self) -> Result<Vec<AttachmentState>, StateError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(StateError::List {
                    path: self.dir.clone(),
                    source,
                })
            }
        };
        let mut states = Vec::new();
        for entry in entries.filter_map(|e| e.ok()) {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if state_file::is_temporary(name) || !name.ends_with(".json") {
                continue;
            }
            states.extend(read(&entry.path()));
        }
        states.sort_by(|a, b| (&a.container_id, &a.ifname).cmp(&(&b.container_id, &b.ifname)));
        Ok(states)
    }
}

fn read(path: &Path) -> Option<AttachmentState> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
        Err(e) => {
            log::warn!("cannot read {}: {e}; going on without it", path.display());
            return None;
        }
    };
    match serde_json::from_slice::<AttachmentState>(&bytes) {
        Ok(state) if state.version == STATE_VERSION => Some(state),
        Ok(state) => {
            log::warn!(
                "{} has layout version {}, not {STATE_VERSION}; going on without it",
                path.display(),
                state.version
            );
            None
        }
        Err(e) => {
            log::warn!("cannot decode {}: {e}; going on without it", path.display());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(cid: &str, ifname: &str) -> AttachmentState {
        AttachmentState {
            version: STATE_VERSION,
            container_id: cid.into(),
            ifname: ifname.into(),
            netns: "/run/netns/x".into(),
            dpdk: false,
            host_link: Some(SavedLink {
                name: "eth1".into(),
                index: 4,
                mac: "02:00:00:00:00:01".into(),
                mtu: 9000,
                up: true,
                alias: None,
                returns_to_host: true,
            }),
            pci_address: Some("0000:af:00.2".into()),
            rdma_devices: vec!["mlx5_2".into()],
            device_info: Some(DeviceInfoChange::Created),
            device_info_file: Some("/run/x.json".into()),
        }
    }

    #[test]
    fn records_round_trip_list_and_go() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::new(dir.path(), "net1");
        assert_eq!(store.load("c1", "net1"), None);
        assert!(store.list().unwrap().is_empty());
        let a = state("c-1", "net1");
        let b = state("c", "1-net1");
        store.save(&a).unwrap();
        store.save(&b).unwrap();
        assert_eq!(store.load("c-1", "net1"), Some(a.clone()));
        assert_eq!(store.list().unwrap(), vec![b.clone(), a.clone()]);
        store.remove("c-1", "net1").unwrap();
        store.remove("c-1", "net1").unwrap();
        assert_eq!(store.list().unwrap(), vec![b]);
    }

    #[test]
    fn unreadable_records_count_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::new(dir.path(), "n");
        fs::create_dir_all(dir.path().join("n")).unwrap();
        fs::write(store.path("c", "eth0"), b"{not json").unwrap();
        assert_eq!(store.load("c", "eth0"), None);
        let mut future = state("c", "eth1");
        future.version = 99;
        fs::write(
            store.path("c", "eth1"),
            serde_json::to_vec(&future).unwrap(),
        )
        .unwrap();
        assert_eq!(store.load("c", "eth1"), None);
        assert!(store.list().unwrap().is_empty());
    }
}
