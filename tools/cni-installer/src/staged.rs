//! A file written beside its destination under a temporary name, flushed
//! to disk, then renamed over the destination.
//!
//! Why not write the destination in place: a runtime may exec the plugin
//! at any moment and would run a half-written binary; and a plugin that is
//! running holds its file open for execution, so opening it for writing
//! fails with ETXTBSY. A rename only swaps the folder entry: a process
//! already running keeps its old file, the next exec gets the whole new
//! one.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::InstallerError;
use crate::sums::Sha256Sum;

const TEMP_MARK: &str = ".cni-installer-";

/// A written, synced temporary file; dropped uncommitted, it is removed.
#[derive(Debug)]
pub struct Staged {
    temp: PathBuf,
    target: PathBuf,
    committed: bool,
}

impl Staged {
    /// Copies `source` into a new file beside `target` with `mode`, syncs
    /// it and returns it with the digest of the bytes written.
    pub fn write(
        target: &Path,
        mode: u32,
        source: &mut dyn Read,
    ) -> Result<(Staged, Sha256Sum), InstallerError> {
        let temp = temp_name(target);
        let write_error = |source| InstallerError::Write {
            path: temp.clone(),
            source,
        };
        // A temporary file a killed run left behind under this very name
        // (same PID in a new container) is ours to replace.
        match std::fs::remove_file(&temp) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(write_error(e)),
        }
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&temp)
            .map_err(write_error)?;
        let staged = Staged {
            temp: temp.clone(),
            target: target.to_path_buf(),
            committed: false,
        };
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match source.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(InstallerError::Read {
                        path: target.to_path_buf(),
                        source: e,
                    })
                }
            };
            hasher.update(&buf[..n]);
            file.write_all(&buf[..n]).map_err(write_error)?;
        }
        // The umask may have cut the mode at creation.
        file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))
            .map_err(write_error)?;
        // On disk before the rename makes it visible: after a crash the
        // name points at the old file or the whole new one, never an empty
        // one.
        file.sync_all().map_err(write_error)?;
        Ok((staged, hasher.finalize().into()))
    }

    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Renames the file over its target.
    pub fn commit(mut self) -> io::Result<()> {
        std::fs::rename(&self.temp, &self.target)?;
        self.committed = true;
        Ok(())
    }

    /// Puts the file at its target unless a file of that name exists,
    /// checked by the kernel as it links the name (so a file created
    /// meanwhile is not overwritten). False when one existed.
    pub fn commit_unless_present(self) -> io::Result<bool> {
        // A hard link is a rename that refuses to replace; the temporary
        // name then goes as `self` drops.
        match std::fs::hard_link(&self.temp, &self.target) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        }
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// `.<name>.cni-installer-<pid>` in the target's folder: hidden, and with
/// an extension no runtime loads as a configuration (`.conflist`,
/// `.conf`, `.json`) nor a plugin name it execs.
fn temp_name(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    target.with_file_name(format!(".{name}{TEMP_MARK}{}", std::process::id()))
}

/// Whether `name` is one [`temp_name`] makes.
pub fn is_temp_name(name: &std::ffi::OsStr) -> bool {
    let name = name.to_string_lossy();
    name.starts_with('.')
        && name
            .rsplit_once(TEMP_MARK)
            .is_some_and(|(_, pid)| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}

/// Flushes a folder's entries (the renames) to disk.
pub fn sync_dir(dir: &Path) -> Result<(), InstallerError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| InstallerError::Write {
            path: dir.to_path_buf(),
            source,
        })
}
