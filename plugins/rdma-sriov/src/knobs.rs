//! Environment variables for testing and debugging.
//!
//! None of these is needed in production; they exist so the same binary
//! can run against a fake sysfs tree, a private state directory, or a
//! simulated PF/RDMA layer, in the host test suite and in a VM guest.
//!
//! | variable | effect |
//! |---|---|
//! | `RDMA_SRIOV_SYSFS_ROOT` | sysfs root instead of `/sys` (config key `sysfsRoot` wins in test builds only; the shipped build ignores the key) |
//! | `RDMA_SRIOV_STATE_DIR` | state directory instead of `/var/lib/cni/rdma-sriov` (config key `stateDir` wins in test builds only; the shipped build ignores the key) |
//! | `RDMA_SRIOV_LOCK_TIMEOUT_MS` | how long to wait for a VF lock (default 60000) |
//! | `RDMA_SRIOV_FAKE_PF_OPS` | **test builds only** (the `fake-hardware` feature; the binary as shipped, built without it, does not read it): path of a `fake::FakeWorld` JSON file; PF-side VF settings, RDMA netlink and the verbs port query then go to that simulated machine, and every change is recorded in its `calls`. It stands in for SR-IOV and RDMA hardware the test machine lacks. The netdev side stays real. |

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::alloc::DEFAULT_LOCK_TIMEOUT;

pub const SYSFS_ROOT_ENV: &str = "RDMA_SRIOV_SYSFS_ROOT";
pub const STATE_DIR_ENV: &str = "RDMA_SRIOV_STATE_DIR";
pub const LOCK_TIMEOUT_ENV: &str = "RDMA_SRIOV_LOCK_TIMEOUT_MS";
#[cfg(feature = "fake-hardware")]
pub const FAKE_OPS_ENV: &str = "RDMA_SRIOV_FAKE_PF_OPS";

/// The knobs' values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Knobs {
    pub sysfs_root: Option<PathBuf>,
    pub state_dir: Option<PathBuf>,
    pub lock_timeout: Duration,
    #[cfg(feature = "fake-hardware")]
    pub fake_world: Option<PathBuf>,
}

impl Default for Knobs {
    fn default() -> Self {
        Knobs {
            sysfs_root: None,
            state_dir: None,
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
            #[cfg(feature = "fake-hardware")]
            fake_world: None,
        }
    }
}

impl Knobs {
    /// Reads the knobs through `get` (the process environment in the
    /// binary); empty values count as unset.
    pub fn from_lookup(get: impl Fn(&str) -> Option<OsString>) -> Knobs {
        let path = |name: &str| get(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        let lock_timeout = get(LOCK_TIMEOUT_ENV)
            .and_then(|v| v.into_string().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_millis)
            .unwrap_or(DEFAULT_LOCK_TIMEOUT);
        Knobs {
            sysfs_root: path(SYSFS_ROOT_ENV),
            state_dir: path(STATE_DIR_ENV),
            lock_timeout,
            #[cfg(feature = "fake-hardware")]
            fake_world: path(FAKE_OPS_ENV),
        }
    }

    pub fn from_process_env() -> Knobs {
        Knobs::from_lookup(|name| std::env::var_os(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_values_and_ignores_empty_ones() {
        let knobs = Knobs::from_lookup(|name| match name {
            SYSFS_ROOT_ENV => Some("/tmp/sys".into()),
            STATE_DIR_ENV => Some("".into()),
            LOCK_TIMEOUT_ENV => Some("250".into()),
            _ => None,
        });
        assert_eq!(knobs.sysfs_root, Some(PathBuf::from("/tmp/sys")));
        assert_eq!(knobs.state_dir, None);
        assert_eq!(knobs.lock_timeout, Duration::from_millis(250));
        #[cfg(feature = "fake-hardware")]
        assert_eq!(knobs.fake_world, None);
        let defaults = Knobs::from_lookup(|_| None);
        assert_eq!(defaults, Knobs::default());
    }
}
