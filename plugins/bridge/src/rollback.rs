//! Undoing a failed ADD ([`libcni::rollback`]): the changes bridge's ADD
//! records, each undone in reverse order when a later step fails.
//!
//! Shared state is not undone: the bridge, its gateway addresses and MAC,
//! forwarding sysctls and the `<bridge>.<vlan>` interface serve every
//! container of the network, and a concurrent ADD may already rely on them.

use ipnetwork::IpNetwork;

/// One change to take back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Undo {
    /// Deleting the host end removes the container end too.
    DeleteVeth {
        host_index: u32,
        host_name: String,
    },
    /// IPAM DEL for the lease IPAM ADD made.
    ReleaseIpam,
    TeardownSpoofCheck,
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
            Undo::TeardownSpoofCheck => f.write_str("remove the MAC spoof check rules"),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_undone_last_first_and_failures_do_not_stop_it() {
        let mut rollback = Rollback::default();
        assert!(rollback.is_empty());
        rollback.push(Undo::DeleteVeth {
            host_index: 4,
            host_name: "veth00000001".into(),
        });
        rollback.push(Undo::TeardownSpoofCheck);
        rollback.push(Undo::ReleaseIpam);
        rollback.push(Undo::TeardownMasquerade { ips: vec![] });
        assert_eq!(rollback.len(), 4);
        let mut seen = Vec::new();
        let failures = rollback.unwind(|step| {
            seen.push(step.clone());
            match step {
                Undo::ReleaseIpam => Err("ipam down"),
                _ => Ok(()),
            }
        });
        assert_eq!(
            seen,
            vec![
                Undo::TeardownMasquerade { ips: vec![] },
                Undo::ReleaseIpam,
                Undo::TeardownSpoofCheck,
                Undo::DeleteVeth {
                    host_index: 4,
                    host_name: "veth00000001".into()
                },
            ]
        );
        assert_eq!(failures, vec![(Undo::ReleaseIpam, "ipam down")]);
    }
}
