//! Small state files that plugins keep between ADD and DEL (saved link
//! settings, leases): written whole or not at all.
//!
//! A reader (a concurrent DEL or GC, or the next call after a crash) must
//! never see half a file, so the data goes to a temporary file beside the
//! target and is renamed over it: rename within a directory is atomic.
//! Temporary files start with `.` and end with `.tmp`, so a directory scan
//! can tell them from state ([`is_temporary`]).
//!
//! No fsync: what a power loss can leave is an empty or missing file, and
//! the namespaces and links the state describes do not survive a reboot
//! either; readers treat an unreadable file as no state.

use std::fs::{self, DirBuilder, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `data` to `path` atomically. Missing directories are created
/// with mode 0700 and the file gets mode 0600: state names containers and
/// their settings, which are not for other users.
pub fn write_atomically(path: &Path, data: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or_else(|| Path::new("."));
    DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let file_name = path
        .file_name()
        .ok_or_else(|| io::Error::other(format!("{} names no file", path.display())))?
        .to_string_lossy();
    let tmp = dir.join(format!(
        ".{file_name}.{}.{}.tmp",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(data)?;
        fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

/// Whether a directory entry is a temporary file of [`write_atomically`].
pub fn is_temporary(file_name: &str) -> bool {
    file_name.starts_with('.') && file_name.ends_with(".tmp")
}

/// Removes `path`; a file that is already gone is not an error.
pub fn remove_if_exists(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn writes_whole_files_with_private_modes_and_leaves_no_temporary() {
        let root = tempfile::tempdir().unwrap();
        let path = root.path().join("a/b/state.json");
        write_atomically(&path, b"first").unwrap();
        write_atomically(&path, b"second").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"second");
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&root.path().join("a/b")), 0o700);
        let names: Vec<_> = fs::read_dir(root.path().join("a/b"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, ["state.json"]);
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temporary() {
        let root = tempfile::tempdir().unwrap();
        let path = root.path().join("state.json");
        write_atomically(&path, b"old").unwrap();
        // A directory where the file should go: the rename fails.
        let blocked = root.path().join("dir.json");
        fs::create_dir(&blocked).unwrap();
        fs::write(blocked.join("x"), b"").unwrap();
        assert!(write_atomically(&blocked, b"new").is_err());
        assert_eq!(fs::read(&path).unwrap(), b"old");
        let temporaries = fs::read_dir(root.path())
            .unwrap()
            .filter(|e| is_temporary(&e.as_ref().unwrap().file_name().to_string_lossy()))
            .count();
        assert_eq!(temporaries, 0);
    }

    #[test]
    fn removing_a_missing_file_is_fine() {
        let root = tempfile::tempdir().unwrap();
        let path = root.path().join("gone.json");
        remove_if_exists(&path).unwrap();
        fs::write(&path, b"x").unwrap();
        remove_if_exists(&path).unwrap();
        assert!(!path.exists());
        assert!(is_temporary(".gone.json.12.0.tmp"));
        assert!(!is_temporary("gone.json"));
    }
}
