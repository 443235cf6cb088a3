//! host-local: the CNI IPAM plugin that hands out addresses from ranges in
//! the configuration and records each reservation as a file on the node.
//!
//! A drop-in replacement for the reference plugin: same configuration, same
//! allocation order, same store layout and lock file, so a node switches
//! between the two in place (see [`store`]). What differs:
//! - lookups by container go through an index ([`index`]) instead of
//!   reading every lease, so ADD and DEL cost the same with 10 leases or
//!   10 000;
//! - the store lock is waited for a bounded time ([`libcni::lock`]);
//! - errors carry spec codes instead of 999 ([`error`]);
//! - GC (CNI 1.1) and STATUS are implemented ([`plugin`]);
//! - network names, container IDs and interface names are checked before
//!   any path is built from them.
//!
//! Module map: [`config`] reads the configuration, [`range`] and
//! [`range_set`] validate ranges and walk them, [`allocator`] picks an
//! address, [`store`] / [`index`] / [`lease`] keep the
//! reservations, [`dns`] reads `resolvConf`, [`plugin`] implements the
//! verbs.

pub mod addr;
pub mod allocator;
pub mod config;
pub mod data_dir;
pub mod dns;
pub mod error;
pub mod index;
pub mod lease;
pub mod plugin;
pub mod range;
pub mod range_set;
pub mod store;

pub use error::Error;
pub use plugin::HostLocal;
