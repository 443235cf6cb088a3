//! One scenario's world: a fake host namespace where the plugins run, a
//! private folder for leases and caches, and pods made on demand. Plugin
//! configurations and calls are built here so every check reads the same.

use std::path::{Path, PathBuf};

use libcni::conf::{self, NetworkConfigList};
use libcni::runtime::CniConfig;
use libcni::types::AnyResult;
use libcni::version::SpecVersion;
use serde_json::{json, Value};

use super::probe::Plugin;
use super::sandbox::{Call, Netns, NetnsExec, Reply, SandboxError, WorkDir};
use super::shape::result_addresses;

/// The subnet of a scenario's networks; each scenario has its own fake
/// host, so they never meet.
pub const SUBNET: &str = "10.99.0.0/24";
pub const GATEWAY: &str = "10.99.0.1";
pub const BRIDGE: &str = "cni-suite0";

pub struct Scene {
    pub host: Netns,
    pub work: WorkDir,
    /// The plugin directory under test (CNI_PATH).
    pub dir: PathBuf,
}

impl Scene {
    pub fn new(tag: &str, dir: &Path) -> Result<Scene, SandboxError> {
        Ok(Scene {
            host: Netns::create(&format!("{tag}-h"))?,
            work: WorkDir::new(tag)?,
            dir: dir.to_path_buf(),
        })
    }

    pub fn pod(&self, tag: &str) -> Result<Netns, SandboxError> {
        Netns::create(&format!("{tag}-p"))
    }

    /// host-local's store for this scenario.
    pub fn leases(&self) -> PathBuf {
        self.work.join("leases")
    }

    /// The addresses host-local holds for `network` (lease file names).
    pub fn leased(&self, network: &str) -> Vec<String> {
        let mut out: Vec<String> = std::fs::read_dir(self.leases().join(network))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
            .collect();
        out.sort();
        out
    }

    /// A call of `command` for an attachment, run inside the fake host,
    /// with CNI_PATH the directory under test.
    pub fn call(&self, command: &str, container_id: &str, netns: &str, ifname: &str) -> Call {
        Call::new(command)
            .var("CNI_CONTAINERID", container_id)
            .var("CNI_NETNS", netns)
            .var("CNI_IFNAME", ifname)
            .var("CNI_PATH", self.dir.display().to_string())
            .inside(&self.host)
    }

    /// A GC or STATUS call: only CNI_COMMAND and CNI_PATH.
    pub fn bare_call(&self, command: &str) -> Call {
        Call::new(command)
            .var("CNI_PATH", self.dir.display().to_string())
            .inside(&self.host)
    }

    pub fn run(&self, plugin: &Plugin, call: &Call) -> Result<Reply, String> {
        call.run(&plugin.path).map_err(|e| e.to_string())
    }

    /// The host-local section every scenario uses (its store is private).
    pub fn ipam(&self, subnet: &str) -> Value {
        json!({
            "type": "host-local",
            "ranges": [[{"subnet": subnet}]],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": self.leases(),
        })
    }

    /// Our libcni runtime running the directory's plugins in the fake
    /// host, with its result cache in the scenario's folder.
    pub fn runtime(&self) -> Result<CniConfig, SandboxError> {
        let exec = NetnsExec::new(&self.host, self.work.path())?;
        // The scenario's lease folder is a scratch one, which the tests'
        // node policy allows (host-local's dataDir is confined to the
        // state folders). Set here, not inherited: `conformance suite` run
        // by hand or by CI has no policy variable of its own.
        let mut env = libcni::invoke::PluginEnv::from_process();
        env.set(
            libcni::confine::POLICY_ENV,
            crate::testnet::scratch_policy().as_os_str().to_os_string(),
        );
        Ok(CniConfig::with_exec(vec![self.dir.clone()], exec)
            .with_cache_dir(self.work.join("cache"))
            .with_base_env(env))
    }

    pub fn has_link(&self, ns: &Netns, name: &str) -> Result<bool, String> {
        ns.link(name)
            .map(|l| l.is_some())
            .map_err(|e| e.to_string())
    }

    /// Host-side veth ends (their names start with `veth`).
    pub fn host_veths(&self) -> Result<Vec<String>, String> {
        Ok(self
            .host
            .link_names()
            .map_err(|e| e.to_string())?
            .into_iter()
            .filter(|n| n.starts_with("veth"))
            .collect())
    }
}

/// A network configuration list from JSON, through our libcni.
pub fn conflist(value: &Value) -> Result<NetworkConfigList, String> {
    let bytes = serde_json::to_vec(value).map_err(|e| e.to_string())?;
    conf::conflist_from_bytes(&bytes).map_err(|e| e.to_string())
}

/// `result` as JSON in its own version.
pub fn result_json(result: &AnyResult) -> Value {
    result.to_value()
}

/// A 1.0.0 result converted to `version` with the spec's rules.
pub fn result_at(version: &str, v1: &Value) -> Result<Value, String> {
    let to: SpecVersion = version.parse().map_err(|e| format!("{e}"))?;
    let r = AnyResult::from_value(v1.clone(), SpecVersion::V1_0_0).map_err(|e| e.to_string())?;
    Ok(r.convert_to(to).map_err(|e| e.to_string())?.to_value())
}

/// The first IPv4 address of a result, without prefix.
pub fn first_ipv4(result: &Value) -> Option<std::net::Ipv4Addr> {
    result_addresses(result).iter().find_map(|a| {
        a.split('/')
            .next()
            .and_then(|ip| ip.parse::<std::net::Ipv4Addr>().ok())
    })
}
