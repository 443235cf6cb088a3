//! The lock that serialises sbr calls on one container: an exclusive
//! `flock` on the namespace file itself, as the reference takes it, so our
//! plugin and the reference exclude each other too.
//!
//! Two ADDs for two interfaces of one pod would otherwise both see table
//! 100 free and both take it. The reference opens the path with `O_CREAT`
//! and waits forever; here the namespace file already opened and checked
//! is locked (a missing namespace never leaves an empty file behind), and
//! the wait is bounded ([`libcni::lock`]): a holder stuck for longer is
//! reported as "try again later" (code 11).

use std::time::Duration;

use libcni::lock::{FileLock, LockError, LockWait};
use libcni::netns::NetNs;

/// How long a call waits for another sbr call on the same container. A
/// call holds the lock for a few milliseconds.
pub const LOCK_WAIT: LockWait = LockWait {
    timeout: Duration::from_secs(30),
    holder: "another sbr call on this container",
};

/// Locks `netns` for the rest of the call (until the lock is dropped).
pub fn lock_netns(netns: &NetNs, wait: LockWait) -> Result<FileLock, LockError> {
    FileLock::acquire_open(netns.file(), netns.path(), wait)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

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
        let held = lock_netns(&netns, LOCK_WAIT).unwrap();
        // A separate open of the same file, as another process would have.
        let other = NetNs::open(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&netns)
        ))
        .unwrap();
        let short = LockWait {
            timeout: Duration::from_millis(50),
            ..LOCK_WAIT
        };
        let e = lock_netns(&other, short).unwrap_err();
        assert!(e.is_timeout(), "{e}");
        assert!(
            e.to_string()
                .ends_with("another sbr call on this container holds it"),
            "{e}"
        );
        drop(held);
        lock_netns(&other, short).unwrap();
    }
}
