//! DEL: idempotent and best effort.
//!
//! The container interface is deleted (a namespace or link already gone is
//! success), then the IPAM plugin releases the lease; both run whatever
//! the other did, and the failures are reported together. No plugin key is
//! read beyond `ipam.type` and nothing else is checked: a configuration
//! ADD refused, or whose master has gone since, can still be deleted.
//! Without `CNI_NETNS` (containerd's second DEL) only IPAM DEL runs.

use libcni::invoke::{Delegator, Exec};
use libcni::netlink::sublink::delete_in_container;
use libcni::skel::CmdArgs;

use crate::error::IpvlanError;

pub fn del<E: Exec>(args: &CmdArgs, ipam: &Delegator<E>) -> Result<(), IpvlanError> {
    let mut errors = Vec::new();
    if !args.netns.is_empty() {
        // Before the lease goes, so the address is not handed out again
        // while this link still answers for it.
        match delete_in_container(&args.netns, &args.ifname) {
            Ok(true) => {}
            Ok(false) => log::debug!("{:?} was already gone", args.ifname),
            Err(e) => errors.push(IpvlanError::from(e)),
        }
    }
    if let Some(plugin) = ipam_type(args) {
        if let Err(source) = ipam.del(plugin, args.conf.bytes()) {
            errors.push(IpvlanError::Ipam {
                action: "IPAM DEL with",
                plugin: plugin.to_string(),
                source,
            });
        }
    }
    IpvlanError::from_many(errors).map_or(Ok(()), Err)
}

/// The IPAM plugin of the configuration; `None` for layer 2.
pub fn ipam_type(args: &CmdArgs) -> Option<&str> {
    args.conf
        .ipam
        .as_ref()
        .map(|ipam| ipam.ipam_type.as_str())
        .filter(|t| !t.is_empty())
}
