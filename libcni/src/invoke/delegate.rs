//! Delegation: a plugin running another plugin (IPAM, usually).

use std::path::PathBuf;

use super::{exec_plugin_with_result, exec_plugin_without_result, Command, Exec, InvokeError};
use super::{PluginEnv, RawExec};
use crate::types::AnyResult;

/// Runs delegate plugins the way the spec asks: found in `CNI_PATH`, given
/// the calling plugin's environment with only `CNI_COMMAND` changed, and
/// the complete network configuration (not just its `ipam` section).
///
/// The environment is an explicit input so plugins can be tested without
/// touching the process environment.
#[derive(Debug, Clone)]
pub struct Delegator<E: Exec = RawExec> {
    exec: E,
    env: PluginEnv,
}

impl Delegator<RawExec> {
    /// What a plugin binary uses: its own environment and real processes.
    pub fn from_process_env() -> Self {
        Delegator::new(RawExec::new(), PluginEnv::from_process())
    }
}

impl<E: Exec> Delegator<E> {
    pub fn new(exec: E, env: PluginEnv) -> Self {
        Delegator { exec, env }
    }

    pub fn env(&self) -> &PluginEnv {
        &self.env
    }

    pub fn exec(&self) -> &E {
        &self.exec
    }

    fn locate(&self, plugin: &str) -> Result<PathBuf, InvokeError> {
        self.exec.find_in_path(plugin, &self.env.cni_path())
    }

    /// The delegate is also told who called it: it reads the same
    /// configuration, so it logs into the same file, and its lines and
    /// failures should say whose delegate they are
    /// ([`crate::logging::DELEGATED_BY_ENV`]).
    fn env_for(&self, command: Command) -> PluginEnv {
        self.env.clone().with("CNI_COMMAND", command.as_str()).with(
            crate::logging::DELEGATED_BY_ENV,
            crate::logging::LogContext::process_plugin_name(),
        )
    }

    /// ADD; a result without `cniVersion` is in `netconf`'s version.
    pub fn add(&self, plugin: &str, netconf: &[u8]) -> Result<AnyResult, InvokeError> {
        let path = self.locate(plugin)?;
        exec_plugin_with_result(&self.exec, &path, netconf, &self.env_for(Command::Add))
    }

    pub fn check(&self, plugin: &str, netconf: &[u8]) -> Result<(), InvokeError> {
        self.without_result(Command::Check, plugin, netconf)
    }

    pub fn del(&self, plugin: &str, netconf: &[u8]) -> Result<(), InvokeError> {
        self.without_result(Command::Del, plugin, netconf)
    }

    pub fn status(&self, plugin: &str, netconf: &[u8]) -> Result<(), InvokeError> {
        self.without_result(Command::Status, plugin, netconf)
    }

    pub fn gc(&self, plugin: &str, netconf: &[u8]) -> Result<(), InvokeError> {
        self.without_result(Command::Gc, plugin, netconf)
    }

    fn without_result(
        &self,
        command: Command,
        plugin: &str,
        netconf: &[u8],
    ) -> Result<(), InvokeError> {
        let path = self.locate(plugin)?;
        exec_plugin_without_result(&self.exec, &path, netconf, &self.env_for(command))
    }
}
