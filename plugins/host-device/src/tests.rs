//! The paths that need hardware this machine lacks, run in-process on real
//! namespaces and a real veth, with the hardware's two other faces faked:
//!
//! - sysfs is a tree in a temporary directory that says the veth is a PCI
//!   function's netdev (or an auxiliary device's), with an RDMA device,
//!   and that another function is bound to vfio-pci (DPDK);
//! - the RDMA subsystem is [`FakeRdma`], behind libcni's `RdmaOps`: this
//!   kernel has no RDMA at all, and no RDMA device here could change
//!   namespace anyway (soft-RoCE cannot; only hardware drivers can). The
//!   fake keeps each device's namespace and reports a port bound to the
//!   netdev with its MAC, under the name it has where it is.
//!
//! The fake exists only in this test build. What the real kernel does is
//! tested in the qemu guest (tests/qemu.rs).

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::{Arc, Mutex};

use conformance::testnet::{workspace_plugin, TestNetns};
use libcni::device::Sysfs;
use libcni::invoke::PluginEnv;
use libcni::netlink::rdma::{RdmaDevice, RdmaError, RdmaNetnsMode, RdmaOps, RdmaPort};
use libcni::netlink::RouteSocket;
use libcni::netns::NetNs;
use libcni::skel;
use nix::errno::Errno;
use serde_json::{json, Value};

use crate::plugin::HostDevice;

const PCI: &str = "0000:af:00.2";
const DPDK_PCI: &str = "0000:af:00.3";
const SF: &str = "mlx5_core.sf.4";
const RDMA_DEVICE: &str = "mlx5_2";
const NETDEV: &str = "hdp0";
const NETDEV_MAC: &str = "02:00:00:cc:00:01";
const SF_NETDEV: &str = "hdsf0";

/// One simulated RDMA device.
#[derive(Debug, Clone)]
struct FakeDevice {
    name: String,
    index: u32,
    /// The namespace it is in, by (device, inode).
    netns: (u64, u64),
    /// The MAC of the netdev its port is bound to.
    netdev_mac: Vec<u8>,
}

#[derive(Debug, Default)]
struct FakeWorld {
    /// `None`: a kernel without RDMA.
    mode: Option<RdmaNetnsMode>,
    devices: Vec<FakeDevice>,
    /// A device whose move the "kernel" refuses.
    refuse_move: Option<String>,
}

/// A simulated RDMA subsystem (see the module docs).
#[derive(Debug, Default)]
struct FakeRdma {
    world: Mutex<FakeWorld>,
}

impl FakeRdma {
    fn world(&self) -> std::sync::MutexGuard<'_, FakeWorld> {
        self.world.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Where device `name` is now.
    fn netns_of(&self, name: &str) -> Option<(u64, u64)> {
        self.world()
            .devices
            .iter()
            .find(|d| d.name == name)
            .map(|d| d.netns)
    }
}

impl RdmaOps for FakeRdma {
    fn netns_mode(&self) -> Result<RdmaNetnsMode, RdmaError> {
        self.world().mode.ok_or_else(|| RdmaError::Unavailable {
            reason: "no RDMA in this simulated kernel".into(),
        })
    }

    fn devices(&self, netns: &NetNs) -> Result<Vec<RdmaDevice>, RdmaError> {
        let here = netns.identity()?;
        let devices: Vec<FakeDevice> = self
            .world()
            .devices
            .iter()
            .filter(|d| d.netns == here)
            .cloned()
            .collect();
        let links = RouteSocket::open_in(netns)
            .and_then(|mut s| s.list_links())
            .map_err(|e| RdmaError::Backend(e.to_string()))?;
        Ok(devices
            .into_iter()
            .map(|d| {
                let bound = links.iter().find(|l| l.mac == d.netdev_mac);
                RdmaDevice {
                    index: d.index,
                    name: d.name,
                    ports: vec![RdmaPort {
                        index: 1,
                        state: Some(4),
                        netdev_index: bound.map(|l| l.index),
                        netdev_name: bound.map(|l| l.name.clone()),
                    }],
                }
            })
            .collect())
    }

    fn move_device(&self, device: &str, from: &NetNs, to: &NetNs) -> Result<(), RdmaError> {
        let (from, to) = (from.identity()?, to.identity()?);
        let mut world = self.world();
        if world.refuse_move.as_deref() == Some(device) {
            return Err(RdmaError::Kernel {
                op: "SET netns",
                errno: Errno::EOPNOTSUPP,
                message: None,
            });
        }
        let found = world
            .devices
            .iter_mut()
            .find(|d| d.name == device && d.netns == from)
            .ok_or_else(|| RdmaError::DeviceNotFound(device.to_string()))?;
        found.netns = to;
        Ok(())
    }
}

/// The scene: a host namespace with the veth `hdp0` (PCI function
/// 0000:af:00.2 with RDMA device mlx5_2 in the fake sysfs) and `hdsf0`
/// (auxiliary device mlx5_core.sf.4), a pod, a fake sysfs, a fake RDMA.
struct Scene {
    host: TestNetns,
    pod: TestNetns,
    _peer: TestNetns,
    sysfs: tempfile::TempDir,
    data: tempfile::TempDir,
    rdma: Arc<FakeRdma>,
    plugin: HostDevice,
}

impl Scene {
    fn new(tag: &str, mode: Option<RdmaNetnsMode>) -> Scene {
        let host = TestNetns::new(&format!("{tag}-h"));
        let pod = TestNetns::new(&format!("{tag}-p"));
        let peer = TestNetns::new(&format!("{tag}-r"));
        for (name, mac, peer_name) in [
            (NETDEV, NETDEV_MAC, "peer0"),
            (SF_NETDEV, "02:00:00:cc:00:02", "peer1"),
        ] {
            host.ip(&[
                "link",
                "add",
                name,
                "address",
                mac,
                "type",
                "veth",
                "peer",
                "name",
                peer_name,
                "netns",
                peer.name(),
            ]);
            host.ip(&["link", "set", name, "up"]);
        }
        let sysfs = fake_sysfs();
        let rdma = Arc::new(FakeRdma::default());
        let host_ns = NetNs::open(host.path()).unwrap();
        {
            let mut world = rdma.world();
            world.mode = mode;
            world.devices.push(FakeDevice {
                name: RDMA_DEVICE.into(),
                index: 3,
                netns: host_ns.identity().unwrap(),
                netdev_mac: vec![2, 0, 0, 0xcc, 0, 1],
            });
        }
        let plugin = HostDevice::new(Sysfs::new(sysfs.path()), rdma.clone(), PluginEnv::new());
        // The plugin runs in this process: the scratch policy allows the
        // test's device-info folder.
        libcni::confine::override_policy_file(conformance::testnet::scratch_policy());
        Scene {
            host,
            pod,
            _peer: peer,
            sysfs,
            data: tempfile::tempdir().unwrap(),
            rdma,
            plugin,
        }
    }

    fn conf(&self, version: &str, extra: Value) -> Value {
        let mut conf = json!({
            "cniVersion": version,
            "name": "hdunit",
            "type": "host-device",
            "dataDir": self.data.path().join("state").display().to_string(),
        });
        for (key, value) in extra.as_object().cloned().unwrap_or_default() {
            conf[key] = value;
        }
        conf
    }

    fn device_info_path(&self) -> std::path::PathBuf {
        self.data.path().join("devinfo/cni/hdunit-ctr-net1.json")
    }

    /// One call of the plugin as the runtime makes it, on a thread in the
    /// host namespace; returns the exit status and the printed JSON.
    fn call(&self, command: &str, conf: &Value) -> (i32, Value) {
        let cni_path = workspace_plugin("static")
            .parent()
            .unwrap()
            .display()
            .to_string();
        let env = vec![
            ("CNI_COMMAND", command.to_string()),
            ("CNI_CONTAINERID", "ctr".to_string()),
            ("CNI_NETNS", self.pod.path().display().to_string()),
            ("CNI_IFNAME", "net1".to_string()),
            ("CNI_PATH", cni_path),
        ];
        let stdin = serde_json::to_vec(conf).unwrap();
        let host_ns = NetNs::open(self.host.path()).unwrap();
        let (status, stdout) = host_ns
            .run(|| {
                let mut out = Vec::new();
                let mut err = Vec::new();
                let status = skel::run_with(
                    &self.plugin,
                    &env,
                    &mut stdin.as_slice(),
                    &mut out,
                    &mut err,
                );
                (status, out)
            })
            .unwrap();
        let value = if stdout.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&stdout).unwrap()
        };
        (status, value)
    }

    fn ok(&self, command: &str, conf: &Value) -> Value {
        let (status, out) = self.call(command, conf);
        assert_eq!(status, 0, "{command}: {out}");
        out
    }

    fn rdma_in(&self, ns: &TestNetns) -> bool {
        let identity = NetNs::open(ns.path()).unwrap().identity().unwrap();
        self.rdma.netns_of(RDMA_DEVICE) == Some(identity)
    }
}

/// See [`Scene`]; `class/net` links make the veths look like the
/// functions' netdevs.
fn fake_sysfs() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let pci = root.join("devices/pci0000:af");
    let vf = pci.join(PCI);
    fs::create_dir_all(vf.join("net").join(NETDEV)).unwrap();
    fs::create_dir_all(vf.join("infiniband").join(RDMA_DEVICE)).unwrap();
    fs::create_dir_all(pci.join(DPDK_PCI)).unwrap();
    let drivers = root.join("bus/pci/drivers");
    fs::create_dir_all(drivers.join("mlx5_core")).unwrap();
    fs::create_dir_all(drivers.join("vfio-pci")).unwrap();
    symlink(drivers.join("mlx5_core"), vf.join("driver")).unwrap();
    symlink(drivers.join("vfio-pci"), pci.join(DPDK_PCI).join("driver")).unwrap();
    let bus = root.join("bus/pci/devices");
    fs::create_dir_all(&bus).unwrap();
    symlink(&vf, bus.join(PCI)).unwrap();
    symlink(pci.join(DPDK_PCI), bus.join(DPDK_PCI)).unwrap();
    let sf = root.join("bus/auxiliary/devices").join(SF);
    fs::create_dir_all(sf.join("net").join(SF_NETDEV)).unwrap();
    for (netdev, device) in [(NETDEV, vf.as_path()), (SF_NETDEV, sf.as_path())] {
        let class = root.join("class/net").join(netdev);
        fs::create_dir_all(&class).unwrap();
        symlink(device, class.join("device")).unwrap();
    }
    let ib = root.join("class/infiniband").join(RDMA_DEVICE);
    fs::create_dir_all(&ib).unwrap();
    symlink(&vf, ib.join("device")).unwrap();
    dir
}

fn has_link(ns: &TestNetns, name: &str) -> bool {
    ns.links().iter().any(|l| l == name)
}

fn read_json(path: &Path) -> Option<Value> {
    fs::read(path)
        .ok()
        .map(|b| serde_json::from_slice(&b).unwrap())
}

#[test]
fn a_pci_netdev_goes_with_its_rdma_device_in_exclusive_mode() {
    let s = Scene::new("hdux", Some(RdmaNetnsMode::Exclusive));
    let mut conf = s.conf("1.1.0", json!({"pciBusID": PCI}));
    conf["runtimeConfig"] =
        json!({"CNIDeviceInfoFile": s.device_info_path().display().to_string()});
    let result = s.ok("ADD", &conf);
    assert_eq!(result["interfaces"][0]["pciID"], PCI, "{result}");
    assert_eq!(result["interfaces"][0]["mac"], NETDEV_MAC);
    assert!(has_link(&s.pod, "net1") && !has_link(&s.host, NETDEV));
    assert!(s.rdma_in(&s.pod), "the RDMA device stayed in the host");
    assert_eq!(
        read_json(&s.device_info_path()).unwrap(),
        json!({"type": "pci", "version": "1.1.0",
               "pci": {"pci-address": PCI, "rdma-device": RDMA_DEVICE}})
    );

    conf["prevResult"] = result.clone();
    s.ok("CHECK", &conf);
    // CHECK sees an RDMA device that left the pod.
    let (pod_ns, host_ns) = (
        NetNs::open(s.pod.path()).unwrap(),
        NetNs::open(s.host.path()).unwrap(),
    );
    s.rdma.move_device(RDMA_DEVICE, &pod_ns, &host_ns).unwrap();
    let (status, out) = s.call("CHECK", &conf);
    assert_eq!(status, 1);
    assert!(
        out["msg"]
            .as_str()
            .unwrap()
            .contains("is not in the container"),
        "{out}"
    );
    s.rdma.move_device(RDMA_DEVICE, &host_ns, &pod_ns).unwrap();

    s.ok("DEL", &conf);
    assert!(has_link(&s.host, NETDEV) && !has_link(&s.pod, "net1"));
    assert!(s.rdma_in(&s.host), "the RDMA device did not come back");
    assert!(
        !s.device_info_path().exists(),
        "ADD's device-info file was kept"
    );
    s.ok("DEL", &conf);
}

#[test]
fn shared_mode_and_no_rdma_move_no_rdma_device_and_1_0_has_no_pci_id() {
    for mode in [Some(RdmaNetnsMode::Shared), None] {
        let s = Scene::new("hdus", mode);
        let conf = s.conf("1.0.0", json!({"pciBusID": PCI}));
        let result = s.ok("ADD", &conf);
        assert!(result["interfaces"][0].get("pciID").is_none(), "{result}");
        assert!(has_link(&s.pod, "net1"));
        assert!(s.rdma_in(&s.host), "{mode:?}: the RDMA device moved");
        s.ok("DEL", &conf);
        assert!(has_link(&s.host, NETDEV));
    }
}

#[test]
fn a_refused_rdma_move_puts_the_netdev_back() {
    let s = Scene::new("hdur", Some(RdmaNetnsMode::Exclusive));
    s.rdma.world().refuse_move = Some(RDMA_DEVICE.into());
    let mut conf = s.conf("1.1.0", json!({"device": NETDEV}));
    conf["runtimeConfig"] =
        json!({"CNIDeviceInfoFile": s.device_info_path().display().to_string()});
    let (status, out) = s.call("ADD", &conf);
    assert_eq!(status, 1);
    assert_eq!(out["code"], 999);
    let msg = out["msg"].as_str().unwrap();
    assert!(
        msg.contains(RDMA_DEVICE) && msg.contains("Operation not supported"),
        "{msg}"
    );
    assert!(has_link(&s.host, NETDEV) && !has_link(&s.pod, "net1"));
    let link = s.host.ip_json(&["link", "show", NETDEV]);
    assert!(
        link[0]["flags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "UP"),
        "{link}"
    );
    assert!(link[0].get("ifalias").is_none(), "{link}");
    assert!(s.rdma_in(&s.host));
    assert!(!s.device_info_path().exists());
    assert!(fs::read_dir(s.data.path().join("state/hdunit"))
        .map(|d| d.count() == 0)
        .unwrap_or(true));
}

/// A function bound to vfio-pci has no netdev: nothing moves, IPAM still
/// runs, and the result and device-info name the function.
#[test]
fn a_dpdk_function_moves_nothing() {
    let s = Scene::new("hdud", Some(RdmaNetnsMode::Exclusive));
    let mut conf = s.conf(
        "1.1.0",
        json!({"pciBusID": DPDK_PCI,
               "ipam": {"type": "static", "addresses": [{"address": "10.10.0.1/24"}]}}),
    );
    conf["runtimeConfig"] =
        json!({"CNIDeviceInfoFile": s.device_info_path().display().to_string()});
    let (host_links, pod_links) = (s.host.links(), s.pod.links());
    let result = s.ok("ADD", &conf);
    assert_eq!(
        result["interfaces"],
        json!([{"name": "net1", "sandbox": s.pod.path().display().to_string(), "pciID": DPDK_PCI}])
    );
    assert_eq!(result["ips"][0]["address"], "10.10.0.1/24");
    assert_eq!(
        (s.host.links(), s.pod.links()),
        (host_links.clone(), pod_links.clone())
    );
    assert_eq!(
        read_json(&s.device_info_path()).unwrap()["pci"]["pci-address"],
        DPDK_PCI
    );
    conf["prevResult"] = result;
    s.ok("CHECK", &conf);
    s.ok("DEL", &conf);
    assert_eq!((s.host.links(), s.pod.links()), (host_links, pod_links));
    assert!(!s.device_info_path().exists());
}

/// A device-info file the runtime wrote is updated, and left at DEL.
#[test]
fn a_runtime_device_info_file_is_updated_and_kept() {
    let s = Scene::new("hdui", Some(RdmaNetnsMode::Shared));
    let path = s.device_info_path();
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(
        &path,
        br#"{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:af:00.2","pf-pci-address":"0000:af:00.0"}}"#,
    )
    .unwrap();
    let mut conf = s.conf("1.1.0", json!({"device": NETDEV}));
    conf["runtimeConfig"] = json!({"CNIDeviceInfoFile": path.display().to_string()});
    s.ok("ADD", &conf);
    let info = read_json(&path).unwrap();
    assert_eq!(info["pci"]["pf-pci-address"], "0000:af:00.0");
    assert_eq!(info["pci"]["pci-address"], PCI);
    s.ok("DEL", &conf);
    assert_eq!(read_json(&path).unwrap(), info);
}

#[test]
fn an_auxiliary_device_id_selects_its_netdev() {
    let s = Scene::new("hdua", Some(RdmaNetnsMode::Exclusive));
    let mut conf = s.conf("1.1.0", json!({}));
    conf["runtimeConfig"] = json!({"deviceID": SF});
    let result = s.ok("ADD", &conf);
    assert!(has_link(&s.pod, "net1") && !has_link(&s.host, SF_NETDEV));
    assert!(has_link(&s.host, NETDEV));
    // Not a PCI function: no pciID.
    assert!(result["interfaces"][0].get("pciID").is_none(), "{result}");
    assert!(s.rdma_in(&s.host));
    // DEL works even when the device plugin's device is gone.
    fs::remove_dir_all(s.sysfs.path().join("bus/auxiliary/devices").join(SF)).unwrap();
    s.ok("DEL", &conf);
    assert!(has_link(&s.host, SF_NETDEV));
    // ADD refuses a deviceID this node does not have.
    let (status, out) = s.call("ADD", &conf);
    assert_eq!((status, out["code"].as_u64()), (1, Some(7)), "{out}");
}

/// The reference's untagged `DPDKMode`, set by hand without a PCI
/// function: nothing moves, the result names only the interface.
#[test]
fn dpdk_mode_by_hand_moves_nothing() {
    let s = Scene::new("hduk", None);
    let conf = s.conf("1.0.0", json!({"DPDKMode": true}));
    let (host_links, pod_links) = (s.host.links(), s.pod.links());
    let result = s.ok("ADD", &conf);
    assert_eq!(
        result["interfaces"],
        json!([{"name": "net1", "sandbox": s.pod.path().display().to_string()}])
    );
    assert_eq!(
        (s.host.links(), s.pod.links()),
        (host_links.clone(), pod_links.clone())
    );
    s.ok("DEL", &conf);
    assert_eq!((s.host.links(), s.pod.links()), (host_links, pod_links));
}

/// A soft-RoCE device bound to the netdev, in exclusive mode: the netdev
/// moves, the RDMA device is not asked to (the kernel refuses to move
/// rxe and siw devices, and unregisters them when their netdev leaves),
/// and DEL brings the netdev back without looking for it.
#[test]
fn a_soft_rdma_device_is_not_moved_with_its_netdev() {
    let s = Scene::new("hdsoft", Some(RdmaNetnsMode::Exclusive));
    let host_ns = NetNs::open(s.host.path()).unwrap();
    s.rdma.world().devices.push(FakeDevice {
        name: "rxe0".into(),
        index: 5,
        netns: host_ns.identity().unwrap(),
        netdev_mac: vec![2, 0, 0, 0xcc, 0, 2],
    });
    let rxe = s.sysfs.path().join("class/infiniband/rxe0");
    fs::create_dir_all(&rxe).unwrap();
    fs::write(rxe.join("node_desc"), "rxe\n").unwrap();
    let host_identity = Some(host_ns.identity().unwrap());

    let conf = s.conf("1.1.0", json!({"device": SF_NETDEV}));
    let result = s.ok("ADD", &conf);
    assert!(has_link(&s.pod, "net1") && !has_link(&s.host, SF_NETDEV));
    assert_eq!(s.rdma.netns_of("rxe0"), host_identity, "rxe0 was moved");
    let mut with_prev = conf.clone();
    with_prev["prevResult"] = result;
    s.ok("CHECK", &with_prev);
    s.ok("DEL", &with_prev);
    assert!(has_link(&s.host, SF_NETDEV) && !has_link(&s.pod, "net1"));
    assert_eq!(s.rdma.netns_of("rxe0"), host_identity);
}
