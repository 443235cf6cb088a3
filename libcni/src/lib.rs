//! libcni: the shared core of this CNI plugin suite.
//!
//! - plugin side: spec types and result conversion ([`types`]), errors
//!   ([`error`]), the plugin skeleton ([`skel`]) and delegation to IPAM
//!   plugins ([`invoke`]);
//! - runtime side: config loading ([`conf`]), plugin execution, the result
//!   cache and the list operations ([`runtime`]);
//! - system helpers shared by the plugins: network namespaces ([`netns`]),
//!   netlink ([`netlink`]) and sysctls ([`sysctl`]).

pub mod error;
pub mod netns;
pub mod types;
pub mod version;

pub use error::{CniError, ErrorCode};
pub use version::SpecVersion;
