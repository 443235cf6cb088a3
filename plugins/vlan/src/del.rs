//! DEL: idempotent and best effort.
//!
//! The container interface is deleted (a namespace or link already gone is
//! success), then the IPAM plugin releases the lease; both run whatever
//! the other did, and the failures are reported together. No plugin key is
//! read beyond `ipam.type` and nothing else is checked: a configuration
//! ADD refused, or whose master has gone since, can still be deleted (the
//! reference's DEL reads the whole configuration and fails then, and also
//! with `linkInContainer` once the namespace is gone).
//! Without `CNI_NETNS` (containerd's second DEL) only IPAM DEL runs.

use libcni::invoke::{Delegator, Exec};
use libcni::netlink::sublink_plugin;
use libcni::skel::CmdArgs;

use crate::error::VlanError;

pub fn del<E: Exec>(args: &CmdArgs, ipam: &Delegator<E>) -> Result<(), VlanError> {
    VlanError::from_many(sublink_plugin::del(args, ipam)).map_or(Ok(()), Err)
}
