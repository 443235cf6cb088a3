//! The `ipvlan` plugin: gives a container an ipvlan link on a host
//! interface (its "master"), sharing the master's MAC, with addresses
//! from IPAM or, chained behind another plugin, from the previous result.
//!
//! - [`config`]: every key of the reference plugin, checked before
//!   anything changes;
//! - [`add`], [`del`], [`check`]: the verbs; GC and STATUS, which only
//!   ask the IPAM plugin, are in [`plugin`];
//! - [`error`]: the errors and their spec codes.
//!
//! A kernel without ipvlan refuses the link: ADD then fails with code 50
//! and a message naming the module, leaving nothing.

pub mod add;
pub mod check;
pub mod config;
pub mod del;
pub mod error;
pub mod plugin;
