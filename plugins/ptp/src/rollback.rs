//! Undoing a failed ADD ([`libcni::rollback`]): the changes ptp's ADD
//! records, each undone in reverse order when a later step fails.
//!
//! The forwarding sysctls are not undone: they serve every container of
//! the host, and a concurrent ADD may already rely on them. The gateway
//! addresses and host routes go with the host veth.

use ipnetwork::IpNetwork;

/// One change to take back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Undo {
    /// IPAM DEL for the lease IPAM ADD made.
    ReleaseIpam,
    /// Deleting the host end removes the container end too, with the
    /// addresses and routes of both.
    DeleteVeth {
        host_index: u32,
        host_name: String,
    },
    TeardownMasquerade {
        ips: Vec<IpNetwork>,
    },
}

/// What the step undoes, for the log: `delete veth veth1a2b3c4d`.
impl std::fmt::Display for Undo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Undo::DeleteVeth { host_name, .. } => write!(f, "delete veth {host_name}"),
            Undo::ReleaseIpam => f.write_str("release the IPAM lease"),
            Undo::TeardownMasquerade { ips } => write!(
                f,
                "remove the masquerade rules of {}",
                libcni::logging::joined(ips)
            ),
        }
    }
}

/// ADD's record of [`Undo`] steps.
pub type Rollback = libcni::rollback::Rollback<Undo>;
