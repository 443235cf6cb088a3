//! The `bridge` plugin: connects a container to a Linux bridge on the host
//! through a veth pair, with optional gateway, masquerade and VLANs.

pub mod add;
pub mod background;
pub mod bridge_link;
pub mod bridge_port;
pub mod check;
pub mod config;
pub mod container;
pub mod del;
pub mod error;
pub mod gateway;
pub mod plugin;
pub mod rollback;
pub mod rules;
pub mod spoofchk;
pub mod vlan;

// Unit tests run without root in namespaces of their own (libcni::test_userns).
#[cfg(test)]
libcni::unit_tests_without_root!();
