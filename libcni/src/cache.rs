//! The runtime's record of each attachment, in the Go libcni format.
//!
//! `<cache dir>/results/<network>-<container id>-<ifname>` holds a
//! `cniCacheV1` object: the configuration the attachment was made with
//! (base64, as Go encodes `[]byte`), the runtime arguments and the final
//! ADD result. Files written by Go libcni and by this module are
//! interchangeable, so a runtime can switch implementations with
//! attachments in place. Older Go versions wrote the bare result; those
//! files are still read.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use base64::Engine;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::state_file::write_atomically;
use crate::types::{AnyResult, ResultError};
use crate::version::SpecVersion;

/// The `kind` of the current cache format.
pub const CACHE_KIND_V1: &str = "cniCacheV1";

/// Where runtimes keep CNI state unless told otherwise.
pub const DEFAULT_CACHE_DIR: &str = "/var/lib/cni";

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error(
        "cache file path requires network name ({network:?}), container ID ({container_id:?}), and interface name ({ifname:?})"
    )]
    IncompleteKey {
        network: String,
        container_id: String,
        ifname: String,
    },
    #[error("failed to unmarshal cached network {network:?} config: {source}")]
    Decode {
        network: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("read cached network {network:?} config has wrong kind: {kind}")]
    WrongKind { network: String, kind: String },
    #[error(transparent)]
    Result(#[from] ResultError),
    #[error("failed to convert cached result to config version {version:?}: {source}")]
    Convert {
        version: String,
        #[source]
        source: ResultError,
    },
    #[error("failed to write {}: {source}", .path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to remove {}: {source}", .path.display())]
    Remove {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to list {}: {source}", .path.display())]
    List {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// One cache file, field for field as Go libcni writes it (same keys, same
/// order, same omissions).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheEntry {
    #[serde(default)]
    pub kind: String,
    #[serde(rename = "containerId", default)]
    pub container_id: String,
    /// The configuration list (or single configuration) used for ADD.
    #[serde(with = "go_bytes", default)]
    pub config: Vec<u8>,
    #[serde(rename = "ifName", default)]
    pub ifname: String,
    #[serde(rename = "networkName", default)]
    pub network_name: String,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub netns: String,
    #[serde(
        rename = "cniArgs",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub cni_args: Vec<(String, String)>,
    #[serde(
        rename = "capabilityArgs",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Map::is_empty"
    )]
    pub capability_args: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
}

impl CacheEntry {
    pub fn is_v1(&self) -> bool {
        self.kind == CACHE_KIND_V1
    }
}

fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Go encodes `[]byte` as a standard-alphabet, padded base64 string, and
/// decodes `null` as empty.
mod go_bytes {
    use super::*;

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(Vec::new()),
            Some(s) => base64::engine::general_purpose::STANDARD
                .decode(s.as_bytes())
                .map_err(serde::de::Error::custom),
        }
    }
}

/// A cached attachment, as listed for GC.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkAttachment {
    pub container_id: String,
    pub network: String,
    pub ifname: String,
    pub config: Vec<u8>,
    pub netns: String,
    pub cni_args: Vec<(String, String)>,
    pub capability_args: Map<String, Value>,
}

/// The result cache under one cache directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultCache {
    dir: PathBuf,
}

impl Default for ResultCache {
    fn default() -> Self {
        ResultCache::new(DEFAULT_CACHE_DIR)
    }
}

impl ResultCache {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        ResultCache { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn results_dir(&self) -> PathBuf {
        self.dir.join("results")
    }

    /// The file of attachment (`network`, `container_id`, `ifname`).
    pub fn file_path(
        &self,
        network: &str,
        container_id: &str,
        ifname: &str,
    ) -> Result<PathBuf, CacheError> {
        if network.is_empty() || container_id.is_empty() || ifname.is_empty() {
            return Err(CacheError::IncompleteKey {
                network: network.to_string(),
                container_id: container_id.to_string(),
                ifname: ifname.to_string(),
            });
        }
        Ok(self
            .results_dir()
            .join(format!("{network}-{container_id}-{ifname}")))
    }

    /// Writes the record of an attachment, replacing any previous one
    /// atomically: a reader sees the old file or the new one, never a
    /// partial one, even if this process dies mid-write. The directory is
    /// created 0700 and the file 0600: results name containers and
    /// addresses, which are not for other users.
    ///
    /// No fsync, as Go libcni: it cost 1.75 ms of every ADD here, and what a
    /// crash can leave (an empty or missing file) reads as no cache at all;
    /// DEL and CHECK then go on without a cached result, which every plugin
    /// handles.
    pub fn write(&self, entry: &CacheEntry) -> Result<(), CacheError> {
        let path = self.file_path(&entry.network_name, &entry.container_id, &entry.ifname)?;
        // A struct of strings, bytes and JSON values always serialises.
        let data = serde_json::to_vec(entry).unwrap_or_default();
        write_atomically(&path, &data).map_err(|source| CacheError::Write { path, source })
    }

    /// The raw file of an attachment, `None` when there is none (or it
    /// cannot be read: the cache is advisory).
    fn read_file(
        &self,
        network: &str,
        container_id: &str,
        ifname: &str,
    ) -> Result<Option<Vec<u8>>, CacheError> {
        let path = self.file_path(network, container_id, ifname)?;
        Ok(std::fs::read(path).ok())
    }

    /// The `cniCacheV1` record of an attachment; `None` when there is no
    /// file. A file that is not a v1 record is an error.
    pub fn read_entry(
        &self,
        network: &str,
        container_id: &str,
        ifname: &str,
    ) -> Result<Option<CacheEntry>, CacheError> {
        let Some(data) = self.read_file(network, container_id, ifname)? else {
            return Ok(None);
        };
        let entry: CacheEntry =
            serde_json::from_slice(&data).map_err(|source| CacheError::Decode {
                network: network.to_string(),
                source,
            })?;
        if !entry.is_v1() {
            return Err(CacheError::WrongKind {
                network: network.to_string(),
                kind: entry.kind,
            });
        }
        Ok(Some(entry))
    }

    /// The cached ADD result of an attachment, converted to `version` (the
    /// configuration's) so plugins get `prevResult` in the version they
    /// were configured with. `None` when nothing is cached.
    pub fn read_result(
        &self,
        network: &str,
        container_id: &str,
        ifname: &str,
        version: &str,
    ) -> Result<Option<AnyResult>, CacheError> {
        let Some(data) = self.read_file(network, container_id, ifname)? else {
            return Ok(None);
        };
        let raw_result = match serde_json::from_slice::<CacheEntry>(&data) {
            Ok(entry) if entry.is_v1() => match entry.result {
                Some(result) if !result.is_null() => result,
                _ => return Ok(None),
            },
            // Before cniCacheV1 the file was the bare result.
            _ => serde_json::from_slice::<Value>(&data).map_err(ResultError::from)?,
        };
        // A result without a version is 0.1.0, the version that had none.
        let result = AnyResult::from_value(raw_result, SpecVersion::V0_1_0)?;
        let convert_err = |source| CacheError::Convert {
            version: version.to_string(),
            source,
        };
        let target =
            SpecVersion::parse_config(version).map_err(|e| convert_err(ResultError::from(e)))?;
        result.convert_to(target).map(Some).map_err(convert_err)
    }

    /// Removes an attachment's file; a missing one is not an error.
    pub fn remove(
        &self,
        network: &str,
        container_id: &str,
        ifname: &str,
    ) -> Result<(), CacheError> {
        let path = self.file_path(network, container_id, ifname)?;
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(CacheError::Remove { path, source }),
        }
    }

    /// Every cached attachment, in file name order; only those of
    /// `container_id` unless it is empty. Unreadable, legacy and incomplete
    /// records are skipped: they cannot be acted upon.
    pub fn attachments(&self, container_id: &str) -> Result<Vec<NetworkAttachment>, CacheError> {
        let dir = self.results_dir();
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(CacheError::List { path: dir, source }),
        };
        let mut names: Vec<OsString> = entries
            .filter_map(|e| e.ok().map(|e| e.file_name()))
            .collect();
        names.sort();

        let mut found = Vec::new();
        for name in names {
            let text = name.to_string_lossy();
            // Dot files are this module's unfinished temporary files; no
            // attachment file starts with a dot, as no network name does.
            if text.starts_with('.') {
                continue;
            }
            if !container_id.is_empty() && !names_container(&text, container_id) {
                continue;
            }
            let Ok(data) = std::fs::read(dir.join(&name)) else {
                continue;
            };
            let Ok(entry) = serde_json::from_slice::<CacheEntry>(&data) else {
                continue;
            };
            if !entry.is_v1()
                || (!container_id.is_empty() && entry.container_id != container_id)
                || entry.ifname.is_empty()
                || entry.network_name.is_empty()
            {
                continue;
            }
            found.push(NetworkAttachment {
                container_id: entry.container_id,
                network: entry.network_name,
                ifname: entry.ifname,
                config: entry.config,
                netns: entry.netns,
                cni_args: entry.cni_args,
                capability_args: entry.capability_args,
            });
        }
        Ok(found)
    }
}

/// Whether a cache file name `<network>-<cid>-<ifname>` can be one of
/// `container_id`: `-<cid>-` with something on both sides.
fn names_container(file_name: &str, container_id: &str) -> bool {
    let part = format!("-{container_id}-");
    match file_name.find(&part) {
        Some(pos) => pos > 0 && pos + part.len() < file_name.len(),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_id_must_sit_between_network_and_ifname() {
        assert!(names_container("net-cid-eth0", "cid"));
        assert!(!names_container("cid-eth0", "cid"));
        assert!(!names_container("-cid-", "cid"));
        assert!(!names_container("net-cid-", "cid"));
        assert!(!names_container("net-other-eth0", "cid"));
    }

    #[test]
    fn config_is_go_base64() {
        let entry = CacheEntry {
            kind: CACHE_KIND_V1.to_string(),
            container_id: "c".into(),
            config: b"{\"a\":1}".to_vec(),
            ifname: "eth0".into(),
            network_name: "n".into(),
            netns: String::new(),
            cni_args: Vec::new(),
            capability_args: Map::new(),
            result: None,
        };
        let text = serde_json::to_string(&entry).unwrap();
        assert_eq!(
            text,
            r#"{"kind":"cniCacheV1","containerId":"c","config":"eyJhIjoxfQ==","ifName":"eth0","networkName":"n"}"#
        );
        let back: CacheEntry = serde_json::from_str(&text).unwrap();
        assert_eq!(back, entry);
    }

    #[test]
    fn nulls_read_as_empty() {
        let entry: CacheEntry = serde_json::from_str(
            r#"{"kind":"cniCacheV1","containerId":"c","config":null,"ifName":"eth0","networkName":"n","netns":null,"cniArgs":null,"capabilityArgs":null,"result":null}"#,
        )
        .unwrap();
        assert!(entry.config.is_empty());
        assert!(entry.cni_args.is_empty());
        assert!(entry.capability_args.is_empty());
    }
}
