//! The plugin's configuration keys, validated.
//!
//! ```json
//! {
//!   "cniVersion": "1.1.0", "name": "rdma-net", "type": "rdma-sriov",
//!   "deviceID": "0000:af:06.0",            // or runtimeConfig.deviceID (capability "deviceID")
//!   "pf": "ens1f0",                        // without deviceID: first free VF of this PF
//!   "mac": "0a:58:0a:01:00:02",            // also runtimeConfig.mac, CNI_ARGS MAC=
//!   "vlan": 100, "vlanQoS": 3, "vlanProto": "802.1Q",
//!   "spoofchk": "on", "trust": "off", "link_state": "enable",
//!   "min_tx_rate": 0, "max_tx_rate": 1000,
//!   "guid": "00:11:22:33:44:55:66:77",     // InfiniBand VFs; also runtimeConfig.infinibandGUID
//!   "mtu": 9000,
//!   "allowSharedRdmaNetns": false,         // accept an RDMA subsystem in shared mode
//!   "rail": true,                          // or {"table": 101}: one rail of a multi-rail pod
//!   "runtimeConfig": {"CNIDeviceInfoFile": "/var/run/k8s.cni.cncf.io/devinfo/cni/..."},
//!                                          // capability CNIDeviceInfoFile: the device-info file
//!   "ipam": { "type": "host-local", ... },
//!   "stateDir": "/var/lib/cni/rdma-sriov", // test/debug
//!   "sysfsRoot": "/sys"                    // test/debug
//! }
//! ```
//!
//! Messages of checks sriov-cni also makes are worded as sriov-cni words
//! them (without its `LoadConf(): ` prefix); every failure is code 7.

use std::path::PathBuf;

use libcni::args::ArgsError;
use libcni::device::is_pci_address;
use libcni::error::{CniError, ErrorCode, ToCniError};
use libcni::iface::{parse_unicast_mac, MacError};
use libcni::plugin_conf::{int_in_range, ConfError, NotInRange, PluginConf};
use libcni::source_routing::is_kernel_table;
use serde::Deserialize;
use serde_json::Value;

use crate::hwaddr::{Guid, HwAddrError, MacAddr};
use crate::pf::{VfLinkState, VfSetting, VlanProto};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Conf(#[from] ConfError),
    #[error(transparent)]
    Args(#[from] ArgsError),
    #[error("VF pci addr is required: set deviceID (or runtimeConfig.deviceID through the deviceID capability), or pf to pick a free VF")]
    NoDevice,
    #[error("invalid deviceID {0:?}: expected a PCI address like 0000:af:06.0")]
    BadPci(String),
    #[error(transparent)]
    BadPf(#[from] libcni::link_name::InvalidLinkName),
    #[error("{0}")]
    Invalid(String),
}

impl ToCniError for ConfigError {
    fn to_cni_error(&self) -> CniError {
        match self {
            ConfigError::Conf(e) => e.to_cni_error(),
            ConfigError::Args(e) => e.to_cni_error(),
            other => CniError::new(ErrorCode::InvalidNetworkConfig, other.to_string()),
        }
    }
}

fn invalid(msg: impl Into<String>) -> ConfigError {
    ConfigError::Invalid(msg.into())
}

/// How the VF is chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceSelector {
    /// The device plugin's choice.
    Pci(String),
    /// The first free VF of this PF (by hand, e.g. with cnitool).
    Pf(String),
}

/// The keys as written.
#[derive(Debug, Default, Deserialize)]
struct RawConf {
    #[serde(rename = "deviceID", default)]
    device_id: Option<String>,
    #[serde(default)]
    pf: Option<String>,
    /// sriov-cni's Go field has no JSON tag, so Go matches any case.
    #[serde(default, alias = "MAC", alias = "Mac")]
    mac: Option<String>,
    #[serde(default)]
    vlan: Option<i64>,
    #[serde(rename = "vlanQoS", default)]
    vlan_qos: Option<i64>,
    #[serde(rename = "vlanProto", default)]
    vlan_proto: Option<String>,
    #[serde(default)]
    spoofchk: Option<String>,
    #[serde(default)]
    trust: Option<String>,
    #[serde(default)]
    link_state: Option<String>,
    #[serde(default)]
    min_tx_rate: Option<i64>,
    #[serde(default)]
    max_tx_rate: Option<i64>,
    #[serde(default)]
    guid: Option<String>,
    /// Any JSON, checked by [`vf_mtu`] so every bad value (0, -1, 2^32, a
    /// string) gets the message with the range.
    #[serde(default)]
    mtu: Option<Value>,
    #[serde(rename = "allowSharedRdmaNetns", default)]
    allow_shared_rdma_netns: Option<bool>,
    #[serde(rename = "stateDir", default)]
    state_dir: Option<String>,
    #[serde(rename = "sysfsRoot", default)]
    sysfs_root: Option<String>,
    /// `true`, `false` or `{"table": N}`: read by [`RailConf::parse`].
    #[serde(default)]
    rail: Option<Value>,
    #[serde(rename = "runtimeConfig", default)]
    runtime_config: Option<RawRuntimeConfig>,
}

#[derive(Debug, Default, Deserialize)]
struct RawRuntimeConfig {
    #[serde(rename = "deviceID", default)]
    device_id: Option<String>,
    #[serde(default)]
    mac: Option<String>,
    #[serde(rename = "infinibandGUID", default)]
    infiniband_guid: Option<String>,
    #[serde(rename = "CNIDeviceInfoFile", default)]
    device_info_file: Option<String>,
}

/// The validated configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetConf {
    pub device: DeviceSelector,
    /// The PF named with `pf` next to a `deviceID`: the VF must belong to it.
    pub expected_pf: Option<String>,
    /// MAC for the VF: PF-side administrative MAC and netdev address.
    pub mac: Option<MacAddr>,
    pub vlan: Option<u32>,
    pub vlan_qos: u32,
    pub vlan_proto: Option<VlanProto>,
    pub spoofchk: Option<bool>,
    pub trust: Option<bool>,
    pub link_state: Option<VfLinkState>,
    pub min_tx_rate: Option<u32>,
    pub max_tx_rate: Option<u32>,
    pub guid: Option<Guid>,
    pub mtu: Option<u32>,
    pub allow_shared_rdma_netns: bool,
    pub state_dir: Option<PathBuf>,
    pub sysfs_root: Option<PathBuf>,
    /// Where the runtime wants the device-info file (NPWG device-info spec),
    /// from `runtimeConfig.CNIDeviceInfoFile`.
    pub device_info_file: Option<PathBuf>,
    /// `rail`: the VF is one rail of a multi-rail pod ([`crate::rail`]).
    pub rail: Option<RailConf>,
}

/// The `rail` key: `true` (or `{}`) makes the VF a rail whose routing
/// table is the first free one from 100; `{"table": N}` names the table
/// (for operators who number tables after rails); `false` or absent: no
/// rail. Only `table` is known inside: this key is ours, so a typo such as
/// `"tabel"` is refused rather than ignored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RailConf {
    pub table: Option<u32>,
}

impl RailConf {
    fn parse(value: Option<&Value>) -> Result<Option<RailConf>, ConfigError> {
        let object = match value {
            None | Some(Value::Null) | Some(Value::Bool(false)) => return Ok(None),
            Some(Value::Bool(true)) => return Ok(Some(RailConf::default())),
            Some(Value::Object(object)) => object,
            Some(other) => {
                return Err(invalid(format!(
                "rail {other} invalid: must be true, false or an object such as {{\"table\": 101}}"
            )))
            }
        };
        if let Some(key) = object.keys().find(|k| k.as_str() != "table") {
            return Err(invalid(format!(
                "rail: unknown key {key:?} (rail knows only \"table\")"
            )));
        }
        let table = match object.get("table") {
            None | Some(Value::Null) => None,
            Some(value) => Some(
                value
                    .as_u64()
                    .and_then(|id| u32::try_from(id).ok())
                    .filter(|id| !is_kernel_table(*id))
                    .ok_or_else(|| {
                        invalid(format!(
                            "rail.table {value} invalid: a routing table id is 1-4294967295, \
                             other than 253, 254 and 255 (the kernel's default, main and local tables)"
                        ))
                    })?,
            ),
        };
        Ok(Some(RailConf { table }))
    }
}

/// The keys every verb needs, read without the checks of ADD: DEL and GC
/// must work even when the configuration is no longer valid.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Locations {
    pub state_dir: Option<PathBuf>,
    pub sysfs_root: Option<PathBuf>,
    pub pf: Option<String>,
    pub allow_shared_rdma_netns: bool,
    /// `runtimeConfig.CNIDeviceInfoFile`, for DEL to remove (absolute paths
    /// only, as ADD accepts them).
    pub device_info_file: Option<PathBuf>,
}

impl Locations {
    pub fn from_conf(conf: &PluginConf) -> Locations {
        let raw = conf.raw();
        let text = |key: &str| {
            raw.get(key)
                .and_then(|v| v.as_str())
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        Locations {
            state_dir: text("stateDir").map(PathBuf::from),
            sysfs_root: text("sysfsRoot").map(PathBuf::from),
            pf: text("pf"),
            allow_shared_rdma_netns: raw
                .get("allowSharedRdmaNetns")
                .and_then(|v| v.as_bool())
                .unwrap_or(false),
            device_info_file: raw
                .get("runtimeConfig")
                .and_then(|r| r.get("CNIDeviceInfoFile"))
                .and_then(|v| v.as_str())
                .map(PathBuf::from)
                .filter(|p| p.is_absolute()),
        }
    }
}

fn on_off(key: &str, value: &str) -> Result<bool, ConfigError> {
    match value {
        "on" => Ok(true),
        "off" => Ok(false),
        other => Err(invalid(format!(
            "invalid {key} value: {other} (must be \"on\" or \"off\")"
        ))),
    }
}

fn rate(key: &str, value: Option<i64>) -> Result<Option<u32>, ConfigError> {
    value
        .map(|v| {
            u32::try_from(v).map_err(|_| {
                invalid(format!(
                    "{key} {v} invalid: value must be a rate in Mbps from 0 to {}",
                    u32::MAX
                ))
            })
        })
        .transpose()
}

/// The VF netdev's MTU: absent keeps the VF's own. The kernel checks the
/// VF's real limit when the MTU is set in the pod; here only what no link
/// can take is refused, 0 among it (the reference sriov-cni reads 0 as
/// "unchanged", which absent says here).
fn vf_mtu(value: Option<&Value>) -> Result<Option<u32>, ConfigError> {
    int_in_range(value, 1..=u64::from(u32::MAX))
        .map(|mtu| mtu.and_then(|m| u32::try_from(m).ok()))
        .map_err(|NotInRange(v)| {
            invalid(format!(
                "mtu {v} invalid: an integer from 1 to {} (leave it out to keep the VF's MTU)",
                u32::MAX
            ))
        })
}

impl NetConf {
    /// Reads and checks the plugin keys of `conf`; `cni_args` is CNI_ARGS
    /// (for `MAC=`).
    pub fn parse(conf: &PluginConf, cni_args: &str) -> Result<NetConf, ConfigError> {
        let raw: RawConf = conf.parse_as()?;
        let runtime = raw.runtime_config.unwrap_or_default();
        let args = libcni::args::CniArgs::parse(cni_args, &["MAC"])?;

        let pf = raw.pf.filter(|s| !s.is_empty());
        if let Some(pf) = &pf {
            libcni::link_name::check_key("pf", pf)?;
        }
        let device_id = runtime
            .device_id
            .filter(|s| !s.is_empty())
            .or(raw.device_id.filter(|s| !s.is_empty()));
        let (device, expected_pf) = match (device_id, pf) {
            (Some(pci), pf) => {
                if !is_pci_address(&pci) {
                    return Err(ConfigError::BadPci(pci));
                }
                (DeviceSelector::Pci(pci.to_ascii_lowercase()), pf)
            }
            (None, Some(pf)) => (DeviceSelector::Pf(pf), None),
            (None, None) => return Err(ConfigError::NoDevice),
        };

        // runtimeConfig.mac > CNI_ARGS MAC > mac, as in sriov-cni.
        let mac_text = runtime
            .mac
            .filter(|s| !s.is_empty())
            .or(args
                .get("MAC")
                .filter(|s| !s.is_empty())
                .map(str::to_string))
            .or(raw.mac.filter(|s| !s.is_empty()));
        let mac = mac_text
            .map(|text| match parse_unicast_mac(&text) {
                Ok(mac) => Ok(MacAddr(mac)),
                Err(MacError::Syntax) => Err(invalid(HwAddrError::Mac(text).to_string())),
                Err(MacError::Multicast | MacError::Zero) => Err(invalid(format!(
                    "invalid MAC address {text:?}: not a unicast address"
                ))),
            })
            .transpose()?;

        let vlan = match raw.vlan {
            None => None,
            Some(v) if (0..=4094).contains(&v) => Some(v as u32),
            Some(v) => {
                return Err(invalid(format!(
                    "vlan id {v} invalid: value must be in the range 0-4094"
                )))
            }
        };
        let vlan_proto_text = raw.vlan_proto.filter(|s| !s.is_empty());
        if vlan.is_none() {
            if raw.vlan_qos.is_some() {
                return Err(invalid(
                    "vlan id must be configured to set vlan QoS to a non-nil value",
                ));
            }
            if vlan_proto_text.is_some() {
                return Err(invalid(
                    "vlan id must be configured to set vlan proto to a non-nil value",
                ));
            }
        }
        let vlan_qos = match raw.vlan_qos.unwrap_or(0) {
            q if (0..=7).contains(&q) => q as u32,
            q => {
                return Err(invalid(format!(
                    "vlan QoS PCP {q} invalid: value must be in the range 0-7"
                )))
            }
        };
        if vlan_qos != 0 && vlan == Some(0) {
            return Err(invalid(
                "non-zero vlan id must be configured to set vlan QoS to a non-zero value",
            ));
        }
        let vlan_proto = vlan_proto_text
            .map(|text| {
                VlanProto::parse(&text).ok_or_else(|| {
                    invalid(format!(
                        "vlan Proto {text} invalid: value must be '802.1Q' or '802.1ad'"
                    ))
                })
            })
            .transpose()?;
        if vlan_proto == Some(VlanProto::Dot1Ad) && vlan == Some(0) {
            return Err(invalid(
                "non-zero vlan id must be configured to set vlan proto 802.1ad",
            ));
        }

        let spoofchk = raw
            .spoofchk
            .filter(|s| !s.is_empty())
            .map(|v| on_off("spoofchk", &v))
            .transpose()?;
        let trust = raw
            .trust
            .filter(|s| !s.is_empty())
            .map(|v| on_off("trust", &v))
            .transpose()?;
        let link_state = raw
            .link_state
            .filter(|s| !s.is_empty())
            .map(|v| {
                VfLinkState::parse(&v)
                    .ok_or_else(|| invalid(format!("invalid link_state value: {v}")))
            })
            .transpose()?;
        let min_tx_rate = rate("min_tx_rate", raw.min_tx_rate)?;
        let max_tx_rate = rate("max_tx_rate", raw.max_tx_rate)?;
        if let (Some(min), Some(max)) = (min_tx_rate, max_tx_rate) {
            if max != 0 && min > max {
                return Err(invalid(format!(
                    "min_tx_rate {min} invalid: must not exceed max_tx_rate {max}"
                )));
            }
        }

        let guid = runtime
            .infiniband_guid
            .filter(|s| !s.is_empty())
            .or(raw.guid.filter(|s| !s.is_empty()))
            .map(|text| text.parse::<Guid>().map_err(|e| invalid(e.to_string())))
            .transpose()?;
        let device_info_file = runtime
            .device_info_file
            .filter(|s| !s.is_empty())
            .map(PathBuf::from);
        if let Some(path) = device_info_file.as_ref().filter(|p| !p.is_absolute()) {
            return Err(invalid(format!(
                "runtimeConfig.CNIDeviceInfoFile {:?} invalid: must be an absolute path",
                path.display().to_string()
            )));
        }
        let mtu = vf_mtu(raw.mtu.as_ref())?;
        let rail = RailConf::parse(raw.rail.as_ref())?;
        let has_ipam = conf.ipam.as_ref().is_some_and(|i| !i.ipam_type.is_empty());
        if rail.is_some() && !has_ipam {
            return Err(invalid(
                "rail needs ipam: the rail's routing rule matches the address IPAM gives the VF",
            ));
        }

        Ok(NetConf {
            device,
            expected_pf,
            mac,
            vlan,
            vlan_qos,
            vlan_proto,
            spoofchk,
            trust,
            link_state,
            min_tx_rate,
            max_tx_rate,
            guid,
            mtu,
            allow_shared_rdma_netns: raw.allow_shared_rdma_netns.unwrap_or(false),
            state_dir: raw.state_dir.filter(|s| !s.is_empty()).map(PathBuf::from),
            sysfs_root: raw.sysfs_root.filter(|s| !s.is_empty()).map(PathBuf::from),
            device_info_file,
            rail,
        })
    }

    /// The PF-side settings to apply, in the order sriov-cni applies them.
    pub fn vf_settings(&self) -> Vec<VfSetting> {
        let mut settings = Vec::new();
        if let Some(vlan) = self.vlan {
            settings.push(VfSetting::Vlan {
                vlan,
                qos: self.vlan_qos,
                proto: self.vlan_proto.unwrap_or_default(),
            });
        }
        if let Some(mac) = self.mac {
            settings.push(VfSetting::Mac { mac });
        }
        if self.min_tx_rate.is_some() || self.max_tx_rate.is_some() {
            settings.push(VfSetting::Rate {
                min: self.min_tx_rate.unwrap_or(0),
                max: self.max_tx_rate.unwrap_or(0),
            });
        }
        if let Some(on) = self.spoofchk {
            settings.push(VfSetting::SpoofChk { on });
        }
        if let Some(on) = self.trust {
            settings.push(VfSetting::Trust { on });
        }
        if let Some(state) = self.link_state {
            settings.push(VfSetting::LinkState { state });
        }
        if let Some(guid) = self.guid {
            // InfiniBand VFs take the pod's GUID as node and port GUID.
            settings.push(VfSetting::NodeGuid { guid });
            settings.push(VfSetting::PortGuid { guid });
        }
        settings
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn conf(extra: Value) -> PluginConf {
        let mut base = json!({"cniVersion":"1.0.0","name":"rdma-net","type":"rdma-sriov"});
        if let (Some(b), Some(e)) = (base.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                b.insert(k.clone(), v.clone());
            }
        }
        PluginConf::from_slice(&serde_json::to_vec(&base).unwrap()).unwrap()
    }

    fn parse(extra: Value) -> Result<NetConf, ConfigError> {
        NetConf::parse(&conf(extra), "")
    }

    fn message(extra: Value) -> String {
        let e = parse(extra).unwrap_err();
        assert_eq!(
            e.to_cni_error().code,
            ErrorCode::InvalidNetworkConfig,
            "{e}"
        );
        e.to_string()
    }

    #[test]
    fn pci_address_rule() {
        for ok in ["0000:af:06.0", "0000:AF:06.7", "abcd:00:1f.3"] {
            assert!(is_pci_address(ok), "{ok}");
        }
        for bad in [
            "",
            "0000:af:06.8",
            "000:af:06.0",
            "0000:af:06",
            "0000-af:06.0",
            "0000:af:06.0 ",
            "../../etc",
            "0000:ag:06.0",
            "0000:af:06.00",
        ] {
            assert!(!is_pci_address(bad), "{bad:?}");
        }
    }

    #[test]
    fn device_selection() {
        assert_eq!(
            parse(json!({"deviceID":"0000:AF:06.0"})).unwrap().device,
            DeviceSelector::Pci("0000:af:06.0".into())
        );
        // The capability's value wins over the key, as Multus intends.
        let c =
            parse(json!({"deviceID":"0000:af:06.0","runtimeConfig":{"deviceID":"0000:af:06.1"}}))
                .unwrap();
        assert_eq!(c.device, DeviceSelector::Pci("0000:af:06.1".into()));
        assert_eq!(
            parse(json!({"pf":"ens1f0"})).unwrap().device,
            DeviceSelector::Pf("ens1f0".into())
        );
        let c = parse(json!({"pf":"ens1f0","deviceID":"0000:af:06.0"})).unwrap();
        assert_eq!(c.expected_pf.as_deref(), Some("ens1f0"));
        assert!(message(json!({})).starts_with("VF pci addr is required"));
        assert!(message(json!({"deviceID":"../x"})).contains("invalid deviceID"));
        assert_eq!(
            message(json!({"pf":"a/b"})),
            r#"invalid pf "a/b": interface name contains / or : or whitespace characters"#
        );
    }

    #[test]
    fn vlan_rules_match_sriov_cni_messages() {
        let cases = [
            (
                json!({"vlanQoS":1}),
                "vlan id must be configured to set vlan QoS to a non-nil value",
            ),
            (
                json!({"vlanProto":"802.1ad"}),
                "vlan id must be configured to set vlan proto to a non-nil value",
            ),
            (
                json!({"vlan":4095}),
                "vlan id 4095 invalid: value must be in the range 0-4094",
            ),
            (
                json!({"vlan":-1}),
                "vlan id -1 invalid: value must be in the range 0-4094",
            ),
            (
                json!({"vlan":100,"vlanQoS":8}),
                "vlan QoS PCP 8 invalid: value must be in the range 0-7",
            ),
            (
                json!({"vlan":0,"vlanQoS":1}),
                "non-zero vlan id must be configured to set vlan QoS to a non-zero value",
            ),
            (
                json!({"vlan":100,"vlanProto":"802.1x"}),
                "vlan Proto 802.1x invalid: value must be '802.1Q' or '802.1ad'",
            ),
            (
                json!({"vlan":0,"vlanProto":"802.1ad"}),
                "non-zero vlan id must be configured to set vlan proto 802.1ad",
            ),
            (json!({"link_state":"up"}), "invalid link_state value: up"),
        ];
        for (extra, expected) in cases {
            let mut extra = extra;
            extra["deviceID"] = json!("0000:af:06.0");
            assert_eq!(message(extra.clone()), expected, "{extra}");
        }
        let c =
            parse(json!({"deviceID":"0000:af:06.0","vlan":100,"vlanQoS":3,"vlanProto":"802.1AD"}))
                .unwrap();
        assert_eq!(
            c.vf_settings(),
            vec![VfSetting::Vlan {
                vlan: 100,
                qos: 3,
                proto: VlanProto::Dot1Ad
            }]
        );
    }

    #[test]
    fn all_settings_in_order() {
        let c = parse(json!({
            "deviceID":"0000:af:06.0","vlan":1234,"mac":"02:00:00:00:00:09",
            "min_tx_rate":10,"max_tx_rate":100,"spoofchk":"off","trust":"on",
            "link_state":"enable","guid":"00:11:22:33:44:55:66:77","mtu":9000,
            "allowSharedRdmaNetns":true,"stateDir":"/tmp/s","sysfsRoot":"/tmp/sys"
        }))
        .unwrap();
        let words: Vec<String> = c.vf_settings().iter().map(|s| s.to_string()).collect();
        assert_eq!(
            words,
            vec![
                "vlan 1234 qos 0 proto 802.1Q",
                "mac 02:00:00:00:00:09",
                "min_tx_rate 10 max_tx_rate 100",
                "spoofchk off",
                "trust on",
                "state enable",
                "node_guid 00:11:22:33:44:55:66:77",
                "port_guid 00:11:22:33:44:55:66:77",
            ]
        );
        assert_eq!(c.mtu, Some(9000));
        assert!(c.allow_shared_rdma_netns);
        assert_eq!(c.state_dir, Some(PathBuf::from("/tmp/s")));
        assert_eq!(c.sysfs_root, Some(PathBuf::from("/tmp/sys")));
        assert!(parse(json!({"deviceID":"0000:af:06.0"}))
            .unwrap()
            .vf_settings()
            .is_empty());
    }

    #[test]
    fn mac_precedence_and_checks() {
        let pc = conf(json!({"deviceID":"0000:af:06.0","mac":"02:00:00:00:00:01",
            "runtimeConfig":{"mac":"02:00:00:00:00:03"}}));
        let c = NetConf::parse(&pc, "MAC=02:00:00:00:00:02").unwrap();
        assert_eq!(c.mac.unwrap().to_string(), "02:00:00:00:00:03");
        let pc = conf(json!({"deviceID":"0000:af:06.0","MAC":"02:00:00:00:00:01"}));
        let c = NetConf::parse(&pc, "MAC=02:00:00:00:00:02").unwrap();
        assert_eq!(c.mac.unwrap().to_string(), "02:00:00:00:00:02");
        let c = NetConf::parse(&pc, "").unwrap();
        assert_eq!(c.mac.unwrap().to_string(), "02:00:00:00:00:01");
        assert!(
            message(json!({"deviceID":"0000:af:06.0","mac":"01:00:5e:00:00:01"}))
                .contains("not a unicast address")
        );
        assert!(
            message(json!({"deviceID":"0000:af:06.0","mac":"00:00:00:00:00:00"}))
                .contains("not a unicast address")
        );
        assert!(message(json!({"deviceID":"0000:af:06.0","mac":"zz"}))
            .contains("invalid MAC address \"zz\": expected six hex bytes like 0a:58:0a:01:00:02"));
        // Go's other spellings, as sriov-cni's net.ParseMAC reads them.
        let pc = conf(json!({"deviceID":"0000:af:06.0","mac":"02-00-00-00-00-0A"}));
        let c = NetConf::parse(&pc, "").unwrap();
        assert_eq!(c.mac.unwrap().to_string(), "02:00:00:00:00:0a");
        let e = NetConf::parse(&pc, "FOO=1").unwrap_err();
        assert_eq!(e.to_cni_error().code, ErrorCode::InvalidEnvironment);
    }

    #[test]
    fn toggles_rates_and_guid() {
        assert!(message(json!({"deviceID":"0000:af:06.0","spoofchk":"yes"}))
            .starts_with("invalid spoofchk value: yes"));
        assert!(message(json!({"deviceID":"0000:af:06.0","max_tx_rate":-5}))
            .starts_with("max_tx_rate -5 invalid"));
        assert!(
            message(json!({"deviceID":"0000:af:06.0","min_tx_rate":50,"max_tx_rate":10}))
                .contains("must not exceed")
        );
        let c = parse(json!({"deviceID":"0000:af:06.0","max_tx_rate":100})).unwrap();
        assert_eq!(c.vf_settings(), vec![VfSetting::Rate { min: 0, max: 100 }]);
        let c = parse(
            json!({"deviceID":"0000:af:06.0","guid":"00:00:00:00:00:00:00:01",
            "runtimeConfig":{"infinibandGUID":"00:00:00:00:00:00:00:02"}}),
        )
        .unwrap();
        assert_eq!(c.guid, Some(Guid(2)));
        assert!(message(json!({"deviceID":"0000:af:06.0","guid":"1:2"})).contains("invalid GUID"));
        assert!(message(json!({"deviceID":"0000:af:06.0","mtu":0})).starts_with("mtu 0"));
        for (mtu, shown) in [
            (json!(0), "0"),
            (json!(-1), "-1"),
            (json!(4_294_967_296u64), "4294967296"),
            (json!("9000"), "(a string)"),
        ] {
            assert_eq!(
                message(json!({"deviceID":"0000:af:06.0","mtu":mtu})),
                format!("mtu {shown} invalid: an integer from 1 to 4294967295 (leave it out to keep the VF's MTU)")
            );
        }
        assert_eq!(
            message(json!({"deviceID":"0000:af:06.0","max_tx_rate":-5})),
            "max_tx_rate -5 invalid: value must be a rate in Mbps from 0 to 4294967295"
        );
        assert!(message(json!({"deviceID":"0000:af:06.0","vlan":"7"}))
            .starts_with("invalid network config"));
    }

    #[test]
    fn locations_are_read_leniently() {
        let pc = conf(json!({"stateDir":"/x","vlan":99999,"pf":"p0"}));
        let l = Locations::from_conf(&pc);
        assert_eq!(l.state_dir, Some(PathBuf::from("/x")));
        assert_eq!(l.pf.as_deref(), Some("p0"));
        assert!(!l.allow_shared_rdma_netns);
        assert_eq!(l.device_info_file, None);
        let pc = conf(json!({"runtimeConfig":{"CNIDeviceInfoFile":"/run/d/x.json"}}));
        assert_eq!(
            Locations::from_conf(&pc).device_info_file,
            Some(PathBuf::from("/run/d/x.json"))
        );
        let pc = conf(json!({"runtimeConfig":{"CNIDeviceInfoFile":"rel/x.json"}}));
        assert_eq!(Locations::from_conf(&pc).device_info_file, None);
    }

    #[test]
    fn rail_forms_and_their_refusals() {
        let with_ipam = |rail: Value| {
            parse(json!({"deviceID":"0000:af:06.0","rail":rail,
                "ipam":{"type":"host-local","subnet":"10.1.0.0/24"}}))
        };
        assert_eq!(
            with_ipam(json!(true)).unwrap().rail,
            Some(RailConf::default())
        );
        assert_eq!(
            with_ipam(json!({})).unwrap().rail,
            Some(RailConf::default())
        );
        assert_eq!(with_ipam(json!(false)).unwrap().rail, None);
        assert_eq!(with_ipam(Value::Null).unwrap().rail, None);
        assert_eq!(
            with_ipam(json!({"table": 101})).unwrap().rail,
            Some(RailConf { table: Some(101) })
        );
        assert_eq!(
            with_ipam(json!({"table": 4_294_967_295u64})).unwrap().rail,
            Some(RailConf {
                table: Some(u32::MAX)
            })
        );
        assert_eq!(
            parse(json!({"deviceID":"0000:af:06.0"})).unwrap().rail,
            None
        );
        for (rail, expected) in [
            (
                json!("yes"),
                "rail \"yes\" invalid: must be true, false or an object",
            ),
            (json!(1), "rail 1 invalid"),
            (json!({"tabel": 5}), "rail: unknown key \"tabel\""),
            (json!({"table": 0}), "rail.table 0 invalid"),
            (json!({"table": 254}), "rail.table 254 invalid"),
            (json!({"table": -3}), "rail.table -3 invalid"),
            (
                json!({"table": 4_294_967_296u64}),
                "rail.table 4294967296 invalid",
            ),
            (json!({"table": "101"}), "rail.table \"101\" invalid"),
        ] {
            let e = with_ipam(rail.clone()).unwrap_err();
            assert_eq!(
                e.to_cni_error().code,
                ErrorCode::InvalidNetworkConfig,
                "{rail}"
            );
            assert!(e.to_string().starts_with(expected), "{rail}: {e}");
        }
        let no_ipam = message(json!({"deviceID":"0000:af:06.0","rail":true}));
        assert!(no_ipam.starts_with("rail needs ipam"), "{no_ipam}");
    }

    #[test]
    fn device_info_file_must_be_absolute() {
        let c = parse(json!({"deviceID":"0000:af:06.0",
            "runtimeConfig":{"CNIDeviceInfoFile":"/var/run/k8s.cni.cncf.io/devinfo/cni/n-c-net1"}}))
        .unwrap();
        assert_eq!(
            c.device_info_file,
            Some(PathBuf::from(
                "/var/run/k8s.cni.cncf.io/devinfo/cni/n-c-net1"
            ))
        );
        assert!(message(json!({"deviceID":"0000:af:06.0",
            "runtimeConfig":{"CNIDeviceInfoFile":"devinfo.json"}}))
        .contains("must be an absolute path"));
        let c = parse(json!({"deviceID":"0000:af:06.0",
            "runtimeConfig":{"CNIDeviceInfoFile":""}}))
        .unwrap();
        assert_eq!(c.device_info_file, None);
    }
}
