//! etcd settings the node's administrator pins in the node policy file
//! (`"clusterIpam": {...}`, [`libcni::confine::EtcdPin`]; docs/security.md).
//!
//! With Multus the whole configuration is a namespace user's: without
//! pins, `etcd.endpoints`, `prefix` and `nodeName` name any pool, and
//! credential files the administrator allowed would open it. A pinned key
//! the configuration leaves out takes the pinned value; one it sets to
//! another value is refused (code 7) naming the key and the setting.

use std::path::Path;

use libcni::confine::{EtcdPin, Places};

use super::{non_empty, ClusterKeys, ConfigError, EtcdKeys};
use crate::keys;
use crate::node_state::normalized_endpoints;

/// Applies the node's pins to `keys`.
pub(super) fn apply(keys: &mut ClusterKeys, places: &Places) -> Result<(), ConfigError> {
    let Some(pin) = &places.policy().cluster_ipam else {
        return Ok(());
    };
    let refuse = |key: &'static str, setting: &'static str, configured: String, pinned: String| {
        ConfigError::Pinned {
            key,
            setting,
            configured,
            pinned,
            policy: places.policy_path().to_string(),
        }
    };
    if let Some(pinned) = &pin.node_name {
        match non_empty(keys.node_name.clone()) {
            Some(name) if name != *pinned => {
                return Err(refuse("nodeName", "nodeName", name, pinned.clone()))
            }
            _ => keys.node_name = Some(pinned.clone()),
        }
    }
    let etcd = keys.etcd.get_or_insert_with(EtcdKeys::default);
    apply_etcd(etcd, pin, &refuse)
}

type Refuse<'a> = dyn Fn(&'static str, &'static str, String, String) -> ConfigError + 'a;

fn apply_etcd(etcd: &mut EtcdKeys, pin: &EtcdPin, refuse: &Refuse<'_>) -> Result<(), ConfigError> {
    if let Some(pinned) = &pin.endpoints {
        let given: Vec<String> = etcd
            .endpoints
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter(|e| !e.trim().is_empty())
            .collect();
        if given.is_empty() {
            etcd.endpoints = Some(pinned.clone());
        } else if normalized_endpoints(&given) != normalized_endpoints(pinned) {
            return Err(refuse(
                "etcd.endpoints",
                "endpoints",
                given.join(","),
                pinned.join(","),
            ));
        }
    }
    if let Some(pinned) = &pin.prefix {
        match non_empty(etcd.prefix.clone()) {
            Some(given) if keys::normalize_prefix(&given) != keys::normalize_prefix(pinned) => {
                return Err(refuse("etcd.prefix", "prefix", given, pinned.clone()))
            }
            _ => etcd.prefix = Some(pinned.clone()),
        }
    }
    if let Some(pinned) = &pin.username {
        match non_empty(etcd.username.clone()) {
            Some(given) if given != *pinned => {
                return Err(refuse("etcd.username", "username", given, pinned.clone()))
            }
            _ => etcd.username = Some(pinned.clone()),
        }
    }
    let files = [
        ("etcd.caFile", "caFile", &mut etcd.ca_file, &pin.ca_file),
        (
            "etcd.certFile",
            "certFile",
            &mut etcd.cert_file,
            &pin.cert_file,
        ),
        ("etcd.keyFile", "keyFile", &mut etcd.key_file, &pin.key_file),
        (
            "etcd.passwordFile",
            "passwordFile",
            &mut etcd.password_file,
            &pin.password_file,
        ),
    ];
    for (key, setting, given, pinned) in files {
        let Some(pinned) = pinned else { continue };
        let pinned_text = pinned.display().to_string();
        match non_empty(given.clone()) {
            Some(path) if Path::new(&path) != pinned.as_path() => {
                return Err(refuse(key, setting, path, pinned_text))
            }
            _ => *given = Some(pinned_text),
        }
    }
    Ok(())
}
