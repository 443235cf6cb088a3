//! Reading a file a network configuration names, bounded.
//!
//! With Multus a namespace user writes the whole configuration, so a path
//! in it may name a FIFO (the read blocks forever), `/dev/zero` (the read
//! fills the node's memory) or a device whose open or read has effects.
//! Every read of a configuration-named file goes through [`read_bounded`]:
//! it opens without blocking, refuses what is not a regular file before
//! reading a byte, and reads no more than the caller's cap. Each caller
//! documents its cap beside the key ([`RESOLV_CONF_CAP`], ...).
//!
//! Errors are `io::Error`s, so callers keep their own error enums; a
//! missing file stays `NotFound`, a refused one is `InvalidInput` with a
//! message naming the path and why.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// `resolvConf` (host-local): resolv.conf files are a few hundred bytes;
/// glibc reads at most a handful of lines of each kind.
pub const RESOLV_CONF_CAP: u64 = 64 * 1024;
/// An etcd password file (cluster-ipam `passwordFile`).
pub const PASSWORD_CAP: u64 = 4 * 1024;
/// A PEM file (cluster-ipam `caFile`, `certFile`, `keyFile`): a CA bundle
/// of every public root is about 250 KiB.
pub const PEM_CAP: u64 = 1024 * 1024;
/// A device-info file (`runtimeConfig.CNIDeviceInfoFile`): one small JSON
/// object per device.
pub const DEVICE_INFO_CAP: u64 = 64 * 1024;

/// Whether the last component of the path may be a symbolic link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Symlinks {
    /// Followed: for files the administrator's system links (resolv.conf
    /// is often a link into /run).
    Follow,
    /// Refused (`O_NOFOLLOW`, `ELOOP`).
    Refuse,
}

/// The bytes of the regular file at `path`, at most `cap` of them.
pub fn read_bounded(path: &Path, cap: u64, symlinks: Symlinks) -> io::Result<Vec<u8>> {
    read_bounded_file(open_for_reading(path, symlinks)?, path, cap)
}

/// Opens `path` for reading as [`read_bounded`] does, for a caller that
/// looks at the file's metadata before it reads.
pub fn open_for_reading(path: &Path, symlinks: Symlinks) -> io::Result<File> {
    // O_NONBLOCK: opening a FIFO without a writer would block, and so
    // would some devices; O_NOCTTY: a terminal must not become ours.
    let mut flags = libc::O_NONBLOCK | libc::O_NOCTTY;
    if symlinks == Symlinks::Refuse {
        flags |= libc::O_NOFOLLOW;
    }
    OpenOptions::new().read(true).custom_flags(flags).open(path)
}

/// As [`read_bounded`], for a file already open (`path` only names it in
/// messages).
pub fn read_bounded_file(file: File, path: &Path, cap: u64) -> io::Result<Vec<u8>> {
    let meta = file.metadata()?;
    let kind = meta.file_type();
    if !kind.is_file() {
        let what = if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_char_device() {
            "a character device"
        } else if kind.is_block_device() {
            "a block device"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_dir() {
            "a directory"
        } else {
            "not a regular file"
        };
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is {what}, not a regular file", path.display()),
        ));
    }
    let too_large = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is larger than {cap} bytes", path.display()),
        )
    };
    if meta.len() > cap {
        return Err(too_large());
    }
    // The size may have grown since fstat: read one byte past the cap to
    // tell.
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(cap.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(too_large());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_regular_file_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("resolv.conf");
        std::fs::write(&path, b"nameserver 10.0.0.1\n").unwrap();
        assert_eq!(
            read_bounded(&path, 20, Symlinks::Refuse).unwrap(),
            b"nameserver 10.0.0.1\n"
        );
        let e = read_bounded(&path, 19, Symlinks::Refuse).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(
            e.to_string(),
            format!("{} is larger than 19 bytes", path.display())
        );
        let e = read_bounded(&dir.path().join("absent"), 20, Symlinks::Follow).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    /// A FIFO without a writer would block a plain open forever, and
    /// /dev/zero would fill memory: both are refused at once.
    #[test]
    fn fifos_and_devices_are_refused_without_reading() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let started = Instant::now();
        let e = read_bounded(&fifo, 1 << 20, Symlinks::Follow).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(
            e.to_string(),
            format!("{} is a FIFO, not a regular file", fifo.display())
        );
        let e = read_bounded(Path::new("/dev/zero"), 1 << 20, Symlinks::Follow).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/dev/zero is a character device, not a regular file"
        );
        let e = read_bounded(dir.path(), 1 << 20, Symlinks::Follow).unwrap_err();
        assert!(
            e.to_string()
                .ends_with("is a directory, not a regular file"),
            "{e}"
        );
    }

    #[test]
    fn a_symlink_is_followed_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, b"x").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert_eq!(read_bounded(&link, 10, Symlinks::Follow).unwrap(), b"x");
        let e = read_bounded(&link, 10, Symlinks::Refuse).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{e}");
        let zero_link = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero_link).unwrap();
        let e = read_bounded(&zero_link, 10, Symlinks::Follow).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    }
}
