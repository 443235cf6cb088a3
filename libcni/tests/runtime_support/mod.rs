//! A recording fake of plugin execution for the runtime tests.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use libcni::invoke::{Exec, InvokeError, PluginEnv};
use libcni::version::SpecVersion;
use libcni::{CniError, ErrorCode};
use serde_json::{json, Value};

/// One plugin invocation as the fake saw it.
#[derive(Debug, Clone)]
pub struct Call {
    pub plugin: String,
    pub path: PathBuf,
    pub env: PluginEnv,
    pub stdin: Value,
}

impl Call {
    pub fn command(&self) -> &str {
        self.env.get_str("CNI_COMMAND").unwrap_or("")
    }

    pub fn var(&self, key: &str) -> &str {
        self.env.get_str(key).unwrap_or("")
    }
}

type Behaviour = Box<dyn Fn(&Call) -> Result<Vec<u8>, InvokeError> + Send + Sync>;

/// Plugins that exist only in memory. By default a plugin answers VERSION
/// with every version, ADD with its prevResult plus an interface named
/// after itself (or a fresh result in the config's version), and anything
/// else with nothing.
#[derive(Default)]
pub struct FakeExec {
    installed: Vec<String>,
    behaviours: Mutex<HashMap<String, Behaviour>>,
    calls: Mutex<Vec<Call>>,
}

impl FakeExec {
    pub fn new(installed: &[&str]) -> Arc<Self> {
        Arc::new(FakeExec {
            installed: installed.iter().map(|s| s.to_string()).collect(),
            ..FakeExec::default()
        })
    }

    pub fn on(
        &self,
        plugin: &str,
        f: impl Fn(&Call) -> Result<Vec<u8>, InvokeError> + Send + Sync + 'static,
    ) {
        self.behaviours
            .lock()
            .unwrap()
            .insert(plugin.to_string(), Box::new(f));
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    pub fn clear(&self) {
        self.calls.lock().unwrap().clear();
    }

    /// `(plugin, CNI_COMMAND)` of every call so far.
    pub fn log(&self) -> Vec<(String, String)> {
        self.calls()
            .iter()
            .map(|c| (c.plugin.clone(), c.command().to_string()))
            .collect()
    }
}

pub fn plugin_error(code: u32, msg: &str) -> InvokeError {
    InvokeError::Plugin(CniError::new(ErrorCode::from(code), msg))
}

/// What a plugin adds: an interface named after itself.
pub fn default_add(call: &Call) -> Value {
    let version = call.stdin["cniVersion"].as_str().unwrap_or("").to_string();
    let parsed = SpecVersion::parse_config(&version).unwrap();
    if let Some(prev) = call.stdin.get("prevResult") {
        let mut r = prev.clone();
        if let Some(ifs) = r.get_mut("interfaces").and_then(Value::as_array_mut) {
            ifs.push(json!({"name": call.plugin}));
        } else if r.get("ip4").is_none() {
            r["interfaces"] = json!([{"name": call.plugin}]);
        }
        r["cniVersion"] = json!(version);
        return r;
    }
    match parsed.family() {
        libcni::version::ResultFamily::V02 => {
            json!({"cniVersion": version, "ip4": {"ip": "10.1.2.3/24", "gateway": "10.1.2.1"}})
        }
        libcni::version::ResultFamily::V04 => json!({
            "cniVersion": version,
            "interfaces": [{"name": call.plugin}],
            "ips": [{"version": "4", "address": "10.1.2.3/24", "gateway": "10.1.2.1", "interface": 0}],
        }),
        libcni::version::ResultFamily::V1 => json!({
            "cniVersion": version,
            "interfaces": [{"name": call.plugin}],
            "ips": [{"address": "10.1.2.3/24", "gateway": "10.1.2.1", "interface": 0}],
        }),
    }
}

impl Exec for FakeExec {
    fn exec_plugin(
        &self,
        plugin_path: &Path,
        stdin: &[u8],
        env: &PluginEnv,
    ) -> Result<Vec<u8>, InvokeError> {
        let call = Call {
            plugin: plugin_path
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned(),
            path: plugin_path.to_path_buf(),
            env: env.clone(),
            stdin: serde_json::from_slice(stdin).unwrap(),
        };
        self.calls.lock().unwrap().push(call.clone());
        if let Some(f) = self.behaviours.lock().unwrap().get(&call.plugin) {
            return f(&call);
        }
        match call.command() {
            "VERSION" => Ok(serde_json::to_vec(&json!({
                "cniVersion": "1.1.0",
                "supportedVersions": SpecVersion::ALL.iter().map(|v| v.as_str()).collect::<Vec<_>>(),
            }))
            .unwrap()),
            "ADD" => Ok(serde_json::to_vec(&default_add(&call)).unwrap()),
            _ => Ok(Vec::new()),
        }
    }

    fn find_in_path(&self, plugin: &str, paths: &[PathBuf]) -> Result<PathBuf, InvokeError> {
        if self.installed.iter().any(|p| p == plugin) {
            Ok(paths[0].join(plugin))
        } else {
            Err(InvokeError::PluginNotFound {
                plugin: plugin.to_string(),
                paths: paths.to_vec(),
            })
        }
    }
}
