//! The plugin's errors and their spec codes.
//!
//! | condition | code |
//! |---|---|
//! | configuration invalid (ranges, blockSize, names, etcd keys), before any request | 7 |
//! | the pool in etcd has another block grid than this configuration | 7 |
//! | the node's record belongs to another pool (etcd cluster, prefix, network) | 7 |
//! | etcd refused the request (credentials, permissions) or the TLS handshake | 7: the `etcd` block of the configuration is wrong |
//! | `CNI_ARGS`, container ID or interface name invalid | 4 |
//! | local disk failure, unreadable node state | 5 |
//! | etcd unreachable within `etcd.timeoutMs`, store lock not obtained | 11 (try again later) |
//! | requested address held elsewhere (another node's block, another pod) | 11, as host-local |
//! | no free block left and the node's blocks are full | 50 |
//! | STATUS: blocks released by an operator while the node was silent still hold pods' addresses | 51 |
//! | CHECK finds a lease outside the node's blocks and reservations | 999, as host-local's CHECK without a lease: the suite's rule for a CHECK that finds a difference |
//! | host-local's own conditions (duplicate ADD 100, CHECK without a lease 999, ...) | host-local's codes |

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use libcni::args::ArgsError;
use libcni::error::{CniError, ErrorCode, ToCniError};

use host_local::config::ConfigError as RangeConfigError;

use crate::config::ConfigError;
use crate::etcd::EtcdError;
use crate::node_state::StateError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Args(#[from] ArgsError),
    /// host-local's own errors (store, allocation, attachment names).
    #[error(transparent)]
    HostLocal(#[from] host_local::Error),
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Etcd(#[from] EtcdError),
    #[error("network {network}: the pool in etcd has the block grid {etcd}, this configuration {ours}: every node of a network must use the same blockSize and blockSize6")]
    GridMismatch {
        network: String,
        etcd: String,
        ours: String,
    },
    #[error("network {network}: no free block left in {ranges}, and this node's blocks are full")]
    PoolExhausted { network: String, ranges: String },
    /// Blocks an operator released while this node was silent, with pods
    /// still holding addresses in them.
    #[error("network {network}: block(s) {blocks} of node {node} were released in etcd while the node was silent \
             (cluster-ipam-admin release-node); they hand out no address again, but {leases} pod address(es) in them \
             may now be given to pods of other nodes: delete those pods so they get new addresses")]
    BlocksReleased {
        network: String,
        node: String,
        blocks: String,
        leases: usize,
    },
    #[error("gave up claiming a block after {0} rounds lost to other nodes")]
    ClaimContention(usize),
    #[error("requested IP address {ip} is in block {block} of node {node}")]
    RequestedInOtherBlock {
        ip: IpAddr,
        block: IpNetwork,
        node: String,
    },
    #[error("requested IP address {ip} is reserved by container {container_id} on node {node}")]
    RequestedTaken {
        ip: IpAddr,
        node: String,
        container_id: String,
    },
    #[error("requested IP address {0} is excluded from the pool or is a gateway")]
    RequestedExcluded(IpAddr),
    #[error("lease {ip} of {attachment} is in none of this node's blocks or reservations")]
    LeaseNotOurs { ip: IpAddr, attachment: String },
    #[error("GC: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Several(Vec<Error>),
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<host_local::store::StoreError> for Error {
    fn from(e: host_local::store::StoreError) -> Error {
        Error::HostLocal(host_local::Error::Store(e))
    }
}

impl Error {
    pub fn code(&self) -> ErrorCode {
        match self {
            // As host-local: CNI_ARGS IP is the environment's fault.
            Error::Config(ConfigError::Ranges(RangeConfigError::InvalidEnvIp(_))) => {
                ErrorCode::InvalidEnvironment
            }
            Error::Config(_) => ErrorCode::InvalidNetworkConfig,
            Error::Args(e) => e.to_cni_error().code,
            Error::HostLocal(e) => e.code(),
            Error::State(StateError::OtherNode { .. } | StateError::OtherPool { .. }) => {
                ErrorCode::InvalidNetworkConfig
            }
            Error::State(_) => ErrorCode::Io,
            Error::Etcd(EtcdError::Unreachable { .. }) => ErrorCode::TryAgainLater,
            Error::Etcd(EtcdError::Refused { .. }) => ErrorCode::InvalidNetworkConfig,
            Error::Etcd(EtcdError::Tls { .. }) => ErrorCode::InvalidNetworkConfig,
            Error::Etcd(EtcdError::File { .. }) => ErrorCode::Io,
            Error::Etcd(EtcdError::UnusableFile { .. }) => ErrorCode::InvalidNetworkConfig,
            Error::Etcd(EtcdError::Runtime(_)) => ErrorCode::Internal,
            Error::Etcd(EtcdError::BadValue { .. }) => ErrorCode::Internal,
            Error::GridMismatch { .. } => ErrorCode::InvalidNetworkConfig,
            Error::PoolExhausted { .. } => ErrorCode::NotAvailable,
            // ADDs go on from other blocks; the pods in the released ones
            // may lose connectivity to duplicates of their addresses.
            Error::BlocksReleased { .. } => ErrorCode::NotAvailableLimitedConnectivity,
            Error::ClaimContention(_) => ErrorCode::TryAgainLater,
            Error::RequestedInOtherBlock { .. } | Error::RequestedTaken { .. } => {
                ErrorCode::TryAgainLater
            }
            Error::RequestedExcluded(_) => ErrorCode::InvalidNetworkConfig,
            Error::LeaseNotOurs { .. } => ErrorCode::Internal,
            // The first error's code: the one a retry must get past first.
            Error::Several(errors) => errors.first().map_or(ErrorCode::Internal, Error::code),
            Error::Internal(_) => ErrorCode::Internal,
        }
    }
}

impl ToCniError for Error {
    fn to_cni_error(&self) -> CniError {
        CniError::new(self.code(), self.to_string())
    }
}

#[cfg(test)]
mod tests;
