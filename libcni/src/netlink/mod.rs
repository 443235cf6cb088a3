//! Netlink for the whole suite: one blocking socket core ([`socket`]) that
//! every protocol family goes through, and the families the plugins use.
//!
//! - [`socket`]: [`NetlinkSocket<P>`], generic over a [`NetlinkFamily`]:
//!   sequence numbers, a growable receive buffer, ACK and error handling with
//!   errno and extended-ACK text, multipart dumps redone on
//!   `NLM_F_DUMP_INTR`, and multi-message transactions;
//! - [`route`]: rtnetlink ([`RouteSocket`]: links, addresses, routes);
//! - [`netfilter`]: nfnetlink ([`NfnlSocket`]), used by
//!   [`crate::nftables`] and [`conntrack`];
//! - [`attributes`]: tolerant reading of raw attributes from kernel replies.
//!
//! Plugins add their own families on the same core (rdma-sriov's
//! `NETLINK_RDMA`) by implementing [`NetlinkFamily`].

pub mod attributes;
pub mod conntrack;
pub mod netfilter;
pub mod route;
pub mod socket;
#[cfg(test)]
pub(crate) mod test_support;

pub use netfilter::{NfReply, Nfnetlink, NfnlSocket};
pub use route::{
    format_mac, Address, IpFamily, LinkId, LinkInfo, OperState, Route, RouteSocket, Rtnetlink,
    VethPair,
};
pub use socket::{BatchMessage, NetlinkError, NetlinkFamily, NetlinkSocket};
