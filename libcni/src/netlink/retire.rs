//! Deleting a container's link without waiting for the kernel's cleanup,
//! for plugins whose DEL deletes a link they made (macvlan, ipvlan, vlan).
//!
//! `RTM_DELLINK` of such a link returns only after the kernel has closed
//! it (an RCU grace period, 10-16 ms on the test VM), unlisted it, and then
//! waited for more grace periods and an `rcu_barrier` (25 ms in all, most
//! of such a DEL). Only the first part matters to a runtime: once the link
//! is unlisted its name is free for an ADD that follows in the same
//! namespace. So the request is sent from a detached child and DEL returns
//! as soon as the link is no longer listed
//! ([`RouteSocket::delete_link_detached`]). Should the child die before
//! the kernel gets the request, the link is still listed when the wait
//! ends and is deleted in the foreground, so it never outlives the call.

use super::route::RouteSocket;
use super::socket::NetlinkError;
use crate::netns::NetNs;

/// Deletes link `index` of `netns` as the module docs say, through
/// `socket` (bound to `netns`); `false` when it was already gone.
pub fn retire(netns: &NetNs, socket: RouteSocket, index: u32) -> Result<bool, NetlinkError> {
    // The detached request takes its socket along; this one looks after.
    let mut check = RouteSocket::open_in(netns)?;
    if check.link_by_index(index)?.is_none() {
        return Ok(false);
    }
    socket.delete_link_detached(index)?;
    if check.link_by_index(index)?.is_none() {
        return Ok(true);
    }
    log::debug!("link #{index} still listed after the detached deletion; deleting it now");
    match check.delete_link(index) {
        Ok(()) => Ok(true),
        Err(e) if e.is_not_found() => Ok(true),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::test_support::in_private_netns;
    use crate::netlink::VethPair;

    #[test]
    fn a_retired_link_is_unlisted_and_its_name_free_at_once() {
        in_private_netns(|| {
            let netns = NetNs::current_thread().unwrap();
            let mut socket = RouteSocket::open_current().unwrap();
            socket
                .create_veth_pair(&VethPair {
                    name: "rt-pod",
                    peer_name: "rt-peer",
                    ..VethPair::default()
                })
                .unwrap();
            socket.set_link_up("rt-pod").unwrap();
            let index = socket.link_by_name("rt-pod").unwrap().unwrap().index;
            let retired = retire(&netns, RouteSocket::open_current().unwrap(), index);
            assert!(retired.unwrap());
            assert!(socket.link_by_index(index).unwrap().is_none());
            // The name is free for the next ADD right away.
            socket
                .create_veth_pair(&VethPair {
                    name: "rt-pod",
                    peer_name: "rt-peer",
                    ..VethPair::default()
                })
                .unwrap();
            // Already gone: nothing to do, and no error.
            let again = retire(&netns, RouteSocket::open_current().unwrap(), index);
            assert!(!again.unwrap());
        });
    }
}
