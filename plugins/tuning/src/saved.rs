//! The link settings ADD replaced, saved so that DEL can put them back:
//! `<dataDir>/<containerID>_<ifname>.json`, one file per attachment.
//!
//! The file has the reference's name and keys (`mac`, `promisc`, `mtu`,
//! `allmulti`, `txQLen`, only those ADD changed, indented by one space), so
//! either plugin can restore what the other saved. One key is ours:
//! `network`, the network name, which GC needs: several networks may share
//! a data directory, and GC of one must not remove another's files. Files
//! without it (written by the reference) are left to DEL.
//!
//! Files are written whole through a temporary file and a rename. The data
//! directory is created with mode 0700 (the reference uses 0600, which
//! only root can enter anyway).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use libcni::error::{CniError, ErrorCode, ToCniError};
use libcni::state_file;

#[derive(Debug, thiserror::Error)]
pub enum SavedError {
    #[error("failed to read saved link settings {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("failed to save link settings to {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("failed to remove saved link settings {path}: {source}")]
    Remove { path: PathBuf, source: io::Error },
    #[error("failed to list the data directory {path}: {source}")]
    List { path: PathBuf, source: io::Error },
}

impl ToCniError for SavedError {
    fn to_cni_error(&self) -> CniError {
        let code = match self {
            SavedError::Read { .. }
            | SavedError::Write { .. }
            | SavedError::Remove { .. }
            | SavedError::List { .. } => ErrorCode::Io,
        };
        CniError::new(code, self.to_string())
    }
}

/// The original values of the settings ADD changed.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedLink {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promisc: Option<bool>,
    /// The reference leaves out 0 (Go's `omitempty`) and skips 0 on
    /// restore; a 0 read back is treated the same way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allmulti: Option<bool>,
    #[serde(rename = "txQLen", default, skip_serializing_if = "Option::is_none")]
    pub tx_queue_len: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
}

impl SavedLink {
    /// Keeps every value already saved and adds the others from `newer`:
    /// an ADD repeated without a DEL between must not save the values the
    /// first ADD set as the "originals".
    pub fn keep_older(self, newer: SavedLink) -> SavedLink {
        SavedLink {
            mac: self.mac.or(newer.mac),
            promisc: self.promisc.or(newer.promisc),
            mtu: self.mtu.filter(|m| *m != 0).or(newer.mtu),
            allmulti: self.allmulti.or(newer.allmulti),
            tx_queue_len: self.tx_queue_len.or(newer.tx_queue_len),
            network: newer.network.or(self.network),
        }
    }

    /// The JSON as the reference writes it (one-space indent).
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let format = serde_json::ser::PrettyFormatter::with_indent(b" ");
        let mut serializer = serde_json::Serializer::with_formatter(&mut out, format);
        // A struct of strings, numbers and booleans always serialises.
        if self.serialize(&mut serializer).is_err() {
            out.clear();
        }
        out
    }
}

/// The file of one attachment.
pub fn path_of(data_dir: &Path, container_id: &str, ifname: &str) -> PathBuf {
    data_dir.join(file_name_of(container_id, ifname))
}

fn file_name_of(container_id: &str, ifname: &str) -> String {
    format!("{container_id}_{ifname}.json")
}

/// What a saved-settings file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Loaded {
    Missing,
    /// The bytes as read (to put back if an ADD that replaced them fails)
    /// and what they say; `None` when they are not a settings object.
    Present {
        bytes: Vec<u8>,
        link: Option<SavedLink>,
    },
}

pub fn load(path: &Path) -> Result<Loaded, SavedError> {
    match fs::read(path) {
        Ok(bytes) => {
            let link = serde_json::from_slice(&bytes).ok();
            Ok(Loaded::Present { bytes, link })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Loaded::Missing),
        Err(source) => Err(SavedError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

pub fn store(path: &Path, bytes: &[u8]) -> Result<(), SavedError> {
    state_file::write_atomically(path, bytes).map_err(|source| SavedError::Write {
        path: path.to_path_buf(),
        source,
    })
}

pub fn remove(path: &Path) -> Result<(), SavedError> {
    state_file::remove_if_exists(path).map_err(|source| SavedError::Remove {
        path: path.to_path_buf(),
        source,
    })
}

/// `data_dir` reached from its allowed state folder without a link (issue
/// 28): a link there would take ADD's writes, DEL's reads and GC's
/// removals to another folder. With `create` (ADD) the missing folders are
/// made on the way (0700, as the state file writer makes them).
pub fn confine_folder(data_dir: &Path, create: bool) -> Result<(), crate::config::ConfigError> {
    let mode = create.then_some(0o700);
    libcni::confine::confine_folder("dataDir", libcni::confine::Place::State, data_dir, mode)?;
    Ok(())
}

/// The files in `data_dir` that `network` saved for attachments other than
/// `keep` (GC). Files of other networks, of the reference, temporaries and
/// anything unreadable are not listed.
pub fn stale_files(
    data_dir: &Path,
    network: &str,
    keep: &[(String, String)],
) -> Result<Vec<PathBuf>, SavedError> {
    let entries = match fs::read_dir(data_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(SavedError::List {
                path: data_dir.to_path_buf(),
                source,
            })
        }
    };
    let kept: Vec<String> = keep
        .iter()
        .map(|(container_id, ifname)| file_name_of(container_id, ifname))
        .collect();
    let mut stale = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| SavedError::List {
            path: data_dir.to_path_buf(),
            source,
        })?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".json") || state_file::is_temporary(&name) || kept.contains(&name) {
            continue;
        }
        // Only regular files, as this plugin and the reference write them:
        // never a link, whose target GC would read and whose name it
        // would remove.
        if !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let path = entry.path();
        match load(&path) {
            Ok(Loaded::Present {
                link: Some(link), ..
            }) if link.network.as_deref() == Some(network) => stale.push(path),
            Ok(_) => {}
            Err(e) => log::warn!("GC skips {}: {e}", path.display()),
        }
    }
    stale.sort();
    Ok(stale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_the_reference_keys_and_layout() {
        let saved = SavedLink {
            mac: Some("02:00:00:00:00:01".into()),
            promisc: Some(false),
            mtu: Some(1500),
            allmulti: None,
            tx_queue_len: Some(1000),
            network: Some("net1".into()),
        };
        assert_eq!(
            String::from_utf8(saved.to_json()).unwrap(),
            "{\n \"mac\": \"02:00:00:00:00:01\",\n \"promisc\": false,\n \"mtu\": 1500,\n \
             \"txQLen\": 1000,\n \"network\": \"net1\"\n}"
        );
        // What the reference writes reads back.
        let reference: SavedLink =
            serde_json::from_str("{\n \"mtu\": 9000,\n \"allmulti\": true\n}").unwrap();
        assert_eq!(reference.mtu, Some(9000));
        assert_eq!(reference.allmulti, Some(true));
        assert_eq!(reference.network, None);
    }

    #[test]
    fn older_values_win_when_merging() {
        let older = SavedLink {
            mtu: Some(1500),
            network: Some("old".into()),
            ..SavedLink::default()
        };
        let newer = SavedLink {
            mtu: Some(9000),
            promisc: Some(false),
            network: Some("net1".into()),
            ..SavedLink::default()
        };
        let merged = older.keep_older(newer);
        assert_eq!(merged.mtu, Some(1500));
        assert_eq!(merged.promisc, Some(false));
        assert_eq!(merged.network.as_deref(), Some("net1"));
    }

    #[test]
    fn stale_files_are_this_networks_files_of_other_attachments() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, network: Option<&str>| {
            let link = SavedLink {
                mtu: Some(1500),
                network: network.map(str::to_string),
                ..SavedLink::default()
            };
            fs::write(dir.path().join(name), link.to_json()).unwrap();
        };
        write("kept_eth0.json", Some("net1"));
        write("gone_eth0.json", Some("net1"));
        write("gone_eth1.json", Some("net2"));
        write("reference_eth0.json", None);
        fs::write(dir.path().join("broken_eth0.json"), b"{").unwrap();
        fs::write(dir.path().join(".gone_net1.json.1.0.tmp"), b"{}").unwrap();
        // A link named like a saved file, to a file of this network's
        // outside the folder: GC neither reads through it nor lists it.
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("victim.json");
        let link = SavedLink {
            network: Some("net1".into()),
            ..SavedLink::default()
        };
        fs::write(&target, link.to_json()).unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join("linked_eth0.json")).unwrap();
        let keep = [("kept".to_string(), "eth0".to_string())];
        let stale = stale_files(dir.path(), "net1", &keep).unwrap();
        assert_eq!(stale, [dir.path().join("gone_eth0.json")]);
        assert!(stale_files(&dir.path().join("none"), "net1", &keep)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn load_store_remove() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_of(&dir.path().join("sub"), "ctr_1", "eth0");
        assert!(path.ends_with("sub/ctr_1_eth0.json"));
        assert_eq!(load(&path).unwrap(), Loaded::Missing);
        let link = SavedLink {
            promisc: Some(true),
            ..SavedLink::default()
        };
        store(&path, &link.to_json()).unwrap();
        assert_eq!(
            load(&path).unwrap(),
            Loaded::Present {
                bytes: link.to_json(),
                link: Some(link)
            }
        );
        fs::write(&path, b"not json").unwrap();
        assert!(matches!(
            load(&path).unwrap(),
            Loaded::Present { link: None, .. }
        ));
        remove(&path).unwrap();
        remove(&path).unwrap();
        assert_eq!(load(&path).unwrap(), Loaded::Missing);
    }
}
