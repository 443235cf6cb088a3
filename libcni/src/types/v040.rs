//! Results of spec 0.3.0, 0.3.1 and 0.4.0: interfaces, and addresses that
//! name their family in a `version` field.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};

use super::common::{dns_field, null_as_empty, Dns, Route};
use crate::version::SpecVersion;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interface {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sandbox: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpConfig {
    /// "4" or "6"; always written. Read leniently: a missing one is taken
    /// from the address (see [`super::AnyResult::from_value`]), because the
    /// Go decoder accepts results without it and some plugins print them
    /// (Debian's loopback 1.1.1 prints its 1.0.0 layout at every version).
    #[serde(default)]
    pub version: String,
    /// Index into `interfaces`; 0 is a valid index and is written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<usize>,
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
