//! What a node knows of its share of the pool, on its own disk, beside the
//! leases: `<dataDir>/<network>/cluster-blocks.json` (not an address, so
//! host-local's lease scans pass it by).
//!
//! ```json
//! {"version":1,"node":"gpu-node-7",
//!  "blocks":[{"cidr":"10.20.0.64/26","revision":812,"reserved":["10.20.0.70"]}],
//!  "claimPending":false,
//!  "clusterIps":[{"ip":"10.20.9.9","containerId":"..","ifname":"net1"}],
//!  "unreleased":[]}
//! ```
//!
//! - `pool`: the pool the record belongs to: the etcd cluster's ID (hex,
//!   learned at the first answer from etcd), the key prefix, the network
//!   and the endpoints last used. A record that holds anything (blocks,
//!   reservations, a pending claim) serves only that pool: another prefix
//!   or network, or endpoints that turn out to reach another etcd cluster,
//!   is [`StateError::OtherPool`] (code 7), never a mix of two pools. A
//!   record holding nothing follows the configuration. Records written
//!   before this key existed get it at their next write.
//! - `blocks`: the blocks this node holds, each listed once, each with the revision etcd
//!   created its key at (what a release compares) and the addresses that
//!   were reserved cluster-wide inside it when it was claimed.
//! - `claimPending`: set before a claim is sent and cleared once it is
//!   recorded; a call that finds it set (the claimer was killed) reads
//!   etcd and adopts any block etcd says is this node's.
//!   Without etcd, `settleAfter` holds further tries off for a while.
//! - `clusterIps`: requested addresses outside the node's blocks, reserved
//!   in etcd under `ips/`; DEL deletes their keys.
//! - `revoked`: blocks this node held that etcd no longer gives it (an
//!   operator released them while the node was silent), found when the
//!   node next read the pool: never handed out from again; STATUS reports
//!   them while pods hold addresses in them.
//! - `unreleased`: such keys whose delete failed (etcd down at DEL), sent
//!   again at the next call that reaches etcd.
//!
//! Read and written only while the store lock is held; written to a
//! temporary file, synced and renamed over, so a crash leaves the old or
//! the new state, never half of one.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};

use crate::etcd::IpValue;

pub const STATE_FILE: &str = "cluster-blocks.json";
const STATE_VERSION: u32 = 1;
/// A node's state is a few KiB; anything far larger is not ours.
const MAX_STATE_FILE: u64 = 16 << 20;

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("failed to {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error(
        "{path} is not a cluster-ipam node state: {detail}; move it away to rebuild it from etcd"
    )]
    Corrupt { path: PathBuf, detail: String },
    #[error("{path} holds the blocks of node {recorded:?}, but this node is {configured:?}: one dataDir serves one nodeName")]
    OtherNode {
        path: PathBuf,
        recorded: String,
        configured: String,
    },
    /// The configuration names another pool than the one the node's
    /// blocks came from.
    #[error("{path} holds blocks of the pool in {recorded}, but this configuration names {configured}: \
             using them in another pool would hand out addresses twice. Restore the previous etcd settings \
             (endpoints, prefix), or remove this network's pods from the node and move {path} away to start in the new pool")]
    OtherPool {
        path: PathBuf,
        recorded: String,
        configured: String,
    },
}

/// Which pool a record belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolIdentity {
    /// The etcd cluster's ID as hex (etcdctl's spelling), once etcd has
    /// answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    /// Normalized: no trailing slash.
    pub prefix: String,
    pub network: String,
    /// The endpoints last used, sorted, without trailing slashes: other
    /// endpoints are checked to reach the same cluster before the blocks
    /// are used again.
    #[serde(default)]
    pub endpoints: Vec<String>,
}

impl PoolIdentity {
    pub fn new(prefix: &str, network: &str, endpoints: &[String]) -> PoolIdentity {
        PoolIdentity {
            cluster_id: None,
            prefix: prefix.to_string(),
            network: network.to_string(),
            endpoints: normalized_endpoints(endpoints),
        }
    }

    /// The same prefix and network (the cluster is compared separately).
    pub fn same_keys(&self, other: &PoolIdentity) -> bool {
        self.prefix == other.prefix && self.network == other.network
    }
}

/// An etcd cluster ID as etcdctl prints it.
pub fn cluster_id_text(id: u64) -> String {
    format!("{id:x}")
}

/// Endpoints compared as a set, `http://a:1/` as `http://a:1`.
pub fn normalized_endpoints(endpoints: &[String]) -> Vec<String> {
    let mut list: Vec<String> = endpoints
        .iter()
        .map(|e| e.trim_end_matches('/').to_string())
        .collect();
    list.sort();
    list.dedup();
    list
}

impl std::fmt::Display for PoolIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.cluster_id {
            Some(id) => write!(f, "etcd cluster {id}")?,
            None => write!(f, "etcd at {}", self.endpoints.join(","))?,
        }
        write!(f, ", prefix {}, network {}", self.prefix, self.network)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldBlock {
    pub cidr: IpNetwork,
    pub revision: i64,
    #[serde(default)]
    pub reserved: Vec<IpAddr>,
}

/// A block etcd no longer gives this node (an operator released it while
/// the node was silent): never handed out from again; kept while pods
/// hold addresses in it, which STATUS reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RevokedBlock {
    pub cidr: IpNetwork,
    pub revision: i64,
    /// Unix seconds when the node found out.
    pub found: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterIp {
    pub ip: IpAddr,
    pub container_id: String,
    pub ifname: String,
}

impl ClusterIp {
    pub fn owner(&self, node: &str) -> IpValue {
        IpValue {
            node: node.to_string(),
            container_id: self.container_id.clone(),
            ifname: self.ifname.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeState {
    pub version: u32,
    pub node: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<PoolIdentity>,
    #[serde(default)]
    pub blocks: Vec<HeldBlock>,
    #[serde(default)]
    pub claim_pending: bool,
    /// Unix seconds before which a pending claim is not settled again:
    /// set when etcd could not be reached for it, so that ADDs served from
    /// held blocks during an outage do not each wait for etcd.
    #[serde(default)]
    pub settle_after: u64,
    #[serde(default)]
    pub cluster_ips: Vec<ClusterIp>,
    #[serde(default)]
    pub unreleased: Vec<ClusterIp>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub revoked: Vec<RevokedBlock>,
}

impl NodeState {
    pub fn new(node: &str) -> NodeState {
        NodeState {
            version: STATE_VERSION,
            node: node.to_string(),
            pool: None,
            blocks: Vec::new(),
            claim_pending: false,
            settle_after: 0,
            cluster_ips: Vec::new(),
            unreleased: Vec::new(),
            revoked: Vec::new(),
        }
    }

    pub fn path(store_dir: &Path) -> PathBuf {
        store_dir.join(STATE_FILE)
    }

    /// The state of `node` in `store_dir`; a fresh one when there is none.
    /// Call with the store lock held.
    pub fn load(store_dir: &Path, node: &str) -> Result<NodeState, StateError> {
        let path = NodeState::path(store_dir);
        let mut text = Vec::new();
        match File::open(&path) {
            Ok(file) => file
                .take(MAX_STATE_FILE)
                .read_to_end(&mut text)
                .map_err(|source| StateError::Io {
                    action: "read",
                    path: path.clone(),
                    source,
                })?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(NodeState::new(node)),
            Err(source) => {
                return Err(StateError::Io {
                    action: "open",
                    path,
                    source,
                })
            }
        };
        let mut state: NodeState =
            serde_json::from_slice(&text).map_err(|e| StateError::Corrupt {
                path: path.clone(),
                detail: e.to_string(),
            })?;
        if state.version != STATE_VERSION {
            return Err(StateError::Corrupt {
                path,
                detail: format!(
                    "version {} (this plugin writes {STATE_VERSION})",
                    state.version
                ),
            });
        }
        if state.node != node {
            return Err(StateError::OtherNode {
                path,
                recorded: state.node,
                configured: node.to_string(),
            });
        }
        // Records of earlier versions may list a block twice (issue 30):
        // its addresses would overlap themselves and the node would claim
        // a block at every ADD.
        let before = state.blocks.len();
        let mut seen = std::collections::HashSet::new();
        state.blocks.retain(|b| seen.insert(b.cidr));
        if state.blocks.len() != before {
            log::warn!(
                "{}: {} duplicate block entries dropped",
                path.display(),
                before - state.blocks.len()
            );
        }
        Ok(state)
    }

    /// Whether the record holds anything of its pool: then it may serve
    /// that pool only.
    pub fn holds_anything(&self) -> bool {
        !self.blocks.is_empty()
            || !self.cluster_ips.is_empty()
            || !self.unreleased.is_empty()
            || self.claim_pending
    }

    /// Writes the state atomically. Call with the store lock held.
    pub fn save(&self, store_dir: &Path) -> Result<(), StateError> {
        let path = NodeState::path(store_dir);
        let fresh = store_dir.join(format!(".{STATE_FILE}.tmp"));
        let io_error = |action: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| StateError::Io {
                action,
                path,
                source,
            }
        };
        let text = serde_json::to_vec(self).map_err(|e| StateError::Corrupt {
            path: path.clone(),
            detail: e.to_string(),
        })?;
        let mut file = File::create(&fresh).map_err(io_error("create", &fresh))?;
        file.write_all(&text)
            .and_then(|()| file.sync_all())
            .map_err(io_error("write", &fresh))?;
        fs::rename(&fresh, &path).map_err(io_error("rename into place", &path))?;
        // The rename itself must survive a power cut: a claim recorded
        // only in the page cache would be a block etcd gives this node
        // that the node forgets (adopted again, but only at the next claim).
        if let Ok(dir) = File::open(store_dir) {
            let _ = dir.sync_all();
        }
        Ok(())
    }

    pub fn holds(&self, cidr: IpNetwork) -> bool {
        self.blocks.iter().any(|b| b.cidr == cidr)
    }

    /// The held block containing `ip`.
    pub fn block_of(&self, ip: IpAddr) -> Option<&HeldBlock> {
        self.blocks.iter().find(|b| b.cidr.contains(ip))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            NodeState::load(dir.path(), "n1").unwrap(),
            NodeState::new("n1")
        );
        let mut state = NodeState::new("n1");
        state.blocks.push(HeldBlock {
            cidr: "10.0.0.64/26".parse().unwrap(),
            revision: 7,
            reserved: vec!["10.0.0.70".parse().unwrap()],
        });
        state.claim_pending = true;
        state.save(dir.path()).unwrap();
        assert_eq!(NodeState::load(dir.path(), "n1").unwrap(), state);
        assert!(matches!(
            NodeState::load(dir.path(), "n2"),
            Err(StateError::OtherNode { .. })
        ));
        fs::write(NodeState::path(dir.path()), b"{not json").unwrap();
        assert!(matches!(
            NodeState::load(dir.path(), "n1"),
            Err(StateError::Corrupt { .. })
        ));
    }
}
