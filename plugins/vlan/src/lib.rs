//! The `vlan` plugin: gives a container an 802.1Q VLAN link on a host
//! interface (its "master"), with addresses from IPAM.
//!
//! - [`config`]: every key of the reference plugin, checked before
//!   anything changes;
//! - [`add`], [`del`], [`check`]: the verbs; GC and STATUS, which only
//!   ask the IPAM plugin, are in [`plugin`];
//! - [`error`]: the errors and their spec codes.
//!
//! A kernel without 802.1Q (module `8021q`) refuses the link: ADD then
//! fails with code 50 and a message naming the module, leaving nothing.

pub mod add;
pub mod check;
pub mod config;
pub mod del;
pub mod error;
pub mod plugin;
