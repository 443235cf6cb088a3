//! The runtime side of CNI: running network configurations for containers.
//!
//! [`CniConfig`] is what a container runtime (or `cnitool`) embeds. It runs
//! each plugin of a list with the configuration the spec derives for it,
//! keeps the result cache the later CHECK, DEL and GC calls depend on, and
//! reports plugin failures with the plugin's own error object intact.

use std::collections::{BTreeSet, HashSet};
use std::path::PathBuf;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::cache::{CacheEntry, CacheError, NetworkAttachment, ResultCache, CACHE_KIND_V1};
use crate::conf::{inject_conf, ConfError, NetworkConfigList, PluginConfig};
use crate::error::{CniError, ErrorCode, ToCniError};
use crate::invoke::{
    exec_plugin_with_result, exec_plugin_without_result, get_version_info, CniArgs, Command, Exec,
    InvokeError, PluginEnv, PluginInfo, RawExec,
};
use crate::plugin_conf::validate_network_name;
use crate::skel::{validate_container_id, validate_interface_name};
use crate::types::AnyResult;
use crate::version::{Semver, SpecVersion};

/// The per-invocation arguments of an attachment (everything except the
/// network configuration).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuntimeConf {
    pub container_id: String,
    pub netns: String,
    pub ifname: String,
    /// CNI_ARGS pairs.
    pub args: Vec<(String, String)>,
    /// Capability arguments (`portMappings`, `ips`, ...): each plugin gets,
    /// as `runtimeConfig`, those it enables in its `capabilities`.
    pub capability_args: Map<String, Value>,
}

/// An attachment GC must keep.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct GcAttachment {
    #[serde(rename = "containerID")]
    pub container_id: String,
    #[serde(rename = "ifname")]
    pub ifname: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcArgs {
    pub valid_attachments: Vec<GcAttachment>,
}

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A plugin of a network failed; `source` says how.
    #[error("plugin type={plugin_type:?} name={network:?} failed ({verb}): {source}")]
    Plugin {
        plugin_type: String,
        network: String,
        verb: &'static str,
        #[source]
        source: Box<RuntimeError>,
    },
    #[error(transparent)]
    Invoke(#[from] InvokeError),
    #[error(transparent)]
    Conf(#[from] ConfError),
    /// The container ID, network name or interface name is unusable; the
    /// error carries the spec code a plugin would have reported.
    #[error("{0}")]
    InvalidArgument(CniError),
    #[error("invalid configuration version {version:?}: {reason}")]
    InvalidVersion { version: String, reason: String },
    #[error("configuration version {version:?} does not support the CHECK command")]
    CheckNotSupported { version: String },
    #[error("network {network:?} has no plugins")]
    NoPlugins { network: String },
    #[error("failed to get network {network:?} cached result: {source}")]
    CachedResult {
        network: String,
        #[source]
        source: CacheError,
    },
    #[error("failed to set network {network:?} cached result: {source}")]
    CacheWrite {
        network: String,
        #[source]
        source: CacheError,
    },
    #[error(transparent)]
    Cache(CacheError),
    #[error("failed to list cached attachments: {0}")]
    ListAttachments(#[source] CacheError),
    #[error("failed to delete stale attachment {container_id} {ifname}: {source}")]
    StaleAttachment {
        container_id: String,
        ifname: String,
        #[source]
        source: Box<RuntimeError>,
    },
    #[error("failed to GC plugin {plugin_type}: {source}")]
    GcPlugin {
        plugin_type: String,
        #[source]
        source: Box<RuntimeError>,
    },
    #[error("plugin {plugin_type} does not support config version {version:?}")]
    UnsupportedVersion {
        plugin_type: String,
        version: String,
    },
    /// Several independent failures (GC, validation), one per line.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Multiple(Vec<RuntimeError>),
}

impl RuntimeError {
    /// The error object a plugin reported (or argument validation
    /// produced), found through any context wrapping, so callers can show
    /// its code. For several failures, the first that has one.
    pub fn cni_error(&self) -> Option<&CniError> {
        match self {
            RuntimeError::Plugin { source, .. }
            | RuntimeError::StaleAttachment { source, .. }
            | RuntimeError::GcPlugin { source, .. } => source.cni_error(),
            RuntimeError::Invoke(e) => e.plugin_error(),
            RuntimeError::InvalidArgument(e) => Some(e),
            RuntimeError::Multiple(errs) => errs.iter().find_map(RuntimeError::cni_error),
            _ => None,
        }
    }

    /// The code of [`RuntimeError::cni_error`].
    pub fn code(&self) -> Option<ErrorCode> {
        self.cni_error().map(|e| e.code)
    }

    fn in_plugin(self, plugin: &PluginConfig, network: &str, verb: &'static str) -> Self {
        RuntimeError::Plugin {
            plugin_type: plugin.plugin_type().to_string(),
            network: network.to_string(),
            verb,
            source: Box::new(self),
        }
    }

    fn from_list(mut errs: Vec<RuntimeError>) -> Result<(), RuntimeError> {
        match errs.len() {
            0 => Ok(()),
            1 => Err(errs.remove(0)),
            _ => Err(RuntimeError::Multiple(errs)),
        }
    }
}

/// Runs network configurations: plugin search path, how plugins are
/// executed, and where results are cached.
pub struct CniConfig {
    path: Vec<PathBuf>,
    exec: Box<dyn Exec>,
    cache: ResultCache,
    base_env: Option<PluginEnv>,
}

impl std::fmt::Debug for CniConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CniConfig")
            .field("path", &self.path)
            .field("cache", &self.cache)
            .finish_non_exhaustive()
    }
}

impl CniConfig {
    /// Real plugin processes, the default cache directory and this
    /// process's environment as the plugins' base environment.
    pub fn new(path: Vec<PathBuf>) -> Self {
        CniConfig::with_exec(path, RawExec::new())
    }

    pub fn with_exec(path: Vec<PathBuf>, exec: impl Exec + 'static) -> Self {
        CniConfig {
            path,
            exec: Box::new(exec),
            cache: ResultCache::default(),
            base_env: None,
        }
    }

    pub fn with_cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache = ResultCache::new(dir);
        self
    }

    /// The environment plugins inherit (before the CNI_* variables) instead
    /// of this process's.
    pub fn with_base_env(mut self, env: PluginEnv) -> Self {
        self.base_env = Some(env);
        self
    }

    pub fn path(&self) -> &[PathBuf] {
        &self.path
    }

    pub fn cache(&self) -> &ResultCache {
        &self.cache
    }

    fn base_env(&self) -> PluginEnv {
        self.base_env
            .clone()
            .unwrap_or_else(PluginEnv::from_process)
    }

    fn env(&self, command: Command, rt: &RuntimeConf) -> PluginEnv {
        CniArgs {
            command,
            container_id: rt.container_id.clone(),
            netns: rt.netns.clone(),
            plugin_args: rt.args.clone(),
            ifname: rt.ifname.clone(),
            path: crate::invoke::join_path(&self.path),
        }
        .to_env(&self.base_env())
    }

    fn locate(&self, plugin_type: &str) -> Result<PathBuf, RuntimeError> {
        Ok(self.exec.find_in_path(plugin_type, &self.path)?)
    }

    // ----- ADD -----

    /// Runs ADD on every plugin in order, each getting the previous one's
    /// result, and caches the final result. Nothing is cached on failure,
    /// and no DEL is issued: the caller must DEL, as the spec requires.
    pub fn add_network_list(
        &self,
        list: &NetworkConfigList,
        rt: &RuntimeConf,
    ) -> Result<AnyResult, RuntimeError> {
        let mut result: Option<AnyResult> = None;
        for plugin in &list.plugins {
            let added = self
                .add_one(&list.name, &list.cni_version, plugin, result.as_ref(), rt)
                .map_err(|e| e.in_plugin(plugin, &list.name, "add"))?;
            result = Some(added);
        }
        let result = result.ok_or_else(|| RuntimeError::NoPlugins {
            network: list.name.clone(),
        })?;
        self.cache_add(&result, &list.bytes, &list.name, rt)?;
        Ok(result)
    }

    /// ADD for a single-plugin configuration.
    pub fn add_network(
        &self,
        plugin: &PluginConfig,
        rt: &RuntimeConf,
    ) -> Result<AnyResult, RuntimeError> {
        let result = self.add_one(plugin.name(), plugin.cni_version(), plugin, None, rt)?;
        self.cache_add(&result, plugin.bytes(), plugin.name(), rt)?;
        Ok(result)
    }

    fn add_one(
        &self,
        network: &str,
        version: &str,
        plugin: &PluginConfig,
        prev_result: Option<&AnyResult>,
        rt: &RuntimeConf,
    ) -> Result<AnyResult, RuntimeError> {
        let path = self.locate(plugin.plugin_type())?;
        validate_container_id(&rt.container_id).map_err(RuntimeError::InvalidArgument)?;
        validate_network_name(network)
            .map_err(|e| RuntimeError::InvalidArgument(e.to_cni_error()))?;
        validate_interface_name(&rt.ifname).map_err(RuntimeError::InvalidArgument)?;
        let conf = build_one_config(network, version, plugin, prev_result, Some(rt))?;
        Ok(exec_plugin_with_result(
            self.exec.as_ref(),
            &path,
            conf.bytes(),
            &self.env(Command::Add, rt),
        )?)
    }

    fn cache_add(
        &self,
        result: &AnyResult,
        config: &[u8],
        network: &str,
        rt: &RuntimeConf,
    ) -> Result<(), RuntimeError> {
        let entry = CacheEntry {
            kind: CACHE_KIND_V1.to_string(),
            container_id: rt.container_id.clone(),
            config: config.to_vec(),
            ifname: rt.ifname.clone(),
            network_name: network.to_string(),
            netns: rt.netns.clone(),
            cni_args: rt.args.clone(),
            capability_args: rt.capability_args.clone(),
            result: Some(result.to_value()),
        };
        self.cache
            .write(&entry)
            .map_err(|source| RuntimeError::CacheWrite {
                network: network.to_string(),
                source,
            })
    }

    // ----- CHECK -----

    /// Runs CHECK on every plugin in order with the cached result as
    /// `prevResult`. Not available before 0.4.0; skipped (success) when the
    /// list sets `disableCheck`.
    pub fn check_network_list(
        &self,
        list: &NetworkConfigList,
        rt: &RuntimeConf,
    ) -> Result<(), RuntimeError> {
        require_check(&list.cni_version)?;
        if list.disable_check {
            return Ok(());
        }
        let cached = self.cached_result_for(&list.name, &list.cni_version, rt)?;
        for plugin in &list.plugins {
            self.run_one(
                Command::Check,
                &list.name,
                &list.cni_version,
                plugin,
                cached.as_ref(),
                rt,
            )
            .map_err(|e| e.in_plugin(plugin, &list.name, "check"))?;
        }
        Ok(())
    }

    /// CHECK for a single-plugin configuration.
    pub fn check_network(
        &self,
        plugin: &PluginConfig,
        rt: &RuntimeConf,
    ) -> Result<(), RuntimeError> {
        require_check(plugin.cni_version())?;
        let cached = self.cached_result_for(plugin.name(), plugin.cni_version(), rt)?;
        self.run_one(
            Command::Check,
            plugin.name(),
            plugin.cni_version(),
            plugin,
            cached.as_ref(),
            rt,
        )
    }

    fn cached_result_for(
        &self,
        network: &str,
        version: &str,
        rt: &RuntimeConf,
    ) -> Result<Option<AnyResult>, RuntimeError> {
        self.cache
            .read_result(network, &rt.container_id, &rt.ifname, version)
            .map_err(|source| RuntimeError::CachedResult {
                network: network.to_string(),
                source,
            })
    }

    /// CHECK or DEL of one plugin: neither prints a result.
    fn run_one(
        &self,
        command: Command,
        network: &str,
        version: &str,
        plugin: &PluginConfig,
        prev_result: Option<&AnyResult>,
        rt: &RuntimeConf,
    ) -> Result<(), RuntimeError> {
        let path = self.locate(plugin.plugin_type())?;
        let conf = build_one_config(network, version, plugin, prev_result, Some(rt))?;
        Ok(exec_plugin_without_result(
            self.exec.as_ref(),
            &path,
            conf.bytes(),
            &self.env(command, rt),
        )?)
    }

    // ----- DEL -----

    /// Runs DEL on every plugin in reverse order, then forgets the cached
    /// attachment. From 0.4.0 on, plugins get the cached result as
    /// `prevResult`; a cache that cannot be read is dropped and DEL goes on
    /// without it.
    ///
    /// Unlike the Go library, a DEL that brings no capability arguments
    /// uses those recorded at ADD: runtimes commonly send none on DEL (a
    /// second DEL at sandbox removal, `cnitool del` without CAP_ARGS), and
    /// without them portmap would leave its port forwardings behind.
    pub fn del_network_list(
        &self,
        list: &NetworkConfigList,
        rt: &RuntimeConf,
    ) -> Result<(), RuntimeError> {
        let rt = self.with_cached_capability_args(&list.name, rt);
        let cached = self.cached_result_for_del(&list.name, &list.cni_version, &rt)?;
        for plugin in list.plugins.iter().rev() {
            self.run_one(
                Command::Del,
                &list.name,
                &list.cni_version,
                plugin,
                cached.as_ref(),
                &rt,
            )
            .map_err(|e| e.in_plugin(plugin, &list.name, "delete"))?;
        }
        self.forget(&list.name, &rt);
        Ok(())
    }

    /// DEL for a single-plugin configuration.
    pub fn del_network(&self, plugin: &PluginConfig, rt: &RuntimeConf) -> Result<(), RuntimeError> {
        let rt = self.with_cached_capability_args(plugin.name(), rt);
        let cached = self.cached_result_for_del(plugin.name(), plugin.cni_version(), &rt)?;
        self.run_one(
            Command::Del,
            plugin.name(),
            plugin.cni_version(),
            plugin,
            cached.as_ref(),
            &rt,
        )?;
        self.forget(plugin.name(), &rt);
        Ok(())
    }

    fn with_cached_capability_args(&self, network: &str, rt: &RuntimeConf) -> RuntimeConf {
        let mut rt = rt.clone();
        if rt.capability_args.is_empty() {
            if let Ok(Some(entry)) = self.cache.read_entry(network, &rt.container_id, &rt.ifname) {
                if !entry.capability_args.is_empty() {
                    log::debug!(
                        "DEL of {network}/{}/{} without capability args: using those cached at ADD",
                        rt.container_id,
                        rt.ifname
                    );
                    rt.capability_args = entry.capability_args;
                }
            }
        }
        rt
    }

    fn cached_result_for_del(
        &self,
        network: &str,
        version: &str,
        rt: &RuntimeConf,
    ) -> Result<Option<AnyResult>, RuntimeError> {
        if !at_least(version, SpecVersion::V0_4_0)? {
            return Ok(None);
        }
        match self
            .cache
            .read_result(network, &rt.container_id, &rt.ifname, version)
        {
            Ok(cached) => Ok(cached),
            Err(e) => {
                log::warn!("dropping unusable cached result of network {network:?}: {e}");
                self.forget(network, rt);
                Ok(None)
            }
        }
    }

    fn forget(&self, network: &str, rt: &RuntimeConf) {
        if let Err(e) = self.cache.remove(network, &rt.container_id, &rt.ifname) {
            log::debug!("cache entry of network {network:?} not removed: {e}");
        }
    }

    // ----- GC / STATUS -----

    /// Deletes the cached attachments of this network that `args` does not
    /// list as valid (all of them when `args` is `None`), then, from 1.1.0
    /// on, sends GC to every plugin with the valid attachments. Goes on
    /// after failures and reports them all.
    pub fn gc_network_list(
        &self,
        list: &NetworkConfigList,
        args: Option<&GcArgs>,
    ) -> Result<(), RuntimeError> {
        if list.disable_gc {
            return Ok(());
        }
        let mut errs = Vec::new();
        let valid: HashSet<&GcAttachment> = args
            .map(|a| a.valid_attachments.iter().collect())
            .unwrap_or_default();
        match self.cache.attachments("") {
            Ok(attachments) => {
                for att in attachments.into_iter().filter(|a| a.network == list.name) {
                    let key = GcAttachment {
                        container_id: att.container_id.clone(),
                        ifname: att.ifname.clone(),
                    };
                    if valid.contains(&key) {
                        continue;
                    }
                    let rt = RuntimeConf {
                        container_id: att.container_id,
                        netns: att.netns,
                        ifname: att.ifname,
                        args: att.cni_args,
                        capability_args: att.capability_args,
                    };
                    if let Err(e) = self.del_network_list(list, &rt) {
                        errs.push(RuntimeError::StaleAttachment {
                            container_id: rt.container_id,
                            ifname: rt.ifname,
                            source: Box::new(e),
                        });
                    }
                }
            }
            Err(e) => errs.push(RuntimeError::ListAttachments(e)),
        }

        match self.gc_plugins(list, args) {
            Ok(()) => {}
            Err(RuntimeError::Multiple(plugin_errs)) => errs.extend(plugin_errs),
            Err(e) => errs.push(e),
        }
        RuntimeError::from_list(errs)
    }

    /// The second half of [`CniConfig::gc_network_list`]: from 1.1.0 on,
    /// sends GC to every plugin of the list with the valid attachments
    /// (under both key names), deleting no cached attachment itself. A
    /// node agent calls it before its own DELs, so that a network whose
    /// plugins fail GC keeps its cache entries. Goes on after a plugin's
    /// failure and reports them all; does nothing for `disableGC` lists
    /// and older versions.
    pub fn gc_plugins(
        &self,
        list: &NetworkConfigList,
        args: Option<&GcArgs>,
    ) -> Result<(), RuntimeError> {
        if list.disable_gc || !at_least(&list.cni_version, SpecVersion::V1_1_0).unwrap_or(false) {
            return Ok(());
        }
        let mut errs = Vec::new();
        let mut inject = list_identity(list);
        if let Some(args) = args {
            let valid = serde_json::to_value(&args.valid_attachments)
                .unwrap_or_else(|_| Value::Array(Vec::new()));
            inject.insert("cni.dev/valid-attachments".to_string(), valid.clone());
            // The key's name in the 1.1.0 spec text, still read by
            // plugins built against it (Go libcni sends both).
            inject.insert("cni.dev/attachments".to_string(), valid);
        }
        for plugin in &list.plugins {
            let outcome = inject_conf(plugin, &inject)
                .map_err(RuntimeError::from)
                .and_then(|conf| self.gc_one(&conf));
            if let Err(e) = outcome {
                errs.push(RuntimeError::GcPlugin {
                    plugin_type: plugin.plugin_type().to_string(),
                    source: Box::new(e),
                });
            }
        }
        RuntimeError::from_list(errs)
    }

    fn gc_one(&self, conf: &PluginConfig) -> Result<(), RuntimeError> {
        let path = self.locate(conf.plugin_type())?;
        Ok(exec_plugin_without_result(
            self.exec.as_ref(),
            &path,
            conf.bytes(),
            &self.env(Command::Gc, &RuntimeConf::default()),
        )?)
    }

    /// Asks every plugin in order whether it can serve ADD; the first that
    /// cannot ends the call with its error (and its code: 50, 51). Before
    /// 1.1.0 there is no STATUS and the answer is success.
    pub fn get_status_network_list(&self, list: &NetworkConfigList) -> Result<(), RuntimeError> {
        if !at_least(&list.cni_version, SpecVersion::V1_1_0).unwrap_or(false) {
            return Ok(());
        }
        let inject = list_identity(list);
        for plugin in &list.plugins {
            let outcome = inject_conf(plugin, &inject)
                .map_err(RuntimeError::from)
                .and_then(|conf| {
                    let path = self.locate(conf.plugin_type())?;
                    Ok(exec_plugin_without_result(
                        self.exec.as_ref(),
                        &path,
                        conf.bytes(),
                        &self.env(Command::Status, &RuntimeConf::default()),
                    )?)
                });
            outcome.map_err(|e| e.in_plugin(plugin, &list.name, "status"))?;
        }
        Ok(())
    }

    // ----- validation / version -----

    /// Checks that every plugin exists and speaks the list's version.
    /// Returns the capabilities the list's plugins enable, sorted.
    pub fn validate_network_list(
        &self,
        list: &NetworkConfigList,
    ) -> Result<Vec<String>, RuntimeError> {
        let mut errs = Vec::new();
        let mut caps = BTreeSet::new();
        for plugin in &list.plugins {
            if let Err(e) = self.validate_plugin(plugin.plugin_type(), &list.cni_version) {
                errs.push(e);
            }
            caps.extend(plugin.enabled_capabilities().map(str::to_string));
        }
        RuntimeError::from_list(errs)?;
        Ok(caps.into_iter().collect())
    }

    /// [`CniConfig::validate_network_list`] for a single-plugin configuration.
    pub fn validate_network(&self, plugin: &PluginConfig) -> Result<Vec<String>, RuntimeError> {
        self.validate_plugin(plugin.plugin_type(), plugin.cni_version())?;
        Ok(plugin.enabled_capabilities().map(str::to_string).collect())
    }

    fn validate_plugin(&self, plugin_type: &str, version: &str) -> Result<(), RuntimeError> {
        let info = self.get_version_info(plugin_type)?;
        // No version is the first version.
        let version = if version.is_empty() {
            SpecVersion::V0_1_0.as_str()
        } else {
            version
        };
        if info.supports(version) {
            Ok(())
        } else {
            Err(RuntimeError::UnsupportedVersion {
                plugin_type: plugin_type.to_string(),
                version: version.to_string(),
            })
        }
    }

    /// The spec versions plugin `plugin_type` speaks.
    pub fn get_version_info(&self, plugin_type: &str) -> Result<PluginInfo, RuntimeError> {
        let path = self.locate(plugin_type)?;
        Ok(get_version_info(
            self.exec.as_ref(),
            &path,
            &self.base_env(),
        )?)
    }

    // ----- cache queries -----

    /// The result cached by the last successful ADD of this attachment, in
    /// the list's version.
    pub fn get_network_list_cached_result(
        &self,
        list: &NetworkConfigList,
        rt: &RuntimeConf,
    ) -> Result<Option<AnyResult>, RuntimeError> {
        self.cache
            .read_result(&list.name, &rt.container_id, &rt.ifname, &list.cni_version)
            .map_err(RuntimeError::Cache)
    }

    pub fn get_network_cached_result(
        &self,
        plugin: &PluginConfig,
        rt: &RuntimeConf,
    ) -> Result<Option<AnyResult>, RuntimeError> {
        self.cache
            .read_result(
                plugin.name(),
                &rt.container_id,
                &rt.ifname,
                plugin.cni_version(),
            )
            .map_err(RuntimeError::Cache)
    }

    /// The configuration bytes the attachment was added with, and `rt`
    /// updated with the CNI_ARGS and capability arguments used then.
    pub fn get_network_list_cached_config(
        &self,
        list: &NetworkConfigList,
        rt: &RuntimeConf,
    ) -> Result<Option<(Vec<u8>, RuntimeConf)>, RuntimeError> {
        self.cached_config(&list.name, rt)
    }

    pub fn get_network_cached_config(
        &self,
        plugin: &PluginConfig,
        rt: &RuntimeConf,
    ) -> Result<Option<(Vec<u8>, RuntimeConf)>, RuntimeError> {
        self.cached_config(plugin.name(), rt)
    }

    fn cached_config(
        &self,
        network: &str,
        rt: &RuntimeConf,
    ) -> Result<Option<(Vec<u8>, RuntimeConf)>, RuntimeError> {
        let Some(entry) = self
            .cache
            .read_entry(network, &rt.container_id, &rt.ifname)
            .map_err(RuntimeError::Cache)?
        else {
            return Ok(None);
        };
        let mut cached_rt = rt.clone();
        if !entry.cni_args.is_empty() {
            cached_rt.args = entry.cni_args;
        }
        cached_rt.capability_args = entry.capability_args;
        Ok(Some((entry.config, cached_rt)))
    }

    /// The cached attachments of `container_id`, or of every container
    /// when it is empty.
    pub fn get_cached_attachments(
        &self,
        container_id: &str,
    ) -> Result<Vec<NetworkAttachment>, RuntimeError> {
        self.cache
            .attachments(container_id)
            .map_err(RuntimeError::Cache)
    }
}

/// `name` and `cniVersion` of a list, which every plugin is given.
fn list_identity(list: &NetworkConfigList) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("name".to_string(), Value::String(list.name.clone()));
    m.insert(
        "cniVersion".to_string(),
        Value::String(list.cni_version.clone()),
    );
    m
}

/// The configuration a plugin of a list is run with: its own, plus the
/// list's `name` and `cniVersion`, the previous result, and as
/// `runtimeConfig` the capability arguments it enables. An injected
/// `runtimeConfig` replaces one written in the file; none is injected when
/// no enabled capability has an argument.
pub fn build_one_config(
    network: &str,
    version: &str,
    plugin: &PluginConfig,
    prev_result: Option<&AnyResult>,
    rt: Option<&RuntimeConf>,
) -> Result<PluginConfig, ConfError> {
    let mut inject = Map::new();
    inject.insert("name".to_string(), Value::String(network.to_string()));
    inject.insert("cniVersion".to_string(), Value::String(version.to_string()));
    if let Some(prev) = prev_result {
        inject.insert("prevResult".to_string(), prev.to_value());
    }
    if let Some(rt) = rt {
        let runtime_config: Map<String, Value> = plugin
            .enabled_capabilities()
            .filter_map(|cap| {
                rt.capability_args
                    .get(cap)
                    .map(|arg| (cap.to_string(), arg.clone()))
            })
            .collect();
        if !runtime_config.is_empty() {
            inject.insert("runtimeConfig".to_string(), Value::Object(runtime_config));
        }
    }
    inject_conf(plugin, &inject)
}

fn parse_version(version: &str) -> Result<Semver, RuntimeError> {
    version
        .parse::<Semver>()
        .map_err(|e| RuntimeError::InvalidVersion {
            version: version.to_string(),
            reason: e.to_string(),
        })
}

/// Whether configuration version `version` ("" is 0.1.0) is `min` or newer.
fn at_least(version: &str, min: SpecVersion) -> Result<bool, RuntimeError> {
    Ok(parse_version(version)? >= min.semver())
}

fn require_check(version: &str) -> Result<(), RuntimeError> {
    if at_least(version, SpecVersion::V0_4_0)? {
        Ok(())
    } else {
        Err(RuntimeError::CheckNotSupported {
            version: version.to_string(),
        })
    }
}
