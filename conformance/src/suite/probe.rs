//! What the plugins under test say about themselves: the spec versions
//! each claims (VERSION), which decide the versions and verbs the suite
//! exercises.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::sandbox::Call;
use crate::testnet::ALL_VERSIONS;

/// The plugin types the suite has scenarios for, in report order.
pub const KNOWN_TYPES: [&str; 19] = [
    "loopback",
    "host-local",
    "bridge",
    "portmap",
    "rdma-sriov",
    "cluster-ipam",
    "macvlan",
    "ipvlan",
    "vlan",
    "host-device",
    "static",
    "tuning",
    "sbr",
    "ptp",
    "tap",
    "dummy",
    "bandwidth",
    "firewall",
    "vrf",
];

/// A plugin binary and the versions it claims.
#[derive(Debug, Clone)]
pub struct Plugin {
    pub name: String,
    pub path: PathBuf,
    /// Claimed versions the suite knows the layout of, oldest first.
    pub versions: Vec<&'static str>,
    /// Claimed versions the suite does not know (reported, not exercised).
    pub unknown_versions: Vec<String>,
    /// The raw VERSION reply, or why there was none.
    pub version_reply: Result<Value, String>,
}

impl Plugin {
    /// The directory the plugin is in (CNI_PATH for its delegates).
    pub fn dir(&self) -> PathBuf {
        self.path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."))
    }

    pub fn claims(&self, version: &str) -> bool {
        self.versions.contains(&version)
    }

    pub fn highest(&self) -> Option<&'static str> {
        self.versions.last().copied()
    }

    /// The highest claimed version not above `cap`.
    pub fn highest_up_to(&self, cap: &str) -> Option<&'static str> {
        let cap_index = ALL_VERSIONS.iter().position(|v| *v == cap)?;
        self.versions
            .iter()
            .rev()
            .find(|v| {
                ALL_VERSIONS
                    .iter()
                    .position(|a| a == *v)
                    .is_some_and(|i| i <= cap_index)
            })
            .copied()
    }
}

/// Asks `path` for VERSION the way runtimes do.
pub fn probe(dir: &Path, name: &str) -> Option<Plugin> {
    let path = dir.join(name);
    if !path.is_file() {
        return None;
    }
    let reply = Call::new("VERSION")
        .stdin_json(&json!({"cniVersion": "1.1.0"}))
        .run(&path);
    let version_reply = match reply {
        Ok(r) => r.result(),
        Err(e) => Err(e.to_string()),
    };
    let claimed: Vec<String> = version_reply
        .as_ref()
        .ok()
        .and_then(|v| v["supportedVersions"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    let versions = ALL_VERSIONS
        .iter()
        .copied()
        .filter(|v| claimed.iter().any(|c| c == v))
        .collect();
    let unknown_versions = claimed
        .iter()
        .filter(|c| !ALL_VERSIONS.contains(&c.as_str()))
        .cloned()
        .collect();
    Some(Plugin {
        name: name.to_string(),
        path,
        versions,
        unknown_versions,
        version_reply,
    })
}

/// The plugins of a directory the suite knows how to exercise.
#[derive(Debug, Clone)]
pub struct Catalogue {
    pub dir: PathBuf,
    pub plugins: Vec<Plugin>,
}

impl Catalogue {
    pub fn probe(dir: &Path) -> Catalogue {
        Catalogue {
            dir: dir.to_path_buf(),
            plugins: KNOWN_TYPES.iter().filter_map(|n| probe(dir, n)).collect(),
        }
    }

    pub fn get(&self, name: &str) -> Option<&Plugin> {
        self.plugins.iter().find(|p| p.name == name)
    }

    /// The highest version every named plugin claims, from `candidates`
    /// (highest first wins).
    pub fn common_version(&self, names: &[&str], candidates: &[&str]) -> Option<String> {
        candidates
            .iter()
            .filter(|c| {
                names
                    .iter()
                    .all(|n| self.get(n).is_some_and(|p| p.claims(c)))
            })
            .max_by_key(|c| ALL_VERSIONS.iter().position(|a| a == *c))
            .map(|c| c.to_string())
    }
}
