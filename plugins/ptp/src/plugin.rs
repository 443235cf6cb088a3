//! The plugin's verbs, wired to the skeleton.

use libcni::invoke::{Delegator, Exec, RawExec};
use libcni::ipmasq;
use libcni::netlink::sublink_plugin::IpamCallError;
use libcni::skel::{self, CmdArgs, Plugin};
use libcni::types::AnyResult;

use crate::config::{PtpConf, TeardownConf};
use crate::error::PtpError;
use crate::{add, check, del};

/// The plugin; IPAM is reached through `ipam`.
pub struct PtpPlugin<E: Exec = RawExec> {
    pub ipam: Delegator<E>,
}

impl PtpPlugin {
    /// What the binary runs: real IPAM processes.
    pub fn from_process_env() -> Self {
        PtpPlugin {
            ipam: Delegator::from_process_env(),
        }
    }
}

impl<E: Exec> Plugin for PtpPlugin<E> {
    type Error = PtpError;

    fn about(&self) -> String {
        skel::about_string("ptp", env!("CARGO_PKG_VERSION"))
    }

    fn add(&self, args: &CmdArgs) -> Result<AnyResult, PtpError> {
        add::add(args, &self.ipam).map(AnyResult::V1)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), PtpError> {
        del::del(args, &self.ipam)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), PtpError> {
        check::check(args, &self.ipam)
    }

    /// Masquerade rules of attachments that are no longer valid go, then
    /// the IPAM plugin collects its own; each runs whatever the other did.
    fn gc(&self, args: &CmdArgs) -> Result<(), PtpError> {
        let conf = TeardownConf::from_conf(&args.conf)?;
        let mut errors = Vec::new();
        if conf.ip_masq {
            if let Err(e) = ipmasq::gc(&conf.network, &args.conf.valid_attachments) {
                errors.push(e.into());
            }
        }
        if let Some(plugin) = &conf.ipam_type {
            if let Err(source) = self.ipam.gc(plugin, args.conf.bytes()) {
                errors.push(IpamCallError::new("IPAM GC with", plugin, source).into());
            }
        }
        PtpError::from_many(errors).map_or(Ok(()), Err)
    }

    /// Ready when the IPAM plugin is (ptp itself needs nothing more than
    /// the kernel it runs on).
    fn status(&self, args: &CmdArgs) -> Result<(), PtpError> {
        let conf = PtpConf::from_conf(&args.conf)?;
        self.ipam
            .status(&conf.ipam_type, args.conf.bytes())
            .map_err(|source| IpamCallError::new("IPAM STATUS with", &conf.ipam_type, source))?;
        Ok(())
    }
}
