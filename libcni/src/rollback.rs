//! Undoing a failed ADD: every change an ADD makes that is specific to the
//! container is recorded as it happens, as a value of the plugin's own
//! undo type, and undone in reverse order when a later step fails, so a
//! failed ADD leaves nothing behind (its IP lease included).
//!
//! The plugins that link a container to the host by a veth pair (bridge,
//! ptp) record the same steps, [`VethUndo`], with room for steps of their
//! own, and undo them alike ([`VethAdd`]).

use std::fmt::{self, Display};

use ipnetwork::IpNetwork;

use crate::netlink::sublink_plugin::IpamCallError;
use crate::netlink::{NetlinkError, RouteSocket};
use crate::veth;

/// The changes to take back, oldest first.
#[derive(Debug)]
pub struct Rollback<U> {
    steps: Vec<U>,
}

impl<U> Default for Rollback<U> {
    fn default() -> Self {
        Rollback { steps: Vec::new() }
    }
}

impl<U: Clone> Rollback<U> {
    pub fn push(&mut self, step: U) {
        self.steps.push(step);
    }

    pub fn len(&self) -> usize {
        self.steps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// Runs every step, last first, going on after failures; returns the
    /// failures (the caller reports the error that caused the rollback).
    pub fn unwind<E>(self, mut undo: impl FnMut(U) -> Result<(), E>) -> Vec<(U, E)> {
        let mut failures = Vec::new();
        for step in self.steps.into_iter().rev() {
            if let Err(e) = undo(step.clone()) {
                failures.push((step, e));
            }
        }
        failures
    }
}

impl<U: Clone + Display> Rollback<U> {
    /// [`unwind`](Rollback::unwind) for ADD's error path: each step is
    /// logged as it runs and each failure as a warning; the error that
    /// caused the rollback is what the caller reports.
    pub fn undo_all<E: Display>(self, mut undo: impl FnMut(U) -> Result<(), E>) {
        let failures = self.unwind(|step| {
            log::debug!("rolling back: {step}");
            undo(step)
        });
        for (step, error) in failures {
            log::warn!("rollback: {step} failed: {error}");
        }
    }
}

/// One change to take back, of an ADD that links the container to the
/// host by a veth pair. `P` is the plugin's own steps (bridge's spoof
/// check); a plugin without any uses [`std::convert::Infallible`].
///
/// Shared state is not undone: forwarding sysctls (and bridge's bridge)
/// serve every container of the host, and a concurrent ADD may already
/// rely on them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VethUndo<P> {
    /// IPAM DEL for the lease IPAM ADD made.
    ReleaseIpam,
    /// Deleting the host end removes the container end too, with the
    /// addresses and routes of both ([`crate::veth::delete_host_end`]).
    DeleteVeth {
        host_index: u32,
        host_name: String,
    },
    TeardownMasquerade {
        ips: Vec<IpNetwork>,
    },
    Own(P),
}

/// What the step undoes, for the log: `delete veth veth1a2b3c4d`.
impl<P: Display> Display for VethUndo<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VethUndo::DeleteVeth { host_name, .. } => write!(f, "delete veth {host_name}"),
            VethUndo::ReleaseIpam => f.write_str("release the IPAM lease"),
            VethUndo::TeardownMasquerade { ips } => write!(
                f,
                "remove the masquerade rules of {}",
                crate::logging::joined(ips)
            ),
            VethUndo::Own(step) => step.fmt(f),
        }
    }
}

/// An ADD in progress of a veth plugin: its record of [`VethUndo`] steps
/// and what undoing them needs from the plugin.
/// [`roll_back`](VethAdd::roll_back) undoes the steps every veth plugin
/// takes the same way itself (the veth, by its host end) and asks the
/// plugin for the rest.
pub trait VethAdd {
    /// The plugin's own steps.
    type Own: Clone + Display;
    type Error: Display + From<NetlinkError> + From<IpamCallError>;

    fn rollback(&mut self) -> &mut Rollback<VethUndo<Self::Own>>;
    /// A socket in the host's namespace, where the host end is.
    fn host_socket(&mut self) -> &mut RouteSocket;
    /// IPAM DEL for the lease IPAM ADD made.
    fn release_lease(&mut self) -> Result<(), Self::Error>;
    fn teardown_masquerade(&mut self, ips: &[IpNetwork]) -> Result<(), Self::Error>;
    fn undo_own(&mut self, step: Self::Own) -> Result<(), Self::Error>;

    /// Undoes every recorded step, last first ([`Rollback::undo_all`]);
    /// the record is left empty.
    fn roll_back(&mut self) {
        let rollback = std::mem::take(self.rollback());
        rollback.undo_all(|step| self.undo(step));
    }

    fn undo(&mut self, step: VethUndo<Self::Own>) -> Result<(), Self::Error> {
        match step {
            VethUndo::ReleaseIpam => self.release_lease(),
            VethUndo::DeleteVeth {
                host_index,
                host_name,
            } => Ok(veth::delete_host_end(
                self.host_socket(),
                host_index,
                &host_name,
            )?),
            VethUndo::TeardownMasquerade { ips } => self.teardown_masquerade(&ips),
            VethUndo::Own(step) => self.undo_own(step),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_undone_last_first_and_failures_do_not_stop_it() {
        let mut rollback = Rollback::default();
        assert!(rollback.is_empty());
        for step in ["veth", "lease", "rules"] {
            rollback.push(step);
        }
        assert_eq!(rollback.len(), 3);
        let mut seen = Vec::new();
        let failures = rollback.unwind(|step| {
            seen.push(step);
            match step {
                "lease" => Err("ipam down"),
                _ => Ok(()),
            }
        });
        assert_eq!(seen, vec!["rules", "lease", "veth"]);
        assert_eq!(failures, vec![("lease", "ipam down")]);
    }

    #[test]
    fn veth_steps_say_what_they_undo() {
        let step = |s: VethUndo<&str>| s.to_string();
        assert_eq!(
            step(VethUndo::DeleteVeth {
                host_index: 4,
                host_name: "veth00000001".into()
            }),
            "delete veth veth00000001"
        );
        assert_eq!(step(VethUndo::ReleaseIpam), "release the IPAM lease");
        assert_eq!(
            step(VethUndo::TeardownMasquerade {
                ips: vec![
                    "10.1.0.2/24".parse().unwrap(),
                    "fd00::2/64".parse().unwrap()
                ]
            }),
            "remove the masquerade rules of 10.1.0.2/24, fd00::2/64"
        );
        assert_eq!(
            step(VethUndo::Own("remove the spoof check")),
            "remove the spoof check"
        );
    }
}
