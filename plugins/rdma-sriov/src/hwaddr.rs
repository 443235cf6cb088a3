//! Hardware identifiers in their text forms: Ethernet MACs and InfiniBand
//! GUIDs.
//!
//! Both are kept as text in configurations and state files, so they carry
//! their own `FromStr`/`Display` and serialise as strings. They are read
//! as Go's `net.ParseMAC` reads them, as sriov-cni does
//! ([`libcni::hwaddr::parse`]: `:`- or `-`-separated hex pairs, or dotted
//! groups of four), and written with `:`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HwAddrError {
    #[error("invalid MAC address {0:?}: expected six hex bytes like 0a:58:0a:01:00:02")]
    Mac(String),
    #[error("invalid GUID {0:?}: expected eight hex bytes like 00:11:22:33:44:55:66:77")]
    Guid(String),
}

/// An Ethernet MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    pub const ZERO: MacAddr = MacAddr([0; 6]);

    pub fn bytes(&self) -> &[u8; 6] {
        &self.0
    }

    pub fn is_zero(&self) -> bool {
        self.0 == [0; 6]
    }

    /// The first six bytes of a kernel address buffer (netlink pads VF MACs
    /// to 32 bytes); `None` when it is shorter.
    pub fn from_slice(bytes: &[u8]) -> Option<MacAddr> {
        let six: [u8; 6] = bytes.get(..6)?.try_into().ok()?;
        Some(MacAddr(six))
    }
}

impl FromStr for MacAddr {
    type Err = HwAddrError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        libcni::hwaddr::parse_ethernet(s)
            .map(MacAddr)
            .ok_or_else(|| HwAddrError::Mac(s.to_string()))
    }
}

impl fmt::Display for MacAddr {
    /// Lower case, the form CNI results and `ip` use.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

impl Serialize for MacAddr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for MacAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// An InfiniBand GUID. The first byte written is the most significant, as
/// `ip link set ... vf N node_guid` reads it, and the kernel takes the
/// number in host order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Guid(pub u64);

impl FromStr for Guid {
    type Err = HwAddrError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        libcni::hwaddr::parse(s)
            .and_then(|bytes| <[u8; 8]>::try_from(bytes).ok())
            .map(|eight| Guid(u64::from_be_bytes(eight)))
            .ok_or_else(|| HwAddrError::Guid(s.to_string()))
    }
}

impl fmt::Display for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .0
            .to_be_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        f.write_str(&parts.join(":"))
    }
}

impl Serialize for Guid {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Guid {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_round_trips_in_lower_case() {
        let mac: MacAddr = "0A:58:0a:01:00:FF".parse().unwrap();
        assert_eq!(mac.to_string(), "0a:58:0a:01:00:ff");
        let json = serde_json::to_string(&mac).unwrap();
        assert_eq!(json, "\"0a:58:0a:01:00:ff\"");
        assert_eq!(serde_json::from_str::<MacAddr>(&json).unwrap(), mac);
    }

    #[test]
    fn macs_in_every_form_go_reads() {
        let want = MacAddr([0x0a, 0x58, 0x0a, 0x01, 0x00, 0xff]);
        for text in ["0a:58:0a:01:00:ff", "0A-58-0A-01-00-FF", "0a58.0a01.00ff"] {
            assert_eq!(text.parse::<MacAddr>(), Ok(want), "{text}");
        }
    }

    #[test]
    fn bad_macs_are_refused() {
        for bad in [
            "",
            "0a:58:0a:01:00",
            "0a:58:0a:01:00:ff:11",
            "0a:58-0a:01:00:ff",
            "0a58.0a01.00ff.0011",
            "a:58:0a:01:00:ff",
            "zz:58:0a:01:00:ff",
            "0a:58:0a:01:00:+f",
        ] {
            assert!(bad.parse::<MacAddr>().is_err(), "{bad:?}");
        }
        assert_eq!(MacAddr::from_slice(&[1, 2, 3]), None);
        assert_eq!(
            MacAddr::from_slice(&[1, 2, 3, 4, 5, 6, 0, 0]),
            Some(MacAddr([1, 2, 3, 4, 5, 6]))
        );
    }

    #[test]
    fn guid_is_big_endian_text() {
        let guid: Guid = "00:11:22:33:44:55:66:77".parse().unwrap();
        assert_eq!(guid.0, 0x0011_2233_4455_6677);
        assert_eq!(guid.to_string(), "00:11:22:33:44:55:66:77");
        assert_eq!("0011.2233.4455.6677".parse::<Guid>(), Ok(guid));
        assert_eq!("00-11-22-33-44-55-66-77".parse::<Guid>(), Ok(guid));
        assert!("00:11:22:33:44:55:66".parse::<Guid>().is_err());
        assert!("00:11:22:33:44:55".parse::<Guid>().is_err());
        assert!("0011:22:33:44:55:66:77".parse::<Guid>().is_err());
    }
}
