//! Pieces shared by every result family: routes and DNS.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A route. 0.3.0 and later carry it whole; 0.1.0/0.2.0 keep `dst` and `gw`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    pub dst: IpNetwork,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub mtu: u32,
    #[serde(default, rename = "advmss", skip_serializing_if = "is_zero")]
    pub adv_mss: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub priority: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<u32>,
    /// 0 universe, 253 link, 254 host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<u8>,
}

impl Route {
    pub fn new(dst: IpNetwork, gw: Option<IpAddr>) -> Self {
        Route {
            dst,
            gw,
            mtu: 0,
            adv_mss: 0,
            priority: 0,
            table: None,
            scope: None,
        }
    }

    /// The 0.1.0/0.2.0 form keeps only destination and gateway.
    pub fn dst_and_gw_only(&self) -> Route {
        Route::new(self.dst, self.gw)
    }
}

/// DNS settings. An empty object is left out of results entirely.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dns {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub domain: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub search: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

impl Dns {
    pub fn is_empty(&self) -> bool {
        self.nameservers.is_empty()
            && self.domain.is_empty()
            && self.search.is_empty()
            && self.options.is_empty()
    }
}

/// Serde helper: `dns` is omitted when empty and may be `null` on input.
pub(crate) mod dns_field {
    use super::Dns;
    use serde::{Deserialize, Deserializer};

    pub fn is_empty(d: &Dns) -> bool {
        d.is_empty()
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Dns, D::Error> {
        Ok(Option::<Dns>::deserialize(d)?.unwrap_or_default())
    }
}

/// Serde helper: lists that may be `null` on input (Go marshals nil slices
/// as `null` in some places).
pub(crate) fn null_as_empty<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}
