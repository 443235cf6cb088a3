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
//! Modules, one concept each:
//! - [`config`]: the configuration keys, validated;
//! - [`sysfs`]: VF, PF and RDMA device discovery;
//! - [`pf`]: PF-side VF settings ([`pf::PfLinkOps`]);
//! - [`rdma`], [`rdma_netlink`]: RDMA netns mode, devices and moves
//!   ([`rdma::RdmaOps`]);
//! - [`verbs`]: RDMA port state through libibverbs ([`verbs::PortQuery`]);
//! - [`netdev`], [`addressing`]: the VF netdev and its addresses;
//! - [`state`], [`alloc`]: attachment records, VF locks and allocations;
//! - [`fake`]: the test-only stand-in for the hardware, selected by the
//!   knobs of [`knobs`];
//! - [`plugin`]: the verbs themselves; [`error`]: errors and spec codes.

pub mod addressing;
pub mod alloc;
pub mod config;
pub mod error;
pub mod fake;
pub mod hwaddr;
pub mod knobs;
pub mod netdev;
pub mod pf;
pub mod plugin;
pub mod rdma;
pub mod rdma_netlink;
pub mod state;
pub mod sysfs;
pub mod verbs;

pub use error::PluginError;
pub use plugin::{Backends, RdmaSriov};
