//! What identifies a link beyond its name and index, with the one setter
//! among them: the alias (`IFLA_IFALIAS`, a free text the kernel keeps
//! with the device, also across namespaces), the permanent hardware
//! address (`IFLA_PERM_ADDRESS`) and the bus device behind the link
//! (`IFLA_PARENT_DEV_BUS_NAME` and `IFLA_PARENT_DEV_NAME`, for a PCI NIC
//! `pci` and its address).
//!
//! The parent device comes from netlink rather than sysfs on purpose:
//! sysfs shows the links of the namespace it was mounted in, netlink those
//! of the socket's namespace, which is the one a plugin is asking about.

use netlink_packet_core::DefaultNla;
use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use netlink_packet_route::RouteNetlinkMessage;
use nix::errno::Errno;

use super::route::{link_message, LinkId, RouteSocket};
use super::socket::NetlinkError;

/// `IFLA_IFALIAS`; sent raw, with no payload, to clear an alias.
const IFLA_IFALIAS: u16 = 20;
/// `IFALIASZ`: an alias must be shorter.
pub const MAX_ALIAS_BYTES: usize = 255;

/// A link's name, alias, hardware addresses and bus device.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkIdentity {
    pub index: u32,
    pub name: String,
    /// `None` when the link has no alias (or an empty one).
    pub alias: Option<String>,
    /// The current hardware address; empty when the link has none.
    pub mac: Vec<u8>,
    /// The address the hardware came with; `None` for virtual links.
    pub permanent_mac: Option<Vec<u8>>,
    /// The bus of the device behind the link (`pci`, `auxiliary`,
    /// `netdevsim`, ...); `None` for virtual links and old kernels.
    pub parent_bus: Option<String>,
    /// That device's name on its bus (a PCI address for `pci`).
    pub parent_device: Option<String>,
}

impl LinkIdentity {
    /// The PCI address of the device behind the link, when it is on the
    /// PCI bus.
    pub fn pci_address(&self) -> Option<&str> {
        match (self.parent_bus.as_deref(), self.parent_device.as_deref()) {
            (Some("pci"), Some(address)) => Some(address),
            _ => None,
        }
    }
}

impl RouteSocket {
    /// The link's identity; `None` when there is no such link.
    pub fn link_identity<'a>(
        &mut self,
        link: impl Into<LinkId<'a>>,
    ) -> Result<Option<LinkIdentity>, NetlinkError> {
        let link = link.into();
        let replies = match self.request(RouteNetlinkMessage::GetLink(link_message(link)), 0) {
            Ok(replies) => replies,
            Err(e) if e.errno() == Some(Errno::ENODEV) => return Ok(None),
            Err(e) => return Err(e.context(format!("get {link}"))),
        };
        match replies.into_iter().next() {
            Some(RouteNetlinkMessage::NewLink(msg)) => Ok(Some(parse_identity(msg))),
            other => Err(NetlinkError::Unexpected(format!("get {link}: {other:?}"))),
        }
    }

    /// The identities of every link of the namespace.
    pub fn list_link_identities(&mut self) -> Result<Vec<LinkIdentity>, NetlinkError> {
        let replies = self.request(
            RouteNetlinkMessage::GetLink(LinkMessage::default()),
            netlink_packet_core::NLM_F_DUMP,
        )?;
        Ok(replies
            .into_iter()
            .filter_map(|reply| match reply {
                RouteNetlinkMessage::NewLink(msg) => Some(parse_identity(msg)),
                _ => None,
            })
            .collect())
    }

    /// Sets the alias, or clears it (`None` or an empty text). The kernel
    /// refuses one of [`MAX_ALIAS_BYTES`] or more with `EINVAL`.
    pub fn set_alias<'a>(
        &mut self,
        link: impl Into<LinkId<'a>>,
        alias: Option<&str>,
    ) -> Result<(), NetlinkError> {
        let link = link.into();
        let mut msg = link_message(link);
        // An attribute without payload frees the alias; an empty string
        // with its NUL would leave a one-byte alias behind.
        msg.attributes.push(match alias.filter(|a| !a.is_empty()) {
            Some(alias) => LinkAttribute::IfAlias(alias.to_string()),
            None => LinkAttribute::Other(DefaultNla::new(IFLA_IFALIAS, Vec::new())),
        });
        self.request_ack(RouteNetlinkMessage::SetLink(msg), 0)
            .map_err(|e| match alias {
                Some(alias) if !alias.is_empty() => {
                    e.context(format!("set alias {alias:?} on {link}"))
                }
                _ => e.context(format!("clear the alias of {link}")),
            })
    }
}

fn parse_identity(msg: LinkMessage) -> LinkIdentity {
    let mut identity = LinkIdentity {
        index: msg.header.index,
        ..LinkIdentity::default()
    };
    for attribute in msg.attributes {
        match attribute {
            LinkAttribute::IfName(name) => identity.name = name,
            LinkAttribute::IfAlias(alias) if !alias.is_empty() => identity.alias = Some(alias),
            LinkAttribute::Address(mac) => identity.mac = mac,
            LinkAttribute::PermAddress(mac) => identity.permanent_mac = Some(mac),
            LinkAttribute::ParentDevBusName(bus) => identity.parent_bus = Some(bus),
            LinkAttribute::ParentDevName(device) => identity.parent_device = Some(device),
            _ => {}
        }
    }
    identity
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::test_support::in_private_netns;
    use crate::netlink::VethPair;

    /// An alias is set, read back, listed, and cleared; a veth has no
    /// permanent address and no bus device.
    #[test]
    fn alias_round_trip_on_a_veth() {
        if !nix::unistd::Uid::effective().is_root() {
            return;
        }
        in_private_netns(|| {
            let mut socket = RouteSocket::open_current().unwrap();
            socket
                .create_veth_pair(&VethPair {
                    name: "ida0",
                    peer_name: "ida1",
                    ..VethPair::default()
                })
                .unwrap();
            let before = socket.link_identity("ida0").unwrap().unwrap();
            assert_eq!(before.name, "ida0");
            assert_eq!(before.alias, None);
            assert_eq!(before.mac.len(), 6);
            assert_eq!(before.permanent_mac, None);
            assert_eq!(before.pci_address(), None);

            socket.set_alias("ida0", Some("eth7")).unwrap();
            let after = socket.link_identity(before.index).unwrap().unwrap();
            assert_eq!(after.alias.as_deref(), Some("eth7"));
            let listed = socket.list_link_identities().unwrap();
            let peer = listed.iter().find(|l| l.name == "ida1").unwrap();
            assert_eq!(peer.alias, None);
            assert!(listed
                .iter()
                .any(|l| l.name == "ida0" && l.alias.as_deref() == Some("eth7")));

            socket.set_alias("ida0", None).unwrap();
            assert_eq!(socket.link_identity("ida0").unwrap().unwrap().alias, None);
            socket.set_alias("ida0", Some("x")).unwrap();
            socket.set_alias("ida0", Some("")).unwrap();
            assert_eq!(socket.link_identity("ida0").unwrap().unwrap().alias, None);

            let too_long = "a".repeat(MAX_ALIAS_BYTES);
            assert!(socket.set_alias("ida0", Some(&too_long)).is_err());
            assert!(socket.link_identity("nope0").unwrap().is_none());
            let e = socket.set_alias("nope0", Some("x")).unwrap_err();
            assert!(e.is_not_found(), "{e}");
        });
    }

    #[test]
    fn pci_address_only_for_the_pci_bus() {
        let mut identity = LinkIdentity {
            parent_bus: Some("pci".into()),
            parent_device: Some("0000:03:00.1".into()),
            ..LinkIdentity::default()
        };
        assert_eq!(identity.pci_address(), Some("0000:03:00.1"));
        identity.parent_bus = Some("auxiliary".into());
        assert_eq!(identity.pci_address(), None);
    }
}
