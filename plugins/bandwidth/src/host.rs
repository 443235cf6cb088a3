//! Finding the host end of the container's veth, as the reference does:
//! the container interface's peer index (here `IFLA_LINK`, which the
//! reference reads from ethtool's `peer_ifindex`), that index in the host
//! namespace, and its name among the previous result's host interfaces.

use libcni::netlink::{LinkInfo, RouteSocket};
use libcni::netns::NetNs;
use libcni::types::v100;

use crate::error::BandwidthError;

/// The host veth of `container_ifname` (in `netns`), which the previous
/// result must list as a host interface.
pub fn host_veth(
    host: &mut RouteSocket,
    netns: &NetNs,
    container_ifname: &str,
    interfaces: &[v100::Interface],
) -> Result<LinkInfo, BandwidthError> {
    if interfaces.is_empty() {
        return Err(BandwidthError::NoInterfaces);
    }
    let no_peer = |reason: String| BandwidthError::NoVethPeer {
        ifname: container_ifname.to_string(),
        reason,
    };
    // A socket made inside by this thread, there and back, rather than by
    // a new thread there: on a busy node a new thread waited milliseconds
    // to be scheduled, as long as the rest of ADD.
    let mut container = netns
        .enter_briefly(RouteSocket::open_current)
        .map_err(BandwidthError::EnterNetNs)?
        .map_err(|e| no_peer(e.to_string()))?;
    let link = container
        .link_by_name(container_ifname)
        .map_err(|e| no_peer(e.to_string()))?
        .ok_or_else(|| no_peer("Link not found".to_string()))?;
    let peer_index = match (link.kind.as_deref(), link.parent) {
        (Some("veth"), Some(index)) if index > 0 => index,
        (kind, _) => {
            return Err(no_peer(format!(
                "it is a {} link, not a veth",
                kind.unwrap_or("physical")
            )))
        }
    };
    // An index of another namespace's link can name an unrelated host
    // link; only a veth whose own peer is the container end is it.
    let peer = host
        .link_by_index(peer_index)?
        .filter(|peer| peer.kind.as_deref() == Some("veth") && peer.parent == Some(link.index))
        .ok_or(BandwidthError::PeerNotInHost(peer_index))?;
    if interfaces
        .iter()
        .any(|iface| iface.sandbox.is_empty() && iface.name == peer.name)
    {
        Ok(peer)
    } else {
        Err(BandwidthError::PeerNotListed)
    }
}
