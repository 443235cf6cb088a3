//! Who holds a VF: a per-VF lock for the time of one plugin run, and an
//! allocation record for the life of an attachment.
//!
//! - Lock: `flock` on `<stateDir>/locks/<name>.lock`, taken with
//!   [`libcni::lock`]'s bounded wait (an unbounded one would stall the
//!   runtime behind a stuck run). Released when the plugin exits.
//! - Record: `<stateDir>/allocations/<pci>`, holding the owner and its netns
//!   path. A record whose netns no longer opens as a namespace is stale
//!   (the pod died without a DEL) and is reclaimed. sriov-cni writes a
//!   bare netns path in its records; that form is read too.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use libcni::lock::{FileLock, LockError, LockWait};
use libcni::netns::NetNs;
use serde::{Deserialize, Serialize};

use crate::state::{create_private_dir, write_atomically};

/// The wait sriov-cni allows for its per-VF lock.
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum AllocError {
    #[error("time out while waiting to acquire exclusive lock on [{}] after {waited:?}", .path.display())]
    LockTimeout { path: PathBuf, waited: Duration },
    #[error("cannot lock {}: {source}", .path.display())]
    Lock { path: PathBuf, source: io::Error },
    #[error("pci address {pci} is already allocated to {owner}")]
    AlreadyAllocated { pci: String, owner: String },
    #[error("allocation record {}: {source}", .path.display())]
    Record { path: PathBuf, source: io::Error },
}

/// A VF's lock, held until dropped.
#[derive(Debug)]
pub struct VfLock {
    _lock: FileLock,
}

impl VfLock {
    /// Locks `<state_dir>/locks/<name>.lock`, waiting at most `timeout`
    /// ([`libcni::lock`]'s bounded wait; zero tries once). Failures keep
    /// sriov-cni's wording for the timeout.
    pub fn acquire(state_dir: &Path, name: &str, timeout: Duration) -> Result<VfLock, AllocError> {
        let dir = state_dir.join("locks");
        let path = dir.join(format!("{name}.lock"));
        create_private_dir(&dir).map_err(|source| AllocError::Lock {
            path: path.clone(),
            source,
        })?;
        let wait = LockWait {
            timeout,
            holder: "another rdma-sriov call",
        };
        let lock = FileLock::acquire(&path, wait).map_err(|e| match e {
            LockError::Timeout { path, waited, .. } => AllocError::LockTimeout { path, waited },
            LockError::Open { path, source } => AllocError::Lock { path, source },
            LockError::Flock { path, source } => AllocError::Lock {
                path,
                source: io::Error::from(source),
            },
        })?;
        Ok(VfLock { _lock: lock })
    }
}

/// Who holds a VF.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AllocationRecord {
    pub netns: String,
    #[serde(default)]
    pub network: String,
    #[serde(default, rename = "containerID")]
    pub container_id: String,
    #[serde(default)]
    pub ifname: String,
}

impl AllocationRecord {
    /// The holder, for messages.
    pub fn describe(&self) -> String {
        if self.container_id.is_empty() {
            format!("netns {}", self.netns)
        } else {
            format!(
                "container {} ({} on network {}, netns {})",
                self.container_id, self.ifname, self.network, self.netns
            )
        }
    }

    pub fn is_owned_by(&self, network: &str, container_id: &str, ifname: &str) -> bool {
        self.network == network && self.container_id == container_id && self.ifname == ifname
    }
}

/// Whether `path` still opens as a network namespace.
pub fn netns_alive(path: &str) -> bool {
    !path.is_empty() && NetNs::open(path).is_ok()
}

/// The allocation records of a state directory.
#[derive(Debug, Clone)]
pub struct Allocations {
    dir: PathBuf,
}

impl Allocations {
    pub fn new(state_dir: &Path) -> Allocations {
        Allocations {
            dir: state_dir.join("allocations"),
        }
    }

    fn path(&self, pci: &str) -> PathBuf {
        self.dir.join(pci)
    }

    pub fn read(&self, pci: &str) -> Result<Option<AllocationRecord>, AllocError> {
        let path = self.path(pci);
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(AllocError::Record { path, source }),
        };
        Ok(Some(serde_json::from_str(&text).unwrap_or_else(|_| {
            AllocationRecord {
                netns: text.trim().to_string(),
                network: String::new(),
                container_id: String::new(),
                ifname: String::new(),
            }
        })))
    }

    pub fn write(&self, pci: &str, record: &AllocationRecord) -> Result<(), AllocError> {
        let path = self.path(pci);
        let bytes = serde_json::to_vec(record).map_err(|e| AllocError::Record {
            path: path.clone(),
            source: io::Error::other(e),
        })?;
        write_atomically(&path, &bytes).map_err(|source| AllocError::Record { path, source })
    }

    pub fn remove(&self, pci: &str) -> Result<(), AllocError> {
        let path = self.path(pci);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(AllocError::Record { path, source }),
        }
    }

    /// PCI addresses that have a record.
    pub fn list(&self) -> Vec<String> {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter(|n| !n.starts_with('.'))
            .collect();
        names.sort();
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_is_exclusive_and_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let held = VfLock::acquire(dir.path(), "0000:af:00.2", Duration::from_secs(1)).unwrap();
        // flock belongs to the open file description: a second open in the
        // same process contends like another process would.
        let e = VfLock::acquire(dir.path(), "0000:af:00.2", Duration::from_millis(50)).unwrap_err();
        assert!(matches!(e, AllocError::LockTimeout { .. }), "{e}");
        let lock_file = dir.path().join("locks/0000:af:00.2.lock");
        assert!(
            e.to_string().starts_with(&format!(
                "time out while waiting to acquire exclusive lock on [{}] after ",
                lock_file.display()
            )),
            "{e}"
        );
        // Another VF is independent.
        VfLock::acquire(dir.path(), "0000:af:00.3", Duration::from_millis(50)).unwrap();
        drop(held);
        VfLock::acquire(dir.path(), "0000:af:00.2", Duration::from_millis(50)).unwrap();
        // A state directory that cannot hold the locks directory.
        let file = dir.path().join("plain-file");
        fs::write(&file, "x").unwrap();
        let e = VfLock::acquire(&file, "0000:af:00.2", Duration::ZERO).unwrap_err();
        assert!(matches!(e, AllocError::Lock { .. }), "{e}");
    }

    #[test]
    fn records_round_trip_and_liveness_follows_the_netns() {
        let dir = tempfile::tempdir().unwrap();
        let allocs = Allocations::new(dir.path());
        assert!(allocs.read("0000:af:00.2").unwrap().is_none());
        let live = AllocationRecord {
            netns: "/proc/self/ns/net".into(),
            network: "n".into(),
            container_id: "c1".into(),
            ifname: "net1".into(),
        };
        allocs.write("0000:af:00.2", &live).unwrap();
        let read = allocs.read("0000:af:00.2").unwrap().unwrap();
        assert_eq!(read, live);
        assert!(netns_alive(&read.netns));
        assert!(read.is_owned_by("n", "c1", "net1"));
        assert!(!read.is_owned_by("n", "c2", "net1"));
        assert!(
            read.describe().starts_with("container c1"),
            "{}",
            read.describe()
        );
        assert_eq!(allocs.list(), vec!["0000:af:00.2"]);
        // sriov-cni's bare-path form, naming a namespace that is gone.
        fs::write(
            dir.path().join("allocations/0000:af:00.2"),
            "/run/netns/gone-x\n",
        )
        .unwrap();
        let legacy = allocs.read("0000:af:00.2").unwrap().unwrap();
        assert_eq!(legacy.netns, "/run/netns/gone-x");
        assert!(!netns_alive(&legacy.netns));
        assert_eq!(legacy.describe(), "netns /run/netns/gone-x");
        // A path that exists but is no namespace is not alive either.
        let file = dir.path().join("plain-file");
        fs::write(&file, "x").unwrap();
        assert!(!netns_alive(&file.display().to_string()));
        assert!(!netns_alive(""));
        allocs.remove("0000:af:00.2").unwrap();
        allocs.remove("0000:af:00.2").unwrap();
        assert!(allocs.list().is_empty());
    }
}
