//! The configuration: host-local's shapes plus the pool's and etcd's keys.
//!
//! ```json
//! "ipam": {
//!     "type": "cluster-ipam",
//!     "ranges": [ [ {"subnet": "10.20.0.0/16", "gateway": "10.20.0.1"} ],
//!                 [ {"subnet": "fd00:20::/64"} ] ],
//!     "routes": [ {"dst": "10.20.0.0/16"} ],
//!     "resolvConf": "/etc/resolv.conf",
//!     "dns": {"nameservers": ["10.20.0.53"], "search": ["fabric.local"]},
//!                                         inline DNS; wins over resolvConf
//!     "blockSize": 26,                    IPv4 block prefix length (default 26: 64 addresses)
//!     "blockSize6": 122,                  IPv6 block prefix length (default 122: 64 addresses)
//!     "nodeName": "gpu-node-7",           default: the host name
//!     "dataDir": "/var/lib/cni/cluster-ipam",
//!     "exclude": ["10.20.0.0/24", "10.20.255.254"],
//!     "lockTimeoutMs": 10000,
//!     "etcd": {
//!         "endpoints": ["https://10.0.0.11:2379", "https://10.0.0.12:2379"],
//!         "caFile": "/etc/cni/cluster-ipam/ca.pem",
//!         "certFile": "/etc/cni/cluster-ipam/client.pem",
//!         "keyFile": "/etc/cni/cluster-ipam/client-key.pem",
//!         "username": "cni", "passwordFile": "/etc/cni/cluster-ipam/password",
//!         "prefix": "/cluster-ipam",
//!         "timeoutMs": 5000
//!     }
//! }
//! ```
//!
//! Ranges, routes, DNS and requested addresses (`CNI_ARGS` `IP=`,
//! `args.cni.ips`, `runtimeConfig.ips`, `runtimeConfig.ipRanges`) are read
//! by host-local's own code, so the two plugins take a conflist the same
//! way. Everything is validated here, before any etcd request.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use host_local::config::{ConfigError as RangeConfigError, IpamConfig, StoreConfig};
use ipnetwork::IpNetwork;
use libcni::confine::{ConfineError, Place, Places};
use libcni::plugin_conf::{int_in_range, NotInRange};
use libcni::types::Dns;
use libcni::IpFamily;
use serde::Deserialize;
use serde_json::Value;

use crate::keys::{self, NameError, PoolKeys};

/// Node-local state unless `dataDir` says otherwise.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/cluster-ipam";
/// 64 addresses a block: a GPU node runs a few dozen pods at most, and a
/// /16 pool then has room for 1024 nodes.
pub const DEFAULT_BLOCK_SIZE: u8 = 26;
/// As many addresses as the IPv4 default.
pub const DEFAULT_BLOCK_SIZE6: u8 = 122;
/// Longest wait for etcd in one call unless `etcd.timeoutMs` says
/// otherwise: under the runtimes' own CNI deadlines, long enough for a
/// leader election.
pub const DEFAULT_ETCD_TIMEOUT: Duration = Duration::from_millis(5000);
/// The most `etcd.timeoutMs` may say. A call's etcd work, a block claim
/// included, holds the node's store lock for the network, so this also
/// bounds how long another ADD on the node waits behind it: 30 s is
/// longer than any election etcd needs and within the runtimes' own CNI
/// deadlines (kubelet's is 4 minutes for the whole sandbox).
pub const MAX_ETCD_TIMEOUT_MS: u64 = 30_000;
/// The most `etcd.endpoints` a configuration may list. A call asks every
/// endpoint at least once, each for at least 50 ms (etcd.rs `MIN_SHARE`),
/// even past `timeoutMs`: 64 keep that within 3.2 s, where 10,000 would
/// have held the store lock for over 8 minutes. etcd clusters have 3 to 7
/// members.
pub const MAX_ENDPOINTS: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Ranges(#[from] RangeConfigError),
    #[error("invalid cluster-ipam config: {0}")]
    Decode(#[from] serde_json::Error),
    #[error(transparent)]
    Name(#[from] NameError),
    #[error("cluster-ipam needs 'ipam.etcd.endpoints': the client URLs of the etcd cluster that holds the pool")]
    NoEndpoints,
    #[error("invalid etcd endpoint {0:?}: expected http://host:port or https://host:port")]
    BadEndpoint(String),
    #[error("ipam.etcd.endpoints lists {0} endpoints: at most {MAX_ENDPOINTS}")]
    TooManyEndpoints(usize),
    #[error("etcd endpoints mix http and https; use one scheme")]
    MixedSchemes,
    #[error("https etcd endpoints need 'ipam.etcd.caFile', the CA that signed the etcd server certificates")]
    NoCaFile,
    #[error("'ipam.etcd.{given}' needs 'ipam.etcd.{missing}' too")]
    Incomplete {
        given: &'static str,
        missing: &'static str,
    },
    #[error("TLS files are set but the etcd endpoints are http://; use https:// endpoints")]
    TlsOverHttp,
    /// The password would cross the network in the clear, to an endpoint
    /// the configuration (a namespace user's, with Multus) names.
    #[error("'ipam.etcd.passwordFile' is set but the etcd endpoints are http://: a password is only sent over TLS; use https:// endpoints")]
    PasswordOverHttp,
    /// A credential file outside the credential folders.
    #[error(transparent)]
    Confine(#[from] ConfineError),
    #[error("invalid ipam.{key} {value}: an IPv{family} block prefix length must be between the range's prefix and {max}")]
    BadBlockSize {
        key: &'static str,
        value: String,
        family: u8,
        max: u8,
    },
    #[error("ipam.{key} /{block} is larger than range {subnet} of range set {set}: blocks must fit in the subnet")]
    BlockLargerThanRange {
        key: &'static str,
        block: u8,
        subnet: IpNetwork,
        set: usize,
    },
    #[error("invalid ipam.exclude entry {0:?}: expected an address or a CIDR")]
    BadExclude(String),
    #[error("invalid ipam.etcd.timeoutMs {0}: must be an integer from 1 to {MAX_ETCD_TIMEOUT_MS} (milliseconds)")]
    BadTimeout(String),
    #[error("cannot find the host name for the default nodeName ({0}); set ipam.nodeName")]
    NoHostname(String),
    /// A key the node's administrator pinned, set to another value.
    #[error("ipam.{key} {configured:?} is not the value this node's administrator pinned ({pinned:?}, \
             \"clusterIpam\": {{\"{setting}\": ...}} in {policy}); leave the key out or set it to the pinned value")]
    Pinned {
        key: &'static str,
        setting: &'static str,
        configured: String,
        pinned: String,
        policy: String,
    },
}

/// How to reach etcd. Never printed with the password.
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    pub endpoints: Vec<String>,
    pub ca_file: Option<PathBuf>,
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    pub username: Option<String>,
    pub password_file: Option<PathBuf>,
    pub prefix: String,
    pub timeout: Duration,
}

impl std::fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdConfig")
            .field("endpoints", &self.endpoints)
            .field("ca_file", &self.ca_file)
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .field("username", &self.username)
            .field("password_file", &self.password_file)
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl EtcdConfig {
    /// The credential files set, each with its key: read and sent to etcd,
    /// so each must be inside the credential folders
    /// ([`Place::Credentials`]).
    pub fn credential_files(&self) -> Vec<(&'static str, &std::path::Path)> {
        [
            ("ipam.etcd.caFile", &self.ca_file),
            ("ipam.etcd.certFile", &self.cert_file),
            ("ipam.etcd.keyFile", &self.key_file),
            ("ipam.etcd.passwordFile", &self.password_file),
        ]
        .into_iter()
        .filter_map(|(key, file)| file.as_deref().map(|f| (key, f)))
        .collect()
    }

    pub fn uses_tls(&self) -> bool {
        self.endpoints.iter().any(|e| e.starts_with("https://"))
    }
}

/// The pool's grid: the block prefix length per family. The same on every
/// node, or blocks of two nodes could overlap; etcd keeps the first one
/// written and claims compare against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Grid {
    pub block_size: u8,
    pub block_size6: u8,
}

impl Grid {
    pub fn prefix(&self, family: IpFamily) -> u8 {
        match family {
            IpFamily::V4 => self.block_size,
            IpFamily::V6 => self.block_size6,
        }
    }

    /// The value of the `pool` key: fixed field order, so equal grids have
    /// equal bytes (what a transaction compares).
    pub fn to_value(self) -> String {
        format!(
            "{{\"blockSize\":{},\"blockSize6\":{}}}",
            self.block_size, self.block_size6
        )
    }
}

/// What every verb needs beyond host-local's store: who this node is, the
/// grid and how to reach etcd. DEL and GC read only this and the store, so
/// they work when the ranges of a configuration have become invalid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    pub store: StoreConfig,
    pub node: String,
    pub grid: Grid,
    pub exclude: Vec<IpNetwork>,
    pub etcd: EtcdConfig,
    pub keys: PoolKeys,
}

/// The validated configuration of ADD, CHECK and STATUS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddConfig {
    pub cluster: ClusterConfig,
    /// Ranges, routes, DNS and requested addresses, as host-local reads
    /// them (its `store` is [`ClusterConfig::store`]).
    pub ipam: IpamConfig,
    /// `ipam.dns`, given inline (static IPAM's shape).
    pub dns: Option<Dns>,
}

#[derive(Deserialize)]
struct NetKeys {
    #[serde(default)]
    ipam: Option<ClusterKeys>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClusterKeys {
    #[serde(default)]
    data_dir: Option<String>,
    /// Any JSON, checked by [`grid`] so that a value of the wrong type or
    /// past a u8 (300, "26") gets the message naming the key and range.
    #[serde(default)]
    block_size: Option<Value>,
    #[serde(default)]
    block_size6: Option<Value>,
    #[serde(default)]
    node_name: Option<String>,
    #[serde(default)]
    exclude: Option<Vec<String>>,
    #[serde(default)]
    etcd: Option<EtcdKeys>,
    #[serde(default)]
    dns: Option<Dns>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct EtcdKeys {
    #[serde(default)]
    endpoints: Option<Vec<String>>,
    #[serde(default)]
    ca_file: Option<String>,
    #[serde(default)]
    cert_file: Option<String>,
    #[serde(default)]
    key_file: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password_file: Option<String>,
    #[serde(default)]
    prefix: Option<String>,
    /// Any JSON, checked by [`etcd_timeout`] so that every bad value
    /// (2^63, -1, 1.5, "5000") gets the message with the range.
    #[serde(default)]
    timeout_ms: Option<Value>,
}

impl ClusterKeys {
    fn from_value(raw: &Value) -> Result<ClusterKeys, ConfigError> {
        Ok(NetKeys::deserialize(raw)?
            .ipam
            .ok_or(RangeConfigError::MissingIpam)?)
    }
}

fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.is_empty())
}

fn path(value: Option<String>) -> Option<PathBuf> {
    non_empty(value).map(PathBuf::from)
}

/// `etcd.timeoutMs`: absent or `null` is the default; otherwise an integer
/// within 1..=[`MAX_ETCD_TIMEOUT_MS`].
fn etcd_timeout(value: Option<&Value>) -> Result<Duration, ConfigError> {
    libcni::plugin_conf::millis_in_range(value, DEFAULT_ETCD_TIMEOUT, MAX_ETCD_TIMEOUT_MS)
        .map_err(|e| ConfigError::BadTimeout(e.0))
}

fn etcd_config(keys: Option<EtcdKeys>) -> Result<EtcdConfig, ConfigError> {
    let keys = keys.ok_or(ConfigError::NoEndpoints)?;
    let endpoints: Vec<String> = keys
        .endpoints
        .unwrap_or_default()
        .into_iter()
        .filter(|e| !e.trim().is_empty())
        .collect();
    if endpoints.is_empty() {
        return Err(ConfigError::NoEndpoints);
    }
    if endpoints.len() > MAX_ENDPOINTS {
        return Err(ConfigError::TooManyEndpoints(endpoints.len()));
    }
    for endpoint in &endpoints {
        let rest = endpoint
            .strip_prefix("https://")
            .or_else(|| endpoint.strip_prefix("http://"))
            .ok_or_else(|| ConfigError::BadEndpoint(endpoint.clone()))?;
        let host_port = rest.strip_suffix('/').unwrap_or(rest);
        let port_ok = host_port
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !port_ok || host_port.contains('/') {
            return Err(ConfigError::BadEndpoint(endpoint.clone()));
        }
    }
    let https = endpoints
        .iter()
        .filter(|e| e.starts_with("https://"))
        .count();
    if https != 0 && https != endpoints.len() {
        return Err(ConfigError::MixedSchemes);
    }
    let config = EtcdConfig {
        endpoints,
        ca_file: path(keys.ca_file),
        cert_file: path(keys.cert_file),
        key_file: path(keys.key_file),
        username: non_empty(keys.username),
        password_file: path(keys.password_file),
        prefix: non_empty(keys.prefix).map_or_else(
            || keys::DEFAULT_PREFIX.to_string(),
            |p| keys::normalize_prefix(&p).to_string(),
        ),
        timeout: etcd_timeout(keys.timeout_ms.as_ref())?,
    };
    keys::check_prefix(&config.prefix)?;
    // Keys that only work together, each way round.
    let together = [
        (
            "certFile",
            config.cert_file.is_some(),
            "keyFile",
            config.key_file.is_some(),
        ),
        (
            "username",
            config.username.is_some(),
            "passwordFile",
            config.password_file.is_some(),
        ),
    ];
    for (a, has_a, b, has_b) in together {
        if has_a != has_b {
            let (given, missing) = if has_a { (a, b) } else { (b, a) };
            return Err(ConfigError::Incomplete { given, missing });
        }
    }
    if config.uses_tls() {
        if config.ca_file.is_none() {
            return Err(ConfigError::NoCaFile);
        }
    } else if config.ca_file.is_some() || config.cert_file.is_some() {
        return Err(ConfigError::TlsOverHttp);
    } else if config.password_file.is_some() {
        return Err(ConfigError::PasswordOverHttp);
    }
    let files = config.credential_files();
    if !files.is_empty() {
        let places = Places::node()?;
        for (key, file) in files {
            places.confine(key, Place::Credentials, file)?;
        }
    }
    Ok(config)
}

fn grid(keys: &ClusterKeys) -> Result<Grid, ConfigError> {
    // A block needs room for at least one address besides its network
    // address, as a range does.
    let prefix = |key: &'static str, value: Option<&Value>, family: u8, max: u8, default: u8| {
        match int_in_range(value, 1..=u64::from(max)) {
            Ok(n) => Ok(n.and_then(|n| u8::try_from(n).ok()).unwrap_or(default)),
            Err(NotInRange(value)) => Err(ConfigError::BadBlockSize {
                key,
                value,
                family,
                max,
            }),
        }
    };
    Ok(Grid {
        block_size: prefix(
            "blockSize",
            keys.block_size.as_ref(),
            4,
            31,
            DEFAULT_BLOCK_SIZE,
        )?,
        block_size6: prefix(
            "blockSize6",
            keys.block_size6.as_ref(),
            6,
            127,
            DEFAULT_BLOCK_SIZE6,
        )?,
    })
}

fn exclude(values: Option<Vec<String>>) -> Result<Vec<IpNetwork>, ConfigError> {
    values
        .unwrap_or_default()
        .into_iter()
        .map(|text| {
            let net = if text.contains('/') {
                text.parse::<IpNetwork>().ok()
            } else {
                text.parse::<IpAddr>().ok().map(IpNetwork::from)
            };
            // Host bits are cleared: "10.0.0.5/24" excludes the /24.
            net.and_then(|n| IpNetwork::new(n.network(), n.prefix()).ok())
                .ok_or(ConfigError::BadExclude(text))
        })
        .collect()
}

fn host_name() -> Result<String, ConfigError> {
    let name = nix::unistd::gethostname().map_err(|e| ConfigError::NoHostname(e.to_string()))?;
    name.into_string()
        .map_err(|raw| ConfigError::NoHostname(format!("not UTF-8: {raw:?}")))
}

/// Where the leases live, with this plugin's default `dataDir`: all a DEL
/// needs when the rest of the configuration has become unusable.
pub fn store_config(raw: &Value) -> Result<StoreConfig, ConfigError> {
    let mut store = StoreConfig::from_value(raw)?;
    let given = raw
        .get("ipam")
        .and_then(|ipam| ipam.get("dataDir"))
        .and_then(Value::as_str)
        .is_some_and(|dir| !dir.is_empty());
    if given {
        confine_data_dir(&store)?;
    } else {
        store.data_dir = PathBuf::from(DEFAULT_DATA_DIR);
    }
    Ok(store)
}

/// A configured `dataDir` only inside the state folders (/var/lib/cni,
/// /run/cni, or the node policy's): the leases there are written and
/// deleted, and with Multus the key is a namespace user's.
fn confine_data_dir(store: &StoreConfig) -> Result<(), ConfigError> {
    Places::node()?.confine("ipam.dataDir", Place::State, &store.data_dir)?;
    Ok(())
}

impl ClusterConfig {
    /// Reads what every verb needs. `store` comes from host-local's reader
    /// with this plugin's default `dataDir`.
    pub fn from_value(raw: &Value) -> Result<ClusterConfig, ConfigError> {
        let mut store = StoreConfig::from_value(raw)?;
        ClusterConfig::with_store(raw, &mut store)
    }

    fn with_store(raw: &Value, store: &mut StoreConfig) -> Result<ClusterConfig, ConfigError> {
        ClusterConfig::from_keys(ClusterKeys::from_value(raw)?, store)
    }

    fn from_keys(
        mut keys: ClusterKeys,
        store: &mut StoreConfig,
    ) -> Result<ClusterConfig, ConfigError> {
        pins::apply(&mut keys, &Places::node()?)?;
        if non_empty(keys.data_dir.clone()).is_none() {
            store.data_dir = PathBuf::from(DEFAULT_DATA_DIR);
        } else {
            confine_data_dir(store)?;
        }
        let node = match non_empty(keys.node_name.clone()) {
            Some(name) => name,
            None => host_name()?,
        };
        keys::check_node(&node)?;
        let grid = grid(&keys)?;
        let exclude = exclude(keys.exclude)?;
        let etcd = etcd_config(keys.etcd)?;
        let keys = PoolKeys::new(&etcd.prefix, &store.network)?;
        Ok(ClusterConfig {
            store: store.clone(),
            node,
            grid,
            exclude,
            etcd,
            keys,
        })
    }
}

impl AddConfig {
    /// Reads and validates everything. `env_ip` is the `IP` key of
    /// `CNI_ARGS`.
    pub fn from_value(raw: &Value, env_ip: Option<&str>) -> Result<AddConfig, ConfigError> {
        let mut ipam = IpamConfig::from_value(raw, env_ip)?;
        let mut keys = ClusterKeys::from_value(raw)?;
        let dns = keys.dns.take();
        let cluster = ClusterConfig::from_keys(keys, &mut ipam.store)?;
        for (set, range_set) in ipam.range_sets.iter().enumerate() {
            for range in range_set.ranges() {
                let family = range_set.family();
                let block = cluster.grid.prefix(family);
                if block < range.subnet.prefix() {
                    return Err(ConfigError::BlockLargerThanRange {
                        key: match family {
                            IpFamily::V4 => "blockSize",
                            IpFamily::V6 => "blockSize6",
                        },
                        block,
                        subnet: range.subnet,
                        set,
                    });
                }
            }
        }
        Ok(AddConfig { cluster, ipam, dns })
    }
}

mod pins;

#[cfg(test)]
mod tests;
