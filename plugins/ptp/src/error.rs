//! The plugin's errors and the spec codes they are reported with.
//!
//! - configuration problems: 7, or 2 for an `ipMasqBackend` the plugin
//!   does not know ([`ConfigError`]); an IPAM result ptp cannot route (an
//!   address without a gateway): 7;
//! - a container namespace that does not exist: 3; a path that is not a
//!   namespace: 4;
//! - the IPAM plugin's own error: the IPAM plugin's code;
//! - an xtables lock held too long: 11 (try again later);
//! - what CHECK finds different from the prevResult, and whatever else the
//!   kernel or a firewall tool refused: 999, with a message naming the
//!   operation and the interface.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use libcni::error::{CniError, ErrorCode, ErrorList, ToCniError};
use libcni::ipmasq::IpMasqError;
use libcni::netlink::sublink_plugin::StepError;
use libcni::netlink::NetlinkError;
use libcni::plugin_conf::ConfError;
use libcni::sysctl::SysctlError;
use libcni::veth::VethError;

use crate::config::ConfigError;

#[derive(Debug, thiserror::Error)]
pub enum PtpError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Conf(#[from] ConfError),
    /// ptp routes the container's subnet through the gateway, so an
    /// address without one cannot be set up.
    #[error("IPAM plugin returned {address} without a gateway; ptp routes every address through its gateway (set \"gateway\" in the IPAM configuration)")]
    NoGateway { address: IpNetwork },
    #[error("Could not enable IP forwarding: {0}")]
    Forwarding(#[source] SysctlError),
    #[error(transparent)]
    Veth(#[from] VethError),
    #[error("failed to set {name:?} up: {source}")]
    HostVethUp {
        name: String,
        #[source]
        source: NetlinkError,
    },
    /// The kernel's route to the subnet of a container address, which ptp
    /// replaces by routes through the gateway.
    #[error("failed to delete route {subnet} dev {ifname}: {source}")]
    DeleteConnectedRoute {
        subnet: IpNetwork,
        ifname: String,
        #[source]
        source: NetlinkError,
    },
    #[error("failed to add route {route}: {source}")]
    AddRoute {
        route: String,
        #[source]
        source: NetlinkError,
    },
    #[error("failed to add IP addr ({address}) to veth: {source}")]
    HostAddress {
        address: IpNetwork,
        #[source]
        source: NetlinkError,
    },
    #[error("failed to add route on host: {source}")]
    HostRoute {
        #[source]
        source: NetlinkError,
    },
    #[error(transparent)]
    Masquerade(#[from] IpMasqError),
    /// CHECK without the result it is to compare against.
    #[error("ptp: Required prevResult missing")]
    PrevResultMissing,
    /// CHECK's findings, worded as in the reference.
    #[error("{0}")]
    Check(String),
    #[error("gateway {gateway} of {address} is not of the address's family")]
    GatewayFamily { gateway: IpAddr, address: IpNetwork },
    #[error("{0}")]
    Injected(String),
    /// What the shared steps report ([`StepError`]).
    #[error(transparent)]
    Step(#[from] Box<StepError>),
    #[error(transparent)]
    Several(ErrorList),
}

impl PtpError {
    /// One error from many (DEL and GC go on after a failure); `None` when
    /// there were none.
    pub fn from_many(errors: Vec<PtpError>) -> Option<PtpError> {
        ErrorList::combine(errors, PtpError::Several)
    }
}

libcni::sublink_step_errors!(PtpError);

impl ToCniError for PtpError {
    fn to_cni_error(&self) -> CniError {
        match self {
            // Each keeps the code its own type gives it.
            PtpError::Config(e) => e.to_cni_error(),
            PtpError::Conf(e) => e.to_cni_error(),
            PtpError::Veth(e) => e.to_cni_error(),
            PtpError::Masquerade(e) => e.to_cni_error(),
            PtpError::Forwarding(e) => CniError::new(e.to_cni_error().code, self.to_string()),
            PtpError::Step(e) => e.to_cni_error(),
            // The first failure decides the code; the message lists all.
            PtpError::Several(list) => list.to_cni_error(),
            // The IPAM configuration gives addresses ptp cannot route.
            // Nothing to compare: the configuration lacks what CHECK needs
            // (the suite's rule; the reference says 999).
            PtpError::PrevResultMissing => {
                CniError::new(ErrorCode::InvalidNetworkConfig, self.to_string())
            }
            PtpError::NoGateway { .. } | PtpError::GatewayFamily { .. } => {
                CniError::new(ErrorCode::InvalidNetworkConfig, self.to_string())
            }
            // The host or the IPAM plugin in a state ADD cannot work with,
            // the kernel refusing a step, CHECK's findings and the
            // test-only injected failure: 999, as the reference reports
            // them.
            PtpError::HostVethUp { .. }
            | PtpError::DeleteConnectedRoute { .. }
            | PtpError::AddRoute { .. }
            | PtpError::HostAddress { .. }
            | PtpError::HostRoute { .. }
            | PtpError::Check(_)
            | PtpError::Injected(_) => CniError::new(ErrorCode::Internal, self.to_string()),
        }
    }
}
