//! libcni: the shared core of this CNI plugin suite.
//!
//! - plugin side: spec types and result conversion ([`types`]), errors
//!   ([`error`]), the plugin skeleton ([`skel`]) and delegation to IPAM
//!   plugins ([`invoke`]);
//! - runtime side: config loading ([`conf`]), plugin execution, the result
//!   cache and the list operations ([`runtime`]);
//! - the container interface made from a result, and CHECK of it
//!   ([`iface`]);
//! - system helpers shared by the plugins: network namespaces ([`netns`]),
//!   netlink ([`netlink`]: one socket core for rtnetlink, nfnetlink and the
//!   plugins' own families), nf_tables ([`nftables`]), the iptables
//!   programs ([`iptables`]), sysctls ([`sysctl`]) and the one IP family
//!   type ([`IpFamily`]).

pub mod arena_alloc;
pub mod args;
pub mod cache;
pub mod conf;
pub mod config_file;
pub mod confine;
pub mod detached;
pub mod device;
pub mod device_info;
pub mod error;
pub mod firewall_probe;
pub mod go_compat;
pub mod hwaddr;
pub mod iface;
pub mod invoke;
pub mod ip_family;
pub mod ipmasq;
pub mod iptables;
pub mod link_name;
pub mod lock;
pub mod logging;
pub mod mac_source;
pub mod netlink;
pub mod netns;
pub mod network_footprint;
pub mod nftables;
pub mod plugin_conf;
pub mod rollback;
pub mod runtime;
pub mod skel;
pub mod source_routing;
pub mod spawn;
pub mod state_file;
pub mod sysctl;
#[doc(hidden)]
pub mod test_skip;
#[doc(hidden)]
pub mod test_userns;
pub mod types;
pub mod version;
pub mod veth;

pub use error::{CniError, ErrorCode};
pub use ip_family::IpFamily;
pub use version::SpecVersion;

// Unit tests run without root in namespaces of their own (test_userns).
#[cfg(test)]
crate::unit_tests_without_root!();
