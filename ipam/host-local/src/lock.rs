//! The store lock: `flock` on `<dataDir>/<network>/lock`, the same file the
//! reference locks, so both implementations exclude each other on a node
//! that runs them side by side.
//!
//! The reference waits for the lock forever; a holder stuck on a hung disk
//! then stalls every pod start on the node. Here the wait is bounded: the
//! lock is tried without blocking and retried with a short, growing pause
//! until the timeout, which is reported as "try again later" (code 11).
//! Polling is not fair the way a blocking `flock` queue is, but with pauses
//! capped at a few milliseconds and critical sections of well under a
//! millisecond a waiter gets its turn long before any sensible timeout.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

const FIRST_PAUSE: Duration = Duration::from_micros(200);
const LONGEST_PAUSE: Duration = Duration::from_millis(5);

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("failed to open lock file {path}: {source}")]
    Open { path: PathBuf, source: io::Error },
    #[error("failed to lock {path}: {source}")]
    Flock { path: PathBuf, source: Errno },
    #[error("timed out after {waited:?} waiting for the lock on {path}: another process holds it")]
    Timeout { path: PathBuf, waited: Duration },
}

/// A held lock; dropping it unlocks.
#[derive(Debug)]
pub struct StoreLock {
    _flock: Flock<File>,
}

impl StoreLock {
    /// Locks `path` (created if missing), waiting at most `timeout`.
    pub fn acquire(path: &Path, timeout: Duration) -> Result<StoreLock, LockError> {
        let mut file = open_lock_file(path)?;
        let started = Instant::now();
        let mut pause = FIRST_PAUSE;
        loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(flock) => return Ok(StoreLock { _flock: flock }),
                Err((returned, Errno::EWOULDBLOCK)) | Err((returned, Errno::EINTR)) => {
                    file = returned;
                }
                Err((_, errno)) => {
                    return Err(LockError::Flock {
                        path: path.to_path_buf(),
                        source: errno,
                    })
                }
            }
            let waited = started.elapsed();
            if waited >= timeout {
                return Err(LockError::Timeout {
                    path: path.to_path_buf(),
                    waited,
                });
            }
            std::thread::sleep(pause.min(timeout - waited));
            pause = (pause * 2).min(LONGEST_PAUSE);
        }
    }
}

fn open_lock_file(path: &Path) -> Result<File, LockError> {
    let open = |create: bool| {
        OpenOptions::new()
            .read(true)
            .create(create)
            .write(create)
            .mode(0o600)
            .open(path)
    };
    // An existing lock file is opened read-only, so a store on a read-only
    // file system can still be locked for lookups (CHECK).
    match open(false) {
        Ok(f) => Ok(f),
        Err(e) if e.kind() == io::ErrorKind::NotFound => open(true),
        Err(e) => Err(e),
    }
    .map_err(|source| LockError::Open {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locks_a_new_file_and_an_existing_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let held = StoreLock::acquire(&path, Duration::from_secs(1)).unwrap();
        assert!(path.is_file());
        drop(held);
        let again = StoreLock::acquire(&path, Duration::from_secs(1)).unwrap();
        drop(again);
    }

    #[test]
    fn a_held_lock_times_out_then_frees_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let held = StoreLock::acquire(&path, Duration::from_secs(1)).unwrap();
        // flock locks belong to the open file description, so a second open
        // in the same process conflicts like another process would.
        let e = StoreLock::acquire(&path, Duration::from_millis(50)).unwrap_err();
        assert!(matches!(e, LockError::Timeout { .. }), "{e}");
        drop(held);
        StoreLock::acquire(&path, Duration::from_millis(50)).unwrap();
    }

    #[test]
    fn waiter_gets_the_lock_once_released() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let held = StoreLock::acquire(&path, Duration::from_secs(1)).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter_path = path.clone();
        let waiter = std::thread::spawn(move || {
            tx.send(()).unwrap();
            StoreLock::acquire(&waiter_path, Duration::from_secs(30)).map(|_| ())
        });
        rx.recv().unwrap();
        drop(held);
        waiter.join().unwrap().unwrap();
    }

    #[test]
    fn missing_directory_is_an_open_error() {
        let dir = tempfile::tempdir().unwrap();
        let e = StoreLock::acquire(&dir.path().join("no/such/lock"), Duration::from_millis(10))
            .unwrap_err();
        assert!(matches!(e, LockError::Open { .. }));
    }
}
