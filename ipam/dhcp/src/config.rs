//! The plugin's `ipam` section, read by the plugin (to report mistakes
//! before calling the daemon) and by the daemon (which sends the options).
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `daemonSocketPath` | `/run/cni/dhcp.sock` | the daemon's socket |
//! | `provide[]` | none | `{option, value, fromArg}`: options sent to the server; `fromArg` names a `CNI_ARGS` key whose value is sent |
//! | `request[]` | none | `{option, skipDefault}`: codes asked for in option 55; one `skipDefault: true` drops the defaults (routers, subnet mask) |
//! | `priority` | 0 | the metric of every returned route |
//!
//! Keys match case-insensitively, as Go's JSON decoder matches them.

use serde::Deserialize;
use serde_json::Value;

use libcni::go_compat::{fold_keys, Shape};
use libcni::plugin_conf::int_in_range;

use crate::options::{parse_option_name, OptionError, SentOption, MAX_OPTION_VALUE_BYTES};

pub const DEFAULT_SOCKET_PATH: &str = "/run/cni/dhcp.sock";
/// Asked for unless a `request` entry says `skipDefault`: routers, mask.
const DEFAULT_REQUESTED: [u8; 2] = [3, 1];

const PROVIDE: Shape = Shape::Object(&[
    ("option", Shape::Leaf),
    ("value", Shape::Leaf),
    ("fromArg", Shape::Leaf),
]);
const REQUEST: Shape = Shape::Object(&[("option", Shape::Leaf), ("skipDefault", Shape::Leaf)]);
const IPAM: Shape = Shape::Object(&[
    ("type", Shape::Leaf),
    ("daemonSocketPath", Shape::Leaf),
    ("provide", Shape::List(&PROVIDE)),
    ("request", Shape::List(&REQUEST)),
    ("priority", Shape::Leaf),
]);
const NET_CONF: Shape = Shape::Object(&[("ipam", IPAM)]);

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("failed to load netconf: {0}")]
    Decode(#[source] serde_json::Error),
    #[error("IPAM config missing 'ipam' key")]
    MissingIpam,
    #[error(transparent)]
    Option(#[from] OptionError),
    #[error("invalid ipam.priority {0}: must be an integer from 0 to 4294967295 (a route metric)")]
    BadPriority(String),
}

#[derive(Debug, Default, Deserialize)]
struct NetConf {
    #[serde(default)]
    ipam: Option<IpamSection>,
}

#[derive(Debug, Default, Deserialize)]
struct IpamSection {
    #[serde(rename = "daemonSocketPath", default)]
    daemon_socket_path: Option<String>,
    #[serde(default)]
    provide: Option<Vec<ProvideEntry>>,
    #[serde(default)]
    request: Option<Vec<RequestEntry>>,
    /// Any JSON, checked with [`int_in_range`] so that every bad value
    /// gets a message naming the key and the range.
    #[serde(default)]
    priority: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct ProvideEntry {
    #[serde(default)]
    option: String,
    #[serde(default)]
    value: String,
    #[serde(rename = "fromArg", default)]
    from_arg: String,
}

#[derive(Debug, Default, Deserialize)]
struct RequestEntry {
    #[serde(default)]
    option: String,
    #[serde(rename = "skipDefault", default)]
    skip_default: bool,
}

/// The `ipam` section, options resolved against `CNI_ARGS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DhcpConfig {
    pub socket_path: String,
    /// Options sent to the server, in configuration order.
    pub sent: Vec<SentOption>,
    /// Option codes asked for (option 55), defaults included unless skipped.
    pub requested: Vec<u8>,
    pub priority: u32,
}

impl DhcpConfig {
    /// Reads the configuration `stdin` with the call's `CNI_ARGS`.
    pub fn load(stdin: &[u8], cni_args: &str) -> Result<DhcpConfig, ConfigError> {
        let raw: Value = serde_json::from_slice(stdin).map_err(ConfigError::Decode)?;
        let conf: NetConf =
            serde_json::from_value(fold_keys(&raw, &NET_CONF)).map_err(ConfigError::Decode)?;
        let ipam = conf.ipam.ok_or(ConfigError::MissingIpam)?;
        let mut sent = Vec::new();
        for entry in ipam.provide.unwrap_or_default() {
            let code = parse_option_name(&entry.option)?;
            let value = if entry.from_arg.is_empty() {
                entry.value
            } else {
                match arg_value(cni_args, &entry.from_arg) {
                    Some(value) => value.to_string(),
                    None => continue,
                }
            };
            if value.len() > MAX_OPTION_VALUE_BYTES {
                return Err(OptionError::ValueTooLong {
                    option: entry.option,
                    value,
                }
                .into());
            }
            sent.push(SentOption {
                code,
                value: value.into_bytes(),
            });
        }
        let entries = ipam.request.unwrap_or_default();
        let mut requested = Vec::new();
        if !entries.iter().any(|e| e.skip_default) {
            requested.extend(DEFAULT_REQUESTED);
        }
        for entry in &entries {
            let code = parse_option_name(&entry.option)?;
            if !requested.contains(&code) {
                requested.push(code);
            }
        }
        Ok(DhcpConfig {
            socket_path: ipam
                .daemon_socket_path
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| DEFAULT_SOCKET_PATH.to_string()),
            sent,
            requested,
            priority: int_in_range(ipam.priority.as_ref(), 0..=u64::from(u32::MAX))
                .map_err(|e| ConfigError::BadPriority(e.0))?
                // Within u32 by the range above.
                .and_then(|p| u32::try_from(p).ok())
                .unwrap_or(0),
        })
    }
}

/// Only the socket path, for the verbs that send no options (DEL, GC,
/// STATUS): an option the daemon would refuse must not keep a lease from
/// being released.
pub fn socket_path(stdin: &[u8]) -> Result<String, ConfigError> {
    #[derive(Deserialize)]
    struct SocketOnly {
        #[serde(rename = "daemonSocketPath", default)]
        daemon_socket_path: Option<String>,
    }
    #[derive(Deserialize)]
    struct Conf {
        #[serde(default)]
        ipam: Option<SocketOnly>,
    }
    const SHAPE: Shape =
        Shape::Object(&[("ipam", Shape::Object(&[("daemonSocketPath", Shape::Leaf)]))]);
    let raw: Value = serde_json::from_slice(stdin).map_err(ConfigError::Decode)?;
    let conf: Conf =
        serde_json::from_value(fold_keys(&raw, &SHAPE)).map_err(ConfigError::Decode)?;
    let ipam = conf.ipam.ok_or(ConfigError::MissingIpam)?;
    Ok(ipam
        .daemon_socket_path
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| DEFAULT_SOCKET_PATH.to_string()))
}

/// The value of `key` in `CNI_ARGS` as the reference reads it for
/// `fromArg`: pairs split on `;`, each at its first `=`.
fn arg_value<'a>(cni_args: &'a str, key: &str) -> Option<&'a str> {
    cni_args
        .split(';')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(ipam: &str, args: &str) -> Result<DhcpConfig, ConfigError> {
        let conf = format!(r#"{{"cniVersion":"1.0.0","name":"n","type":"macvlan","ipam":{ipam}}}"#);
        DhcpConfig::load(conf.as_bytes(), args)
    }

    #[test]
    fn defaults() {
        let conf = load(r#"{"type":"dhcp"}"#, "").unwrap();
        assert_eq!(conf.socket_path, DEFAULT_SOCKET_PATH);
        assert_eq!(conf.requested, [3, 1]);
        assert!(conf.sent.is_empty());
        assert_eq!(conf.priority, 0);
    }

    #[test]
    fn priority_is_a_route_metric_up_to_u32_max() {
        let top = load(r#"{"type":"dhcp","priority":4294967295}"#, "").unwrap();
        assert_eq!(top.priority, u32::MAX);
        for (bad, shown) in [
            ("-1", "-1"),
            ("4294967296", "4294967296"),
            ("\"7\"", "(a string)"),
        ] {
            let error = load(&format!(r#"{{"type":"dhcp","priority":{bad}}}"#), "").unwrap_err();
            assert_eq!(
                error.to_string(),
                format!("invalid ipam.priority {shown}: must be an integer from 0 to 4294967295 (a route metric)")
            );
            assert_eq!(
                crate::error::DhcpError::from(error).code(),
                libcni::error::ErrorCode::InvalidNetworkConfig
            );
        }
    }

    #[test]
    fn provide_request_priority() {
        let conf = load(
            r#"{"type":"dhcp","DaemonSocketPath":"/tmp/x.sock","priority":7,
                "provide":[{"option":"host-name","fromArg":"K8S_POD_NAME"},
                           {"option":"60","value":"vendor"},
                           {"option":"user-class","fromArg":"MISSING"}],
                "request":[{"option":"121"},{"option":"33","skipDefault":true}]}"#,
            "IgnoreUnknown=1;K8S_POD_NAME=web=1",
        )
        .unwrap();
        assert_eq!(conf.socket_path, "/tmp/x.sock");
        assert_eq!(conf.priority, 7);
        assert_eq!(
            conf.sent,
            [
                SentOption {
                    code: 12,
                    value: b"web=1".to_vec()
                },
                SentOption {
                    code: 60,
                    value: b"vendor".to_vec()
                },
            ]
        );
        assert_eq!(conf.requested, [121, 33]);
    }

    #[test]
    fn socket_path_alone_ignores_options() {
        let conf =
            br#"{"name":"n","ipam":{"daemonsocketpath":"/x.sock","request":[{"option":"bad"}]}}"#;
        assert_eq!(socket_path(conf).unwrap(), "/x.sock");
        assert_eq!(socket_path(br#"{"ipam":{}}"#).unwrap(), DEFAULT_SOCKET_PATH);
        assert!(matches!(
            socket_path(br#"{}"#),
            Err(ConfigError::MissingIpam)
        ));
        assert!(matches!(
            socket_path(br#"{"ipam":{"daemonSocketPath":1}}"#),
            Err(ConfigError::Decode(_))
        ));
    }

    #[test]
    fn errors() {
        let bad_name = load(r#"{"request":[{"option":"doNotparseMe"}]}"#, "").unwrap_err();
        assert!(bad_name
            .to_string()
            .starts_with("Can not parse option \"doNotparseMe\""));
        let long = "v".repeat(256);
        let too_long = load(
            &format!(r#"{{"provide":[{{"option":"12","value":"{long}"}}]}}"#),
            "",
        )
        .unwrap_err();
        assert!(too_long
            .to_string()
            .starts_with("value too long for option \"12\""));
        assert!(matches!(
            load(r#"{"priority":"x"}"#, ""),
            Err(ConfigError::BadPriority(_))
        ));
        let missing = DhcpConfig::load(br#"{"name":"n"}"#, "").unwrap_err();
        assert!(matches!(missing, ConfigError::MissingIpam));
        assert!(matches!(
            DhcpConfig::load(b"{", ""),
            Err(ConfigError::Decode(_))
        ));
    }
}
