//! A host-wide lock around the read-modify-write of the shared iptables
//! chains, with a bounded wait.
//!
//! `iptables-restore --noflush` applies one change atomically, but the
//! change is computed from an `iptables-save` taken just before; two
//! plugins doing that at once could both add the shared jump rules. The
//! lock makes the read and the write one step for every portmap on the
//! host. nftables needs no such lock: a whole ADD is one kernel batch.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// The lock file; `/run` is per boot, like the rules it protects.
pub const LOCK_PATH: &str = "/run/cni-portmap.lock";

/// How long a call waits for another portmap before giving up (code 11).
pub const LOCK_WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("cannot open lock file {path:?}: {source}")]
    Open { path: PathBuf, source: io::Error },
    #[error("cannot lock {path:?}: {source}")]
    Lock { path: PathBuf, source: io::Error },
    #[error("timed out after {}s waiting for the portmap lock {path:?}", .waited.as_secs())]
    Timeout { path: PathBuf, waited: Duration },
}

/// An exclusive `flock`, released on drop (and by the kernel if the
/// process dies, so a crash never leaves the lock taken).
#[derive(Debug)]
pub struct HostLock {
    _lock: Flock<File>,
}

impl HostLock {
    /// Takes the lock at `path`, waiting at most `wait`.
    pub fn acquire(path: &Path, wait: Duration) -> Result<HostLock, LockError> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(|source| LockError::Open {
                path: path.to_path_buf(),
                source,
            })?;
        let start = Instant::now();
        let mut pause = Duration::from_millis(1);
        let mut file = file;
        loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => return Ok(HostLock { _lock: lock }),
                Err((returned, Errno::EWOULDBLOCK)) => file = returned,
                Err((returned, Errno::EINTR)) => {
                    file = returned;
                    continue;
                }
                Err((_, errno)) => {
                    return Err(LockError::Lock {
                        path: path.to_path_buf(),
                        source: io::Error::from(errno),
                    })
                }
            }
            let waited = start.elapsed();
            if waited >= wait {
                return Err(LockError::Timeout {
                    path: path.to_path_buf(),
                    waited,
                });
            }
            thread::sleep(pause.min(wait - waited));
            pause = (pause * 2).min(Duration::from_millis(25));
        }
    }

    /// The host's portmap lock.
    pub fn acquire_default() -> Result<HostLock, LockError> {
        HostLock::acquire(Path::new(LOCK_PATH), LOCK_WAIT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_holder_times_out_and_gets_it_after_release() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let first = HostLock::acquire(&path, Duration::from_secs(1)).unwrap();
        // flock locks belong to the open file description, so a second
        // open in the same process contends like another process would.
        let start = Instant::now();
        let e = HostLock::acquire(&path, Duration::from_millis(100)).unwrap_err();
        assert!(matches!(e, LockError::Timeout { .. }), "{e}");
        assert!(start.elapsed() >= Duration::from_millis(100));
        drop(first);
        HostLock::acquire(&path, Duration::from_millis(100)).unwrap();
    }

    #[test]
    fn waiter_gets_the_lock_when_the_holder_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let first = HostLock::acquire(&path, Duration::from_secs(1)).unwrap();
        let waiter = {
            let path = path.clone();
            thread::spawn(move || HostLock::acquire(&path, Duration::from_secs(10)).map(|_| ()))
        };
        thread::sleep(Duration::from_millis(50));
        drop(first);
        waiter.join().unwrap().unwrap();
    }
}
