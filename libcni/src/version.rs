//! CNI spec versions.
//!
//! Versions are a closed enum rather than a registry of strings: every place
//! that depends on the version (result shape, verb gating) matches on it, so
//! adding a version is a compile error everywhere it matters.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A released CNI spec version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SpecVersion {
    V0_1_0,
    V0_2_0,
    V0_3_0,
    V0_3_1,
    V0_4_0,
    V1_0_0,
    V1_1_0,
}

/// The result layout a version uses on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResultFamily {
    /// 0.1.0 and 0.2.0: `ip4` / `ip6` objects.
    V02,
    /// 0.3.0, 0.3.1 and 0.4.0: `interfaces` and `ips` with a `version` field.
    V04,
    /// 1.0.0 and 1.1.0: `ips` without `version`, richer interfaces and routes.
    V1,
}

impl SpecVersion {
    /// Every version this library speaks, oldest first.
    pub const ALL: [SpecVersion; 7] = [
        SpecVersion::V0_1_0,
        SpecVersion::V0_2_0,
        SpecVersion::V0_3_0,
        SpecVersion::V0_3_1,
        SpecVersion::V0_4_0,
        SpecVersion::V1_0_0,
        SpecVersion::V1_1_0,
    ];

    /// The newest version, the one results are built in.
    pub const CURRENT: SpecVersion = SpecVersion::V1_1_0;

    pub fn as_str(self) -> &'static str {
        match self {
            SpecVersion::V0_1_0 => "0.1.0",
            SpecVersion::V0_2_0 => "0.2.0",
            SpecVersion::V0_3_0 => "0.3.0",
            SpecVersion::V0_3_1 => "0.3.1",
            SpecVersion::V0_4_0 => "0.4.0",
            SpecVersion::V1_0_0 => "1.0.0",
            SpecVersion::V1_1_0 => "1.1.0",
        }
    }

    pub fn family(self) -> ResultFamily {
        match self {
            SpecVersion::V0_1_0 | SpecVersion::V0_2_0 => ResultFamily::V02,
            SpecVersion::V0_3_0 | SpecVersion::V0_3_1 | SpecVersion::V0_4_0 => ResultFamily::V04,
            SpecVersion::V1_0_0 | SpecVersion::V1_1_0 => ResultFamily::V1,
        }
    }

    /// CHECK exists from 0.4.0 on.
    pub fn has_check(self) -> bool {
        self >= SpecVersion::V0_4_0
    }

    /// GC and STATUS exist from 1.1.0 on.
    pub fn has_gc_and_status(self) -> bool {
        self >= SpecVersion::V1_1_0
    }

    /// DEL receives the cached prevResult from 0.4.0 on.
    pub fn has_prev_result_on_del(self) -> bool {
        self >= SpecVersion::V0_4_0
    }

    pub fn semver(self) -> Semver {
        match self {
            SpecVersion::V0_1_0 => Semver::new(0, 1, 0),
            SpecVersion::V0_2_0 => Semver::new(0, 2, 0),
            SpecVersion::V0_3_0 => Semver::new(0, 3, 0),
            SpecVersion::V0_3_1 => Semver::new(0, 3, 1),
            SpecVersion::V0_4_0 => Semver::new(0, 4, 0),
            SpecVersion::V1_0_0 => Semver::new(1, 0, 0),
            SpecVersion::V1_1_0 => Semver::new(1, 1, 0),
        }
    }

    /// Parses a version as found in a `cniVersion` field: the empty string
    /// means 0.1.0, as the spec's first version had no field at all.
    pub fn parse_config(s: &str) -> Result<SpecVersion, VersionError> {
        if s.is_empty() {
            return Ok(SpecVersion::V0_1_0);
        }
        s.parse()
    }
}

impl fmt::Display for SpecVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SpecVersion {
    type Err = VersionError;

    /// Accepts any spelling that denotes a known version ("1.0" is 1.0.0),
    /// because Go's semver comparison treats them as equal.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let v: Semver = s.parse()?;
        SpecVersion::try_from(v)
    }
}

impl TryFrom<Semver> for SpecVersion {
    type Error = VersionError;

    fn try_from(v: Semver) -> Result<Self, Self::Error> {
        SpecVersion::ALL
            .into_iter()
            .find(|known| known.semver() == v)
            .ok_or_else(|| VersionError::Unsupported(v.to_string()))
    }
}

impl From<SpecVersion> for Semver {
    fn from(v: SpecVersion) -> Semver {
        v.semver()
    }
}

impl Serialize for SpecVersion {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for SpecVersion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        SpecVersion::parse_config(&s).map_err(serde::de::Error::custom)
    }
}

/// A `major.minor.patch` triple for comparing arbitrary version strings,
/// including ones no release uses (a config may say "9.9.9").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Semver {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
}

impl Semver {
    pub const fn new(major: u64, minor: u64, patch: u64) -> Self {
        Semver {
            major,
            minor,
            patch,
        }
    }
}

impl PartialOrd for Semver {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Semver {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.major, self.minor, self.patch).cmp(&(other.major, other.minor, other.patch))
    }
}

impl fmt::Display for Semver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl FromStr for Semver {
    type Err = VersionError;

    /// `major[.minor[.patch]]`, each a non-negative integer; the empty
    /// string is 0.1.0 (the Go library's rule for a missing version).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() {
            return Ok(Semver::new(0, 1, 0));
        }
        let parts: Vec<&str> = s.split('.').collect();
        if parts.len() > 3 {
            return Err(VersionError::Invalid(format!(
                "invalid version {s:?}: too many parts"
            )));
        }
        let mut nums = [0u64; 3];
        for (i, p) in parts.iter().enumerate() {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(VersionError::Invalid(format!(
                    "invalid version {s:?}: {p:?} is not a number"
                )));
            }
            nums[i] = p.parse().map_err(|_| {
                VersionError::Invalid(format!("invalid version {s:?}: {p:?} is out of range"))
            })?;
        }
        Ok(Semver::new(nums[0], nums[1], nums[2]))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    #[error("{0}")]
    Invalid(String),
    #[error("unsupported CNI version {0:?}")]
    Unsupported(String),
}

/// The versions list a plugin answers VERSION with.
pub fn supported_strings(versions: &[SpecVersion]) -> Vec<&'static str> {
    versions.iter().map(|v| v.as_str()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_release_and_round_trips() {
        for v in SpecVersion::ALL {
            assert_eq!(v.as_str().parse::<SpecVersion>().unwrap(), v);
            assert_eq!(v.to_string(), v.as_str());
        }
    }

    #[test]
    fn empty_config_version_is_0_1_0() {
        assert_eq!(SpecVersion::parse_config("").unwrap(), SpecVersion::V0_1_0);
    }

    #[test]
    fn short_forms_denote_the_same_release() {
        assert_eq!("1.0".parse::<SpecVersion>().unwrap(), SpecVersion::V1_0_0);
        assert_eq!("1".parse::<SpecVersion>().unwrap(), SpecVersion::V1_0_0);
    }

    #[test]
    fn rejects_unknown_and_malformed() {
        assert!(matches!(
            "9.9.9".parse::<SpecVersion>(),
            Err(VersionError::Unsupported(_))
        ));
        assert!(matches!(
            "1.0.0.0".parse::<Semver>(),
            Err(VersionError::Invalid(m)) if m.contains("too many parts")
        ));
        assert!("1.x".parse::<Semver>().is_err());
        assert!("-1".parse::<Semver>().is_err());
        assert!("1..0".parse::<Semver>().is_err());
        assert!("99999999999999999999999".parse::<Semver>().is_err());
    }

    #[test]
    fn order_follows_semver() {
        assert!(SpecVersion::V0_3_1 > SpecVersion::V0_3_0);
        assert!(SpecVersion::V1_1_0 > SpecVersion::V1_0_0);
        assert!("0.10.0".parse::<Semver>().unwrap() > "0.4.0".parse::<Semver>().unwrap());
        let mut sorted = SpecVersion::ALL;
        sorted.sort_by_key(|v| v.semver());
        assert_eq!(sorted, SpecVersion::ALL);
    }

    #[test]
    fn verb_gates() {
        assert!(!SpecVersion::V0_3_1.has_check());
        assert!(SpecVersion::V0_4_0.has_check());
        assert!(!SpecVersion::V1_0_0.has_gc_and_status());
        assert!(SpecVersion::V1_1_0.has_gc_and_status());
    }

    #[test]
    fn serde_as_string() {
        let v: SpecVersion = serde_json::from_str("\"0.3.1\"").unwrap();
        assert_eq!(v, SpecVersion::V0_3_1);
        assert_eq!(serde_json::to_string(&v).unwrap(), "\"0.3.1\"");
    }
}
