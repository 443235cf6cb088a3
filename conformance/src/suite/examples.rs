//! Every configuration file of an examples folder (the repository's
//! `conflist-examples/`): parsed, validated against the plugins under
//! test, and run through our libcni runtime (ADD, CHECK, DEL) in a fresh
//! fake host and pod.
//!
//! A file is run as written except for where state goes: host-local's
//! `dataDir` points into the scenario's folder. Two files need more:
//! - a bridge `vlan` on a kernel without bridge VLAN filtering
//!   (CONFIG_BRIDGE_VLAN_FILTERING) cannot work, so ADD must fail with an
//!   error naming that option, and DEL must leave nothing behind;
//! - rdma-sriov needs an SR-IOV PF and RDMA devices, which test machines
//!   lack: it runs with the plugin's test-only knobs (a fake sysfs, a
//!   simulated PF/RDMA layer, a veth standing in for the VF netdev); the
//!   simulated layer is in an rdma-sriov built with its `fake-hardware`
//!   feature, as `cargo build --all-targets` and `cargo test` build it;
//!   with `rail`, the pod must also have the rail's ARP sysctls and a rule
//!   from each address to a table routing out of the VF, and DEL must take
//!   the rules away;
//! - macvlan, ipvlan and vlan name a `master`, host-device a `device`: the
//!   NIC of a GPU node. A veth of that name (MTU 9000, as RoCE NICs run)
//!   stands in for it in the fake host, and DEL must give host-device's
//!   device back to the host;
//! - cluster-ipam needs etcd: the suite starts one real member on loopback
//!   (testing/etcd-cluster) when a file names cluster-ipam and the plugins
//!   under test have it, and the file's `etcd` block is pointed at it
//!   (plain http; its prefix is kept), with the node state in the
//!   scenario's folder.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use libcni::conf::{self, NetworkConfigList};
use libcni::invoke::PluginEnv;
use libcni::runtime::{CniConfig, RuntimeConf};
use serde_json::{json, Map, Value};

use super::plugin_checks::version_at_least;
use super::probe::Catalogue;
use super::report::Report;
use super::sandbox::{kernel_has_bridge_vlan_filtering, Netns, NetnsExec};
use super::scene::{result_json, Scene};
use super::shape::result_addresses;

type Step<T> = Result<T, String>;

fn setup<T, E: std::fmt::Display>(r: Result<T, E>) -> Step<T> {
    r.map_err(|e| format!("setup failed: {e}"))
}

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

fn plugin_types(raw: &Value) -> Vec<String> {
    raw["plugins"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["type"].as_str().map(str::to_string))
        .collect()
}

/// The versions a file offers: `cniVersion` and `cniVersions`.
fn offered_versions(raw: &Value) -> Vec<String> {
    let mut out: Vec<String> = raw["cniVersions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    if let Some(v) = raw["cniVersion"].as_str() {
        out.push(v.to_string());
    }
    out
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
    let vlan_filtering = kernel_has_bridge_vlan_filtering();
    for file in files {
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        one_example(report, cat, &file, &name, &vlan_filtering);
    }
}

fn one_example(
    report: &mut Report,
    cat: &Catalogue,
    file: &Path,
    name: &str,
    vlan_filtering: &Result<bool, super::sandbox::SandboxError>,
) {
    let id = |what: &str| format!("example {name}: {what}");
    let loaded = load(file);
    let raw = raw_list(file);
    let (list, raw) = match (loaded, raw) {
        (Ok(list), Ok(raw)) => (list, raw),
        (Err(e), _) | (_, Err(e)) => {
            report.check(id("parses"), Err(e));
            return;
        }
    };
    let types = plugin_types(&raw);
    report.check(
        id("parses"),
        Ok(format!(
            "network {:?}, version {}, plugins {}",
            list.name,
            list.cni_version,
            types.join("+")
        )),
    );
    let missing: Vec<&String> = types.iter().filter(|t| cat.get(t).is_none()).collect();
    if !missing.is_empty() {
        report.skip(
            id("validated and run"),
            format!(
                "{} has no {}",
                cat.dir.display(),
                missing
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
        return;
    }
    // Our libcni picks the highest of cniVersion and cniVersions it
    // supports; plugins that stop lower get the highest they all claim.
    let type_refs: Vec<&str> = types.iter().map(String::as_str).collect();
    let offered = offered_versions(&raw);
    let offered_refs: Vec<&str> = offered.iter().map(String::as_str).collect();
    let version = if type_refs
        .iter()
        .all(|t| cat.get(t).is_some_and(|p| p.claims(&list.cni_version)))
    {
        list.cni_version.clone()
    } else {
        match cat.common_version(&type_refs, &offered_refs) {
            Some(v) => v,
            None => {
                report.skip(
                    id("validated and run"),
                    format!(
                        "the plugins claim none of the file's versions ({})",
                        offered.join(", ")
                    ),
                );
                return;
            }
        }
    };
    let version_note = if version == list.cni_version {
        format!("at {version}")
    } else {
        format!(
            "at {version}: the plugins do not claim {} (runtimes without cniVersions support use {})",
            list.cni_version,
            raw["cniVersion"].as_str().unwrap_or("")
        )
    };

    let scene = match Scene::new("ex", &cat.dir) {
        Ok(s) => s,
        Err(e) => {
            report.check(id("validated and run"), Err(format!("setup failed: {e}")));
            return;
        }
    };
    let host_links = match stand_in_host_links(&raw, &scene) {
        Ok(l) => l,
        Err(e) => {
            report.check(id("validated and run"), Err(format!("setup failed: {e}")));
            return;
        }
    };
    let rdma = types.iter().any(|t| t == "rdma-sriov");
    let knobs = if rdma {
        match FakeRdmaMachine::build(&scene) {
            Ok(k) => Some(k),
            Err(e) => {
                report.check(id("validated and run"), Err(format!("setup failed: {e}")));
                return;
            }
        }
    } else {
        None
    };
    // Kept until the example has run; dropping it stops the member.
    let etcd = match start_etcd_if_needed(&raw, &scene) {
        Ok(e) => e,
        Err(e) => {
            report.check(id("validated and run"), Err(format!("setup failed: {e}")));
            return;
        }
    };
    let endpoints = etcd.as_ref().map(|c| c.endpoints()).unwrap_or_default();
    let run_list = match running_copy(&raw, &version, &scene, &endpoints) {
        Ok(l) => l,
        Err(e) => {
            report.check(id("validated and run"), Err(format!("setup failed: {e}")));
            return;
        }
    };
    let cni = match runtime(&scene, knobs.as_ref()) {
        Ok(c) => c,
        Err(e) => {
            report.check(id("validated and run"), Err(format!("setup failed: {e}")));
            return;
        }
    };
    report.check(
        id("validates against the plugins (found, version claimed)"),
        cni.validate_network_list(&run_list)
            .map(|caps| {
                if caps.is_empty() {
                    version_note.clone()
                } else {
                    format!("{version_note}; capabilities {}", caps.join(", "))
                }
            })
            .map_err(|e| e.to_string()),
    );

    let pod = match scene.pod("ex") {
        Ok(p) => p,
        Err(e) => {
            report.check(id("ADD"), Err(format!("setup failed: {e}")));
            return;
        }
    };
    let ifname = if types.iter().all(|t| t == "loopback") {
        "lo"
    } else {
        "eth0"
    };
    let mut caps = Map::new();
    let enabled: Vec<String> = raw["plugins"]
        .as_array()
        .into_iter()
        .flatten()
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
    if enabled.iter().any(|c| c == "portMappings") {
        caps.insert(
            "portMappings".into(),
            json!([{"hostPort": 18080, "containerPort": 8080, "protocol": "tcp"}]),
        );
    }
    if let Some(k) = &knobs {
        if enabled.iter().any(|c| c == "deviceID") {
            caps.insert("deviceID".into(), json!(k.vf_pci));
        }
    }
    let rt = RuntimeConf {
        container_id: format!("suite-example-{}", run_list.name),
        netns: pod.path_string(),
        ifname: ifname.into(),
        args: Vec::new(),
        capability_args: caps,
    };

    let wants_vlan = raw["plugins"].as_array().into_iter().flatten().any(|p| {
        p["type"] == "bridge" && (p.get("vlan").is_some() || p.get("vlanTrunk").is_some())
    });
    if wants_vlan {
        match vlan_filtering {
            Ok(false) => {
                vlan_without_kernel_support(report, &id, &scene, &cni, &run_list, &rt, &pod);
                return;
            }
            Ok(true) => {}
            Err(e) => {
                report.check(
                    id("ADD"),
                    Err(format!("cannot probe bridge VLAN filtering: {e}")),
                );
                return;
            }
        }
    }

    let how = if knobs.is_some() {
        " (with rdma-sriov's test-only fake knobs: fake sysfs, simulated PF and RDMA, a veth as the VF netdev)"
    } else {
        ""
    };
    let added = cni.add_network_list(&run_list, &rt).map_err(|e| match &knobs {
        // Without the feature the plugin ignores the fake knobs and finds no
        // RDMA subsystem in this kernel.
        Some(_) => format!(
            "{e} (the simulated PF/RDMA layer needs an rdma-sriov built with its fake-hardware feature: `cargo build -p rdma-sriov --features fake-hardware`)"
        ),
        None => e.to_string(),
    });
    report.check(
        id(&format!("ADD succeeds{how}")),
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
    let Ok(result) = added else {
        let _ = cni.del_network_list(&run_list, &rt);
        return;
    };
    report.check(
        id("the pod has the interface and addresses of the result"),
        pod_matches(&pod, ifname, &result_json(&result)),
    );
    if let Some(k) = &knobs {
        report.check(
            id("runtimeConfig.deviceID (capability `deviceID`) picks the VF"),
            (|| {
                let in_host = scene.has_link(&scene.host, &k.vf_netdev)?;
                if in_host {
                    Err(format!(
                        "{} (the VF of {}) is still in the host",
                        k.vf_netdev, k.vf_pci
                    ))
                } else {
                    Ok(format!("{} moved into the pod as {ifname}", k.vf_netdev))
                }
            })(),
        );
    }
    let rail = wants_rail(&raw);
    if rail {
        report.check(
            id("the rail has its sysctls, and a rule from each address to a table of its own"),
            rail_routing(&pod, ifname, &result_json(&result)),
        );
    }
    if version_at_least(&version, "0.4.0") && !run_list.disable_check {
        report.check(
            id("CHECK succeeds"),
            cni.check_network_list(&run_list, &rt)
                .map(|_| String::new())
                .map_err(|e| e.to_string()),
        );
    }
    report.check(
        id("DEL succeeds and leaves nothing behind"),
        cni.del_network_list(&run_list, &rt)
            .map_err(|e| e.to_string())
            .and_then(|_| leftovers(&scene, &pod, ifname, &run_list.name)),
    );
    if rail {
        report.check(
            id("DEL removes the rail's rules"),
            source_rules(&pod).and_then(|rules| {
                if rules.is_empty() {
                    Ok(String::new())
                } else {
                    Err(format!("rules left in the pod: {rules:?}"))
                }
            }),
        );
    }
    for device in &host_links.moved {
        report.check(
            id(&format!("DEL gives {device} back to the host")),
            match scene.has_link(&scene.host, device) {
                Ok(true) => Ok(String::new()),
                Ok(false) => Err(format!("{device} is not back in the host")),
                Err(e) => Err(e),
            },
        );
    }
    if let Some(k) = &knobs {
        report.check(
            id("DEL gives the VF back to the host"),
            match scene.has_link(&scene.host, &k.vf_netdev) {
                Ok(true) => Ok(String::new()),
                Ok(false) => Err(format!("{} is not back in the host", k.vf_netdev)),
                Err(e) => Err(e),
            },
        );
    }
}

fn vlan_without_kernel_support(
    report: &mut Report,
    id: &dyn Fn(&str) -> String,
    scene: &Scene,
    cni: &CniConfig,
    list: &NetworkConfigList,
    rt: &RuntimeConf,
    pod: &Netns,
) {
    let added = cni.add_network_list(list, rt);
    report.check(
        id("ADD fails naming CONFIG_BRIDGE_VLAN_FILTERING (this kernel has no bridge VLAN filtering)"),
        match &added {
            Ok(r) => Err(format!("ADD succeeded: {}", result_json(r))),
            Err(e) if e.to_string().contains("CONFIG_BRIDGE_VLAN_FILTERING") => {
                Ok(format!("code {}", e.code().map(|c| c.as_u32()).unwrap_or(0)))
            }
            Err(e) => Err(format!("the error does not name CONFIG_BRIDGE_VLAN_FILTERING: {e}")),
        },
    );
    report.check(
        id("DEL after the failed ADD leaves nothing behind"),
        cni.del_network_list(list, rt)
            .map_err(|e| e.to_string())
            .and_then(|_| leftovers(scene, pod, "eth0", &list.name)),
    );
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

fn leftovers(scene: &Scene, pod: &Netns, ifname: &str, network: &str) -> Step<String> {
    if ifname != "lo" && scene.has_link(pod, ifname)? {
        return Err(format!("pod still has {ifname}"));
    }
    let leased = scene.leased(network);
    if !leased.is_empty() {
        return Err(format!("leases left: {leased:?}"));
    }
    let veths = scene.host_veths()?;
    if !veths.is_empty() {
        return Err(format!("host veths left: {veths:?}"));
    }
    Ok(String::new())
}

/// The file as it runs here: at `version`, host-local's store in the
/// scenario's folder.
fn running_copy(
    raw: &Value,
    version: &str,
    scene: &Scene,
    etcd_endpoints: &[String],
) -> Step<NetworkConfigList> {
    let mut copy = raw.clone();
    copy["cniVersion"] = json!(version);
    if let Some(o) = copy.as_object_mut() {
        o.remove("cniVersions");
    }
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
/// so its loopback is theirs), when a plugin of the file uses cluster-ipam.
fn start_etcd_if_needed(raw: &Value, scene: &Scene) -> Step<Option<etcd_cluster::EtcdCluster>> {
    let wanted = raw["plugins"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|p| p["ipam"]["type"] == "cluster-ipam");
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
    Ok(CniConfig::with_exec(vec![scene.dir.clone()], exec)
        .with_cache_dir(scene.work.join("cache"))
        .with_base_env(env))
}

/// What rdma-sriov's test-only knobs point at: a fake sysfs with one PF
/// (`pf0`) and two VFs whose netdevs are veths in the fake host, and a
/// simulated PF/RDMA layer (a JSON world file) in exclusive RDMA mode.
struct FakeRdmaMachine {
    sysfs: PathBuf,
    state: PathBuf,
    world: PathBuf,
    vf_pci: String,
    vf_netdev: String,
}

const PF_PCI: &str = "0000:af:00.0";

impl FakeRdmaMachine {
    fn build(scene: &Scene) -> Step<FakeRdmaMachine> {
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
        for index in 0..2u32 {
            let vf = format!("0000:af:00.{}", index + 2);
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
            "pfs": {"pf0": {"vfs": [{}, {}]}},
            "rdma": {"mode": "exclusive", "devices": devices},
            "calls": [],
        });
        std::fs::write(&world, model.to_string()).map_err(io)?;
        Ok(FakeRdmaMachine {
            sysfs,
            state: root.join("state"),
            world,
            vf_pci: "0000:af:00.2".into(),
            vf_netdev: "vf0".into(),
        })
    }
}
