//! Network namespaces: opening and validating a netns path.
//!
//! A path given as CNI_NETNS must name a namespace file (nsfs, or a
//! `/proc/<pid>/ns/net` link that resolves to one). Anything else is refused
//! before a plugin touches the system.
//!
//! Work inside a namespace goes through [`NetNs::run`], which uses a fresh
//! thread for each call: `setns` changes only the calling thread, so a thread
//! that is never reused cannot leak the namespace into unrelated code, and
//! there is no switch back that could fail. One-shot plugins that only need
//! a socket inside may use [`NetNs::enter_briefly`] instead, which switches
//! the calling thread there and back (no thread to start and schedule).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::thread::{self, Scope, ScopedJoinHandle};

use nix::sched::{setns, CloneFlags};
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
    #[error("failed to switch to netns {path:?}: {source}{}", setns_hint(*.source))]
    Switch { path: PathBuf, source: nix::Error },
    #[error("netns worker thread for {path:?} failed: {msg}")]
    Thread { path: PathBuf, msg: String },
    /// The calling thread is still inside the namespace at `path`.
    #[error("failed to switch back from netns {path:?}: {source}")]
    SwitchBack { path: PathBuf, source: nix::Error },
}

/// What to do about a refused `setns`: EPERM there means the process
/// lacks CAP_SYS_ADMIN, which a person running a plugin by hand without
/// root would otherwise have to look up.
fn setns_hint(errno: nix::Error) -> &'static str {
    if errno == nix::Error::EPERM {
        " (entering a network namespace needs CAP_SYS_ADMIN: run the plugin as root, as container runtimes do)"
    } else {
        ""
    }
}

impl NetNsError {
    /// True when the namespace is simply gone: DEL treats that as done.
    pub fn is_not_exist(&self) -> bool {
        matches!(self, NetNsError::NotExist { .. })
    }

    /// True when the calling thread was left in another namespace (see
    /// [`NetNs::enter_briefly`]): nothing that depends on the namespace may
    /// run on it any more.
    pub fn left_thread_inside(&self) -> bool {
        matches!(self, NetNsError::SwitchBack { .. })
    }

    /// The spec code every plugin reports this error with: the container is
    /// gone (3), CNI_NETNS names something else than a namespace (4), or
    /// the switch itself failed (999). One place, so that plugins agree.
    pub fn error_code(&self) -> crate::ErrorCode {
        use crate::ErrorCode;
        match self {
            NetNsError::NotExist { .. } => ErrorCode::UnknownContainer,
            NetNsError::NotNetNs { .. } => ErrorCode::InvalidEnvironment,
            NetNsError::Open { .. }
            | NetNsError::Switch { .. }
            | NetNsError::Thread { .. }
            | NetNsError::SwitchBack { .. } => ErrorCode::Internal,
        }
    }
}

impl crate::error::ToCniError for NetNsError {
    fn to_cni_error(&self) -> crate::CniError {
        crate::CniError::new(self.error_code(), self.to_string())
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
        // O_NONBLOCK: opening a FIFO (or a device that waits for a peer)
        // for reading would block until a writer came, so a CNI_NETNS
        // naming one hung the plugin; now the open returns at once and the
        // filesystem check below refuses it. setns ignores the flag.
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
        {
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

    /// Runs `f` inside this namespace and returns its value.
    ///
    /// `f` runs on a dedicated thread that enters the namespace and ends when
    /// `f` returns; the caller's thread never changes namespace. The closure
    /// may borrow from the caller (the thread is scoped). Threads spawned by
    /// `f` inherit the namespace, but anything already running does not.
    ///
    /// A panic inside `f` comes back as [`NetNsError::Thread`] when panics
    /// unwind; under `panic = "abort"` (our release profile) it aborts the
    /// process like any other panic.
    ///
    /// Cost: the thread itself is ~0.07 ms (more when the machine is busy
    /// and the thread waits to be scheduled).
    pub fn run<T, F>(&self, f: F) -> Result<T, NetNsError>
    where
        T: Send,
        F: FnOnce() -> T + Send,
    {
        thread::scope(|scope| self.join(self.spawn_scoped(scope, f)?))
    }

    /// Runs `f` on the calling thread moved into this namespace, then moves
    /// the thread back: two `setns` calls instead of a thread, for a
    /// one-shot program that needs one quick thing made inside a namespace,
    /// typically a socket (which stays bound to the namespace it was made
    /// in). [`NetNs::run`] stays the tool for library code and longer work.
    ///
    /// Why this is safe in a single-shot plugin: the namespace belongs to
    /// the thread, so no other thread sees the switch; only `f` runs while
    /// the thread is inside, and it must neither start processes nor
    /// threads (they would stay inside). The one hazard is a failed switch
    /// back ([`NetNsError::SwitchBack`], [`NetNsError::left_thread_inside`]):
    /// the thread is then still inside, `f`'s value is dropped, and the
    /// caller must stop at once (a plugin reports the error and exits)
    /// rather than run anything else in the wrong namespace. The kernel
    /// refuses that switch only for lack of privileges or memory, and the
    /// switch in has just shown that the privileges are there.
    pub fn enter_briefly<T>(&self, f: impl FnOnce() -> T) -> Result<T, NetNsError> {
        let home = NetNs::current_thread()?;
        setns(self.file.as_fd(), CloneFlags::CLONE_NEWNET).map_err(|source| {
            NetNsError::Switch {
                path: self.path.clone(),
                source,
            }
        })?;
        let value = f();
        setns(home.file.as_fd(), CloneFlags::CLONE_NEWNET).map_err(|source| {
            NetNsError::SwitchBack {
                path: self.path.clone(),
                source,
            }
        })?;
        Ok(value)
    }

    /// Starts `f` inside this namespace on a new thread of `scope`, as
    /// [`NetNs::run`] does, without waiting for it: the caller goes on with
    /// other work and collects the value with [`NetNs::join`].
    pub fn spawn_scoped<'scope, 'env, T, F>(
        &'scope self,
        scope: &'scope Scope<'scope, 'env>,
        f: F,
    ) -> Result<ScopedJoinHandle<'scope, Result<T, NetNsError>>, NetNsError>
    where
        T: Send + 'scope,
        F: FnOnce() -> T + Send + 'scope,
    {
        thread::Builder::new()
            .name("netns-run".into())
            .spawn_scoped(scope, move || -> Result<T, NetNsError> {
                setns(self.file.as_fd(), CloneFlags::CLONE_NEWNET).map_err(|source| {
                    NetNsError::Switch {
                        path: self.path.clone(),
                        source,
                    }
                })?;
                Ok(f())
            })
            .map_err(|e| self.worker_failed(format!("cannot spawn thread: {e}")))
    }

    /// Waits for a thread started by [`NetNs::spawn_scoped`] and returns the
    /// value of its closure.
    pub fn join<T>(
        &self,
        worker: ScopedJoinHandle<'_, Result<T, NetNsError>>,
    ) -> Result<T, NetNsError> {
        worker
            .join()
            .map_err(|payload| self.worker_failed(panic_message(payload.as_ref())))?
    }

    fn worker_failed(&self, msg: String) -> NetNsError {
        NetNsError::Thread {
            path: self.path.clone(),
            msg,
        }
    }
}

/// The text of a panic payload (`panic!` gives a `&str` or a `String`).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        format!("panicked: {s}")
    } else if let Some(s) = payload.downcast_ref::<String>() {
        format!("panicked: {s}")
    } else {
        "panicked".to_string()
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

    /// Found by plugin-fuzz: CNI_NETNS naming a FIFO hung every plugin in
    /// open(2) until the runtime killed it. It is refused at once now.
    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("ns");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600))
            .expect("mkfifo");
        let (tx, rx) = std::sync::mpsc::channel();
        let path = fifo.clone();
        std::thread::spawn(move || {
            let _ = tx.send(NetNs::open(&path).map(|_| ()));
        });
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("NetNs::open blocked on a FIFO");
        let err = got.expect_err("a FIFO is not a network namespace");
        assert!(matches!(err, NetNsError::NotNetNs { .. }), "{err}");
        assert_eq!(err.error_code(), crate::ErrorCode::InvalidEnvironment);
    }

    #[test]
    fn own_netns_is_detected() {
        assert!(is_current_thread_netns(THREAD_NETNS_PATH));
        assert!(is_current_thread_netns("/proc/self/ns/net"));
    }

    #[test]
    fn refused_switch_names_the_missing_capability() {
        let refused = NetNsError::Switch {
            path: PathBuf::from("/run/netns/pod"),
            source: nix::Error::EPERM,
        };
        assert_eq!(
            refused.to_string(),
            "failed to switch to netns \"/run/netns/pod\": EPERM: Operation not permitted \
             (entering a network namespace needs CAP_SYS_ADMIN: run the plugin as root, as \
             container runtimes do)"
        );
        let other = NetNsError::Switch {
            path: PathBuf::from("/run/netns/pod"),
            source: nix::Error::EINVAL,
        };
        assert_eq!(
            other.to_string(),
            "failed to switch to netns \"/run/netns/pod\": EINVAL: Invalid argument"
        );
    }

    #[test]
    fn missing_path_is_not_exist() {
        let e = NetNs::open("/nonexistent/netns/x").unwrap_err();
        assert!(e.is_not_exist(), "{e}");
    }

    #[test]
    fn run_in_own_netns_returns_value_and_borrows() {
        let own = NetNs::current_thread().unwrap();
        let outside = own.identity().unwrap();
        let seen = own
            .run(|| NetNs::current_thread().unwrap().identity().unwrap())
            .unwrap();
        assert_eq!(seen, outside);
        // The worker thread is a different thread from the caller.
        let caller = thread::current().id();
        assert_ne!(own.run(|| thread::current().id()).unwrap(), caller);
    }

    /// A new namespace, alive as long as the returned file is open.
    fn fresh_netns() -> NetNs {
        thread::spawn(|| {
            nix::sched::unshare(CloneFlags::CLONE_NEWNET).unwrap();
            NetNs::current_thread().unwrap()
        })
        .join()
        .unwrap()
    }

    fn current_identity() -> (u64, u64) {
        NetNs::current_thread().unwrap().identity().unwrap()
    }

    #[test]
    fn spawned_worker_runs_inside_beside_the_caller() {
        let fresh = fresh_netns();
        let caller = thread::current().id();
        let home = current_identity();
        let (seen, worker) = thread::scope(|scope| {
            let handle = fresh
                .spawn_scoped(scope, || (current_identity(), thread::current().id()))
                .unwrap();
            // The caller is free meanwhile, and stays where it was.
            assert_eq!(current_identity(), home);
            fresh.join(handle).unwrap()
        });
        assert_eq!(seen, fresh.identity().unwrap());
        assert_ne!(seen, home);
        assert_ne!(worker, caller);
    }

    #[test]
    fn enter_briefly_switches_there_and_back() {
        let fresh = fresh_netns();
        let home = current_identity();
        let (inside, thread_inside) = fresh
            .enter_briefly(|| (current_identity(), thread::current().id()))
            .unwrap();
        assert_eq!(inside, fresh.identity().unwrap());
        assert_ne!(inside, home);
        assert_eq!(thread_inside, thread::current().id(), "no other thread");
        assert_eq!(current_identity(), home);
    }

    #[test]
    fn run_reports_panic_as_thread_error() {
        let own = NetNs::current_thread().unwrap();
        let e = own.run(|| -> u8 { panic!("boom {}", 7) }).unwrap_err();
        match e {
            NetNsError::Thread { msg, .. } => assert!(msg.contains("boom 7"), "{msg}"),
            other => panic!("unexpected error {other}"),
        }
        let e = own.run(|| -> u8 { panic!("static str") }).unwrap_err();
        assert!(e.to_string().contains("static str"), "{e}");
    }

    #[test]
    fn regular_file_is_not_a_netns() {
        let f = tempfile::NamedTempFile::new().unwrap();
        let e = NetNs::open(f.path()).unwrap_err();
        assert!(matches!(e, NetNsError::NotNetNs { .. }), "{e}");
        assert!(!is_current_thread_netns(f.path()));
    }
}
