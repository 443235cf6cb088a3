//! The veth pair between a container and the host (bridge, ptp).
//!
//! Both ends are made by one netlink request on the host socket, the
//! container end born directly in the container's namespace under its final
//! name, the host end (optionally) already a port of its master: there is
//! never a half-made pair nor a rename, and one request fewer under RTNL.
//! The host end gets a random `veth` + 8 hex digits name
//! ([`link_name::random_veth_name`]), redrawn when it is taken.

use std::os::fd::AsFd;

use crate::error::{CniError, ErrorCode, ToCniError};
use crate::link_name;
use crate::netlink::{LinkInfo, NetlinkError, RouteSocket, VethPair};
use crate::netns::NetNs;

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
    /// Both ends get it; `None` keeps the kernel's default.
    pub mtu: Option<u32>,
    pub container_mac: Option<&'a [u8]>,
    /// A bridge (or other master) the host end joins as it is created.
    pub master: Option<u32>,
}

#[derive(Debug, thiserror::Error)]
pub enum VethError {
    #[error("container interface {ifname:?} already exists in netns {netns:?}")]
    ContainerInterfaceExists { ifname: String, netns: String },
    #[error("could not find a free host veth name after {0} attempts")]
    NamesExhausted(usize),
    #[error("failed to read random bytes for the host veth name: {0}")]
    Random(#[source] std::io::Error),
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
}

impl ToCniError for VethError {
    fn to_cni_error(&self) -> CniError {
        match self {
            VethError::Netlink(e) => e.to_cni_error(),
            // The container or the host in a state ADD cannot work with:
            // 999, as the reference reports them.
            VethError::ContainerInterfaceExists { .. }
            | VethError::NamesExhausted(_)
            | VethError::Random(_) => CniError::new(ErrorCode::Internal, self.to_string()),
        }
    }
}

/// Creates the pair. `host` and `container` are sockets in the host and
/// the container namespace. On error nothing of the pair is left.
pub fn create(
    host: &mut RouteSocket,
    container: &mut RouteSocket,
    spec: &VethSpec<'_>,
) -> Result<Veth, VethError> {
    for _ in 0..NAME_ATTEMPTS {
        let host_name = link_name::random_veth_name().map_err(VethError::Random)?;
        let pair = VethPair {
            name: &host_name,
            peer_name: spec.container_ifname,
            peer_netns: Some(spec.container_netns.as_fd()),
            mtu: spec.mtu,
            mac: None,
            peer_mac: spec.container_mac,
            master: spec.master,
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
                    return Err(VethError::ContainerInterfaceExists {
                        ifname: spec.container_ifname.to_string(),
                        netns: spec.container_netns.path().display().to_string(),
                    });
                }
                log::debug!("host veth name {host_name} is taken, drawing another");
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(VethError::NamesExhausted(NAME_ATTEMPTS))
}

fn lookup(
    host: &mut RouteSocket,
    container: &mut RouteSocket,
    host_name: &str,
    container_ifname: &str,
) -> Result<Veth, VethError> {
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
