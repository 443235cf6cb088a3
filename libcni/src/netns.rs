//! Network namespaces: opening and validating a netns path.
//!
//! A path given as CNI_NETNS must name a namespace file (nsfs, or a
//! `/proc/<pid>/ns/net` link that resolves to one). Anything else is refused
//! before a plugin touches the system.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::sys::statfs::{fstatfs, NSFS_MAGIC, PROC_SUPER_MAGIC};

/// The calling thread's own network namespace. `/proc/self` would name the
/// main thread's, which is wrong once a thread has moved.
pub const THREAD_NETNS_PATH: &str = "/proc/thread-self/ns/net";

#[derive(Debug, thiserror::Error)]
pub enum NetNsError {
    #[error("netns path {path:?} does not exist")]
    NotExist { path: PathBuf },
    #[error("{path:?} is not a network namespace (not on nsfs)")]
    NotNetNs { path: PathBuf },
    #[error("failed to open netns {path:?}: {source}")]
    Open { path: PathBuf, source: io::Error },
    #[error("failed to switch to netns {path:?}: {source}")]
    Switch { path: PathBuf, source: nix::Error },
    #[error("netns worker thread for {path:?} failed: {msg}")]
    Thread { path: PathBuf, msg: String },
}

impl NetNsError {
    /// True when the namespace is simply gone: DEL treats that as done.
    pub fn is_not_exist(&self) -> bool {
        matches!(self, NetNsError::NotExist { .. })
    }
}

/// An open network namespace file.
#[derive(Debug)]
pub struct NetNs {
    file: File,
    path: PathBuf,
}

impl NetNs {
    /// Opens `path` and checks that it is a namespace file.
    pub fn open(path: impl AsRef<Path>) -> Result<NetNs, NetNsError> {
        let path = path.as_ref().to_path_buf();
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(NetNsError::NotExist { path })
            }
            Err(source) => return Err(NetNsError::Open { path, source }),
        };
        let fs = fstatfs(&file).map_err(|e| NetNsError::Open {
            path: path.clone(),
            source: io::Error::from(e),
        })?;
        let magic = fs.filesystem_type();
        if magic != NSFS_MAGIC && magic != PROC_SUPER_MAGIC {
            return Err(NetNsError::NotNetNs { path });
        }
        Ok(NetNs { file, path })
    }

    /// The calling thread's current namespace.
    pub fn current_thread() -> Result<NetNs, NetNsError> {
        NetNs::open(THREAD_NETNS_PATH)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    /// The (device, inode) pair that identifies a namespace.
    pub fn identity(&self) -> Result<(u64, u64), NetNsError> {
        let md = self.file.metadata().map_err(|source| NetNsError::Open {
            path: self.path.clone(),
            source,
        })?;
        Ok((md.dev(), md.ino()))
    }

    pub fn same_as(&self, other: &NetNs) -> Result<bool, NetNsError> {
        Ok(self.identity()? == other.identity()?)
    }
}

impl AsFd for NetNs {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl AsRawFd for NetNs {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.file.as_raw_fd()
    }
}

/// Whether `path` names the namespace the calling thread is in. A path that
/// cannot be opened is not ours (the plugin reports that later, in context).
pub fn is_current_thread_netns(path: impl AsRef<Path>) -> bool {
    let (Ok(target), Ok(own)) = (NetNs::open(path), NetNs::current_thread()) else {
        return false;
    };
    target.same_as(&own).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_netns_is_detected() {
        assert!(is_current_thread_netns(THREAD_NETNS_PATH));
        assert!(is_current_thread_netns("/proc/self/ns/net"));
    }

    #[test]
    fn missing_path_is_not_exist() {
        let e = NetNs::open("/nonexistent/netns/x").unwrap_err();
        assert!(e.is_not_exist(), "{e}");
    }

    #[test]
    fn regular_file_is_not_a_netns() {
        let f = tempfile::NamedTempFile::new().unwrap();
        let e = NetNs::open(f.path()).unwrap_err();
        assert!(matches!(e, NetNsError::NotNetNs { .. }), "{e}");
        assert!(!is_current_thread_netns(f.path()));
    }
}
