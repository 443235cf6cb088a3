//! The configuration static reads, and the addresses it settles on.
//!
//! An IPAM plugin gets its caller's whole network configuration; static uses
//! `cniVersion`, `ipam`, `runtimeConfig.ips` and `args.cni.ips`, plus the
//! `IP` and `GATEWAY` keys of `CNI_ARGS`. Keys match as Go's JSON decoder
//! matches them (exactly, or else case-insensitively), so the reference's
//! `"RuntimeConfig"` works; unknown keys are ignored and a value of the wrong
//! type is an error.
//!
//! ```json
//! "ipam": {
//!     "type": "static",
//!     "addresses": [ {"address": "10.10.0.1/24", "gateway": "10.10.0.254"},
//!                    {"address": "3ffe:ffff:0:01ff::1/64"} ],
//!     "routes": [ {"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "10.10.0.254"} ],
//!     "dns": { "nameservers": ["8.8.8.8"], "domain": "example.com",
//!              "search": ["example.com"], "options": ["ndots:2"] }
//! }
//! ```
//!
//! The address list is built in the reference's order, each step over the
//! previous one:
//! 1. `ipam.addresses`;
//! 2. `CNI_ARGS` `IP=cidr[,cidr...]` appended to it, then `GATEWAY=ip[,ip...]`
//!    given to every `CNI_ARGS` address whose subnet holds it (the last such
//!    gateway wins);
//! 3. `args.cni.ips`, when not empty, replaces the list;
//! 4. `runtimeConfig.ips`, when not empty, replaces it again.
//!
//! As in the reference, `GATEWAY=` never reaches an `ipam.addresses` entry
//! (those are only read after the `CNI_ARGS` step), and an `ipam.addresses`
//! entry that is not CIDR is an error only when it survives to the end.
//! Every address keeps its host bits (`10.10.0.1/24`), and an IPv4-mapped
//! IPv6 address is taken as IPv4, as Go takes it.

use std::net::IpAddr;

use base64::Engine as _;
use ipnetwork::IpNetwork;
use libcni::args::CniArgs;
use libcni::go_compat::{self, fold_keys, Shape};
use libcni::types::{Dns, Route};
use libcni::version::Semver;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::StaticError;

/// The `CNI_ARGS` key of extra addresses.
pub const IP_ARG: &str = "IP";
/// The `CNI_ARGS` key of gateways for the `IP` addresses.
pub const GATEWAY_ARG: &str = "GATEWAY";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid network config: {0}")]
    Decode(String),
    #[error("IPAM config missing 'ipam' key")]
    MissingIpam,
    /// An `ipam.addresses` gateway or `Address.IP`: Go's text for an
    /// unparsable `net.IP`.
    #[error("invalid IP address: {0}")]
    InvalidIp(String),
    #[error("the 'address' field is expected to be in CIDR notation, got: '{0}'")]
    InvalidAddress(String),
    /// The `Address` object (Go's `net.IPNet`) of an `ipam.addresses` entry.
    #[error("invalid 'Address' of address {index}: {reason}")]
    InvalidIpNet { index: usize, reason: &'static str },
    /// `IP=` of `CNI_ARGS`: an environment variable, not configuration.
    #[error("the 'ip' field is expected to be in CIDR notation, got: '{0}'")]
    InvalidEnvIp(String),
    /// `GATEWAY=` of `CNI_ARGS`, as written (spaces and all).
    #[error("invalid gateway address: {0}")]
    InvalidEnvGateway(String),
    /// `args.cni.ips` or `runtimeConfig.ips`.
    #[error("an entry in the 'ips' field is NOT in CIDR notation, got: '{0}'")]
    InvalidIps(String),
    /// The `cniVersion` as written (`""` when absent).
    #[error("CNI version {0} does not support more than 1 address per family")]
    TooManyPerFamily(String),
}

/// An address static hands out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaticAddress {
    /// With its host bits: `10.10.0.1/24`.
    pub address: IpNetwork,
    pub gateway: Option<IpAddr>,
}

/// The validated configuration ADD and CHECK work from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticConfig {
    /// As written; `""` means 0.1.0.
    pub cni_version: String,
    pub addresses: Vec<StaticAddress>,
    pub routes: Vec<Route>,
    pub dns: Dns,
}

/// `{"ips": [...]}`, under `runtimeConfig` and `args.cni`.
const IPS: Shape = Shape::Object(&[("ips", Shape::Leaf)]);
/// Go's `net.IPNet`: what the untagged `Address` field of the reference's
/// address type decodes.
const GO_IPNET: Shape = Shape::Object(&[("IP", Shape::Leaf), ("Mask", Shape::Leaf)]);
/// An `ipam.addresses` entry, fields in the reference's order (a folded
/// `ADDRESS` goes to `address`, the first of the two).
const ADDRESS: Shape = Shape::Object(&[
    ("address", Shape::Leaf),
    ("gateway", Shape::Leaf),
    ("Address", GO_IPNET),
    ("Version", Shape::Leaf),
]);
const IPAM: Shape = Shape::Object(&[
    ("Name", Shape::Leaf),
    ("type", Shape::Leaf),
    ("routes", Shape::List(&go_compat::ROUTE)),
    ("addresses", Shape::List(&ADDRESS)),
    ("dns", go_compat::DNS),
]);
const NET: Shape = Shape::Object(&[
    ("cniVersion", Shape::Leaf),
    ("ipam", IPAM),
    ("runtimeConfig", IPS),
    ("args", Shape::Object(&[("cni", IPS)])),
]);

/// The keys static reads, decoded but not yet validated.
struct NetKeys {
    cni_version: Option<String>,
    ipam: Option<IpamKeys>,
    arg_ips: Option<Vec<String>>,
    runtime_ips: Option<Vec<String>>,
}

struct IpamKeys {
    routes: Option<Vec<Route>>,
    addresses: Vec<AddressKeys>,
    dns: Option<Dns>,
}

#[derive(Default)]
struct AddressKeys {
    address: Option<String>,
    gateway: Option<String>,
    /// `Address.IP`, when given and not empty.
    ip: Option<String>,
    mask: Option<MaskKeys>,
}

/// Go's `[]byte`: a base64 string or a list of byte values.
#[derive(Deserialize)]
#[serde(untagged)]
enum MaskKeys {
    Base64(String),
    Bytes(Vec<u8>),
}

/// A JSON object being decoded (keys already folded), with the path that
/// leads to it so that a message names the key at fault.
struct Fields<'a> {
    object: &'a Map<String, Value>,
    path: String,
}

impl<'a> Fields<'a> {
    /// `value` as an object; `None` for `null` (Go leaves the field empty).
    fn of(value: &'a Value, path: String) -> Result<Option<Fields<'a>>, ConfigError> {
        match value {
            Value::Null => Ok(None),
            Value::Object(object) => Ok(Some(Fields { object, path })),
            _ => Err(ConfigError::Decode(format!("{path}: expected an object"))),
        }
    }

    fn path_of(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// The value of `key`; absent and `null` are `None`.
    fn get<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, ConfigError> {
        match self.object.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => T::deserialize(value)
                .map(Some)
                .map_err(|e| ConfigError::Decode(format!("{}: {e}", self.path_of(key)))),
        }
    }

    fn object(&self, key: &str) -> Result<Option<Fields<'a>>, ConfigError> {
        match self.object.get(key) {
            None => Ok(None),
            Some(value) => Fields::of(value, self.path_of(key)),
        }
    }

    /// A list of objects; a `null` entry is `None`.
    fn list(&self, key: &str) -> Result<Vec<Option<Fields<'a>>>, ConfigError> {
        let items = match self.object.get(key) {
            None | Some(Value::Null) => return Ok(Vec::new()),
            Some(Value::Array(items)) => items,
            Some(_) => {
                return Err(ConfigError::Decode(format!(
                    "{}: expected a list",
                    self.path_of(key)
                )))
            }
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| Fields::of(item, format!("{}[{i}]", self.path_of(key))))
            .collect()
    }
}

/// An address on its way through the sources: an `ipam.addresses` entry
/// stays text until the end, as in the reference.
#[derive(Debug, Clone)]
enum Entry {
    Written {
        text: String,
        gateway: Option<IpAddr>,
    },
    Parsed(StaticAddress),
}

impl StaticConfig {
    /// Decodes the configuration and settles the addresses. `cni_args` is
    /// `CNI_ARGS` as received.
    pub fn load(raw: &Value, cni_args: &str) -> Result<StaticConfig, StaticError> {
        let (keys, ipam) = decode(raw)?;
        let mut entries = config_entries(ipam.addresses)?;

        let env = CniArgs::parse(cni_args, &[IP_ARG, GATEWAY_ARG])?;
        add_env_addresses(&mut entries, &env)?;

        for ips in [keys.arg_ips, keys.runtime_ips].into_iter().flatten() {
            if !ips.is_empty() {
                entries = ips
                    .iter()
                    .map(|text| {
                        go_compat::parse_cidr(text)
                            .map(|address| {
                                Entry::Parsed(StaticAddress {
                                    address,
                                    gateway: None,
                                })
                            })
                            .ok_or_else(|| ConfigError::InvalidIps(text.clone()))
                    })
                    .collect::<Result<_, _>>()?;
            }
        }

        let addresses = entries
            .into_iter()
            .map(|entry| match entry {
                Entry::Parsed(address) => Ok(address),
                Entry::Written { text, gateway } => go_compat::parse_cidr(&text)
                    .map(|address| StaticAddress { address, gateway })
                    .ok_or(ConfigError::InvalidAddress(text)),
            })
            .collect::<Result<Vec<_>, _>>()?;

        let cni_version = keys.cni_version.unwrap_or_default();
        let v4 = addresses.iter().filter(|a| a.address.is_ipv4()).count();
        if v4 > 1 || addresses.len() - v4 > 1 {
            // Results before 0.3.0 hold one address per family. A version
            // that does not parse counts as old, as in the reference.
            let supports_many = cni_version
                .parse::<Semver>()
                .is_ok_and(|v| v >= Semver::new(0, 3, 0));
            if !supports_many {
                return Err(ConfigError::TooManyPerFamily(cni_version).into());
            }
        }

        Ok(StaticConfig {
            cni_version,
            addresses,
            routes: ipam.routes.unwrap_or_default(),
            dns: ipam.dns.unwrap_or_default(),
        })
    }

    /// Only what holds whatever the runtime sends: the keys decode and the
    /// `ipam` section is there. Addresses are not read, since
    /// `runtimeConfig.ips` or `args.cni.ips` can replace them.
    pub fn check_decodes(raw: &Value) -> Result<(), StaticError> {
        let (_, ipam) = decode(raw)?;
        config_entries(ipam.addresses)?;
        Ok(())
    }
}

fn decode(raw: &Value) -> Result<(NetKeys, IpamKeys), ConfigError> {
    let folded = fold_keys(raw, &NET);
    let net = Fields::of(&folded, String::new())?
        .ok_or_else(|| ConfigError::Decode("expected an object".to_string()))?;
    let ips_of = |section: Option<Fields>| -> Result<Option<Vec<String>>, ConfigError> {
        section.map_or(Ok(None), |s| s.get("ips"))
    };
    let arg_ips = match net.object("args")? {
        Some(args) => ips_of(args.object("cni")?)?,
        None => None,
    };
    let mut keys = NetKeys {
        cni_version: net.get("cniVersion")?,
        ipam: net.object("ipam")?.map(ipam_keys).transpose()?,
        arg_ips,
        runtime_ips: ips_of(net.object("runtimeConfig")?)?,
    };
    let ipam = keys.ipam.take().ok_or(ConfigError::MissingIpam)?;
    Ok((keys, ipam))
}

fn ipam_keys(ipam: Fields) -> Result<IpamKeys, ConfigError> {
    // Read by no one, but a wrong type fails the reference's decoding.
    ipam.get::<String>("Name")?;
    ipam.get::<String>("type")?;
    let addresses = ipam
        .list("addresses")?
        .into_iter()
        .map(address_keys)
        .collect::<Result<_, _>>()?;
    // serde would also take a list for a struct; Go takes only objects.
    ipam.list("routes")?;
    ipam.object("dns")?;
    Ok(IpamKeys {
        routes: ipam.get("routes")?,
        addresses,
        dns: ipam.get("dns")?,
    })
}

/// An `ipam.addresses` entry; `null` is an empty one, as in Go.
fn address_keys(entry: Option<Fields>) -> Result<AddressKeys, ConfigError> {
    let Some(entry) = entry else {
        return Ok(AddressKeys::default());
    };
    entry.get::<String>("Version")?;
    let (ip, mask) = match entry.object("Address")? {
        Some(ip_net) => (
            ip_net.get::<String>("IP")?.filter(|ip| !ip.is_empty()),
            ip_net.get("Mask")?,
        ),
        None => (None, None),
    };
    Ok(AddressKeys {
        address: entry.get("address")?,
        gateway: entry.get("gateway")?,
        ip,
        mask,
    })
}

/// `ipam.addresses` as the reference has them after decoding: gateways
/// parsed, addresses still text unless the entry carries Go's `Address`
/// object with an IP.
fn config_entries(written: Vec<AddressKeys>) -> Result<Vec<Entry>, ConfigError> {
    written
        .into_iter()
        .enumerate()
        .map(|(index, keys)| {
            let gateway = match keys.gateway.as_deref() {
                None | Some("") => None,
                Some(text) => Some(
                    go_compat::parse_ip(text)
                        .ok_or_else(|| ConfigError::InvalidIp(text.to_string()))?,
                ),
            };
            match keys.ip {
                Some(ip) => {
                    let ip = go_compat::parse_ip(&ip).ok_or(ConfigError::InvalidIp(ip))?;
                    let address = go_ip_net(ip, keys.mask)
                        .map_err(|reason| ConfigError::InvalidIpNet { index, reason })?;
                    Ok(Entry::Parsed(StaticAddress { address, gateway }))
                }
                None => Ok(Entry::Written {
                    text: keys.address.unwrap_or_default(),
                    gateway,
                }),
            }
        })
        .collect()
}

/// Go's `net.IPNet{IP, Mask}` as an address with a prefix. An IPv4 address
/// takes a 4-byte mask or the last 4 bytes of a 16-byte one, as Go prints
/// it; the mask must be contiguous ones (Go would print any other mask as
/// hex, which no runtime reads back).
fn go_ip_net(ip: IpAddr, mask: Option<MaskKeys>) -> Result<IpNetwork, &'static str> {
    let bytes = match mask {
        None => return Err("'Mask' is missing"),
        Some(MaskKeys::Bytes(bytes)) => bytes,
        Some(MaskKeys::Base64(text)) => base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|_| "'Mask' is not base64")?,
    };
    let mask: &[u8] = match (ip, bytes.len()) {
        (IpAddr::V4(_), 4) | (IpAddr::V6(_), 16) => &bytes,
        (IpAddr::V4(_), 16) => &bytes[12..],
        _ => return Err("'Mask' length does not fit the IP"),
    };
    let ones: u32 = mask.iter().map(|b| b.count_ones()).sum();
    let contiguous = mask
        .iter()
        .enumerate()
        .all(|(i, b)| *b == prefix_byte(ones, i));
    if !contiguous {
        return Err("'Mask' is not a prefix");
    }
    let prefix = u8::try_from(ones).map_err(|_| "'Mask' is not a prefix")?;
    IpNetwork::new(ip, prefix).map_err(|_| "'Mask' is not a prefix")
}

/// Byte `i` of a mask of `ones` leading one bits.
fn prefix_byte(ones: u32, i: usize) -> u8 {
    let before = u32::try_from(i).unwrap_or(u32::MAX).saturating_mul(8);
    let bits = ones.saturating_sub(before).min(8);
    // Shifting by 8 (no one bits in this byte) leaves nothing.
    u8::MAX.checked_shl(8 - bits).unwrap_or(0)
}

/// Step 2: `IP=` addresses appended, then `GATEWAY=` matched to them.
fn add_env_addresses(entries: &mut Vec<Entry>, env: &CniArgs) -> Result<(), ConfigError> {
    if let Some(ips) = env.get(IP_ARG).filter(|v| !v.is_empty()) {
        for item in ips.split(',') {
            let text = item.trim();
            let address = go_compat::parse_cidr(text)
                .ok_or_else(|| ConfigError::InvalidEnvIp(text.to_string()))?;
            entries.push(Entry::Parsed(StaticAddress {
                address,
                gateway: None,
            }));
        }
    }
    if let Some(gateways) = env.get(GATEWAY_ARG).filter(|v| !v.is_empty()) {
        for item in gateways.split(',') {
            let gateway = go_compat::parse_ip(item.trim())
                .ok_or_else(|| ConfigError::InvalidEnvGateway(item.to_string()))?;
            for entry in entries.iter_mut() {
                if let Entry::Parsed(address) = entry {
                    if address.address.contains(gateway) {
                        address.gateway = Some(gateway);
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
