//! The macvlan plugin's configuration: every key of the reference plugin,
//! decoded and checked before the plugin touches the system.
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `master` | the default route's link | the parent link |
//! | `mode` | `bridge` | `bridge`, `private`, `vepa`, `passthru` or `source` |
//! | `mtu` | 0: the parent's | at most the parent's MTU |
//! | `mac` | the kernel's pick | the container interface's MAC |
//! | `linkInContainer` | false | the parent is in the container's namespace |
//! | `bcqueuelen` | 0: the kernel's | broadcast queue length |
//! | `ipam` | none: layer 2 only | the IPAM plugin and its keys |
//! | `dns` | none | DNS settings of the result |
//! | `runtimeConfig.mac` | | the `mac` capability: wins over the rest |
//!
//! `MAC` in `CNI_ARGS` wins over `mac`, and `runtimeConfig.mac` over both,
//! as in the reference. Keys match Go's way (exact spelling first, else
//! any letter case). The parent's existence and the MTU's range need the
//! system: [`MacvlanConf::check_mtu`] is called once the parent is found.

use libcni::args::{ArgsError, CniArgs};
use libcni::error::{CniError, ErrorCode, ToCniError};
use libcni::go_compat::{fold_keys, Shape};
use libcni::mac_source::InvalidMac;
use libcni::netlink::sublink::MacVlanMode;
use libcni::netlink::sublink_plugin::conf::{
    self as sublink_conf, Layer2ResultError, MtuOutOfRange, RuntimeMac, MAC_CNI_ARGS,
};
use libcni::plugin_conf::{int_in_range, PluginConf};
use libcni::types::Dns;
use libcni::version::SpecVersion;
use serde::Deserialize;

/// The plugin's keys as Go's decoder folds them.
const SHAPE: Shape = Shape::Object(&[
    ("master", Shape::Leaf),
    ("mode", Shape::Leaf),
    ("mtu", Shape::Leaf),
    ("mac", Shape::Leaf),
    ("linkInContainer", Shape::Leaf),
    ("bcqueuelen", Shape::Leaf),
    ("runtimeConfig", Shape::Object(&[("mac", Shape::Leaf)])),
]);

/// `CNI_ARGS` keys the plugin reads.
pub const CNI_ARGS_KEYS: [&str; 1] = MAC_CNI_ARGS;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("failed to load netconf: {0}")]
    Decode(#[source] serde_json::Error),
    #[error("unknown macvlan mode: {0:?} (must be bridge, private, vepa, passthru or source)")]
    UnknownMode(String),
    #[error(transparent)]
    InvalidMac(#[from] InvalidMac),
    #[error(transparent)]
    Args(#[from] ArgsError),
    #[error(transparent)]
    MtuOutOfRange(#[from] MtuOutOfRange),
    #[error(transparent)]
    ResultNotExpressible(#[from] Layer2ResultError),
    #[error(transparent)]
    LinkName(#[from] libcni::link_name::InvalidLinkName),
    #[error("invalid bcqueuelen {0}: must be an integer from 0 (the kernel's) to 4294967295")]
    InvalidBcQueueLen(String),
}

impl ToCniError for ConfigError {
    fn to_cni_error(&self) -> CniError {
        match self {
            ConfigError::Args(e) => e.to_cni_error(),
            ConfigError::InvalidMac(e) => e.to_cni_error(),
            ConfigError::MtuOutOfRange(e) => e.to_cni_error(),
            ConfigError::ResultNotExpressible(e) => e.to_cni_error(),
            ConfigError::LinkName(e) => e.to_cni_error(),
            ConfigError::Decode(_)
            | ConfigError::UnknownMode(_)
            | ConfigError::InvalidBcQueueLen(_) => {
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
    #[serde(default)]
    mac: Option<String>,
    #[serde(rename = "linkInContainer", default)]
    link_in_container: Option<bool>,
    /// Any JSON, checked with [`int_in_range`] so that every bad value
    /// gets a message naming the key and the range.
    #[serde(default)]
    bcqueuelen: Option<serde_json::Value>,
    #[serde(rename = "runtimeConfig", default)]
    runtime_config: Option<RuntimeMac>,
}

/// The configuration as ADD and CHECK use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MacvlanConf {
    pub version: SpecVersion,
    /// `None`: the link of the default route.
    pub master: Option<String>,
    pub mode: MacVlanMode,
    /// As configured; 0 inherits the parent's.
    pub mtu: i64,
    pub mac: Option<[u8; 6]>,
    pub link_in_container: bool,
    pub bc_queue_len: Option<u32>,
    /// `None`: layer 2 only.
    pub ipam_type: Option<String>,
    pub dns: Dns,
}

impl MacvlanConf {
    /// Decodes and checks the configuration and `CNI_ARGS`.
    pub fn from_conf(conf: &PluginConf, cni_args: &str) -> Result<MacvlanConf, ConfigError> {
        let keys: Keys = libcni::plugin_conf::decode_with_path(&fold_keys(conf.raw(), &SHAPE))
            .map_err(ConfigError::Decode)?;
        let args = CniArgs::parse(cni_args, &CNI_ARGS_KEYS)?;
        let master = keys.master.filter(|m| !m.is_empty());
        if let Some(master) = &master {
            libcni::link_name::check_key("master", master)?;
        }
        let mode = parse_mode(keys.mode.as_deref().unwrap_or_default())?;
        let mac = sublink_conf::container_mac(keys.runtime_config, &args, keys.mac.as_deref())?;
        // Its range is the parent's: checked once the parent is found.
        let mtu = keys.mtu.unwrap_or(0);
        let ipam_type = sublink_conf::ipam_type(conf).map(str::to_string);
        let parsed = MacvlanConf {
            version: conf.cni_version,
            master,
            mode,
            mtu,
            mac,
            link_in_container: keys.link_in_container.unwrap_or(false),
            bc_queue_len: int_in_range(keys.bcqueuelen.as_ref(), 0..=u64::from(u32::MAX))
                .map_err(|e| ConfigError::InvalidBcQueueLen(e.0))?
                // Within u32 by the range above.
                .and_then(|len| u32::try_from(len).ok())
                .filter(|&len| len != 0),
            ipam_type,
            dns: conf.dns.clone(),
        };
        Ok(parsed)
    }

    pub fn is_layer3(&self) -> bool {
        self.ipam_type.is_some()
    }

    /// A layer 2 result has no addresses, which 0.1.0 and 0.2.0 results
    /// cannot go without: ADD refuses before making anything.
    pub fn check_result_expressible(&self) -> Result<(), ConfigError> {
        Ok(sublink_conf::check_result_expressible(
            self.version,
            self.is_layer3(),
        )?)
    }

    /// The MTU to ask for, checked against the parent's: `None` inherits.
    pub fn check_mtu(&self, master_mtu: u32) -> Result<Option<u32>, ConfigError> {
        Ok(sublink_conf::check_mtu(self.mtu, master_mtu)?)
    }
}

/// `""` is `bridge`, as in the reference; `source` is what the reference
/// lacks.
pub fn parse_mode(text: &str) -> Result<MacVlanMode, ConfigError> {
    match text {
        "" | "bridge" => Ok(MacVlanMode::Bridge),
        "private" => Ok(MacVlanMode::Private),
        "vepa" => Ok(MacVlanMode::Vepa),
        "passthru" => Ok(MacVlanMode::Passthrough),
        "source" => Ok(MacVlanMode::Source),
        other => Err(ConfigError::UnknownMode(other.to_string())),
    }
}

/// The configuration's word for `mode`, for messages.
pub fn mode_name(mode: MacVlanMode) -> &'static str {
    match mode {
        MacVlanMode::Private => "private",
        MacVlanMode::Vepa => "vepa",
        MacVlanMode::Passthrough => "passthru",
        MacVlanMode::Source => "source",
        _ => "bridge",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conf(value: serde_json::Value) -> PluginConf {
        PluginConf::from_slice(&serde_json::to_vec(&value).unwrap()).unwrap()
    }

    fn base() -> serde_json::Value {
        json!({"cniVersion": "1.0.0", "name": "net", "type": "macvlan"})
    }

    #[test]
    fn defaults() {
        let parsed = MacvlanConf::from_conf(&conf(base()), "").unwrap();
        assert_eq!(parsed.master, None);
        assert_eq!(parsed.mode, MacVlanMode::Bridge);
        assert_eq!(parsed.mtu, 0);
        assert_eq!(parsed.mac, None);
        assert!(!parsed.link_in_container);
        assert_eq!(parsed.bc_queue_len, None);
        assert!(!parsed.is_layer3());
        assert_eq!(parsed.check_mtu(1500).unwrap(), None);
    }

    #[test]
    fn every_key_and_go_key_matching() {
        let mut value = base();
        let extra = json!({
            "Master": "eth9", "MODE": "passthru", "mtu": 1400, "mac": "02:00:00:00:00:01",
            "LinkInContainer": true, "bcqueuelen": 42, "ipam": {"type": "host-local"},
        });
        value
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let parsed = MacvlanConf::from_conf(&conf(value), "").unwrap();
        assert_eq!(parsed.master.as_deref(), Some("eth9"));
        assert_eq!(parsed.mode, MacVlanMode::Passthrough);
        assert_eq!(parsed.check_mtu(1500).unwrap(), Some(1400));
        assert_eq!(parsed.mac, Some([2, 0, 0, 0, 0, 1]));
        assert!(parsed.link_in_container);
        assert_eq!(parsed.bc_queue_len, Some(42));
        assert_eq!(parsed.ipam_type.as_deref(), Some("host-local"));
    }

    #[test]
    fn mac_precedence_is_conf_then_cni_args_then_runtime_config() {
        let mut value = base();
        value["mac"] = json!("02:00:00:00:00:01");
        let from_conf = MacvlanConf::from_conf(&conf(value.clone()), "").unwrap();
        assert_eq!(from_conf.mac, Some([2, 0, 0, 0, 0, 1]));
        let args = "IgnoreUnknown=true;MAC=02:00:00:00:00:02";
        let from_args = MacvlanConf::from_conf(&conf(value.clone()), args).unwrap();
        assert_eq!(from_args.mac, Some([2, 0, 0, 0, 0, 2]));
        value["RuntimeConfig"] = json!({"mac": "02:00:00:00:00:03"});
        let from_runtime = MacvlanConf::from_conf(&conf(value), args).unwrap();
        assert_eq!(from_runtime.mac, Some([2, 0, 0, 0, 0, 3]));
    }

    #[test]
    fn bad_input_is_refused_with_its_code() {
        let code = |value: serde_json::Value, args: &str| {
            MacvlanConf::from_conf(&conf(value), args)
                .unwrap_err()
                .to_cni_error()
                .code
        };
        let with = |key: &str, v: serde_json::Value| {
            let mut value = base();
            value[key] = v;
            value
        };
        assert_eq!(
            code(with("mode", json!("bogus")), ""),
            ErrorCode::InvalidNetworkConfig
        );
        assert_eq!(
            code(with("mtu", json!("1500")), ""),
            ErrorCode::InvalidNetworkConfig
        );
        assert_eq!(
            code(with("mtu", json!(1.5)), ""),
            ErrorCode::InvalidNetworkConfig
        );
        for (len, shown) in [
            (json!(-1), "-1"),
            (json!(1u64 << 32), "4294967296"),
            (json!("5"), "(a string)"),
        ] {
            let error = MacvlanConf::from_conf(&conf(with("bcqueuelen", len)), "").unwrap_err();
            assert_eq!(
                error.to_string(),
                format!("invalid bcqueuelen {shown}: must be an integer from 0 (the kernel's) to 4294967295")
            );
            assert_eq!(error.to_cni_error().code, ErrorCode::InvalidNetworkConfig);
        }
        let top =
            MacvlanConf::from_conf(&conf(with("bcqueuelen", json!(4_294_967_295u64))), "").unwrap();
        assert_eq!(top.bc_queue_len, Some(u32::MAX));
        assert_eq!(
            code(with("linkInContainer", json!("yes")), ""),
            ErrorCode::InvalidNetworkConfig
        );
        assert_eq!(
            code(with("mac", json!("01:00:5e:00:00:01")), ""),
            ErrorCode::InvalidNetworkConfig
        );
        assert_eq!(code(base(), "MAC=zz"), ErrorCode::InvalidEnvironment);
        assert_eq!(code(base(), "FOO=1"), ErrorCode::InvalidEnvironment);
        let message = MacvlanConf::from_conf(&conf(with("mode", json!("bogus"))), "")
            .unwrap_err()
            .to_string();
        assert!(
            message.starts_with("unknown macvlan mode: \"bogus\""),
            "{message}"
        );
    }

    #[test]
    fn mtu_range_is_the_parents() {
        let mut value = base();
        value["mtu"] = json!(1600);
        let parsed = MacvlanConf::from_conf(&conf(value.clone()), "").unwrap();
        assert_eq!(
            parsed.check_mtu(1500).unwrap_err().to_string(),
            "invalid MTU 1600, must be [0, master MTU(1500)]"
        );
        value["mtu"] = json!(-100);
        let parsed = MacvlanConf::from_conf(&conf(value), "").unwrap();
        assert_eq!(
            parsed.check_mtu(1500).unwrap_err().to_string(),
            "invalid MTU -100, must be [0, master MTU(1500)]"
        );
    }

    #[test]
    fn layer2_has_no_old_result_form() {
        let mut value = base();
        value["cniVersion"] = json!("0.2.0");
        let parsed = MacvlanConf::from_conf(&conf(value.clone()), "").unwrap();
        let error = parsed.check_result_expressible().unwrap_err();
        assert_eq!(error.to_cni_error().code, ErrorCode::IncompatibleVersion);
        value["ipam"] = json!({"type": "host-local"});
        let parsed = MacvlanConf::from_conf(&conf(value), "").unwrap();
        parsed.check_result_expressible().unwrap();
    }
}
