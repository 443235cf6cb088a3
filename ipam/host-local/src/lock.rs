//! The store lock used to live here; it is [`libcni::lock`] now. This
//! module only keeps `testing/qemu-guest` (which locks its cache with the
//! same bounded wait) compiling until it uses [`libcni::lock::FileLock`]
//! itself; nothing in host-local uses it.

use std::path::Path;
use std::time::Duration;

pub use libcni::lock::LockError;
use libcni::lock::{FileLock, LockWait};

/// The old entry point: locks `path`, waiting at most `timeout`.
#[derive(Debug)]
pub struct StoreLock;

impl StoreLock {
    pub fn acquire(path: &Path, timeout: Duration) -> Result<FileLock, LockError> {
        let wait = LockWait {
            timeout,
            holder: "another process",
        };
        FileLock::acquire(path, wait)
    }
}
