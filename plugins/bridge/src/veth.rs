//! The veth pair between the container and the bridge.
//!
//! Both ends are made by one netlink request on the host socket, the
//! container end born directly in the container's namespace under its final
//! name, the host end already a port of the bridge: there is never a
//! half-made pair nor a rename, and one request fewer under RTNL. The host end gets a
//! random `veth` + 8 hex digits name, redrawn when it is taken.

use std::os::fd::AsFd;

use libcni::link_name;
use libcni::netlink::{LinkInfo, NetlinkError, RouteSocket, VethPair};
use libcni::netns::NetNs;

use crate::error::BridgeError;

/// How many random host names are tried, as in the reference.
pub const NAME_ATTEMPTS: usize = 10;

/// A created pair, as the kernel reports each end.
#[derive(Debug, Clone)]
pub struct Veth {
    pub host: LinkInfo,
    pub container: LinkInfo,
}

/// What to create.
#[derive(Debug, Clone, Copy)]
pub struct VethSpec<'a> {
    pub container_ifname: &'a str,
    pub container_netns: &'a NetNs,
    pub mtu: Option<u32>,
    pub container_mac: Option<&'a [u8]>,
    /// The bridge the host end joins as it is created.
    pub bridge_index: u32,
}

/// Creates the pair. `host` and `container` are sockets in the host and
/// the container namespace.
pub fn create(
    host: &mut RouteSocket,
    container: &mut RouteSocket,
    spec: &VethSpec<'_>,
) -> Result<Veth, BridgeError> {
    for _ in 0..NAME_ATTEMPTS {
        let host_name = link_name::random_veth_name().map_err(BridgeError::Random)?;
        let pair = VethPair {
            name: &host_name,
            peer_name: spec.container_ifname,
            peer_netns: Some(spec.container_netns.as_fd()),
            mtu: spec.mtu,
            mac: None,
            peer_mac: spec.container_mac,
            master: Some(spec.bridge_index),
        };
        match host.create_veth_pair(&pair) {
            Ok(()) => {
                let found = lookup(host, container, &host_name, spec.container_ifname);
                if found.is_err() {
                    // Not handed to the caller's rollback yet: undo here.
                    let _ = host.delete_link(host_name.as_str());
                }
                return found;
            }
            Err(e) if e.is_exists() => {
                // EEXIST does not say which end: a taken host name is worth
                // another draw, a taken container name is final.
                if container.link_by_name(spec.container_ifname)?.is_some() {
                    return Err(BridgeError::ContainerInterfaceExists {
                        ifname: spec.container_ifname.to_string(),
                        netns: spec.container_netns.path().display().to_string(),
                    });
                }
                log::debug!("host veth name {host_name} is taken, drawing another");
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(BridgeError::VethNamesExhausted(NAME_ATTEMPTS))
}

fn lookup(
    host: &mut RouteSocket,
    container: &mut RouteSocket,
    host_name: &str,
    container_ifname: &str,
) -> Result<Veth, BridgeError> {
    let missing = |name: &str| {
        NetlinkError::Unexpected(format!("veth end {name:?} not found right after creation"))
    };
    let host_link = host
        .link_by_name(host_name)?
        .ok_or_else(|| missing(host_name))?;
    let container_link = container
        .link_by_name(container_ifname)?
        .ok_or_else(|| missing(container_ifname))?;
    Ok(Veth {
        host: host_link,
        container: container_link,
    })
}
