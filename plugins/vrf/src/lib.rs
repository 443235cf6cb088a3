//! The `vrf` meta plugin: put a container interface made by an earlier
//! plugin of the chain into a VRF (a separate routing domain) inside the
//! container, creating the VRF on first use and deleting it with its last
//! member.
//!
//! - [`config`]: `vrfname` and `table`;
//! - [`add`], [`del`], [`check`]: the verbs; [`plugin`] wires them (GC
//!   and STATUS have nothing to do);
//! - [`error`]: the errors and their spec codes.
//!
//! A kernel without VRF devices (module `vrf`) refuses the VRF: ADD then
//! fails with code 50 naming the module, and changes nothing.

pub mod add;
pub mod check;
pub mod config;
pub mod del;
pub mod error;
pub mod plugin;
