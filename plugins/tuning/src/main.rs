//! `tuning`: a chained plugin that adjusts the container interface made by
//! the plugin before it.
//!
//! - ADD writes `net.*` sysctls in the container's namespace and sets the
//!   interface's MAC, MTU, promiscuous and all-multicast modes and transmit
//!   queue length, saving the old link values under `dataDir`; it passes
//!   the previous result on, with the new MAC ([`add`]);
//! - DEL puts the saved link values back ([`del`]);
//! - CHECK compares the namespace with the configuration ([`check`]);
//! - GC forgets the saved values of attachments that are gone ([`gc`]);
//! - STATUS has nothing to check: the plugin has no daemon or pool.
//!
//! Configuration keys and their precedence: [`config`]. Where this differs
//! from the Go reference, the module that does the work says so.

mod add;
mod allowlist;
mod check;
mod config;
mod del;
mod error;
mod gc;
mod link;
mod saved;

use libcni::skel::{self, CmdArgs, Plugin};
use libcni::types::AnyResult;

use crate::error::TuningError;

struct Tuning;

impl Plugin for Tuning {
    type Error = TuningError;

    fn about(&self) -> String {
        skel::about_string("tuning", env!("CARGO_PKG_VERSION"))
    }

    fn add(&self, args: &CmdArgs) -> Result<AnyResult, TuningError> {
        add::add(args)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), TuningError> {
        del::del(args)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), TuningError> {
        check::check(args)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), TuningError> {
        gc::gc(args)
    }
}

fn main() {
    skel::plugin_main(Tuning)
}

// A call allocates little and exits; the arena spares it the system
// allocator's page mapping and unmapping (libcni::arena_alloc says how much).
#[global_allocator]
static ALLOCATOR: libcni::arena_alloc::ArenaAlloc = libcni::arena_alloc::ArenaAlloc::new();
