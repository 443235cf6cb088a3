//! The `ptp` plugin: connects a container to the host through a veth pair
//! and routes, without a bridge. Every container address reaches its
//! subnet through the gateway, which the host end of the pair holds, and
//! the host reaches the container through a host route to each address;
//! the host routes between containers and out (with optional masquerade).

pub mod add;
pub mod check;
pub mod config;
pub mod del;
pub mod error;
pub mod plugin;
pub mod rollback;
pub mod routing;
