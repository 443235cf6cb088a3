//! What stops the installer. It is not a CNI plugin (nothing runs it with
//! `CNI_COMMAND`), so there are no spec codes: every error ends the run
//! with exit status 1 and its message on stderr, which the container log
//! keeps.

use std::io;
use std::path::PathBuf;

use libcni::conf::ConfError;
use libcni::lock::LockError;

#[derive(Debug, thiserror::Error)]
pub enum InstallerError {
    #[error("cannot read {path:?}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("cannot write {path:?}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("checksum list {path:?}: {reason}")]
    BadList { path: PathBuf, reason: String },
    /// Every source problem found, so that one run names them all.
    #[error("nothing installed: {}", .problems.join("; "))]
    Refused { problems: Vec<String> },
    #[error("nothing installed: conflist {path:?} is not a valid network configuration: {source}")]
    BadConflist { path: PathBuf, source: ConfError },
    #[error("nothing installed: conflist {path:?} must end in .conflist, .conf or .json (what runtimes load)")]
    ConflistExtension { path: PathBuf },
    #[error(
        "nothing installed: {path:?} changed while it was being copied \
         (sha256 {found}, the list says {expected})"
    )]
    SourceChanged {
        path: PathBuf,
        expected: String,
        found: String,
    },
    #[error("cannot lock {0:?} against another installer: {1}")]
    Lock(PathBuf, LockError),
    /// A rename failed after others succeeded: those files are the new
    /// ones, the rest are as they were.
    #[error(
        "replacing {path:?} failed after {} other file(s) were updated ({}): {source}",
        .done.len(),
        .done.join(", ")
    )]
    Partial {
        path: PathBuf,
        done: Vec<String>,
        source: io::Error,
    },
    #[error("waiting for a signal: {0}")]
    Signal(nix::errno::Errno),
}
