//! The plugin's verbs, wired to the skeleton.
//!
//! - DEL is macvlan's ([`sublink_plugin::del`]): the tap goes (a namespace
//!   or link already gone is success), then IPAM DEL for a layer 3
//!   network; both run whatever the other did. Unlike the reference, DEL
//!   reads neither the plugin's keys nor `CNI_ARGS`, so a configuration
//!   ADD refused can still be deleted.
//! - GC asks the IPAM plugin, when there is one.
//! - STATUS: the node must have `/dev/net/tun`, and the IPAM plugin, when
//!   there is one, must be ready.

use std::path::Path;

use libcni::invoke::{Delegator, Exec, RawExec};
use libcni::netlink::sublink_plugin;
use libcni::skel::{self, CmdArgs, Plugin};
use libcni::types::AnyResult;

use crate::error::TapError;
use crate::tuntap::{TunError, TUN_DEVICE};
use crate::{add, check};

/// The plugin; IPAM is reached through `ipam`.
pub struct TapPlugin<E: Exec = RawExec> {
    pub ipam: Delegator<E>,
}

impl TapPlugin {
    /// What the binary runs: real IPAM processes.
    pub fn from_process_env() -> Self {
        TapPlugin {
            ipam: Delegator::from_process_env(),
        }
    }
}

impl<E: Exec> Plugin for TapPlugin<E> {
    type Error = TapError;

    fn about(&self) -> String {
        skel::about_string("tap", env!("CARGO_PKG_VERSION"))
    }

    fn add(&self, args: &CmdArgs) -> Result<AnyResult, TapError> {
        add::add(args, &self.ipam).map(AnyResult::V1)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), TapError> {
        TapError::from_many(sublink_plugin::del(args, &self.ipam)).map_or(Ok(()), Err)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), TapError> {
        check::check(args, &self.ipam)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), TapError> {
        Ok(sublink_plugin::ipam_gc(args, &self.ipam)?)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), TapError> {
        if let Err(e) = std::fs::metadata(Path::new(TUN_DEVICE)) {
            return Err(TunError::NoTunDevice(e).into());
        }
        Ok(sublink_plugin::ipam_status(args, &self.ipam)?)
    }
}
