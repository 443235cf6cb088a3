//! Deleting a container's link without waiting for the kernel's
//! unregistration, for every plugin whose DEL deletes a link it made.
//!
//! `RTM_DELLINK` of a veth, macvlan, ipvlan or VLAN link returns only after
//! RCU grace periods and an `rcu_barrier` (10-25 ms on the test VM, most of
//! such a DEL), although the link stopped mattering at its start. So a link
//! is first *parked*: set down (no traffic, no answers for its released
//! addresses) and renamed `cnidel-<index>`, so that an ADD following at once
//! finds the interface name free; then its deletion is sent from a detached
//! child ([`RouteSocket::delete_link_detached`]). Should that child die
//! before the kernel gets the request, the parked link stays: the next DEL
//! in the namespace deletes it ([`parked_links`]), or the namespace takes
//! it along when it goes.

use super::route::{LinkInfo, RouteSocket};
use super::socket::NetlinkError;

/// The name prefix of a parked link (`cnidel-<index in hex>`, at most 15
/// bytes).
pub const PARKED_PREFIX: &str = "cnidel-";

/// Sets link `index` down and renames it out of the way; `false` when it
/// vanished meanwhile. Two requests: the kernel renames only a link that is
/// already down.
pub fn park(socket: &mut RouteSocket, index: u32) -> Result<bool, NetlinkError> {
    let parked_name = format!("{PARKED_PREFIX}{index:x}");
    let outcome = socket
        .set_link_down(index)
        .and_then(|()| socket.set_name(index, &parked_name));
    match outcome {
        Err(e) if e.is_not_found() => Ok(false),
        Err(e) => Err(e),
        Ok(()) => Ok(true),
    }
}

/// Parks link `index` and leaves its deletion to a detached child; `false`
/// when the link was already gone. Where parking fails, the link is
/// deleted in the foreground instead, so it never outlives the call.
pub fn retire(mut socket: RouteSocket, index: u32) -> Result<bool, NetlinkError> {
    match park(&mut socket, index) {
        Ok(true) => socket.delete_link_detached(index).map(|()| true),
        Ok(false) => Ok(false),
        Err(e) => {
            log::debug!("cannot park link #{index} ({e}); deleting it now");
            match socket.delete_link(index) {
                Ok(()) => Ok(true),
                Err(e) if e.is_not_found() => Ok(false),
                Err(e) => Err(e),
            }
        }
    }
}

/// The links of `links` an earlier DEL parked and whose deletion never
/// happened, among those of `kinds` (a plugin names its own link kinds, so
/// it never deletes another plugin's parked link).
pub fn parked_links(links: &[LinkInfo], kinds: &[&str]) -> Vec<u32> {
    links
        .iter()
        .filter(|l| {
            l.name.starts_with(PARKED_PREFIX)
                && l.kind.as_deref().is_some_and(|k| kinds.contains(&k))
        })
        .map(|l| l.index)
        .collect()
}

/// Deletes parked links in the foreground (rare: see the module docs); one
/// already gone is fine, another failure is only logged, since it must not
/// fail the DEL that found it.
pub fn delete_parked(socket: &mut RouteSocket, parked: &[u32]) {
    for &index in parked {
        if let Err(e) = socket.delete_link(index) {
            if !e.is_not_found() {
                log::warn!("delete parked link #{index}: {e}");
            }
        }
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
            let mut socket = RouteSocket::open_current().unwrap();
            socket
                .create_veth_pair(&VethPair {
                    name: "rt-pod",
                    peer_name: "rt-peer",
                    ..VethPair::default()
                })
                .unwrap();
            let index = socket.link_by_name("rt-pod").unwrap().unwrap().index;
            assert!(retire(RouteSocket::open_current().unwrap(), index).unwrap());
            assert!(socket.link_by_index(index).unwrap().is_none());
            assert!(socket.link_by_name("rt-pod").unwrap().is_none());
            // Already gone: nothing to do, and no error.
            assert!(!retire(RouteSocket::open_current().unwrap(), index).unwrap());
        });
    }

    #[test]
    fn parked_links_of_other_kinds_are_left_alone() {
        in_private_netns(|| {
            let mut socket = RouteSocket::open_current().unwrap();
            socket
                .create_veth_pair(&VethPair {
                    name: "pk-a",
                    peer_name: "pk-b",
                    ..VethPair::default()
                })
                .unwrap();
            let index = socket.link_by_name("pk-a").unwrap().unwrap().index;
            assert!(park(&mut socket, index).unwrap());
            let links = socket.list_links().unwrap();
            assert_eq!(parked_links(&links, &["veth"]), vec![index]);
            assert!(parked_links(&links, &["macvlan"]).is_empty());
            delete_parked(&mut socket, &[index]);
            assert!(socket.link_by_index(index).unwrap().is_none());
        });
    }
}
