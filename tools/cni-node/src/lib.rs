//! `cni-node`: the node agent that runs CNI GC (and STATUS) for the
//! container runtime, which does not: containerd's go-cni has no GC call.
//! Without it, what pods that died in a reboot, a runtime crash or a
//! failed DEL held (leases, port forwardings, firewall rules, qdiscs,
//! saved link settings) stays forever.
//!
//! - [`plan`]: the pure decision of a pass (what is valid, what is
//!   released, which networks are left alone and why);
//! - [`cri`]: the runtime's sandboxes over CRI;
//! - [`scan`]: what the node holds (conflists, result cache, leases);
//! - [`pass`]: one pass, acting through libcni's runtime;
//! - [`daemon`]: `cni-node run`, passes and STATUS every interval, with
//!   [`metrics`] served on 127.0.0.1;
//! - [`heartbeat`]: cluster-ipam nodes known alive, a heartbeat per pool.

pub mod cli;
pub mod cri;
pub mod daemon;
pub mod error;
pub mod heartbeat;
pub mod leases;
pub mod metrics;
pub mod pass;
pub mod plan;
pub mod scan;
pub mod status;

pub use error::Error;
