//! The vrf plugin's configuration: the reference's two keys.
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `vrfname` | required | the VRF device the interface is put in |
//! | `table` | 0: the lowest id no VRF of the namespace uses | the VRF's routing table |
//!
//! Keys match Go's way (exact spelling first, else any letter case).

use libcni::error::{CniError, ErrorCode, ToCniError};
use libcni::go_compat::{fold_keys, Shape};
use libcni::plugin_conf::{int_in_range, PluginConf};
use serde::Deserialize;

const SHAPE: Shape = Shape::Object(&[("vrfname", Shape::Leaf), ("table", Shape::Leaf)]);

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("failed to load netconf: {0}")]
    Decode(#[source] serde_json::Error),
    #[error("configuration is expected to have a valid vrf name")]
    VrfNameMissing,
    #[error(transparent)]
    VrfNameInvalid(#[from] libcni::link_name::InvalidLinkName),
    #[error("invalid table {0}: must be an integer from 0 (the lowest free id) to 4294967295")]
    InvalidTable(String),
}

impl ToCniError for ConfigError {
    fn to_cni_error(&self) -> CniError {
        match self {
            ConfigError::Decode(_)
            | ConfigError::VrfNameMissing
            | ConfigError::VrfNameInvalid(_)
            | ConfigError::InvalidTable(_) => {
                CniError::new(ErrorCode::InvalidNetworkConfig, self.to_string())
            }
        }
    }
}

#[derive(Deserialize)]
struct Keys {
    #[serde(default)]
    vrfname: Option<String>,
    /// Any JSON, checked with [`int_in_range`] so that every bad value
    /// gets a message naming the key and the range.
    #[serde(default)]
    table: Option<serde_json::Value>,
}

/// The configuration as every verb uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VrfConf {
    pub vrf_name: String,
    /// `None`: pick the lowest id no VRF uses (when creating the VRF) or
    /// accept the existing VRF's.
    pub table: Option<u32>,
}

impl VrfConf {
    pub fn from_conf(conf: &PluginConf) -> Result<VrfConf, ConfigError> {
        let keys: Keys =
            serde_json::from_value(fold_keys(conf.raw(), &SHAPE)).map_err(ConfigError::Decode)?;
        let vrf_name = keys
            .vrfname
            .filter(|n| !n.is_empty())
            .ok_or(ConfigError::VrfNameMissing)?;
        libcni::link_name::check_key("vrfname", &vrf_name)?;
        let table = int_in_range(keys.table.as_ref(), 0..=u64::from(u32::MAX))
            .map_err(|e| ConfigError::InvalidTable(e.0))?;
        Ok(VrfConf {
            vrf_name,
            // Within u32 by the range above.
            table: table
                .and_then(|t| u32::try_from(t).ok())
                .filter(|&t| t != 0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(value: serde_json::Value) -> Result<VrfConf, ConfigError> {
        let conf = PluginConf::from_slice(&serde_json::to_vec(&value).unwrap()).unwrap();
        VrfConf::from_conf(&conf)
    }

    #[test]
    fn keys_in_any_case() {
        let parsed =
            parse(json!({"cniVersion": "1.0.0", "name": "n", "type": "vrf", "VRFName": "blue", "Table": 42}))
                .unwrap();
        assert_eq!(parsed.vrf_name, "blue");
        assert_eq!(parsed.table, Some(42));
        let parsed =
            parse(json!({"cniVersion": "1.0.0", "name": "n", "type": "vrf", "vrfname": "red", "table": 0}))
                .unwrap();
        assert_eq!(parsed.table, None);
    }

    #[test]
    fn refusals() {
        let base = json!({"cniVersion": "1.0.0", "name": "n", "type": "vrf"});
        let e = parse(base.clone()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "configuration is expected to have a valid vrf name"
        );
        assert_eq!(e.to_cni_error().code, ErrorCode::InvalidNetworkConfig);
        let mut bad = base.clone();
        bad["vrfname"] = json!("");
        assert!(matches!(
            parse(bad).unwrap_err(),
            ConfigError::VrfNameMissing
        ));
        for name in ["a/b", "sixteen-bytes-xx", "a b"] {
            let mut bad = base.clone();
            bad["vrfname"] = json!(name);
            assert!(
                matches!(parse(bad).unwrap_err(), ConfigError::VrfNameInvalid(_)),
                "{name}"
            );
        }
        for (table, shown) in [
            (json!(-1), "-1"),
            (json!("5"), "(a string)"),
            (json!(1u64 << 32), "4294967296"),
            (json!(1.5), "1.5"),
        ] {
            let mut bad = base.clone();
            bad["vrfname"] = json!("blue");
            bad["table"] = table;
            let e = parse(bad).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("invalid table {shown}: must be an integer from 0 (the lowest free id) to 4294967295")
            );
            assert_eq!(e.to_cni_error().code, ErrorCode::InvalidNetworkConfig);
        }
        let mut top = base.clone();
        top["vrfname"] = json!("blue");
        top["table"] = json!(4_294_967_295u64);
        assert_eq!(parse(top).unwrap().table, Some(u32::MAX));
    }
}
