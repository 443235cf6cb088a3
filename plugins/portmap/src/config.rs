//! The plugin's own configuration keys, decoded with the reference
//! plugin's meaning and messages.
//!
//! Go's JSON decoder matches keys case-insensitively, which is why
//! containerd can send `HostPort` where Podman sends `hostPort`; keys are
//! looked up the same way here ([`go_compat::get`]: an exact match wins
//! over a folded one; no two keys of the reference's configuration differ
//! in case alone).
//!
//! Backend selection is split in two: what the configuration says is
//! settled here (an explicit `backend`, or the backend implied by
//! backend-specific options), while probing the host for `Auto` is left to
//! the moment a backend is really needed, so that a call without port
//! mappings does no work at all.

use std::fmt;
use std::net::IpAddr;

use ipnetwork::IpNetwork;
use libcni::go_compat;
use libcni::plugin_conf::PluginConf;
use libcni::types::v100;
use libcni::IpFamily;
use serde_json::{Map, Value};

/// The default mark bit telling the masquerade chain to act (Kubernetes
/// uses 14 and 15, Calico 20 to 31).
pub const DEFAULT_MARK_MASQ_BIT: u8 = 13;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("Cannot specify externalSetMarkChain and markMasqBit")]
    ExternalChainAndMarkBit,
    #[error("MasqMarkBit must be between 0 and 31")]
    MarkBitRange,
    #[error("unrecognized backend {0:?}")]
    UnknownBackend(String),
    #[error("{requested} backend was requested but configuration contains {other}-specific options [{}]", .options.join(" "))]
    WrongBackendOptions {
        requested: BackendKind,
        other: BackendKind,
        options: Vec<&'static str>,
    },
    #[error("configuration contains both iptables-specific options [{}] and nftables-specific options [{}]; set \"backend\"", .iptables.join(" "), .nftables.join(" "))]
    MixedBackendOptions {
        iptables: Vec<&'static str>,
        nftables: Vec<&'static str>,
    },
    #[error("Invalid container port number: {0}")]
    ContainerPort(i64),
    #[error("Invalid host port number: {0}")]
    HostPort(i64),
    #[error("Invalid protocol {0:?} in port mapping: expected tcp, udp or sctp")]
    Protocol(String),
    #[error("Invalid hostIP {0:?} in port mapping")]
    HostIp(String),
    #[error("invalid value for {key}: {expected}")]
    Type { key: String, expected: &'static str },
    #[error("invalid {key}: {reason}")]
    Invalid { key: &'static str, reason: String },
}

/// The firewall interface rules are written through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendKind {
    Iptables,
    Nftables,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Iptables => "iptables",
            BackendKind::Nftables => "nftables",
        }
    }

    fn other(self) -> BackendKind {
        match self {
            BackendKind::Iptables => BackendKind::Nftables,
            BackendKind::Nftables => BackendKind::Iptables,
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The backend as far as the configuration decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendChoice {
    /// Named by `backend`, or implied by backend-specific options.
    Configured(BackendKind),
    /// Nothing said: iptables when usable, else nftables (as the reference).
    Auto,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }

    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Sctp => 132,
        }
    }

    /// Names are case-insensitive; an empty protocol means TCP, the
    /// default of the runtimes that send port mappings.
    fn parse(s: &str) -> Option<Protocol> {
        match s.to_ascii_lowercase().as_str() {
            "" | "tcp" => Some(Protocol::Tcp),
            "udp" => Some(Protocol::Udp),
            "sctp" => Some(Protocol::Sctp),
            _ => None,
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One `runtimeConfig.portMappings` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortMapping {
    pub host_port: u16,
    pub container_port: u16,
    pub protocol: Protocol,
    /// `None` when absent or empty.
    pub host_ip: Option<IpAddr>,
}

impl PortMapping {
    /// Whether the mapping applies to a container address of `family`:
    /// a host IP of the other family is skipped, as in the reference.
    pub fn applies_to(&self, family: IpFamily) -> bool {
        self.host_ip.is_none_or(|ip| IpFamily::of(ip) == family)
    }

    /// The destination address to match, if any: an unspecified host IP
    /// (`0.0.0.0`, `::`) matches every address.
    pub fn destination(&self) -> Option<IpAddr> {
        self.host_ip.filter(|ip| !ip.is_unspecified())
    }
}

/// The portmap configuration, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortMapConf {
    /// The network name (part of iptables chain names and comments).
    pub network: String,
    pub backend: BackendChoice,
    pub snat: bool,
    /// Masquerade hairpin traffic from any source rather than only from
    /// the container itself.
    pub masq_all: bool,
    pub mark_masq_bit: u8,
    pub external_set_mark_chain: Option<String>,
    pub conditions_v4: Vec<String>,
    pub conditions_v6: Vec<String>,
    pub mappings: Vec<PortMapping>,
}

impl PortMapConf {
    /// Decodes the plugin keys of `conf` in the reference's order of
    /// checks, so the first error reported is the same.
    pub fn from_plugin_conf(conf: &PluginConf) -> Result<PortMapConf, ConfigError> {
        let empty = Map::new();
        let obj = conf.raw().as_object().unwrap_or(&empty);

        let backend = optional_string(obj, "backend")?;
        let snat = optional_bool(obj, "snat")?.unwrap_or(true);
        let masq_all = optional_bool(obj, "masqAll")?.unwrap_or(false);
        let conditions_v4 = optional_strings(obj, "conditionsV4")?;
        let conditions_v6 = optional_strings(obj, "conditionsV6")?;
        let mark_masq_bit = optional_int(obj, "markMasqBit")?;
        let external_set_mark_chain = optional_string(obj, "externalSetMarkChain")?;
        let raw_mappings = port_mappings(obj)?;

        if mark_masq_bit.is_some() && external_set_mark_chain.is_some() {
            return Err(ConfigError::ExternalChainAndMarkBit);
        }
        let mark_masq_bit = match mark_masq_bit {
            None => DEFAULT_MARK_MASQ_BIT,
            Some(bit) => u8::try_from(bit)
                .ok()
                .filter(|b| *b <= 31)
                .ok_or(ConfigError::MarkBitRange)?,
        };

        let backend = choose_backend(
            backend.as_deref(),
            external_set_mark_chain.is_some(),
            conditions_v4.as_deref(),
            conditions_v6.as_deref(),
        )?;

        let mappings = raw_mappings
            .iter()
            .map(RawMapping::validate)
            .collect::<Result<Vec<_>, _>>()?;

        if let Some(chain) = &external_set_mark_chain {
            validate_chain_name("externalSetMarkChain", chain)?;
        }

        Ok(PortMapConf {
            network: conf.name.clone(),
            backend,
            snat,
            masq_all,
            mark_masq_bit,
            external_set_mark_chain,
            conditions_v4: conditions_v4.unwrap_or_default(),
            conditions_v6: conditions_v6.unwrap_or_default(),
            mappings,
        })
    }

    pub fn conditions(&self, family: IpFamily) -> &[String] {
        match family {
            IpFamily::V4 => &self.conditions_v4,
            IpFamily::V6 => &self.conditions_v6,
        }
    }

    /// The mappings that apply to a container address of `family`.
    pub fn mappings_for(&self, family: IpFamily) -> impl Iterator<Item = &PortMapping> {
        self.mappings.iter().filter(move |m| m.applies_to(family))
    }

    /// The mark value (and mask) that asks for masquerading.
    pub fn mark_value(&self) -> u32 {
        1u32 << self.mark_masq_bit
    }
}

/// Which backend a list of conditions is written for: iptables arguments
/// start with `-` or `!`, nftables expressions never do.
pub fn conditions_backend(conditions: Option<&[String]>) -> Option<BackendKind> {
    let first = conditions?.first()?;
    match first.chars().next()? {
        '-' | '!' => Some(BackendKind::Iptables),
        _ => Some(BackendKind::Nftables),
    }
}

fn choose_backend(
    backend: Option<&str>,
    has_external_chain: bool,
    conditions_v4: Option<&[String]>,
    conditions_v6: Option<&[String]>,
) -> Result<BackendChoice, ConfigError> {
    let mut options: [(BackendKind, Vec<&'static str>); 2] = [
        (BackendKind::Iptables, Vec::new()),
        (BackendKind::Nftables, Vec::new()),
    ];
    let mut note = |kind: BackendKind, option: &'static str| {
        for (k, list) in options.iter_mut() {
            if *k == kind {
                list.push(option);
            }
        }
    };
    if has_external_chain {
        note(BackendKind::Iptables, "externalSetMarkChain");
    }
    if let Some(kind) = conditions_backend(conditions_v4) {
        note(kind, "conditionsV4");
    }
    if let Some(kind) = conditions_backend(conditions_v6) {
        note(kind, "conditionsV6");
    }
    let [(_, iptables), (_, nftables)] = options;
    let options_of = |kind: BackendKind| match kind {
        BackendKind::Iptables => &iptables,
        BackendKind::Nftables => &nftables,
    };

    let requested = match backend {
        None => None,
        Some("iptables") => Some(BackendKind::Iptables),
        Some("nftables") => Some(BackendKind::Nftables),
        Some(other) => return Err(ConfigError::UnknownBackend(other.to_string())),
    };
    match requested {
        Some(kind) => {
            let wrong = options_of(kind.other());
            if !wrong.is_empty() {
                return Err(ConfigError::WrongBackendOptions {
                    requested: kind,
                    other: kind.other(),
                    options: wrong.clone(),
                });
            }
            Ok(BackendChoice::Configured(kind))
        }
        // Unlike the reference (which probes first and then rejects the
        // options of the other backend), options naming one backend choose
        // it: that configuration can only ever work with that backend.
        None => match (iptables.is_empty(), nftables.is_empty()) {
            (true, true) => Ok(BackendChoice::Auto),
            (false, true) => Ok(BackendChoice::Configured(BackendKind::Iptables)),
            (true, false) => Ok(BackendChoice::Configured(BackendKind::Nftables)),
            (false, false) => Err(ConfigError::MixedBackendOptions {
                iptables: iptables.clone(),
                nftables: nftables.clone(),
            }),
        },
    }
}

/// An iptables chain name we write into restore input: no whitespace or
/// quotes, which would change the meaning of the line.
fn validate_chain_name(key: &'static str, name: &str) -> Result<(), ConfigError> {
    let invalid = |reason: &str| ConfigError::Invalid {
        key,
        reason: reason.to_string(),
    };
    if name.is_empty() {
        return Err(invalid("empty chain name"));
    }
    if name.len() > 28 {
        return Err(invalid("chain names are at most 28 characters"));
    }
    if name
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '"' || c == '\'' || c == '\\')
    {
        return Err(invalid("chain name contains whitespace or quotes"));
    }
    Ok(())
}

/// A port mapping as written, before validation.
#[derive(Debug, Default)]
struct RawMapping {
    host_port: i64,
    container_port: i64,
    protocol: String,
    host_ip: String,
}

impl RawMapping {
    fn validate(&self) -> Result<PortMapping, ConfigError> {
        // The reference checks the container port first.
        let container_port = u16::try_from(self.container_port)
            .ok()
            .filter(|p| *p > 0)
            .ok_or(ConfigError::ContainerPort(self.container_port))?;
        let host_port = u16::try_from(self.host_port)
            .ok()
            .filter(|p| *p > 0)
            .ok_or(ConfigError::HostPort(self.host_port))?;
        let protocol = Protocol::parse(&self.protocol)
            .ok_or_else(|| ConfigError::Protocol(self.protocol.clone()))?;
        let host_ip = if self.host_ip.is_empty() {
            None
        } else {
            Some(
                self.host_ip
                    .parse::<IpAddr>()
                    .map_err(|_| ConfigError::HostIp(self.host_ip.clone()))?,
            )
        };
        Ok(PortMapping {
            host_port,
            container_port,
            protocol,
            host_ip,
        })
    }
}

/// `runtimeConfig.portMappings`, with every key matched as Go does.
fn port_mappings(obj: &Map<String, Value>) -> Result<Vec<RawMapping>, ConfigError> {
    let Some(runtime_config) = go_compat::get(obj, "runtimeConfig") else {
        return Ok(Vec::new());
    };
    let runtime_config = match runtime_config {
        Value::Null => return Ok(Vec::new()),
        Value::Object(o) => o,
        _ => return Err(type_error("runtimeConfig", "an object")),
    };
    let list = match go_compat::get(runtime_config, "portMappings") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(_) => return Err(type_error("runtimeConfig.portMappings", "a list")),
    };
    list.iter()
        .map(|entry| {
            let entry = match entry {
                // Go decodes `null` into a zero entry, which then fails
                // the port checks.
                Value::Null => return Ok(RawMapping::default()),
                Value::Object(o) => o,
                _ => {
                    return Err(type_error(
                        "runtimeConfig.portMappings",
                        "a list of objects",
                    ))
                }
            };
            Ok(RawMapping {
                host_port: optional_int(entry, "hostPort")?.unwrap_or(0),
                container_port: optional_int(entry, "containerPort")?.unwrap_or(0),
                protocol: optional_string(entry, "protocol")?.unwrap_or_default(),
                host_ip: optional_string(entry, "hostIP")?.unwrap_or_default(),
            })
        })
        .collect()
}

fn type_error(key: &str, expected: &'static str) -> ConfigError {
    ConfigError::Type {
        key: key.to_string(),
        expected,
    }
}

fn optional_string(obj: &Map<String, Value>, key: &str) -> Result<Option<String>, ConfigError> {
    match go_compat::get(obj, key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(type_error(key, "a string")),
    }
}

fn optional_bool(obj: &Map<String, Value>, key: &str) -> Result<Option<bool>, ConfigError> {
    match go_compat::get(obj, key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(type_error(key, "a boolean")),
    }
}

fn optional_int(obj: &Map<String, Value>, key: &str) -> Result<Option<i64>, ConfigError> {
    match go_compat::get(obj, key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            .map(Some)
            .ok_or_else(|| type_error(key, "an integer")),
        Some(_) => Err(type_error(key, "an integer")),
    }
}

fn optional_strings(
    obj: &Map<String, Value>,
    key: &str,
) -> Result<Option<Vec<String>>, ConfigError> {
    match go_compat::get(obj, key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(s.clone()),
                Value::Null => Ok(String::new()),
                _ => Err(type_error(key, "a list of strings")),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(type_error(key, "a list of strings")),
    }
}

/// The container's addresses, one per family: the first of each family
/// whose interface is `ifname` inside the sandbox. An address without an
/// interface index, or with one out of range, is taken as the container's
/// (the reference accepts them too).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContainerIps {
    pub v4: Option<IpNetwork>,
    pub v6: Option<IpNetwork>,
}

impl ContainerIps {
    pub fn from_result(result: &v100::Result, ifname: &str) -> ContainerIps {
        let mut ips = ContainerIps::default();
        for ip in &result.ips {
            let slot = match ip.address {
                IpNetwork::V4(_) => &mut ips.v4,
                IpNetwork::V6(_) => &mut ips.v6,
            };
            if slot.is_some() {
                continue;
            }
            if let Some(interface) = ip.interface.and_then(|i| result.interfaces.get(i)) {
                if interface.name != ifname || interface.sandbox.is_empty() {
                    continue;
                }
            }
            *slot = Some(ip.address);
        }
        ips
    }

    pub fn get(&self, family: IpFamily) -> Option<IpNetwork> {
        match family {
            IpFamily::V4 => self.v4,
            IpFamily::V6 => self.v6,
        }
    }

    /// `(family, address)` for each family the container has.
    pub fn iter(&self) -> impl Iterator<Item = (IpFamily, IpNetwork)> + '_ {
        IpFamily::ALL
            .into_iter()
            .filter_map(|f| self.get(f).map(|ip| (f, ip)))
    }

    pub fn is_empty(&self) -> bool {
        self.v4.is_none() && self.v6.is_none()
    }
}

#[cfg(test)]
mod tests;
