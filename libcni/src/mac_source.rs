//! The MAC a plugin gives the container interface, from the three places
//! a runtime or a configuration can ask for one, as the reference's
//! macvlan and tap pick it: `runtimeConfig.mac` (the `mac` capability)
//! wins over `MAC` in `CNI_ARGS`, which wins over the plugin's own `mac`
//! key. The first non-empty one is taken and must be a unicast, non-zero
//! Ethernet address ([`parse_unicast_mac`]); the ones after it are not
//! read.

use crate::error::{CniError, ErrorCode, ToCniError};
use crate::iface::{parse_unicast_mac, MacError};

/// Where the container MAC came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MacSource {
    /// The plugin's `mac` key.
    Config,
    /// `MAC=` in `CNI_ARGS`.
    CniArgs,
    /// `runtimeConfig.mac`.
    RuntimeConfig,
}

impl MacSource {
    pub fn describe(self) -> &'static str {
        match self {
            MacSource::Config => "mac",
            MacSource::CniArgs => "CNI_ARGS MAC",
            MacSource::RuntimeConfig => "runtimeConfig.mac",
        }
    }
}

/// The chosen source's value is no interface MAC.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid args {value} for MAC addr ({}): {reason}", .origin.describe())]
pub struct InvalidMac {
    pub origin: MacSource,
    pub value: String,
    pub reason: MacError,
}

impl ToCniError for InvalidMac {
    fn to_cni_error(&self) -> CniError {
        let code = match self.origin {
            // CNI_ARGS is the runtime's environment, not the configuration.
            MacSource::CniArgs => ErrorCode::InvalidEnvironment,
            MacSource::Config | MacSource::RuntimeConfig => ErrorCode::InvalidNetworkConfig,
        };
        CniError::new(code, self.to_string())
    }
}

/// The MAC of the first source, in precedence order, that gives a
/// non-empty value; `None` when none does.
pub fn pick_mac(
    runtime_config: Option<&str>,
    cni_args: Option<&str>,
    config: Option<&str>,
) -> Result<Option<[u8; 6]>, InvalidMac> {
    let chosen = [
        (MacSource::RuntimeConfig, runtime_config),
        (MacSource::CniArgs, cni_args),
        (MacSource::Config, config),
    ]
    .into_iter()
    .find_map(|(origin, value)| value.filter(|v| !v.is_empty()).map(|v| (origin, v)));
    let Some((origin, value)) = chosen else {
        return Ok(None);
    };
    parse_unicast_mac(value)
        .map(Some)
        .map_err(|reason| InvalidMac {
            origin,
            value: value.to_string(),
            reason,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "02:00:00:00:00:0a";
    const B: &str = "02:00:00:00:00:0b";
    const C: &str = "02:00:00:00:00:0c";

    #[test]
    fn runtime_config_then_cni_args_then_config() {
        assert_eq!(pick_mac(None, None, None).unwrap(), None);
        assert_eq!(pick_mac(None, None, Some(C)).unwrap().unwrap()[5], 0x0c);
        assert_eq!(pick_mac(None, Some(B), Some(C)).unwrap().unwrap()[5], 0x0b);
        assert_eq!(
            pick_mac(Some(A), Some(B), Some(C)).unwrap().unwrap()[5],
            0x0a
        );
        // Empty values do not count; a bad value after the chosen one is
        // not read.
        assert_eq!(pick_mac(Some(""), None, Some(C)).unwrap().unwrap()[5], 0x0c);
        assert_eq!(
            pick_mac(Some(A), None, Some("junk")).unwrap().unwrap()[5],
            0x0a
        );
    }

    #[test]
    fn a_bad_value_names_its_source_and_code() {
        let e = pick_mac(None, Some("01:00:5e:00:00:01"), None).unwrap_err();
        assert_eq!(e.origin, MacSource::CniArgs);
        assert_eq!(e.reason, MacError::Multicast);
        assert_eq!(e.to_cni_error().code, ErrorCode::InvalidEnvironment);
        assert!(e.to_string().contains("CNI_ARGS MAC"), "{e}");
        let e = pick_mac(Some("nope"), None, None).unwrap_err();
        assert_eq!(e.to_cni_error().code, ErrorCode::InvalidNetworkConfig);
        assert_eq!(
            e.to_string(),
            format!(
                "invalid args nope for MAC addr (runtimeConfig.mac): {}",
                MacError::Syntax
            )
        );
    }
}
