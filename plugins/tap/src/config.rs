//! The tap plugin's configuration: every key of the reference plugin,
//! decoded and checked before the plugin touches the system.
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `multiQueue` | false | a multi-queue tap (`IFF_MULTI_QUEUE`) |
//! | `mtu` | 0: the kernel's | the tap's MTU, 68 to 65521 |
//! | `mac` | the kernel's pick | the tap's MAC |
//! | `owner` | none | the user allowed to attach to the tap (`TUNSETOWNER`) |
//! | `group` | none | the group allowed to attach (`TUNSETGROUP`) |
//! | `selinuxContext` | none | the SELinux context the tap is created in |
//! | `bridge` | none | a bridge in the container the tap becomes a port of |
//! | `args` | | accepted, not read (as in the reference) |
//! | `ipam` | none: layer 2 only | the IPAM plugin and its keys |
//! | `dns` | none | DNS settings of the result |
//! | `runtimeConfig.mac` | | the `mac` capability |
//!
//! The MAC's precedence is the reference's ([`libcni::mac_source`]):
//! `runtimeConfig.mac`, then `MAC` in `CNI_ARGS`, then `mac`. Keys match
//! Go's way (exact spelling first, else any letter case). Without `owner`
//! and `group` the tap has no owner: only processes with `CAP_NET_ADMIN`
//! in the namespace may attach to it. With both, a process without that
//! capability must match both (the tun driver's rule).

use libcni::args::{ArgsError, CniArgs};
use libcni::error::{CniError, ErrorCode, ToCniError};
use libcni::go_compat::{fold_keys, Shape};
use libcni::mac_source::InvalidMac;
use libcni::netlink::sublink_plugin::conf::{
    self as sublink_conf, Layer2ResultError, RuntimeMac, MAC_CNI_ARGS,
};
use libcni::plugin_conf::{int_in_range, PluginConf};
use libcni::types::Dns;
use libcni::version::SpecVersion;
use serde::Deserialize;

const SHAPE: Shape = Shape::Object(&[
    ("multiQueue", Shape::Leaf),
    ("mtu", Shape::Leaf),
    ("mac", Shape::Leaf),
    ("owner", Shape::Leaf),
    ("group", Shape::Leaf),
    ("selinuxContext", Shape::Leaf),
    ("bridge", Shape::Leaf),
    ("runtimeConfig", Shape::Object(&[("mac", Shape::Leaf)])),
]);

/// `CNI_ARGS` keys the plugin reads.
pub const CNI_ARGS_KEYS: [&str; 1] = MAC_CNI_ARGS;

/// The MTUs the kernel takes for a tap (measured with `ip link set`):
/// Ethernet's minimum, and 65535 less the 14-byte Ethernet header.
pub const MIN_MTU: i64 = 68;
pub const MAX_MTU: i64 = 65521;
/// The highest `owner` and `group`: the kernel takes (uid_t)-1,
/// 4294967295, for no user and refuses it in TUNSETOWNER/TUNSETGROUP.
pub const MAX_ID: u64 = 4_294_967_294;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("failed to load netconf: {0}")]
    Decode(#[source] serde_json::Error),
    #[error(transparent)]
    Mac(#[from] InvalidMac),
    #[error(transparent)]
    Args(#[from] ArgsError),
    #[error("invalid mtu {0}: must be 0 (the kernel's default) or from {MIN_MTU} to {MAX_MTU}")]
    InvalidMtu(i64),
    #[error("invalid {key} {shown}: must be an integer from 0 to {MAX_ID} (a user or group id)")]
    InvalidId { key: &'static str, shown: String },
    #[error(transparent)]
    ResultNotExpressible(#[from] Layer2ResultError),
    #[error(transparent)]
    LinkName(#[from] libcni::link_name::InvalidLinkName),
}

impl ToCniError for ConfigError {
    fn to_cni_error(&self) -> CniError {
        match self {
            ConfigError::Args(e) => e.to_cni_error(),
            ConfigError::Mac(e) => e.to_cni_error(),
            ConfigError::ResultNotExpressible(e) => e.to_cni_error(),
            ConfigError::LinkName(e) => e.to_cni_error(),
            ConfigError::Decode(_) | ConfigError::InvalidMtu(_) | ConfigError::InvalidId { .. } => {
                CniError::new(ErrorCode::InvalidNetworkConfig, self.to_string())
            }
        }
    }
}

#[derive(Deserialize)]
struct Keys {
    #[serde(rename = "multiQueue", default)]
    multi_queue: Option<bool>,
    #[serde(default)]
    mtu: Option<i64>,
    #[serde(default)]
    mac: Option<String>,
    /// Any JSON, checked by [`id`] so that every bad value gets a
    /// message naming the key and the range.
    #[serde(default)]
    owner: Option<serde_json::Value>,
    #[serde(default)]
    group: Option<serde_json::Value>,
    #[serde(rename = "selinuxContext", default)]
    selinux_context: Option<String>,
    #[serde(default)]
    bridge: Option<String>,
    #[serde(rename = "runtimeConfig", default)]
    runtime_config: Option<RuntimeMac>,
}

/// The configuration as ADD and CHECK use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TapConf {
    pub version: SpecVersion,
    pub multi_queue: bool,
    /// `None`: the kernel's default (1500).
    pub mtu: Option<u32>,
    pub mac: Option<[u8; 6]>,
    pub owner: Option<u32>,
    pub group: Option<u32>,
    /// `None` when absent or empty.
    pub selinux_context: Option<String>,
    /// `None` when absent or empty.
    pub bridge: Option<String>,
    /// `None`: layer 2 only.
    pub ipam_type: Option<String>,
    pub dns: Dns,
}

impl TapConf {
    /// Decodes and checks the configuration and `CNI_ARGS`.
    pub fn from_conf(conf: &PluginConf, cni_args: &str) -> Result<TapConf, ConfigError> {
        let keys: Keys =
            serde_json::from_value(fold_keys(conf.raw(), &SHAPE)).map_err(ConfigError::Decode)?;
        let args = CniArgs::parse(cni_args, &CNI_ARGS_KEYS)?;
        let mac = sublink_conf::container_mac(keys.runtime_config, &args, keys.mac.as_deref())?;
        let bridge = keys.bridge.filter(|b| !b.is_empty());
        if let Some(bridge) = &bridge {
            libcni::link_name::check_key("bridge", bridge)?;
        }
        let mtu = match keys.mtu.unwrap_or(0) {
            0 => None,
            mtu if (MIN_MTU..=MAX_MTU).contains(&mtu) => u32::try_from(mtu).ok(),
            mtu => return Err(ConfigError::InvalidMtu(mtu)),
        };
        Ok(TapConf {
            version: conf.cni_version,
            multi_queue: keys.multi_queue.unwrap_or(false),
            mtu,
            mac,
            owner: id("owner", keys.owner.as_ref())?,
            group: id("group", keys.group.as_ref())?,
            selinux_context: keys.selinux_context.filter(|c| !c.is_empty()),
            bridge,
            ipam_type: sublink_conf::ipam_type(conf).map(str::to_string),
            dns: conf.dns.clone(),
        })
    }

    /// A layer 2 result has no addresses, which 0.1.0 and 0.2.0 results
    /// cannot go without: ADD refuses before making anything (the
    /// reference makes the tap first and fails converting its result).
    pub fn check_result_expressible(&self) -> Result<(), ConfigError> {
        Ok(sublink_conf::check_result_expressible(
            self.version,
            self.ipam_type.is_some(),
        )?)
    }
}

/// `owner` or `group`: absent or `null` is none; otherwise 0 to [`MAX_ID`].
fn id(key: &'static str, value: Option<&serde_json::Value>) -> Result<Option<u32>, ConfigError> {
    let id =
        int_in_range(value, 0..=MAX_ID).map_err(|e| ConfigError::InvalidId { key, shown: e.0 })?;
    // Within MAX_ID, so it fits.
    Ok(id.and_then(|id| u32::try_from(id).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(value: serde_json::Value, cni_args: &str) -> Result<TapConf, ConfigError> {
        let conf = PluginConf::from_slice(&serde_json::to_vec(&value).unwrap()).unwrap();
        TapConf::from_conf(&conf, cni_args)
    }

    fn base() -> serde_json::Value {
        json!({"cniVersion": "1.0.0", "name": "net", "type": "tap"})
    }

    #[test]
    fn defaults_are_an_ownerless_layer_2_tap() {
        let parsed = parse(base(), "").unwrap();
        assert!(!parsed.multi_queue);
        assert_eq!(parsed.mtu, None);
        assert_eq!(parsed.mac, None);
        assert_eq!((parsed.owner, parsed.group), (None, None));
        assert_eq!(parsed.selinux_context, None);
        assert_eq!(parsed.bridge, None);
        assert_eq!(parsed.ipam_type, None);
    }

    #[test]
    fn every_key_in_any_case() {
        let mut value = base();
        value["MultiQueue"] = json!(true);
        value["MTU"] = json!(9000);
        value["mac"] = json!("02:00:00:00:00:01");
        value["owner"] = json!(1000);
        value["Group"] = json!(0);
        value["selinuxContext"] = json!("system_u:system_r:container_t:s0");
        value["bridge"] = json!("br0");
        value["args"] = json!({"anything": [1, 2]});
        value["ipam"] = json!({"type": "host-local"});
        let parsed = parse(value, "").unwrap();
        assert!(parsed.multi_queue);
        assert_eq!(parsed.mtu, Some(9000));
        assert_eq!(parsed.mac, Some([2, 0, 0, 0, 0, 1]));
        assert_eq!((parsed.owner, parsed.group), (Some(1000), Some(0)));
        assert_eq!(
            parsed.selinux_context.as_deref(),
            Some("system_u:system_r:container_t:s0")
        );
        assert_eq!(parsed.bridge.as_deref(), Some("br0"));
        assert_eq!(parsed.ipam_type.as_deref(), Some("host-local"));
    }

    #[test]
    fn mac_precedence_is_runtime_config_then_cni_args_then_mac() {
        let mut value = base();
        value["mac"] = json!("02:00:00:00:00:01");
        assert_eq!(parse(value.clone(), "").unwrap().mac.unwrap()[5], 1);
        let args = "IgnoreUnknown=1;MAC=02:00:00:00:00:02";
        assert_eq!(parse(value.clone(), args).unwrap().mac.unwrap()[5], 2);
        value["RuntimeConfig"] = json!({"mac": "02:00:00:00:00:03"});
        assert_eq!(parse(value, args).unwrap().mac.unwrap()[5], 3);
    }

    /// 4294967295 is (uid_t)-1, "no user", which TUNSETOWNER refuses
    /// after the tap exists: refused here, before any kernel call.
    #[test]
    fn owner_and_group_are_ids_up_to_4294967294() {
        for key in ["owner", "group"] {
            let mut value = base();
            value[key] = json!(4_294_967_294u64);
            let parsed = parse(value, "").unwrap();
            let id = if key == "owner" {
                parsed.owner
            } else {
                parsed.group
            };
            assert_eq!(id, Some(4_294_967_294));
            for (bad, shown) in [
                (json!(4_294_967_295u64), "4294967295"),
                (json!(-5), "-5"),
                (json!(1u64 << 33), "8589934592"),
                (json!("1000"), "(a string)"),
            ] {
                let mut value = base();
                value[key] = bad;
                let error = parse(value, "").unwrap_err();
                assert_eq!(
                    error.to_string(),
                    format!("invalid {key} {shown}: must be an integer from 0 to 4294967294 (a user or group id)")
                );
                assert_eq!(error.to_cni_error().code, ErrorCode::InvalidNetworkConfig);
            }
        }
    }

    #[test]
    fn refusals_with_their_codes() {
        let code = |value: serde_json::Value, args: &str| {
            parse(value, args).unwrap_err().to_cni_error().code
        };
        let with = |key: &str, v: serde_json::Value| {
            let mut value = base();
            value[key] = v;
            value
        };
        for (mtu, message) in [
            (
                -1,
                "invalid mtu -1: must be 0 (the kernel's default) or from 68 to 65521",
            ),
            (
                67,
                "invalid mtu 67: must be 0 (the kernel's default) or from 68 to 65521",
            ),
            (
                65522,
                "invalid mtu 65522: must be 0 (the kernel's default) or from 68 to 65521",
            ),
            (
                1i64 << 40,
                "invalid mtu 1099511627776: must be 0 (the kernel's default) or from 68 to 65521",
            ),
        ] {
            let error = parse(with("mtu", json!(mtu)), "").unwrap_err();
            assert_eq!(error.to_string(), message);
            assert_eq!(error.to_cni_error().code, ErrorCode::InvalidNetworkConfig);
        }
        for mtu in [68, 65521] {
            assert_eq!(parse(with("mtu", json!(mtu)), "").unwrap().mtu, Some(mtu));
        }
        assert_eq!(
            code(with("mtu", json!("9000")), ""),
            ErrorCode::InvalidNetworkConfig
        );
        assert_eq!(
            code(with("multiQueue", json!("yes")), ""),
            ErrorCode::InvalidNetworkConfig
        );
        assert_eq!(
            code(with("mac", json!("01:00:5e:00:00:01")), ""),
            ErrorCode::InvalidNetworkConfig
        );
        assert_eq!(code(base(), "MAC=zz"), ErrorCode::InvalidEnvironment);
        assert_eq!(code(base(), "FOO=1"), ErrorCode::InvalidEnvironment);
        let mut old = base();
        old["cniVersion"] = json!("0.2.0");
        let parsed = parse(old, "").unwrap();
        assert_eq!(
            parsed
                .check_result_expressible()
                .unwrap_err()
                .to_cni_error()
                .code,
            ErrorCode::IncompatibleVersion
        );
    }
}
