//! `rdma-sriov`: gives a pod an SR-IOV VF of an RDMA NIC (RoCE or
//! InfiniBand), netdev and RDMA device together, in one CNI plugin.
//!
//! The device plugin hands over the VF as a PCI address (`deviceID`, or
//! `runtimeConfig.deviceID` through the `deviceID` capability); without
//! one, `pf` picks the first free VF of a PF. ADD applies the PF-side VF
//! settings, moves the RDMA device into the pod (exclusive RDMA netns
//! mode), moves the VF netdev after it under CNI_IFNAME, delegates IPAM and
//! configures addresses and routes. DEL undoes all of it, also when the
//! pod's netns is already gone. CHECK verifies the attachment down to the
//! RDMA port state; GC and STATUS follow CNI 1.1.
//!
//! What other plugins need too lives in libcni: sysfs lookups of PCI and
//! auxiliary-bus devices, netdevs and RDMA devices ([`libcni::device`]),
//! and RDMA netlink ([`libcni::netlink::rdma`]: namespace mode, devices,
//! moves, and the [`libcni::netlink::rdma::RdmaOps`] seam).
//!
//! Modules, one concept each:
//! - [`config`]: the configuration keys, validated;
//! - [`vf`]: a VF, its PF and its RDMA device, from sysfs;
//! - [`pf`]: PF-side VF settings ([`pf::PfLinkOps`]);
//! - [`verbs`]: RDMA port state through libibverbs ([`verbs::PortQuery`]);
//! - [`netdev`]: the VF netdev (its addresses and routes are
//!   [`libcni::iface`]'s);
//! - [`rail`]: the VF as one rail of a multi-rail pod (`"rail": true`):
//!   ARP and reverse-path sysctls, and a routing table of its own;
//! - [`state`], [`alloc`]: attachment records, VF locks and allocations;
//! - [`plugin`]: the plugin and its backends; the verbs in [`add`],
//!   [`del`], [`check`], [`gc`] and [`status`], and what DEL, GC and a
//!   failed ADD share in [`teardown`];
//! - [`error`]: errors and spec codes; [`knobs`]: environment variables
//!   for tests and debugging;
//! - `fake` (only with the `fake-hardware` feature, which the crate's own
//!   tests enable): the stand-in for SR-IOV and RDMA hardware.

pub mod add;
pub mod alloc;
pub mod check;
pub mod config;
pub mod del;
pub mod error;
#[cfg(feature = "fake-hardware")]
pub mod fake;
pub mod gc;
pub mod hwaddr;
pub mod knobs;
pub mod netdev;
pub mod pf;
pub mod plugin;
pub mod rail;
pub mod state;
pub mod status;
pub mod teardown;
pub mod verbs;
pub mod vf;

pub use error::PluginError;
pub use plugin::{Backends, RdmaSriov};

// Unit tests run without root in namespaces of their own (libcni::test_userns).
#[cfg(test)]
libcni::unit_tests_without_root!();
