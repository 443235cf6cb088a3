//! Links made on top of a parent ("master") link and handed to a
//! container: macvlan, ipvlan and 802.1Q vlan, what the `macvlan`,
//! `ipvlan` and `vlan` plugins create.
//!
//! [`create_in_container`] does what the three plugins share: the link is
//! created under a temporary `veth` + 8 hex digits name, either from the
//! parent's namespace straight into the container (`IFLA_NET_NS_FD`, so it
//! is never visible on the host) or, for `linkInContainer`, inside the
//! container where the parent already is; then it is renamed to
//! `CNI_IFNAME` there. The temporary name keeps a link being made from
//! clashing with a host interface called like `CNI_IFNAME`; a failed rename
//! deletes the link, so the caller gets either the finished link or nothing.
//!
//! [`delete_in_container`] is their DEL, and [`default_route_link`] the
//! parent macvlan and ipvlan default to.
//!
//! [`RouteSocket::sublink`] reads a link back with its kind and the
//! kind's settings (macvlan mode, ipvlan mode, VLAN id), for CHECK.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::link::{
    InfoData, InfoIpVlan, InfoKind, InfoMacVlan, InfoVlan, LinkAttribute, LinkInfo as LinkInfoNla,
    LinkMessage,
};
use netlink_packet_route::RouteNetlinkMessage;
use nix::errno::Errno;

pub use netlink_packet_route::link::{IpVlanMode, MacVlanMode};

use super::retire;
use super::route::{link_message, parse_link, IpFamily, LinkId, LinkInfo, RouteSocket};
use super::socket::NetlinkError;
use crate::error::{CniError, ErrorCode, ToCniError};
use crate::iface::MAIN_TABLE;
use crate::link_name;
use crate::netns::{NetNs, NetNsError};

/// How many temporary names are drawn before giving up; a clash needs two
/// links with the same 32 random bits in one namespace.
pub const NAME_ATTEMPTS: usize = 4;

/// The kind of link and what is specific to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubLinkKind {
    MacVlan {
        mode: MacVlanMode,
        /// `IFLA_MACVLAN_BC_QUEUE_LEN`; `None` keeps the kernel's default.
        bc_queue_len: Option<u32>,
    },
    IpVlan {
        mode: IpVlanMode,
    },
    /// 802.1Q.
    Vlan {
        id: u16,
    },
}

impl SubLinkKind {
    /// The kernel's name of the kind (`IFLA_INFO_KIND`), which is also
    /// the name of the module that provides it.
    pub fn kind_name(&self) -> &'static str {
        match self {
            SubLinkKind::MacVlan { .. } => "macvlan",
            SubLinkKind::IpVlan { .. } => "ipvlan",
            SubLinkKind::Vlan { .. } => "vlan",
        }
    }

    /// The kernel module that provides the kind.
    pub fn module(&self) -> &'static str {
        match self {
            SubLinkKind::MacVlan { .. } => "macvlan",
            SubLinkKind::IpVlan { .. } => "ipvlan",
            SubLinkKind::Vlan { .. } => "8021q",
        }
    }

    fn link_info(&self) -> Vec<LinkInfoNla> {
        match *self {
            SubLinkKind::MacVlan { mode, bc_queue_len } => {
                let mut data = vec![InfoMacVlan::Mode(mode)];
                if let Some(len) = bc_queue_len {
                    data.push(InfoMacVlan::BcQueueLen(len));
                }
                vec![
                    LinkInfoNla::Kind(InfoKind::MacVlan),
                    LinkInfoNla::Data(InfoData::MacVlan(data)),
                ]
            }
            SubLinkKind::IpVlan { mode } => vec![
                LinkInfoNla::Kind(InfoKind::IpVlan),
                LinkInfoNla::Data(InfoData::IpVlan(vec![InfoIpVlan::Mode(mode)])),
            ],
            SubLinkKind::Vlan { id } => vec![
                LinkInfoNla::Kind(InfoKind::Vlan),
                LinkInfoNla::Data(InfoData::Vlan(vec![InfoVlan::Id(id)])),
            ],
        }
    }

    /// The kind's settings from a link's `IFLA_LINKINFO`, for the three
    /// kinds this module makes.
    fn from_link_info(infos: &[LinkInfoNla]) -> Option<SubLinkKind> {
        infos.iter().find_map(|info| match info {
            LinkInfoNla::Data(InfoData::MacVlan(data)) => {
                let mode = data.iter().find_map(|d| match d {
                    InfoMacVlan::Mode(mode) => Some(*mode),
                    _ => None,
                })?;
                let bc_queue_len = data.iter().find_map(|d| match d {
                    InfoMacVlan::BcQueueLen(len) => Some(*len),
                    _ => None,
                });
                Some(SubLinkKind::MacVlan { mode, bc_queue_len })
            }
            LinkInfoNla::Data(InfoData::IpVlan(data)) => data.iter().find_map(|d| match d {
                InfoIpVlan::Mode(mode) => Some(SubLinkKind::IpVlan { mode: *mode }),
                _ => None,
            }),
            LinkInfoNla::Data(InfoData::Vlan(data)) => data.iter().find_map(|d| match d {
                InfoVlan::Id(id) => Some(SubLinkKind::Vlan { id: *id }),
                _ => None,
            }),
            _ => None,
        })
    }
}

/// One link to create, in the namespace of the socket that sends it or
/// in `netns`.
#[derive(Debug, Clone)]
pub struct SubLink<'a> {
    pub name: &'a str,
    /// Index of the parent in the namespace of the creating socket.
    pub parent: u32,
    pub kind: SubLinkKind,
    /// `None` inherits the parent's.
    pub mtu: Option<u32>,
    /// `None` lets the kernel pick (ipvlan and vlan take the parent's).
    pub mac: Option<&'a [u8]>,
    /// Where the link is born; `None` is the socket's namespace.
    pub netns: Option<BorrowedFd<'a>>,
}

/// A link as the kernel reports it, with the settings of its kind when it
/// is a macvlan, ipvlan or vlan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubLinkInfo {
    pub link: LinkInfo,
    pub kind: Option<SubLinkKind>,
}

impl RouteSocket {
    /// Creates one link; a name that exists fails with `EEXIST`, a kind
    /// the kernel lacks with `EOPNOTSUPP`.
    pub fn create_sublink(&mut self, spec: &SubLink<'_>) -> Result<(), NetlinkError> {
        let mut msg = LinkMessage::default();
        msg.attributes
            .push(LinkAttribute::IfName(spec.name.to_string()));
        msg.attributes.push(LinkAttribute::Link(spec.parent));
        if let Some(mtu) = spec.mtu {
            msg.attributes.push(LinkAttribute::Mtu(mtu));
        }
        if let Some(mac) = spec.mac {
            msg.attributes.push(LinkAttribute::Address(mac.to_vec()));
        }
        if let Some(netns) = spec.netns {
            msg.attributes
                .push(LinkAttribute::NetNsFd(netns.as_raw_fd()));
        }
        msg.attributes
            .push(LinkAttribute::LinkInfo(spec.kind.link_info()));
        self.request_ack(RouteNetlinkMessage::NewLink(msg), NLM_F_CREATE | NLM_F_EXCL)
            .map_err(|e| {
                e.context(format!(
                    "create {} {:?} on link #{}",
                    spec.kind.kind_name(),
                    spec.name,
                    spec.parent
                ))
            })
    }

    /// A link with its kind's settings; `None` when there is no such link.
    pub fn sublink<'a>(
        &mut self,
        link: impl Into<LinkId<'a>>,
    ) -> Result<Option<SubLinkInfo>, NetlinkError> {
        let link = link.into();
        let replies = match self.request(RouteNetlinkMessage::GetLink(link_message(link)), 0) {
            Ok(replies) => replies,
            Err(e) if e.errno() == Some(Errno::ENODEV) => return Ok(None),
            Err(e) => return Err(e.context(format!("get {link}"))),
        };
        match replies.into_iter().next() {
            Some(RouteNetlinkMessage::NewLink(msg)) => {
                let kind = msg.attributes.iter().find_map(|a| match a {
                    LinkAttribute::LinkInfo(infos) => SubLinkKind::from_link_info(infos),
                    _ => None,
                });
                Ok(Some(SubLinkInfo {
                    link: parse_link(msg),
                    kind,
                }))
            }
            other => Err(NetlinkError::Unexpected(format!("get {link}: {other:?}"))),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SubLinkError {
    /// The kernel has no such link type (no module, nothing built in).
    #[error("failed to create {kind}: this kernel has no {kind} links ({source}); load the {module:?} kernel module on the node")]
    KindUnsupported {
        kind: &'static str,
        module: &'static str,
        #[source]
        source: NetlinkError,
    },
    #[error("failed to create {kind}: {source}")]
    Create {
        kind: &'static str,
        #[source]
        source: NetlinkError,
    },
    #[error("failed to rename {kind} to {name:?}: {source}")]
    Rename {
        kind: &'static str,
        name: String,
        #[source]
        source: NetlinkError,
    },
    #[error("failed to create {kind}: no free temporary name after {attempts} attempts")]
    NamesTaken { kind: &'static str, attempts: usize },
    #[error("failed to read random bytes for a temporary link name: {0}")]
    Random(#[source] io::Error),
    #[error("{kind} {name:?} is not in the container right after its creation")]
    Vanished { kind: &'static str, name: String },
    #[error("failed to look up the new {kind}: {source}")]
    Lookup {
        kind: &'static str,
        #[source]
        source: NetlinkError,
    },
}

impl ToCniError for SubLinkError {
    fn to_cni_error(&self) -> CniError {
        let code = match self {
            // The node cannot serve this plugin until the module is there.
            SubLinkError::KindUnsupported { .. } => ErrorCode::NotAvailable,
            SubLinkError::Random(_) => ErrorCode::Io,
            SubLinkError::Create { .. }
            | SubLinkError::Rename { .. }
            | SubLinkError::NamesTaken { .. }
            | SubLinkError::Vanished { .. }
            | SubLinkError::Lookup { .. } => ErrorCode::Internal,
        };
        CniError::new(code, self.to_string())
    }
}

/// Which socket makes the link.
pub enum Creator<'a> {
    /// A socket in the parent's namespace (the host): the link is born in
    /// the container, given by `container_netns`.
    Outside {
        socket: &'a mut RouteSocket,
        container_netns: BorrowedFd<'a>,
    },
    /// The parent is in the container (`linkInContainer`): the container
    /// socket makes the link there.
    Inside,
}

/// What [`create_in_container`] makes.
#[derive(Debug, Clone, Copy)]
pub struct ContainerSubLink<'a> {
    /// `CNI_IFNAME`.
    pub ifname: &'a str,
    /// Index of the parent in the namespace of the creating socket.
    pub parent: u32,
    pub kind: SubLinkKind,
    pub mtu: Option<u32>,
    pub mac: Option<&'a [u8]>,
}

/// Creates the link under a temporary name and renames it to `ifname` in
/// the container (see the module docs); returns it as the container sees
/// it. On error nothing is left: a link that was made is deleted again.
pub fn create_in_container(
    creator: Creator<'_>,
    container: &mut RouteSocket,
    spec: &ContainerSubLink<'_>,
) -> Result<LinkInfo, SubLinkError> {
    let kind = spec.kind.kind_name();
    let (mut outside, netns) = match creator {
        Creator::Outside {
            socket,
            container_netns,
        } => (Some(socket), Some(container_netns)),
        Creator::Inside => (None, None),
    };
    let mut temp_name = None;
    for _ in 0..NAME_ATTEMPTS {
        let name = link_name::random_veth_name().map_err(SubLinkError::Random)?;
        let link = SubLink {
            name: &name,
            parent: spec.parent,
            kind: spec.kind,
            mtu: spec.mtu,
            mac: spec.mac,
            netns,
        };
        let created = match outside.as_deref_mut() {
            Some(socket) => socket.create_sublink(&link),
            None => container.create_sublink(&link),
        };
        match created {
            Ok(()) => {
                temp_name = Some(name);
                break;
            }
            // The temporary name is taken in the container: draw another.
            // Otherwise the kernel refuses the link itself (a VLAN id
            // already used on this parent, for one).
            Err(source) if source.is_exists() => match container.link_by_name(&name) {
                Ok(Some(_)) => continue,
                Ok(None) => {
                    let source = match spec.kind {
                        SubLinkKind::Vlan { id } => source
                            .context(format!("the parent already has a VLAN link with id {id}")),
                        SubLinkKind::MacVlan { .. } | SubLinkKind::IpVlan { .. } => source,
                    };
                    return Err(SubLinkError::Create { kind, source });
                }
                Err(lookup) => {
                    return Err(SubLinkError::Lookup {
                        kind,
                        source: lookup,
                    })
                }
            },
            Err(source) if source.errno() == Some(Errno::EOPNOTSUPP) => {
                return Err(SubLinkError::KindUnsupported {
                    kind,
                    module: spec.kind.module(),
                    source,
                })
            }
            Err(source) => return Err(SubLinkError::Create { kind, source }),
        }
    }
    let Some(temp_name) = temp_name else {
        return Err(SubLinkError::NamesTaken {
            kind,
            attempts: NAME_ATTEMPTS,
        });
    };
    let made = match container.link_by_name(&temp_name) {
        Ok(Some(link)) => link,
        Ok(None) => {
            return Err(SubLinkError::Vanished {
                kind,
                name: temp_name,
            })
        }
        Err(source) => {
            delete_quietly(container, LinkId::Name(&temp_name));
            return Err(SubLinkError::Lookup { kind, source });
        }
    };
    let renamed = container
        .set_name(made.index, spec.ifname)
        .and_then(|()| container.link_by_index(made.index));
    match renamed {
        Ok(Some(link)) => Ok(link),
        Ok(None) => Err(SubLinkError::Vanished {
            kind,
            name: spec.ifname.to_string(),
        }),
        Err(source) => {
            delete_quietly(container, LinkId::Index(made.index));
            Err(SubLinkError::Rename {
                kind,
                name: spec.ifname.to_string(),
                source,
            })
        }
    }
}

/// The link of the host's default route, which `macvlan` and `ipvlan`
/// take as the parent when the configuration names none: the first
/// default route of the main table that leaves through one link, IPv4
/// before IPv6, as the reference finds it. `None` when there is none.
pub fn default_route_link(socket: &mut RouteSocket) -> Result<Option<LinkInfo>, NetlinkError> {
    for family in [IpFamily::V4, IpFamily::V6] {
        let oif = socket
            .list_routes(Some(family))?
            .into_iter()
            .filter(|r| r.table == Some(MAIN_TABLE) && r.destination.prefix() == 0)
            .find_map(|r| r.oif);
        if let Some(oif) = oif {
            return socket.link_by_index(oif);
        }
    }
    Ok(None)
}

/// Why [`delete_in_container`] could not finish.
#[derive(Debug, thiserror::Error)]
pub enum DeleteError {
    #[error("failed to open netns {path:?}: {source}")]
    NetNs {
        path: String,
        #[source]
        source: NetNsError,
    },
    #[error("failed to delete {ifname:?}: {source}")]
    Netlink {
        ifname: String,
        #[source]
        source: NetlinkError,
    },
}

impl ToCniError for DeleteError {
    fn to_cni_error(&self) -> CniError {
        let code = match self {
            DeleteError::NetNs { source, .. } => source.error_code(),
            DeleteError::Netlink { .. } => ErrorCode::Internal,
        };
        CniError::new(code, self.to_string())
    }
}

/// DEL's part for these links: deletes `ifname` in the namespace at
/// `netns_path`. A namespace or link that is already gone is success
/// (`false`); a path that is not a namespace is an error.
pub fn delete_in_container(netns_path: &str, ifname: &str) -> Result<bool, DeleteError> {
    let netns = match NetNs::open(netns_path) {
        Ok(netns) => netns,
        Err(source) if source.is_not_exist() => return Ok(false),
        Err(source) => {
            return Err(DeleteError::NetNs {
                path: netns_path.to_string(),
                source,
            })
        }
    };
    let netlink_failed = |source| DeleteError::Netlink {
        ifname: ifname.to_string(),
        source,
    };
    let mut socket = RouteSocket::open_in(&netns).map_err(netlink_failed)?;
    let Some(link) = socket.link_by_name(ifname).map_err(netlink_failed)? else {
        return Ok(false);
    };
    // Deleted detached: the kernel's unregistration of the link was most
    // of a DEL's time (see `retire`).
    retire::retire(&netns, socket, link.index).map_err(netlink_failed)
}

/// Deletes a link while another error is being reported: its own failure
/// can only be logged.
fn delete_quietly(socket: &mut RouteSocket, link: LinkId<'_>) {
    if let Err(e) = socket.delete_link(link) {
        if !e.is_not_found() {
            log::warn!("cannot delete {link} after a failed creation: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::*;
    use crate::netlink::test_support::in_private_netns;
    use crate::netlink::VethPair;
    use crate::netns::NetNs;

    fn veth(socket: &mut RouteSocket, name: &str, peer: &str) -> u32 {
        socket
            .create_veth_pair(&VethPair {
                name,
                peer_name: peer,
                ..VethPair::default()
            })
            .unwrap();
        socket.link_by_name(name).unwrap().unwrap().index
    }

    /// A macvlan made from the "host" into a child namespace arrives there
    /// under its final name with the settings asked for, and reads back.
    #[test]
    fn a_macvlan_is_born_in_the_container_and_reads_back() {
        in_private_netns(|| {
            let mut host = RouteSocket::open_current().unwrap();
            let parent = veth(&mut host, "sl-parent", "sl-peer");
            std::thread::scope(|scope| {
                scope
                    .spawn(|| {
                        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
                        let pod = NetNs::current_thread().unwrap();
                        let mut container = RouteSocket::open_current().unwrap();
                        let mac = [0x02, 0x11, 0x22, 0x33, 0x44, 0x55];
                        let link = create_in_container(
                            Creator::Outside {
                                socket: &mut host,
                                container_netns: pod.as_fd(),
                            },
                            &mut container,
                            &ContainerSubLink {
                                ifname: "net1",
                                parent,
                                kind: SubLinkKind::MacVlan {
                                    mode: MacVlanMode::Private,
                                    bc_queue_len: Some(100),
                                },
                                mtu: Some(1400),
                                mac: Some(&mac),
                            },
                        )
                        .unwrap();
                        assert_eq!(link.name, "net1");
                        assert_eq!(link.mac, mac);
                        assert_eq!(link.mtu, 1400);
                        let read = container.sublink("net1").unwrap().unwrap();
                        assert_eq!(read.link.kind.as_deref(), Some("macvlan"));
                        assert_eq!(
                            read.kind,
                            Some(SubLinkKind::MacVlan {
                                mode: MacVlanMode::Private,
                                bc_queue_len: Some(100)
                            })
                        );
                        // Nothing under a temporary name is left anywhere.
                        for socket in [&mut host, &mut container] {
                            let temps: Vec<String> = socket
                                .list_links()
                                .unwrap()
                                .into_iter()
                                .map(|l| l.name)
                                .filter(|n| n.starts_with("veth"))
                                .collect();
                            assert!(temps.is_empty(), "{temps:?}");
                        }
                    })
                    .join()
                    .unwrap();
            });
        });
    }

    /// A rename onto a taken name deletes the new link again.
    #[test]
    fn a_failed_rename_leaves_nothing() {
        in_private_netns(|| {
            let mut socket = RouteSocket::open_current().unwrap();
            let parent = veth(&mut socket, "sl-master", "sl-taken");
            let before = socket.list_links().unwrap().len();
            let error = create_in_container(
                Creator::Inside,
                &mut socket,
                &ContainerSubLink {
                    ifname: "sl-taken",
                    parent,
                    kind: SubLinkKind::MacVlan {
                        mode: MacVlanMode::Bridge,
                        bc_queue_len: None,
                    },
                    mtu: None,
                    mac: None,
                },
            )
            .unwrap_err();
            assert!(
                matches!(error, SubLinkError::Rename { ref name, .. } if name == "sl-taken"),
                "{error}"
            );
            assert_eq!(socket.list_links().unwrap().len(), before);
        });
    }

    /// Kinds this kernel may lack come back as such, with nothing made;
    /// where the kernel has them, they are made and read back.
    #[test]
    fn ipvlan_and_vlan_are_made_or_refused_cleanly() {
        in_private_netns(|| {
            let mut socket = RouteSocket::open_current().unwrap();
            let parent = veth(&mut socket, "sl-lower", "sl-lower-peer");
            for (ifname, kind) in [
                (
                    "sl-ipvl",
                    SubLinkKind::IpVlan {
                        mode: IpVlanMode::L3,
                    },
                ),
                ("sl-vlan", SubLinkKind::Vlan { id: 42 }),
            ] {
                let before = socket.list_links().unwrap().len();
                let made = create_in_container(
                    Creator::Inside,
                    &mut socket,
                    &ContainerSubLink {
                        ifname,
                        parent,
                        kind,
                        mtu: None,
                        mac: None,
                    },
                );
                match made {
                    Ok(link) => {
                        assert_eq!(link.name, ifname);
                        let read = socket.sublink(ifname).unwrap().unwrap();
                        assert_eq!(read.kind, Some(kind));
                    }
                    Err(e @ SubLinkError::KindUnsupported { .. }) => {
                        assert_eq!(e.to_cni_error().code, ErrorCode::NotAvailable);
                        assert!(e.to_string().contains(kind.module()), "{e}");
                        assert_eq!(socket.list_links().unwrap().len(), before);
                    }
                    Err(e) => panic!("{ifname}: {e}"),
                }
            }
        });
    }

    #[test]
    fn the_default_route_names_the_parent() {
        in_private_netns(|| {
            let mut socket = RouteSocket::open_current().unwrap();
            assert!(default_route_link(&mut socket).unwrap().is_none());
            veth(&mut socket, "sl-uplink", "sl-uplink-peer");
            socket.set_link_up("sl-uplink").unwrap();
            socket.set_link_up("sl-uplink-peer").unwrap();
            let index = socket.link_by_name("sl-uplink").unwrap().unwrap().index;
            socket
                .add_address(index, "192.0.2.2/24".parse().unwrap())
                .unwrap();
            let mut route = crate::netlink::Route::new("0.0.0.0/0".parse().unwrap());
            route.gateway = Some("192.0.2.254".parse().unwrap());
            route.oif = Some(index);
            socket.add_route(&route).unwrap();
            let found = default_route_link(&mut socket).unwrap().unwrap();
            assert_eq!(found.name, "sl-uplink");
        });
    }

    #[test]
    fn delete_in_container_is_idempotent() {
        in_private_netns(|| {
            let netns = NetNs::current_thread().unwrap();
            let path = format!(
                "/proc/{}/task/{}/ns/net",
                std::process::id(),
                nix::unistd::gettid()
            );
            let mut socket = RouteSocket::open_in(&netns).unwrap();
            veth(&mut socket, "sl-gone", "sl-gone-peer");
            assert!(delete_in_container(&path, "sl-gone").unwrap());
            assert!(socket.link_by_name("sl-gone").unwrap().is_none());
            assert!(!delete_in_container(&path, "sl-gone").unwrap());
            let scratch = tempfile::tempdir().unwrap();
            let absent = scratch.path().join("netns-gone");
            assert!(!delete_in_container(absent.to_str().unwrap(), "x").unwrap());
            let error = delete_in_container("/etc/hostname", "x").unwrap_err();
            assert_eq!(error.to_cni_error().code, ErrorCode::InvalidEnvironment);
        });
    }

    #[test]
    fn a_missing_link_reads_as_none() {
        in_private_netns(|| {
            let mut socket = RouteSocket::open_current().unwrap();
            assert!(socket.sublink("sl-nothing").unwrap().is_none());
            assert!(socket.sublink("lo").unwrap().unwrap().kind.is_none());
        });
    }
}
