//! The built `macvlan` binary, run as a runtime runs it, against the
//! kernel: a fake host namespace whose `master0` is one end of a veth, the
//! other end (`peer0`, 10.55.0.1/24) in a "peer" namespace standing for the
//! network beyond the NIC, and a pod namespace. Our `host-local` is the
//! IPAM plugin (built on demand). Every test checks the
//! kernel's state (`ip -j`) and, where the plugin made a working link, that
//! the pod reaches the peer across the macvlan.

use conformance::testnet::{
    refused_link_names, with_prev, workspace_plugin, MasterNet, PluginCall, SubLinkRig, TestNetns,
    ALL_VERSIONS,
};
use serde_json::{json, Value};

const PLUGIN: &str = env!("CARGO_BIN_EXE_macvlan");
const NETWORK: &str = "mvnet";
const CONTAINER_ID: &str = "ctr-1";
const IFNAME: &str = "net1";
const PEER_IP: &str = "10.55.0.1";

/// The attachment in namespaces of its own (`tag`): `master0` in the
/// host, its peer (10.55.0.1/24) in the peer namespace; with
/// `master_in_pod`, the master is in the pod instead (linkInContainer).
/// Configurations are 1.0.0 unless a test says otherwise, and lease from
/// 10.55.0.10 with a default route through the peer, for traffic.
fn rig(tag: &str, master_in_pod: bool) -> SubLinkRig {
    let rig = SubLinkRig::new(
        PLUGIN,
        NETWORK,
        tag,
        master_in_pod,
        (CONTAINER_ID, IFNAME),
        json!({
            "cniVersion": "1.0.0",
            "type": "macvlan",
        }),
        json!({"subnet": "10.55.0.0/24", "rangeStart": "10.55.0.10", "gateway": "10.55.0.1"}),
    )
    .with_ipam_routes(json!([{"dst": "0.0.0.0/0"}]));
    rig.peer_address("10.55.0.1/24");
    rig
}

/// `ip -d -j link show` of `dev` in the pod, if it is there.
fn pod_link(rig: &SubLinkRig, dev: &str) -> Option<Value> {
    rig.pod
        .links()
        .iter()
        .any(|l| l == dev)
        .then(|| rig.pod.ip_json(&["-d", "link", "show", "dev", dev])[0].clone())
}

/// The host's `master0` index: what a macvlan made on it names as its
/// link (in another namespace).
fn master_index(rig: &SubLinkRig) -> Value {
    rig.host.ip_json(&["link", "show", "dev", "master0"])[0]["ifindex"].clone()
}

fn pod_ipv4(rig: &SubLinkRig) -> Vec<String> {
    let v = rig.pod.ip_json(&["-4", "addr", "show", "dev", IFNAME]);
    v[0]["addr_info"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
                .collect()
        })
        .unwrap_or_default()
}

fn has_check(version: &str) -> bool {
    matches!(version, "0.4.0" | "1.0.0" | "1.1.0")
}

/// ADD, traffic, CHECK, DEL, DEL again, in every spec version; the result
/// has each version's layout.
#[test]
fn add_check_del_in_every_version() {
    for version in ALL_VERSIONS {
        let fx = rig("mv-v", false);
        let conf = fx.conf(json!({"cniVersion": version}));
        if version == "1.1.0" {
            fx.run("STATUS", &conf).assert_ok();
        }
        let out = fx.run("ADD", &conf);
        out.assert_ok();
        let result = out.json();
        assert_eq!(result["cniVersion"], version);
        let link = pod_link(&fx, IFNAME).expect("macvlan in the pod");
        assert_eq!(link["linkinfo"]["info_kind"], "macvlan");
        assert_eq!(link["linkinfo"]["info_data"]["mode"], "bridge");
        assert_eq!(link["link_index"], master_index(&fx));
        assert_eq!(pod_ipv4(&fx), vec!["10.55.0.10/24".to_string()]);
        // Neighbours learn of the new address at once.
        for sysctl in [
            format!("net.ipv4.conf.{IFNAME}.arp_notify"),
            format!("net.ipv6.conf.{IFNAME}.ndisc_notify"),
        ] {
            let value = fx.pod.exec("sysctl", &["-n", &sysctl]).stdout;
            assert_eq!(value, b"1\n", "{version}: {sysctl}");
        }
        match version {
            "0.1.0" | "0.2.0" => {
                assert_eq!(result["ip4"]["ip"], "10.55.0.10/24");
                assert!(result.get("interfaces").is_none());
            }
            _ => {
                assert_eq!(result["interfaces"][0]["name"], IFNAME);
                assert_eq!(result["interfaces"][0]["mac"], link["address"]);
                assert_eq!(
                    result["interfaces"][0]["sandbox"],
                    fx.pod.path().display().to_string()
                );
                assert_eq!(result["ips"][0]["address"], "10.55.0.10/24");
                assert_eq!(result["ips"][0]["interface"], 0);
                let mtu = &result["interfaces"][0]["mtu"];
                if version == "1.1.0" {
                    assert_eq!(mtu, &link["mtu"]);
                } else {
                    assert!(mtu.is_null(), "{version}: {result}");
                }
                let has_version_field = matches!(version, "0.3.0" | "0.3.1" | "0.4.0");
                assert_eq!(result["ips"][0].get("version").is_some(), has_version_field);
            }
        }
        // The default route through the gateway, and traffic across.
        let routes = fx.pod.ip_json(&["route", "show", "default"]);
        assert_eq!(routes[0]["gateway"], PEER_IP, "{routes}");
        assert!(
            fx.pod.ping(PEER_IP),
            "{version}: no ping across the macvlan"
        );
        assert_eq!(fx.leases(), vec!["10.55.0.10".to_string()]);

        let check = fx.run("CHECK", &with_prev(&conf, &result));
        if has_check(version) {
            check.assert_ok();
        } else {
            assert_eq!(check.error_code(), 1, "{version}");
            assert_eq!(check.msg(), "config version does not allow CHECK");
        }
        fx.run("DEL", &with_prev(&conf, &result)).assert_ok();
        fx.assert_nothing_left();
        fx.run("DEL", &conf).assert_ok();
    }
}

/// `"ipam": {}`: the link only, up, no addresses; 0.1.0 and 0.2.0 have no
/// result form for that and fail before making anything.
#[test]
fn layer2_only() {
    for version in ALL_VERSIONS {
        let fx = rig("mv-l2", false);
        let conf = fx.conf(json!({"cniVersion": version, "ipam": {}}));
        let out = fx.run("ADD", &conf);
        if matches!(version, "0.1.0" | "0.2.0") {
            assert_eq!(out.error_code(), 1, "{version}");
            assert_eq!(out.json()["msg"], "cannot convert: no valid IP addresses");
            fx.assert_nothing_left();
            continue;
        }
        out.assert_ok();
        let result = out.json();
        assert!(result.get("ips").is_none(), "{result}");
        assert_eq!(result["interfaces"][0]["name"], IFNAME);
        let link = pod_link(&fx, IFNAME).unwrap();
        assert!(link["flags"].as_array().unwrap().contains(&json!("UP")));
        assert!(pod_ipv4(&fx).is_empty());
        if has_check(version) {
            fx.run("CHECK", &with_prev(&conf, &result)).assert_ok();
        }
        fx.run("DEL", &conf).assert_ok();
        fx.assert_nothing_left();
    }
}

/// The master inside the pod: the macvlan is made there, and works.
#[test]
fn link_in_container() {
    let fx = rig("mv-lic", true);
    let conf = fx.conf(json!({"linkInContainer": true}));
    let out = fx.run("ADD", &conf);
    out.assert_ok();
    let link = pod_link(&fx, IFNAME).unwrap();
    assert_eq!(link["link"], "master0");
    assert!(fx.pod.ping(PEER_IP));
    fx.run("CHECK", &with_prev(&conf, &out.json())).assert_ok();
    // Without linkInContainer the master is looked for on the host.
    let out_host = fx.run("CHECK", &with_prev(&fx.conf(json!({})), &out.json()));
    assert_eq!(out_host.error_code(), 7);
    assert!(out_host.json()["msg"]
        .as_str()
        .unwrap()
        .contains("failed to lookup master \"master0\""));
    fx.run("DEL", &conf).assert_ok();
    assert!(pod_link(&fx, IFNAME).is_none());
    assert!(fx.leases().is_empty());

    // No `master`: the default route's link, looked for in the pod.
    let mut conf = conf;
    conf.as_object_mut().unwrap().remove("master");
    let out = fx.run("ADD", &conf);
    assert_eq!(out.error_code(), 7);
    assert_eq!(
        out.msg(),
        "no default route interface found in the container; set \"master\""
    );
    fx.pod
        .ip(&["addr", "add", "10.55.0.2/24", "dev", "master0"]);
    fx.pod
        .ip(&["route", "add", "default", "via", PEER_IP, "dev", "master0"]);
    fx.run("ADD", &conf).assert_ok();
    assert_eq!(pod_link(&fx, IFNAME).unwrap()["link"], "master0");
    fx.run("DEL", &conf).assert_ok();
    assert!(pod_link(&fx, IFNAME).is_none());
    assert!(fx.leases().is_empty());
}

/// No `master`: the link of the host's default route.
#[test]
fn default_master_from_the_default_route() {
    let fx = rig("mv-dr", false);
    let mut conf = fx.conf(json!({}));
    conf.as_object_mut().unwrap().remove("master");
    let out = fx.run("ADD", &conf);
    assert_eq!(out.error_code(), 7);
    assert!(out.json()["msg"]
        .as_str()
        .unwrap()
        .contains("no default route interface found"));
    fx.assert_nothing_left();

    fx.host
        .ip(&["addr", "add", "10.55.0.2/24", "dev", "master0"]);
    fx.host
        .ip(&["route", "add", "default", "via", PEER_IP, "dev", "master0"]);
    let out = fx.run("ADD", &conf);
    out.assert_ok();
    assert_eq!(
        pod_link(&fx, IFNAME).unwrap()["link_index"],
        master_index(&fx)
    );
    assert!(fx.pod.ping(PEER_IP));
    fx.run("CHECK", &with_prev(&conf, &out.json())).assert_ok();
    fx.run("DEL", &conf).assert_ok();
    assert!(fx.leases().is_empty());
}

/// The MAC from `CNI_ARGS`, and from `runtimeConfig.mac` over it.
#[test]
fn mac_from_cni_args_and_runtime_config() {
    let fx = rig("mv-mac", false);
    let conf = fx.conf(json!({"mac": "c2:00:00:00:00:01"}));
    let out = fx
        .call("ADD", &conf)
        .var("CNI_ARGS", "IgnoreUnknown=true;MAC=c2:11:22:33:44:55")
        .run(PLUGIN.as_ref());
    out.assert_ok();
    assert_eq!(out.json()["interfaces"][0]["mac"], "c2:11:22:33:44:55");
    assert_eq!(
        pod_link(&fx, IFNAME).unwrap()["address"],
        "c2:11:22:33:44:55"
    );
    assert!(fx.pod.ping(PEER_IP));
    fx.run("DEL", &conf).assert_ok();

    let conf = fx.conf(json!({"RuntimeConfig": {"mac": "c2:66:77:88:99:aa"}}));
    let out = fx
        .call("ADD", &conf)
        .var("CNI_ARGS", "IgnoreUnknown=true;MAC=c2:11:22:33:44:55")
        .run(PLUGIN.as_ref());
    out.assert_ok();
    assert_eq!(out.json()["interfaces"][0]["mac"], "c2:66:77:88:99:aa");
    assert_eq!(
        pod_link(&fx, IFNAME).unwrap()["address"],
        "c2:66:77:88:99:aa"
    );
    // CHECK compares the MAC with the prevResult's.
    let mut prev = out.json();
    prev["interfaces"][0]["mac"] = json!("c2:00:00:00:00:99");
    let out = fx.run("CHECK", &with_prev(&conf, &prev));
    assert_eq!(out.error_code(), 999);
    fx.run("DEL", &conf).assert_ok();
    fx.assert_nothing_left();
}

/// Every mode, `mtu` and `bcqueuelen` land on the link; CHECK notices a
/// mode that differs from the configuration.
#[test]
fn modes_mtu_and_bcqueuelen() {
    let fx = rig("mv-mode", false);
    for mode in ["bridge", "private", "vepa", "passthru", "source"] {
        let conf = fx.conf(json!({
            "cniVersion": "1.1.0", "mode": mode, "mtu": 1400, "bcqueuelen": 123, "ipam": {},
        }));
        let out = fx.run("ADD", &conf);
        out.assert_ok();
        let link = pod_link(&fx, IFNAME).unwrap();
        assert_eq!(link["linkinfo"]["info_data"]["mode"], mode);
        assert_eq!(link["mtu"], 1400);
        if mode != "passthru" {
            // passthru takes over the whole parent: no broadcast queue.
            assert_eq!(link["linkinfo"]["info_data"]["bcqueuelen"], 123, "{link}");
        }
        fx.run("CHECK", &with_prev(&conf, &out.json())).assert_ok();
        let other = if mode == "bridge" { "vepa" } else { "bridge" };
        let out_other = fx.run(
            "CHECK",
            &with_prev(
                &fx.conf(json!({"cniVersion": "1.1.0", "mode": other, "ipam": {}})),
                &out.json(),
            ),
        );
        assert_eq!(out_other.error_code(), 999);
        assert!(out_other.json()["msg"].as_str().unwrap().contains(&format!(
            "mode {mode} does not match expected value: {other}"
        )));
        fx.run("DEL", &conf).assert_ok();
        assert!(pod_link(&fx, IFNAME).is_none());
    }
}

/// Bad input fails with its code and leaves nothing.
#[test]
fn bad_input_changes_nothing() {
    let fx = rig("mv-bad", false);
    let cases = [
        (
            json!({"mtu": 1600}),
            7,
            "invalid MTU 1600, must be [0, master MTU(1500)]",
        ),
        (
            json!({"mtu": -100}),
            7,
            "invalid MTU -100, must be [0, master MTU(1500)]",
        ),
        (json!({"mode": "l2"}), 7, "unknown macvlan mode: \"l2\""),
        (
            json!({"mac": "zz:zz"}),
            7,
            "invalid args zz:zz for MAC addr",
        ),
        (
            json!({"master": "nothere0"}),
            7,
            "failed to lookup master \"nothere0\"",
        ),
        (json!({"mtu": "big"}), 7, "failed to load netconf"),
        (
            json!({"linkInContainer": true}),
            7,
            "failed to lookup master \"master0\": no such link in the container",
        ),
        (
            json!({"master": null}),
            7,
            "no default route interface found; set \"master\"",
        ),
    ];
    for (extra, code, message) in cases {
        let out = fx.run("ADD", &fx.conf(extra.clone()));
        assert_eq!(out.error_code(), code, "{extra}");
        let msg = out.json()["msg"].as_str().unwrap().to_string();
        assert!(msg.contains(message), "{extra}: {msg}");
        fx.assert_nothing_left();
    }
    let out = fx
        .call("ADD", &fx.conf(json!({})))
        .var("CNI_ARGS", "MAC=c2:11:22:33:44:55;OTHER=1")
        .run(PLUGIN.as_ref());
    assert_eq!(out.error_code(), 4);
    fx.assert_nothing_left();
    fx.assert_add_needs_the_netns(&fx.conf(json!({})));
    // CNI_IFNAME taken in the pod: the new link goes again.
    fx.pod.ip(&[
        "link", "add", IFNAME, "type", "veth", "peer", "name", "other0",
    ]);
    let out = fx.run("ADD", &fx.conf(json!({})));
    assert_eq!(out.error_code(), 999);
    assert!(out.json()["msg"]
        .as_str()
        .unwrap()
        .contains("failed to rename macvlan to \"net1\""));
    assert_eq!(
        pod_link(&fx, IFNAME).unwrap()["linkinfo"]["info_kind"],
        "veth"
    );
    assert_eq!(MasterNet::extra_links(&fx.pod).len(), 2);
    assert!(fx.leases().is_empty());
}

/// A passthru macvlan must be its master's only one: the kernel's EINVAL
/// either way comes back as a configuration error that says so, and the
/// refused ADD leaves no link and no lease.
#[test]
fn passthru_conflicts_on_a_master_are_configuration_errors() {
    let fx = rig("mv-pt", false);
    let second = TestNetns::new("mv-pt-q");
    let call_second = |command: &str, conf: &Value| {
        PluginCall::new(command)
            .attachment("ctr-2", &second.path(), IFNAME)
            .stdin_json(conf)
            .in_netns(&fx.host)
            .run(PLUGIN.as_ref())
    };
    let bridge = fx.conf(json!({"mode": "bridge"}));
    let passthru = fx.conf(json!({"mode": "passthru"}));
    for (first, then, mode) in [
        (&passthru, &bridge, "bridge"),
        (&bridge, &passthru, "passthru"),
    ] {
        fx.run("ADD", first).assert_ok();
        let leases = fx.leases().len();
        let out = call_second("ADD", then);
        assert_eq!(out.error_code(), 7, "{}", out.json());
        let msg = out.json()["msg"].as_str().unwrap().to_string();
        assert!(
            msg.starts_with(&format!(
                "the kernel refused a {mode} macvlan on master \"master0\""
            )) && msg.contains("passthru macvlan must be its master's only macvlan"),
            "{msg}"
        );
        assert!(MasterNet::extra_links(&second).is_empty());
        assert_eq!(fx.leases().len(), leases, "the refused ADD took a lease");
        fx.run("DEL", first).assert_ok();
        call_second("DEL", then).assert_ok();
        fx.assert_nothing_left();
    }
}

/// A failure after the link exists removes it, and a failure after IPAM
/// ADD releases the lease too.
#[test]
fn failures_after_the_link_exists_roll_back() {
    let fx = rig("mv-rb", false);
    // No such IPAM plugin.
    let conf = fx.conf(json!({"ipam": {"type": "no-such-ipam"}}));
    let out = fx.run("ADD", &conf);
    assert_ne!(out.code, 0);
    fx.assert_nothing_left();
    // IPAM succeeds, then a route through an unreachable gateway fails.
    let mut ipam = fx.ipam();
    ipam["routes"] = json!([{"dst": "10.99.0.0/16", "gw": "10.200.0.1"}]);
    let conf = fx.conf(json!({"ipam": ipam}));
    let out = fx.run("ADD", &conf);
    assert_eq!(out.error_code(), 999);
    assert!(out.json()["msg"]
        .as_str()
        .unwrap()
        .contains("failed to add route '10.99.0.0/16 via 10.200.0.1 dev net1'"));
    fx.assert_nothing_left();
}

/// DEL with the pod namespace gone still releases the lease; without
/// `CNI_NETNS` too.
#[test]
fn del_without_the_netns() {
    let fx = rig("mv-gone", false);
    let conf = fx.conf(json!({}));
    fx.run("ADD", &conf).assert_ok();
    assert_eq!(fx.leases().len(), 1);
    let pod_path = fx.pod.path();
    conformance::testnet::ip(&["netns", "delete", fx.pod.name()]);
    assert!(!pod_path.exists());
    fx.run("DEL", &conf).assert_ok();
    assert!(fx.leases().is_empty());
    fx.run("DEL", &conf).assert_ok();
    // And with no CNI_NETNS at all (containerd's second DEL).
    PluginCall::new("DEL")
        .var("CNI_CONTAINERID", CONTAINER_ID)
        .var("CNI_IFNAME", IFNAME)
        .stdin_json(&conf)
        .in_netns(&fx.host)
        .run(PLUGIN.as_ref())
        .assert_ok();
    // The macvlan went with the namespace; the master stays.
    assert!(fx.host.links().contains(&"master0".to_string()));
    // A path that is not a namespace is an error (code 4), not "gone".
    let out = PluginCall::new("DEL")
        .attachment(CONTAINER_ID, std::path::Path::new("/etc/hostname"), IFNAME)
        .stdin_json(&conf)
        .in_netns(&fx.host)
        .run(PLUGIN.as_ref());
    assert_eq!(out.error_code(), 4);
}

/// CHECK finds what was removed after ADD.
#[test]
fn check_finds_damage() {
    let fx = rig("mv-dmg", false);
    let conf = fx.conf(json!({}));
    let out = fx.run("ADD", &conf);
    out.assert_ok();
    let prev = out.json();
    let checked = with_prev(&conf, &prev);
    fx.run("CHECK", &checked).assert_ok();
    // No prevResult: nothing to compare with, a configuration error.
    let out = fx.run("CHECK", &conf);
    assert_eq!(out.error_code(), 7);
    assert_eq!(out.msg(), "Required prevResult missing");
    // The prevResult's interface in another sandbox.
    let mut elsewhere = prev.clone();
    elsewhere["interfaces"][0]["sandbox"] = json!("/run/netns/other");
    let out = fx.run("CHECK", &with_prev(&conf, &elsewhere));
    assert_eq!(out.error_code(), 999);
    assert_eq!(
        out.msg(),
        format!(
            "Sandbox in prevResult /run/netns/other doesn't match configured netns: {}",
            fx.pod.path().display()
        )
    );
    // IPAM CHECK comes first, and its error is passed on as it is: the
    // lease gone, host-local's own code and message.
    let lease = fx.store.leases()[0].clone();
    let lease_file = std::path::Path::new(&fx.store.data_dir())
        .join(NETWORK)
        .join(&lease);
    let kept = std::fs::read(&lease_file).unwrap();
    std::fs::remove_file(&lease_file).unwrap();
    let from_ipam = fx.run_ipam("CHECK", &checked);
    let out = fx.run("CHECK", &checked);
    assert_eq!(out.error_code(), from_ipam.error_code());
    assert_eq!(out.json()["msg"], from_ipam.json()["msg"]);
    std::fs::write(&lease_file, kept).unwrap();
    fx.run("CHECK", &checked).assert_ok();
    // The default route gone.
    fx.pod.ip(&["route", "del", "default"]);
    let out = fx.run("CHECK", &checked);
    assert!(
        out.json()["msg"]
            .as_str()
            .unwrap()
            .contains("Expected Route 0.0.0.0/0"),
        "{}",
        out.stdout
    );
    // The address gone.
    fx.pod.ip(&["addr", "flush", "dev", IFNAME]);
    let out = fx.run("CHECK", &checked);
    assert!(out.json()["msg"]
        .as_str()
        .unwrap()
        .contains("Failed to match addr 10.55.0.10/24 on interface net1"));
    // The link replaced by another kind.
    fx.pod.ip(&["link", "del", IFNAME]);
    fx.pod
        .ip(&["link", "add", IFNAME, "type", "veth", "peer", "name", "x0"]);
    let out = fx.run("CHECK", &checked);
    assert!(out.json()["msg"]
        .as_str()
        .unwrap()
        .contains("not of type macvlan"));
    fx.pod.ip(&["link", "del", IFNAME]);
    fx.run("DEL", &conf).assert_ok();
    fx.assert_nothing_left();
}

/// GC and STATUS go to the IPAM plugin: a GC whose valid list lacks the
/// attachment releases its lease.
#[test]
fn gc_and_status_ask_ipam() {
    let fx = rig("mv-gc", false);
    let conf = fx.conf(json!({"cniVersion": "1.1.0"}));
    fx.run("ADD", &conf).assert_ok();
    fx.run("STATUS", &conf).assert_ok();
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": CONTAINER_ID, "ifname": IFNAME}]);
    PluginCall::new("GC")
        .stdin_json(&gc)
        .in_netns(&fx.host)
        .run(PLUGIN.as_ref())
        .assert_ok();
    assert_eq!(fx.leases().len(), 1);
    gc["cni.dev/valid-attachments"] = json!([]);
    PluginCall::new("GC")
        .stdin_json(&gc)
        .in_netns(&fx.host)
        .run(PLUGIN.as_ref())
        .assert_ok();
    assert!(fx.leases().is_empty());
    // Layer 2: nothing to ask.
    let l2 = fx.conf(json!({"cniVersion": "1.1.0", "ipam": {}}));
    fx.run("STATUS", &l2).assert_ok();
    // An IPAM plugin that is not there: STATUS and GC say so.
    let mut broken = conf.clone();
    broken["ipam"]["type"] = json!("no-such-ipam");
    for command in ["STATUS", "GC"] {
        let out = PluginCall::new(command)
            .stdin_json(&broken)
            .in_netns(&fx.host)
            .run(PLUGIN.as_ref());
        assert_ne!(out.code, 0, "{command}");
        assert!(
            out.msg().contains("no-such-ipam"),
            "{command}: {}",
            out.stdout
        );
    }
    // Before 1.1.0 there is no STATUS or GC.
    let old = fx.conf(json!({}));
    for command in ["STATUS", "GC"] {
        let out = PluginCall::new(command)
            .stdin_json(&old)
            .in_netns(&fx.host)
            .run(PLUGIN.as_ref());
        assert_eq!(out.error_code(), 1, "{command}");
        assert_eq!(
            out.msg(),
            format!("config version does not allow {command}")
        );
    }
    // VERSION: every spec version.
    let out = PluginCall::new("VERSION")
        .stdin_json(&json!({"cniVersion": "1.1.0"}))
        .run(PLUGIN.as_ref());
    out.assert_ok();
    assert_eq!(out.json()["supportedVersions"], json!(ALL_VERSIONS));
    fx.run("DEL", &conf).assert_ok();
}

/// Without `mtu` the link has the master's MTU (1.1.0 reports it); the
/// configuration's `dns` is the result's, and without one IPAM's DNS is
/// kept (the reference replaces it with the empty configuration DNS).
#[test]
fn mtu_from_the_master_and_dns_in_the_result() {
    let fx = rig("mv-dns", false);
    fx.host.ip(&["link", "set", "master0", "mtu", "1400"]);
    let dns = json!({"nameservers": ["10.55.0.53"], "domain": "pods.test", "search": ["a.test"]});
    let conf = fx.conf(json!({"cniVersion": "1.1.0", "dns": dns}));
    let out = fx.run("ADD", &conf);
    out.assert_ok();
    let result = out.json();
    assert_eq!(pod_link(&fx, IFNAME).unwrap()["mtu"], 1400);
    assert_eq!(result["interfaces"][0]["mtu"], 1400);
    assert_eq!(result["dns"], dns);
    fx.run("CHECK", &with_prev(&conf, &result)).assert_ok();
    fx.run("DEL", &conf).assert_ok();

    let resolv = fx.store.data_dir() + "/resolv.conf";
    std::fs::write(&resolv, "nameserver 10.55.0.54\nsearch b.test\n").unwrap();
    let mut conf = fx.conf(json!({"cniVersion": "1.1.0"}));
    conf["ipam"]["resolvConf"] = json!(resolv);
    let out = fx.run("ADD", &conf);
    out.assert_ok();
    assert_eq!(
        out.json()["dns"],
        json!({"nameservers": ["10.55.0.54"], "search": ["b.test"]})
    );
    fx.run("DEL", &conf).assert_ok();
    fx.assert_nothing_left();
}

/// An IPAM plugin that answers with no address: the reference's error,
/// and the link made for it deleted again.
#[test]
fn ipam_without_addresses_is_refused_and_leaves_nothing() {
    let fx = rig("mv-noip", false);
    workspace_plugin("static");
    let conf = fx.conf(json!({"ipam": {"type": "static"}}));
    let out = fx.run("ADD", &conf);
    assert_eq!(out.error_code(), 999, "{}", out.stdout);
    assert_eq!(out.msg(), "IPAM plugin returned missing IP config");
    fx.assert_nothing_left();
}

/// DEL reports a failing IPAM DEL, after deleting the link all the same;
/// a DEL that works afterwards finds nothing left to do.
#[test]
fn del_reports_ipam_failures_and_still_deletes_the_link() {
    let fx = rig("mv-delipam", false);
    let conf = fx.conf(json!({}));
    fx.run("ADD", &conf).assert_ok();
    let mut broken = conf.clone();
    broken["ipam"]["type"] = json!("no-such-ipam");
    let out = fx.run("DEL", &broken);
    assert_ne!(out.code, 0, "{}", out.stdout);
    assert!(out.msg().contains("no-such-ipam"), "{}", out.stdout);
    assert!(pod_link(&fx, IFNAME).is_none());
    assert_eq!(fx.leases().len(), 1);
    fx.run("DEL", &conf).assert_ok();
    fx.assert_nothing_left();
}

/// `master` is checked as a link name before any kernel call, for every
/// verb that reads it: a 70,000-byte one made the netlink encoder panic
/// (SIGABRT in release builds, no CNI error). Exit status 1 with a code 7
/// error JSON, nothing made.
#[test]
fn master_names_are_checked_before_the_kernel() {
    let fx = rig("mv-name", false);
    for (master, message) in refused_link_names("master") {
        for command in ["ADD", "CHECK"] {
            let out = fx.run(command, &fx.conf(json!({"master": master})));
            assert_eq!(out.error_code(), 7, "{command}: {}", out.stderr);
            assert_eq!(out.msg(), message, "{command}");
        }
        fx.assert_nothing_left();
    }
}

/// `"routes": [null]` in host-local's `ipam`: the reference's macvlan
/// crashes on it (nil pointer); ours answers with an error JSON and makes
/// nothing.
#[test]
fn a_null_route_in_the_ipam_is_an_error_not_a_crash() {
    let fx = rig("mv-nullrt", false).with_ipam_routes(json!([null]));
    let out = fx.run("ADD", &fx.conf(json!({})));
    assert_eq!(out.error_code(), 7, "{}", out.stderr);
    assert_eq!(
        out.msg(),
        "invalid network config: ipam.routes[0]: invalid type: null, expected struct Route"
    );
    fx.assert_nothing_left();
}
