//! A recording stand-in for SR-IOV and RDMA hardware.
//!
//! **Test-only**: compiled with the `fake-hardware` feature, which the
//! crate's own tests turn on (its dev-dependency on itself); the binary a
//! plain `cargo build` makes has none of it. This machine (and CI) has no SR-IOV PF and no RDMA device,
//! so the PF-side VF settings, the RDMA netlink calls and the verbs port
//! query are served by [`FakeBackend`] in tests. It keeps a small model of
//! the hardware (the VFs of each PF, the RDMA devices with their namespace
//! and port state) so read-backs see earlier writes, and records every
//! change as a line in `ip link` / `rdma` words, for example
//! `pf0 vf 0 vlan 100 qos 3 proto 802.1Q` or
//! `rdma dev set mlx5_2 netns /run/netns/pod`.
//!
//! The plugin binary uses it only when the environment variable
//! [`crate::knobs::FAKE_OPS_ENV`] names a JSON world file ([`FakeWorld`]):
//! every operation then reads that file, applies itself and writes it back
//! with the new call appended, so successive plugin runs of a test share
//! one simulated machine. The netdev side (moves, renames, addresses) never
//! goes through here: it is always real.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use libcni::lock::{FileLock, LockWait};
use libcni::netns::NetNs;
use nix::errno::Errno;
use serde::{Deserialize, Serialize};

use libcni::netlink::rdma::{RdmaDevice, RdmaError, RdmaNetnsMode, RdmaOps, RdmaPort};

use crate::pf::{PfError, PfLinkOps, VfSetting, VfState};
use crate::state::write_atomically;
use crate::verbs::{PortQuery, PortState, VerbsError};

/// The RDMA subsystem of the simulated machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FakeRdmaMode {
    #[default]
    Exclusive,
    Shared,
    /// No RDMA subsystem at all (as on this machine).
    Missing,
}

/// A simulated PF.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FakePf {
    /// The VFs, indexed by VF number.
    #[serde(default)]
    pub vfs: Vec<VfState>,
    /// Setting kinds whose writes fail with EINVAL (`"trust"`, `"vlan"`,
    /// ... as in [`VfSetting`]'s `kind`), to exercise rollback.
    #[serde(default)]
    pub fail_settings: Vec<String>,
}

/// A simulated RDMA device.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FakeRdmaDevice {
    pub name: String,
    pub index: u32,
    /// The netdev bound to port 1, by name.
    #[serde(default)]
    pub netdev: Option<String>,
    /// The namespace the device is in: `None` for the plugin's own (host)
    /// namespace, else the path it was moved to.
    #[serde(default)]
    pub netns: Option<String>,
    /// An errno name (`"EOPNOTSUPP"`) a move of this device fails with, as
    /// the soft-RoCE driver does.
    #[serde(default)]
    pub move_error: Option<String>,
    #[serde(default)]
    pub port_state: PortState,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FakeRdma {
    #[serde(default)]
    pub mode: FakeRdmaMode,
    #[serde(default)]
    pub devices: Vec<FakeRdmaDevice>,
}

/// The whole simulated machine, as stored in the world file.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FakeWorld {
    #[serde(default)]
    pub pfs: BTreeMap<String, FakePf>,
    #[serde(default)]
    pub rdma: FakeRdma,
    /// Every change made, in order.
    #[serde(default)]
    pub calls: Vec<String>,
}

/// How long a call waits for another plugin process's turn on the world
/// file: far longer than any call holds it, so reaching it means a stuck
/// test, which then fails instead of hanging.
const WORLD_LOCK_WAIT: LockWait = LockWait {
    timeout: Duration::from_secs(60),
    holder: "another call on the fake machine",
};

/// Where the world lives.
#[derive(Debug)]
enum Storage {
    Memory(Mutex<FakeWorld>),
    File(PathBuf),
}

/// [`PfLinkOps`], [`RdmaOps`] and [`PortQuery`] over a [`FakeWorld`].
#[derive(Debug)]
pub struct FakeBackend {
    storage: Storage,
}

fn setting_kind(setting: &VfSetting) -> String {
    serde_json::to_value(setting)
        .ok()
        .and_then(|v| v.get("kind").and_then(|k| k.as_str()).map(str::to_string))
        .unwrap_or_default()
}

fn errno_by_name(name: &str) -> Errno {
    match name {
        "EOPNOTSUPP" | "ENOTSUP" => Errno::EOPNOTSUPP,
        "EBUSY" => Errno::EBUSY,
        "EPERM" => Errno::EPERM,
        "ENODEV" => Errno::ENODEV,
        _ => Errno::EINVAL,
    }
}

impl FakeBackend {
    /// A world held in memory (unit tests).
    pub fn in_memory(world: FakeWorld) -> FakeBackend {
        FakeBackend {
            storage: Storage::Memory(Mutex::new(world)),
        }
    }

    /// A world kept in `path`, shared by every process using that path.
    pub fn with_file(path: impl Into<PathBuf>) -> FakeBackend {
        FakeBackend {
            storage: Storage::File(path.into()),
        }
    }

    /// Writes `world` to `path` (what a test does before running the
    /// plugin binary).
    pub fn write_world(path: &Path, world: &FakeWorld) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(world).map_err(std::io::Error::other)?;
        write_atomically(path, &bytes)
    }

    pub fn read_world(path: &Path) -> std::io::Result<FakeWorld> {
        let bytes = fs::read(path)?;
        serde_json::from_slice(&bytes).map_err(std::io::Error::other)
    }

    /// A copy of the current world.
    pub fn world(&self) -> Result<FakeWorld, String> {
        self.with_world(|world| Ok(world.clone()))
    }

    /// The calls recorded so far.
    pub fn calls(&self) -> Vec<String> {
        self.world().map(|w| w.calls).unwrap_or_default()
    }

    /// Runs `f` on the world; a file world is locked, read, and written
    /// back afterwards.
    fn with_world<T>(
        &self,
        f: impl FnOnce(&mut FakeWorld) -> Result<T, String>,
    ) -> Result<T, String> {
        match &self.storage {
            Storage::Memory(world) => {
                let mut guard = world.lock().unwrap_or_else(|p| p.into_inner());
                f(&mut guard)
            }
            Storage::File(path) => {
                let lock_path = path.with_extension("lock");
                let _lock = FileLock::acquire(&lock_path, WORLD_LOCK_WAIT)
                    .map_err(|e| format!("fake world lock: {e}"))?;
                let mut world = FakeBackend::read_world(path)
                    .map_err(|e| format!("fake world {}: {e}", path.display()))?;
                let before = world.clone();
                let out = f(&mut world);
                if world != before {
                    FakeBackend::write_world(path, &world)
                        .map_err(|e| format!("fake world {}: {e}", path.display()))?;
                }
                out
            }
        }
    }
}

/// Where a simulated device is relative to `netns`.
fn visible_from(device: &mut FakeRdmaDevice, mode: FakeRdmaMode, netns: &NetNs) -> bool {
    if mode == FakeRdmaMode::Shared {
        return true;
    }
    // A namespace that no longer exists gave its devices back to the
    // initial namespace, as the kernel does.
    if let Some(path) = &device.netns {
        if NetNs::open(path).is_err() {
            device.netns = None;
        }
    }
    match &device.netns {
        None => is_host(netns),
        Some(path) => NetNs::open(path)
            .and_then(|ns| ns.same_as(netns))
            .unwrap_or(false),
    }
}

/// The plugin's own namespace, where devices start.
fn is_host(netns: &NetNs) -> bool {
    NetNs::current_thread()
        .and_then(|own| own.same_as(netns))
        .unwrap_or(false)
}

fn to_device(device: &FakeRdmaDevice) -> RdmaDevice {
    RdmaDevice {
        index: device.index,
        name: device.name.clone(),
        ports: vec![RdmaPort {
            index: 1,
            state: Some(match device.port_state {
                PortState::Nop => 0,
                PortState::Down => 1,
                PortState::Init => 2,
                PortState::Armed => 3,
                PortState::Active => 4,
                PortState::ActiveDefer => 5,
                PortState::Other(n) => u8::try_from(n).unwrap_or(u8::MAX),
            }),
            netdev_index: None,
            netdev_name: device.netdev.clone(),
        }],
    }
}

impl PfLinkOps for FakeBackend {
    fn vf_state(&self, pf: &str, vf: u32) -> Result<VfState, PfError> {
        self.with_world(|world| {
            let Some(fake_pf) = world.pfs.get(pf) else {
                return Ok(Err(PfError::PfNotFound { pf: pf.to_string() }));
            };
            Ok(usize::try_from(vf)
                .ok()
                .and_then(|i| fake_pf.vfs.get(i))
                .cloned()
                .ok_or(PfError::VfNotFound {
                    pf: pf.to_string(),
                    vf,
                }))
        })
        .map_err(PfError::Backend)?
    }

    fn set_vf(&self, pf: &str, vf: u32, setting: &VfSetting) -> Result<(), PfError> {
        self.with_world(|world| {
            let Some(fake_pf) = world.pfs.get_mut(pf) else {
                return Ok(Err(PfError::PfNotFound { pf: pf.to_string() }));
            };
            if fake_pf.fail_settings.contains(&setting_kind(setting)) {
                world.calls.push(format!("{pf} vf {vf} {setting} (failed)"));
                return Ok(Err(PfError::Backend(format!(
                    "failed to set {setting} on VF {vf} of PF {pf:?}: EINVAL: Invalid argument (injected)"
                ))));
            }
            let Some(state) = usize::try_from(vf).ok().and_then(|i| fake_pf.vfs.get_mut(i)) else {
                return Ok(Err(PfError::VfNotFound {
                    pf: pf.to_string(),
                    vf,
                }));
            };
            match setting {
                VfSetting::Mac { mac } => state.admin_mac = *mac,
                VfSetting::Vlan { vlan, qos, proto } => {
                    state.vlan = *vlan;
                    state.qos = *qos;
                    state.vlan_proto = *proto;
                }
                VfSetting::SpoofChk { on } => state.spoofchk = *on,
                VfSetting::Trust { on } => state.trust = *on,
                VfSetting::LinkState { state: s } => state.link_state = *s,
                VfSetting::Rate { min, max } => {
                    state.min_tx_rate = *min;
                    state.max_tx_rate = *max;
                }
                VfSetting::NodeGuid { guid } => state.node_guid = Some(*guid),
                VfSetting::PortGuid { guid } => state.port_guid = Some(*guid),
            }
            world.calls.push(format!("{pf} vf {vf} {setting}"));
            Ok(Ok(()))
        })
        .map_err(PfError::Backend)?
    }
}

impl RdmaOps for FakeBackend {
    fn netns_mode(&self) -> Result<RdmaNetnsMode, RdmaError> {
        let mode = self
            .with_world(|world| Ok(world.rdma.mode))
            .map_err(RdmaError::Backend)?;
        match mode {
            FakeRdmaMode::Exclusive => Ok(RdmaNetnsMode::Exclusive),
            FakeRdmaMode::Shared => Ok(RdmaNetnsMode::Shared),
            FakeRdmaMode::Missing => Err(RdmaError::Unavailable {
                reason: "the kernel has no RDMA netlink (ib_core is not loaded)".to_string(),
            }),
        }
    }

    fn devices(&self, netns: &NetNs) -> Result<Vec<RdmaDevice>, RdmaError> {
        self.with_world(|world| {
            let mode = world.rdma.mode;
            if mode == FakeRdmaMode::Missing {
                return Ok(Err(RdmaError::Unavailable {
                    reason: "the kernel has no RDMA netlink (ib_core is not loaded)".to_string(),
                }));
            }
            Ok(Ok(world
                .rdma
                .devices
                .iter_mut()
                .filter_map(|d| visible_from(d, mode, netns).then(|| to_device(d)))
                .collect()))
        })
        .map_err(RdmaError::Backend)?
    }

    fn move_device(&self, device: &str, from: &NetNs, to: &NetNs) -> Result<(), RdmaError> {
        self.with_world(|world| {
            let mode = world.rdma.mode;
            let target = if is_host(to) {
                "host".to_string()
            } else {
                to.path().display().to_string()
            };
            let Some(fake) = world.rdma.devices.iter_mut().find(|d| d.name == device) else {
                return Ok(Err(RdmaError::DeviceNotFound(device.to_string())));
            };
            if !visible_from(fake, mode, from) {
                return Ok(Err(RdmaError::DeviceNotFound(device.to_string())));
            }
            // The kernel refuses every move in shared mode, and a move of a
            // device whose driver cannot disassociate its user contexts.
            let refusal = match (&fake.move_error, mode) {
                (Some(name), _) => Some(errno_by_name(name)),
                (None, FakeRdmaMode::Shared) => Some(Errno::EOPNOTSUPP),
                _ => None,
            };
            if let Some(errno) = refusal {
                world.calls.push(format!(
                    "rdma dev set {device} netns {target} (failed: {errno})"
                ));
                return Ok(Err(RdmaError::Kernel {
                    op: "SET netns",
                    errno,
                    message: None,
                }));
            }
            fake.netns = (target != "host").then(|| target.clone());
            world
                .calls
                .push(format!("rdma dev set {device} netns {target}"));
            Ok(Ok(()))
        })
        .map_err(RdmaError::Backend)?
    }
}

impl PortQuery for FakeBackend {
    fn port_state(&self, netns: &NetNs, device: &str, port: u8) -> Result<PortState, VerbsError> {
        self.with_world(|world| {
            let mode = world.rdma.mode;
            let mut seen = Vec::new();
            let mut found = None;
            for d in world.rdma.devices.iter_mut() {
                if visible_from(d, mode, netns) {
                    seen.push(d.name.clone());
                    if d.name == device && port == 1 {
                        found = Some(d.port_state);
                    }
                }
            }
            Ok(found.ok_or_else(|| VerbsError::DeviceNotFound {
                device: device.to_string(),
                netns: netns.path().display().to_string(),
                seen,
            }))
        })
        .map_err(VerbsError::Backend)?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pf::VlanProto;

    fn world() -> FakeWorld {
        let mut pfs = BTreeMap::new();
        pfs.insert(
            "pf0".to_string(),
            FakePf {
                vfs: vec![VfState::default(), VfState::default()],
                fail_settings: vec!["trust".into()],
            },
        );
        FakeWorld {
            pfs,
            rdma: FakeRdma {
                mode: FakeRdmaMode::Exclusive,
                devices: vec![FakeRdmaDevice {
                    name: "mlx5_2".into(),
                    index: 2,
                    netdev: Some("vf0".into()),
                    ..FakeRdmaDevice::default()
                }],
            },
            calls: Vec::new(),
        }
    }

    #[test]
    fn writes_are_recorded_and_read_back() {
        let fake = FakeBackend::in_memory(world());
        let vlan = VfSetting::Vlan {
            vlan: 1234,
            qos: 0,
            proto: VlanProto::Dot1Q,
        };
        fake.set_vf("pf0", 1, &vlan).unwrap();
        assert_eq!(fake.vf_state("pf0", 1).unwrap().vlan, 1234);
        assert_eq!(fake.calls(), vec!["pf0 vf 1 vlan 1234 qos 0 proto 802.1Q"]);
        let e = fake
            .set_vf("pf0", 0, &VfSetting::Trust { on: true })
            .unwrap_err();
        assert!(e.to_string().contains("injected"), "{e}");
        assert!(matches!(
            fake.vf_state("pf0", 5),
            Err(PfError::VfNotFound { vf: 5, .. })
        ));
        assert!(matches!(
            fake.vf_state("pf9", 0),
            Err(PfError::PfNotFound { .. })
        ));
    }

    #[test]
    fn file_world_is_shared_between_backends() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("world.json");
        FakeBackend::write_world(&path, &world()).unwrap();
        FakeBackend::with_file(&path)
            .set_vf("pf0", 0, &VfSetting::SpoofChk { on: true })
            .unwrap();
        let again = FakeBackend::with_file(&path);
        assert!(again.vf_state("pf0", 0).unwrap().spoofchk);
        assert_eq!(again.calls(), vec!["pf0 vf 0 spoofchk on"]);
        assert_eq!(
            FakeBackend::read_world(&path).unwrap().calls,
            vec!["pf0 vf 0 spoofchk on"]
        );
    }

    #[test]
    fn missing_subsystem_and_shared_mode_behave_like_the_kernel() {
        let host = NetNs::current_thread().unwrap();
        let mut w = world();
        w.rdma.mode = FakeRdmaMode::Missing;
        let fake = FakeBackend::in_memory(w.clone());
        assert!(matches!(
            fake.netns_mode(),
            Err(RdmaError::Unavailable { .. })
        ));
        w.rdma.mode = FakeRdmaMode::Shared;
        let fake = FakeBackend::in_memory(w);
        let e = fake.move_device("mlx5_2", &host, &host).unwrap_err();
        assert_eq!(e.errno(), Some(Errno::EOPNOTSUPP));
        assert_eq!(fake.devices(&host).unwrap().len(), 1);
        assert_eq!(
            fake.port_state(&host, "mlx5_2", 1).unwrap(),
            PortState::Active
        );
    }
}
