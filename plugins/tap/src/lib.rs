//! The `tap` plugin: gives a container (typically a VM runtime inside a
//! pod) a persistent tap device named `CNI_IFNAME`, optionally a port of
//! a bridge in the container, with addresses from IPAM or none (layer 2).
//!
//! - [`config`]: every key of the reference plugin, checked before
//!   anything changes;
//! - [`tuntap`]: the tap made with the tun driver's ioctls, owner and
//!   group optional, and in an SELinux context when asked;
//! - [`add`], [`check`]: the verbs; DEL, GC and STATUS, which share
//!   their steps with macvlan's, are in [`plugin`];
//! - [`error`]: the errors and their spec codes.

pub mod add;
pub mod check;
pub mod config;
pub mod error;
pub mod plugin;
pub mod tuntap;
