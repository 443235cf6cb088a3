//! The plugin's errors and the spec codes they are reported with.
//!
//! - configuration problems: 7 ([`ConfigError`]); no prevResult for ADD
//!   or CHECK: 7 (the chain is configured wrong);
//! - a container namespace that does not exist: 3; a path that is not a
//!   namespace: 4;
//! - a kernel without VRF devices: 50, naming the `vrf` module;
//! - the interface missing or already enslaved, a link of the VRF's name
//!   that is no VRF, a VRF with another table than configured: 999 with
//!   the reference's words;
//! - what CHECK finds different, and whatever else the kernel refused:
//!   999.
//!
//! ADD's errors after the configuration is read carry the reference's
//! `cmdAdd failed: ` prefix ([`VrfError::Add`]).

use std::net::IpAddr;

use libcni::error::{CniError, ErrorCode, ErrorList, ToCniError};
use libcni::netlink::standalone_link::StandaloneLinkError;
use libcni::netlink::sublink_plugin::ContainerNetNsError;
use libcni::netlink::NetlinkError;
use libcni::netns::NetNsError;
use libcni::plugin_conf::ConfError;

use crate::config::ConfigError;

#[derive(Debug, thiserror::Error)]
pub enum VrfError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Conf(#[from] ConfError),
    #[error("missing prevResult from earlier plugin")]
    PrevResultMissing,
    #[error(transparent)]
    NetNs(#[from] ContainerNetNsError),
    #[error("failed to open netns {path:?}: {source}")]
    DelNetNs {
        path: String,
        #[source]
        source: NetNsError,
    },
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
    #[error("Netlink {0} is not a VRF")]
    NotAVrf(String),
    #[error("VRF {name} already exist with different routing table {table}")]
    TableConflict { name: String, table: u32 },
    #[error(transparent)]
    Create(#[from] StandaloneLinkError),
    #[error("could not set link up for VRF {name}: {source}")]
    SetUp {
        name: String,
        #[source]
        source: NetlinkError,
    },
    #[error("could not get link by name {0}")]
    InterfaceMissing(String),
    #[error("interface {ifname} has already a master set: {master}")]
    HasMaster { ifname: String, master: String },
    #[error("could not set vrf {vrf} as master of {ifname}: {source}")]
    Enslave {
        vrf: String,
        ifname: String,
        #[source]
        source: NetlinkError,
    },
    #[error("could not re-add address {address} to {ifname}: {source}")]
    ReAddAddress {
        address: ipnetwork::IpNetwork,
        ifname: String,
        #[source]
        source: NetlinkError,
    },
    #[error(
        "failed getting local/host addresses for {ifname} in table {table} with dst {address}"
    )]
    LocalRouteMissing {
        ifname: String,
        table: u32,
        address: IpAddr,
    },
    #[error("could not add route '{route}': {source}")]
    MoveRoute {
        route: String,
        #[source]
        source: NetlinkError,
    },
    #[error("cmdAdd failed: {0}")]
    Add(Box<VrfError>),
    #[error("failed to find {ifname} associated to vrf {vrf}")]
    NotMember { ifname: String, vrf: String },
    #[error("VRF {vrf} uses routing table {found}, the configuration says {expected}")]
    CheckTable {
        vrf: String,
        found: u32,
        expected: u32,
    },
    #[error("VRF {0} not found")]
    VrfMissing(String),
    #[error(transparent)]
    Several(ErrorList),
}

impl VrfError {
    /// The error as ADD reports it once the configuration is read.
    pub fn in_add(self) -> VrfError {
        match self {
            e @ (VrfError::Config(_) | VrfError::Conf(_) | VrfError::PrevResultMissing) => e,
            e => VrfError::Add(Box::new(e)),
        }
    }
}

impl ToCniError for VrfError {
    fn to_cni_error(&self) -> CniError {
        let code = match self {
            VrfError::Config(e) => return e.to_cni_error(),
            VrfError::Conf(e) => return e.to_cni_error(),
            VrfError::NetNs(e) => return e.to_cni_error(),
            VrfError::Create(e) => return CniError::new(e.to_cni_error().code, self.to_string()),
            VrfError::Several(list) => return list.to_cni_error(),
            // The inner error's code, with the prefixed message.
            VrfError::Add(inner) => inner.to_cni_error().code,
            VrfError::DelNetNs { source, .. } => source.error_code(),
            VrfError::PrevResultMissing => ErrorCode::InvalidNetworkConfig,
            VrfError::Netlink(_)
            | VrfError::NotAVrf(_)
            | VrfError::TableConflict { .. }
            | VrfError::SetUp { .. }
            | VrfError::InterfaceMissing(_)
            | VrfError::HasMaster { .. }
            | VrfError::Enslave { .. }
            | VrfError::ReAddAddress { .. }
            | VrfError::LocalRouteMissing { .. }
            | VrfError::MoveRoute { .. }
            | VrfError::NotMember { .. }
            | VrfError::CheckTable { .. }
            | VrfError::VrfMissing(_) => ErrorCode::Internal,
        };
        CniError::new(code, self.to_string())
    }
}
