//! An exclusive `flock` taken with a bounded wait, for the plugins that
//! serialise their calls on a node (host-local's store, portmap's iptables
//! chains, sbr's routing tables of one container).
//!
//! The reference plugins wait for their locks forever; a holder stuck on a
//! hung disk or a wedged kernel call then stalls every pod start behind it.
//! Here the lock is tried without blocking and tried again after a short,
//! growing pause until the deadline, which is reported as "try again later"
//! (code 11) naming the file and who holds it. Polling is not fair the way
//! a blocking `flock` queue is, but with pauses capped at a few
//! milliseconds and critical sections of a few milliseconds at most, a
//! waiter gets its turn long before any sensible deadline.
//!
//! A `flock` belongs to the open file description and the kernel drops it
//! when the holder dies, so a crashed plugin never leaves it taken.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::error::{CniError, ErrorCode, ToCniError};

const FIRST_PAUSE: Duration = Duration::from_micros(200);
const LONGEST_PAUSE: Duration = Duration::from_millis(5);

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("failed to open lock file {path:?}: {source}")]
    Open { path: PathBuf, source: io::Error },
    #[error("failed to lock {path:?}: {source}")]
    Flock { path: PathBuf, source: Errno },
    #[error(
        "timed out after {} waiting for the lock on {path:?}: {holder} holds it",
        rounded(*.waited)
    )]
    Timeout {
        path: PathBuf,
        /// Who holds the lock, as [`LockWait::holder`] names it.
        holder: &'static str,
        waited: Duration,
    },
}

impl LockError {
    /// True when the lock stayed taken until the deadline.
    pub fn is_timeout(&self) -> bool {
        matches!(self, LockError::Timeout { .. })
    }

    /// The spec code: a lock held too long is "try again later" (11); a lock
    /// file that cannot be opened or locked is an I/O failure (5).
    pub fn error_code(&self) -> ErrorCode {
        match self {
            LockError::Timeout { .. } => ErrorCode::TryAgainLater,
            LockError::Open { .. } | LockError::Flock { .. } => ErrorCode::Io,
        }
    }
}

impl ToCniError for LockError {
    fn to_cni_error(&self) -> CniError {
        CniError::new(self.error_code(), self.to_string())
    }
}

/// How long a caller waits for a lock, and who it waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockWait {
    pub timeout: Duration,
    /// Who holds the lock when it is taken, for the timeout message
    /// ("another portmap").
    pub holder: &'static str,
}

/// A held lock; dropping it unlocks.
#[derive(Debug)]
pub struct FileLock {
    _flock: Flock<File>,
}

impl FileLock {
    /// Locks the file at `path`, creating it (mode 0600, so that no other
    /// user can open it to hold the lock) when missing. An existing file is
    /// opened read-only, which is enough for `flock`: a lock file on a
    /// read-only file system can still be locked.
    pub fn acquire(path: &Path, wait: LockWait) -> Result<FileLock, LockError> {
        let file = open_lock_file(path)?;
        lock_until(file, path, wait)
    }

    /// Locks `file`, already open (a namespace file), through a second
    /// descriptor of the same open file: the lock belongs to the open file,
    /// which the caller keeps open anyway. `path` names it in messages.
    pub fn acquire_open(file: &File, path: &Path, wait: LockWait) -> Result<FileLock, LockError> {
        let file = file.try_clone().map_err(|source| LockError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        lock_until(file, path, wait)
    }
}

fn lock_until(mut file: File, path: &Path, wait: LockWait) -> Result<FileLock, LockError> {
    let started = Instant::now();
    let mut pause = FIRST_PAUSE;
    loop {
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(flock) => return Ok(FileLock { _flock: flock }),
            Err((returned, Errno::EWOULDBLOCK | Errno::EINTR)) => file = returned,
            Err((_, errno)) => {
                return Err(LockError::Flock {
                    path: path.to_path_buf(),
                    source: errno,
                })
            }
        }
        let waited = started.elapsed();
        if waited >= wait.timeout {
            return Err(LockError::Timeout {
                path: path.to_path_buf(),
                holder: wait.holder,
                waited,
            });
        }
        thread::sleep(pause.min(wait.timeout - waited));
        pause = (pause * 2).min(LONGEST_PAUSE);
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

/// A wait as a person reads it: whole milliseconds below a second, tenths
/// of a second above.
fn rounded(waited: Duration) -> String {
    if waited < Duration::from_secs(1) {
        format!("{}ms", waited.as_millis())
    } else {
        format!("{:.1}s", waited.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const WAIT: LockWait = LockWait {
        timeout: Duration::from_secs(1),
        holder: "another test",
    };

    fn wait(ms: u64) -> LockWait {
        LockWait {
            timeout: Duration::from_millis(ms),
            ..WAIT
        }
    }

    #[test]
    fn locks_a_new_file_and_an_existing_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let held = FileLock::acquire(&path, WAIT).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        drop(held);
        // Existing and read-only to its owner: still lockable.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
        FileLock::acquire(&path, WAIT).unwrap();
    }

    #[test]
    fn a_held_lock_times_out_with_11_naming_file_and_holder_then_frees_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let held = FileLock::acquire(&path, WAIT).unwrap();
        // flock belongs to the open file description, so a second open in
        // the same process contends like another process would.
        let started = Instant::now();
        let e = FileLock::acquire(&path, wait(50)).unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert!(e.is_timeout(), "{e}");
        let cni = e.to_cni_error();
        assert_eq!(cni.code, ErrorCode::TryAgainLater);
        assert!(
            cni.msg.starts_with("timed out after ")
                && cni.msg.ends_with(&format!(
                    "ms waiting for the lock on {path:?}: another test holds it"
                )),
            "{}",
            cni.msg
        );
        drop(held);
        FileLock::acquire(&path, wait(50)).unwrap();
    }

    #[test]
    fn a_waiter_gets_the_lock_once_released() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let held = FileLock::acquire(&path, WAIT).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter_path = path.clone();
        let waiter = thread::spawn(move || {
            tx.send(()).unwrap();
            FileLock::acquire(&waiter_path, wait(30_000)).map(|_| ())
        });
        rx.recv().unwrap();
        drop(held);
        waiter.join().unwrap().unwrap();
    }

    #[test]
    fn an_open_file_is_locked_against_another_open_of_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ns");
        std::fs::write(&path, b"").unwrap();
        let first = File::open(&path).unwrap();
        let held = FileLock::acquire_open(&first, &path, WAIT).unwrap();
        let second = File::open(&path).unwrap();
        let e = FileLock::acquire_open(&second, &path, wait(20)).unwrap_err();
        assert!(e.is_timeout(), "{e}");
        drop(held);
        FileLock::acquire_open(&second, &path, wait(20)).unwrap();
    }

    #[test]
    fn a_missing_directory_is_an_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no/such/lock");
        let e = FileLock::acquire(&path, wait(10)).unwrap_err();
        assert!(matches!(e, LockError::Open { .. }), "{e}");
        assert_eq!(e.error_code(), ErrorCode::Io);
        assert!(e.to_string().contains("no/such/lock"), "{e}");
    }

    #[test]
    fn waits_read_as_people_write_them() {
        assert_eq!(rounded(Duration::from_micros(300_400)), "300ms");
        assert_eq!(rounded(Duration::from_millis(30_012)), "30.0s");
        assert_eq!(rounded(Duration::from_millis(1_260)), "1.3s");
    }
}
