//! Undoing a failed ADD ([`libcni::rollback`]): ptp's ADD records the
//! steps of every veth plugin ([`VethUndo`]) and none of its own, each
//! undone in reverse order when a later step fails.
//!
//! The forwarding sysctls are not undone: they serve every container of
//! the host, and a concurrent ADD may already rely on them. The gateway
//! addresses and host routes go with the host veth.

use std::convert::Infallible;

use libcni::rollback::VethUndo;

/// One change to take back.
pub type Undo = VethUndo<Infallible>;

/// ADD's record of [`Undo`] steps.
pub type Rollback = libcni::rollback::Rollback<Undo>;
