//! The `macvlan` plugin: gives a container a macvlan link on a host
//! interface (its "master"), with addresses from IPAM or none (layer 2).
//!
//! - [`config`]: every key of the reference plugin, checked before
//!   anything changes;
//! - [`add`], [`del`], [`check`]: the verbs; GC and STATUS, which only
//!   ask the IPAM plugin, are in [`plugin`];
//! - [`error`]: the errors and their spec codes.
//!
//! On a RoCE NIC whose RDMA device is in shared mode (`rdma system show`
//! says `netns shared`), every namespace sees the parent's RDMA device, so
//! a pod with a macvlan on that NIC can use RDMA through it; the RDMA
//! shared device plugin only has to hand the pod the `/dev/infiniband`
//! character devices. See the README.

pub mod add;
pub mod check;
pub mod config;
pub mod del;
pub mod error;
pub mod plugin;
