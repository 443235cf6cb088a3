//! The configuration host-local reads: the whole network configuration (an
//! IPAM plugin gets its caller's), of which it uses `name`, `cniVersion`,
//! `ipam`, `runtimeConfig.ipRanges`, `runtimeConfig.ips` and
//! `args.cni.ips`, plus the `IP` key of `CNI_ARGS`.
//!
//! ```json
//! "ipam": {
//!     "type": "host-local",
//!     "ranges": [ [ {"subnet": "10.1.0.0/16", "rangeStart": "10.1.0.10",
//!                     "rangeEnd": "10.1.0.200", "gateway": "10.1.0.1"} ],
//!                 [ {"subnet": "2001:db8::/64"} ] ],
//!     "subnet": "10.2.0.0/16",            legacy single range, same keys
//!     "routes": [ {"dst": "0.0.0.0/0"} ],
//!     "dataDir": "/var/lib/cni/networks",
//!     "resolvConf": "/etc/resolv.conf",
//!     "lockTimeoutMs": 10000              ours: bounded lock wait
//! }
//! ```
//!
//! Range sets come in the reference's order: `runtimeConfig.ipRanges`,
//! then the legacy flat range, then `ranges`. Requested addresses come from
//! `CNI_ARGS` `IP=`, then `args.cni.ips`, then `runtimeConfig.ips`, each
//! `<ip>` or `<ip>/<prefix>` (the prefix is ignored).

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use libcni::plugin_conf::{is_valid_cni_name, millis_in_range};
use libcni::types::Route;
use libcni::version::Semver;
use libcni::IpFamily;
use serde::Deserialize;
use serde_json::Value;

use crate::addr;
use crate::range::RangeSpec;
use crate::range_set::{RangeSet, RangeSetError};

/// Where leases live unless `dataDir` says otherwise.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/networks";
/// How long an operation waits for the store lock unless `lockTimeoutMs`
/// says otherwise. Operations hold it for well under a millisecond; ten
/// seconds only runs out when a holder is stuck.
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(10);
/// The most `lockTimeoutMs` may say: 5 minutes, past any holder that is
/// not stuck (cluster-ipam's block claim, the longest, is bounded by its
/// `etcd.timeoutMs` of at most 30 s) and within the runtimes' own CNI
/// deadlines. Without a bound, 2^63 waited on a stuck holder for ever.
pub const MAX_LOCK_TIMEOUT_MS: u64 = 300_000;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid network config: {0}")]
    Decode(#[from] serde_json::Error),
    #[error("IPAM config missing 'ipam' key")]
    MissingIpam,
    #[error("missing network name")]
    MissingName,
    #[error("invalid network name {0:?}: it must match ^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")]
    InvalidName(String),
    /// `IP=` of `CNI_ARGS`: an environment variable, not configuration.
    #[error("cannot understand ip: {0:?} (CNI_ARGS IP)")]
    InvalidEnvIp(String),
    #[error("cannot understand ip: {value:?} ({source_key})")]
    InvalidRequestedIp {
        source_key: &'static str,
        value: String,
    },
    #[error("no IP ranges specified")]
    NoRanges,
    #[error("invalid range set {index}: {source}")]
    InvalidRangeSet {
        index: usize,
        #[source]
        source: RangeSetError,
    },
    #[error("CNI version {0} does not support more than 1 address per family")]
    TooManyPerFamily(String),
    #[error("range set {0} overlaps with {1}")]
    RangeSetsOverlap(usize, usize),
    #[error("invalid ipam.lockTimeoutMs {0}: must be an integer from 1 to {MAX_LOCK_TIMEOUT_MS} (milliseconds)")]
    BadLockTimeout(String),
}

/// Where the leases of a network live: all DEL and GC need, so they work
/// even when the ranges of a configuration have become invalid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    pub network: String,
    pub data_dir: PathBuf,
    pub lock_timeout: Duration,
    /// How many range sets the configuration lists (valid or not): which
    /// `last_reserved_ip.<n>` files belong to it.
    pub range_sets: usize,
}

/// The validated configuration ADD, CHECK and STATUS work from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpamConfig {
    pub store: StoreConfig,
    /// As written; `""` means 0.1.0.
    pub cni_version: String,
    pub range_sets: Vec<RangeSet>,
    pub requested_ips: Vec<IpAddr>,
    pub routes: Vec<Route>,
    pub resolv_conf: Option<PathBuf>,
}

#[derive(Deserialize)]
struct NetConfKeys {
    #[serde(default)]
    name: Option<String>,
    #[serde(rename = "cniVersion", default)]
    cni_version: Option<String>,
    #[serde(default)]
    ipam: Option<IpamKeys>,
    #[serde(rename = "runtimeConfig", default)]
    runtime_config: Option<RuntimeConfigKeys>,
    #[serde(default)]
    args: Option<ArgsKeys>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct IpamKeys {
    #[serde(default)]
    routes: Option<Vec<Route>>,
    #[serde(default)]
    data_dir: Option<String>,
    #[serde(default)]
    resolv_conf: Option<String>,
    #[serde(default)]
    ranges: Option<Vec<Vec<RangeSpec>>>,
    /// Any JSON, checked by [`lock_timeout`] so that every bad value gets
    /// the message with the range.
    #[serde(default)]
    lock_timeout_ms: Option<Value>,
    #[serde(flatten)]
    legacy_range: RangeSpec,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RuntimeConfigKeys {
    #[serde(default)]
    ip_ranges: Option<Vec<Vec<RangeSpec>>>,
    #[serde(default)]
    ips: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct ArgsKeys {
    #[serde(default)]
    cni: Option<CniArgsKeys>,
}

#[derive(Deserialize)]
struct CniArgsKeys {
    #[serde(default)]
    ips: Option<Vec<String>>,
}

impl NetConfKeys {
    fn decode(raw: &Value) -> Result<(NetConfKeys, IpamKeys), ConfigError> {
        let mut keys: NetConfKeys = libcni::plugin_conf::decode_with_path(raw)?;
        let ipam = keys.ipam.take().ok_or(ConfigError::MissingIpam)?;
        Ok((keys, ipam))
    }

    /// Range sets in the reference's order, unvalidated.
    fn range_set_specs(&self, ipam: &IpamKeys) -> Vec<Vec<RangeSpec>> {
        let mut sets = Vec::new();
        if let Some(rc) = &self.runtime_config {
            sets.extend(rc.ip_ranges.iter().flatten().cloned());
        }
        if ipam.legacy_range.has_subnet() {
            sets.push(vec![ipam.legacy_range.clone()]);
        }
        sets.extend(ipam.ranges.iter().flatten().cloned());
        sets
    }
}

fn store_config(
    keys: &NetConfKeys,
    ipam: &IpamKeys,
    range_sets: usize,
) -> Result<StoreConfig, ConfigError> {
    let network = keys.name.clone().unwrap_or_default();
    if network.is_empty() {
        return Err(ConfigError::MissingName);
    }
    if !is_valid_cni_name(&network) {
        return Err(ConfigError::InvalidName(network));
    }
    let data_dir = match ipam.data_dir.as_deref() {
        None | Some("") => PathBuf::from(DEFAULT_DATA_DIR),
        Some(dir) => PathBuf::from(dir),
    };
    Ok(StoreConfig {
        network,
        data_dir,
        lock_timeout: lock_timeout(ipam.lock_timeout_ms.as_ref())?,
        range_sets,
    })
}

/// `lockTimeoutMs`: absent or `null` is the default; otherwise an integer
/// within 1..=[`MAX_LOCK_TIMEOUT_MS`].
fn lock_timeout(value: Option<&Value>) -> Result<Duration, ConfigError> {
    millis_in_range(value, DEFAULT_LOCK_TIMEOUT, MAX_LOCK_TIMEOUT_MS)
        .map_err(|e| ConfigError::BadLockTimeout(e.0))
}

impl StoreConfig {
    /// Reads only what locates the store.
    pub fn from_value(raw: &Value) -> Result<StoreConfig, ConfigError> {
        let (keys, ipam) = NetConfKeys::decode(raw)?;
        let range_sets = keys.range_set_specs(&ipam).len();
        store_config(&keys, &ipam, range_sets)
    }

    pub fn from_slice(bytes: &[u8]) -> Result<StoreConfig, ConfigError> {
        StoreConfig::from_value(&serde_json::from_slice(bytes)?)
    }
}

impl IpamConfig {
    /// Reads and validates the configuration. `env_ip` is the value of the
    /// `IP` key of `CNI_ARGS`, if given.
    pub fn from_value(raw: &Value, env_ip: Option<&str>) -> Result<IpamConfig, ConfigError> {
        let (keys, ipam) = NetConfKeys::decode(raw)?;

        let mut requested_ips = Vec::new();
        if let Some(value) = env_ip.filter(|v| !v.is_empty()) {
            requested_ips.push(
                addr::parse_ip_maybe_prefix(value)
                    .ok_or_else(|| ConfigError::InvalidEnvIp(value.to_string()))?,
            );
        }
        let arg_ips = keys
            .args
            .as_ref()
            .and_then(|a| a.cni.as_ref())
            .and_then(|c| c.ips.as_ref());
        let runtime_ips = keys.runtime_config.as_ref().and_then(|rc| rc.ips.as_ref());
        for (source_key, values) in [
            ("args.cni.ips", arg_ips),
            ("runtimeConfig.ips", runtime_ips),
        ] {
            for value in values.into_iter().flatten() {
                requested_ips.push(addr::parse_ip_maybe_prefix(value).ok_or_else(|| {
                    ConfigError::InvalidRequestedIp {
                        source_key,
                        value: value.clone(),
                    }
                })?);
            }
        }

        let specs = keys.range_set_specs(&ipam);
        let store = store_config(&keys, &ipam, specs.len())?;
        if specs.is_empty() {
            return Err(ConfigError::NoRanges);
        }
        let range_sets = specs
            .iter()
            .enumerate()
            .map(|(index, set)| {
                RangeSet::from_specs(set)
                    .map_err(|source| ConfigError::InvalidRangeSet { index, source })
            })
            .collect::<Result<Vec<_>, _>>()?;

        let cni_version = keys.cni_version.clone().unwrap_or_default();
        let per_family = |family| range_sets.iter().filter(|s| s.family() == family).count();
        if per_family(IpFamily::V4) > 1 || per_family(IpFamily::V6) > 1 {
            // Results before 0.3.0 hold one address per family. A version
            // that does not parse is treated as old, as the reference does.
            let supports_many = cni_version
                .parse::<Semver>()
                .is_ok_and(|v| v >= Semver::new(0, 3, 0));
            if !supports_many {
                return Err(ConfigError::TooManyPerFamily(cni_version));
            }
        }
        for (i, a) in range_sets.iter().enumerate() {
            for (j, b) in range_sets.iter().enumerate().skip(i + 1) {
                if a.overlaps(b) {
                    return Err(ConfigError::RangeSetsOverlap(i, j));
                }
            }
        }

        Ok(IpamConfig {
            store,
            cni_version,
            range_sets,
            requested_ips,
            routes: ipam.routes.unwrap_or_default(),
            resolv_conf: ipam
                .resolv_conf
                .filter(|p| !p.is_empty())
                .map(PathBuf::from),
        })
    }

    pub fn from_slice(bytes: &[u8], env_ip: Option<&str>) -> Result<IpamConfig, ConfigError> {
        IpamConfig::from_value(&serde_json::from_slice(bytes)?, env_ip)
    }
}

#[cfg(test)]
mod tests;
