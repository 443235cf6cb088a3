//! The plugin's verbs, wired to the skeleton. GC and STATUS have nothing
//! of their own to do: they ask the IPAM plugin.

use libcni::invoke::{Delegator, Exec, RawExec};
use libcni::skel::{self, CmdArgs, Plugin};
use libcni::types::AnyResult;

use crate::config::ConfigError;
use crate::del::ipam_type;
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
        match ipam_type(args) {
            Some(plugin) => {
                self.ipam
                    .gc(plugin, args.conf.bytes())
                    .map_err(|source| VlanError::Ipam {
                        action: "IPAM GC with",
                        plugin: plugin.to_string(),
                        source,
                    })
            }
            None => Ok(()),
        }
    }

    fn status(&self, args: &CmdArgs) -> Result<(), VlanError> {
        match ipam_type(args) {
            Some(plugin) => self
                .ipam
                .status(plugin, args.conf.bytes())
                .map_err(|source| VlanError::Ipam {
                    action: "IPAM STATUS with",
                    plugin: plugin.to_string(),
                    source,
                }),
            // IPAM is required: STATUS says what is wrong with the
            // configuration, as ADD would.
            None => Err(ConfigError::IpamMissing.into()),
        }
    }
}
