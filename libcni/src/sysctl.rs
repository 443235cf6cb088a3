//! Kernel parameters under `/proc/sys`.
//!
//! Paths are relative and use `/` (`net/ipv4/conf/eth0/arp_notify`): dots
//! cannot separate components because interface names may contain them.
//!
//! `/proc/sys/net` shows the network namespace of the thread that opens the
//! file, so a value for a container's namespace must be read or written from
//! inside it: call these functions within [`crate::netns::NetNs::run`].
//!
//! Files are opened through a private instance of procfs, mounted detached
//! (no mount point, gone when the process exits), not through the host's
//! `/proc`. Why: in one procfs instance, the `ipv4` and `ipv6` entries of
//! every network namespace that has ever had a parameter looked up hang from
//! one shared `net` dentry under one name, so they share one dcache hash
//! chain, and each lookup compares itself against all of them. On a node
//! with 400 pods, the first open in a new pod's namespace took 0.2-0.8 ms
//! per family here and a later open in the host 30-75 µs; through a private
//! instance the chain holds only this process's entries: mount about 20 µs,
//! each open 3-15 µs. It also keeps our pods' entries out of the host's
//! chain, so they do not slow down anyone else's lookups. When the private
//! instance cannot be made (no mount rights in a user namespace, a seccomp
//! or LSM policy, a kernel before 5.2), the host's `/proc/sys` is used.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::sync::OnceLock;

use rustix::fs::{Mode, OFlags, CWD};
use rustix::mount::{FsMountFlags, FsOpenFlags, MountAttrFlags};

use crate::error::{CniError, ErrorCode, ToCniError};

pub const PROC_SYS: &str = "/proc/sys";

/// The directory parameters are opened from.
#[derive(Debug)]
enum SysctlRoot {
    /// The root of a private, detached procfs instance.
    Private(OwnedFd),
    /// The host's `/proc`.
    HostProc,
}

impl SysctlRoot {
    /// The process-wide root: made once, on first use.
    fn shared() -> &'static SysctlRoot {
        static ROOT: OnceLock<SysctlRoot> = OnceLock::new();
        ROOT.get_or_init(|| match mount_private_proc() {
            Ok(fd) => SysctlRoot::Private(fd),
            Err(e) => {
                log::debug!("private procfs unavailable ({e}); using {PROC_SYS}");
                SysctlRoot::HostProc
            }
        })
    }

    /// Opens `sys/<path>` below the root; `path` is already validated.
    fn open(&self, path: &str, flags: OFlags) -> io::Result<File> {
        let flags = flags | OFlags::CLOEXEC;
        let fd = match self {
            SysctlRoot::Private(root) => {
                rustix::fs::openat(root, format!("sys/{path}"), flags, Mode::empty())?
            }
            SysctlRoot::HostProc => {
                rustix::fs::openat(CWD, format!("{PROC_SYS}/{path}"), flags, Mode::empty())?
            }
        };
        Ok(File::from(fd))
    }
}

/// A new procfs instance of this process's pid namespace, mounted nowhere.
fn mount_private_proc() -> io::Result<OwnedFd> {
    let context = rustix::mount::fsopen("proc", FsOpenFlags::FSOPEN_CLOEXEC)?;
    rustix::mount::fsconfig_create(&context)?;
    let root = rustix::mount::fsmount(
        &context,
        FsMountFlags::FSMOUNT_CLOEXEC,
        MountAttrFlags::MOUNT_ATTR_NOSUID
            | MountAttrFlags::MOUNT_ATTR_NODEV
            | MountAttrFlags::MOUNT_ATTR_NOEXEC,
    )?;
    Ok(root)
}

#[derive(Debug, thiserror::Error)]
pub enum SysctlError {
    #[error("invalid sysctl path {path:?}: {reason}")]
    InvalidPath { path: String, reason: &'static str },
    #[error("failed to read sysctl {path}: {source}")]
    Read { path: String, source: io::Error },
    #[error("failed to set sysctl {path} to {value:?}: {source}")]
    Write {
        path: String,
        value: String,
        source: io::Error,
    },
}

impl SysctlError {
    /// The parameter does not exist (for instance IPv6 disabled, or no such
    /// interface in this namespace).
    pub fn is_not_found(&self) -> bool {
        match self {
            SysctlError::Read { source, .. } | SysctlError::Write { source, .. } => {
                source.kind() == io::ErrorKind::NotFound
            }
            SysctlError::InvalidPath { .. } => false,
        }
    }
}

impl ToCniError for SysctlError {
    fn to_cni_error(&self) -> CniError {
        CniError::new(ErrorCode::Internal, self.to_string())
    }
}

/// The current value, without the trailing newline.
pub fn get(path: &str) -> Result<String, SysctlError> {
    get_in(SysctlRoot::shared(), path)
}

/// Sets `path` to `value` unless it already holds it (compared without
/// surrounding whitespace). Returns whether it wrote: skipping needless
/// writes avoids side effects some parameters have on every write.
///
/// One descriptor serves the read and the write: each open costs a path
/// lookup (see the module's notes).
pub fn set(path: &str, value: &str) -> Result<bool, SysctlError> {
    set_in(SysctlRoot::shared(), path, value)
}

/// Routing between interfaces on for `family` in the calling thread's
/// namespace (`net/ipv4/ip_forward`, `net/ipv6/conf/all/forwarding`),
/// written only when off: what plugins that route for their containers
/// (bridge with a gateway, ptp) need on the host.
pub fn enable_forwarding(family: crate::IpFamily) -> Result<bool, SysctlError> {
    match family {
        crate::IpFamily::V4 => set("net/ipv4/ip_forward", "1"),
        crate::IpFamily::V6 => set("net/ipv6/conf/all/forwarding", "1"),
    }
}

fn get_in(root: &SysctlRoot, path: &str) -> Result<String, SysctlError> {
    check_path(path)?;
    let read_err = |source| SysctlError::Read {
        path: path.to_string(),
        source,
    };
    let mut file = root.open(path, OFlags::RDONLY).map_err(read_err)?;
    let mut value = String::new();
    file.read_to_string(&mut value).map_err(read_err)?;
    Ok(value.trim().to_string())
}

fn set_in(root: &SysctlRoot, path: &str, value: &str) -> Result<bool, SysctlError> {
    check_path(path)?;
    let read_err = |source| SysctlError::Read {
        path: path.to_string(),
        source,
    };
    let write_err = |source| SysctlError::Write {
        path: path.to_string(),
        value: value.to_string(),
        source,
    };
    let mut file = match root.open(path, OFlags::RDWR) {
        Ok(file) => file,
        // A read-only parameter: read it, and fail only if it differs.
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            if get_in(root, path)? == value.trim() {
                return Ok(false);
            }
            let file = root.open(path, OFlags::WRONLY).map_err(write_err)?;
            write_whole(&file, value).map_err(write_err)?;
            return Ok(true);
        }
        Err(source) => return Err(read_err(source)),
    };
    let mut current = String::new();
    file.read_to_string(&mut current).map_err(read_err)?;
    if current.trim() == value.trim() {
        return Ok(false);
    }
    // At offset 0: the read moved the file position, and a sysctl write
    // at another offset is taken as the continuation of an earlier one.
    write_whole(&file, value).map_err(write_err)?;
    Ok(true)
}

/// Writes `value` in one call at offset 0; a short write is an error. A
/// sysctl takes the first write as the value and a second one as its
/// continuation (or ignores it), so the rest is never written after: the
/// kernel's taking `"1"` of `"1\n<anything>"` must not pass for success.
fn write_whole(file: &File, value: &str) -> io::Result<()> {
    let written = file.write_at(value.as_bytes(), 0)?;
    if written != value.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            format!("short write: {written} of {} bytes taken", value.len()),
        ));
    }
    Ok(())
}

/// Rejects paths that could leave the sysctl tree or name nothing.
fn check_path(path: &str) -> Result<(), SysctlError> {
    let invalid = |reason| SysctlError::InvalidPath {
        path: path.to_string(),
        reason,
    };
    if path.is_empty() {
        return Err(invalid("empty"));
    }
    if path.starts_with('/') {
        return Err(invalid("must be relative to /proc/sys"));
    }
    if path.contains('\0') {
        return Err(invalid("contains a NUL byte"));
    }
    for component in path.split('/') {
        match component {
            "" => return Err(invalid("empty component")),
            "." | ".." => return Err(invalid("must not contain . or .. components")),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_paths_are_rejected_before_any_io() {
        for path in [
            "",
            "/proc/sys/net/ipv4/ip_forward",
            "net/../../etc/passwd",
            "..",
            "net/./ipv4",
            "net//ipv4",
            "net/ipv4/",
            "net/ipv4\0/x",
        ] {
            let e = set(path, "1").unwrap_err();
            assert!(
                matches!(e, SysctlError::InvalidPath { .. }),
                "{path:?}: {e}"
            );
            assert!(get(path).is_err(), "{path:?}");
        }
    }

    #[test]
    fn dots_inside_a_name_are_allowed() {
        // An interface may be called "a..b"; only whole components matter.
        assert!(check_path("net/ipv4/conf/a..b/forwarding").is_ok());
    }

    #[test]
    fn reads_a_global_value() {
        // Read-only and present on every Linux system.
        let v = get("kernel/ostype").unwrap();
        assert_eq!(v, "Linux");
    }

    #[test]
    fn missing_parameter_is_not_found() {
        let e = get("net/ipv4/conf/no-such-if-xyz/forwarding").unwrap_err();
        assert!(e.is_not_found(), "{e}");
        let e = set("net/ipv4/conf/no-such-if-xyz/forwarding", "1").unwrap_err();
        assert!(e.is_not_found(), "{e}");
    }

    /// Read and write through one descriptor, in a namespace of the test:
    /// the write lands (at offset 0, after the read), a second set of the
    /// same value writes nothing, and values of other lengths replace the
    /// old one whole.
    #[test]
    fn set_writes_only_what_differs() {
        crate::netlink::test_support::in_private_netns(|| {
            let key = "net/ipv4/conf/lo/arp_notify";
            assert_eq!(get(key).unwrap(), "0");
            assert!(set(key, "1").unwrap());
            assert_eq!(get(key).unwrap(), "1");
            assert!(!set(key, "1").unwrap());
            let ttl = "net/ipv4/ip_default_ttl";
            assert!(set(ttl, "100").unwrap());
            assert_eq!(get(ttl).unwrap(), "100");
            assert!(set(ttl, "9").unwrap());
            assert_eq!(get(ttl).unwrap(), "9");
        });
    }

    /// The kernel takes `1` of `1\nssh-ed25519 ...` and reports a short
    /// write: that is an error, not a success.
    #[test]
    fn a_short_write_is_an_error() {
        crate::netlink::test_support::in_private_netns(|| {
            let key = "net/ipv4/conf/lo/arp_notify";
            assert_eq!(get(key).unwrap(), "0");
            let e = set(key, "1\nssh-ed25519 AAAA x").unwrap_err();
            match &e {
                SysctlError::Write { source, .. } => {
                    assert_eq!(source.kind(), io::ErrorKind::WriteZero, "{e}");
                    assert_eq!(source.to_string(), "short write: 2 of 20 bytes taken");
                }
                other => panic!("not a write error: {other}"),
            }
        });
    }

    /// A read-only parameter holding the value is fine; one that differs
    /// fails with a write error.
    #[test]
    fn a_read_only_parameter_is_only_read() {
        assert!(!set("kernel/ostype", "Linux").unwrap());
        let e = set("kernel/ostype", "Plan9").unwrap_err();
        assert!(matches!(e, SysctlError::Write { .. }), "{e}");
    }

    /// As root on Linux 5.2 or later the private procfs instance is made;
    /// if this fails, every other test here ran against the fallback only.
    #[test]
    fn the_private_procfs_instance_is_used_as_root() {
        // Mounting procfs takes real root: a user namespace of the test's
        // own (crate::test_userns) may not, without a PID namespace.
        if !crate::test_userns::in_initial_user_namespace() {
            crate::test_skip::skip(
                "the_private_procfs_instance_is_used_as_root",
                "not root in the machine's user namespace",
            );
            return;
        }
        assert!(
            matches!(SysctlRoot::shared(), SysctlRoot::Private(_)),
            "{:?}",
            SysctlRoot::shared()
        );
    }

    /// The private instance shows the namespace of the thread that opens,
    /// like the host's /proc: a value written through one is read back
    /// through the other, in a namespace of the test, and the host's value
    /// of the same parameter is untouched.
    #[test]
    fn the_private_instance_and_host_proc_see_the_same_namespace() {
        if !crate::test_userns::in_initial_user_namespace() {
            crate::test_skip::skip(
                "the_private_instance_and_host_proc_see_the_same_namespace",
                "not root in the machine's user namespace",
            );
            return;
        }
        let private = SysctlRoot::Private(mount_private_proc().unwrap());
        let host = SysctlRoot::HostProc;
        let key = "net/ipv4/ip_default_ttl";
        let outside = get_in(&host, key).unwrap();
        assert_eq!(get_in(&private, key).unwrap(), outside);
        crate::netlink::test_support::in_private_netns(|| {
            assert!(set_in(&private, key, "77").unwrap());
            assert_eq!(get_in(&host, key).unwrap(), "77");
            assert!(!set_in(&host, key, "77").unwrap());
            assert!(set_in(&host, key, "78").unwrap());
            assert_eq!(get_in(&private, key).unwrap(), "78");
            let e = get_in(&private, "net/ipv4/conf/no-such-if-xyz/forwarding").unwrap_err();
            assert!(e.is_not_found(), "{e}");
        });
        assert_eq!(get_in(&host, key).unwrap(), outside);
        assert_eq!(get_in(&private, key).unwrap(), outside);
    }
}
