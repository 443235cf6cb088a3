//! STATUS of the node's networks each pass, and the log line when a
//! network's status changes.

use std::collections::BTreeMap;

use libcni::conf::NetworkConfigList;
use libcni::runtime::CniConfig;

/// A network's answer to STATUS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetStatus {
    Ready,
    /// The first plugin that cannot serve ADD: its code (50, 51, ...; none
    /// when the plugin could not be run at all) and message.
    NotReady {
        code: Option<u32>,
        message: String,
    },
}

impl std::fmt::Display for NetStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NetStatus::Ready => write!(f, "ready"),
            NetStatus::NotReady {
                code: Some(code),
                message,
            } => write!(f, "not ready (code {code}): {message}"),
            NetStatus::NotReady {
                code: None,
                message,
            } => write!(f, "not ready: {message}"),
        }
    }
}

/// STATUS of every network (lists before 1.1.0 are ready: they have no
/// STATUS).
pub fn status_all(
    cni: &CniConfig,
    configs: &BTreeMap<String, NetworkConfigList>,
) -> BTreeMap<String, NetStatus> {
    configs
        .iter()
        .map(|(name, list)| {
            let status = match cni.get_status_network_list(list) {
                Ok(()) => NetStatus::Ready,
                Err(e) => NetStatus::NotReady {
                    code: e.code().map(|c| c.as_u32()),
                    message: e.to_string().lines().collect::<Vec<_>>().join("; "),
                },
            };
            (name.clone(), status)
        })
        .collect()
}

/// The log lines for what changed since `before` (a network seen for the
/// first time counts as a change; one that went away is said once).
pub fn changes(
    before: &BTreeMap<String, NetStatus>,
    now: &BTreeMap<String, NetStatus>,
) -> Vec<String> {
    let mut lines = Vec::new();
    for (name, status) in now {
        if before.get(name) != Some(status) {
            lines.push(format!("network {name}: {status}"));
        }
    }
    for name in before.keys().filter(|n| !now.contains_key(*n)) {
        lines.push(format!("network {name}: no longer configured"));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn not_ready(code: u32, message: &str) -> NetStatus {
        NetStatus::NotReady {
            code: Some(code),
            message: message.into(),
        }
    }

    #[test]
    fn only_changes_are_told() {
        let first = BTreeMap::from([
            ("a".to_string(), NetStatus::Ready),
            ("b".to_string(), not_ready(50, "range full")),
        ]);
        assert_eq!(
            changes(&BTreeMap::new(), &first),
            vec![
                "network a: ready".to_string(),
                "network b: not ready (code 50): range full".to_string()
            ]
        );
        assert_eq!(changes(&first, &first), Vec::<String>::new());
        let second = BTreeMap::from([
            ("b".to_string(), NetStatus::Ready),
            (
                "c".to_string(),
                NetStatus::NotReady {
                    code: None,
                    message: "failed to find plugin \"bridge\"".into(),
                },
            ),
        ]);
        assert_eq!(
            changes(&first, &second),
            vec![
                "network b: ready".to_string(),
                "network c: not ready: failed to find plugin \"bridge\"".to_string(),
                "network a: no longer configured".to_string(),
            ]
        );
    }
}
