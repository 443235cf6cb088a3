//! Work that runs on a scoped worker thread while the caller goes on, for
//! steps that wait on the kernel or on another process and that nothing
//! else waits for (the veth deletion of DEL, IPAM beside a firewall probe).
//!
//! When no thread can be had (a process or memory limit), the work runs
//! right away on the calling thread instead: slower, never lost.

use std::sync::mpsc;
use std::thread::{self, Scope, ScopedJoinHandle};

/// One piece of work, started by [`Background::start`].
pub enum Background<'scope, T> {
    Running(ScopedJoinHandle<'scope, Option<T>>),
    Done(T),
}

/// The worker ended without a value: it panicked (only possible where
/// panics unwind; release builds abort).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerLost;

impl<'scope, T: Send + 'scope> Background<'scope, T> {
    /// Starts `work` on a thread named `name` inside `scope`.
    pub fn start<'env, F>(scope: &'scope Scope<'scope, 'env>, name: &str, work: F) -> Self
    where
        F: FnOnce() -> T + Send + 'scope,
    {
        // The work goes to the thread only once it runs, so a failed spawn
        // leaves it here to be done inline.
        let (hand_over, receive) = mpsc::sync_channel::<F>(1);
        let spawned = thread::Builder::new()
            .name(name.to_string())
            .spawn_scoped(scope, move || receive.recv().ok().map(|work| work()));
        match spawned {
            Ok(handle) => match hand_over.send(work) {
                Ok(()) => Background::Running(handle),
                Err(mpsc::SendError(work)) => Background::Done(work()),
            },
            Err(e) => {
                log::debug!("no thread for {name} ({e}); running it inline");
                Background::Done(work())
            }
        }
    }

    /// Waits for the work and returns its value.
    pub fn finish(self) -> Result<T, WorkerLost> {
        match self {
            Background::Running(handle) => handle.join().ok().flatten().ok_or(WorkerLost),
            Background::Done(value) => Ok(value),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_runs_on_another_thread_and_borrows() {
        let caller = thread::current().id();
        let text = String::from("borrowed");
        let (len, worker) = thread::scope(|scope| {
            let job = Background::start(scope, "test-worker", || {
                (text.len(), thread::current().id())
            });
            job.finish().unwrap()
        });
        assert_eq!(len, 8);
        assert_ne!(worker, caller);
    }

    #[test]
    fn a_panicking_worker_is_reported() {
        let lost = thread::scope(|scope| {
            Background::start(scope, "test-panic", || -> u8 { panic!("boom") }).finish()
        });
        assert_eq!(lost, Err(WorkerLost));
    }
}
