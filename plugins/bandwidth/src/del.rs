//! DEL: delete the attachment's ifb, found by its name alone, so neither
//! the namespace nor the previous result is needed. A missing ifb is
//! success. The qdiscs on the host veth go with the veth, which the plugin
//! before this one deletes (as in the reference).
//!
//! A link of that name that is not an ifb is left alone: it is not ours.
//!
//! The kernel's unregistration of the ifb waits for RCU grace periods and
//! an `rcu_barrier` after it has unlisted the link, and that wait was most
//! of a DEL's time; so the request goes from a detached child and DEL
//! returns once the ifb is unlisted and its name free
//! ([`libcni::netlink::retire`]).

use libcni::netlink::{retire, RouteSocket};
use libcni::netns::NetNs;
use libcni::skel::CmdArgs;

use crate::config;
use crate::error::BandwidthError;

pub fn del(args: &CmdArgs) -> Result<(), BandwidthError> {
    // The reference validates here too: a bad configuration fails DEL.
    config::parse(args)?;
    let name = config::ifb_name(&args.conf.name, &args.container_id);
    let mut socket = RouteSocket::open_current()?;
    match socket.link_by_name(&name)? {
        Some(link) if link.kind.as_deref() == Some("ifb") => {
            let host = NetNs::current_thread().map_err(BandwidthError::HostNetNs)?;
            if retire::retire(&host, socket, link.index)? {
                log::info!("deleted ifb {name} (the container's egress shaping)");
            }
            Ok(())
        }
        Some(link) => {
            log::warn!(
                "{name} is a {} link, not an ifb; left alone",
                link.kind.as_deref().unwrap_or("physical")
            );
            Ok(())
        }
        None => Ok(()),
    }
}
