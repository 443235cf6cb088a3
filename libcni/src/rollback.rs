//! Undoing a failed ADD: every change an ADD makes that is specific to the
//! container is recorded as it happens, as a value of the plugin's own
//! undo type, and undone in reverse order when a later step fails, so a
//! failed ADD leaves nothing behind (its IP lease included).

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
}
