//! Running plugin binaries: lookup, the environment they get, execution
//! and decoding what they print.
//!
//! [`Exec`] is the single seam between CNI logic and processes: the runtime
//! side ([`crate::runtime`]) and delegation ([`Delegator`]) only ever reach a
//! plugin through it, so tests substitute a recording fake for [`RawExec`].

mod delegate;
mod env;
mod find;
mod raw_exec;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{CniError, ErrorCode, ToCniError};
use crate::types::{AnyResult, ResultError};
use crate::version::{SpecVersion, VersionError};

pub use crate::skel::Command;
pub use delegate::Delegator;
pub(crate) use env::join_path;
pub use env::{CniArgs, PluginEnv};
pub use find::find_in_path;
pub use raw_exec::{RawExec, DEFAULT_TIMEOUT};

/// Finds and runs plugin binaries.
pub trait Exec: Send + Sync {
    /// Runs the plugin with `stdin` and exactly the environment `env`, and
    /// returns its stdout. A failing plugin is reported as an error, with
    /// the error object it printed when there is one.
    fn exec_plugin(
        &self,
        plugin_path: &Path,
        stdin: &[u8],
        env: &PluginEnv,
    ) -> Result<Vec<u8>, InvokeError>;

    /// Locates the binary for a plugin `type` in the search path.
    fn find_in_path(&self, plugin: &str, paths: &[PathBuf]) -> Result<PathBuf, InvokeError> {
        find_in_path(plugin, paths)
    }
}

impl<E: Exec + ?Sized> Exec for Box<E> {
    fn exec_plugin(
        &self,
        plugin_path: &Path,
        stdin: &[u8],
        env: &PluginEnv,
    ) -> Result<Vec<u8>, InvokeError> {
        (**self).exec_plugin(plugin_path, stdin, env)
    }

    fn find_in_path(&self, plugin: &str, paths: &[PathBuf]) -> Result<PathBuf, InvokeError> {
        (**self).find_in_path(plugin, paths)
    }
}

impl<E: Exec + ?Sized> Exec for std::sync::Arc<E> {
    fn exec_plugin(
        &self,
        plugin_path: &Path,
        stdin: &[u8],
        env: &PluginEnv,
    ) -> Result<Vec<u8>, InvokeError> {
        (**self).exec_plugin(plugin_path, stdin, env)
    }

    fn find_in_path(&self, plugin: &str, paths: &[PathBuf]) -> Result<PathBuf, InvokeError> {
        (**self).find_in_path(plugin, paths)
    }
}

impl<E: Exec + ?Sized> Exec for &E {
    fn exec_plugin(
        &self,
        plugin_path: &Path,
        stdin: &[u8],
        env: &PluginEnv,
    ) -> Result<Vec<u8>, InvokeError> {
        (**self).exec_plugin(plugin_path, stdin, env)
    }

    fn find_in_path(&self, plugin: &str, paths: &[PathBuf]) -> Result<PathBuf, InvokeError> {
        (**self).find_in_path(plugin, paths)
    }
}

/// How a plugin exited, worded as Go's `exec.ExitError` so that messages
/// read the same as the reference runtime's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    Code(i32),
    Signal(i32),
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitStatus::Code(c) => write!(f, "exit status {c}"),
            ExitStatus::Signal(s) => write!(f, "signal: {s}"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    #[error("no plugin name provided")]
    NoPluginName,
    #[error("invalid plugin name: {0}")]
    InvalidPluginName(String),
    #[error("no paths provided")]
    NoPaths,
    #[error("failed to find plugin {plugin:?} in path [{}]", display_paths(.paths))]
    PluginNotFound { plugin: String, paths: Vec<PathBuf> },
    #[error("failed to execute plugin {}: {source}", .path.display())]
    Spawn {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to run plugin {}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("plugin {} did not finish within {timeout:?} and was killed", .path.display())]
    Timeout {
        path: PathBuf,
        timeout: std::time::Duration,
    },
    /// The error object the plugin printed; its code is the plugin's.
    #[error("{0}")]
    Plugin(CniError),
    #[error("netplugin failed with no error message: {status}")]
    NoErrorMessage { status: ExitStatus },
    #[error("netplugin failed: {stderr:?}: {status}")]
    FailedWithStderr { stderr: String, status: ExitStatus },
    #[error("netplugin failed but error parsing its diagnostic message {stdout:?}: {reason}")]
    UnparsableDiagnostic {
        stdout: String,
        status: ExitStatus,
        reason: String,
    },
    /// The network configuration handed to the plugin has no usable version.
    #[error("failed to decode network configuration version: {0}")]
    ConfigVersion(String),
    #[error("failed to unmarshal raw result: {0}")]
    ResultJson(#[source] serde_json::Error),
    #[error(transparent)]
    Result(#[from] ResultError),
    #[error("decoding version info: {0}")]
    VersionInfo(String),
}

fn display_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

impl InvokeError {
    /// The error object the plugin itself reported, if it reported one.
    pub fn plugin_error(&self) -> Option<&CniError> {
        match self {
            InvokeError::Plugin(e) => Some(e),
            _ => None,
        }
    }
}

impl ToCniError for InvokeError {
    /// A delegate's own error passes through with its code, so an IPAM
    /// failure reaches the runtime as the IPAM plugin reported it.
    fn to_cni_error(&self) -> CniError {
        match self {
            InvokeError::Plugin(e) => e.clone(),
            InvokeError::ConfigVersion(_) => CniError::new(ErrorCode::Decode, self.to_string()),
            InvokeError::Result(ResultError::UnsupportedVersion(_)) => {
                CniError::new(ErrorCode::IncompatibleVersion, self.to_string())
            }
            InvokeError::ResultJson(_) | InvokeError::Result(_) | InvokeError::VersionInfo(_) => {
                CniError::new(ErrorCode::Decode, self.to_string())
            }
            InvokeError::NoPluginName
            | InvokeError::InvalidPluginName(_)
            | InvokeError::NoPaths
            | InvokeError::PluginNotFound { .. }
            | InvokeError::Spawn { .. }
            | InvokeError::Io { .. }
            | InvokeError::Timeout { .. }
            | InvokeError::NoErrorMessage { .. }
            | InvokeError::FailedWithStderr { .. }
            | InvokeError::UnparsableDiagnostic { .. } => {
                CniError::new(ErrorCode::Internal, self.to_string())
            }
        }
    }
}

/// The version of a network configuration as the plugin will read it: a
/// missing or empty `cniVersion` is 0.1.0.
pub fn config_version(netconf: &[u8]) -> Result<SpecVersion, InvokeError> {
    #[derive(Deserialize)]
    struct VersionOnly {
        #[serde(rename = "cniVersion", default)]
        cni_version: Option<String>,
    }
    let v: VersionOnly =
        serde_json::from_slice(netconf).map_err(|e| InvokeError::ConfigVersion(e.to_string()))?;
    SpecVersion::parse_config(v.cni_version.as_deref().unwrap_or(""))
        .map_err(|e: VersionError| InvokeError::ConfigVersion(e.to_string()))
}

/// Decodes the stdout of a successful ADD. A result without `cniVersion`
/// is taken to be in the configuration's version, and `null` is an empty
/// result, as the Go runtime tolerates both.
pub fn decode_result(netconf: &[u8], stdout: &[u8]) -> Result<AnyResult, InvokeError> {
    let config_version = config_version(netconf)?;
    let mut value: serde_json::Value =
        serde_json::from_slice(stdout).map_err(InvokeError::ResultJson)?;
    if value.is_null() {
        value = serde_json::Value::Object(serde_json::Map::new());
    }
    Ok(AnyResult::from_value(value, config_version)?)
}

/// Runs ADD and decodes the result.
pub fn exec_plugin_with_result(
    exec: &dyn Exec,
    plugin_path: &Path,
    netconf: &[u8],
    env: &PluginEnv,
) -> Result<AnyResult, InvokeError> {
    let stdout = exec.exec_plugin(plugin_path, netconf, env)?;
    decode_result(netconf, &stdout)
}

/// Runs a command whose success prints nothing worth keeping.
pub fn exec_plugin_without_result(
    exec: &dyn Exec,
    plugin_path: &Path,
    netconf: &[u8],
    env: &PluginEnv,
) -> Result<(), InvokeError> {
    exec.exec_plugin(plugin_path, netconf, env).map(drop)
}

/// What a plugin answers to VERSION.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginInfo {
    #[serde(rename = "cniVersion")]
    pub cni_version: String,
    #[serde(rename = "supportedVersions")]
    pub supported_versions: Vec<String>,
}

impl PluginInfo {
    pub fn supports(&self, version: &str) -> bool {
        self.supported_versions.iter().any(|v| v == version)
    }
}

/// Decodes a VERSION answer. Plugins from the 0.2.0 era print no
/// `supportedVersions`; those speak 0.1.0 and 0.2.0.
pub fn decode_version_info(stdout: &[u8]) -> Result<PluginInfo, InvokeError> {
    #[derive(Deserialize)]
    struct Raw {
        #[serde(rename = "cniVersion", default)]
        cni_version: Option<String>,
        #[serde(rename = "supportedVersions", default)]
        supported_versions: Option<Vec<String>>,
    }
    let raw: Raw =
        serde_json::from_slice(stdout).map_err(|e| InvokeError::VersionInfo(e.to_string()))?;
    let cni_version = raw.cni_version.unwrap_or_default();
    if cni_version.is_empty() {
        return Err(InvokeError::VersionInfo(
            "missing field cniVersion".to_string(),
        ));
    }
    let supported_versions = match raw.supported_versions {
        Some(v) if !v.is_empty() => v,
        _ if cni_version == "0.2.0" => vec!["0.1.0".to_string(), "0.2.0".to_string()],
        _ => {
            return Err(InvokeError::VersionInfo(
                "missing field supportedVersions".to_string(),
            ))
        }
    };
    Ok(PluginInfo {
        cni_version,
        supported_versions,
    })
}

/// The error text of plugins that predate the VERSION command.
const LEGACY_VERSION_ERROR: &str = "unknown CNI_COMMAND: VERSION";

/// Asks a plugin which spec versions it speaks.
///
/// `base_env` is the environment the probe inherits. NETNS, IFNAME and PATH
/// get placeholder values because skeletons older than VERSION insist on
/// them; a plugin that answers "unknown CNI_COMMAND: VERSION" is one of
/// those and speaks 0.1.0 only.
pub fn get_version_info(
    exec: &dyn Exec,
    plugin_path: &Path,
    base_env: &PluginEnv,
) -> Result<PluginInfo, InvokeError> {
    let args = CniArgs {
        command: Command::Version,
        container_id: String::new(),
        netns: "dummy".to_string(),
        plugin_args: Vec::new(),
        ifname: "dummy".to_string(),
        path: "dummy".into(),
    };
    let stdin = format!("{{\"cniVersion\":\"{}\"}}", SpecVersion::CURRENT);
    match exec.exec_plugin(plugin_path, stdin.as_bytes(), &args.to_env(base_env)) {
        Ok(stdout) => decode_version_info(&stdout),
        Err(InvokeError::Plugin(e)) if e.to_string() == LEGACY_VERSION_ERROR => Ok(PluginInfo {
            cni_version: SpecVersion::CURRENT.to_string(),
            supported_versions: vec![SpecVersion::V0_1_0.to_string()],
        }),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests;
