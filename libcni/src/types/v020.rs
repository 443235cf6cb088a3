//! Results of spec 0.1.0 and 0.2.0: one `ip4` and one `ip6` object.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};

use super::common::{dns_field, null_as_empty, Dns, Route};
use crate::version::SpecVersion;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpConfig {
    pub ip: IpNetwork,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<IpAddr>,
    #[serde(
        default,
        deserialize_with = "null_as_empty",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub routes: Vec<Route>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Result {
    #[serde(rename = "cniVersion")]
    pub cni_version: SpecVersion,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip4: Option<IpConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip6: Option<IpConfig>,
    #[serde(
        default,
        deserialize_with = "dns_field::deserialize",
        skip_serializing_if = "dns_field::is_empty"
    )]
    pub dns: Dns,
}
