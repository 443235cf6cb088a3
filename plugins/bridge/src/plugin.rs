//! The plugin's verbs, wired to the skeleton.

use libcni::invoke::{Delegator, Exec, RawExec};
use libcni::netlink::sublink_plugin::IpamCallError;
use libcni::skel::{self, CmdArgs, Plugin};
use libcni::types::AnyResult;

use crate::config::TeardownConf;
use crate::error::BridgeError;
use crate::rules::{AttachmentRules, SystemRules};
use crate::{add, check, del};

/// The plugin: IPAM is reached through `ipam`, firewall rules through
/// `rules`.
pub struct BridgePlugin<E: Exec = RawExec, R: AttachmentRules = SystemRules> {
    pub ipam: Delegator<E>,
    pub rules: R,
}

impl BridgePlugin {
    /// What the binary runs: real IPAM processes, the host's firewall.
    pub fn from_process_env() -> Self {
        BridgePlugin {
            ipam: Delegator::from_process_env(),
            rules: SystemRules,
        }
    }
}

impl<E: Exec, R: AttachmentRules> Plugin for BridgePlugin<E, R> {
    type Error = BridgeError;

    fn about(&self) -> String {
        skel::about_string("bridge", env!("CARGO_PKG_VERSION"))
    }

    fn add(&self, args: &CmdArgs) -> Result<AnyResult, BridgeError> {
        add::add(args, &self.ipam, &self.rules).map(AnyResult::V1)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), BridgeError> {
        del::del(args, &self.ipam, &self.rules)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), BridgeError> {
        check::check(args, &self.ipam)
    }

    /// Masquerade rules of attachments that are no longer valid go, then
    /// the IPAM plugin collects its own; both run whatever the other did.
    fn gc(&self, args: &CmdArgs) -> Result<(), BridgeError> {
        let conf = TeardownConf::from_conf(&args.conf)?;
        let mut errors = Vec::new();
        if conf.ip_masq {
            if let Err(e) = self
                .rules
                .gc_masquerade(&conf.network, &args.conf.valid_attachments)
            {
                errors.push(e);
            }
        }
        if let Some(plugin) = &conf.ipam_type {
            if let Err(source) = self.ipam.gc(plugin, args.conf.bytes()) {
                errors.push(IpamCallError::new("IPAM GC with", plugin, source).into());
            }
        }
        BridgeError::from_many(errors).map_or(Ok(()), Err)
    }

    /// Ready unless the IPAM plugin says otherwise.
    fn status(&self, args: &CmdArgs) -> Result<(), BridgeError> {
        let conf = TeardownConf::from_conf(&args.conf)?;
        match &conf.ipam_type {
            Some(plugin) => self
                .ipam
                .status(plugin, args.conf.bytes())
                .map_err(|source| IpamCallError::new("IPAM STATUS with", plugin, source).into()),
            None => Ok(()),
        }
    }
}
