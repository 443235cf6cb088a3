//! The plugin binaries: every source checked against the list before any
//! is copied, then each copied beside its destination and renamed over it.

use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use libcni::lock::{FileLock, LockWait};

use crate::error::InstallerError;
use crate::staged::{sync_dir, Staged};
use crate::sums::{file_sum, to_hex, ListedFile};
use crate::Outcome;

/// Plugins are executables, readable by all as runtimes install them.
const PLUGIN_MODE: u32 = 0o755;

/// Another installer on the node (a DaemonSet rolling over with surge)
/// copies the same files; it takes seconds at most.
const LOCK_WAIT: LockWait = LockWait {
    timeout: Duration::from_secs(120),
    holder: "another cni-installer",
};

/// Checks every listed source file, and (unless `ignore_unlisted`) that the
/// folder holds nothing the list does not cover; returns every problem
/// found (empty: all good).
pub fn check_sources(
    from: &Path,
    list_path: &Path,
    list: &[ListedFile],
    ignore_unlisted: bool,
) -> Vec<String> {
    let mut problems = Vec::new();
    for file in list {
        let path = from.join(&file.name);
        match file_sum(&path) {
            Ok(Some(sum)) if sum == file.sha256 => {}
            Ok(Some(sum)) => problems.push(format!(
                "{path:?} has sha256 {}, the list says {}",
                to_hex(&sum),
                to_hex(&file.sha256)
            )),
            Ok(None) => problems.push(format!("{path:?} is listed but missing")),
            Err(e) => problems.push(e.to_string()),
        }
    }
    // A file the list does not name cannot be checked; the image was built
    // wrong, and installing the rest would hide that. A release archive's
    // tools and text files are not plugins and are not listed: the caller
    // says so, and they stay out of the plugin folder.
    if ignore_unlisted {
        return problems;
    }
    let list_name = list_path.file_name();
    match std::fs::read_dir(from) {
        Ok(entries) => {
            for entry in entries.flatten() {
                let name = entry.file_name();
                let same_as_list = Some(name.as_os_str()) == list_name
                    && entry.path().canonicalize().ok() == list_path.canonicalize().ok();
                let listed = list.iter().any(|f| name.to_str() == Some(f.name.as_str()));
                if !same_as_list && !listed {
                    problems.push(format!(
                        "{:?} is not in the checksum list {list_path:?}",
                        entry.path()
                    ));
                }
            }
        }
        Err(e) => problems.push(format!("cannot list {from:?}: {e}")),
    }
    problems
}

/// Copies the listed files from `from` into `to`, which the caller checked
/// with [`check_sources`]. Files already identical (content and mode) are
/// left alone. Nothing is renamed into place until every copy is written
/// and synced.
pub fn install(
    from: &Path,
    to: &Path,
    list: &[ListedFile],
) -> Result<Vec<(Outcome, PathBuf)>, InstallerError> {
    std::fs::create_dir_all(to).map_err(|source| InstallerError::Write {
        path: to.to_path_buf(),
        source,
    })?;
    // The folder itself is the lock: nothing extra is left in it.
    let dir = File::open(to).map_err(|source| InstallerError::Read {
        path: to.to_path_buf(),
        source,
    })?;
    let _lock = FileLock::acquire_open(&dir, to, LOCK_WAIT)
        .map_err(|e| InstallerError::Lock(to.to_path_buf(), e))?;

    remove_stale_copies(to)?;

    let mut outcomes = Vec::new();
    let mut staged = Vec::new();
    for file in list {
        let target = to.join(&file.name);
        let outcome = match current_state(&target, file)? {
            Current::Same => {
                outcomes.push((Outcome::Unchanged, target));
                continue;
            }
            Current::Missing => Outcome::Installed,
            Current::Different => Outcome::Replaced,
        };
        let source_path = from.join(&file.name);
        let mut source = File::open(&source_path).map_err(|source| InstallerError::Read {
            path: source_path.clone(),
            source,
        })?;
        let (copy, written) = Staged::write(&target, PLUGIN_MODE, &mut source)?;
        // The bytes copied are the bytes checked: the source could have
        // changed since check_sources read it.
        if written != file.sha256 {
            return Err(InstallerError::SourceChanged {
                path: source_path,
                expected: to_hex(&file.sha256),
                found: to_hex(&written),
            });
        }
        staged.push((outcome, copy));
    }

    let mut done = Vec::new();
    let mut staged = staged.into_iter();
    for (outcome, copy) in staged.by_ref() {
        let target = copy.target().to_path_buf();
        if let Err(source) = copy.commit() {
            // The copies not yet renamed are removed as `staged` drops.
            return Err(InstallerError::Partial {
                path: target,
                done,
                source,
            });
        }
        done.push(target.display().to_string());
        outcomes.push((outcome, target));
    }
    sync_dir(to)?;
    // The list's order, whatever was skipped or copied.
    outcomes.sort_by_key(|(_, path)| {
        list.iter()
            .position(|f| path.file_name().and_then(|n| n.to_str()) == Some(f.name.as_str()))
    });
    Ok(outcomes)
}

/// Removes the temporary copies of a run that was killed before renaming
/// them (another PID, so its names are not reused). Called under the lock:
/// no other installer is writing.
fn remove_stale_copies(to: &Path) -> Result<(), InstallerError> {
    let entries = std::fs::read_dir(to).map_err(|source| InstallerError::Read {
        path: to.to_path_buf(),
        source,
    })?;
    for entry in entries.flatten() {
        if crate::staged::is_temp_name(&entry.file_name()) {
            let path = entry.path();
            std::fs::remove_file(&path).map_err(|source| InstallerError::Write { path, source })?;
        }
    }
    Ok(())
}

enum Current {
    Missing,
    Same,
    Different,
}

fn current_state(target: &Path, file: &ListedFile) -> Result<Current, InstallerError> {
    let meta = match std::fs::symlink_metadata(target) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Current::Missing),
        Err(source) => {
            return Err(InstallerError::Read {
                path: target.to_path_buf(),
                source,
            })
        }
    };
    // A symlink or a file with another mode is replaced by a plain file
    // even when the bytes match.
    if !meta.file_type().is_file() || meta.permissions().mode() & 0o7777 != PLUGIN_MODE {
        return Ok(Current::Different);
    }
    Ok(match file_sum(target)? {
        Some(sum) if sum == file.sha256 => Current::Same,
        Some(_) => Current::Different,
        None => Current::Missing,
    })
}
