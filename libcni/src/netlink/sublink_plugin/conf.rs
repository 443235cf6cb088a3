//! The configuration keys that the plugins giving a container one link of
//! their kind (macvlan, ipvlan, vlan, tap) read alike, with the checks and
//! errors that go with them. Each plugin still decodes its own keys (its
//! `Keys` and key shape), and calls these for what the keys mean.

use serde::Deserialize;

use crate::args::CniArgs;
use crate::error::{CniError, ErrorCode, ToCniError};
use crate::mac_source::{pick_mac, InvalidMac};
use crate::plugin_conf::PluginConf;
use crate::version::{ResultFamily, SpecVersion};

/// `CNI_ARGS` keys of a plugin that takes the container's MAC from there.
pub const MAC_CNI_ARGS: [&str; 1] = ["MAC"];

/// `runtimeConfig` of a plugin with the `mac` capability.
#[derive(Debug, Default, Deserialize)]
pub struct RuntimeMac {
    #[serde(default)]
    pub mac: Option<String>,
}

/// The container interface's MAC by the reference's precedence
/// ([`pick_mac`]): `runtimeConfig.mac`, then `MAC` in `CNI_ARGS`, then the
/// `mac` key; `None` lets the kernel pick.
pub fn container_mac(
    runtime_config: Option<RuntimeMac>,
    cni_args: &CniArgs,
    mac_key: Option<&str>,
) -> Result<Option<[u8; 6]>, InvalidMac> {
    let runtime_mac = runtime_config.and_then(|r| r.mac);
    pick_mac(runtime_mac.as_deref(), cni_args.get("MAC"), mac_key)
}

/// `ipam.type`; `None` without `ipam` or with an empty `type` (layer 2, or
/// addresses from elsewhere).
pub fn ipam_type(conf: &PluginConf) -> Option<&str> {
    conf.ipam
        .as_ref()
        .map(|ipam| ipam.ipam_type.as_str())
        .filter(|t| !t.is_empty())
}

/// `mtu` over the parent's (or negative): the kernel would refuse it less
/// clearly.
#[derive(Debug, thiserror::Error)]
#[error("invalid MTU {mtu}, must be [0, master MTU({master_mtu})]")]
pub struct MtuOutOfRange {
    pub mtu: i64,
    pub master_mtu: u32,
}

impl ToCniError for MtuOutOfRange {
    fn to_cni_error(&self) -> CniError {
        CniError::new(ErrorCode::InvalidNetworkConfig, self.to_string())
    }
}

/// The MTU to ask for, `mtu` as configured checked against the parent's
/// once the parent is found: `None` (0) inherits the parent's.
pub fn check_mtu(mtu: i64, master_mtu: u32) -> Result<Option<u32>, MtuOutOfRange> {
    match u32::try_from(mtu) {
        Ok(0) => Ok(None),
        Ok(checked) if checked <= master_mtu => Ok(Some(checked)),
        _ => Err(MtuOutOfRange { mtu, master_mtu }),
    }
}

/// A layer 2 result (no `ipam` type) in a version whose results cannot go
/// without addresses.
#[derive(Debug, thiserror::Error)]
#[error("cannot convert: no valid IP addresses")]
pub struct Layer2ResultError {
    pub version: SpecVersion,
}

impl ToCniError for Layer2ResultError {
    fn to_cni_error(&self) -> CniError {
        CniError::new(ErrorCode::IncompatibleVersion, self.to_string()).with_details(format!(
            "a result without IP addresses (no \"ipam\" type) has no CNI {} form",
            self.version
        ))
    }
}

/// ADD refuses a layer 2 configuration (`layer3` false) in 0.1.0 and
/// 0.2.0 before making anything, rather than fail converting its result.
pub fn check_result_expressible(
    version: SpecVersion,
    layer3: bool,
) -> Result<(), Layer2ResultError> {
    if !layer3 && version.family() == ResultFamily::V02 {
        return Err(Layer2ResultError { version });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conf(value: serde_json::Value) -> PluginConf {
        PluginConf::from_slice(&serde_json::to_vec(&value).unwrap()).unwrap()
    }

    #[test]
    fn mtu_is_zero_or_up_to_the_parents() {
        assert_eq!(check_mtu(0, 1500).unwrap(), None);
        assert_eq!(check_mtu(1500, 1500).unwrap(), Some(1500));
        for mtu in [1501, -1, i64::from(u32::MAX) + 1] {
            let error = check_mtu(mtu, 1500).unwrap_err();
            assert_eq!(
                error.to_string(),
                format!("invalid MTU {mtu}, must be [0, master MTU(1500)]")
            );
            assert_eq!(error.to_cni_error().code, ErrorCode::InvalidNetworkConfig);
        }
    }

    #[test]
    fn layer2_results_need_a_1x_version() {
        let old: SpecVersion = "0.2.0".parse().unwrap();
        let new: SpecVersion = "0.3.1".parse().unwrap();
        check_result_expressible(old, true).unwrap();
        check_result_expressible(new, false).unwrap();
        let error = check_result_expressible(old, false)
            .unwrap_err()
            .to_cni_error();
        assert_eq!(error.code, ErrorCode::IncompatibleVersion);
        assert_eq!(error.msg, "cannot convert: no valid IP addresses");
        assert_eq!(
            error.details,
            "a result without IP addresses (no \"ipam\" type) has no CNI 0.2.0 form"
        );
    }

    #[test]
    fn ipam_type_is_none_when_absent_or_empty() {
        let base = json!({"cniVersion": "1.0.0", "name": "net", "type": "macvlan"});
        assert_eq!(ipam_type(&conf(base.clone())), None);
        let mut value = base.clone();
        value["ipam"] = json!({"type": ""});
        assert_eq!(ipam_type(&conf(value)), None);
        let mut value = base;
        value["ipam"] = json!({"type": "host-local"});
        assert_eq!(ipam_type(&conf(value)), Some("host-local"));
    }

    #[test]
    fn mac_precedence_is_runtime_config_then_cni_args_then_key() {
        let args = CniArgs::parse("MAC=02:00:00:00:00:02", &MAC_CNI_ARGS).unwrap();
        let none = CniArgs::parse("", &MAC_CNI_ARGS).unwrap();
        let runtime = || {
            Some(RuntimeMac {
                mac: Some("02:00:00:00:00:03".into()),
            })
        };
        let key = Some("02:00:00:00:00:01");
        assert_eq!(container_mac(None, &none, None).unwrap(), None);
        assert_eq!(container_mac(None, &none, key).unwrap().unwrap()[5], 1);
        assert_eq!(container_mac(None, &args, key).unwrap().unwrap()[5], 2);
        assert_eq!(container_mac(runtime(), &args, key).unwrap().unwrap()[5], 3);
    }
}
