//! The plugin's verbs, wired to the skeleton. GC and STATUS have nothing
//! of their own to do: they ask the IPAM plugin, when there is one.

use libcni::invoke::{Delegator, Exec, RawExec};
use libcni::netlink::sublink_plugin;
use libcni::skel::{self, CmdArgs, Plugin};
use libcni::types::AnyResult;

use crate::error::MacvlanError;
use crate::{add, check, del};

/// The plugin; IPAM is reached through `ipam`.
pub struct MacvlanPlugin<E: Exec = RawExec> {
    pub ipam: Delegator<E>,
}

impl MacvlanPlugin {
    /// What the binary runs: real IPAM processes.
    pub fn from_process_env() -> Self {
        MacvlanPlugin {
            ipam: Delegator::from_process_env(),
        }
    }
}

impl<E: Exec> Plugin for MacvlanPlugin<E> {
    type Error = MacvlanError;

    fn about(&self) -> String {
        skel::about_string("macvlan", env!("CARGO_PKG_VERSION"))
    }

    fn add(&self, args: &CmdArgs) -> Result<AnyResult, MacvlanError> {
        add::add(args, &self.ipam).map(AnyResult::V1)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), MacvlanError> {
        del::del(args, &self.ipam)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), MacvlanError> {
        check::check(args, &self.ipam)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), MacvlanError> {
        Ok(sublink_plugin::ipam_gc(args, &self.ipam)?)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), MacvlanError> {
        Ok(sublink_plugin::ipam_status(args, &self.ipam)?)
    }
}
