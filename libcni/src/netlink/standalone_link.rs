//! Links without a parent that a plugin makes in the container's
//! namespace itself: a dummy (the `dummy` plugin's interface) and a VRF
//! device (the `vrf` plugin's routing domain).
//!
//! Unlike [`super::sublink`], nothing crosses namespaces, so there is no
//! temporary name: the link is born under its final name, and an existing
//! link of that name is an error ([`StandaloneLinkError::Exists`]), never
//! reused. A kernel without the link type (no module, nothing built in)
//! answers `EOPNOTSUPP`, reported as [`StandaloneLinkError::KindUnsupported`]
//! with the module to load: code 50, the node cannot serve the plugin.

use netlink_packet_core::{NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVrf, LinkAttribute, LinkInfo as LinkInfoNla, LinkMessage,
};
use netlink_packet_route::RouteNetlinkMessage;
use nix::errno::Errno;

use super::route::{parse_link, LinkInfo, RouteSocket};
use super::socket::NetlinkError;
use crate::error::{CniError, ErrorCode, ToCniError};

/// The kind of link and what is specific to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StandaloneKind {
    Dummy,
    /// A VRF device bound to routing table `table`.
    Vrf {
        table: u32,
    },
}

impl StandaloneKind {
    /// The kernel's name of the kind (`IFLA_INFO_KIND`).
    pub fn kind_name(&self) -> &'static str {
        match self {
            StandaloneKind::Dummy => "dummy",
            StandaloneKind::Vrf { .. } => "vrf",
        }
    }

    /// The kernel module that provides the kind.
    pub fn module(&self) -> &'static str {
        match self {
            StandaloneKind::Dummy => "dummy",
            StandaloneKind::Vrf { .. } => "vrf",
        }
    }

    fn link_info(&self) -> Vec<LinkInfoNla> {
        match *self {
            StandaloneKind::Dummy => vec![LinkInfoNla::Kind(InfoKind::Dummy)],
            StandaloneKind::Vrf { table } => vec![
                LinkInfoNla::Kind(InfoKind::Vrf),
                LinkInfoNla::Data(InfoData::Vrf(vec![InfoVrf::TableId(table)])),
            ],
        }
    }
}

/// One link to create in the socket's namespace.
#[derive(Debug, Clone, Copy)]
pub struct StandaloneLink<'a> {
    pub name: &'a str,
    pub kind: StandaloneKind,
    /// `None`: the kernel's default for the kind.
    pub mtu: Option<u32>,
    /// `None`: the kernel picks a random one.
    pub mac: Option<&'a [u8]>,
}

#[derive(Debug, thiserror::Error)]
pub enum StandaloneLinkError {
    #[error("failed to create {kind} {name:?}: this kernel has no {kind} links ({source}); load the {module:?} kernel module on the node")]
    KindUnsupported {
        kind: &'static str,
        name: String,
        module: &'static str,
        #[source]
        source: NetlinkError,
    },
    #[error("failed to create {kind} {name:?}: a link of that name already exists")]
    Exists {
        kind: &'static str,
        name: String,
        #[source]
        source: NetlinkError,
    },
    #[error("failed to create {kind} {name:?}: {source}")]
    Create {
        kind: &'static str,
        name: String,
        #[source]
        source: NetlinkError,
    },
}

impl ToCniError for StandaloneLinkError {
    fn to_cni_error(&self) -> CniError {
        let code = match self {
            // The node cannot serve this plugin until the module is there.
            StandaloneLinkError::KindUnsupported { .. } => ErrorCode::NotAvailable,
            StandaloneLinkError::Exists { .. } | StandaloneLinkError::Create { .. } => {
                ErrorCode::Internal
            }
        };
        CniError::new(code, self.to_string())
    }
}

/// A VRF device as the kernel lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VrfLink {
    pub link: LinkInfo,
    pub table: u32,
}

impl RouteSocket {
    /// Creates the link under its name; see the module docs for the
    /// errors.
    pub fn create_standalone_link(
        &mut self,
        spec: &StandaloneLink<'_>,
    ) -> Result<(), StandaloneLinkError> {
        let mut msg = LinkMessage::default();
        msg.attributes
            .push(LinkAttribute::IfName(spec.name.to_string()));
        if let Some(mtu) = spec.mtu {
            msg.attributes.push(LinkAttribute::Mtu(mtu));
        }
        if let Some(mac) = spec.mac {
            msg.attributes.push(LinkAttribute::Address(mac.to_vec()));
        }
        msg.attributes
            .push(LinkAttribute::LinkInfo(spec.kind.link_info()));
        let kind = spec.kind.kind_name();
        let name = spec.name.to_string();
        match self.request_ack(RouteNetlinkMessage::NewLink(msg), NLM_F_CREATE | NLM_F_EXCL) {
            Ok(()) => Ok(()),
            Err(source) if source.errno() == Some(Errno::EOPNOTSUPP) => {
                Err(StandaloneLinkError::KindUnsupported {
                    kind,
                    name,
                    module: spec.kind.module(),
                    source,
                })
            }
            Err(source) if source.is_exists() => {
                Err(StandaloneLinkError::Exists { kind, name, source })
            }
            Err(source) => Err(StandaloneLinkError::Create { kind, name, source }),
        }
    }

    /// Every VRF device of the namespace, with its routing table.
    pub fn list_vrfs(&mut self) -> Result<Vec<VrfLink>, NetlinkError> {
        let replies = self
            .request(
                RouteNetlinkMessage::GetLink(LinkMessage::default()),
                NLM_F_DUMP,
            )
            .map_err(|e| e.context("list links"))?;
        Ok(replies
            .into_iter()
            .filter_map(|reply| match reply {
                RouteNetlinkMessage::NewLink(msg) => {
                    let table = vrf_table(&msg)?;
                    Some(VrfLink {
                        link: parse_link(msg),
                        table,
                    })
                }
                _ => None,
            })
            .collect())
    }
}

/// The table of a VRF device's `IFLA_LINKINFO`; `None` for other links.
fn vrf_table(msg: &LinkMessage) -> Option<u32> {
    msg.attributes.iter().find_map(|attribute| match attribute {
        LinkAttribute::LinkInfo(infos) => infos.iter().find_map(|info| match info {
            LinkInfoNla::Data(InfoData::Vrf(data)) => data.iter().find_map(|d| match d {
                InfoVrf::TableId(table) => Some(*table),
                _ => None,
            }),
            _ => None,
        }),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::test_support::in_private_netns;

    /// Where the kernel has the kind, the link is made under its name and
    /// a second one of that name is refused; where it lacks it, the error
    /// names the module and nothing is made.
    #[test]
    fn dummy_and_vrf_are_made_or_refused_cleanly() {
        in_private_netns(|| {
            let mut socket = RouteSocket::open_current().unwrap();
            for (name, kind) in [
                ("sa-dummy", StandaloneKind::Dummy),
                ("sa-vrf", StandaloneKind::Vrf { table: 77 }),
            ] {
                let before = socket.list_links().unwrap().len();
                let spec = StandaloneLink {
                    name,
                    kind,
                    mtu: None,
                    mac: None,
                };
                match socket.create_standalone_link(&spec) {
                    Ok(()) => {
                        let link = socket.link_by_name(name).unwrap().unwrap();
                        assert_eq!(link.kind.as_deref(), Some(kind.kind_name()));
                        let again = socket.create_standalone_link(&spec).unwrap_err();
                        assert!(
                            matches!(again, StandaloneLinkError::Exists { .. }),
                            "{again}"
                        );
                        if let StandaloneKind::Vrf { table } = kind {
                            let vrfs = socket.list_vrfs().unwrap();
                            assert_eq!(vrfs.len(), 1);
                            assert_eq!(vrfs[0].table, table);
                            assert_eq!(vrfs[0].link.name, name);
                        }
                    }
                    Err(e @ StandaloneLinkError::KindUnsupported { .. }) => {
                        assert_eq!(e.to_cni_error().code, ErrorCode::NotAvailable);
                        assert!(e.to_string().contains(kind.module()), "{e}");
                        assert_eq!(socket.list_links().unwrap().len(), before);
                    }
                    Err(e) => panic!("{name}: {e}"),
                }
            }
            assert!(socket.list_vrfs().unwrap().len() <= 1);
        });
    }
}
