//! Test support shared by the integration tests of every crate of the suite,
//! and the building blocks of the conformance suite and benchmarks.

pub mod bench;
pub mod measure;
pub mod plugin_fuzz;
pub mod suite;
pub mod testnet;
