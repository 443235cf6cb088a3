//! cluster-ipam: one address pool for a whole cluster, kept on etcd, with
//! host-local's speed on every node.
//!
//! The pool (the configuration's range sets) is cut into blocks
//! ([`blocks`]); a node claims a free block with one etcd transaction
//! ([`etcd`]) and records it on its own disk ([`node_state`]). Inside its
//! blocks it allocates exactly as host-local does, with host-local's own
//! allocator and lease store, under its lock: no etcd round trip. Only a
//! node whose blocks are full, a requested address outside them, GC and
//! STATUS without local room talk to etcd ([`pool`]).
//!
//! What survives an etcd outage: ADD while the node's blocks have room,
//! DEL (always local; cluster reservations are released later), CHECK.
//! What needs etcd: a new block (fails with code 11 within
//! `etcd.timeoutMs`, naming the endpoints), a requested address outside
//! the node's blocks, giving blocks back.
//!
//! Module map: [`config`] reads the configuration, [`keys`] is the etcd
//! key layout (documented there, for etcdctl), [`blocks`] the block grid,
//! [`node_state`] the node's record, [`etcd`] the client (and [`tls_probe`]
//! for a member that closed a TLS connection), [`pool`] one
//! call's view of the node's share, [`verbs`] the five verbs, [`admin`]
//! the operator command's logic, [`liveness`] the heartbeat a node agent
//! keeps so that the node is known alive.

pub mod admin;
pub mod blocks;
pub mod config;
pub mod error;
pub mod etcd;
pub mod keys;
pub mod liveness;
pub mod node_state;
pub mod plugin;
pub mod pool;
pub mod tls_probe;
pub mod verbs;

pub use error::Error;
pub use plugin::ClusterIpam;
