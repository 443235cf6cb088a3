//! A fake machine for the plugin binary: a host netns holding veth pairs
//! that stand in for VF netdevs (this kernel has neither SR-IOV nor dummy
//! links), a fake sysfs tree mapping PCI addresses to them, a simulated
//! PF/RDMA layer ([`FakeWorld`], selected with `RDMA_SRIOV_FAKE_PF_OPS`),
//! and private state and IPAM directories.
//!
//! The plugin runs inside the host netns (`ip netns exec`), so its "host"
//! is the test's; nothing touches the machine's own network.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use conformance::testnet::{PluginCall, PluginOutcome, TestNetns};
use rdma_sriov::fake::{FakeBackend, FakePf, FakeRdma, FakeRdmaDevice, FakeRdmaMode, FakeWorld};
use rdma_sriov::pf::VfState;
use serde_json::{json, Value};

pub const PLUGIN: &str = env!("CARGO_BIN_EXE_rdma-sriov");
pub const NETWORK: &str = "rdma-net";
pub const PF: &str = "pf0";
pub const PF_PCI: &str = "0000:af:00.0";
pub const SUBNET: &str = "10.77.0.0/24";
pub const GATEWAY: &str = "10.77.0.1";

/// The PCI address of VF `index` of the fake PF.
pub fn vf_pci(index: u32) -> String {
    format!("0000:af:00.{}", index + 2)
}

/// Where IPAM comes from: the folder of this workspace's host-local (built
/// on first use under `cargo test`; see
/// [`conformance::testnet::workspace_plugin`]).
pub fn cni_path() -> String {
    let host_local = conformance::testnet::workspace_plugin("host-local");
    host_local
        .parent()
        .unwrap_or_else(|| panic!("{} has no folder", host_local.display()))
        .display()
        .to_string()
}

/// How a VF appears in the fake sysfs.
#[derive(Debug, Clone, Default)]
pub struct VfSpec {
    /// Netdev name under `net/` (a real veth in the host netns).
    pub netdev: Option<String>,
    /// RDMA device under `infiniband/`.
    pub rdma: Option<String>,
    /// Bound driver (`vfio-pci` for a userspace VF).
    pub driver: Option<String>,
}

pub struct Rig {
    pub host: TestNetns,
    pub dir: tempfile::TempDir,
    pub sysfs: PathBuf,
    pub state: PathBuf,
    pub world: PathBuf,
    pub ipam_dir: PathBuf,
}

impl Rig {
    /// A host netns, PF `pf0` in sysfs and an empty simulated machine.
    pub fn new(tag: &str) -> Rig {
        let host = TestNetns::new(tag);
        let dir = tempfile::tempdir().unwrap();
        let rig = Rig {
            sysfs: dir.path().join("sys"),
            state: dir.path().join("state"),
            world: dir.path().join("world.json"),
            ipam_dir: dir.path().join("ipam"),
            host,
            dir,
        };
        let pf_dir = rig.pci_dir(PF_PCI);
        fs::create_dir_all(pf_dir.join("net").join(PF)).unwrap();
        fs::create_dir_all(rig.sysfs.join("class/net").join(PF)).unwrap();
        symlink(&pf_dir, rig.sysfs.join("class/net").join(PF).join("device")).unwrap();
        for driver in ["vfio-pci", "mlx5_core"] {
            fs::create_dir_all(rig.sysfs.join("bus/pci/drivers").join(driver)).unwrap();
        }
        rig.write_world(&FakeWorld::default());
        rig
    }

    pub fn pci_dir(&self, pci: &str) -> PathBuf {
        self.sysfs.join("bus/pci/devices").join(pci)
    }

    /// Adds VF `index` to the fake sysfs.
    pub fn sysfs_vf(&self, index: u32, spec: &VfSpec) {
        let pci = vf_pci(index);
        let dir = self.pci_dir(&pci);
        fs::create_dir_all(&dir).unwrap();
        symlink(format!("../{PF_PCI}"), dir.join("physfn")).unwrap();
        symlink(
            format!("../{pci}"),
            self.pci_dir(PF_PCI).join(format!("virtfn{index}")),
        )
        .unwrap();
        if let Some(netdev) = &spec.netdev {
            fs::create_dir_all(dir.join("net").join(netdev)).unwrap();
        }
        if let Some(rdma) = &spec.rdma {
            fs::create_dir_all(dir.join("infiniband").join(rdma)).unwrap();
        }
        if let Some(driver) = &spec.driver {
            symlink(
                self.sysfs.join("bus/pci/drivers").join(driver),
                dir.join("driver"),
            )
            .unwrap();
        }
    }

    /// An RDMA device's class entry (soft-RoCE writes "rxe" as node_desc).
    pub fn sysfs_rdma_class(&self, device: &str, node_desc: &str) {
        let dir = self.sysfs.join("class/infiniband").join(device);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("node_desc"), format!("{node_desc}\n")).unwrap();
    }

    /// A veth pair standing in for VF netdev `name`: `name` plays the VF,
    /// `<name>p` stays in the host with `peer_address` so the pod can be
    /// reached through it.
    pub fn vf_netdev(&self, name: &str, peer_address: Option<&str>) {
        let peer = format!("{name}p");
        self.host
            .ip(&["link", "add", name, "type", "veth", "peer", "name", &peer]);
        self.host.ip(&["link", "set", &peer, "up"]);
        if let Some(address) = peer_address {
            self.host.ip(&["addr", "add", address, "dev", &peer]);
        }
    }

    /// VF `index` with a netdev `vf<index>` and RDMA device
    /// `mlx5_<index>` listed in sysfs, plus its simulated PF-side state.
    pub fn standard_vf(&self, index: u32, peer_address: Option<&str>) {
        let name = format!("vf{index}");
        self.vf_netdev(&name, peer_address);
        self.sysfs_vf(
            index,
            &VfSpec {
                netdev: Some(name),
                rdma: Some(format!("mlx5_{index}")),
                driver: Some("mlx5_core".into()),
            },
        );
    }

    pub fn write_world(&self, world: &FakeWorld) {
        FakeBackend::write_world(&self.world, world).unwrap();
    }

    pub fn read_world(&self) -> FakeWorld {
        FakeBackend::read_world(&self.world).unwrap()
    }

    pub fn calls(&self) -> Vec<String> {
        self.read_world().calls
    }

    pub fn clear_calls(&self) {
        let mut world = self.read_world();
        world.calls.clear();
        self.write_world(&world);
    }

    /// The base configuration, with `extra` merged in (a `null` value
    /// removes a key).
    pub fn conf(&self, extra: Value) -> Value {
        let mut conf = json!({
            "cniVersion": "1.1.0",
            "name": NETWORK,
            "type": "rdma-sriov",
            "stateDir": self.state,
            "sysfsRoot": self.sysfs,
            "ipam": {
                "type": "host-local",
                "subnet": SUBNET,
                "routes": [{"dst": "0.0.0.0/0"}],
                "dataDir": self.ipam_dir,
            },
        });
        if let (Some(base), Some(extra)) = (conf.as_object_mut(), extra.as_object()) {
            for (key, value) in extra {
                if value.is_null() {
                    base.remove(key);
                } else {
                    base.insert(key.clone(), value.clone());
                }
            }
        }
        conf
    }

    fn call(&self, command: &str, container_id: &str, netns: &str, ifname: &str) -> PluginCall {
        PluginCall::new(command)
            .var("CNI_PATH", cni_path())
            .var("CNI_CONTAINERID", container_id)
            .var("CNI_NETNS", netns)
            .var("CNI_IFNAME", ifname)
            .var("RDMA_SRIOV_LOCK_TIMEOUT_MS", "3000")
            .in_netns(&self.host)
    }

    /// Runs the plugin against the simulated PF/RDMA layer.
    pub fn run(
        &self,
        command: &str,
        container_id: &str,
        netns: &str,
        ifname: &str,
        conf: &Value,
    ) -> PluginOutcome {
        self.call(command, container_id, netns, ifname)
            .var("RDMA_SRIOV_FAKE_PF_OPS", self.world.display().to_string())
            .stdin_json(conf)
            .run(Path::new(PLUGIN))
    }

    /// Runs the plugin against this machine's kernel for PF and RDMA
    /// operations (no simulated layer).
    pub fn run_real(&self, command: &str, conf: &Value) -> PluginOutcome {
        self.call(command, "", "", "")
            .stdin_json(conf)
            .run(Path::new(PLUGIN))
    }

    pub fn add(
        &self,
        container_id: &str,
        pod: &TestNetns,
        ifname: &str,
        conf: &Value,
    ) -> PluginOutcome {
        self.run(
            "ADD",
            container_id,
            &pod.path().display().to_string(),
            ifname,
            conf,
        )
    }

    pub fn del(
        &self,
        container_id: &str,
        netns: &str,
        ifname: &str,
        conf: &Value,
    ) -> PluginOutcome {
        self.run("DEL", container_id, netns, ifname, conf)
    }

    /// The state record of an attachment, if any.
    pub fn state_of(&self, container_id: &str, ifname: &str) -> Option<Value> {
        let path = self
            .state
            .join("attachments")
            .join(NETWORK)
            .join(format!("{container_id}:{ifname}.json"));
        fs::read(path)
            .ok()
            .map(|b| serde_json::from_slice(&b).unwrap())
    }

    pub fn allocation_of(&self, pci: &str) -> Option<Value> {
        fs::read(self.state.join("allocations").join(pci))
            .ok()
            .map(|b| serde_json::from_slice(&b).unwrap())
    }

    /// host-local's lease file for `ip`.
    pub fn lease_exists(&self, ip: &str) -> bool {
        self.ipam_dir.join(NETWORK).join(ip).exists()
    }

    /// What the kernel does with a physical VF netdev when its namespace
    /// is destroyed: it comes back to the host under the name it had in
    /// the pod. A veth would be destroyed instead, so the test moves it
    /// back by hand before deleting the namespace.
    ///
    /// Real sysfs would now list the VF under the pod-side name. The fake
    /// tree cannot follow the renames the plugin makes during a run, so it
    /// lists both names from here on; the plugin takes whichever exists in
    /// the host.
    pub fn return_like_kernel(&self, pod: &TestNetns, pod_name: &str, index: u32) {
        pod.ip(&["link", "set", pod_name, "netns", self.host.name()]);
        let net = self.pci_dir(&vf_pci(index)).join("net");
        fs::create_dir_all(net.join(pod_name)).unwrap();
    }
}

/// A simulated PF with `count` VFs, all in the state `vf`.
pub fn world_with(count: usize, vf: VfState, rdma: Vec<FakeRdmaDevice>) -> FakeWorld {
    let mut pfs = BTreeMap::new();
    pfs.insert(
        PF.to_string(),
        FakePf {
            vfs: vec![vf; count],
            fail_settings: Vec::new(),
        },
    );
    FakeWorld {
        pfs,
        rdma: FakeRdma {
            mode: FakeRdmaMode::Exclusive,
            devices: rdma,
        },
        calls: Vec::new(),
    }
}

/// RDMA device `mlx5_<i>` bound to netdev `vf<i>`, for i in `0..count`.
pub fn mlx_devices(count: u32) -> Vec<FakeRdmaDevice> {
    (0..count)
        .map(|i| FakeRdmaDevice {
            name: format!("mlx5_{i}"),
            index: i + 1,
            netdev: Some(format!("vf{i}")),
            ..FakeRdmaDevice::default()
        })
        .collect()
}

/// `ip -j link show` of one link, if the namespace has it.
pub fn link(ns: &TestNetns, name: &str) -> Option<Value> {
    ns.ip_json(&["link", "show"])
        .as_array()
        .and_then(|links| links.iter().find(|l| l["ifname"] == name).cloned())
}

/// IPv4 addresses (with prefix) of a link.
pub fn ipv4_addresses(ns: &TestNetns, name: &str) -> Vec<String> {
    let out = ns.ip_json(&["-4", "addr", "show", "dev", name]);
    out.as_array()
        .into_iter()
        .flatten()
        .flat_map(|l| l["addr_info"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| {
            Some(format!(
                "{}/{}",
                a["local"].as_str()?,
                a["prefixlen"].as_u64()?
            ))
        })
        .collect()
}

pub fn ns_path(ns: &TestNetns) -> String {
    ns.path().display().to_string()
}
