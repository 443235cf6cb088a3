//! The bridge plugin's configuration: every key of the reference plugin,
//! with its meaning and default, decoded and checked in full before the
//! plugin touches the system.
//!
//! Keys are matched the way Go's `encoding/json` matches them for the
//! reference plugin: the exact spelling first, otherwise any spelling that
//! differs only in letter case (the reference's own tests write
//! `RuntimeConfig`). `null` counts as absent, as it leaves a Go field at its
//! default.
//!
//! ADD and CHECK read the whole configuration ([`BridgeConf::from_conf`]);
//! DEL and GC read only the keys that say what to tear down
//! ([`TeardownConf::from_conf`]), so a configuration that ADD refused can
//! still be deleted.

use std::collections::BTreeSet;

use libcni::args::{ArgsError, CniArgs};
use libcni::error::{CniError, ErrorCode, ToCniError};
use libcni::go_compat;
use libcni::iface::{parse_unicast_mac, MacError};
use libcni::plugin_conf::PluginConf;
use libcni::types::Dns;
use libcni::version::{ResultFamily, SpecVersion};
use serde_json::{Map, Value};

pub use libcni::ipmasq::MasqBackend;

pub const DEFAULT_BRIDGE: &str = "cni0";
/// 4095 is reserved by 802.1Q; 0 means "no VLAN" for `vlan`.
pub const MAX_VLAN_ID: i64 = 4094;
/// What `ip link` accepts for an Ethernet device.
pub const MIN_MTU: i64 = 68;
pub const MAX_MTU: i64 = 65535;
/// Linux's `IFNAMSIZ` minus the terminating NUL.
const MAX_IFNAME_BYTES: usize = 15;

/// Where a container MAC came from, lowest precedence first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MacSource {
    CniArgs,
    ArgsCni,
    RuntimeConfig,
}

impl MacSource {
    fn key(self) -> &'static str {
        match self {
            MacSource::CniArgs => "CNI_ARGS MAC",
            MacSource::ArgsCni => "args.cni.mac",
            MacSource::RuntimeConfig => "runtimeConfig.mac",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("failed to load netconf: {key} must be {expected}")]
    WrongType { key: String, expected: &'static str },
    #[error("invalid VLAN ID {0} (must be between 0 and {MAX_VLAN_ID})")]
    InvalidVlan(i64),
    #[error(transparent)]
    Trunk(#[from] TrunkError),
    #[error(
        "invalid MTU {0} (must be 0 for the kernel default, or between {MIN_MTU} and {MAX_MTU})"
    )]
    InvalidMtu(i64),
    #[error(transparent)]
    LinkName(#[from] libcni::link_name::InvalidLinkName),
    #[error("the VLAN gateway interface name {0:?} is longer than {MAX_IFNAME_BYTES} bytes; use a shorter bridge name")]
    VlanGatewayNameTooLong(String),
    #[error("ipMasqBackend: unknown ipmasq backend {0:?} (must be \"iptables\" or \"nftables\")")]
    UnknownMasqBackend(String),
    #[error("invalid MAC address {value:?} in {}: {reason}", .origin.key())]
    InvalidMac {
        origin: MacSource,
        value: String,
        reason: MacError,
    },
    #[error(transparent)]
    Args(#[from] ArgsError),
    #[error("cannot set hairpin mode and promiscuous mode at the same time")]
    HairpinWithPromisc,
    #[error("cannot use IPAM when DisableContainerInterface flag is set")]
    IpamWithoutContainerInterface,
}

impl ToCniError for ConfigError {
    fn to_cni_error(&self) -> CniError {
        let code = match self {
            // CNI_ARGS is part of the environment, not of the configuration.
            ConfigError::Args(e) => return e.to_cni_error(),
            // The spec's code for a value the plugin does not support; the
            // message names the key and the value.
            ConfigError::UnknownMasqBackend(_) => ErrorCode::UnsupportedField,
            ConfigError::WrongType { .. }
            | ConfigError::InvalidVlan(_)
            | ConfigError::Trunk(_)
            | ConfigError::InvalidMtu(_)
            | ConfigError::LinkName(_)
            | ConfigError::VlanGatewayNameTooLong(_)
            | ConfigError::InvalidMac { .. }
            | ConfigError::HairpinWithPromisc
            | ConfigError::IpamWithoutContainerInterface => ErrorCode::InvalidNetworkConfig,
        };
        CniError::new(code, self.to_string())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrunkError {
    #[error("incorrect trunk minID parameter")]
    MinId,
    #[error("incorrect trunk maxID parameter")]
    MaxId,
    #[error("minID is greater than maxID in trunk parameter")]
    MinGreaterThanMax,
    #[error("minID and maxID should be configured simultaneously, minID is missing")]
    MinMissing,
    #[error("minID and maxID should be configured simultaneously, maxID is missing")]
    MaxMissing,
    #[error("incorrect trunk id parameter")]
    Id,
}

/// One `vlanTrunk` entry: a single `id`, a `minID`..=`maxID` range, or both.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrunkEntry {
    pub min_id: Option<i64>,
    pub max_id: Option<i64>,
    pub id: Option<i64>,
}

/// The VLAN ids a trunk list names, deduplicated and sorted; an entry with
/// no keys names none.
pub fn collect_vlan_trunk(entries: &[TrunkEntry]) -> Result<Vec<u16>, TrunkError> {
    let mut vids = BTreeSet::new();
    for entry in entries {
        match (entry.min_id, entry.max_id) {
            (Some(min), Some(max)) => {
                let min = trunk_vid(min).ok_or(TrunkError::MinId)?;
                let max = trunk_vid(max).ok_or(TrunkError::MaxId)?;
                if max < min {
                    return Err(TrunkError::MinGreaterThanMax);
                }
                vids.extend(min..=max);
            }
            (None, Some(_)) => return Err(TrunkError::MinMissing),
            (Some(_), None) => return Err(TrunkError::MaxMissing),
            (None, None) => {}
        }
        if let Some(id) = entry.id {
            vids.insert(trunk_vid(id).ok_or(TrunkError::Id)?);
        }
    }
    Ok(vids.into_iter().collect())
}

/// Trunk ids are 1..=4094: VLAN 0 means "untagged" and cannot be trunked.
fn trunk_vid(id: i64) -> Option<u16> {
    if (1..=MAX_VLAN_ID).contains(&id) {
        u16::try_from(id).ok()
    } else {
        None
    }
}

/// The whole configuration, as ADD and CHECK use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeConf {
    pub network: String,
    pub version: SpecVersion,
    pub bridge: String,
    /// Also true when `isDefaultGateway` is.
    pub is_gateway: bool,
    pub is_default_gateway: bool,
    pub force_address: bool,
    pub ip_masq: bool,
    /// `None`: the masquerade code picks (iptables unless only nftables
    /// works).
    pub masq_backend: Option<MasqBackend>,
    /// `None`: the kernel's default.
    pub mtu: Option<u32>,
    pub hairpin_mode: bool,
    pub promisc_mode: bool,
    /// The access (PVID, untagged) VLAN of the port; `None` for `vlan: 0`.
    pub vlan: Option<u16>,
    /// Tagged VLANs of the port, sorted.
    pub vlan_trunk: Vec<u16>,
    /// A new bridge gets VLAN filtering when `vlan` is set or `vlanTrunk`
    /// is present at all, even empty, as in the reference plugin.
    pub vlan_filtering: bool,
    pub preserve_default_vlan: bool,
    pub enable_dad: bool,
    pub mac_spoof_check: bool,
    pub disable_container_interface: bool,
    pub port_isolation: bool,
    /// The IPAM plugin; `None` means layer 2 only.
    pub ipam_type: Option<String>,
    /// Replaces the IPAM plugin's DNS settings in the result when set.
    pub dns: Option<Dns>,
    /// The container interface's MAC, highest-precedence source.
    pub mac: Option<[u8; 6]>,
}

impl BridgeConf {
    /// Decodes and checks the configuration and the `MAC` of `CNI_ARGS`.
    pub fn from_conf(conf: &PluginConf, cni_args: &str) -> Result<BridgeConf, ConfigError> {
        let fields = Fields::root(conf.raw())?;

        let vlan = fields.int("vlan")?.unwrap_or(0);
        if !(0..=MAX_VLAN_ID).contains(&vlan) {
            return Err(ConfigError::InvalidVlan(vlan));
        }
        let vlan = u16::try_from(vlan).ok().filter(|v| *v != 0);
        let trunk_entries = match fields.array("vlanTrunk")? {
            Some(items) => Some(trunk_entries(items)?),
            None => None,
        };
        let vlan_trunk = collect_vlan_trunk(trunk_entries.as_deref().unwrap_or_default())?;

        let bridge = fields
            .string("bridge")?
            .filter(|b| !b.is_empty())
            .unwrap_or(DEFAULT_BRIDGE)
            .to_string();
        libcni::link_name::check_key("bridge", &bridge)?;

        let mtu = match fields.int("mtu")?.unwrap_or(0) {
            0 => None,
            m if (MIN_MTU..=MAX_MTU).contains(&m) => u32::try_from(m).ok(),
            m => return Err(ConfigError::InvalidMtu(m)),
        };

        let masq_backend = match fields.string("ipMasqBackend")? {
            None => None,
            Some("iptables") => Some(MasqBackend::Iptables),
            Some("nftables") => Some(MasqBackend::Nftables),
            Some(other) => return Err(ConfigError::UnknownMasqBackend(other.to_string())),
        };

        let mac = container_mac(&fields, cni_args)?;

        let is_default_gateway = fields.flag("isDefaultGateway")?;
        let ipam_type = conf
            .ipam
            .as_ref()
            .map(|ipam| ipam.ipam_type.clone())
            .filter(|t| !t.is_empty());
        let conf = BridgeConf {
            network: conf.name.clone(),
            version: conf.cni_version,
            bridge,
            is_gateway: fields.flag("isGateway")? || is_default_gateway,
            is_default_gateway,
            force_address: fields.flag("forceAddress")?,
            ip_masq: fields.flag("ipMasq")?,
            masq_backend,
            mtu,
            hairpin_mode: fields.flag("hairpinMode")?,
            promisc_mode: fields.flag("promiscMode")?,
            vlan,
            vlan_trunk,
            vlan_filtering: vlan.is_some() || trunk_entries.is_some(),
            preserve_default_vlan: fields.flag("preserveDefaultVlan")?,
            enable_dad: fields.flag("enabledad")?,
            mac_spoof_check: fields.flag("macspoofchk")?,
            disable_container_interface: fields.flag("disableContainerInterface")?,
            port_isolation: fields.flag("portIsolation")?,
            ipam_type,
            dns: (!conf.dns.is_empty()).then(|| conf.dns.clone()),
            mac,
        };
        conf.check_combinations()?;
        Ok(conf)
    }

    /// Settings that are valid one by one but not together.
    fn check_combinations(&self) -> Result<(), ConfigError> {
        if self.ipam_type.is_some() && self.disable_container_interface {
            return Err(ConfigError::IpamWithoutContainerInterface);
        }
        if self.hairpin_mode && self.promisc_mode {
            return Err(ConfigError::HairpinWithPromisc);
        }
        if let Some(name) = self.vlan_gateway_name() {
            if name.len() > MAX_IFNAME_BYTES {
                return Err(ConfigError::VlanGatewayNameTooLong(name));
            }
        }
        Ok(())
    }

    pub fn is_layer3(&self) -> bool {
        self.ipam_type.is_some()
    }

    /// The interface that holds the gateway addresses of a VLAN network
    /// (`<bridge>.<vlan>`), when there is one.
    pub fn vlan_gateway_name(&self) -> Option<String> {
        match (self.is_gateway, self.vlan) {
            (true, Some(vlan)) => Some(format!("{}.{vlan}", self.bridge)),
            _ => None,
        }
    }

    /// A result without IP addresses cannot be written in the 0.1.0/0.2.0
    /// layout; knowing it before ADD changes anything spares a rollback.
    pub fn result_expressible(&self) -> bool {
        self.is_layer3() || self.version.family() != ResultFamily::V02
    }
}

/// What DEL and GC need: which rules were set up and by whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeardownConf {
    pub network: String,
    pub ip_masq: bool,
    pub mac_spoof_check: bool,
    pub ipam_type: Option<String>,
}

impl TeardownConf {
    pub fn from_conf(conf: &PluginConf) -> Result<TeardownConf, ConfigError> {
        let fields = Fields::root(conf.raw())?;
        Ok(TeardownConf {
            network: conf.name.clone(),
            ip_masq: fields.flag("ipMasq")?,
            mac_spoof_check: fields.flag("macspoofchk")?,
            ipam_type: conf
                .ipam
                .as_ref()
                .map(|ipam| ipam.ipam_type.clone())
                .filter(|t| !t.is_empty()),
        })
    }
}

/// The container MAC with the reference's precedence: `MAC` in CNI_ARGS,
/// overridden by `args.cni.mac`, overridden by `runtimeConfig.mac`. Only the
/// value that wins is parsed, as in the reference.
fn container_mac(fields: &Fields<'_>, cni_args: &str) -> Result<Option<[u8; 6]>, ConfigError> {
    let args = CniArgs::parse(cni_args, &["MAC"])?;
    let from_args_cni = match fields.object("args")? {
        Some(args) => match args.object("cni")? {
            Some(cni) => cni.string("mac")?,
            None => None,
        },
        None => None,
    };
    let from_runtime = match fields.object("runtimeConfig")? {
        Some(rc) => rc.string("mac")?,
        None => None,
    };
    let winner = [
        (MacSource::RuntimeConfig, from_runtime),
        (MacSource::ArgsCni, from_args_cni),
        (MacSource::CniArgs, args.get("MAC")),
    ]
    .into_iter()
    .find_map(|(source, value)| value.filter(|v| !v.is_empty()).map(|v| (source, v)));
    let Some((source, value)) = winner else {
        return Ok(None);
    };
    parse_unicast_mac(value)
        .map(Some)
        .map_err(|reason| ConfigError::InvalidMac {
            origin: source,
            value: value.to_string(),
            reason,
        })
}

fn trunk_entries(items: &[Value]) -> Result<Vec<TrunkEntry>, ConfigError> {
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let key = format!("vlanTrunk[{i}]");
            let fields = match item {
                // Go leaves a null pointer in the list, which names no VLAN.
                Value::Null => return Ok(TrunkEntry::default()),
                Value::Object(map) => Fields { map, path: key },
                _ => {
                    return Err(ConfigError::WrongType {
                        key,
                        expected: "an object",
                    })
                }
            };
            Ok(TrunkEntry {
                min_id: fields.int("minID")?,
                max_id: fields.int("maxID")?,
                id: fields.int("id")?,
            })
        })
        .collect()
}

/// Typed access to one JSON object with Go's key matching.
struct Fields<'a> {
    map: &'a Map<String, Value>,
    /// Where this object sits, for messages ("args.cni").
    path: String,
}

impl<'a> Fields<'a> {
    fn root(value: &'a Value) -> Result<Fields<'a>, ConfigError> {
        match value {
            Value::Object(map) => Ok(Fields {
                map,
                path: String::new(),
            }),
            _ => Err(ConfigError::WrongType {
                key: "the configuration".into(),
                expected: "an object",
            }),
        }
    }

    /// No two keys of the reference's bridge configuration differ in case
    /// alone, so a lookup by name is what Go's decoder does.
    fn get(&self, key: &str) -> Option<&'a Value> {
        go_compat::get(self.map, key).filter(|v| !v.is_null())
    }

    fn wrong_type(&self, key: &str, expected: &'static str) -> ConfigError {
        let key = if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        };
        ConfigError::WrongType { key, expected }
    }

    fn flag(&self, key: &str) -> Result<bool, ConfigError> {
        match self.get(key) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(self.wrong_type(key, "a boolean")),
        }
    }

    fn int(&self, key: &str) -> Result<Option<i64>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_i64()
                .map(Some)
                .ok_or_else(|| self.wrong_type(key, "an integer")),
        }
    }

    fn string(&self, key: &str) -> Result<Option<&'a str>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(self.wrong_type(key, "a string")),
        }
    }

    fn array(&self, key: &str) -> Result<Option<&'a [Value]>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(items)) => Ok(Some(items)),
            Some(_) => Err(self.wrong_type(key, "a list")),
        }
    }

    fn object(&self, key: &str) -> Result<Option<Fields<'a>>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(Fields {
                map,
                path: if self.path.is_empty() {
                    key.to_string()
                } else {
                    format!("{}.{key}", self.path)
                },
            })),
            Some(_) => Err(self.wrong_type(key, "an object")),
        }
    }
}

#[cfg(test)]
mod tests;
