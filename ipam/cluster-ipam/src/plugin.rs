//! The plugin for the skeleton: decodes what each verb needs and hands it
//! to [`crate::verbs`].

use libcni::skel::{about_string, CmdArgs, Plugin};
use libcni::types::AnyResult;

use crate::config::{AddConfig, ClusterConfig};
use crate::error::Error;
use crate::verbs;
use host_local::lease::Attachment;
use host_local::plugin::IP_ARG;

/// The cluster-ipam plugin, for [`libcni::skel::plugin_main`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ClusterIpam;

impl Plugin for ClusterIpam {
    type Error = Error;

    fn about(&self) -> String {
        about_string("cluster-ipam", env!("CARGO_PKG_VERSION"))
    }

    fn add(&self, args: &CmdArgs) -> Result<AnyResult, Error> {
        let cni_args = args.parse_args(&[IP_ARG])?;
        let config = AddConfig::from_value(args.conf.raw(), cni_args.get(IP_ARG))?;
        let attachment = attachment(args)?;
        Ok(AnyResult::V1(verbs::add::add(&config, &attachment)?))
    }

    fn del(&self, args: &CmdArgs) -> Result<(), Error> {
        verbs::del::del(args.conf.raw(), &attachment(args)?)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        let cluster = ClusterConfig::from_value(args.conf.raw())?;
        verbs::check::check(&cluster, &attachment(args)?)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), Error> {
        let valid: Vec<(&str, &str)> = args
            .conf
            .valid_attachments
            .iter()
            .map(|a| (a.container_id.as_str(), a.ifname.as_str()))
            .collect();
        verbs::gc::gc(args.conf.raw(), &valid)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), Error> {
        verbs::status::status(&AddConfig::from_value(args.conf.raw(), None)?)
    }
}

fn attachment(args: &CmdArgs) -> Result<Attachment, Error> {
    Attachment::new(&args.container_id, &args.ifname)
        .map_err(|e| Error::HostLocal(host_local::Error::Attachment(e)))
}
