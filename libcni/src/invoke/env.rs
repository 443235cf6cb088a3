//! The environment a plugin process gets.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

use super::Command;

/// An environment: ordered variables where setting one again replaces it,
/// so the last value wins as with Go's `dedupEnv`. Values are `OsString`
/// because an inherited environment need not be UTF-8.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginEnv {
    vars: Vec<(OsString, OsString)>,
}

impl PluginEnv {
    pub fn new() -> Self {
        PluginEnv::default()
    }

    /// This process's environment, what plugins inherit in production.
    pub fn from_process() -> Self {
        std::env::vars_os().collect()
    }

    pub fn set(&mut self, key: impl Into<OsString>, value: impl Into<OsString>) {
        let key = key.into();
        let value = value.into();
        match self.vars.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.vars.push((key, value)),
        }
    }

    pub fn with(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.set(key, value);
        self
    }

    pub fn remove(&mut self, key: impl AsRef<OsStr>) {
        let key = key.as_ref();
        self.vars.retain(|(k, _)| k != key);
    }

    pub fn get(&self, key: impl AsRef<OsStr>) -> Option<&OsStr> {
        let key = key.as_ref();
        self.vars
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_os_str())
    }

    /// The value if it is set and valid UTF-8.
    pub fn get_str(&self, key: impl AsRef<OsStr>) -> Option<&str> {
        self.get(key).and_then(OsStr::to_str)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&OsStr, &OsStr)> {
        self.vars
            .iter()
            .map(|(k, v)| (k.as_os_str(), v.as_os_str()))
    }

    pub fn len(&self) -> usize {
        self.vars.len()
    }

    pub fn is_empty(&self) -> bool {
        self.vars.is_empty()
    }

    /// `CNI_PATH` split on `:`, empty entries dropped.
    pub fn cni_path(&self) -> Vec<PathBuf> {
        self.get("CNI_PATH")
            .map(|p| {
                std::env::split_paths(p)
                    .filter(|p| !p.as_os_str().is_empty())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl<K: Into<OsString>, V: Into<OsString>> FromIterator<(K, V)> for PluginEnv {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut env = PluginEnv::new();
        for (k, v) in iter {
            env.set(k, v);
        }
        env
    }
}

/// The CNI_* parameters of one invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniArgs {
    pub command: Command,
    pub container_id: String,
    pub netns: String,
    /// CNI_ARGS pairs, joined as `K=V;K=V`.
    pub plugin_args: Vec<(String, String)>,
    pub ifname: String,
    /// CNI_PATH, already joined with `:`.
    pub path: OsString,
}

impl CniArgs {
    /// `base` with the six CNI_* variables set, all of them always present
    /// (empty when not applicable), overriding inherited values.
    pub fn to_env(&self, base: &PluginEnv) -> PluginEnv {
        let plugin_args = self
            .plugin_args
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(";");
        base.clone()
            .with("CNI_COMMAND", self.command.as_str())
            .with("CNI_CONTAINERID", &self.container_id)
            .with("CNI_NETNS", &self.netns)
            .with("CNI_ARGS", plugin_args)
            .with("CNI_IFNAME", &self.ifname)
            .with("CNI_PATH", &self.path)
    }
}

/// Joins search directories into a CNI_PATH value.
pub(crate) fn join_path(paths: &[PathBuf]) -> OsString {
    let mut out = OsString::new();
    for (i, p) in paths.iter().enumerate() {
        if i > 0 {
            out.push(":");
        }
        out.push(p);
    }
    out
}
