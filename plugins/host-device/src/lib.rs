//! `host-device`: hands an existing host network device to a container.
//!
//! ADD finds the host link by name, MAC, kernel device path, PCI address
//! or auxiliary-bus device (`runtimeConfig.deviceID` from a device
//! plugin), moves it into the container as `CNI_IFNAME` (with its RDMA
//! devices when the RDMA subsystem is in exclusive mode), runs IPAM if
//! configured and writes the device-info file (spec 1.1.0) if the runtime
//! asks. A PCI function bound to a userspace driver (DPDK) has no netdev:
//! nothing moves and only IPAM runs. DEL gives everything back with the
//! original name, MAC and MTU, also when the container's namespace is gone.
//!
//! - [`config`]: keys, precedence, checks;
//! - [`lookup`]: the host link a selector names;
//! - [`transfer`]: moving the link in and out, restoring it;
//! - [`state`]: what ADD changed, for DEL (and where the original is kept);
//! - [`rdma`]: the RDMA devices that go with the link;
//! - [`add`], [`del`], [`check`]; GC and STATUS in [`plugin`];
//! - [`error`]: errors and their spec codes.

pub mod add;
pub mod check;
pub mod config;
pub mod del;
pub mod error;
pub mod lookup;
pub mod plugin;
pub mod rdma;
pub mod state;
#[cfg(test)]
mod tests;
pub mod transfer;

// Unit tests run without root in namespaces of their own (libcni::test_userns).
#[cfg(test)]
libcni::unit_tests_without_root!();
