//! Result types of every spec version and the conversions between them.
//!
//! Three wire layouts exist ([`ResultFamily`]); [`AnyResult`] holds one of
//! them together with the exact version it is labelled with. Conversions are
//! plain functions matched on (source family, target family) instead of a
//! registry filled at start-up, so a missing pair is a compile error.

pub mod common;
pub mod v020;
pub mod v040;
pub mod v100;

use serde::Serialize;

pub use common::{Dns, Route};

use crate::version::{ResultFamily, SpecVersion, VersionError};

/// The result form plugins build; results are printed converted from it.
pub type CurrentResult = v100::Result;

#[derive(Debug, thiserror::Error)]
pub enum ResultError {
    #[error("failed to decode result: {0}")]
    Decode(#[from] serde_json::Error),
    #[error("result is not a JSON object")]
    NotAnObject,
    #[error("unsupported CNI result version {0:?}")]
    UnsupportedVersion(String),
    /// An L2-only result (no addresses) has no 0.1.0/0.2.0 form.
    #[error("cannot convert: no valid IP addresses")]
    NoValidIps,
}

impl From<VersionError> for ResultError {
    fn from(e: VersionError) -> Self {
        match e {
            VersionError::Invalid(s) | VersionError::Unsupported(s) => {
                ResultError::UnsupportedVersion(s)
            }
        }
    }
}

/// A result in any spec version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnyResult {
    V02(v020::Result),
    V04(v040::Result),
    V1(v100::Result),
}

impl From<v020::Result> for AnyResult {
    fn from(r: v020::Result) -> Self {
        AnyResult::V02(r)
    }
}

impl From<v040::Result> for AnyResult {
    fn from(r: v040::Result) -> Self {
        AnyResult::V04(r)
    }
}

impl From<v100::Result> for AnyResult {
    fn from(r: v100::Result) -> Self {
        AnyResult::V1(r)
    }
}

impl TryFrom<AnyResult> for v100::Result {
    type Error = ResultError;

    /// Brings any result up to the 1.x layout (1.1.0 unless already 1.x).
    fn try_from(r: AnyResult) -> Result<Self, Self::Error> {
        match r {
            AnyResult::V1(r) => Ok(r),
            other => match other.convert_to(SpecVersion::CURRENT)? {
                AnyResult::V1(r) => Ok(r),
                _ => Err(ResultError::UnsupportedVersion(
                    SpecVersion::CURRENT.to_string(),
                )),
            },
        }
    }
}

impl AnyResult {
    /// Decodes a result. A missing or empty `cniVersion` means
    /// `default_version` (the config's), as runtimes and the Go library
    /// assume for plugins that leave it out.
    pub fn from_slice(bytes: &[u8], default_version: SpecVersion) -> Result<Self, ResultError> {
        let value: serde_json::Value = serde_json::from_slice(bytes)?;
        AnyResult::from_value(value, default_version)
    }

    pub fn from_value(
        mut value: serde_json::Value,
        default_version: SpecVersion,
    ) -> Result<Self, ResultError> {
        let obj = value.as_object_mut().ok_or(ResultError::NotAnObject)?;
        let version = match obj.get("cniVersion") {
            None | Some(serde_json::Value::Null) => default_version,
            Some(serde_json::Value::String(s)) if s.is_empty() => default_version,
            Some(serde_json::Value::String(s)) => s.parse::<SpecVersion>()?,
            Some(other) => return Err(ResultError::UnsupportedVersion(other.to_string())),
        };
        obj.insert(
            "cniVersion".to_string(),
            serde_json::Value::String(version.as_str().to_string()),
        );
        Ok(match version.family() {
            ResultFamily::V02 => AnyResult::V02(serde_json::from_value(value)?),
            ResultFamily::V04 => {
                let mut r: v040::Result = serde_json::from_value(value)?;
                for ip in r.ips.iter_mut().filter(|ip| ip.version.is_empty()) {
                    ip.version = family_of(&ip.address).to_string();
                }
                AnyResult::V04(r)
            }
            ResultFamily::V1 => AnyResult::V1(serde_json::from_value(value)?),
        })
    }

    pub fn version(&self) -> SpecVersion {
        match self {
            AnyResult::V02(r) => r.cni_version,
            AnyResult::V04(r) => r.cni_version,
            AnyResult::V1(r) => r.cni_version,
        }
    }

    /// Converts to `to` with the spec's rules; the same family is a relabel.
    pub fn convert_to(self, to: SpecVersion) -> Result<AnyResult, ResultError> {
        Ok(match (self, to.family()) {
            (AnyResult::V02(mut r), ResultFamily::V02) => {
                r.cni_version = to;
                AnyResult::V02(r)
            }
            (AnyResult::V02(r), ResultFamily::V04) => AnyResult::V04(v02_to_v04(r, to)),
            (AnyResult::V02(r), ResultFamily::V1) => {
                AnyResult::V1(v04_to_v1(v02_to_v04(r, SpecVersion::V0_4_0), to))
            }
            (AnyResult::V04(r), ResultFamily::V02) => AnyResult::V02(v04_to_v02(r, to)?),
            (AnyResult::V04(mut r), ResultFamily::V04) => {
                r.cni_version = to;
                AnyResult::V04(r)
            }
            (AnyResult::V04(r), ResultFamily::V1) => AnyResult::V1(v04_to_v1(r, to)),
            (AnyResult::V1(r), ResultFamily::V02) => {
                AnyResult::V02(v04_to_v02(v1_to_v04(r, SpecVersion::V0_4_0), to)?)
            }
            (AnyResult::V1(r), ResultFamily::V04) => AnyResult::V04(v1_to_v04(r, to)),
            (AnyResult::V1(mut r), ResultFamily::V1) => {
                r.cni_version = to;
                AnyResult::V1(r)
            }
        })
    }

    pub fn to_value(&self) -> serde_json::Value {
        // Plain data of strings, numbers and lists always serialises.
        let v = match self {
            AnyResult::V02(r) => serde_json::to_value(r),
            AnyResult::V04(r) => serde_json::to_value(r),
            AnyResult::V1(r) => serde_json::to_value(r),
        };
        v.unwrap_or(serde_json::Value::Null)
    }

    /// The JSON a plugin prints: indented by four spaces as the Go
    /// reference prints it, newline-terminated.
    pub fn to_pretty_json(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
        let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
        if self.to_value().serialize(&mut ser).is_err() {
            out.clear();
        }
        out.push(b'\n');
        out
    }
}

fn family_of(addr: &ipnetwork::IpNetwork) -> &'static str {
    if addr.is_ipv4() {
        "4"
    } else {
        "6"
    }
}

fn v02_to_v04(r: v020::Result, to: SpecVersion) -> v040::Result {
    let mut ips = Vec::new();
    let mut routes = Vec::new();
    for (family, cfg) in [("4", r.ip4), ("6", r.ip6)] {
        if let Some(cfg) = cfg {
            ips.push(v040::IpConfig {
                version: family.to_string(),
                interface: None,
                address: cfg.ip,
                gateway: cfg.gateway,
            });
            routes.extend(cfg.routes);
        }
    }
    v040::Result {
        cni_version: to,
        interfaces: Vec::new(),
        ips,
        routes,
        dns: r.dns,
    }
}

fn v04_to_v02(r: v040::Result, to: SpecVersion) -> Result<v020::Result, ResultError> {
    let is_v4 = |ip: &v040::IpConfig| match ip.version.as_str() {
        "4" => true,
        "6" => false,
        _ => ip.address.is_ipv4(),
    };
    let pick = |want_v4: bool| {
        r.ips
            .iter()
            .find(|ip| is_v4(ip) == want_v4)
            .map(|ip| v020::IpConfig {
                ip: ip.address,
                gateway: ip.gateway,
                routes: r
                    .routes
                    .iter()
                    .filter(|route| route.dst.is_ipv4() == want_v4)
                    .map(Route::dst_and_gw_only)
                    .collect(),
            })
    };
    let ip4 = pick(true);
    let ip6 = pick(false);
    if ip4.is_none() && ip6.is_none() {
        return Err(ResultError::NoValidIps);
    }
    Ok(v020::Result {
        cni_version: to,
        ip4,
        ip6,
        dns: r.dns,
    })
}

fn v04_to_v1(r: v040::Result, to: SpecVersion) -> v100::Result {
    v100::Result {
        cni_version: to,
        interfaces: r
            .interfaces
            .into_iter()
            .map(|i| v100::Interface {
                name: i.name,
                mac: i.mac,
                sandbox: i.sandbox,
                ..v100::Interface::default()
            })
            .collect(),
        ips: r
            .ips
            .into_iter()
            .map(|ip| v100::IpConfig {
                interface: ip.interface,
                address: ip.address,
                gateway: ip.gateway,
            })
            .collect(),
        routes: r.routes,
        dns: r.dns,
    }
}

fn v1_to_v04(r: v100::Result, to: SpecVersion) -> v040::Result {
    v040::Result {
        cni_version: to,
        interfaces: r
            .interfaces
            .into_iter()
            .map(|i| v040::Interface {
                name: i.name,
                mac: i.mac,
                sandbox: i.sandbox,
            })
            .collect(),
        ips: r
            .ips
            .into_iter()
            .map(|ip| v040::IpConfig {
                version: family_of(&ip.address).to_string(),
                interface: ip.interface,
                address: ip.address,
                gateway: ip.gateway,
            })
            .collect(),
        routes: r.routes,
        dns: r.dns,
    }
}

#[cfg(test)]
mod tests;
