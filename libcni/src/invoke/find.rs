//! Plugin lookup in the search path.

use std::path::PathBuf;

use super::InvokeError;

/// The binary for plugin `plugin`: the first `<dir>/<plugin>` over `paths`
/// that is a regular file once symlinks are followed.
///
/// A name containing `/` is refused: `type` names a binary in the search
/// path, never a path of its own.
pub fn find_in_path(plugin: &str, paths: &[PathBuf]) -> Result<PathBuf, InvokeError> {
    if plugin.is_empty() {
        return Err(InvokeError::NoPluginName);
    }
    if plugin.contains('/') {
        return Err(InvokeError::InvalidPluginName(plugin.to_string()));
    }
    if paths.is_empty() {
        return Err(InvokeError::NoPaths);
    }
    paths
        .iter()
        .map(|dir| dir.join(plugin))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .map(|m| m.is_file())
                .unwrap_or(false)
        })
        .ok_or_else(|| InvokeError::PluginNotFound {
            plugin: plugin.to_string(),
            paths: paths.to_vec(),
        })
}
