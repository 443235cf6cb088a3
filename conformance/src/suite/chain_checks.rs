//! Checks of plugins working together as runtimes chain them: prevResult
//! handed from bridge to portmap, capability arguments turned into
//! `runtimeConfig` (`portMappings`, `ips`, `mac`), portmap's GC, and the
//! calls containerd's CRI plugin makes for a Kubernetes pod.
//!
//! Port mappings are judged by traffic: a TCP server in the pod answers
//! with a token, and the fake host connects to the published port.

use std::net::{IpAddr, Ipv4Addr};

use libcni::runtime::RuntimeConf;
use serde_json::{json, Value};

use super::probe::Catalogue;
use super::report::Report;
use super::sandbox::{tcp_fetch, Netns, TcpResponder};
use super::scene::{conflist, first_ipv4, result_json, Scene, BRIDGE};
use super::shape::result_addresses;
use super::subject::{CONTAINER_PORT, HOST_PORT};

type Step<T> = Result<T, String>;

fn setup<T, E: std::fmt::Display>(r: Result<T, E>) -> Step<T> {
    r.map_err(|e| format!("setup failed: {e}"))
}

const GATEWAY_IP: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);

/// The bridge configuration chains start with.
fn bridge_conf(scene: &Scene, version: &str, extra: Value) -> Value {
    let mut conf = json!({
        "cniVersion": version, "name": "suite-chain", "type": "bridge",
        "bridge": BRIDGE, "isGateway": true,
        "ipam": scene.ipam(super::scene::SUBNET),
    });
    if let (Some(base), Some(extra)) = (conf.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            base.insert(k.clone(), v.clone());
        }
    }
    conf
}

fn portmap_conf(version: &str, mappings: Value) -> Value {
    json!({
        "cniVersion": version, "name": "suite-chain", "type": "portmap",
        "capabilities": {"portMappings": true},
        "runtimeConfig": {"portMappings": mappings},
    })
}

fn lower_mapping(host_port: u16) -> Value {
    json!([{"hostPort": host_port, "containerPort": CONTAINER_PORT, "protocol": "tcp"}])
}

/// What containerd's CRI plugin sends: Go field names, capitalised.
fn containerd_mapping(host_port: u16) -> Value {
    json!([{"HostPort": host_port, "ContainerPort": CONTAINER_PORT, "Protocol": "tcp", "HostIP": ""}])
}

/// One pod attached by bridge then portmap, called plugin by plugin.
struct ChainedPod {
    pod: Netns,
    cid: String,
    bridge: Value,
    portmap: Value,
    result: Value,
    _server: TcpResponder,
    token: String,
}

fn chain_add(
    scene: &Scene,
    cat: &Catalogue,
    version: &str,
    cid: &str,
    mappings: Value,
) -> Step<(ChainedPod, Value)> {
    let bridge = cat.get("bridge").ok_or("no bridge")?;
    let portmap = cat.get("portmap").ok_or("no portmap")?;
    let pod = setup(scene.pod("chain"))?;
    let token = format!("hello from {cid}");
    let server = setup(TcpResponder::start(&pod, CONTAINER_PORT, &token))?;
    let bconf = bridge_conf(scene, version, json!({}));
    let call = |cmd: &str| scene.call(cmd, cid, &pod.path_string(), "eth0");
    let bresult = scene
        .run(bridge, &call("ADD").stdin_json(&bconf))?
        .result()?;
    let mut pconf = portmap_conf(version, mappings);
    pconf["prevResult"] = bresult.clone();
    let presult = scene
        .run(portmap, &call("ADD").stdin_json(&pconf))?
        .result()?;
    Ok((
        ChainedPod {
            pod,
            cid: cid.to_string(),
            bridge: bconf,
            portmap: pconf,
            result: presult,
            _server: server,
            token,
        },
        bresult,
    ))
}

fn chain_del(scene: &Scene, cat: &Catalogue, p: &ChainedPod) -> Step<()> {
    let bridge = cat.get("bridge").ok_or("no bridge")?;
    let portmap = cat.get("portmap").ok_or("no portmap")?;
    let call = |cmd: &str| scene.call(cmd, &p.cid, &p.pod.path_string(), "eth0");
    let mut pconf = p.portmap.clone();
    pconf["prevResult"] = p.result.clone();
    let mut bconf = p.bridge.clone();
    bconf["prevResult"] = p.result.clone();
    scene
        .run(portmap, &call("DEL").stdin_json(&pconf))?
        .silent_success()?;
    scene
        .run(bridge, &call("DEL").stdin_json(&bconf))?
        .silent_success()
}

fn expect_token(scene: &Scene, addr: IpAddr, port: u16, token: &str) -> Step<String> {
    let got = tcp_fetch(&scene.host, addr, port)?;
    if got == token {
        Ok(format!("{addr}:{port} answered"))
    } else {
        Err(format!(
            "{addr}:{port} answered {got:?}, expected {token:?}"
        ))
    }
}

fn expect_unreachable(scene: &Scene, addr: IpAddr, port: u16) -> Step<String> {
    match tcp_fetch(&scene.host, addr, port) {
        Ok(got) if got.is_empty() => Ok(format!("{addr}:{port} gives nothing")),
        Ok(got) => Err(format!("{addr}:{port} still answers {got:?}")),
        Err(_) => Ok(format!("{addr}:{port} refused")),
    }
}

/// portMappings through bridge + portmap, with both spellings of the keys.
pub fn port_mapping_checks(report: &mut Report, cat: &Catalogue) {
    let (Some(_), Some(_), Some(_)) =
        (cat.get("bridge"), cat.get("host-local"), cat.get("portmap"))
    else {
        report.skip(
            "chain bridge+portmap: portMappings",
            "needs bridge, host-local and portmap in the directory",
        );
        return;
    };
    let Some(version) = cat.common_version(
        &["bridge", "host-local", "portmap"],
        &crate::testnet::ALL_VERSIONS,
    ) else {
        report.skip(
            "chain bridge+portmap: portMappings",
            "no version all three claim",
        );
        return;
    };
    for (spelling, mappings) in [
        (
            "hostPort/containerPort/protocol (Podman, kubelet conflists)",
            lower_mapping(HOST_PORT),
        ),
        (
            "HostPort/ContainerPort/Protocol/HostIP (containerd)",
            containerd_mapping(HOST_PORT),
        ),
    ] {
        let id = |what: &str| format!("chain bridge+portmap {version}, keys {spelling}: {what}");
        let scene = match Scene::new("pm", &cat.dir) {
            Ok(s) => s,
            Err(e) => {
                report.check(id("setup"), Err(e.to_string()));
                continue;
            }
        };
        let added = chain_add(&scene, cat, &version, "suite-pm", mappings);
        let (pod, bresult) = match added {
            Ok(v) => v,
            Err(e) => {
                report.check(id("bridge ADD then portmap ADD with prevResult"), Err(e));
                continue;
            }
        };
        report.check(
            id("portmap passes bridge's result on unchanged"),
            if pod.result == bresult {
                Ok(String::new())
            } else {
                Err(format!(
                    "portmap printed {} for prevResult {bresult}",
                    pod.result
                ))
            },
        );
        let pod_ip = first_ipv4(&pod.result).map(IpAddr::V4);
        report.check(
            id("the pod answers on its own IP from the host"),
            match pod_ip {
                Some(ip) => expect_token(&scene, ip, CONTAINER_PORT, &pod.token),
                None => Err("no IPv4 address in the result".into()),
            },
        );
        report.check(
            id("the published port reaches the pod from the host (bridge gateway address)"),
            expect_token(&scene, IpAddr::V4(GATEWAY_IP), HOST_PORT, &pod.token),
        );
        report.check(
            id("the published port reaches the pod from 127.0.0.1"),
            expect_token(
                &scene,
                IpAddr::V4(Ipv4Addr::LOCALHOST),
                HOST_PORT,
                &pod.token,
            ),
        );
        let portmap = cat.get("portmap");
        report.check(
            id("portmap CHECK right after ADD succeeds"),
            (|| {
                let portmap = portmap.ok_or("no portmap")?;
                let mut conf = pod.portmap.clone();
                conf["prevResult"] = pod.result.clone();
                scene
                    .run(
                        portmap,
                        &scene
                            .call("CHECK", &pod.cid, &pod.pod.path_string(), "eth0")
                            .stdin_json(&conf),
                    )?
                    .silent_success()
                    .map(|_| String::new())
            })(),
        );
        report.check(
            id("DEL (portmap, then bridge) removes the mapping"),
            (|| {
                chain_del(&scene, cat, &pod)?;
                expect_unreachable(&scene, IpAddr::V4(GATEWAY_IP), HOST_PORT)
            })(),
        );
    }
    portmap_gc_check(report, cat, &version);
}

/// portmap's GC drops the mappings of attachments not in the valid list.
fn portmap_gc_check(report: &mut Report, cat: &Catalogue, version: &str) {
    let id = "portmap: GC with cni.dev/valid-attachments removes only stale mappings";
    let Some(portmap) = cat.get("portmap") else {
        return;
    };
    if !portmap.claims("1.1.0") || version != "1.1.0" {
        report.skip(id, "the plugins do not all claim spec 1.1.0 (GC is 1.1.0)");
        return;
    }
    report.check(
        id,
        (|| {
            let scene = setup(Scene::new("pmgc", &cat.dir))?;
            let (keep, _) = chain_add(&scene, cat, version, "suite-gc-keep", lower_mapping(18081))?;
            let (stale, _) =
                chain_add(&scene, cat, version, "suite-gc-stale", lower_mapping(18082))?;
            expect_token(&scene, IpAddr::V4(GATEWAY_IP), 18082, &stale.token)?;
            let mut gc = portmap_conf(version, json!([]));
            if let Some(o) = gc.as_object_mut() {
                o.remove("runtimeConfig");
            }
            gc["cni.dev/valid-attachments"] =
                json!([{"containerID": "suite-gc-keep", "ifname": "eth0"}]);
            scene
                .run(portmap, &scene.bare_call("GC").stdin_json(&gc))?
                .silent_success()?;
            expect_token(&scene, IpAddr::V4(GATEWAY_IP), 18081, &keep.token)
                .map_err(|e| format!("the kept mapping went too: {e}"))?;
            expect_unreachable(&scene, IpAddr::V4(GATEWAY_IP), 18082)
                .map_err(|e| format!("the stale mapping stayed: {e}"))?;
            chain_del(&scene, cat, &keep)?;
            chain_del(&scene, cat, &stale)?;
            Ok("18081 kept, 18082 removed".into())
        })(),
    );
}

/// `ips` (host-local, directly and through bridge) and `mac` (bridge).
pub fn capability_checks(report: &mut Report, cat: &Catalogue) {
    if let Some(hl) = cat.get("host-local") {
        if let Some(version) = hl.highest() {
            report.check(
                format!(
                    "host-local {version}: runtimeConfig.ips (capability `ips`) picks the address"
                ),
                (|| {
                    let scene = setup(Scene::new("ips", &cat.dir))?;
                    let pod = setup(scene.pod("ips"))?;
                    let conf = json!({
                        "cniVersion": version, "name": "suite-ips", "type": "host-local",
                        "capabilities": {"ips": true},
                        "runtimeConfig": {"ips": ["10.99.0.42/24"]},
                        "ipam": scene.ipam(super::scene::SUBNET),
                    });
                    let call = scene
                        .call("ADD", "suite-ips", &pod.path_string(), "eth0")
                        .stdin_json(&conf);
                    let result = scene.run(hl, &call)?.result()?;
                    let _ = scene.run(hl, &call.clone().var("CNI_COMMAND", "DEL"));
                    let addrs = result_addresses(&result);
                    if addrs == vec!["10.99.0.42/24".to_string()] {
                        Ok(String::new())
                    } else {
                        Err(format!("got {addrs:?}, asked for 10.99.0.42/24"))
                    }
                })(),
            );
        }
    }
    let (Some(bridge), Some(_)) = (cat.get("bridge"), cat.get("host-local")) else {
        report.skip(
            "bridge: capabilities ips and mac",
            "needs bridge and host-local",
        );
        return;
    };
    let Some(version) =
        cat.common_version(&["bridge", "host-local"], &crate::testnet::ALL_VERSIONS)
    else {
        return;
    };
    report.check(
        format!("bridge {version}: runtimeConfig.ips reaches host-local and the pod"),
        (|| {
            let scene = setup(Scene::new("bips", &cat.dir))?;
            let pod = setup(scene.pod("bips"))?;
            let conf = bridge_conf(
                &scene,
                &version,
                json!({"capabilities": {"ips": true}, "runtimeConfig": {"ips": ["10.99.0.43/24"]}}),
            );
            let call = scene
                .call("ADD", "suite-bips", &pod.path_string(), "eth0")
                .stdin_json(&conf);
            let result = scene.run(bridge, &call)?.result()?;
            let have = pod.addresses("eth0").map_err(|e| e.to_string());
            let _ = scene.run(bridge, &call.clone().var("CNI_COMMAND", "DEL"));
            let have = have?;
            if result_addresses(&result) == vec!["10.99.0.43/24".to_string()]
                && have.contains(&"10.99.0.43/24".to_string())
            {
                Ok(String::new())
            } else {
                Err(format!(
                    "result {:?}, pod eth0 {have:?}",
                    result_addresses(&result)
                ))
            }
        })(),
    );
    report.check(
        format!("bridge {version}: runtimeConfig.mac (capability `mac`) sets the pod MAC"),
        (|| {
            let mac = "0a:58:0a:63:00:2a";
            let scene = setup(Scene::new("mac", &cat.dir))?;
            let pod = setup(scene.pod("mac"))?;
            let conf = bridge_conf(
                &scene,
                &version,
                json!({"capabilities": {"mac": true}, "runtimeConfig": {"mac": mac}}),
            );
            let call = scene
                .call("ADD", "suite-mac", &pod.path_string(), "eth0")
                .stdin_json(&conf);
            let result = scene.run(bridge, &call)?.result()?;
            let link = pod.link("eth0").map_err(|e| e.to_string());
            let _ = scene.run(bridge, &call.clone().var("CNI_COMMAND", "DEL"));
            let link = link?.ok_or("no eth0 in the pod")?;
            let in_result = result["interfaces"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|i| i["name"] == "eth0" && i["mac"] == mac);
            if link["address"] == mac && in_result {
                Ok(String::new())
            } else {
                Err(format!(
                    "pod eth0 has {}, result interfaces {}",
                    link["address"], result["interfaces"]
                ))
            }
        })(),
    );
}

/// What containerd's CRI plugin does for a pod, through our runtime.
pub fn containerd_checks(report: &mut Report, cat: &Catalogue) {
    let needed = ["loopback", "bridge", "host-local", "portmap"];
    if needed.iter().any(|n| cat.get(n).is_none()) {
        report.skip(
            "containerd",
            "needs loopback, bridge, host-local and portmap",
        );
        return;
    }
    let Some(version) = cat.common_version(
        &["bridge", "host-local", "portmap"],
        &crate::testnet::ALL_VERSIONS,
    ) else {
        return;
    };
    let id = |what: &str| format!("containerd ({version}): {what}");
    let scene = match Scene::new("ctrd", &cat.dir) {
        Ok(s) => s,
        Err(e) => {
            report.check(id("setup"), Err(e.to_string()));
            return;
        }
    };
    let flow = (|| -> Step<()> {
        let cni = setup(scene.runtime())?;
        let pod = setup(scene.pod("ctrd"))?;
        let server = setup(TcpResponder::start(
            &pod,
            CONTAINER_PORT,
            "hello from the pod",
        ))?;
        let sandbox_id = "5f0c3ea1d2b94a7c9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d";
        let loopback_list = conflist(&json!({
            "cniVersion": "0.3.1", "name": "cni-loopback",
            "plugins": [{"type": "loopback"}],
        }))?;
        let pod_list = conflist(&json!({
            "cniVersion": version, "name": "k8s-pod-network",
            "plugins": [
                bridge_conf(&scene, &version, json!({"ipMasq": true, "hairpinMode": true})),
                {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true},
            ],
        }))?;
        let args: Vec<(String, String)> = [
            ("IgnoreUnknown", "1"),
            ("K8S_POD_NAMESPACE", "default"),
            ("K8S_POD_NAME", "web-0"),
            ("K8S_POD_INFRA_CONTAINER_ID", sandbox_id),
            ("K8S_POD_UID", "0d9f7c3e-6a61-4c4e-9a39-0f1b2c3d4e5f"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let mut caps = serde_json::Map::new();
        caps.insert("portMappings".into(), containerd_mapping(HOST_PORT));
        let lo_rt = RuntimeConf {
            container_id: sandbox_id.into(),
            netns: pod.path_string(),
            ifname: "lo".into(),
            args: args.clone(),
            capability_args: serde_json::Map::new(),
        };
        let pod_rt = RuntimeConf {
            container_id: sandbox_id.into(),
            netns: pod.path_string(),
            ifname: "eth0".into(),
            args: args.clone(),
            capability_args: caps,
        };

        let lo = cni
            .add_network_list(&loopback_list, &lo_rt)
            .map_err(|e| e.to_string());
        report.check(
            id("loopback first, as its own network `cni-loopback` (0.3.1, ifname lo)"),
            lo.and_then(|_| {
                let lo = pod.link("lo").map_err(|e| e.to_string())?.ok_or("no lo")?;
                if lo["flags"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|x| x == "UP"))
                {
                    Ok(String::new())
                } else {
                    Err(format!("lo not up: {lo}"))
                }
            }),
        );
        let added = cni
            .add_network_list(&pod_list, &pod_rt)
            .map_err(|e| e.to_string());
        report.check(
            id("pod network ADD with K8S_POD_* and IgnoreUnknown=1 in CNI_ARGS"),
            added
                .as_ref()
                .map(|r| result_addresses(&result_json(r)).join(","))
                .map_err(Clone::clone),
        );
        if added.is_err() {
            return Ok(());
        }
        report.check(
            id("capitalised portMappings keys publish the port"),
            expect_token(
                &scene,
                IpAddr::V4(GATEWAY_IP),
                HOST_PORT,
                "hello from the pod",
            ),
        );
        // StopPodSandbox: the pod network, then loopback, each with the
        // netns and the cached result.
        let stop = cni
            .del_network_list(&pod_list, &pod_rt)
            .and_then(|_| cni.del_network_list(&loopback_list, &lo_rt))
            .map_err(|e| e.to_string());
        report.check(
            id("DEL at StopPodSandbox (netns and prevResult) succeeds and unpublishes the port"),
            stop.and_then(|_| {
                if pod.link("eth0").map_err(|e| e.to_string())?.is_some() {
                    return Err("pod eth0 still there".into());
                }
                expect_unreachable(&scene, IpAddr::V4(GATEWAY_IP), HOST_PORT)
            }),
        );
        drop(server);
        pod.delete();
        // RemovePodSandbox: DEL again, netns gone (CNI_NETNS empty), the
        // cache already removed so no prevResult.
        let gone = |rt: &RuntimeConf| RuntimeConf {
            netns: String::new(),
            ..rt.clone()
        };
        let remove = cni
            .del_network_list(&pod_list, &gone(&pod_rt))
            .and_then(|_| cni.del_network_list(&loopback_list, &gone(&lo_rt)))
            .map_err(|e| e.to_string());
        report.check(
            id("second DEL at RemovePodSandbox (CNI_NETNS empty, no prevResult) succeeds"),
            remove.map(|_| String::new()),
        );
        report.check(
            id("nothing is left: no lease, no veth, no cached result"),
            (|| {
                let leased = scene.leased("k8s-pod-network");
                let veths = scene.host_veths()?;
                let cached = std::fs::read_dir(scene.work.join("cache/results"))
                    .map(|d| d.count())
                    .unwrap_or(0);
                if leased.is_empty() && veths.is_empty() && cached == 0 {
                    Ok(String::new())
                } else {
                    Err(format!(
                        "leases {leased:?}, veths {veths:?}, cache files {cached}"
                    ))
                }
            })(),
        );
        Ok(())
    })();
    if let Err(e) = flow {
        report.check(id("flow"), Err(e));
    }
}
