//! Results of spec 1.0.0 and 1.1.0: the form plugins build results in.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};

use super::common::{dns_field, null_as_empty, Dns, Route};
use crate::version::SpecVersion;

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interface {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub mtu: u32,
    /// The netns path for a container interface; empty for host interfaces.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sandbox: String,
    #[serde(
        default,
        rename = "socketPath",
        skip_serializing_if = "String::is_empty"
    )]
    pub socket_path: String,
    #[serde(default, rename = "pciID", skip_serializing_if = "String::is_empty")]
    pub pci_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpConfig {
    /// Index into `interfaces`; 0 is a valid index and is written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<usize>,
    /// The address with its prefix; host bits are kept (10.0.0.5/24).
    pub address: IpNetwork,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<IpAddr>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Result {
    #[serde(rename = "cniVersion")]
    pub cni_version: SpecVersion,
    #[serde(
        default,
        deserialize_with = "null_as_empty",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub interfaces: Vec<Interface>,
    #[serde(
        default,
        deserialize_with = "null_as_empty",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub ips: Vec<IpConfig>,
    #[serde(
        default,
        deserialize_with = "null_as_empty",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub routes: Vec<Route>,
    #[serde(
        default,
        deserialize_with = "dns_field::deserialize",
        skip_serializing_if = "dns_field::is_empty"
    )]
    pub dns: Dns,
}

impl Result {
    /// An empty result in the current version.
    pub fn new() -> Self {
        Result {
            cni_version: SpecVersion::CURRENT,
            interfaces: Vec::new(),
            ips: Vec::new(),
            routes: Vec::new(),
            dns: Dns::default(),
        }
    }
}

impl Default for Result {
    fn default() -> Self {
        Result::new()
    }
}
