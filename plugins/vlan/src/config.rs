//! The vlan plugin's configuration: every key of the reference plugin,
//! decoded and checked before the plugin touches the system.
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `master` | required | the parent link |
//! | `vlanId` | 0 | the 802.1Q VLAN id, 0 to 4094 |
//! | `mtu` | 0: the parent's | at most the parent's MTU |
//! | `linkInContainer` | false | the parent is in the container's namespace |
//! | `ipam` | required | the IPAM plugin and its keys |
//! | `dns` | none | DNS settings of the result |
//!
//! Keys match Go's way (exact spelling first, else any letter case).
//! `CNI_ARGS` are not read, as in the reference. The MTU's range is the
//! parent's: [`VlanConf::check_mtu`] is called once the parent is found.

use libcni::error::{CniError, ErrorCode, ToCniError};
use libcni::go_compat::{fold_keys, Shape};
use libcni::netlink::sublink_plugin::conf::{self as sublink_conf, MtuOutOfRange};
use libcni::plugin_conf::PluginConf;
use libcni::types::Dns;
use serde::Deserialize;

/// 4095 is reserved by 802.1Q.
pub const MAX_VLAN_ID: i64 = 4094;

const SHAPE: Shape = Shape::Object(&[
    ("master", Shape::Leaf),
    ("vlanId", Shape::Leaf),
    ("mtu", Shape::Leaf),
    ("linkInContainer", Shape::Leaf),
]);

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("failed to load netconf: {0}")]
    Decode(#[source] serde_json::Error),
    #[error(
        "\"master\" field is required. It specifies the host interface name to create the VLAN for"
    )]
    MasterMissing,
    #[error("invalid VLAN ID {0} (must be between 0 and {MAX_VLAN_ID} inclusive)")]
    InvalidVlanId(i64),
    #[error(transparent)]
    MtuOutOfRange(#[from] MtuOutOfRange),
    #[error("\"ipam\" with a \"type\" is required: a VLAN link gets its addresses from IPAM")]
    IpamMissing,
    #[error(transparent)]
    LinkName(#[from] libcni::link_name::InvalidLinkName),
}

impl ToCniError for ConfigError {
    fn to_cni_error(&self) -> CniError {
        match self {
            ConfigError::MtuOutOfRange(e) => e.to_cni_error(),
            ConfigError::LinkName(e) => e.to_cni_error(),
            ConfigError::Decode(_)
            | ConfigError::MasterMissing
            | ConfigError::InvalidVlanId(_)
            | ConfigError::IpamMissing => {
                CniError::new(ErrorCode::InvalidNetworkConfig, self.to_string())
            }
        }
    }
}

#[derive(Deserialize)]
struct Keys {
    #[serde(default)]
    master: Option<String>,
    #[serde(rename = "vlanId", default)]
    vlan_id: Option<i64>,
    #[serde(default)]
    mtu: Option<i64>,
    #[serde(rename = "linkInContainer", default)]
    link_in_container: Option<bool>,
}

/// The configuration as ADD and CHECK use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VlanConf {
    pub master: String,
    pub vlan_id: u16,
    /// As configured; 0 inherits the parent's.
    pub mtu: i64,
    pub link_in_container: bool,
    pub ipam_type: String,
    pub dns: Dns,
}

impl VlanConf {
    pub fn from_conf(conf: &PluginConf) -> Result<VlanConf, ConfigError> {
        let keys: Keys = libcni::plugin_conf::decode_with_path(&fold_keys(conf.raw(), &SHAPE))
            .map_err(ConfigError::Decode)?;
        let master = keys
            .master
            .filter(|m| !m.is_empty())
            .ok_or(ConfigError::MasterMissing)?;
        libcni::link_name::check_key("master", &master)?;
        let id = keys.vlan_id.unwrap_or(0);
        let vlan_id = u16::try_from(id)
            .ok()
            .filter(|&v| i64::from(v) <= MAX_VLAN_ID)
            .ok_or(ConfigError::InvalidVlanId(id))?;
        let ipam_type = sublink_conf::ipam_type(conf)
            .map(str::to_string)
            .ok_or(ConfigError::IpamMissing)?;
        Ok(VlanConf {
            master,
            vlan_id,
            mtu: keys.mtu.unwrap_or(0),
            link_in_container: keys.link_in_container.unwrap_or(false),
            ipam_type,
            dns: conf.dns.clone(),
        })
    }

    /// The MTU to ask for, checked against the parent's: `None` inherits.
    pub fn check_mtu(&self, master_mtu: u32) -> Result<Option<u32>, ConfigError> {
        Ok(sublink_conf::check_mtu(self.mtu, master_mtu)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(value: serde_json::Value) -> Result<VlanConf, ConfigError> {
        let conf = PluginConf::from_slice(&serde_json::to_vec(&value).unwrap()).unwrap();
        VlanConf::from_conf(&conf)
    }

    fn base() -> serde_json::Value {
        json!({"cniVersion": "1.0.0", "name": "net", "type": "vlan", "master": "eth0",
               "ipam": {"type": "host-local"}})
    }

    #[test]
    fn every_key() {
        let mut value = base();
        value["VlanID"] = json!(1234);
        value["mtu"] = json!(1400);
        value["linkInContainer"] = json!(true);
        let parsed = parse(value).unwrap();
        assert_eq!(parsed.master, "eth0");
        assert_eq!(parsed.vlan_id, 1234);
        assert_eq!(parsed.check_mtu(1500).unwrap(), Some(1400));
        assert!(parsed.link_in_container);
        assert_eq!(parsed.ipam_type, "host-local");
        let parsed = parse(base()).unwrap();
        assert_eq!(parsed.vlan_id, 0);
        assert_eq!(parsed.check_mtu(1500).unwrap(), None);
    }

    #[test]
    fn refusals() {
        let without = |key: &str| {
            let mut value = base();
            value.as_object_mut().unwrap().remove(key);
            value
        };
        assert!(matches!(
            parse(without("master")),
            Err(ConfigError::MasterMissing)
        ));
        assert!(matches!(
            parse(without("ipam")),
            Err(ConfigError::IpamMissing)
        ));
        let mut value = base();
        value["ipam"] = json!({});
        assert!(matches!(parse(value), Err(ConfigError::IpamMissing)));
        for id in [-1, 4095, 70000] {
            let mut value = base();
            value["vlanId"] = json!(id);
            let error = parse(value).unwrap_err();
            assert_eq!(
                error.to_string(),
                format!("invalid VLAN ID {id} (must be between 0 and 4094 inclusive)")
            );
            assert_eq!(error.to_cni_error().code, ErrorCode::InvalidNetworkConfig);
        }
        let mut value = base();
        value["vlanId"] = json!(4094);
        assert_eq!(parse(value).unwrap().vlan_id, 4094);
        let mut value = base();
        value["vlanId"] = json!("5");
        assert!(matches!(parse(value), Err(ConfigError::Decode(_))));
        let mut value = base();
        value["mtu"] = json!(1600);
        assert_eq!(
            parse(value)
                .unwrap()
                .check_mtu(1500)
                .unwrap_err()
                .to_string(),
            "invalid MTU 1600, must be [0, master MTU(1500)]"
        );
        let mut value = base();
        value["mtu"] = json!(-100);
        assert_eq!(
            parse(value)
                .unwrap()
                .check_mtu(1500)
                .unwrap_err()
                .to_string(),
            "invalid MTU -100, must be [0, master MTU(1500)]"
        );
    }
}
