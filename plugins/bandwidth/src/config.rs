//! The plugin's configuration: one bandwidth entry, from the top level or
//! from `runtimeConfig.bandwidth` (the `bandwidth` capability), checked
//! whole before anything is touched, in every verb (the reference
//! validates in ADD, CHECK and DEL alike).
//!
//! - Keys: `ingressRate`, `ingressBurst`, `egressRate`, `egressBurst`
//!   (bits per second and bits, 0 = no limit), `unshapedSubnets`,
//!   `shapedSubnets` (lists of CIDRs). Keys match as Go's decoder matches
//!   them: exactly, else ignoring ASCII case ([`go_compat`]).
//! - Precedence: if *any* of those keys is at the top level, the top
//!   level is the whole entry and `runtimeConfig.bandwidth` is ignored,
//!   as in the reference (whose entry is an embedded pointer that any of
//!   its keys allocates). The subnet keys belong to the entry, as in the
//!   reference's pull request that first had them (#921).
//! - The ifb device of an attachment is `bwp` + the first 12 hex digits of
//!   SHA-512(network name + container ID) ([`ifb_name`]), the reference's
//!   name, so either plugin deletes the other's.

use ipnetwork::IpNetwork;
use serde_json::{Map, Value};
use sha2::{Digest, Sha512};

use libcni::go_compat;
use libcni::skel::CmdArgs;

/// `IFNAMSIZ - 1`.
const MAX_IFB_NAME_LEN: usize = 15;
pub const IFB_PREFIX: &str = "bwp";
/// A tbf bucket's size in bytes must fit the kernel's 32-bit fields.
const MAX_BURST_BYTES: u64 = u32::MAX as u64;

const INGRESS_RATE: &str = "ingressRate";
const INGRESS_BURST: &str = "ingressBurst";
const EGRESS_RATE: &str = "egressRate";
const EGRESS_BURST: &str = "egressBurst";
const UNSHAPED_SUBNETS: &str = "unshapedSubnets";
const SHAPED_SUBNETS: &str = "shapedSubnets";
const ENTRY_KEYS: [&str; 6] = [
    INGRESS_RATE,
    INGRESS_BURST,
    EGRESS_RATE,
    EGRESS_BURST,
    UNSHAPED_SUBNETS,
    SHAPED_SUBNETS,
];

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("failed to parse network configuration: {key}: {source}")]
    Decode {
        key: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("if rate is set, burst must also be set")]
    RateWithoutBurst,
    #[error("if burst is set, rate must also be set")]
    BurstWithoutRate,
    #[error("burst cannot be more than 4GB")]
    BurstTooLarge,
    /// The reference leaves this to the kernel, which refuses a rate of
    /// 0 bytes per second with "Invalid argument".
    #[error("rate {0} bit/s is less than one byte per second (8 bit/s), the smallest rate a token bucket can apply")]
    RateTooLow(u64),
    #[error("unshapedSubnets and shapedSubnets cannot be both specified, one of them should be discarded")]
    BothSubnetLists,
    #[error("bad subnet {subnet:?} provided, details {reason}")]
    BadSubnet { subnet: String, reason: String },
}

/// Which traffic of a shaped direction the limit applies to; the other
/// traffic passes unshaped. Subnets are the remote side's: the source of
/// traffic towards the container, the destination of traffic from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShapedTraffic {
    /// Everything (no subnet list given): the reference's layout.
    All,
    /// Everything except traffic with these subnets (`unshapedSubnets`).
    AllBut(Vec<IpNetwork>),
    /// Only traffic with these subnets (`shapedSubnets`).
    Only(Vec<IpNetwork>),
}

/// One direction's limit, in the units of the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// Bits per second.
    pub rate: u64,
    /// Bits.
    pub burst: u64,
}

/// The validated bandwidth entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bandwidth {
    /// Traffic towards the container (shaped on the host veth).
    pub ingress: Option<Limit>,
    /// Traffic from the container (shaped on the ifb device).
    pub egress: Option<Limit>,
    pub traffic: ShapedTraffic,
}

impl Bandwidth {
    /// Nothing to shape: the reference's `isZero`.
    pub fn is_zero(&self) -> bool {
        self.ingress.is_none() && self.egress.is_none()
    }
}

/// The entry as written: numbers 0 when absent or null, as Go leaves them.
#[derive(Debug, Default)]
struct RawEntry {
    ingress_rate: u64,
    ingress_burst: u64,
    egress_rate: u64,
    egress_burst: u64,
    unshaped_subnets: Vec<String>,
    shaped_subnets: Vec<String>,
}

/// The validated entry of this call, `None` when neither place has one.
pub fn parse(args: &CmdArgs) -> Result<Option<Bandwidth>, ConfigError> {
    parse_value(args.conf.raw())
}

pub fn parse_value(conf: &Value) -> Result<Option<Bandwidth>, ConfigError> {
    let Some(top) = conf.as_object() else {
        return Ok(None);
    };
    let entry = if ENTRY_KEYS
        .iter()
        .any(|key| go_compat::get(top, key).is_some())
    {
        Some(decode_entry(top, "")?)
    } else {
        match runtime_bandwidth(top) {
            Some(Value::Object(object)) => Some(decode_entry(object, "runtimeConfig.bandwidth.")?),
            Some(Value::Null) | None => None,
            Some(other) => {
                return Err(ConfigError::Decode {
                    key: "runtimeConfig.bandwidth".to_string(),
                    source: serde_json::from_value::<Map<String, Value>>(other.clone())
                        .err()
                        .unwrap_or_else(|| serde::de::Error::custom("expected an object")),
                })
            }
        }
    };
    entry.map(validate).transpose()
}

fn runtime_bandwidth(top: &Map<String, Value>) -> Option<&Value> {
    let runtime = go_compat::get(top, "runtimeConfig")?.as_object()?;
    go_compat::get(runtime, "bandwidth")
}

fn decode_entry(object: &Map<String, Value>, path: &str) -> Result<RawEntry, ConfigError> {
    fn field<T: serde::de::DeserializeOwned + Default>(
        object: &Map<String, Value>,
        path: &str,
        key: &str,
    ) -> Result<T, ConfigError> {
        match go_compat::get(object, key) {
            None | Some(Value::Null) => Ok(T::default()),
            Some(value) => {
                serde_json::from_value(value.clone()).map_err(|source| ConfigError::Decode {
                    key: format!("{path}{key}"),
                    source,
                })
            }
        }
    }
    Ok(RawEntry {
        ingress_rate: field(object, path, INGRESS_RATE)?,
        ingress_burst: field(object, path, INGRESS_BURST)?,
        egress_rate: field(object, path, EGRESS_RATE)?,
        egress_burst: field(object, path, EGRESS_BURST)?,
        unshaped_subnets: field(object, path, UNSHAPED_SUBNETS)?,
        shaped_subnets: field(object, path, SHAPED_SUBNETS)?,
    })
}

fn validate(raw: RawEntry) -> Result<Bandwidth, ConfigError> {
    let ingress = limit(raw.ingress_rate, raw.ingress_burst)?;
    let egress = limit(raw.egress_rate, raw.egress_burst)?;
    if !raw.unshaped_subnets.is_empty() && !raw.shaped_subnets.is_empty() {
        return Err(ConfigError::BothSubnetLists);
    }
    let traffic = if !raw.unshaped_subnets.is_empty() {
        ShapedTraffic::AllBut(subnets(&raw.unshaped_subnets)?)
    } else if !raw.shaped_subnets.is_empty() {
        ShapedTraffic::Only(subnets(&raw.shaped_subnets)?)
    } else {
        ShapedTraffic::All
    };
    Ok(Bandwidth {
        ingress,
        egress,
        traffic,
    })
}

/// The reference's `validateRateAndBurst`, in its order.
pub fn limit(rate: u64, burst: u64) -> Result<Option<Limit>, ConfigError> {
    match (rate, burst) {
        (0, 0) => Ok(None),
        (_, 0) => Err(ConfigError::RateWithoutBurst),
        (0, _) => Err(ConfigError::BurstWithoutRate),
        (_, burst) if burst / 8 >= MAX_BURST_BYTES => Err(ConfigError::BurstTooLarge),
        (rate, _) if rate < 8 => Err(ConfigError::RateTooLow(rate)),
        (rate, burst) => Ok(Some(Limit { rate, burst })),
    }
}

/// CIDRs as Go's `net.ParseCIDR` reads them, host bits cleared.
fn subnets(texts: &[String]) -> Result<Vec<IpNetwork>, ConfigError> {
    texts
        .iter()
        .map(|text| {
            let network = go_compat::parse_cidr(text).ok_or_else(|| ConfigError::BadSubnet {
                subnet: text.clone(),
                reason: format!("invalid CIDR address: {text}"),
            })?;
            IpNetwork::new(network.network(), network.prefix()).map_err(|e| {
                ConfigError::BadSubnet {
                    subnet: text.clone(),
                    reason: e.to_string(),
                }
            })
        })
        .collect()
}

/// The attachment's ifb device: `bwp` + SHA-512(network + container ID) in
/// hex, cut to 15 characters.
pub fn ifb_name(network: &str, container_id: &str) -> String {
    let digest = Sha512::digest(format!("{network}{container_id}").as_bytes());
    let mut name = String::from(IFB_PREFIX);
    for byte in digest.iter() {
        if name.len() >= MAX_IFB_NAME_LEN {
            break;
        }
        name.push_str(&format!("{byte:02x}"));
    }
    name.truncate(MAX_IFB_NAME_LEN);
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ifb_name_is_the_references() {
        assert_eq!(
            ifb_name("cni-plugin-bandwidth-test", "dummy"),
            "bwpa8eda89404b7"
        );
        assert_eq!(ifb_name("n2", "dummy").len(), 15);
    }

    #[test]
    fn rate_and_burst_validation_as_the_reference() {
        let gib4 = 4u64 * 1024 * 1024 * 1024;
        assert!(limit(gib4 * 8 - 16, gib4 * 8 - 16).unwrap().is_some());
        assert!(matches!(
            limit(gib4 * 8, gib4 * 8),
            Err(ConfigError::BurstTooLarge)
        ));
        assert!(matches!(limit(0, 1), Err(ConfigError::BurstWithoutRate)));
        assert!(matches!(limit(1, 0), Err(ConfigError::RateWithoutBurst)));
        assert_eq!(limit(0, 0).unwrap(), None);
        assert!(matches!(limit(7, 8), Err(ConfigError::RateTooLow(7))));
    }

    #[test]
    fn top_level_wins_whole_over_runtime_config() {
        let conf = json!({
            "ingressRate": 0, "ingressBurst": 123,
            "runtimeConfig": {"bandwidth": {"ingressRate": 8, "ingressBurst": 8}}
        });
        assert!(matches!(
            parse_value(&conf),
            Err(ConfigError::BurstWithoutRate)
        ));
        let conf = json!({
            "egressRate": 16, "egressBurst": 8,
            "RuntimeConfig": {"bandwidth": {"ingressRate": 8, "ingressBurst": 8}}
        });
        let bw = parse_value(&conf).unwrap().unwrap();
        assert_eq!(bw.ingress, None);
        assert_eq!(bw.egress, Some(Limit { rate: 16, burst: 8 }));
        let conf = json!({"RuntimeConfig": {"bandWidth": {"IngressRate": 8, "ingressBurst": 8}}});
        let bw = parse_value(&conf).unwrap().unwrap();
        assert_eq!(bw.ingress, Some(Limit { rate: 8, burst: 8 }));
        assert_eq!(parse_value(&json!({"name": "x"})).unwrap(), None);
    }

    #[test]
    fn subnets_are_exclusive_and_parsed_like_go() {
        let conf = json!({"ingressRate": 8, "ingressBurst": 8,
            "unshapedSubnets": ["10.0.0.1/8", "fd00::/64"]});
        let bw = parse_value(&conf).unwrap().unwrap();
        assert_eq!(
            bw.traffic,
            ShapedTraffic::AllBut(vec![
                "10.0.0.0/8".parse().unwrap(),
                "fd00::/64".parse().unwrap()
            ])
        );
        let both = json!({"unshapedSubnets": ["10.0.0.0/8"], "shapedSubnets": ["10.0.0.0/8"]});
        assert!(matches!(
            parse_value(&both),
            Err(ConfigError::BothSubnetLists)
        ));
        let bad = json!({"shapedSubnets": ["10.0.0.0/33"]});
        let e = parse_value(&bad).unwrap_err();
        assert_eq!(
            e.to_string(),
            "bad subnet \"10.0.0.0/33\" provided, details invalid CIDR address: 10.0.0.0/33"
        );
        let wrong_type = json!({"ingressRate": -1});
        let e = parse_value(&wrong_type).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("failed to parse network configuration: ingressRate:"),
            "{e}"
        );
    }
}
