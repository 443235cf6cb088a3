//! The reference's bandwidth_linux_test scenarios over every version the
//! plugin speaks, plus validation, rollback, CHECK damage, GC and the
//! side-by-side comparison with the reference binary. Runs as root; every
//! link lives in namespaces the test made.

mod common;

use std::path::Path;

use common::*;
use serde_json::{json, Value};

const IFB: &str = "bwpa8eda89404b7";

/// ADD with both directions: 3 interfaces, the ifb last (no sandbox, the
/// host veth's MTU), a tbf on the ifb (rate 2 B/s, limit 1), the host veth
/// with a tbf (rate 1, limit 1) and an ingress qdisc whose one u32 filter
/// redirects to the ifb; CHECK passes; DEL removes the ifb, twice.
#[test]
fn add_check_del_over_every_version() {
    for version in VERSIONS {
        let pod = Pod::new("bwv");
        let conf = pod.conf(
            version,
            json!({"ingressRate": 8, "ingressBurst": 8, "egressRate": 16, "egressBurst": 8}),
        );
        let out = pod.call("ADD", &conf);
        out.assert_ok();
        let result = out.json();
        assert_eq!(result["cniVersion"], version);
        let interfaces = result["interfaces"].as_array().unwrap();
        assert_eq!(interfaces.len(), 3, "{version}: {result}");
        assert_eq!(interfaces[2]["name"], IFB);
        assert!(interfaces[2].get("sandbox").is_none());
        let ifb = pod.link(IFB);
        assert_eq!(ifb["mtu"], 1024);
        assert_eq!(ifb["linkinfo"]["info_kind"], "ifb");
        assert_eq!(interfaces[2]["mac"], ifb["address"]);
        assert!(ifb["flags"].as_array().unwrap().contains(&json!("UP")));

        let on_ifb = pod.qdiscs_of(IFB);
        assert_eq!(on_ifb.len(), 1, "{on_ifb:?}");
        assert_eq!(tbf_rate_limit(&on_ifb[0]), (2, 1));
        let on_host = pod.qdiscs_of(HOST_VETH);
        assert_eq!(on_host.len(), 2, "{on_host:?}");
        assert_eq!(tbf_rate_limit(&on_host[0]), (1, 1));
        assert_eq!(on_host[1]["kind"], "ingress");
        let filters = pod.ingress_filters();
        assert_eq!(filters.len(), 1, "{filters:?}");
        assert_eq!(filters[0]["protocol"], "all");
        assert_eq!(filters[0]["options"]["flowid"], "1:1");
        let actions = filters[0]["options"]["actions"].as_array().unwrap();
        assert_eq!(actions[0]["kind"], "mirred");
        assert_eq!(actions[0]["mirred_action"], "redirect");
        assert_eq!(actions[0]["to_dev"], IFB);

        let check = pod.call("CHECK", &conf);
        if version == "0.3.0" || version == "0.3.1" {
            assert_error(&check, 1, "config version does not allow CHECK");
        } else {
            check.assert_ok();
        }
        if version == "1.1.0" {
            pod.call("STATUS", &conf).assert_ok();
        }
        pod.call("DEL", &conf).assert_ok();
        assert!(pod.ifbs().is_empty(), "{version}: {:?}", pod.ifbs());
        pod.call("DEL", &conf).assert_ok();
    }
}

#[test]
fn versions_before_0_3_0_are_refused() {
    let pod = Pod::new("bwold");
    for version in ["0.1.0", "0.2.0"] {
        let mut conf = pod.conf("1.0.0", json!({"ingressRate": 8, "ingressBurst": 8}));
        conf["cniVersion"] = json!(version);
        let out = pod.call("ADD", &conf);
        assert_eq!(out.error_code(), 1, "{}", out.stdout);
    }
    assert!(pod.qdiscs_of(HOST_VETH).iter().all(|q| q["kind"] != "tbf"));
}

/// Ingress 0: no tbf on the host veth (its qdiscs are the ingress one
/// and the kernel's default), the ifb exists. Egress 0: no ifb, the host
/// tbf has rate 1000 and limit 35.
#[test]
fn one_direction_only() {
    for version in VERSIONS {
        let pod = Pod::new("bwin0");
        let conf = pod.conf(
            version,
            json!({"ingressRate": 0, "ingressBurst": 0, "egressRate": 8000, "egressBurst": 80}),
        );
        pod.call("ADD", &conf).assert_ok();
        assert_eq!(pod.ifbs(), [IFB]);
        let on_host = pod.qdiscs_of(HOST_VETH);
        assert!(on_host.iter().all(|q| q["kind"] != "tbf"), "{on_host:?}");
        assert!(on_host.iter().any(|q| q["kind"] == "ingress"));
        assert_eq!(tbf_rate_limit(&pod.qdiscs_of(IFB)[0]), (1000, 35));
        if version != "0.3.0" && version != "0.3.1" {
            pod.call("CHECK", &conf).assert_ok();
        }

        let pod = Pod::new("bweg0");
        let conf = pod.conf(
            version,
            json!({"ingressRate": 8000, "ingressBurst": 80, "egressRate": 0, "egressBurst": 0}),
        );
        let out = pod.call("ADD", &conf);
        out.assert_ok();
        assert_eq!(out.json()["interfaces"].as_array().unwrap().len(), 2);
        assert!(pod.ifbs().is_empty());
        let on_host = pod.qdiscs_of(HOST_VETH);
        assert_eq!(on_host.len(), 1, "{on_host:?}");
        assert_eq!(tbf_rate_limit(&on_host[0]), (1000, 35));
    }
}

/// runtimeConfig.bandwidth alone shapes like the top level; a bad top
/// level beats a good runtimeConfig; nothing to shape passes the previous
/// result through.
#[test]
fn runtime_config_and_precedence() {
    let pod = Pod::new("bwrc");
    let mut conf = pod.conf("1.0.0", json!({}));
    conf["runtimeConfig"] = json!({"bandwidth":
        {"ingressRate": 8000, "ingressBurst": 80, "egressRate": 16000, "egressBurst": 80}});
    pod.call("ADD", &conf).assert_ok();
    assert_eq!(tbf_rate_limit(&pod.qdiscs_of(HOST_VETH)[0]), (1000, 35));
    assert_eq!(tbf_rate_limit(&pod.qdiscs_of(IFB)[0]), (2000, 60));
    pod.call("CHECK", &conf).assert_ok();
    pod.call("DEL", &conf).assert_ok();

    let pod = Pod::new("bwrc2");
    let mut conf = pod.conf("1.0.0", json!({"ingressRate": 0, "ingressBurst": 123}));
    conf["RuntimeConfig"] = json!({"bandwidth": {"ingressRate": 8000, "ingressBurst": 80}});
    let out = pod.call("ADD", &conf);
    assert_error(&out, 7, "if burst is set, rate must also be set");
    assert!(pod.qdiscs_of(HOST_VETH).iter().all(|q| q["kind"] != "tbf"));

    let conf = pod.conf("1.0.0", json!({}));
    let out = pod.call("ADD", &conf);
    out.assert_ok();
    assert_eq!(out.json(), pod.prev_result("1.0.0"));
    assert!(pod.qdiscs_of(HOST_VETH).iter().all(|q| q["kind"] != "tbf"));
}

/// Bad input: spec errors with the reference's messages, nothing left.
#[test]
fn bad_input_changes_nothing() {
    let pod = Pod::new("bwbad");
    let before = pod.qdiscs();
    let cases = [
        (json!({"ingressRate": 8, "ingressBurst": 0}), 7, "if rate is set, burst must also be set"),
        (json!({"egressRate": 0, "egressBurst": 8}), 7, "if burst is set, rate must also be set"),
        (
            json!({"egressRate": 8, "egressBurst": 4u64 * 1024 * 1024 * 1024 * 8}),
            7,
            "burst cannot be more than 4GB",
        ),
        (
            json!({"ingressRate": 7, "ingressBurst": 8}),
            7,
            "rate 7 bit/s is less than one byte per second (8 bit/s), the smallest rate a token bucket can apply",
        ),
        (
            json!({"ingressRate": 8, "ingressBurst": 8,
                   "unshapedSubnets": ["10.0.0.0/8"], "shapedSubnets": ["10.1.0.0/16"]}),
            7,
            "unshapedSubnets and shapedSubnets cannot be both specified, one of them should be discarded",
        ),
        (
            json!({"ingressRate": 8, "ingressBurst": 8, "unshapedSubnets": ["10.0.0.0"]}),
            7,
            "bad subnet \"10.0.0.0\" provided, details invalid CIDR address: 10.0.0.0",
        ),
    ];
    for (entry, code, msg) in cases {
        let conf = pod.conf("1.0.0", entry);
        for command in ["ADD", "CHECK", "DEL"] {
            assert_error(&pod.call(command, &conf), code, msg);
        }
    }
    let out = pod.call("ADD", &pod.conf("1.0.0", json!({"ingressRate": "8"})));
    assert_eq!(out.error_code(), 7, "{}", out.stdout);
    let mut unchained = pod.conf("1.0.0", json!({"ingressRate": 8, "ingressBurst": 8}));
    unchained.as_object_mut().unwrap().remove("prevResult");
    assert_error(
        &pod.call("ADD", &unchained),
        7,
        "must be called as chained plugin",
    );
    assert_error(
        &pod.call("CHECK", &unchained),
        7,
        "must be called as a chained plugin",
    );
    assert_eq!(pod.qdiscs(), before);
    assert!(pod.ifbs().is_empty());
}

/// The host veth is found by the container veth's peer index, also among
/// other veths; a container interface that is no veth, an empty interface
/// list and a peer the previous result does not list are errors.
#[test]
fn host_veth_lookup() {
    let pod = Pod::new("bwpeer");
    let other = conformance::testnet::TestNetns::new("bwpeero");
    pod.host.ip(&[
        "link",
        "add",
        "host-veth2",
        "type",
        "veth",
        "peer",
        "name",
        "other-veth",
        "netns",
        other.name(),
    ]);
    let entry = json!({"ingressRate": 8, "ingressBurst": 8, "egressRate": 16, "egressBurst": 8});
    let mut conf = pod.conf("1.0.0", entry.clone());
    let interfaces = conf["prevResult"]["interfaces"].as_array_mut().unwrap();
    interfaces.insert(0, json!({"name": "host-veth2"}));
    interfaces.push(json!({"name": "other-veth", "sandbox": other.path()}));
    let out = pod.call("ADD", &conf);
    out.assert_ok();
    assert_eq!(out.json()["interfaces"].as_array().unwrap().len(), 5);
    assert_eq!(tbf_rate_limit(&pod.qdiscs_of(HOST_VETH)[0]), (1, 1));
    assert!(pod
        .qdiscs_of("host-veth2")
        .iter()
        .all(|q| q["kind"] != "tbf"));
    pod.call("DEL", &conf).assert_ok();
    pod.host.ip(&["link", "del", "host-veth2"]);

    let pod = Pod::new("bwpeer2");
    let mut conf = pod.conf("1.0.0", entry.clone());
    conf["prevResult"]["interfaces"] = json!([]);
    assert_error(&pod.call("ADD", &conf), 7, "no interfaces provided");
    let mut conf = pod.conf("1.0.0", entry.clone());
    conf["prevResult"]["interfaces"]
        .as_array_mut()
        .unwrap()
        .remove(0);
    assert_error(
        &pod.call("ADD", &conf),
        7,
        "no veth peer of container interface found in host ns",
    );
    pod.container.ip(&[
        "link",
        "add",
        "mv0",
        "link",
        CONTAINER_VETH,
        "type",
        "macvlan",
    ]);
    let conf = pod.conf("1.0.0", entry);
    let out = PluginCallExt::call_ifname(&pod, "mv0", "ADD", &conf);
    assert_eq!(out.error_code(), 7, "{}", out.stdout);
    let msg = out.json()["msg"].as_str().unwrap().to_string();
    assert!(
        msg.starts_with("container interface mv0 has no veth peer"),
        "{msg}"
    );
    assert!(pod
        .qdiscs_of(HOST_VETH)
        .iter()
        .all(|q| q["kind"] == "noqueue"));
    assert!(pod.ifbs().is_empty());
}

trait PluginCallExt {
    fn call_ifname(
        &self,
        ifname: &str,
        command: &str,
        conf: &Value,
    ) -> conformance::testnet::PluginOutcome;
}

impl PluginCallExt for Pod {
    fn call_ifname(
        &self,
        ifname: &str,
        command: &str,
        conf: &Value,
    ) -> conformance::testnet::PluginOutcome {
        conformance::testnet::PluginCall::new(command)
            .attachment(&self.container_id, &self.container.path(), ifname)
            .stdin_json(conf)
            .in_netns(&self.host)
            .run(Path::new(PLUGIN))
    }
}

/// A failure after the host veth's tbf is in place (the ifb's name is
/// taken) takes the tbf back and leaves the other device alone.
#[test]
fn failed_add_undoes_its_work() {
    let pod = Pod::new("bwundo");
    pod.host.ip(&["link", "add", IFB, "type", "ifb"]);
    let conf = pod.conf(
        "1.0.0",
        json!({"ingressRate": 8000, "ingressBurst": 80, "egressRate": 8000, "egressBurst": 80,
               "unshapedSubnets": ["10.9.0.0/16"]}),
    );
    let out = pod.call("ADD", &conf);
    assert_eq!(out.error_code(), 999, "{}", out.stdout);
    let msg = out.json()["msg"].as_str().unwrap().to_string();
    assert!(msg.starts_with("adding link: "), "{msg}");
    let on_host = pod.qdiscs_of(HOST_VETH);
    assert!(
        on_host.iter().all(|q| q["kind"] == "noqueue"),
        "left behind: {on_host:?}"
    );
    assert_eq!(pod.ifbs(), [IFB]);
}

/// CHECK notices a changed rate, a changed limit, a lost ifb and a lost
/// redirect.
#[test]
fn check_notices_damage() {
    let pod = Pod::new("bwchk");
    let conf = pod.conf(
        "1.0.0",
        json!({"ingressRate": 8000, "ingressBurst": 80, "egressRate": 8000, "egressBurst": 80}),
    );
    pod.call("ADD", &conf).assert_ok();
    pod.call("CHECK", &conf).assert_ok();
    let tc = |args: &[&str]| {
        let out = pod.host.exec("tc", args);
        assert!(
            out.status.success(),
            "tc {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    tc(&[
        "qdisc", "replace", "dev", HOST_VETH, "root", "handle", "1:", "tbf", "rate", "16000bit",
        "burst", "10", "latency", "25ms",
    ]);
    assert_error(&pod.call("CHECK", &conf), 999, "Rate doesn't match");
    tc(&[
        "qdisc", "replace", "dev", HOST_VETH, "root", "handle", "1:", "tbf", "rate", "8000bit",
        "burst", "10", "limit", "99",
    ]);
    assert_error(&pod.call("CHECK", &conf), 999, "Limit doesn't match");
    tc(&["qdisc", "del", "dev", HOST_VETH, "root"]);
    assert_error(&pod.call("CHECK", &conf), 999, "Failed to find qdisc");

    let pod = Pod::new("bwchk2");
    pod.call("ADD", &conf).assert_ok();
    pod.host
        .exec("tc", &["filter", "del", "dev", HOST_VETH, "ingress"]);
    let out = pod.call("CHECK", &conf);
    assert_eq!(out.error_code(), 999);
    let msg = out.json()["msg"].as_str().unwrap().to_string();
    assert!(
        msg.starts_with("the redirect filters on host-veth do not match"),
        "{msg}"
    );
    pod.host.ip(&["link", "del", IFB]);
    assert_error(
        &pod.call("CHECK", &conf),
        999,
        "get ifb device: Link not found",
    );
    // Nothing to shape: CHECK passes whatever is there.
    pod.call("CHECK", &pod.conf("1.0.0", json!({}))).assert_ok();
}

/// DEL needs neither the namespace nor the previous result.
#[test]
fn del_without_netns_or_prev_result() {
    let pod = Pod::new("bwdel");
    let mut conf = pod.conf("1.0.0", json!({"egressRate": 8000, "egressBurst": 80}));
    pod.call("ADD", &conf).assert_ok();
    conf.as_object_mut().unwrap().remove("prevResult");
    let out = conformance::testnet::PluginCall::new("DEL")
        .var("CNI_CONTAINERID", CONTAINER_ID)
        .var("CNI_IFNAME", CONTAINER_VETH)
        .stdin_json(&conf)
        .in_netns(&pod.host)
        .run(Path::new(PLUGIN));
    out.assert_ok();
    assert!(pod.ifbs().is_empty());
}

/// The reference and this plugin, same config, same namespace layout:
/// the same qdiscs (kind, handle, parent, rate, burst, limit) and the same
/// redirect; each one's CHECK accepts the other's work and this DEL
/// removes the reference's ifb.
#[test]
fn side_by_side_with_the_reference() {
    let reference = reference_plugin();
    for entry in [
        json!({"ingressRate": 8000, "ingressBurst": 80, "egressRate": 16000, "egressBurst": 800}),
        json!({"ingressRate": 1_000_000, "ingressBurst": 2_147_483_647u64,
               "egressRate": 1_000_000, "egressBurst": 21_474_836}),
        json!({"ingressRate": 100_000_000, "ingressBurst": 1_000_000}),
    ] {
        let ours = Pod::new("bwsso");
        let theirs = Pod::new("bwsst");
        let conf = ours.conf("1.0.0", entry.clone());
        ours.call("ADD", &conf).assert_ok();
        theirs
            .call_with(&reference, "ADD", &theirs.conf("1.0.0", entry.clone()))
            .assert_ok();
        assert_eq!(
            normalized(ours.qdiscs()),
            normalized(theirs.qdiscs()),
            "{entry}"
        );
        let redirect = |pod: &Pod| -> Vec<Value> {
            pod.ingress_filters()
                .iter()
                .map(|f| {
                    json!([
                        f["protocol"],
                        f["pref"],
                        f["options"]["flowid"],
                        f["options"]["match"],
                        f["options"]["actions"][0]["to_dev"],
                        f["options"]["actions"][0]["control_action"]
                    ])
                })
                .collect()
        };
        assert_eq!(redirect(&ours), redirect(&theirs));

        let theirs_conf = theirs.conf("1.0.0", entry.clone());
        theirs.call("CHECK", &theirs_conf).assert_ok();
        ours.call_with(&reference, "CHECK", &conf).assert_ok();
        theirs.call("DEL", &theirs_conf).assert_ok();
        assert!(theirs.ifbs().is_empty());
    }
}

/// Qdiscs without what differs between two namespaces (reference counts).
fn normalized(qdiscs: Vec<Value>) -> Vec<Value> {
    qdiscs
        .into_iter()
        .map(|mut q| {
            if let Some(q) = q.as_object_mut() {
                q.remove("refcnt");
            }
            q
        })
        .collect()
}

/// GC deletes the ifbs of this network's attachments that are not valid,
/// and keeps the valid one, another network's, and one without this
/// plugin's alias (the reference's).
#[test]
fn gc_deletes_only_this_networks_stale_ifbs() {
    let entry = json!({"egressRate": 8000, "egressBurst": 80});
    let keep = Pod::new("bwgck");
    let mut stale = Pod::new("bwgcs");
    stale.container_id = "stale".to_string();
    let mut other_net = Pod::new("bwgco");
    other_net.container_id = "stale".to_string();
    // All in one host namespace: move the pods' host veths there.
    let host = &keep.host;
    for (pod, veth) in [(&stale, "hv-stale"), (&other_net, "hv-other")] {
        pod.host.ip(&["link", "set", HOST_VETH, "name", veth]);
        pod.host.ip(&["link", "set", veth, "netns", host.name()]);
        host.ip(&["link", "set", veth, "up"]);
    }
    let call = |pod: &Pod, veth: &str, network: &str| {
        let mut conf = pod.conf("1.1.0", entry.clone());
        conf["name"] = json!(network);
        conf["prevResult"]["interfaces"][0]["name"] = json!(veth);
        conformance::testnet::PluginCall::new("ADD")
            .attachment(&pod.container_id, &pod.container.path(), CONTAINER_VETH)
            .stdin_json(&conf)
            .in_netns(host)
            .run(Path::new(PLUGIN))
            .assert_ok();
    };
    call(&keep, HOST_VETH, NETWORK);
    call(&stale, "hv-stale", NETWORK);
    call(&other_net, "hv-other", "other-net");
    host.ip(&["link", "add", "bwp000000000000", "type", "ifb"]);
    let kept_name = IFB;
    let stale_name = ifb_of(NETWORK, "stale");
    let other_name = ifb_of("other-net", "stale");
    let mut ifbs = keep.ifbs();
    ifbs.sort();
    let mut expected = vec![
        kept_name.to_string(),
        stale_name.clone(),
        other_name.clone(),
        "bwp000000000000".to_string(),
    ];
    expected.sort();
    assert_eq!(ifbs, expected);

    let gc = json!({
        "cniVersion": "1.1.0", "name": NETWORK, "type": "bandwidth",
        "egressRate": 8000, "egressBurst": 80,
        "cni.dev/valid-attachments": [{"containerID": CONTAINER_ID, "ifname": CONTAINER_VETH}],
    });
    conformance::testnet::PluginCall::new("GC")
        .stdin_json(&gc)
        .in_netns(host)
        .run(Path::new(PLUGIN))
        .assert_ok();
    let mut ifbs = keep.ifbs();
    ifbs.sort();
    let mut expected = vec![
        kept_name.to_string(),
        other_name,
        "bwp000000000000".to_string(),
    ];
    expected.sort();
    assert_eq!(ifbs, expected, "{stale_name} should be gone, nothing else");
}

/// The reference's name for a network and container (checked against its
/// test vector in the unit tests; recomputed here with the shell's
/// sha512sum so the test does not share the plugin's code).
fn ifb_of(network: &str, container_id: &str) -> String {
    let out = std::process::Command::new("sh")
        .args([
            "-c",
            "printf %s \"$1\" | sha512sum",
            "sh",
            &format!("{network}{container_id}"),
        ])
        .output()
        .expect("sha512sum");
    format!("bwp{}", &String::from_utf8_lossy(&out.stdout)[..12])
}
