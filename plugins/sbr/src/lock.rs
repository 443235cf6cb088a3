//! The lock that serialises sbr calls on one container: an exclusive
//! `flock` on the namespace file itself, as the reference takes it, so our
//! plugin and the reference exclude each other too.
//!
//! Two ADDs for two interfaces of one pod would otherwise both see table
//! 100 free and both take it. The reference opens the path with `O_CREAT`
//! and waits forever; here the namespace file already opened and checked
//! is locked (a missing namespace never leaves an empty file behind), and
//! the wait is bounded: a holder stuck for longer is reported as "try
//! again later" (code 11).

use std::fs::File;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use libcni::netns::NetNs;
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// How long a call waits for another sbr call on the same container. A
/// call holds the lock for a few milliseconds.
pub const LOCK_WAIT: Duration = Duration::from_secs(30);
const FIRST_PAUSE: Duration = Duration::from_micros(500);
const LONGEST_PAUSE: Duration = Duration::from_millis(20);

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("failed to lock netns {path:?}: {source}")]
    Flock { path: PathBuf, source: Errno },
    #[error("timed out after {}s waiting for the lock on netns {path:?}: another sbr call holds it", .waited.as_secs())]
    Timeout { path: PathBuf, waited: Duration },
}

/// A held lock; dropping it unlocks (the kernel also drops it when the
/// process exits, so a crash never leaves it taken).
#[derive(Debug)]
pub struct NetnsLock {
    _flock: Flock<File>,
}

impl NetnsLock {
    pub fn acquire(netns: &NetNs, wait: Duration) -> Result<NetnsLock, LockError> {
        let path = netns.path().to_path_buf();
        // A second descriptor of the same open file: the lock belongs to
        // the open file, which the netns handle keeps open anyway.
        let mut file = netns.file().try_clone().map_err(|e| LockError::Flock {
            path: path.clone(),
            source: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
        })?;
        let started = Instant::now();
        let mut pause = FIRST_PAUSE;
        loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(flock) => return Ok(NetnsLock { _flock: flock }),
                Err((returned, Errno::EWOULDBLOCK | Errno::EINTR)) => file = returned,
                Err((_, errno)) => {
                    return Err(LockError::Flock {
                        path,
                        source: errno,
                    })
                }
            }
            let waited = started.elapsed();
            if waited >= wait {
                return Err(LockError::Timeout { path, waited });
            }
            thread::sleep(pause.min(wait - waited));
            pause = (pause * 2).min(LONGEST_PAUSE);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A second holder waits, and gives up after the bound.
    #[test]
    fn a_held_lock_times_out_a_second_caller() {
        // A namespace of the test's own, alive while its file is open.
        let netns = thread::spawn(|| {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            NetNs::current_thread().unwrap()
        })
        .join()
        .unwrap();
        let held = NetnsLock::acquire(&netns, LOCK_WAIT).unwrap();
        // A separate open of the same file, as another process would have.
        let other = NetNs::open(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&netns)
        ))
        .unwrap();
        let e = NetnsLock::acquire(&other, Duration::from_millis(50)).unwrap_err();
        assert!(matches!(e, LockError::Timeout { .. }), "{e}");
        drop(held);
        NetnsLock::acquire(&other, Duration::from_millis(50)).unwrap();
    }
}
