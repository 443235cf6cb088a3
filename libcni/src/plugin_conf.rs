//! The configuration a plugin receives on stdin.
//!
//! [`PluginConf`] is the typed view of the keys every plugin shares. The
//! bytes it was read from and their JSON value are kept beside it: a plugin
//! decodes its own keys from the same value ([`PluginConf::parse_as`]), and a
//! delegate (IPAM) must get the configuration exactly as received, unknown
//! keys included, which re-serialising a typed struct would not give.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::{CniError, ErrorCode, ToCniError};
use crate::types::{AnyResult, Dns, ResultError};
use crate::version::SpecVersion;

/// The GC key naming the attachments that are still in use.
pub const VALID_ATTACHMENTS_KEY: &str = "cni.dev/valid-attachments";
/// The same list under the name libcni used before renaming it; libcni
/// still sends both.
pub const LEGACY_ATTACHMENTS_KEY: &str = "cni.dev/attachments";

#[derive(Debug, thiserror::Error)]
pub enum ConfError {
    #[error("error unmarshall network config: {0}")]
    Decode(#[source] serde_json::Error),
    #[error("error unmarshall network config: the configuration is not a JSON object")]
    NotAnObject,
    #[error("error unmarshall network config: {key:?} must be a string")]
    NotAString { key: &'static str },
    #[error("missing network name")]
    MissingName,
    #[error("invalid characters found in network name")]
    InvalidName(String),
    #[error("unsupported CNI version {0:?}")]
    UnsupportedVersion(String),
    #[error("invalid network config: {0}")]
    Invalid(#[source] serde_json::Error),
    #[error("failed to parse prevResult: {0}")]
    PrevResult(#[source] ResultError),
}

impl ToCniError for ConfError {
    fn to_cni_error(&self) -> CniError {
        let code = match self {
            ConfError::Decode(_) | ConfError::NotAnObject | ConfError::NotAString { .. } => {
                ErrorCode::Decode
            }
            ConfError::MissingName | ConfError::InvalidName(_) | ConfError::Invalid(_) => {
                ErrorCode::InvalidNetworkConfig
            }
            ConfError::UnsupportedVersion(_) => ErrorCode::IncompatibleVersion,
            ConfError::PrevResult(ResultError::UnsupportedVersion(_)) => {
                ErrorCode::IncompatibleVersion
            }
            ConfError::PrevResult(_) => ErrorCode::Decode,
        };
        let error = CniError::new(code, self.to_string());
        match self {
            ConfError::InvalidName(name) => error.with_details(name.clone()),
            _ => error,
        }
    }
}

/// The `ipam` section: its `type` plus everything else, untouched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpamConf {
    /// The IPAM plugin to delegate to; empty when the section has none.
    pub ipam_type: String,
    pub raw: Value,
}

/// An attachment named in a GC request.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
pub struct GcAttachment {
    #[serde(rename = "containerID")]
    pub container_id: String,
    #[serde(rename = "ifname")]
    pub ifname: String,
}

/// A plugin's stdin configuration: shared keys typed, the rest kept raw.
#[derive(Debug, Clone)]
pub struct PluginConf {
    /// `""` or a missing key means 0.1.0, the version before the key existed.
    pub cni_version: SpecVersion,
    pub name: String,
    pub plugin_type: String,
    pub capabilities: BTreeMap<String, bool>,
    pub ipam: Option<IpamConf>,
    pub dns: Dns,
    pub ip_masq: bool,
    /// Capability arguments the runtime injected.
    pub runtime_config: Option<Value>,
    /// The `args` object (`args.cni.ips`, labels, ...).
    pub args: Option<Value>,
    /// The previous plugin's result, undecoded; see [`PluginConf::prev_result`].
    pub raw_prev_result: Option<Value>,
    /// GC only: attachments still in use (either key, the current one first).
    pub valid_attachments: Vec<GcAttachment>,
    raw: Value,
    bytes: Vec<u8>,
}

/// Typed part of the shared keys. `null` is accepted wherever a key may be
/// left out, since Go marshals empty values that way.
#[derive(Deserialize)]
struct SharedKeys {
    #[serde(rename = "type", default)]
    plugin_type: Option<String>,
    #[serde(default)]
    capabilities: Option<BTreeMap<String, bool>>,
    #[serde(default)]
    ipam: Option<Map<String, Value>>,
    #[serde(default)]
    dns: Option<Dns>,
    #[serde(rename = "ipMasq", default)]
    ip_masq: Option<bool>,
    #[serde(rename = "runtimeConfig", default)]
    runtime_config: Option<Value>,
    #[serde(default)]
    args: Option<Value>,
    #[serde(rename = "prevResult", default)]
    prev_result: Option<Value>,
    #[serde(rename = "cni.dev/valid-attachments", default)]
    valid_attachments: Option<Vec<GcAttachment>>,
    #[serde(rename = "cni.dev/attachments", default)]
    legacy_attachments: Option<Vec<GcAttachment>>,
}

impl PluginConf {
    /// Decodes and validates a configuration: JSON object (code 6), network
    /// name (7), known `cniVersion` (1), well-typed shared keys (7).
    pub fn from_slice(bytes: &[u8]) -> Result<PluginConf, ConfError> {
        let head = ConfHead::from_slice(bytes)?;
        let version = SpecVersion::parse_config(&head.version)
            .map_err(|_| ConfError::UnsupportedVersion(head.version.clone()))?;
        PluginConf::from_head(head, version)
    }

    /// The second stage of [`PluginConf::from_slice`], once the caller has
    /// settled the version.
    pub(crate) fn from_head(head: ConfHead, version: SpecVersion) -> Result<PluginConf, ConfError> {
        let ConfHead {
            name, raw, bytes, ..
        } = head;
        let shared: SharedKeys = decode_with_path(&raw).map_err(ConfError::Invalid)?;
        let ipam = shared.ipam.map(|section| IpamConf {
            ipam_type: section
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            raw: Value::Object(section),
        });
        Ok(PluginConf {
            cni_version: version,
            name,
            plugin_type: shared.plugin_type.unwrap_or_default(),
            capabilities: shared.capabilities.unwrap_or_default(),
            ipam,
            dns: shared.dns.unwrap_or_default(),
            ip_masq: shared.ip_masq.unwrap_or(false),
            runtime_config: shared.runtime_config,
            args: shared.args,
            raw_prev_result: shared.prev_result,
            valid_attachments: shared
                .valid_attachments
                .or(shared.legacy_attachments)
                .unwrap_or_default(),
            raw,
            bytes,
        })
    }

    /// The whole configuration as JSON, unknown keys included.
    pub fn raw(&self) -> &Value {
        &self.raw
    }

    /// The configuration exactly as received: what delegates get.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Decodes the plugin's own view of the configuration from the same
    /// JSON; a mismatch is an invalid configuration (code 7).
    pub fn parse_as<T: DeserializeOwned>(&self) -> Result<T, ConfError> {
        decode_with_path(&self.raw).map_err(ConfError::Invalid)
    }

    /// The previous result, decoded in the version it states, or in the
    /// config's version when it states none (as the Go library does).
    pub fn prev_result(&self) -> Result<Option<AnyResult>, ConfError> {
        let Some(raw) = &self.raw_prev_result else {
            return Ok(None);
        };
        let mut raw = raw.clone();
        if let Some(obj) = raw.as_object_mut() {
            // Go's ParsePrevResult writes the version under this spelling,
            // so a result relayed through Go code can carry it.
            if let Some(Value::String(legacy)) = obj.remove("CNIVersion") {
                let has_version =
                    matches!(obj.get("cniVersion"), Some(Value::String(s)) if !s.is_empty());
                if !has_version && !legacy.is_empty() {
                    obj.insert("cniVersion".to_string(), Value::String(legacy));
                }
            }
        }
        AnyResult::from_value(raw, self.cni_version)
            .map(Some)
            .map_err(ConfError::PrevResult)
    }
}

/// Decodes a `T` from a JSON value; a type error names the key path where
/// it happened (`ipMasq: invalid type: string "yes", expected a boolean`,
/// `ipam.ranges[0][0].subnet: ...`), as the Go plugins' errors name the
/// field, so a person knows which line of the file to fix.
pub fn decode_with_path<T: DeserializeOwned>(value: &Value) -> Result<T, serde_json::Error> {
    serde_path_to_error::deserialize(value).map_err(with_path)
}

/// The error with its key path in front, when it has one.
fn with_path(error: serde_path_to_error::Error<serde_json::Error>) -> serde_json::Error {
    let path = error.path().to_string();
    let inner = error.into_inner();
    if path == "." {
        inner
    } else {
        serde::de::Error::custom(format!("{path}: {inner}"))
    }
}

/// [`decode_with_path`] for a decoder that must read the JSON text itself
/// (key order, repeated keys); the error keeps its line and column.
pub fn decode_slice_with_path<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(with_path)?;
    deserializer.end()?;
    Ok(value)
}

/// The part of a configuration checked before the version is negotiated:/// The part of a configuration checked before the version is negotiated:
/// the JSON object, the network name and the version string as written.
#[derive(Debug, Clone)]
pub(crate) struct ConfHead {
    pub name: String,
    /// `cniVersion` as written; `""` when absent.
    pub version: String,
    pub raw: Value,
    pub bytes: Vec<u8>,
}

impl ConfHead {
    pub(crate) fn from_slice(bytes: &[u8]) -> Result<ConfHead, ConfError> {
        let raw: Value = serde_json::from_slice(bytes).map_err(ConfError::Decode)?;
        let obj = raw.as_object().ok_or(ConfError::NotAnObject)?;
        let name = optional_string(obj, "name")?;
        validate_network_name(&name)?;
        let version = optional_string(obj, "cniVersion")?;
        Ok(ConfHead {
            name,
            version,
            raw,
            bytes: bytes.to_vec(),
        })
    }
}

/// A string key that may be absent or `null` (both read as `""`).
fn optional_string(obj: &Map<String, Value>, key: &'static str) -> Result<String, ConfError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(ConfError::NotAString { key }),
    }
}

/// Whether `s` matches `^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`, the rule for
/// network names and container IDs.
pub fn is_valid_cni_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    match bytes.next() {
        Some(first) if first.is_ascii_alphanumeric() => {}
        _ => return false,
    }
    bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Network names: non-empty and [`is_valid_cni_name`] (code 7).
pub fn validate_network_name(name: &str) -> Result<(), ConfError> {
    if name.is_empty() {
        return Err(ConfError::MissingName);
    }
    if !is_valid_cni_name(name) {
        return Err(ConfError::InvalidName(name.to_string()));
    }
    Ok(())
}

/// A numeric key's value that is not an integer within its range, as an
/// error message shows it: the number, or what was given instead (a
/// string's text is left out: it may be long or hold control characters).
/// Each crate maps it to its own error variant, which names the key and
/// the range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotInRange(pub String);

/// An optional integer key: absent or `null` is `None`, an integer within
/// `range` is itself; anything else (negative, past the range, a fraction,
/// 2^64, a string) is [`NotInRange`].
pub fn int_in_range(
    value: Option<&Value>,
    range: RangeInclusive<u64>,
) -> Result<Option<u64>, NotInRange> {
    let Some(value) = value.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    match value.as_u64().filter(|n| range.contains(n)) {
        Some(n) => Ok(Some(n)),
        None => Err(NotInRange(match value {
            Value::Number(n) => n.to_string(),
            Value::String(_) => "(a string)".to_string(),
            _ => "(not a number)".to_string(),
        })),
    }
}

/// A time key in milliseconds: absent or `null` is `default`; otherwise
/// an integer from 1 to `max_ms`. A bound on every wait keeps a lock or a
/// runtime's call from being held for ever by a value such as 2^63.
pub fn millis_in_range(
    value: Option<&Value>,
    default: Duration,
    max_ms: u64,
) -> Result<Duration, NotInRange> {
    Ok(int_in_range(value, 1..=max_ms)?.map_or(default, Duration::from_millis))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::v100;
    use serde_json::json;

    fn conf(v: Value) -> Result<PluginConf, ConfError> {
        PluginConf::from_slice(&serde_json::to_vec(&v).unwrap())
    }

    #[test]
    fn shared_keys_are_typed_and_raw_is_kept() {
        let bytes = br#"{"cniVersion":"1.0.0","name":"net1","type":"bridge",
            "capabilities":{"portMappings":true},"ipam":{"type":"host-local","subnet":"10.1.0.0/16"},
            "dns":{"nameservers":["10.1.0.1"]},"ipMasq":true,"runtimeConfig":{"mac":"aa"},
            "args":{"cni":{"ips":["10.1.0.5"]}},"bridge":"cni0"}"#;
        let c = PluginConf::from_slice(bytes).unwrap();
        assert_eq!(c.cni_version, SpecVersion::V1_0_0);
        assert_eq!(c.name, "net1");
        assert_eq!(c.plugin_type, "bridge");
        assert_eq!(c.capabilities.get("portMappings"), Some(&true));
        let ipam = c.ipam.as_ref().unwrap();
        assert_eq!(ipam.ipam_type, "host-local");
        assert_eq!(ipam.raw["subnet"], "10.1.0.0/16");
        assert_eq!(c.dns.nameservers, vec!["10.1.0.1".to_string()]);
        assert!(c.ip_masq);
        assert_eq!(c.runtime_config.as_ref().unwrap()["mac"], "aa");
        assert_eq!(c.args.as_ref().unwrap()["cni"]["ips"][0], "10.1.0.5");
        assert_eq!(c.raw()["bridge"], "cni0");
        assert_eq!(c.bytes(), bytes.as_slice(), "bytes are kept verbatim");
        assert!(c.raw_prev_result.is_none());
        assert!(c.prev_result().unwrap().is_none());
    }

    #[test]
    fn plugin_decodes_its_own_keys_from_the_same_json() {
        #[derive(Debug, Deserialize)]
        struct BridgeConf {
            bridge: String,
            #[serde(rename = "isGateway", default)]
            is_gateway: bool,
        }
        let c =
            conf(json!({"cniVersion":"0.4.0","name":"n","type":"bridge","bridge":"br9"})).unwrap();
        let b: BridgeConf = c.parse_as().unwrap();
        assert_eq!(b.bridge, "br9");
        assert!(!b.is_gateway);
        let c = conf(json!({"name":"n","bridge":7})).unwrap();
        let e = c.parse_as::<BridgeConf>().unwrap_err();
        assert_eq!(e.to_cni_error().code, ErrorCode::InvalidNetworkConfig);
    }

    #[test]
    fn type_errors_name_the_key_path() {
        let message = |v: Value| conf(v).unwrap_err().to_string();
        assert_eq!(
            message(json!({"name":"n","type":"bridge","ipMasq":"yes"})),
            "invalid network config: ipMasq: invalid type: string \"yes\", expected a boolean"
        );
        assert_eq!(
            message(json!({"name":"n","type":"bridge","dns":{"nameservers":"10.0.0.1"}})),
            "invalid network config: dns.nameservers: invalid type: string \"10.0.0.1\", expected a sequence"
        );
        assert_eq!(
            message(json!({"name":"n","capabilities":{"portMappings":1}})),
            "invalid network config: capabilities.portMappings: invalid type: integer `1`, expected a boolean"
        );

        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct Range {
            subnet: String,
        }
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct Ipam {
            ranges: Vec<Vec<Range>>,
        }
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct Own {
            ipam: Ipam,
        }
        let c =
            conf(json!({"name":"n","ipam":{"ranges":[[{"subnet":"10.0.0.0/24"}],[{"subnet":5}]]}}))
                .unwrap();
        let e = c.parse_as::<Own>().unwrap_err();
        assert_eq!(e.to_cni_error().code, ErrorCode::InvalidNetworkConfig);
        assert_eq!(
            e.to_string(),
            "invalid network config: ipam.ranges[1][0].subnet: invalid type: integer `5`, expected a string"
        );
        // From the text: the line and column stay.
        let e = decode_slice_with_path::<Own>(br#"{"ipam": {"ranges": [[{"subnet": 5}]]}}"#)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "ipam.ranges[0][0].subnet: invalid type: integer `5`, expected a string at line 1 column 34"
        );
        assert!(decode_slice_with_path::<Own>(br#"{"ipam": {"ranges": []}} x"#).is_err());
        // An error of the whole object has no path to name.
        let c = conf(json!({"name":"n"})).unwrap();
        assert_eq!(
            c.parse_as::<Own>().unwrap_err().to_string(),
            "invalid network config: missing field `ipam`"
        );
    }

    #[test]
    fn missing_or_empty_version_is_0_1_0() {
        assert_eq!(
            conf(json!({"name":"n"})).unwrap().cni_version,
            SpecVersion::V0_1_0
        );
        assert_eq!(
            conf(json!({"name":"n","cniVersion":""}))
                .unwrap()
                .cni_version,
            SpecVersion::V0_1_0
        );
        assert_eq!(
            conf(json!({"name":"n","cniVersion":null}))
                .unwrap()
                .cni_version,
            SpecVersion::V0_1_0
        );
    }

    #[test]
    fn nulls_read_as_absent() {
        let c = conf(
            json!({"name":"n","type":null,"capabilities":null,"ipam":null,
            "dns":null,"ipMasq":null,"prevResult":null}),
        )
        .unwrap();
        assert_eq!(c.plugin_type, "");
        assert!(c.capabilities.is_empty());
        assert!(c.ipam.is_none());
        assert!(c.dns.is_empty());
        assert!(!c.ip_masq);
        assert!(c.prev_result().unwrap().is_none());
    }

    #[test]
    fn codes_of_bad_configs() {
        let code = |bytes: &[u8]| {
            PluginConf::from_slice(bytes)
                .unwrap_err()
                .to_cni_error()
                .code
                .as_u32()
        };
        assert_eq!(code(b""), 6);
        assert_eq!(code(b"{"), 6);
        assert_eq!(code(b"\xff\xfe"), 6);
        assert_eq!(code(b"[]"), 6);
        assert_eq!(code(b"null"), 6);
        assert_eq!(code(br#"{"name":5}"#), 6);
        assert_eq!(code(br#"{"name":"n","cniVersion":1}"#), 6);
        assert_eq!(code(br#"{}"#), 7);
        assert_eq!(code(br#"{"name":""}"#), 7);
        assert_eq!(code(br#"{"name":"bad name"}"#), 7);
        assert_eq!(code(br#"{"name":"-x"}"#), 7);
        assert_eq!(code(br#"{"name":"n","cniVersion":"9.9.9"}"#), 1);
        assert_eq!(code(br#"{"name":"n","dns":"x"}"#), 7);
        assert_eq!(code(br#"{"name":"n","ipam":[]}"#), 7);
        assert_eq!(code(br#"{"name":"n","ipMasq":"true"}"#), 7);
        assert_eq!(code(br#"{"name":"n","capabilities":{"a":1}}"#), 7);
        let e = PluginConf::from_slice(br#"{"name":"a b"}"#)
            .unwrap_err()
            .to_cni_error();
        assert_eq!(e.msg, "invalid characters found in network name");
        assert_eq!(e.details, "a b");
        let e = PluginConf::from_slice(br#"{}"#).unwrap_err().to_cni_error();
        assert_eq!(e.msg, "missing network name");
    }

    #[test]
    fn name_rule() {
        for ok in ["a", "A0", "0", "net-1_2.x", "cni-loopback"] {
            assert!(is_valid_cni_name(ok), "{ok}");
        }
        for bad in ["", "-a", "_a", ".a", "a b", "a/b", "a:b", "é", "a\n"] {
            assert!(!is_valid_cni_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn prev_result_uses_the_config_version_when_it_has_none() {
        let c = conf(json!({"cniVersion":"0.3.1","name":"n","prevResult":{
            "ips":[{"version":"4","address":"10.0.0.2/24"}]}}))
        .unwrap();
        let r = c.prev_result().unwrap().unwrap();
        assert_eq!(r.version(), SpecVersion::V0_3_1);
        let c = conf(json!({"cniVersion":"1.1.0","name":"n","prevResult":{
            "cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24"}]}}))
        .unwrap();
        let r = c.prev_result().unwrap().unwrap();
        assert_eq!(r.version(), SpecVersion::V1_0_0);
        let v1 = v100::Result::try_from(r).unwrap();
        assert_eq!(v1.ips.len(), 1);
    }

    #[test]
    fn prev_result_accepts_go_spelling_of_the_version() {
        let c = conf(json!({"cniVersion":"1.0.0","name":"n","prevResult":{
            "CNIVersion":"0.4.0","ips":[{"version":"4","address":"10.0.0.2/24"}]}}))
        .unwrap();
        assert_eq!(
            c.prev_result().unwrap().unwrap().version(),
            SpecVersion::V0_4_0
        );
    }

    #[test]
    fn bad_prev_result_is_an_error() {
        let c = conf(json!({"cniVersion":"1.0.0","name":"n","prevResult":{"ips":5}})).unwrap();
        assert_eq!(
            c.prev_result().unwrap_err().to_cni_error().code,
            ErrorCode::Decode
        );
        let c = conf(json!({"name":"n","prevResult":{"cniVersion":"7.0.0"}})).unwrap();
        assert_eq!(
            c.prev_result().unwrap_err().to_cni_error().code,
            ErrorCode::IncompatibleVersion
        );
        let c = conf(json!({"name":"n","prevResult":[]})).unwrap();
        assert!(c.prev_result().is_err());
    }

    #[test]
    fn gc_attachments_under_either_key() {
        let c = conf(json!({"cniVersion":"1.1.0","name":"n",
            "cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"}]}))
        .unwrap();
        assert_eq!(
            c.valid_attachments,
            vec![GcAttachment {
                container_id: "c1".into(),
                ifname: "eth0".into()
            }]
        );
        let c = conf(json!({"cniVersion":"1.1.0","name":"n",
            "cni.dev/attachments":[{"containerID":"c2","ifname":"net1"}]}))
        .unwrap();
        assert_eq!(c.valid_attachments[0].container_id, "c2");
    }

    #[test]
    fn int_in_range_takes_the_bounds_and_refuses_past_them() {
        let get = |v: Value| int_in_range(Some(&v), 1..=4094);
        assert_eq!(get(json!(1)), Ok(Some(1)));
        assert_eq!(get(json!(4094)), Ok(Some(4094)));
        assert_eq!(get(Value::Null), Ok(None));
        assert_eq!(int_in_range(None, 1..=4094), Ok(None));
        for (bad, shown) in [
            (json!(0), "0"),
            (json!(4095), "4095"),
            (json!(-1), "-1"),
            (json!(1.5), "1.5"),
            (json!(9_223_372_036_854_775_808u64), "9223372036854775808"),
            (json!(u64::MAX), "18446744073709551615"),
            (json!(1e308), "1e+308"),
            (json!("5"), "(a string)"),
            (json!(true), "(not a number)"),
            (json!([1]), "(not a number)"),
        ] {
            assert_eq!(get(bad), Err(NotInRange(shown.to_string())), "{shown}");
        }
    }

    #[test]
    fn millis_in_range_defaults_and_caps() {
        let default = Duration::from_secs(10);
        let get = |v: Option<Value>| millis_in_range(v.as_ref(), default, 30_000);
        assert_eq!(get(None), Ok(default));
        assert_eq!(get(Some(Value::Null)), Ok(default));
        assert_eq!(get(Some(json!(1))), Ok(Duration::from_millis(1)));
        assert_eq!(get(Some(json!(30_000))), Ok(Duration::from_secs(30)));
        assert_eq!(get(Some(json!(0))), Err(NotInRange("0".into())));
        assert_eq!(get(Some(json!(30_001))), Err(NotInRange("30001".into())));
        assert_eq!(
            get(Some(json!(9_223_372_036_854_775_808u64))),
            Err(NotInRange("9223372036854775808".into()))
        );
    }
}
