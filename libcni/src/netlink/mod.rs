//! Netlink for the whole suite: one blocking socket core ([`socket`]) that
//! every protocol family goes through, and the families the plugins use.
//!
//! - [`socket`]: [`NetlinkSocket<P>`], generic over a [`NetlinkFamily`]:
//!   sequence numbers, a growable receive buffer, ACK and error handling with
//!   errno and extended-ACK text, multipart dumps redone on
//!   `NLM_F_DUMP_INTR`, and multi-message transactions;
//! - [`route`]: rtnetlink ([`RouteSocket`]: links, addresses, routes);
//!   [`link_attrs`] adds promisc, allmulticast and queue length,
//!   [`link_identity`] the alias, permanent MAC and bus device;
//! - [`rule`]: policy routing rules; [`route_entry`]: routes whole, to
//!   copy between tables and delete exactly;
//! - [`netfilter`]: nfnetlink ([`NfnlSocket`]), used by
//!   [`crate::nftables`] and [`conntrack`];
//! - [`sublink`]: macvlan, ipvlan and vlan links made for a container;
//! - [`standalone_link`]: dummy and VRF links, made in the container
//!   under their own name;
//! - [`sublink_plugin`]: the netns, IPAM, DEL, GC, STATUS and CHECK
//!   steps those three plugins share;
//! - [`retire`]: deleting a container's link without waiting for the
//!   kernel's cleanup after it is unlisted;
//! - [`rdma`]: RDMA netlink ([`rdma::RdmaSocket`]: the RDMA namespace
//!   mode, devices, moving a device to another namespace);
//! - [`attributes`]: tolerant reading of raw attributes from kernel replies.
//!
//! Plugins can add their own families on the same core by implementing
//! [`NetlinkFamily`].

pub mod attributes;
pub mod conntrack;
pub mod link_attrs;
pub mod link_identity;
pub mod netfilter;
pub mod rdma;
pub mod retire;
pub mod route;
pub mod route_entry;
pub mod rule;
pub mod socket;
pub mod standalone_link;
pub mod sublink;
pub mod sublink_plugin;
pub mod tc;
#[cfg(test)]
pub(crate) mod test_support;

pub use link_attrs::LinkAttrs;
pub use link_identity::LinkIdentity;
pub use netfilter::{NfReply, Nfnetlink, NfnlSocket};
pub use route::{
    format_mac, Address, IpFamily, LinkId, LinkInfo, OperState, Route, RouteSocket, Rtnetlink,
    VethPair,
};
pub use route_entry::RouteEntry;
pub use rule::{Rule, RuleSpec};
pub use socket::{BatchMessage, NetlinkError, NetlinkFamily, NetlinkSocket};
