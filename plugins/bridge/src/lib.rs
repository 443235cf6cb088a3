//! The `bridge` plugin: connects a container to a Linux bridge on the host
//! through a veth pair, with optional gateway, masquerade and VLANs.

pub mod ipmasq;
pub mod spoofchk;
