//! The ptp plugin's configuration: every key of the reference plugin,
//! decoded and checked before the plugin touches the system.
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `ipMasq` | false | masquerade traffic from the container leaving its subnet |
//! | `ipMasqBackend` | iptables unless only nftables works | `iptables` or `nftables` |
//! | `mtu` | 0: the kernel's | MTU of both veth ends |
//! | `ipam` | required | the IPAM plugin and its keys |
//! | `dns` | IPAM's | replaces the IPAM plugin's DNS settings when any field is given |
//!
//! Keys match Go's way (exact spelling first, else any letter case); a
//! `null` is the key's default. `CNI_ARGS` is not read, as in the
//! reference. ADD, CHECK and STATUS read the whole configuration
//! ([`PtpConf::from_conf`]); DEL and GC only what says what to tear down
//! ([`TeardownConf::from_conf`]), so a configuration ADD refused can still
//! be deleted.

use libcni::error::{CniError, ErrorCode, ToCniError};
use libcni::go_compat::{self, fold_keys, Shape};
use libcni::ipmasq::MasqBackend;
use libcni::netlink::sublink_plugin::conf::ipam_type;
use libcni::plugin_conf::{decode_with_path, PluginConf};
use libcni::types::Dns;
use libcni::version::SpecVersion;
use serde::Deserialize;
use serde_json::Value;

/// What `ip link` accepts for an Ethernet device.
pub const MIN_MTU: i64 = 68;
pub const MAX_MTU: i64 = 65535;

/// The plugin's keys as Go's decoder folds them.
const SHAPE: Shape = Shape::Object(&[
    ("ipMasq", Shape::Leaf),
    ("ipMasqBackend", Shape::Leaf),
    ("mtu", Shape::Leaf),
    ("dns", go_compat::DNS),
]);

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("failed to load netconf: {0}")]
    Decode(#[source] serde_json::Error),
    #[error("ptp requires an IPAM plugin: set \"ipam\" with a \"type\"")]
    IpamRequired,
    #[error(
        "invalid MTU {0} (must be 0 for the kernel default, or between {MIN_MTU} and {MAX_MTU})"
    )]
    InvalidMtu(i64),
    #[error("ipMasqBackend: unknown ipmasq backend {0:?} (must be \"iptables\" or \"nftables\")")]
    UnknownMasqBackend(String),
}

impl ToCniError for ConfigError {
    fn to_cni_error(&self) -> CniError {
        let code = match self {
            // The spec's code for a value the plugin does not support.
            ConfigError::UnknownMasqBackend(_) => ErrorCode::UnsupportedField,
            ConfigError::Decode(_) | ConfigError::IpamRequired | ConfigError::InvalidMtu(_) => {
                ErrorCode::InvalidNetworkConfig
            }
        };
        CniError::new(code, self.to_string())
    }
}

#[derive(Deserialize)]
struct Keys {
    #[serde(rename = "ipMasq", default)]
    ip_masq: Option<bool>,
    #[serde(rename = "ipMasqBackend", default)]
    ip_masq_backend: Option<String>,
    #[serde(default)]
    mtu: Option<i64>,
    /// Kept as JSON: whether a list is given, even empty, matters.
    #[serde(default)]
    dns: Option<Value>,
}

/// The one key DEL and GC read.
const TEARDOWN_SHAPE: Shape = Shape::Object(&[("ipMasq", Shape::Leaf)]);

#[derive(Deserialize)]
struct TeardownKeys {
    #[serde(rename = "ipMasq", default)]
    ip_masq: Option<bool>,
}

/// The whole configuration, as ADD, CHECK and STATUS use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PtpConf {
    pub network: String,
    pub version: SpecVersion,
    pub ip_masq: bool,
    /// `None`: the masquerade code picks (iptables unless only nftables
    /// works).
    pub masq_backend: Option<MasqBackend>,
    /// `None`: the kernel's default.
    pub mtu: Option<u32>,
    pub ipam_type: String,
    /// Replaces the IPAM plugin's DNS settings in the result when set.
    pub dns: Option<Dns>,
}

impl PtpConf {
    pub fn from_conf(conf: &PluginConf) -> Result<PtpConf, ConfigError> {
        let keys: Keys =
            decode_with_path(&fold_keys(conf.raw(), &SHAPE)).map_err(ConfigError::Decode)?;
        let mtu = match keys.mtu.unwrap_or(0) {
            0 => None,
            m if (MIN_MTU..=MAX_MTU).contains(&m) => u32::try_from(m).ok(),
            m => return Err(ConfigError::InvalidMtu(m)),
        };
        let masq_backend = match keys.ip_masq_backend.as_deref() {
            None => None,
            Some("iptables") => Some(MasqBackend::Iptables),
            Some("nftables") => Some(MasqBackend::Nftables),
            Some(other) => return Err(ConfigError::UnknownMasqBackend(other.to_string())),
        };
        let ipam_type = ipam_type(conf)
            .map(str::to_string)
            .ok_or(ConfigError::IpamRequired)?;
        Ok(PtpConf {
            network: conf.name.clone(),
            version: conf.cni_version,
            ip_masq: keys.ip_masq.unwrap_or(false),
            masq_backend,
            mtu,
            ipam_type,
            dns: configured_dns(keys.dns)?,
        })
    }
}

/// What DEL and GC need: which rules were set up and who holds the lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeardownConf {
    pub network: String,
    pub ip_masq: bool,
    /// `None`: no IPAM plugin, so nothing was ever leased (ADD refuses
    /// such a configuration).
    pub ipam_type: Option<String>,
}

impl TeardownConf {
    pub fn from_conf(conf: &PluginConf) -> Result<TeardownConf, ConfigError> {
        let keys: TeardownKeys = decode_with_path(&fold_keys(conf.raw(), &TEARDOWN_SHAPE))
            .map_err(ConfigError::Decode)?;
        Ok(TeardownConf {
            network: conf.name.clone(),
            ip_masq: keys.ip_masq.unwrap_or(false),
            ipam_type: ipam_type(conf).map(str::to_string),
        })
    }
}

/// The configuration's DNS settings if it gives any, by the reference's
/// test: a list present (an empty one too, which Go decodes as a non-nil
/// slice) or a non-empty domain. `null` is absent, as in Go.
fn configured_dns(dns: Option<Value>) -> Result<Option<Dns>, ConfigError> {
    let Some(Value::Object(fields)) = dns else {
        return Ok(None);
    };
    let present = |key: &str| fields.get(key).is_some_and(|v| !v.is_null());
    let domain = fields.get("domain").and_then(Value::as_str).unwrap_or("");
    if !(present("nameservers") || present("search") || present("options") || !domain.is_empty()) {
        return Ok(None);
    }
    let dns = decode_with_path(&Value::Object(fields)).map_err(ConfigError::Decode)?;
    Ok(Some(dns))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(value: Value) -> Result<PtpConf, ConfigError> {
        let conf = PluginConf::from_slice(value.to_string().as_bytes()).unwrap();
        PtpConf::from_conf(&conf)
    }

    fn base() -> Value {
        json!({"cniVersion": "1.0.0", "name": "ptpnet", "type": "ptp",
               "ipam": {"type": "host-local", "subnet": "10.1.2.0/24"}})
    }

    fn with(key: &str, value: Value) -> Value {
        let mut conf = base();
        conf[key] = value;
        conf
    }

    #[test]
    fn defaults() {
        let conf = parse(base()).unwrap();
        assert_eq!(conf.network, "ptpnet");
        assert!(!conf.ip_masq);
        assert_eq!(conf.masq_backend, None);
        assert_eq!(conf.mtu, None);
        assert_eq!(conf.ipam_type, "host-local");
        assert_eq!(conf.dns, None);
    }

    #[test]
    fn every_key_in_any_letter_case() {
        let mut conf = base();
        conf["IPMASQ"] = json!(true);
        conf["ipmasqbackend"] = json!("nftables");
        conf["MTU"] = json!(5000);
        let conf = parse(conf).unwrap();
        assert!(conf.ip_masq);
        assert_eq!(conf.masq_backend, Some(MasqBackend::Nftables));
        assert_eq!(conf.mtu, Some(5000));
        let conf = parse(with("ipMasqBackend", json!("iptables"))).unwrap();
        assert_eq!(conf.masq_backend, Some(MasqBackend::Iptables));
        // null is the default, as in Go.
        let conf = parse(with("ipMasq", Value::Null)).unwrap();
        assert!(!conf.ip_masq);
    }

    #[test]
    fn bad_values_are_refused_with_their_codes() {
        let code = |v: Value| parse(v).unwrap_err().to_cni_error().code;
        // A wrong type for a key every plugin shares is refused while the
        // configuration is read, with the same code.
        let shared = PluginConf::from_slice(with("ipMasq", json!("yes")).to_string().as_bytes());
        assert_eq!(
            shared.unwrap_err().to_cni_error().code,
            ErrorCode::InvalidNetworkConfig
        );
        assert_eq!(
            code(with("mtu", json!(-1))),
            ErrorCode::InvalidNetworkConfig
        );
        assert_eq!(
            code(with("mtu", json!(67))),
            ErrorCode::InvalidNetworkConfig
        );
        assert_eq!(
            code(with("mtu", json!(65536))),
            ErrorCode::InvalidNetworkConfig
        );
        assert_eq!(
            parse(with("mtu", json!(65536))).unwrap_err().to_string(),
            "invalid MTU 65536 (must be 0 for the kernel default, or between 68 and 65535)"
        );
        for edge in [68, 65535] {
            assert_eq!(parse(with("mtu", json!(edge))).unwrap().mtu, Some(edge));
        }
        assert_eq!(
            code(with("mtu", json!(1.5))),
            ErrorCode::InvalidNetworkConfig
        );
        let err = parse(with("ipMasqBackend", json!("ebtables"))).unwrap_err();
        assert_eq!(err.to_cni_error().code, ErrorCode::UnsupportedField);
        assert!(err.to_string().contains("\"ebtables\""), "{err}");
        let mut no_ipam = base();
        no_ipam.as_object_mut().unwrap().remove("ipam");
        assert!(matches!(parse(no_ipam), Err(ConfigError::IpamRequired)));
        let err = parse(with("ipam", json!({"type": ""}))).unwrap_err();
        assert_eq!(err.to_cni_error().code, ErrorCode::InvalidNetworkConfig);
    }

    #[test]
    fn dns_counts_as_set_as_in_the_reference() {
        assert_eq!(parse(with("dns", json!({}))).unwrap().dns, None);
        assert_eq!(parse(with("dns", json!({"domain": ""}))).unwrap().dns, None);
        // Explicit empty lists count: the result's DNS becomes empty.
        for key in ["nameservers", "search", "options"] {
            let conf = parse(with("dns", json!({ key: [] }))).unwrap();
            assert_eq!(conf.dns, Some(Dns::default()), "{key}");
        }
        let conf = parse(with("dns", json!({"Domain": "example.com"}))).unwrap();
        assert_eq!(conf.dns.unwrap().domain, "example.com");
        let conf = parse(with("dns", json!({"nameservers": ["10.1.2.123"]}))).unwrap();
        assert_eq!(conf.dns.unwrap().nameservers, vec!["10.1.2.123"]);
    }

    #[test]
    fn teardown_reads_only_what_it_needs() {
        let mut conf = with("mtu", json!("not a number"));
        conf["ipMasq"] = json!(true);
        conf["ipMasqBackend"] = json!("ebtables");
        conf.as_object_mut().unwrap().remove("ipam");
        let conf = PluginConf::from_slice(conf.to_string().as_bytes()).unwrap();
        let teardown = TeardownConf::from_conf(&conf).unwrap();
        assert!(teardown.ip_masq);
        assert_eq!(teardown.ipam_type, None);
    }
}
