//! The ipvlan plugin's configuration: every key of the reference plugin,
//! decoded and checked before the plugin touches the system.
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `master` | see below | the parent link |
//! | `mode` | `l2` | `l2`, `l3` or `l3s` |
//! | `mtu` | 0: the parent's | at most the parent's MTU |
//! | `linkInContainer` | false | the parent is in the container's namespace |
//! | `ipam` | | the IPAM plugin; none takes the prevResult's IPs |
//! | `dns` | none | DNS settings of the result |
//!
//! Without `master`, the parent is the prevResult's one named interface
//! when there is a prevResult (ipvlan chained behind another plugin), else
//! the link of the default route, as in the reference. The reference does
//! not check `mtu`; here it must be within the parent's, as for macvlan
//! and vlan (the kernel refuses a larger one anyway, less clearly). Keys
//! match Go's way (exact spelling first, else any letter case); `CNI_ARGS`
//! are not read.

use libcni::error::{CniError, ErrorCode, ToCniError};
use libcni::go_compat::{fold_keys, Shape};
use libcni::netlink::sublink::IpVlanMode;
use libcni::netlink::sublink_plugin::conf::{self as sublink_conf, MtuOutOfRange};
use libcni::plugin_conf::PluginConf;
use libcni::types::Dns;
use serde::Deserialize;

const SHAPE: Shape = Shape::Object(&[
    ("master", Shape::Leaf),
    ("mode", Shape::Leaf),
    ("mtu", Shape::Leaf),
    ("linkInContainer", Shape::Leaf),
]);

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("failed to load netconf: {0}")]
    Decode(#[source] serde_json::Error),
    #[error("unknown ipvlan mode: {0:?} (must be l2, l3 or l3s)")]
    UnknownMode(String),
    #[error(transparent)]
    MtuOutOfRange(#[from] MtuOutOfRange),
    #[error("chained master failure. PrevResult lacks a single named interface")]
    ChainedMaster,
    #[error("no addresses for the ipvlan link: set \"ipam\", or chain the plugin behind one whose result has IPs")]
    NoAddressSource,
    #[error(transparent)]
    LinkName(#[from] libcni::link_name::InvalidLinkName),
}

impl ToCniError for ConfigError {
    fn to_cni_error(&self) -> CniError {
        match self {
            ConfigError::MtuOutOfRange(e) => e.to_cni_error(),
            ConfigError::LinkName(e) => e.to_cni_error(),
            ConfigError::Decode(_)
            | ConfigError::UnknownMode(_)
            | ConfigError::ChainedMaster
            | ConfigError::NoAddressSource => {
                CniError::new(ErrorCode::InvalidNetworkConfig, self.to_string())
            }
        }
    }
}

#[derive(Deserialize)]
struct Keys {
    #[serde(default)]
    master: Option<String>,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    mtu: Option<i64>,
    #[serde(rename = "linkInContainer", default)]
    link_in_container: Option<bool>,
}

/// The configuration as ADD and CHECK use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpvlanConf {
    /// As configured; `None` to be found (see the module docs).
    pub master: Option<String>,
    pub mode: IpVlanMode,
    /// As configured; 0 inherits the parent's.
    pub mtu: i64,
    pub link_in_container: bool,
    /// `None`: the prevResult's IPs.
    pub ipam_type: Option<String>,
    pub dns: Dns,
}

impl IpvlanConf {
    pub fn from_conf(conf: &PluginConf) -> Result<IpvlanConf, ConfigError> {
        let keys: Keys = libcni::plugin_conf::decode_with_path(&fold_keys(conf.raw(), &SHAPE))
            .map_err(ConfigError::Decode)?;
        let master = keys.master.filter(|m| !m.is_empty());
        if let Some(master) = &master {
            libcni::link_name::check_key("master", master)?;
        }
        Ok(IpvlanConf {
            master,
            mode: parse_mode(keys.mode.as_deref().unwrap_or_default())?,
            mtu: keys.mtu.unwrap_or(0),
            link_in_container: keys.link_in_container.unwrap_or(false),
            ipam_type: sublink_conf::ipam_type(conf).map(str::to_string),
            dns: conf.dns.clone(),
        })
    }

    /// The MTU to ask for, checked against the parent's: `None` inherits.
    pub fn check_mtu(&self, master_mtu: u32) -> Result<Option<u32>, ConfigError> {
        Ok(sublink_conf::check_mtu(self.mtu, master_mtu)?)
    }
}

/// `""` is `l2`, as in the reference.
pub fn parse_mode(text: &str) -> Result<IpVlanMode, ConfigError> {
    match text {
        "" | "l2" => Ok(IpVlanMode::L2),
        "l3" => Ok(IpVlanMode::L3),
        "l3s" => Ok(IpVlanMode::L3S),
        other => Err(ConfigError::UnknownMode(other.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(value: serde_json::Value) -> Result<IpvlanConf, ConfigError> {
        let conf = PluginConf::from_slice(&serde_json::to_vec(&value).unwrap()).unwrap();
        IpvlanConf::from_conf(&conf)
    }

    fn base() -> serde_json::Value {
        json!({"cniVersion": "1.0.0", "name": "net", "type": "ipvlan"})
    }

    #[test]
    fn keys_and_defaults() {
        let parsed = parse(base()).unwrap();
        assert_eq!(parsed.master, None);
        assert_eq!(parsed.mode, IpVlanMode::L2);
        assert_eq!(parsed.check_mtu(1500).unwrap(), None);
        assert!(!parsed.link_in_container);
        assert_eq!(parsed.ipam_type, None);
        let mut value = base();
        value["Master"] = json!("eth0");
        value["mode"] = json!("l3s");
        value["MTU"] = json!(1400);
        value["linkInContainer"] = json!(true);
        value["ipam"] = json!({"type": "static"});
        let parsed = parse(value).unwrap();
        assert_eq!(parsed.master.as_deref(), Some("eth0"));
        assert_eq!(parsed.mode, IpVlanMode::L3S);
        assert_eq!(parsed.check_mtu(1500).unwrap(), Some(1400));
        assert!(parsed.link_in_container);
        assert_eq!(parsed.ipam_type.as_deref(), Some("static"));
        assert_eq!(parse_mode("l3").unwrap(), IpVlanMode::L3);
    }

    #[test]
    fn refusals() {
        let mut value = base();
        value["mode"] = json!("bridge");
        let error = parse(value).unwrap_err();
        assert!(error
            .to_string()
            .starts_with("unknown ipvlan mode: \"bridge\""));
        assert_eq!(error.to_cni_error().code, ErrorCode::InvalidNetworkConfig);
        let mut value = base();
        value["mtu"] = json!(-1);
        assert!(parse(value).unwrap().check_mtu(1500).is_err());
        let mut value = base();
        value["linkInContainer"] = json!(1);
        assert!(matches!(parse(value), Err(ConfigError::Decode(_))));
    }
}
