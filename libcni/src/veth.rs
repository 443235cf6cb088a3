//! The veth pair between a container and the host (bridge, ptp).
//!
//! Both ends are made by one netlink request on the host socket, the
//! container end born directly in the container's namespace under its final
//! name, the host end (optionally) already a port of its master: there is
//! never a half-made pair nor a rename, and one request fewer under RTNL.
//! The host end gets a random `veth` + 8 hex digits name
//! ([`link_name::random_veth_name`]), redrawn when it is taken.

use std::os::fd::AsFd;

use ipnetwork::IpNetwork;

use crate::error::{CniError, ErrorCode, ToCniError};
use crate::link_name;
use crate::netlink::{LinkInfo, NetlinkError, RouteSocket, VethPair};
use crate::netns::NetNs;
use crate::skel::CmdArgs;
use crate::types::v100;

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

/// Deletes the pair by its host end, the undo of [`create`] once the pair
/// is in the caller's rollback; a pair already gone (the container's
/// namespace deleted with its end) is fine.
pub fn delete_host_end(
    host: &mut RouteSocket,
    host_index: u32,
    host_name: &str,
) -> Result<(), NetlinkError> {
    match host.delete_link(host_index) {
        Err(e) if !e.is_not_found() => Err(e.context(format!("delete veth {host_name:?}"))),
        _ => Ok(()),
    }
}

/// DEL's list of the container's addresses, whose masquerade rules go:
/// those `on_link` (read from the container end before it went), then any
/// more the prevResult names, as the link may already have been gone. A
/// prevResult that cannot be read is logged and passed over: DEL goes on.
pub fn addresses_for_del(on_link: Vec<IpNetwork>, args: &CmdArgs) -> Vec<IpNetwork> {
    let mut ips = on_link;
    for ip in prev_result_ips(args) {
        if !ips.contains(&ip) {
            ips.push(ip);
        }
    }
    ips
}

fn prev_result_ips(args: &CmdArgs) -> Vec<IpNetwork> {
    let prev = match args.conf.prev_result() {
        Ok(Some(prev)) => prev,
        Ok(None) => return Vec::new(),
        Err(e) => {
            log::warn!("ignoring the prevResult: {e}");
            return Vec::new();
        }
    };
    match v100::Result::try_from(prev) {
        Ok(prev) => prev.ips.into_iter().map(|ip| ip.address).collect(),
        Err(e) => {
            log::warn!("ignoring the prevResult: {e}");
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin_conf::PluginConf;
    use crate::skel::Command;
    use serde_json::json;

    fn del_args(conf: serde_json::Value) -> CmdArgs {
        let stdin_data = serde_json::to_vec(&conf).unwrap();
        CmdArgs {
            command: Command::Del,
            container_id: "c1".into(),
            netns: String::new(),
            ifname: "eth0".into(),
            args: String::new(),
            path: Vec::new(),
            netns_override: false,
            conf: PluginConf::from_slice(&stdin_data).unwrap(),
            stdin_data,
        }
    }

    #[test]
    fn del_takes_the_links_addresses_then_the_prev_results_others() {
        let on_link: Vec<IpNetwork> = vec!["10.1.0.2/24".parse().unwrap()];
        let prev = json!({
            "cniVersion": "1.0.0", "name": "net", "type": "ptp",
            "prevResult": {"cniVersion": "1.0.0", "ips": [
                {"address": "10.1.0.2/24"}, {"address": "fd00::2/64"}
            ]}
        });
        assert_eq!(
            addresses_for_del(on_link.clone(), &del_args(prev)),
            [on_link[0], "fd00::2/64".parse().unwrap()]
        );
        // No prevResult, or one that cannot be read: the link's only.
        let none = json!({"cniVersion": "1.0.0", "name": "net", "type": "ptp"});
        assert_eq!(addresses_for_del(on_link.clone(), &del_args(none)), on_link);
        let broken = json!({
            "cniVersion": "1.0.0", "name": "net", "type": "ptp",
            "prevResult": {"cniVersion": "1.0.0", "ips": "not a list"}
        });
        assert_eq!(addresses_for_del(Vec::new(), &del_args(broken)), []);
    }
}
