//! Network configurations placed into the runtime's folder. An operator's
//! file of the same name wins unless the run is told to replace it: the
//! installer runs on every pod start of the DaemonSet, and must not undo
//! an edit made on the node.

use std::path::{Path, PathBuf};

use libcni::conf::{conflist_from_bytes, plugin_conf_from_bytes};

use crate::error::InstallerError;
use crate::staged::{sync_dir, Staged};
use crate::Outcome;

/// Readable by all, as runtimes and `cnitool` read it.
const CONF_MODE: u32 = 0o644;

/// A checked configuration file waiting to be placed.
#[derive(Debug)]
pub struct Conflist {
    source: PathBuf,
    name: std::ffi::OsString,
    bytes: Vec<u8>,
}

/// Expands `paths` (files, or folders whose configuration files are all
/// taken, as a mounted ConfigMap is) and parses each as the runtime would
/// load it: a broken file in the runtime's folder stops its networks.
pub fn collect(paths: &[PathBuf]) -> Result<Vec<Conflist>, InstallerError> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut found = libcni::conf::conf_files(path, &[".conflist", ".conf", ".json"])
                .map_err(|e| InstallerError::BadConflist {
                    path: path.clone(),
                    source: e,
                })?;
            // A ConfigMap volume holds each key as a symlink into a hidden
            // `..data` folder; only the visible names are configurations.
            found.retain(|f| {
                f.file_name()
                    .is_some_and(|n| !n.to_string_lossy().starts_with('.'))
            });
            files.extend(found);
        } else {
            files.push(path.clone());
        }
    }
    files.into_iter().map(|path| check(&path)).collect()
}

fn check(path: &Path) -> Result<Conflist, InstallerError> {
    let bytes = std::fs::read(path).map_err(|source| InstallerError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let parsed = match path.extension().and_then(|e| e.to_str()) {
        Some("conflist") => conflist_from_bytes(&bytes).map(drop),
        Some("conf" | "json") => plugin_conf_from_bytes(&bytes).map(drop),
        _ => {
            return Err(InstallerError::ConflistExtension {
                path: path.to_path_buf(),
            })
        }
    };
    parsed.map_err(|source| InstallerError::BadConflist {
        path: path.to_path_buf(),
        source,
    })?;
    let name = path
        .file_name()
        .ok_or_else(|| InstallerError::ConflistExtension {
            path: path.to_path_buf(),
        })?
        .to_os_string();
    Ok(Conflist {
        source: path.to_path_buf(),
        name,
        bytes,
    })
}

/// Places `conf` into `conf_dir`. Returns what happened.
pub fn place(
    conf: &Conflist,
    conf_dir: &Path,
    replace: bool,
) -> Result<(Outcome, PathBuf), InstallerError> {
    std::fs::create_dir_all(conf_dir).map_err(|source| InstallerError::Write {
        path: conf_dir.to_path_buf(),
        source,
    })?;
    let target = conf_dir.join(&conf.name);
    let existing = match std::fs::read(&target) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(InstallerError::Read {
                path: target,
                source,
            })
        }
    };
    let outcome = match existing {
        Some(bytes) if bytes == conf.bytes => return Ok((Outcome::Unchanged, target)),
        Some(_) if !replace => return Ok((Outcome::Kept, target)),
        Some(_) => Outcome::Replaced,
        None => Outcome::Installed,
    };
    // Written from the bytes checked, not read again.
    let (staged, _) = Staged::write(&target, CONF_MODE, &mut conf.bytes.as_slice())?;
    let write_error = |source| InstallerError::Write {
        path: target.clone(),
        source,
    };
    let outcome = match outcome {
        Outcome::Installed => {
            // A file of that name created since the read above is kept.
            if staged.commit_unless_present().map_err(write_error)? {
                Outcome::Installed
            } else {
                Outcome::Kept
            }
        }
        other => {
            staged.commit().map_err(write_error)?;
            other
        }
    };
    sync_dir(conf_dir)?;
    Ok((outcome, target))
}

impl Conflist {
    pub fn source(&self) -> &Path {
        &self.source
    }
}
