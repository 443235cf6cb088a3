//! Network configuration files: parsing, lookup on disk and injection.
//!
//! Every configuration keeps its raw JSON beside the few fields the runtime
//! reads, and plugins are always handed that raw JSON (plus injected keys),
//! so keys unknown to this library reach them unchanged.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::version::{Semver, SpecVersion};

#[derive(Debug, thiserror::Error)]
pub enum ConfError {
    /// The configuration list itself is malformed.
    #[error("error parsing configuration list: {0}")]
    InvalidList(String),
    #[error("failed to parse plugin config {index}: {source}")]
    InvalidListPlugin {
        index: usize,
        #[source]
        source: Box<ConfError>,
    },
    /// A single plugin configuration is malformed.
    #[error("error parsing configuration: {0}")]
    InvalidPlugin(String),
    #[error("error reading {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to read plugin config files in {}: {source}", .path.display())]
    ReadPluginDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to list {}: {source}", .path.display())]
    ReadDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("no plugin configs found")]
    NoPlugins,
    #[error("no net configuration with name \"{name}\" in {}", .dir.display())]
    NotFound { dir: PathBuf, name: String },
    #[error("no net configurations found in {}", .dir.display())]
    NoConfigsFound { dir: PathBuf },
    #[error("unmarshal existing network bytes: {0}")]
    InjectUnmarshal(String),
    #[error("keys cannot be empty")]
    EmptyKey,
    #[error("key '{0}' value must not be nil")]
    NullValue(String),
}

/// One plugin's configuration: its raw JSON and the fields read from it.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginConfig {
    plugin_type: String,
    name: String,
    cni_version: String,
    capabilities: BTreeMap<String, bool>,
    raw: Map<String, Value>,
    bytes: Vec<u8>,
}

impl PluginConfig {
    /// The plugin binary's name.
    pub fn plugin_type(&self) -> &str {
        &self.plugin_type
    }

    /// `name`, empty when absent (plugins inside a list usually have none).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `cniVersion` as written, empty when absent.
    pub fn cni_version(&self) -> &str {
        &self.cni_version
    }

    pub fn capabilities(&self) -> &BTreeMap<String, bool> {
        &self.capabilities
    }

    /// Capabilities set to `true`.
    pub fn enabled_capabilities(&self) -> impl Iterator<Item = &str> {
        self.capabilities
            .iter()
            .filter(|(_, on)| **on)
            .map(|(k, _)| k.as_str())
    }

    /// The whole configuration object, unknown keys included.
    pub fn raw(&self) -> &Map<String, Value> {
        &self.raw
    }

    /// The configuration as it was given (or as injection produced it).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// Parses one plugin configuration; it must be an object with a `type`.
pub fn plugin_conf_from_bytes(bytes: &[u8]) -> Result<PluginConfig, ConfError> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| ConfError::InvalidPlugin(e.to_string()))?;
    let Value::Object(raw) = value else {
        return Err(ConfError::InvalidPlugin(format!(
            "expected an object, got {}",
            json_type(&value)
        )));
    };
    plugin_conf_from_map(raw, bytes.to_vec())
}

fn plugin_conf_from_map(
    raw: Map<String, Value>,
    bytes: Vec<u8>,
) -> Result<PluginConfig, ConfError> {
    let string_field = |key: &str| -> Result<String, ConfError> {
        match raw.get(key) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => Err(ConfError::InvalidPlugin(format!(
                "invalid type {} for {key}",
                json_type(other)
            ))),
        }
    };
    let plugin_type = string_field("type")?;
    if plugin_type.is_empty() {
        return Err(ConfError::InvalidPlugin("missing 'type'".to_string()));
    }
    let name = string_field("name")?;
    let cni_version = string_field("cniVersion")?;
    let capabilities = match raw.get("capabilities") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(v) => serde_json::from_value(v.clone())
            .map_err(|e| ConfError::InvalidPlugin(format!("invalid capabilities: {e}")))?,
    };
    Ok(PluginConfig {
        plugin_type,
        name,
        cni_version,
        capabilities,
        raw,
        bytes,
    })
}

pub fn plugin_conf_from_file(path: &Path) -> Result<PluginConfig, ConfError> {
    plugin_conf_from_bytes(&read(path)?)
}

/// A network configuration list.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkConfigList {
    pub name: String,
    /// The version every plugin is run with: the highest of `cniVersion`
    /// and `cniVersions` that this library speaks.
    pub cni_version: String,
    pub disable_check: bool,
    pub disable_gc: bool,
    pub load_only_inlined_plugins: bool,
    pub plugins: Vec<PluginConfig>,
    /// The list as given; this is what the result cache records.
    pub bytes: Vec<u8>,
}

/// Parses a configuration list. With no `plugins` key (allowed unless
/// `loadOnlyInlinedPlugins`) the list has no plugins yet: the file loader
/// adds those found beside the file.
pub fn conflist_from_bytes(bytes: &[u8]) -> Result<NetworkConfigList, ConfError> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| ConfError::InvalidList(e.to_string()))?;
    let Value::Object(raw) = value else {
        return Err(ConfError::InvalidList(format!(
            "expected an object, got {}",
            json_type(&value)
        )));
    };

    let name = match raw.get("name") {
        None => return Err(ConfError::InvalidList("no name".to_string())),
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(ConfError::InvalidList(format!(
                "invalid name type {}",
                json_type(other)
            )))
        }
    };
    let written_version = match raw.get("cniVersion") {
        None => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(ConfError::InvalidList(format!(
                "invalid cniVersion type {}",
                json_type(other)
            )))
        }
    };
    let cni_version = match raw.get("cniVersions") {
        None => written_version,
        Some(listed) => select_version(&written_version, listed)?,
    };
    let disable_check = read_bool(&raw, "disableCheck")?;
    let disable_gc = read_bool(&raw, "disableGC")?;
    let load_only_inlined_plugins = read_bool(&raw, "loadOnlyInlinedPlugins")?;

    let mut list = NetworkConfigList {
        name,
        cni_version,
        disable_check,
        disable_gc,
        load_only_inlined_plugins,
        plugins: Vec::new(),
        bytes: bytes.to_vec(),
    };
    let plugins = match raw.get("plugins") {
        None if load_only_inlined_plugins => {
            return Err(ConfError::InvalidList(
                "`loadOnlyInlinedPlugins` is true, and no 'plugins' key".to_string(),
            ))
        }
        None => return Ok(list),
        Some(Value::Array(plugins)) => plugins,
        Some(other) => {
            return Err(ConfError::InvalidList(format!(
                "invalid 'plugins' type {}",
                json_type(other)
            )))
        }
    };
    if plugins.is_empty() {
        return Err(ConfError::InvalidList("no plugins in list".to_string()));
    }
    for (index, plugin) in plugins.iter().enumerate() {
        let parsed = match plugin {
            Value::Object(obj) => {
                let bytes = map_bytes(obj);
                plugin_conf_from_map(obj.clone(), bytes)
            }
            other => Err(ConfError::InvalidPlugin(format!(
                "expected an object, got {}",
                json_type(other)
            ))),
        };
        list.plugins
            .push(parsed.map_err(|source| ConfError::InvalidListPlugin {
                index,
                source: Box::new(source),
            })?);
    }
    Ok(list)
}

/// The version to run a list with: the highest of `cniVersions` and
/// `cniVersion` not newer than this library; `cniVersion` as written when
/// none qualifies.
fn select_version(written: &str, listed: &Value) -> Result<String, ConfError> {
    let Value::Array(entries) = listed else {
        return Err(ConfError::InvalidList(format!(
            "invalid type for cniVersions: {}",
            json_type(listed)
        )));
    };
    let newest_known = SpecVersion::CURRENT.semver();
    let mut candidates: Vec<(Semver, &str)> = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let Value::String(s) = entry else {
            return Err(ConfError::InvalidList(format!(
                "invalid type for cniVersions index {index}: {}",
                json_type(entry)
            )));
        };
        let v: Semver = s.parse().map_err(|e| {
            ConfError::InvalidList(format!(
                "invalid cniVersions entry {s} at index {index}: {e}"
            ))
        })?;
        if v <= newest_known {
            candidates.push((v, s));
        }
    }
    if !written.is_empty() {
        let v: Semver = written
            .parse()
            .map_err(|e| ConfError::InvalidList(format!("invalid cniVersion {written}: {e}")))?;
        if v <= newest_known {
            candidates.push((v, written));
        }
    }
    Ok(candidates
        .into_iter()
        .max_by_key(|(v, _)| *v)
        .map(|(_, s)| s.to_string())
        .unwrap_or_else(|| written.to_string()))
}

/// A boolean key that may also be written as the string "true"/"false".
fn read_bool(raw: &Map<String, Value>, key: &str) -> Result<bool, ConfError> {
    match raw.get(key) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(Value::String(s)) => match s.to_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            lower => Err(ConfError::InvalidList(format!(
                "invalid value {lower:?} for {key}"
            ))),
        },
        Some(other) => Err(ConfError::InvalidList(format!(
            "invalid type {} for {key}",
            json_type(other)
        ))),
    }
}

/// Reads a list file and, unless `loadOnlyInlinedPlugins`, appends the
/// plugins found in `<dir of file>/<network name>/*.conf`.
pub fn conflist_from_file(path: &Path) -> Result<NetworkConfigList, ConfError> {
    let mut list = conflist_from_bytes(&read(path)?)?;
    if !list.load_only_inlined_plugins {
        let dir = path.parent().unwrap_or_else(|| Path::new("."));
        let extra = plugin_confs_from_dir(dir, &list.name)?;
        list.plugins.extend(extra);
    }
    if list.plugins.is_empty() {
        return Err(ConfError::NoPlugins);
    }
    Ok(list)
}

/// The plugin fragments of network `name` under `dir`: `<dir>/<name>/*.conf`.
///
/// The name comes from the file, so one that is not a valid network name
/// (`..`, `/`) is not turned into a path: such a network is rejected on
/// ADD anyway.
pub fn plugin_confs_from_dir(dir: &Path, name: &str) -> Result<Vec<PluginConfig>, ConfError> {
    if !crate::plugin_conf::is_valid_cni_name(name) {
        return Ok(Vec::new());
    }
    let plugin_dir = dir.join(name);
    let files = conf_files(&plugin_dir, &[".conf"]).map_err(|e| match e {
        ConfError::ReadDir { path, source } => ConfError::ReadPluginDir { path, source },
        other => other,
    })?;
    files.iter().map(|f| plugin_conf_from_file(f)).collect()
}

/// Files directly in `dir` whose extension (the part from the last `.`,
/// as Go's `filepath.Ext`) is one of `extensions`, sorted by name. A
/// missing directory has none.
pub fn conf_files(dir: &Path, extensions: &[&str]) -> Result<Vec<PathBuf>, ConfError> {
    let read_dir_err = |source| ConfError::ReadDir {
        path: dir.to_path_buf(),
        source,
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(read_dir_err(e)),
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(read_dir_err)?;
        // The entry's own type: a symlink to a file is listed, as in Go.
        if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            continue;
        }
        let file_name = entry.file_name();
        let ext = go_ext(&file_name);
        if extensions.iter().any(|e| e.as_bytes() == ext) {
            files.push(dir.join(&file_name));
        }
    }
    files.sort();
    Ok(files)
}

fn go_ext(name: &OsStr) -> &[u8] {
    let bytes = name.as_bytes();
    match bytes.iter().rposition(|b| *b == b'.') {
        Some(dot) => bytes.get(dot..).unwrap_or_default(),
        None => &[],
    }
}

/// Finds network `name` in `dir`: `*.conflist` files first, in name order,
/// then single-plugin `*.conf` / `*.json` files, upconverted to a list.
/// A malformed file on the way is an error, not skipped.
pub fn load_network_conf(dir: &Path, name: &str) -> Result<NetworkConfigList, ConfError> {
    let lists = conf_files(dir, &[".conflist"])?;
    for file in &lists {
        let list = conflist_from_file(file)?;
        if list.name == name {
            return Ok(list);
        }
    }
    match load_conf(dir, name) {
        Ok(conf) => conflist_from_conf(&conf),
        // Lists exist but none matched: that is "not found", not "empty".
        Err(ConfError::NoConfigsFound { .. }) if !lists.is_empty() => Err(ConfError::NotFound {
            dir: dir.to_path_buf(),
            name: name.to_string(),
        }),
        Err(e) => Err(e),
    }
}

/// Finds a single-plugin configuration named `name` in `dir`.
pub fn load_conf(dir: &Path, name: &str) -> Result<PluginConfig, ConfError> {
    let files = conf_files(dir, &[".conf", ".json"])?;
    if files.is_empty() {
        return Err(ConfError::NoConfigsFound {
            dir: dir.to_path_buf(),
        });
    }
    for file in &files {
        let conf = plugin_conf_from_file(file)?;
        if conf.name == name {
            return Ok(conf);
        }
    }
    Err(ConfError::NotFound {
        dir: dir.to_path_buf(),
        name: name.to_string(),
    })
}

/// Wraps a single-plugin configuration into a one-plugin list.
pub fn conflist_from_conf(conf: &PluginConfig) -> Result<NetworkConfigList, ConfError> {
    let mut list = Map::new();
    list.insert("name".to_string(), Value::String(conf.name.clone()));
    list.insert(
        "cniVersion".to_string(),
        Value::String(conf.cni_version.clone()),
    );
    list.insert(
        "plugins".to_string(),
        Value::Array(vec![Value::Object(conf.raw.clone())]),
    );
    let bytes = map_bytes(&list);
    conflist_from_bytes(&bytes)
}

/// `conf` with top-level keys set (replacing what was there). Keys must be
/// non-empty and values non-null.
pub fn inject_conf(
    conf: &PluginConfig,
    values: &Map<String, Value>,
) -> Result<PluginConfig, ConfError> {
    let mut raw: Map<String, Value> = serde_json::from_slice(&conf.bytes)
        .map_err(|e| ConfError::InjectUnmarshal(e.to_string()))?;
    for (key, value) in values {
        if key.is_empty() {
            return Err(ConfError::EmptyKey);
        }
        if value.is_null() {
            return Err(ConfError::NullValue(key.clone()));
        }
        raw.insert(key.clone(), value.clone());
    }
    let bytes = map_bytes(&raw);
    plugin_conf_from_map(raw, bytes)
}

/// The JSON text of an object, keys sorted as Go's encoder writes maps, so
/// plugins see configurations laid out as the Go runtime lays them out.
fn map_bytes(map: &Map<String, Value>) -> Vec<u8> {
    // String keys and JSON values always serialise.
    serde_json::to_vec(map).unwrap_or_default()
}

fn read(path: &Path) -> Result<Vec<u8>, ConfError> {
    std::fs::read(path).map_err(|source| ConfError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}
