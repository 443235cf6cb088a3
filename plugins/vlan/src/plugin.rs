//! The plugin's verbs, wired to the skeleton. GC and STATUS have nothing
//! of their own to do: they ask the IPAM plugin.

use libcni::invoke::{Delegator, Exec, RawExec};
use libcni::netlink::sublink_plugin;
use libcni::skel::{self, CmdArgs, Plugin};
use libcni::types::AnyResult;

use crate::config::ConfigError;
use crate::error::VlanError;
use crate::{add, check, del};

/// The plugin; IPAM is reached through `ipam`.
pub struct VlanPlugin<E: Exec = RawExec> {
    pub ipam: Delegator<E>,
}

impl VlanPlugin {
    /// What the binary runs: real IPAM processes.
    pub fn from_process_env() -> Self {
        VlanPlugin {
            ipam: Delegator::from_process_env(),
        }
    }
}

impl<E: Exec> Plugin for VlanPlugin<E> {
    type Error = VlanError;

    fn about(&self) -> String {
        skel::about_string("vlan", env!("CARGO_PKG_VERSION"))
    }

    fn add(&self, args: &CmdArgs) -> Result<AnyResult, VlanError> {
        add::add(args, &self.ipam).map(AnyResult::V1)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), VlanError> {
        del::del(args, &self.ipam)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), VlanError> {
        check::check(args, &self.ipam)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), VlanError> {
        Ok(sublink_plugin::ipam_gc(args, &self.ipam)?)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), VlanError> {
        // IPAM is required: STATUS says what is wrong with the
        // configuration, as ADD would.
        if sublink_plugin::ipam_type(args).is_none() {
            return Err(ConfigError::IpamMissing.into());
        }
        Ok(sublink_plugin::ipam_status(args, &self.ipam)?)
    }
}
