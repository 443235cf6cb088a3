//! Undoing a failed ADD ([`libcni::rollback`]): bridge's ADD records the
//! steps of every veth plugin ([`VethUndo`]) and one of its own, each
//! undone in reverse order when a later step fails.
//!
//! Shared state is not undone: the bridge, its gateway addresses and MAC,
//! forwarding sysctls and the `<bridge>.<vlan>` interface serve every
//! container of the network, and a concurrent ADD may already rely on them.

use libcni::rollback::VethUndo;

/// The step only bridge takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BridgeUndo {
    TeardownSpoofCheck,
}

impl std::fmt::Display for BridgeUndo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BridgeUndo::TeardownSpoofCheck => f.write_str("remove the MAC spoof check rules"),
        }
    }
}

/// One change to take back.
pub type Undo = VethUndo<BridgeUndo>;

/// ADD's record of [`Undo`] steps.
pub type Rollback = libcni::rollback::Rollback<Undo>;
