//! Every configuration file of an examples folder (the repository's
//! `conflist-examples/`), loaded together as a node would have them:
//! parsed, checked for networks that would collide on one node (a bridge
//! or a subnet used twice, Podman's default range), validated against the
//! plugins under test, and run through our libcni runtime in ONE fake host:
//! every example is added (each into a pod of its own) before any is
//! checked or deleted, so one example's bridge, addresses or rules that
//! break another's show.
//!
//! A file runs at the version a runtime picks from it (the highest of
//! `cniVersion` and `cniVersions` that libcni speaks), never at one the
//! suite chooses, so a file listing a version the plugins under test lack
//! fails here as it fails under `cnitool add`. The rule for the examples:
//! one whose plugin types (and IPAM types) the reference has runs on ours
//! and on the reference (spec up to 1.0.0), so it offers no version above
//! 1.0.0; a file naming a type the plugins under test lack is skipped, with
//! the reason.
//!
//! A file is run as written except for where state goes: host-local's
//! `dataDir` points into the scenario's folder. Some files need more:
//! - a bridge `vlan` on a kernel without bridge VLAN filtering
//!   (CONFIG_BRIDGE_VLAN_FILTERING) cannot work, so ADD must fail with an
//!   error naming that option, and DEL must leave nothing behind;
//! - rdma-sriov needs an SR-IOV PF and RDMA devices, which test machines
//!   lack: it runs with the plugin's test-only knobs (a fake sysfs, a
//!   simulated PF/RDMA layer, a veth standing in for each VF netdev, one VF
//!   per rdma-sriov example); the simulated layer is in an rdma-sriov built
//!   with its `fake-hardware` feature, as `cargo build --all-targets` and
//!   `cargo test` build it; with `rail`, the pod must also have the rail's
//!   ARP sysctls and a rule from each address to a table routing out of
//!   the VF, and DEL must take the rules away;
//! - macvlan, ipvlan and vlan name a `master`, host-device a `device`: the
//!   NIC of a GPU node. A veth of that name (MTU 9000, as RoCE NICs run)
//!   stands in for it in the fake host, and DEL must give host-device's
//!   device back to the host;
//! - cluster-ipam needs etcd: the suite starts one real member on loopback
//!   (testing/etcd-cluster) when a file names cluster-ipam and the plugins
//!   under test have it, and the file's `etcd` block is pointed at it
//!   (plain http; its prefix is kept), with the node state in the
//!   scenario's folder;
//! - a `portMappings` capability gets a host port of its own per example.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use ipnetwork::IpNetwork;
use libcni::conf::{self, NetworkConfigList};
use libcni::invoke::PluginEnv;
use libcni::network_footprint::{collisions, overlaps, Footprint};
use libcni::runtime::{CniConfig, RuntimeConf};
use libcni::types::AnyResult;
use serde_json::{json, Map, Value};

use super::plugin_checks::version_at_least;
use super::probe::Catalogue;
use super::report::Report;
use super::sandbox::{kernel_has_bridge_vlan_filtering, Netns, NetnsExec};
use super::scene::{result_json, Scene};
use super::shape::result_addresses;
use super::subject::host_ifbs;

type Step<T> = Result<T, String>;

fn setup<T, E: std::fmt::Display>(r: Result<T, E>) -> Step<T> {
    r.map_err(|e| format!("setup failed: {e}"))
}

/// Podman's default network; an example there breaks Podman on the node.
const PODMAN_DEFAULT: &str = "10.88.0.0/16";
/// The first host port given to an example's `portMappings`.
const FIRST_HOST_PORT: u16 = 18080;

/// The configuration files of `dir`, sorted as runtimes sort them.
pub fn example_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("conf" | "conflist" | "json")
                )
        })
        .collect();
    files.sort();
    files
}

/// A file as raw JSON in list form (a single-plugin `.conf` is wrapped the
/// way runtimes upconvert it).
fn raw_list(path: &Path) -> Step<Value> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| format!("not JSON: {e}"))?;
    if value.get("plugins").is_some() {
        return Ok(value);
    }
    let mut plugin = value.clone();
    let obj = plugin.as_object_mut().ok_or("not a JSON object")?;
    let name = obj.get("name").cloned().unwrap_or(Value::Null);
    let version = obj.get("cniVersion").cloned().unwrap_or(json!(""));
    Ok(json!({"cniVersion": version, "name": name, "plugins": [plugin]}))
}

/// Parses a file with our libcni, as a runtime loads it.
fn load(path: &Path) -> Step<NetworkConfigList> {
    let is_list = path.extension().and_then(|e| e.to_str()) == Some("conflist");
    if is_list {
        conf::conflist_from_file(path).map_err(|e| e.to_string())
    } else {
        let plugin = conf::plugin_conf_from_file(path).map_err(|e| e.to_string())?;
        conf::conflist_from_conf(&plugin).map_err(|e| e.to_string())
    }
}

fn plugins(raw: &Value) -> impl Iterator<Item = &Value> {
    raw["plugins"].as_array().into_iter().flatten()
}

/// The binaries a file runs: its plugin types, then their IPAM types.
fn binary_types(raw: &Value) -> Vec<String> {
    let mut types: Vec<String> = plugins(raw)
        .filter_map(|p| p["type"].as_str().map(str::to_string))
        .collect();
    for p in plugins(raw) {
        if let Some(ipam) = p["ipam"]["type"].as_str().filter(|t| !t.is_empty()) {
            if !types.iter().any(|t| t == ipam) {
                types.push(ipam.to_string());
            }
        }
    }
    types
}

/// One parsed file of the folder.
struct Example {
    /// The file name, as check ids show it.
    name: String,
    raw: Value,
}

impl Example {
    fn id(&self, what: &str) -> String {
        format!("example {}: {what}", self.name)
    }

    fn plugin_types(&self) -> Vec<String> {
        plugins(&self.raw)
            .filter_map(|p| p["type"].as_str().map(str::to_string))
            .collect()
    }

    fn is_rdma(&self) -> bool {
        self.plugin_types().iter().any(|t| t == "rdma-sriov")
    }

    fn ifname(&self) -> &'static str {
        if self.plugin_types().iter().all(|t| t == "loopback") {
            "lo"
        } else {
            "eth0"
        }
    }

    fn wants_vlan(&self) -> bool {
        plugins(&self.raw).any(|p| {
            p["type"] == "bridge" && (p.get("vlan").is_some() || p.get("vlanTrunk").is_some())
        })
    }

    fn footprint(&self) -> Footprint {
        Footprint::of(&self.raw)
    }
}

/// Copying the folder to a node must not break a network: no bridge or
/// subnet is used by two files, and none is on Podman's default range.
fn distinct_networks(examples: &[Example]) -> Step<String> {
    let podman: IpNetwork = PODMAN_DEFAULT
        .parse()
        .map_err(|e| format!("{PODMAN_DEFAULT}: {e}"))?;
    let footprints: Vec<(String, Footprint)> = examples
        .iter()
        .map(|ex| (ex.name.clone(), ex.footprint()))
        .collect();
    let mut clashes = Vec::new();
    for (name, footprint) in &footprints {
        for net in footprint.subnets.iter().filter(|n| overlaps(n, &podman)) {
            clashes.push(format!(
                "{name} uses {net}, inside Podman's default network {PODMAN_DEFAULT}"
            ));
        }
    }
    clashes.extend(collisions(&footprints));
    if clashes.is_empty() {
        Ok(format!("{} files", examples.len()))
    } else {
        Err(clashes.join("; "))
    }
}

pub fn example_checks(report: &mut Report, cat: &Catalogue, dir: &Path) {
    let files = example_files(dir);
    if files.is_empty() {
        report.check(
            format!("examples in {}", dir.display()),
            Err("no .conf, .conflist or .json file found".into()),
        );
        return;
    }
    let mut examples = Vec::new();
    for file in files {
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let id = format!("example {name}: parses");
        match (load(&file), raw_list(&file)) {
            (Ok(list), Ok(raw)) => {
                report.check(
                    id,
                    Ok(format!(
                        "network {:?}, version {}, plugins {}",
                        list.name,
                        list.cni_version,
                        binary_types(&raw).join("+")
                    )),
                );
                examples.push(Example { name, raw });
            }
            (Err(e), _) | (_, Err(e)) => report.check(id, Err(e)),
        }
    }
    report.check(
        format!(
            "examples in {}: each has its own bridge and subnet, none on Podman's {PODMAN_DEFAULT}",
            dir.display()
        ),
        distinct_networks(&examples),
    );

    let runnable: Vec<&Example> = examples
        .iter()
        .filter(|ex| {
            let missing: Vec<String> = binary_types(&ex.raw)
                .into_iter()
                .filter(|t| cat.get(t).is_none())
                .collect();
            if !missing.is_empty() {
                report.skip(
                    ex.id("validated and run"),
                    format!("{} has no {}", cat.dir.display(), missing.join(", ")),
                );
            }
            missing.is_empty()
        })
        .collect();
    if runnable.is_empty() {
        return;
    }
    run_together(report, cat, dir, &runnable);
}

/// An example added in the shared fake host, waiting for its checks.
struct Attached<'a> {
    example: &'a Example,
    list: NetworkConfigList,
    rt: RuntimeConf,
    pod: Netns,
    /// The host veths its ADD made.
    veths: Vec<String>,
    /// Its VF when it is an rdma-sriov example: (PCI address, netdev).
    vf: Option<(String, String)>,
    /// Host links a plugin of it moves into the pod (host-device).
    moved: Vec<String>,
    /// Its ADD's result; `None` when ADD failed (as the VLAN example must
    /// on a kernel without bridge VLAN filtering).
    result: Option<AnyResult>,
}

/// Every runnable example in one fake host: all added, then each checked
/// with the others still attached, then all deleted in reverse order.
fn run_together(report: &mut Report, cat: &Catalogue, dir: &Path, examples: &[&Example]) {
    let together = |what: &str| format!("examples in {}: {what}", dir.display());
    let scene = match Scene::new("ex", &cat.dir) {
        Ok(s) => s,
        Err(e) => {
            report.check(together("one fake host"), Err(format!("setup failed: {e}")));
            return;
        }
    };
    let mut moved_by_example = Vec::new();
    for ex in examples {
        match stand_in_host_links(&ex.raw, &scene) {
            Ok(l) => moved_by_example.push(l.moved),
            Err(e) => {
                report.check(together("one fake host"), Err(format!("setup failed: {e}")));
                return;
            }
        }
    }
    let rdma_count = examples.iter().filter(|ex| ex.is_rdma()).count();
    let knobs = if rdma_count > 0 {
        match FakeRdmaMachine::build(&scene, rdma_count) {
            Ok(k) => Some(k),
            Err(e) => {
                report.check(together("one fake host"), Err(format!("setup failed: {e}")));
                return;
            }
        }
    } else {
        None
    };
    // Kept until every example has run; dropping it stops the member.
    let etcd = match start_etcd_if_needed(examples, &scene) {
        Ok(e) => e,
        Err(e) => {
            report.check(together("one fake host"), Err(format!("setup failed: {e}")));
            return;
        }
    };
    let endpoints = etcd.as_ref().map(|c| c.endpoints()).unwrap_or_default();
    let cni = match runtime(&scene, knobs.as_ref()) {
        Ok(c) => c,
        Err(e) => {
            report.check(together("one fake host"), Err(format!("setup failed: {e}")));
            return;
        }
    };
    let vlan_filtering = kernel_has_bridge_vlan_filtering();

    let mut vfs = knobs.iter().flat_map(|k| k.vfs.iter().cloned());
    let mut attached = Vec::new();
    for (index, (ex, moved)) in examples.iter().zip(moved_by_example).enumerate() {
        let vf = if ex.is_rdma() { vfs.next() } else { None };
        let host_port = FIRST_HOST_PORT.saturating_add(u16::try_from(index).unwrap_or(0));
        if let Some(a) = add_one(
            report,
            &scene,
            &cni,
            ex,
            &endpoints,
            vf,
            moved,
            host_port,
            &vlan_filtering,
            knobs.is_some(),
        ) {
            attached.push(a);
        }
    }
    for a in &attached {
        check_one(report, &scene, &cni, a);
    }
    for a in attached.iter().rev() {
        del_one(report, &scene, &cni, a);
    }
    report.check(
        together("after every DEL, no veth is left in the fake host"),
        scene.host_veths().and_then(|v| {
            if v.is_empty() {
                Ok(String::new())
            } else {
                Err(format!("host veths left: {v:?}"))
            }
        }),
    );
}

/// Validates and adds one example into a pod of its own; `None` when
/// nothing is left to check or delete.
#[allow(clippy::too_many_arguments)]
fn add_one<'a>(
    report: &mut Report,
    scene: &Scene,
    cni: &CniConfig,
    ex: &'a Example,
    endpoints: &[String],
    vf: Option<(String, String)>,
    moved: Vec<String>,
    host_port: u16,
    vlan_filtering: &Result<bool, super::sandbox::SandboxError>,
    fake_rdma: bool,
) -> Option<Attached<'a>> {
    let list = match running_copy(&ex.raw, scene, endpoints) {
        Ok(l) => l,
        Err(e) => {
            report.check(
                ex.id("validated and run"),
                Err(format!("setup failed: {e}")),
            );
            return None;
        }
    };
    let validated = cni
        .validate_network_list(&list)
        .map(|caps| {
            let at = format!("at {}", list.cni_version);
            if caps.is_empty() {
                at
            } else {
                format!("{at}; capabilities {}", caps.join(", "))
            }
        })
        .map_err(|e| {
            format!(
                "{e} (a runtime runs this file at {}, the highest of its versions it speaks)",
                list.cni_version
            )
        });
    let valid = validated.is_ok();
    report.check(
        ex.id("validates against the plugins (found, version claimed)"),
        validated,
    );
    if !valid {
        return None;
    }
    let pod = match scene.pod("ex") {
        Ok(p) => p,
        Err(e) => {
            report.check(ex.id("ADD"), Err(format!("setup failed: {e}")));
            return None;
        }
    };
    let enabled: Vec<String> = plugins(&ex.raw)
        .flat_map(|p| {
            p["capabilities"]
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(_, on)| on.as_bool() == Some(true))
                .map(|(k, _)| k.clone())
                .collect::<Vec<_>>()
        })
        .collect();
    let mut caps = Map::new();
    if enabled.iter().any(|c| c == "portMappings") {
        caps.insert(
            "portMappings".into(),
            json!([{"hostPort": host_port, "containerPort": 8080, "protocol": "tcp"}]),
        );
    }
    if enabled.iter().any(|c| c == "bandwidth") {
        // As kubelet passes a pod's kubernetes.io/ingress-bandwidth and
        // egress-bandwidth annotations (bits per second; bursts its own).
        caps.insert("bandwidth".into(), shaping());
    }
    if let Some((pci, _)) = &vf {
        if enabled.iter().any(|c| c == "deviceID") {
            caps.insert("deviceID".into(), json!(pci));
        }
    }
    let rt = RuntimeConf {
        container_id: format!("suite-example-{}", list.name),
        netns: pod.path_string(),
        ifname: ex.ifname().into(),
        args: Vec::new(),
        capability_args: caps,
    };
    let veths_before = scene.host_veths().unwrap_or_default();
    let mut attached = Attached {
        example: ex,
        list,
        rt,
        pod,
        veths: Vec::new(),
        vf,
        moved,
        result: None,
    };

    if ex.wants_vlan() {
        match vlan_filtering {
            Ok(false) => {
                let added = cni.add_network_list(&attached.list, &attached.rt);
                report.check(
                    ex.id("ADD fails naming CONFIG_BRIDGE_VLAN_FILTERING (this kernel has no bridge VLAN filtering)"),
                    match &added {
                        Ok(r) => Err(format!("ADD succeeded: {}", result_json(r))),
                        Err(e) if e.to_string().contains("CONFIG_BRIDGE_VLAN_FILTERING") => {
                            Ok(format!("code {}", e.code().map(|c| c.as_u32()).unwrap_or(0)))
                        }
                        Err(e) => Err(format!(
                            "the error does not name CONFIG_BRIDGE_VLAN_FILTERING: {e}"
                        )),
                    },
                );
                attached.veths = new_veths(scene, &veths_before);
                return Some(attached);
            }
            Ok(true) => {}
            Err(e) => {
                report.check(
                    ex.id("ADD"),
                    Err(format!("cannot probe bridge VLAN filtering: {e}")),
                );
                return None;
            }
        }
    }

    let how = if ex.is_rdma() {
        " (with rdma-sriov's test-only fake knobs: fake sysfs, simulated PF and RDMA, a veth as the VF netdev)"
    } else {
        ""
    };
    let added = cni
        .add_network_list(&attached.list, &attached.rt)
        .map_err(|e| {
            if ex.is_rdma() && fake_rdma {
                // Without the feature the plugin ignores the fake knobs and
                // finds no RDMA subsystem in this kernel.
                format!(
                    "{e} (the simulated PF/RDMA layer needs an rdma-sriov built with its fake-hardware feature: `cargo build -p rdma-sriov --features fake-hardware`)"
                )
            } else {
                e.to_string()
            }
        });
    report.check(
        ex.id(&format!(
            "ADD succeeds, with every example before it attached{how}"
        )),
        added
            .as_ref()
            .map(|r| {
                let a = result_addresses(&result_json(r));
                if a.is_empty() {
                    "no addresses (L2 only)".to_string()
                } else {
                    a.join(", ")
                }
            })
            .map_err(Clone::clone),
    );
    attached.veths = new_veths(scene, &veths_before);
    attached.result = added.ok();
    Some(attached)
}

/// Host veths that are not in `before`.
fn new_veths(scene: &Scene, before: &[String]) -> Vec<String> {
    scene
        .host_veths()
        .unwrap_or_default()
        .into_iter()
        .filter(|v| !before.contains(v))
        .collect()
}

/// With every example attached: the pod still has what its result says,
/// and CHECK passes.
fn check_one(report: &mut Report, scene: &Scene, cni: &CniConfig, a: &Attached) {
    let Some(result) = &a.result else {
        return;
    };
    let ex = a.example;
    let ifname = ex.ifname();
    report.check(
        ex.id("the pod has the interface and addresses of the result, with every example attached"),
        pod_matches(&a.pod, ifname, &result_json(result)),
    );
    if let Some((pci, netdev)) = &a.vf {
        report.check(
            ex.id("runtimeConfig.deviceID (capability `deviceID`) picks the VF"),
            match scene.has_link(&scene.host, netdev) {
                Ok(true) => Err(format!("{netdev} (the VF of {pci}) is still in the host")),
                Ok(false) => Ok(format!("{netdev} moved into the pod as {ifname}")),
                Err(e) => Err(e),
            },
        );
    }
    if wants_rail(&ex.raw) {
        report.check(
            ex.id("the rail has its sysctls, and a rule from each address to a table of its own"),
            rail_routing(&a.pod, ifname, &result_json(result)),
        );
    }
    if ex.plugin_types().iter().any(|t| t == "bandwidth") {
        report.check(
            ex.id("bandwidth shapes the pod: tbf on its host veth, egress through an ifb"),
            shaped(scene, &a.veths),
        );
    }
    if version_at_least(&a.list.cni_version, "0.4.0") && !a.list.disable_check {
        report.check(
            ex.id("CHECK succeeds"),
            cni.check_network_list(&a.list, &a.rt)
                .map(|_| String::new())
                .map_err(|e| e.to_string()),
        );
    }
}

/// DEL, and what it must have undone of this example alone.
fn del_one(report: &mut Report, scene: &Scene, cni: &CniConfig, a: &Attached) {
    let ex = a.example;
    let ifname = ex.ifname();
    let id = if a.result.is_some() {
        ex.id("DEL succeeds and leaves nothing behind")
    } else {
        ex.id("DEL after the failed ADD leaves nothing behind")
    };
    report.check(
        id,
        cni.del_network_list(&a.list, &a.rt)
            .map_err(|e| e.to_string())
            .and_then(|_| leftovers(scene, &a.pod, ifname, &a.list.name, &a.veths)),
    );
    if a.result.is_none() {
        return;
    }
    if wants_rail(&ex.raw) {
        report.check(
            ex.id("DEL removes the rail's rules"),
            source_rules(&a.pod).and_then(|rules| {
                if rules.is_empty() {
                    Ok(String::new())
                } else {
                    Err(format!("rules left in the pod: {rules:?}"))
                }
            }),
        );
    }
    if ex.plugin_types().iter().any(|t| t == "bandwidth") {
        report.check(
            ex.id("DEL removes bandwidth's ifb"),
            host_ifbs(&scene.host).and_then(|ifbs| {
                if ifbs.is_empty() {
                    Ok(String::new())
                } else {
                    Err(format!("ifb devices left: {ifbs:?}"))
                }
            }),
        );
    }
    for device in &a.moved {
        report.check(
            ex.id(&format!("DEL gives {device} back to the host")),
            match scene.has_link(&scene.host, device) {
                Ok(true) => Ok(String::new()),
                Ok(false) => Err(format!("{device} is not back in the host")),
                Err(e) => Err(e),
            },
        );
    }
    if let Some((_, netdev)) = &a.vf {
        report.check(
            ex.id("DEL gives the VF back to the host"),
            match scene.has_link(&scene.host, netdev) {
                Ok(true) => Ok(String::new()),
                Ok(false) => Err(format!("{netdev} is not back in the host")),
                Err(e) => Err(e),
            },
        );
    }
}

/// The `bandwidth` capability's value for every example that asks for it:
/// 100 Mbit/s each way.
fn shaping() -> Value {
    json!({
        "ingressRate": 100_000_000u64, "ingressBurst": 1_000_000u64,
        "egressRate": 100_000_000u64, "egressBurst": 1_000_000u64,
    })
}

/// Whether the example's host veth (the one its ADD made) has a tbf, and
/// the fake host an ifb for the egress side (only this example shapes).
fn shaped(scene: &Scene, veths: &[String]) -> Step<String> {
    let veth = veths.first().ok_or("ADD made no host veth")?;
    let qdiscs = scene
        .host
        .exec("tc", &["qdisc", "show", "dev", veth])
        .map_err(|e| e.to_string())?;
    if !qdiscs.contains("qdisc tbf") {
        return Err(format!("no tbf on {veth}: {qdiscs:?}"));
    }
    let ifbs = host_ifbs(&scene.host)?;
    if ifbs.is_empty() {
        return Err("no ifb for the egress side".into());
    }
    Ok(format!("tbf on {veth}, egress through {}", ifbs.join(",")))
}

/// The host links a file's plugins name, made as veths in the fake host.
struct StandInLinks {
    /// Those a plugin moves into the pod (host-device's `device`).
    moved: Vec<String>,
}

fn stand_in_host_links(raw: &Value, scene: &Scene) -> Step<StandInLinks> {
    let mut moved = Vec::new();
    for p in raw["plugins"].as_array().into_iter().flatten() {
        let name = match p["type"].as_str() {
            Some("macvlan" | "ipvlan" | "vlan") => p["master"].as_str(),
            Some("host-device") => {
                let device = p["device"].as_str();
                moved.extend(device.map(str::to_string));
                device
            }
            _ => None,
        };
        let Some(name) = name else { continue };
        if scene.has_link(&scene.host, name)? {
            continue;
        }
        let peer = format!("{name}p");
        let ip = |args: &[&str]| scene.host.ip(args).map(|_| ()).map_err(|e| e.to_string());
        ip(&[
            "link", "add", name, "mtu", "9000", "type", "veth", "peer", "name", &peer, "mtu",
            "9000",
        ])?;
        ip(&["link", "set", name, "up"])?;
        ip(&["link", "set", &peer, "up"])?;
    }
    Ok(StandInLinks { moved })
}

/// Whether the file's rdma-sriov makes its VF a rail (`"rail": true` or an
/// object).
fn wants_rail(raw: &Value) -> bool {
    raw["plugins"].as_array().into_iter().flatten().any(|p| {
        p["type"] == "rdma-sriov"
            && !matches!(p.get("rail"), None | Some(Value::Null | Value::Bool(false)))
    })
}

/// `(source, table)` of the pod's rules that have a source.
fn source_rules(pod: &Netns) -> Step<Vec<(String, String)>> {
    let mut rules = Vec::new();
    for family in ["-4", "-6"] {
        let listed = pod.ip_json(&[family, "rule"]).map_err(|e| e.to_string())?;
        for rule in listed.as_array().into_iter().flatten() {
            let source = rule["src"].as_str().unwrap_or("all");
            if source != "all" {
                let table = rule["table"].as_str().unwrap_or_default();
                rules.push((source.to_string(), table.to_string()));
            }
        }
    }
    Ok(rules)
}

/// A rail as rdma-sriov's README describes it: ARP and reverse-path
/// sysctls on the VF (arp_ignore 1, arp_announce 2, rp_filter 2), and for
/// each address of the result a rule to a table whose default route
/// leaves by the VF.
fn rail_routing(pod: &Netns, ifname: &str, result: &Value) -> Step<String> {
    for (name, wanted) in [
        ("arp_ignore", "1"),
        ("arp_announce", "2"),
        ("rp_filter", "2"),
    ] {
        let path = format!("/proc/sys/net/ipv4/conf/{ifname}/{name}");
        let value = pod.exec("cat", &[&path]).map_err(|e| e.to_string())?;
        if value.trim() != wanted {
            return Err(format!("{path} is {}, expected {wanted}", value.trim()));
        }
    }
    let rules = source_rules(pod)?;
    let mut found = Vec::new();
    for address in result_addresses(result) {
        let ip = address.split('/').next().unwrap_or_default();
        let table = rules
            .iter()
            .find(|(source, _)| source == ip)
            .map(|(_, table)| table.clone())
            .ok_or_else(|| format!("no rule from {ip} in the pod (rules: {rules:?})"))?;
        let family = if ip.contains(':') { "-6" } else { "-4" };
        let routes = pod
            .ip(&[family, "route", "show", "table", &table])
            .map_err(|e| e.to_string())?;
        let leaves_by_vf = routes
            .lines()
            .any(|r| r.starts_with("default via ") && r.contains(&format!(" dev {ifname} ")));
        if !leaves_by_vf {
            return Err(format!(
                "table {table} of {ip} has no default route out of {ifname}: {routes:?}"
            ));
        }
        found.push(format!("from {ip} lookup {table}"));
    }
    Ok(found.join(", "))
}

/// The pod's interface carries the result's addresses (lo: is up).
fn pod_matches(pod: &Netns, ifname: &str, result: &Value) -> Step<String> {
    let link = pod
        .link(ifname)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no {ifname} in the pod"))?;
    if ifname == "lo" {
        return if link["flags"]
            .as_array()
            .is_some_and(|f| f.iter().any(|x| x == "UP"))
        {
            Ok("lo is up".into())
        } else {
            Err(format!("lo is not up: {link}"))
        };
    }
    let have = pod.addresses(ifname).map_err(|e| e.to_string())?;
    let want = result_addresses(result);
    let missing: Vec<&String> = want.iter().filter(|a| !have.contains(a)).collect();
    if missing.is_empty() {
        Ok(String::new())
    } else {
        Err(format!("pod {ifname} lacks {missing:?} (has {have:?})"))
    }
}

/// What DEL must have undone of one example while others are attached:
/// its pod interface, its leases and the host veths its ADD made.
fn leftovers(
    scene: &Scene,
    pod: &Netns,
    ifname: &str,
    network: &str,
    veths: &[String],
) -> Step<String> {
    if ifname != "lo" && scene.has_link(pod, ifname)? {
        return Err(format!("pod still has {ifname}"));
    }
    let leased = scene.leased(network);
    if !leased.is_empty() {
        return Err(format!("leases left: {leased:?}"));
    }
    let host = scene.host_veths()?;
    let left: Vec<&String> = veths.iter().filter(|v| host.contains(v)).collect();
    if !left.is_empty() {
        return Err(format!("host veths left: {left:?}"));
    }
    Ok(String::new())
}

/// The file as it runs here: at the version a runtime picks from it
/// (`cniVersion` and `cniVersions` untouched), host-local's store in the
/// scenario's folder.
fn running_copy(raw: &Value, scene: &Scene, etcd_endpoints: &[String]) -> Step<NetworkConfigList> {
    let mut copy = raw.clone();
    if let Some(plugins) = copy["plugins"].as_array_mut() {
        for p in plugins {
            if p["ipam"]["type"] == "host-local" {
                p["ipam"]["dataDir"] = json!(scene.leases());
            }
            if p["ipam"]["type"] == "cluster-ipam" {
                let endpoints = etcd_endpoints.to_vec();
                let prefix = p["ipam"]["etcd"]["prefix"].clone();
                p["ipam"]["dataDir"] = json!(scene.leases());
                p["ipam"]["nodeName"] = json!("conformance-node");
                p["ipam"]["etcd"] = json!({"endpoints": endpoints, "timeoutMs": 5000});
                if !prefix.is_null() {
                    p["ipam"]["etcd"]["prefix"] = prefix;
                }
            }
        }
    }
    super::scene::conflist(&copy)
}

/// One etcd member inside the scene's fake host (the plugins run there,
/// so its loopback is theirs), when a plugin of an example uses
/// cluster-ipam.
fn start_etcd_if_needed(
    examples: &[&Example],
    scene: &Scene,
) -> Step<Option<etcd_cluster::EtcdCluster>> {
    let wanted = examples
        .iter()
        .any(|ex| plugins(&ex.raw).any(|p| p["ipam"]["type"] == "cluster-ipam"));
    if !wanted {
        return Ok(None);
    }
    let options = etcd_cluster::ClusterOptions {
        netns: Some(scene.host.name().to_string()),
        ..Default::default()
    };
    etcd_cluster::EtcdCluster::start(1, options)
        .map(Some)
        .map_err(|e| format!("etcd for cluster-ipam: {e}"))
}

fn runtime(scene: &Scene, knobs: Option<&FakeRdmaMachine>) -> Step<CniConfig> {
    let exec = setup(NetnsExec::new(&scene.host, scene.work.path()))?;
    let mut env = PluginEnv::from_process();
    if let Some(k) = knobs {
        env.set("RDMA_SRIOV_SYSFS_ROOT", k.sysfs.as_os_str().to_os_string());
        env.set("RDMA_SRIOV_STATE_DIR", k.state.as_os_str().to_os_string());
        env.set("RDMA_SRIOV_FAKE_PF_OPS", k.world.as_os_str().to_os_string());
        env.set("RDMA_SRIOV_LOCK_TIMEOUT_MS", "3000");
    }
    // The scenario's lease folder is allowed by the tests' node policy.
    env.set(
        libcni::confine::POLICY_ENV,
        crate::testnet::scratch_policy().as_os_str().to_os_string(),
    );
    Ok(CniConfig::with_exec(vec![scene.dir.clone()], exec)
        .with_cache_dir(scene.work.join("cache"))
        .with_base_env(env))
}

/// What rdma-sriov's test-only knobs point at: a fake sysfs with one PF
/// (`pf0`) and a VF per rdma-sriov example whose netdevs are veths in the
/// fake host, and a simulated PF/RDMA layer (a JSON world file) in
/// exclusive RDMA mode.
struct FakeRdmaMachine {
    sysfs: PathBuf,
    state: PathBuf,
    world: PathBuf,
    /// Each VF's PCI address and netdev.
    vfs: Vec<(String, String)>,
}

const PF_PCI: &str = "0000:af:00.0";

impl FakeRdmaMachine {
    fn build(scene: &Scene, vf_count: usize) -> Step<FakeRdmaMachine> {
        let root = scene.work.join("rdma");
        let sysfs = root.join("sys");
        let io = |e: std::io::Error| e.to_string();
        let pci = |addr: &str| sysfs.join("bus/pci/devices").join(addr);
        std::fs::create_dir_all(pci(PF_PCI).join("net/pf0")).map_err(io)?;
        std::fs::create_dir_all(sysfs.join("class/net/pf0")).map_err(io)?;
        symlink(pci(PF_PCI), sysfs.join("class/net/pf0/device")).map_err(io)?;
        for driver in ["vfio-pci", "mlx5_core"] {
            std::fs::create_dir_all(sysfs.join("bus/pci/drivers").join(driver)).map_err(io)?;
        }
        let mut devices = Vec::new();
        let mut vfs = Vec::new();
        for index in 0..vf_count {
            // Functions 2.. of the PF's slot, then the next slots.
            let vf = format!("0000:af:{:02x}.{}", (index + 2) / 8, (index + 2) % 8);
            let netdev = format!("vf{index}");
            let dir = pci(&vf);
            std::fs::create_dir_all(dir.join("net").join(&netdev)).map_err(io)?;
            std::fs::create_dir_all(dir.join("infiniband").join(format!("mlx5_{index}")))
                .map_err(io)?;
            symlink(format!("../{PF_PCI}"), dir.join("physfn")).map_err(io)?;
            symlink(
                format!("../{vf}"),
                pci(PF_PCI).join(format!("virtfn{index}")),
            )
            .map_err(io)?;
            symlink(sysfs.join("bus/pci/drivers/mlx5_core"), dir.join("driver")).map_err(io)?;
            vfs.push((vf.clone(), netdev.clone()));
            scene
                .host
                .ip(&[
                    "link",
                    "add",
                    &netdev,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    &format!("{netdev}p"),
                ])
                .map_err(|e| e.to_string())?;
            devices.push(
                json!({"name": format!("mlx5_{index}"), "index": index + 1, "netdev": netdev}),
            );
        }
        let world = root.join("world.json");
        let model = json!({
            "pfs": {"pf0": {"vfs": vec![json!({}); vf_count]}},
            "rdma": {"mode": "exclusive", "devices": devices},
            "calls": [],
        });
        std::fs::write(&world, model.to_string()).map_err(io)?;
        Ok(FakeRdmaMachine {
            sysfs,
            state: root.join("state"),
            world,
            vfs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example(name: &str, raw: Value) -> Example {
        Example {
            name: name.into(),
            raw,
        }
    }

    fn bridge(bridge: Option<&str>, ipam: Value) -> Value {
        let mut plugin = json!({"type": "bridge", "ipam": ipam});
        if let Some(b) = bridge {
            plugin["bridge"] = json!(b);
        }
        json!({"cniVersion": "1.0.0", "name": "n", "plugins": [plugin]})
    }

    #[test]
    fn networks_that_collide_on_one_node_are_named() {
        let folder = [
            example(
                "10-a.conflist",
                bridge(
                    None,
                    json!({"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]]}),
                ),
            ),
            example(
                "50-b.conf",
                bridge(
                    None,
                    json!({"type": "host-local", "subnet": "10.22.0.0/16"}),
                ),
            ),
            example(
                "60-c.conflist",
                json!({"cniVersion": "1.0.0", "name": "c", "plugins": [{
                    "type": "macvlan", "master": "eth1",
                    "ipam": {"type": "static", "addresses": [{"address": "10.22.5.9/24"}]}
                }]}),
            ),
        ];
        assert_eq!(
            distinct_networks(&folder).unwrap_err(),
            "10-a.conflist uses 10.88.0.0/16, inside Podman's default network 10.88.0.0/16; \
             10-a.conflist and 50-b.conf both use bridge cni0; \
             50-b.conf (10.22.0.0/16) and 60-c.conflist (10.22.5.0/24) overlap"
        );
        let apart = [
            example(
                "10-a.conflist",
                bridge(
                    Some("cni-a0"),
                    json!({"type": "host-local", "ranges": [[{"subnet": "10.85.0.0/16"}], [{"subnet": "fd00:85::/64"}]]}),
                ),
            ),
            example(
                "20-b.conflist",
                bridge(
                    Some("cni-b0"),
                    json!({"type": "host-local", "ranges": [[{"subnet": "10.86.0.0/24"}], [{"subnet": "fd00:86::/64"}]]}),
                ),
            ),
            example("40-l2.conflist", bridge(Some("cni-l2"), json!({}))),
        ];
        assert_eq!(distinct_networks(&apart).unwrap(), "3 files");
    }

    #[test]
    fn binaries_include_ipam_types_once() {
        let raw = json!({"plugins": [
            {"type": "bridge", "ipam": {"type": "host-local"}},
            {"type": "portmap"},
            {"type": "tuning", "ipam": {"type": "host-local"}}
        ]});
        assert_eq!(
            binary_types(&raw),
            vec!["bridge", "portmap", "tuning", "host-local"]
        );
    }
}
