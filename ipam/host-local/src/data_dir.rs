//! Where `ipam.dataDir` may point (issue 28). With Multus a namespace user
//! writes the whole configuration, and host-local creates, writes and
//! deletes lease files in that folder, so it is accepted only inside the
//! state folders ([`Place::State`]: `/var/lib/cni`, `/run/cni`, or what the
//! node's policy file allows). The network's folder is then reached
//! beneath the allowed folder without following any symbolic link (and
//! made that way for ADD), so a link planted inside an allowed folder
//! cannot lead the store out of it; the store itself then works by path
//! under that folder, which only root can change.
//!
//! The default (`/var/lib/cni/networks`) and any folder inside the default
//! places are checked without reading the policy file.

use std::path::Path;

use libcni::confine::{ConfineError, Place, Places};

use crate::config::StoreConfig;

/// The configuration key, as errors name it.
pub const KEY: &str = "ipam.dataDir";

/// Folders made on the way to the network's folder: the store's own mode.
const DIR_MODE: u32 = 0o755;

/// Checks `store`'s folder: inside the state folders, reached through no
/// link. With `create` (ADD) the missing folders are made beneath the
/// allowed one; otherwise a missing folder is fine (nothing to release).
pub fn confine(store: &StoreConfig, create: bool) -> Result<(), ConfineError> {
    confine_with(store, create, Places::node)
}

/// [`confine`] with the node's places from `node`, asked only when the
/// default places refuse the folder.
pub fn confine_with(
    store: &StoreConfig,
    create: bool,
    node: impl FnOnce() -> Result<Places, ConfineError>,
) -> Result<(), ConfineError> {
    // The network's folder is what must lie strictly inside an allowed
    // folder, so `dataDir` may be an allowed folder itself (kind's
    // `/run/cni-ipam-state`, allowed as it is).
    let folder = store.data_dir.join(&store.network);
    let checked = Places::default()
        .confine(KEY, Place::State, &folder)
        .or_else(|_| node()?.confine(KEY, Place::State, &folder))
        .and_then(
            |confined| match confined.open_folder(create.then_some(DIR_MODE)) {
                Ok(_) => Ok(()),
                Err(ConfineError::Io { source, .. })
                    if !create && source.kind() == std::io::ErrorKind::NotFound =>
                {
                    Ok(())
                }
                Err(e) => Err(e),
            },
        );
    checked.map_err(|e| name_data_dir(e, &store.data_dir))
}

/// The errors name the network's folder; the operator wrote `dataDir`.
fn name_data_dir(e: ConfineError, data_dir: &Path) -> ConfineError {
    let path = data_dir.to_path_buf();
    match e {
        ConfineError::Outside {
            key,
            setting,
            allowed,
            policy,
            ..
        } => ConfineError::Outside {
            key,
            path,
            setting,
            allowed,
            policy,
        },
        ConfineError::NotPlain { key, .. } => ConfineError::NotPlain { key, path },
        ConfineError::Link { key, .. } => ConfineError::Link { key, path },
        ConfineError::Io { key, source, .. } => ConfineError::Io { key, path, source },
        other => other,
    }
}

/// Whether a refusal is the configuration's fault (code 7) rather than
/// the file system's (code 5).
pub fn is_config_error(e: &ConfineError) -> bool {
    !matches!(e, ConfineError::Io { .. })
}

#[cfg(test)]
mod tests;
