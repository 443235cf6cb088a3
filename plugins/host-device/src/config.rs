//! The network configuration: which host device to hand to the container.
//!
//! Keys are the reference's, matched as Go's `encoding/json` matches them
//! (exactly, else case-insensitively: the reference's tests send
//! `"RuntimeConfig"`):
//!
//! | key | meaning |
//! |---|---|
//! | `device` | the host link's name |
//! | `hwaddr` | the host link's MAC (6, 8 or 20 bytes, Go's three spellings) |
//! | `kernelpath` | a device directory under `/sys/devices/`: its netdev |
//! | `pciBusID` | a PCI function: its netdev, or DPDK mode when a userspace driver has it |
//! | `runtimeConfig.deviceID` | from a device plugin: a PCI address (becomes `pciBusID`) or an auxiliary-bus device |
//! | `runtimeConfig.CNIDeviceInfoFile` | where to write the device-info file (spec 1.1.0) |
//! | `DPDKMode` | the reference's untagged field; `true` without `pciBusID` moves nothing |
//! | `ipam`, `dns` | optional IPAM; `dns` replaces the IPAM's in the result, as in the reference |
//! | `dataDir` | ours: where the host-side state of moved devices is kept (`/run/cni/host-device`) |
//!
//! When several selectors are given the reference's precedence applies,
//! device > hwaddr > kernelpath > pciBusID > auxiliary device, and the
//! others are ignored (logged).

use std::path::{Component, Path, PathBuf};

use libcni::confine::Place;
use libcni::device::{is_pci_address, Bus, BusDevice, Sysfs};
use libcni::go_compat::{fold_keys, Shape, DNS};
use libcni::plugin_conf::PluginConf;
use libcni::types::Dns;
use serde::Deserialize;
use serde_json::Value;

/// Where ADD records what it changed on the host.
pub const DEFAULT_DATA_DIR: &str = "/run/cni/host-device";

/// `kernelpath` must be under this directory.
pub const KERNEL_PATH_PREFIX: &str = "/sys/devices/";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("failed to load netconf: {0}")]
    Decode(#[source] serde_json::Error),
    #[error(r#"specify either "device", "hwaddr", "kernelpath" or "pciBusID""#)]
    NoSelector,
    #[error("failed to parse MAC address {0:?}: expected 6, 8 or 20 hex bytes as aa:bb:.., aa-bb-.. or aabb.ccdd..")]
    BadHwaddr(String),
    #[error("kernel device path {0:?} must be absolute and begin with /sys/devices/")]
    BadKernelPath(String),
    #[error("pciBusID {0:?} is not a PCI address (dddd:bb:dd.f)")]
    BadPciAddress(String),
    #[error("runtime config DeviceID {0} not found or unsupported: no PCI or auxiliary-bus device of that name on this node")]
    DeviceIdNotFound(String),
    #[error("runtimeConfig.CNIDeviceInfoFile {0:?} must be an absolute path")]
    BadDeviceInfoPath(String),
    #[error("dataDir {0:?} must be an absolute path")]
    BadDataDir(String),
    /// `dataDir` outside the state folders: DEL restores devices from the
    /// records there, so a namespace user must not choose it freely.
    #[error(transparent)]
    Confine(#[from] libcni::confine::ConfineError),
    #[error(transparent)]
    LinkName(#[from] libcni::link_name::InvalidLinkName),
}

/// How the host device is chosen, after precedence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// By name.
    Name(String),
    /// By current hardware address.
    HwAddr(Vec<u8>),
    /// By a `/sys/devices/...` directory.
    KernelPath(String),
    /// By the device on a bus (PCI function or auxiliary device).
    Device(BusDevice),
}

impl Selector {
    /// The configuration key it came from, for messages.
    pub fn describe(&self) -> String {
        match self {
            Selector::Name(name) => format!("device {name:?}"),
            Selector::HwAddr(mac) => format!("hwaddr {}", libcni::netlink::format_mac(mac)),
            Selector::KernelPath(path) => format!("kernelpath {path:?}"),
            Selector::Device(BusDevice { bus: Bus::Pci, id }) => format!("PCI device {id}"),
            Selector::Device(BusDevice {
                bus: Bus::Auxiliary,
                id,
            }) => format!("auxiliary device {id}"),
        }
    }
}

/// The configuration as the verbs use it.
#[derive(Debug, Clone)]
pub struct NetConf {
    /// `None` only with `DPDKMode` set by hand and no selector.
    pub selector: Option<Selector>,
    /// `DPDKMode` as written: with no PCI function to look at, the
    /// reference takes it as given.
    pub dpdk_mode_key: bool,
    /// `pciBusID`, or a PCI `deviceID`, whichever selector won: the
    /// reference decides DPDK mode from its driver even when `device`
    /// picks the link.
    pub pci_function: Option<String>,
    /// The IPAM plugin's type, when there is IPAM.
    pub ipam_type: Option<String>,
    pub dns: Dns,
    pub device_info_file: Option<PathBuf>,
    pub data_dir: PathBuf,
}

/// The keys as Go would decode them; strings may be `null`.
#[derive(Debug, Default, Deserialize)]
struct Keys {
    #[serde(default)]
    device: Option<String>,
    #[serde(default)]
    hwaddr: Option<String>,
    #[serde(default)]
    kernelpath: Option<String>,
    #[serde(default, rename = "pciBusID")]
    pci_bus_id: Option<String>,
    #[serde(default, rename = "DPDKMode")]
    dpdk_mode: Option<bool>,
    #[serde(default, rename = "runtimeConfig")]
    runtime_config: Option<RuntimeKeys>,
    #[serde(default)]
    ipam: Option<IpamKeys>,
    #[serde(default)]
    dns: Option<Dns>,
    #[serde(default, rename = "dataDir")]
    data_dir: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct RuntimeKeys {
    #[serde(default, rename = "deviceID")]
    device_id: Option<String>,
    #[serde(default, rename = "CNIDeviceInfoFile")]
    device_info_file: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct IpamKeys {
    #[serde(default, rename = "type")]
    ipam_type: Option<String>,
}

const RUNTIME: Shape = Shape::Object(&[
    ("deviceID", Shape::Leaf),
    ("CNIDeviceInfoFile", Shape::Leaf),
]);
const IPAM: Shape = Shape::Object(&[("type", Shape::Leaf)]);
const TOP: Shape = Shape::Object(&[
    ("device", Shape::Leaf),
    ("hwaddr", Shape::Leaf),
    ("kernelpath", Shape::Leaf),
    ("pciBusID", Shape::Leaf),
    ("DPDKMode", Shape::Leaf),
    ("runtimeConfig", RUNTIME),
    ("ipam", IPAM),
    ("dns", DNS),
    ("dataDir", Shape::Leaf),
]);

fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|s| !s.is_empty())
}

impl NetConf {
    /// Decodes and checks the configuration. `sysfs` answers what
    /// `runtimeConfig.deviceID` names (a device that is not there is an
    /// error, as in the reference); nothing else touches the system.
    pub fn load(conf: &PluginConf, sysfs: &Sysfs) -> Result<NetConf, ConfigError> {
        NetConf::decode(conf.raw(), Some(sysfs))
    }

    /// As [`NetConf::load`], but a `deviceID` is taken as written without
    /// asking sysfs: DEL, CHECK and GC must work when the device plugin's
    /// device has gone (the reference's DEL fails then).
    pub fn load_lenient(conf: &PluginConf) -> Result<NetConf, ConfigError> {
        NetConf::decode(conf.raw(), None)
    }

    fn decode(raw: &Value, sysfs: Option<&Sysfs>) -> Result<NetConf, ConfigError> {
        let keys: Keys = libcni::plugin_conf::decode_with_path(&fold_keys(raw, &TOP))
            .map_err(ConfigError::Decode)?;
        let runtime = keys.runtime_config.unwrap_or_default();
        let device = non_empty(keys.device);
        if let Some(name) = &device {
            libcni::link_name::check_key("device", name)?;
        }
        let hwaddr = non_empty(keys.hwaddr);
        let kernelpath = non_empty(keys.kernelpath);
        let mut pci = non_empty(keys.pci_bus_id);
        let mut auxiliary = None;
        if let Some(id) = non_empty(runtime.device_id) {
            // The runtime's device ID overrides pciBusID.
            match sysfs {
                Some(sysfs) => match sysfs.find_device(&id) {
                    Some(BusDevice { bus: Bus::Pci, id }) => pci = Some(id),
                    Some(BusDevice {
                        bus: Bus::Auxiliary,
                        id,
                    }) => {
                        pci = None;
                        auxiliary = Some(id);
                    }
                    None => return Err(ConfigError::DeviceIdNotFound(id)),
                },
                None if is_pci_address(&id) => pci = Some(id),
                None => {
                    pci = None;
                    auxiliary = Some(id);
                }
            }
        }
        let given: Vec<&str> = [
            device.as_ref().map(|_| "device"),
            hwaddr.as_ref().map(|_| "hwaddr"),
            kernelpath.as_ref().map(|_| "kernelpath"),
            pci.as_ref().map(|_| "pciBusID"),
            auxiliary.as_ref().map(|_| "deviceID"),
        ]
        .into_iter()
        .flatten()
        .collect();
        if given.len() > 1 {
            log::info!(
                "several device selectors ({}); {} wins, as in the reference",
                given.join(", "),
                given[0]
            );
        }
        if let Some(address) = pci.as_ref().filter(|a| !is_pci_address(a)) {
            return Err(ConfigError::BadPciAddress(address.clone()));
        }
        let dpdk_mode_key = keys.dpdk_mode.unwrap_or(false);
        let selector = if let Some(name) = device {
            Some(Selector::Name(name))
        } else if let Some(text) = hwaddr {
            let mac = libcni::hwaddr::parse(&text).ok_or(ConfigError::BadHwaddr(text))?;
            Some(Selector::HwAddr(mac))
        } else if let Some(path) = kernelpath {
            check_kernel_path(&path)?;
            Some(Selector::KernelPath(path))
        } else if let Some(address) = &pci {
            Some(Selector::Device(BusDevice::pci(address)))
        } else {
            auxiliary.map(|id| Selector::Device(BusDevice::auxiliary(id)))
        };
        if selector.is_none() && !dpdk_mode_key {
            return Err(ConfigError::NoSelector);
        }
        let device_info_file = match non_empty(runtime.device_info_file) {
            Some(path) if Path::new(&path).is_absolute() => Some(PathBuf::from(path)),
            Some(path) => return Err(ConfigError::BadDeviceInfoPath(path)),
            None => None,
        };
        let data_dir = match non_empty(keys.data_dir) {
            Some(dir) if Path::new(&dir).is_absolute() => {
                let dir = PathBuf::from(dir);
                // Only inside the state folders (/var/lib/cni, /run/cni,
                // or the node policy's), reached without links: the
                // records there are written, read back and removed.
                libcni::confine::confine_folder("dataDir", Place::State, &dir, None)?;
                dir
            }
            Some(dir) => return Err(ConfigError::BadDataDir(dir)),
            None => PathBuf::from(DEFAULT_DATA_DIR),
        };
        Ok(NetConf {
            selector,
            dpdk_mode_key,
            pci_function: pci,
            ipam_type: keys.ipam.and_then(|i| non_empty(i.ipam_type)),
            dns: keys.dns.unwrap_or_default(),
            device_info_file,
            data_dir,
        })
    }
}

/// The reference's rule plus one of ours: no `..`, so the path cannot
/// leave `/sys/devices/`.
fn check_kernel_path(path: &str) -> Result<(), ConfigError> {
    let p = Path::new(path);
    let escapes = p.components().any(|c| c == Component::ParentDir);
    if !p.is_absolute() || !path.starts_with(KERNEL_PATH_PREFIX) || escapes {
        return Err(ConfigError::BadKernelPath(path.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::fs;

    fn conf(value: Value) -> PluginConf {
        let mut value = value;
        value["cniVersion"] = json!("1.0.0");
        value["name"] = json!("net");
        value["type"] = json!("host-device");
        PluginConf::from_slice(&serde_json::to_vec(&value).unwrap()).unwrap()
    }

    fn load(value: Value) -> Result<NetConf, ConfigError> {
        NetConf::load(&conf(value), &Sysfs::new("/nonexistent-sysfs"))
    }

    #[test]
    fn selectors_follow_the_reference_precedence() {
        let all = json!({"device": "eth1", "hwaddr": "02:00:00:00:00:01",
            "kernelpath": "/sys/devices/pci0000:00/0000:00:03.0", "pciBusID": "0000:00:03.0"});
        assert_eq!(
            load(all.clone()).unwrap().selector,
            Some(Selector::Name("eth1".into()))
        );
        let mut v = all.clone();
        v["device"] = json!("");
        assert_eq!(
            load(v.clone()).unwrap().selector,
            Some(Selector::HwAddr(vec![2, 0, 0, 0, 0, 1]))
        );
        v["hwaddr"] = Value::Null;
        assert!(matches!(
            load(v.clone()).unwrap().selector,
            Some(Selector::KernelPath(_))
        ));
        v.as_object_mut().unwrap().remove("kernelpath");
        assert_eq!(
            load(v).unwrap().selector,
            Some(Selector::Device(BusDevice::pci("0000:00:03.0")))
        );
    }

    #[test]
    fn keys_match_case_insensitively_as_in_go() {
        let c = load(json!({"Device": "eth1", "IPAM": {"Type": "static"},
            "RuntimeConfig": {"cnideviceinfofile": "/run/x.json"}}))
        .unwrap();
        assert_eq!(c.selector, Some(Selector::Name("eth1".into())));
        assert_eq!(c.ipam_type.as_deref(), Some("static"));
        assert_eq!(c.device_info_file, Some(PathBuf::from("/run/x.json")));
        assert_eq!(c.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
    }

    #[test]
    fn bad_input_is_refused_with_the_reference_texts() {
        assert_eq!(
            load(json!({})).unwrap_err().to_string(),
            r#"specify either "device", "hwaddr", "kernelpath" or "pciBusID""#
        );
        assert!(matches!(
            load(json!({"device": 7})),
            Err(ConfigError::Decode(_))
        ));
        assert!(matches!(
            load(json!({"hwaddr": "02:00:00:00:00"})),
            Err(ConfigError::BadHwaddr(_))
        ));
        for path in [
            "sys/devices/x",
            "/sys/class/net/eth0",
            "/sys/devices/../../etc",
        ] {
            assert_eq!(
                load(json!({ "kernelpath": path })).unwrap_err().to_string(),
                format!(
                    "kernel device path {path:?} must be absolute and begin with /sys/devices/"
                )
            );
        }
        assert!(matches!(
            load(json!({"pciBusID": "../../etc"})),
            Err(ConfigError::BadPciAddress(_))
        ));
        assert!(matches!(
            load(json!({"device": "e", "runtimeConfig": {"CNIDeviceInfoFile": "rel.json"}})),
            Err(ConfigError::BadDeviceInfoPath(_))
        ));
        assert!(matches!(
            load(json!({"device": "e", "dataDir": "rel"})),
            Err(ConfigError::BadDataDir(_))
        ));
        // Outside the state folders (issue 28).
        let e = load(json!({"device": "e", "dataDir": "/root/hd"})).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("dataDir \"/root/hd\" is outside the folders allowed for state"),
            "{e}"
        );
    }

    #[test]
    fn dpdk_mode_by_hand_needs_no_selector() {
        let c = load(json!({"DPDKMode": true})).unwrap();
        assert_eq!(c.selector, None);
        assert!(c.dpdk_mode_key);
    }

    /// deviceID names a PCI function or an auxiliary device, found in a
    /// fake sysfs tree; an unknown one is refused by ADD's load only.
    #[test]
    fn device_id_is_looked_up_in_sysfs() {
        let root = tempfile::tempdir().unwrap();
        fs::create_dir_all(root.path().join("bus/pci/devices/0000:af:00.2")).unwrap();
        fs::create_dir_all(root.path().join("bus/auxiliary/devices/mlx5_core.sf.4")).unwrap();
        let sysfs = Sysfs::new(root.path());
        let with_id =
            |id: &str| conf(json!({"pciBusID": "0000:01:00.0", "runtimeConfig": {"deviceID": id}}));
        let c = NetConf::load(&with_id("0000:af:00.2"), &sysfs).unwrap();
        assert_eq!(
            c.selector,
            Some(Selector::Device(BusDevice::pci("0000:af:00.2")))
        );
        let c = NetConf::load(&with_id("mlx5_core.sf.4"), &sysfs).unwrap();
        assert_eq!(
            c.selector,
            Some(Selector::Device(BusDevice::auxiliary("mlx5_core.sf.4")))
        );
        assert_eq!(c.pci_function, None);
        let e = NetConf::load(&with_id("mlx5_core.sf.9"), &sysfs).unwrap_err();
        assert!(matches!(e, ConfigError::DeviceIdNotFound(_)), "{e}");
        // DEL takes the ID as written.
        let c = NetConf::load_lenient(&with_id("mlx5_core.sf.9")).unwrap();
        assert_eq!(
            c.selector,
            Some(Selector::Device(BusDevice::auxiliary("mlx5_core.sf.9")))
        );
        let c = NetConf::load_lenient(&with_id("0000:af:00.7")).unwrap();
        assert_eq!(
            c.selector,
            Some(Selector::Device(BusDevice::pci("0000:af:00.7")))
        );
    }
}
