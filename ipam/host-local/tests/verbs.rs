//! The built binary through every verb and every spec version: the
//! scenarios of the reference's host_local_test.go, plus CHECK, GC, STATUS
//! and the error codes.

mod common;

use std::fs;

use common::*;
use serde_json::{json, Value};

fn add(conf: &Value, cid: &str, netns: &str) -> Value {
    Call::new(OURS, "ADD", cid, netns).run(conf).ok()
}

fn del(conf: &Value, cid: &str, netns: &str) {
    Call::new(OURS, "DEL", cid, netns).run(conf).ok();
}

/// Per version: a raw result has `"version"` in its `ips` exactly for
/// 0.3.0 to 0.4.0, and the `ip4`/`ip6` layout before.
fn assert_result_layout(version: &str, result: &Value) {
    assert_eq!(result["cniVersion"], version);
    match version {
        "0.1.0" | "0.2.0" => {
            assert!(result.get("ips").is_none(), "{result}");
            assert!(result.get("ip4").is_some(), "{result}");
        }
        "0.3.0" | "0.3.1" | "0.4.0" => {
            for ip in result["ips"].as_array().unwrap() {
                assert!(ip["version"] == "4" || ip["version"] == "6", "{result}");
            }
        }
        _ => {
            for ip in result["ips"].as_array().unwrap() {
                assert!(ip.get("version").is_none(), "{result}");
                assert!(
                    ip.get("interface").is_none(),
                    "IPAM results name no interface"
                );
            }
        }
    }
}

#[test]
fn allocates_and_releases_dual_stack_with_add_del() {
    let netns = TestNetns::new("v");
    for version in ALL_VERSIONS {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path();
        fs::write(data.join("resolv.conf"), "nameserver 192.0.2.3").unwrap();
        let mut c = conf(
            version,
            "mynet",
            data,
            json!([[{"subnet": "10.1.2.0/24"}, {"subnet": "10.2.2.0/24"}], [{"subnet": "2001:db8:1::0/64"}]]),
        );
        c["ipam"]["resolvConf"] = json!(data.join("resolv.conf"));
        c["ipam"]["routes"] = json!([
            {"dst": "0.0.0.0/0"},
            {"dst": "::/0"},
            {"dst": "192.168.0.0/16", "gw": "1.1.1.1"},
            {"dst": "2001:db8:2::0/64", "gw": "2001:db8:3::1"}
        ]);

        let out = Call::new(OURS, "ADD", "dummy", &netns.path()).run(&c);
        let result = out.ok();
        assert!(
            out.stderr.is_empty(),
            "{version}: no stderr noise: {}",
            out.stderr
        );
        assert_result_layout(version, &result);
        match version {
            "0.1.0" | "0.2.0" => {
                assert_eq!(result["ip4"]["ip"], "10.1.2.2/24");
                assert_eq!(result["ip4"]["gateway"], "10.1.2.1");
                assert_eq!(
                    result["ip4"]["routes"],
                    json!([{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "1.1.1.1"}])
                );
                assert_eq!(result["ip6"]["ip"], "2001:db8:1::2/64");
                assert_eq!(result["ip6"]["gateway"], "2001:db8:1::1");
                assert_eq!(
                    result["ip6"]["routes"],
                    json!([{"dst": "::/0"}, {"dst": "2001:db8:2::/64", "gw": "2001:db8:3::1"}])
                );
            }
            _ => {
                let ips = result["ips"].as_array().unwrap();
                assert_eq!(ips.len(), 2, "{result}");
                assert_eq!(ips[0]["address"], "10.1.2.2/24");
                assert_eq!(ips[0]["gateway"], "10.1.2.1");
                assert_eq!(ips[1]["address"], "2001:db8:1::2/64");
                assert_eq!(ips[1]["gateway"], "2001:db8:1::1");
                assert_eq!(
                    result["routes"],
                    json!([
                        {"dst": "0.0.0.0/0"},
                        {"dst": "::/0"},
                        {"dst": "192.168.0.0/16", "gw": "1.1.1.1"},
                        {"dst": "2001:db8:2::/64", "gw": "2001:db8:3::1"}
                    ])
                );
            }
        }
        assert_eq!(
            result["dns"],
            json!({"nameservers": ["192.0.2.3"]}),
            "{version}"
        );

        let dir = store_dir(data, "mynet");
        assert_eq!(read(dir.join("10.1.2.2")), "dummy\r\neth0");
        assert_eq!(read(dir.join("2001:db8:1::2")), "dummy\r\neth0");
        assert_eq!(read(dir.join("last_reserved_ip.0")), "10.1.2.2");
        assert_eq!(read(dir.join("last_reserved_ip.1")), "2001:db8:1::2");

        del(&c, "dummy", &netns.path());
        assert!(leases(data, "mynet").is_empty(), "{version}");
        // DEL again: still fine, nothing printed.
        let out = Call::new(OURS, "DEL", "dummy", &netns.path()).run(&c);
        assert_eq!(out.ok(), Value::Null);
    }
}

#[test]
fn allocates_per_interface_on_two_networks() {
    let netns = TestNetns::new("v");
    for version in ALL_VERSIONS {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path();
        let c0 = conf(
            version,
            "mynet0",
            data,
            json!([[{"subnet": "10.1.2.0/24"}]]),
        );
        let c1 = conf(
            version,
            "mynet1",
            data,
            json!([[{"subnet": "10.2.2.0/24"}]]),
        );
        let r0 = Call::new(OURS, "ADD", "dummy", &netns.path()).run(&c0).ok();
        let r1 = Call::new(OURS, "ADD", "dummy", &netns.path())
            .ifname("eth1")
            .run(&c1)
            .ok();
        assert_result_layout(version, &r0);
        assert_result_layout(version, &r1);
        let f0 = store_dir(data, "mynet0").join("10.1.2.2");
        let f1 = store_dir(data, "mynet1").join("10.2.2.2");
        assert_eq!(read(&f0), "dummy\r\neth0");
        assert_eq!(read(&f1), "dummy\r\neth1");

        del(&c0, "dummy", &netns.path());
        assert!(!f0.exists());
        assert_eq!(
            read(&f1),
            "dummy\r\neth1",
            "{version}: other interface untouched"
        );
        Call::new(OURS, "DEL", "dummy", &netns.path())
            .ifname("eth1")
            .run(&c1)
            .ok();
        assert!(!f1.exists());
    }
}

#[test]
fn repeated_add_for_the_same_attachment_is_refused() {
    let netns = TestNetns::new("v");
    for version in ALL_VERSIONS {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path();
        let c = conf(
            version,
            "mynet0",
            data,
            json!([[{"subnet": "10.1.2.0/24"}]]),
        );
        let r0 = add(&c, "dummy", &netns.path());
        assert_eq!(result_addresses(&r0), ["10.1.2.2/24"]);

        let (code, msg) = Call::new(OURS, "ADD", "dummy", &netns.path()).run(&c).err();
        assert_eq!(code, 100, "{version}");
        assert_eq!(
            msg,
            "failed to allocate for range 0: 10.1.2.2 has been allocated to dummy, duplicate allocation is not allowed"
        );

        let r1 = add(&c, "dummy1", &netns.path());
        assert_eq!(result_addresses(&r1), ["10.1.2.3/24"], "{version}");
        assert_eq!(
            Call::new(OURS, "ADD", "dummy", &netns.path())
                .run(&c)
                .err()
                .0,
            100
        );

        del(&c, "dummy", &netns.path());
        assert!(!store_dir(data, "mynet0").join("10.1.2.2").exists());
        del(&c, "dummy1", &netns.path());
        assert!(leases(data, "mynet0").is_empty());
    }
}

#[test]
fn del_releases_a_legacy_lease() {
    let netns = TestNetns::new("v");
    for version in ALL_VERSIONS {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path();
        let c = conf(version, "mynet", data, json!([[{"subnet": "10.1.2.0/24"}]]));
        add(&c, "dummy", &netns.path());
        let lease = store_dir(data, "mynet").join("10.1.2.2");
        assert_eq!(read(&lease), "dummy\r\neth0");
        // Rewritten the way the oldest reference versions wrote leases.
        fs::write(&lease, "dummy").unwrap();
        del(&c, "dummy", &netns.path());
        assert!(!lease.exists(), "{version}");
    }
}

#[test]
fn del_of_an_unknown_container_succeeds_and_creates_nothing() {
    let netns = TestNetns::new("v");
    for version in ALL_VERSIONS {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let mut c = conf(version, "mynet", &data, json!(null));
        c["ipam"]["subnet"] = json!("10.1.2.0/24");
        let out = Call::new(OURS, "DEL", "dummy", &netns.path()).run(&c);
        assert_eq!(out.ok(), Value::Null, "{version}");
        // Also without CNI_NETNS, as containerd's second DEL.
        Call::new(OURS, "DEL", "dummy", "").run(&c).ok();
        assert!(!data.exists(), "{version}: DEL created the store");
    }
}

#[test]
fn whitespace_around_the_container_id_is_refused_by_the_skeleton() {
    // The reference trims it; the skeleton validates CNI_CONTAINERID first
    // (the library trims too: see the plugin unit tests).
    let netns = TestNetns::new("v");
    let tmp = tempfile::tempdir().unwrap();
    let mut c = conf("1.0.0", "mynet", tmp.path(), json!(null));
    c["ipam"]["subnet"] = json!("10.1.2.0/24");
    let (code, _) = Call::new(OURS, "ADD", "   dummy\n ", &netns.path())
        .run(&c)
        .err();
    assert_eq!(code, 4);
    assert!(leases(tmp.path(), "mynet").is_empty());
}

#[test]
fn allocates_a_requested_address_from_args() {
    let netns = TestNetns::new("v");
    for version in ALL_VERSIONS {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = conf(
            version,
            "mynet",
            tmp.path(),
            json!([[{"subnet": "10.1.2.0/24"}]]),
        );
        c["args"] = json!({"cni": {"ips": ["10.1.2.88"]}});
        let r = add(&c, "dummy", &netns.path());
        assert_eq!(result_addresses(&r), ["10.1.2.88/24"], "{version}");
    }
}

#[test]
fn allocates_requested_addresses_from_several_ranges() {
    let netns = TestNetns::new("v");
    for version in ALL_VERSIONS {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = conf(
            version,
            "mynet",
            tmp.path(),
            json!([[{"subnet": "10.1.2.0/24"}], [{"subnet": "10.1.3.0/24"}]]),
        );
        c["args"] = json!({"cni": {"ips": ["10.1.2.88", "10.1.3.77"]}});
        let out = Call::new(OURS, "ADD", "dummy", &netns.path()).run(&c);
        if matches!(version, "0.1.0" | "0.2.0") {
            let (code, msg) = out.err();
            assert_eq!(code, 7);
            assert_eq!(
                msg,
                format!("CNI version {version} does not support more than 1 address per family")
            );
        } else {
            assert_eq!(
                result_addresses(&out.ok()),
                ["10.1.2.88/24", "10.1.3.77/24"],
                "{version}"
            );
        }
    }
}

#[test]
fn allocates_requested_addresses_of_both_families() {
    let netns = TestNetns::new("v");
    for version in ALL_VERSIONS {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = conf(
            version,
            "mynet",
            tmp.path(),
            json!([[{"subnet": "172.16.1.0/24"}, {"subnet": "10.1.2.0/24"}], [{"subnet": "2001:db8:1::/48"}]]),
        );
        c["args"] = json!({"cni": {"ips": ["10.1.2.88", "2001:db8:1::999"]}});
        let r = add(&c, "dummy", &netns.path());
        assert_eq!(
            result_addresses(&r),
            ["10.1.2.88/24", "2001:db8:1::999/48"],
            "{version}"
        );
    }
}

#[test]
fn fails_when_a_requested_address_is_not_used() {
    let netns = TestNetns::new("v");
    for version in ALL_VERSIONS {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = conf(
            version,
            "mynet",
            tmp.path(),
            json!([[{"subnet": "10.1.2.0/24"}], [{"subnet": "10.1.3.0/24"}]]),
        );
        c["args"] = json!({"cni": {"ips": ["10.1.2.88", "10.1.2.77"]}});
        let (code, msg) = Call::new(OURS, "ADD", "dummy", &netns.path()).run(&c).err();
        assert_eq!(code, 7);
        if matches!(version, "0.1.0" | "0.2.0") {
            assert!(
                msg.contains("does not support more than 1 address per family"),
                "{msg}"
            );
        } else {
            assert_eq!(msg, "failed to allocate all requested IPs: 10.1.2.77");
            // Nothing stays reserved after the failure.
            assert!(leases(tmp.path(), "mynet").is_empty(), "{version}");
        }
    }
}

#[test]
fn requested_addresses_from_cni_args_and_runtime_config() {
    let netns = TestNetns::new("v");
    let tmp = tempfile::tempdir().unwrap();
    let c = conf(
        "1.0.0",
        "mynet",
        tmp.path(),
        json!([[{"subnet": "10.1.2.0/24"}], [{"subnet": "2001:db8::/64"}]]),
    );
    let r = Call::new(OURS, "ADD", "a", &netns.path())
        .cni_args("IgnoreUnknown=1;K8S_POD_NAME=x;IP=10.1.2.50/24")
        .run(&c)
        .ok();
    assert_eq!(result_addresses(&r), ["10.1.2.50/24", "2001:db8::2/64"]);

    let mut rc = c.clone();
    rc["runtimeConfig"] = json!({"ips": ["2001:db8::77/64"]});
    let r = Call::new(OURS, "ADD", "b", &netns.path()).run(&rc).ok();
    assert_eq!(result_addresses(&r), ["10.1.2.51/24", "2001:db8::77/64"]);

    let (code, msg) = Call::new(OURS, "ADD", "c", &netns.path())
        .cni_args("IP=10.1.2.999")
        .run(&c)
        .err();
    assert_eq!(code, 4, "{msg}");
    let (code, msg) = Call::new(OURS, "ADD", "c", &netns.path())
        .cni_args("FOO=bar")
        .run(&c)
        .err();
    assert_eq!(
        (code, msg.as_str()),
        (4, r#"ARGS: unknown args ["FOO=bar"]"#)
    );
}

#[test]
fn requested_address_held_by_another_is_try_again_later() {
    let netns = TestNetns::new("v");
    let tmp = tempfile::tempdir().unwrap();
    let mut c = conf(
        "1.0.0",
        "mynet",
        tmp.path(),
        json!([[{"subnet": "10.1.2.0/24"}]]),
    );
    c["args"] = json!({"cni": {"ips": ["10.1.2.9"]}});
    add(&c, "a", &netns.path());
    let (code, msg) = Call::new(OURS, "ADD", "b", &netns.path()).run(&c).err();
    assert_eq!(code, 11);
    assert_eq!(
        msg,
        "failed to allocate for range 0: requested IP address 10.1.2.9 is not available in range set 10.1.2.1-10.1.2.254"
    );
    c["args"] = json!({"cni": {"ips": ["10.1.2.1"]}});
    let (code, msg) = Call::new(OURS, "ADD", "b", &netns.path()).run(&c).err();
    assert_eq!(
        (code, msg.as_str()),
        (
            7,
            "failed to allocate for range 0: requested ip 10.1.2.1 is subnet's gateway"
        )
    );
}

#[test]
fn exhaustion_is_reported_with_code_50_and_rolls_back() {
    let netns = TestNetns::new("v");
    let tmp = tempfile::tempdir().unwrap();
    let mut c = conf(
        "1.1.0",
        "mynet",
        tmp.path(),
        json!([[{"subnet": "10.1.2.0/24"}], [{"subnet": "10.9.0.0/30"}]]),
    );
    Call::new(OURS, "STATUS", "", "").run(&c).ok();
    add(&c, "a", &netns.path());
    // The /30 has one address (.2); the second pod finds the set full.
    let (code, msg) = Call::new(OURS, "ADD", "b", &netns.path()).run(&c).err();
    assert_eq!(code, 50);
    assert_eq!(
        msg,
        "failed to allocate for range 1: no IP addresses available in range set: 10.9.0.1-10.9.0.2"
    );
    assert_eq!(
        leases(tmp.path(), "mynet").into_iter().collect::<Vec<_>>(),
        ["10.1.2.2", "10.9.0.2"],
        "the address b got from the first set was given back"
    );
    let (code, msg) = Call::new(OURS, "STATUS", "", "").run(&c).err();
    assert_eq!(code, 50);
    assert_eq!(
        msg,
        "no IP addresses available in range set 1: 10.9.0.1-10.9.0.2"
    );
    del(&c, "a", &netns.path());
    Call::new(OURS, "STATUS", "", "").run(&c).ok();
    // STATUS and GC need a 1.1.0 configuration.
    c["cniVersion"] = json!("1.0.0");
    assert_eq!(Call::new(OURS, "STATUS", "", "").run(&c).err().0, 1);
}

#[test]
fn check_finds_the_attachment() {
    let netns = TestNetns::new("v");
    for version in ["0.4.0", "1.0.0", "1.1.0"] {
        let tmp = tempfile::tempdir().unwrap();
        let c = conf(
            version,
            "mynet",
            tmp.path(),
            json!([[{"subnet": "10.1.2.0/24"}]]),
        );
        let (code, msg) = Call::new(OURS, "CHECK", "dummy", &netns.path())
            .run(&c)
            .err();
        assert_eq!(code, 999);
        assert_eq!(
            msg,
            "host-local: Failed to find address added by container dummy"
        );
        add(&c, "dummy", &netns.path());
        assert_eq!(
            Call::new(OURS, "CHECK", "dummy", &netns.path())
                .run(&c)
                .ok(),
            Value::Null
        );
        assert_eq!(
            Call::new(OURS, "CHECK", "dummy", &netns.path())
                .ifname("eth1")
                .run(&c)
                .err()
                .0,
            999
        );
        // A legacy lease, as the oldest reference versions created it,
        // counts for every interface of its container.
        fs::write(store_dir(tmp.path(), "mynet").join("10.1.2.77"), "dummy").unwrap();
        Call::new(OURS, "CHECK", "dummy", &netns.path())
            .ifname("eth1")
            .run(&c)
            .ok();
    }
    let tmp = tempfile::tempdir().unwrap();
    let c = conf(
        "0.3.1",
        "mynet",
        tmp.path(),
        json!([[{"subnet": "10.1.2.0/24"}]]),
    );
    assert_eq!(
        Call::new(OURS, "CHECK", "dummy", &netns.path())
            .run(&c)
            .err()
            .0,
        1
    );
}

#[test]
fn gc_releases_what_is_not_valid_any_more() {
    let netns = TestNetns::new("v");
    for key in ["cni.dev/valid-attachments", "cni.dev/attachments"] {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path();
        let c = conf(
            "1.1.0",
            "mynet",
            data,
            json!([[{"subnet": "10.1.2.0/24"}], [{"subnet": "2001:db8::/64"}]]),
        );
        add(&c, "keep", &netns.path());
        add(&c, "gone", &netns.path());
        Call::new(OURS, "ADD", "keep", &netns.path())
            .ifname("net1")
            .run(&c)
            .ok();
        let dir = store_dir(data, "mynet");
        fs::write(dir.join("10.1.2.100"), "keep").unwrap();
        fs::write(dir.join("10.1.2.101"), "gone").unwrap();

        let mut gc = c.clone();
        gc[key] = json!([{"containerID": "keep", "ifname": "eth0"}]);
        assert_eq!(
            Call::new(OURS, "GC", "", "").run(&gc).ok(),
            Value::Null,
            "{key}"
        );
        assert_eq!(
            leases(data, "mynet").into_iter().collect::<Vec<_>>(),
            ["10.1.2.100", "10.1.2.2", "2001:db8::2"],
            "{key}"
        );
        for kept in ["lock", "last_reserved_ip.0", "last_reserved_ip.1"] {
            assert!(dir.join(kept).exists(), "{key}: {kept}");
        }
        // The index follows: DEL of the valid pod releases both its leases.
        del(&c, "keep", &netns.path());
        assert_eq!(
            leases(data, "mynet").into_iter().collect::<Vec<_>>(),
            ["10.1.2.100"],
            "the legacy lease is not keep/eth0's own"
        );
        // An empty list means nothing is valid.
        let mut gc = c.clone();
        gc[key] = json!([]);
        Call::new(OURS, "GC", "", "").run(&gc).ok();
        assert!(leases(data, "mynet").is_empty(), "{key}");
    }

    let tmp = tempfile::tempdir().unwrap();
    let c = conf(
        "1.1.0",
        "mynet",
        tmp.path(),
        json!([[{"subnet": "10.1.2.0/24"}]]),
    );
    add(&c, "a", &netns.path());
    // Without either key nothing is known to be valid or stale: the GC
    // succeeds and releases nothing.
    Call::new(OURS, "GC", "", "").run(&c).ok();
    assert_eq!(leases(tmp.path(), "mynet").len(), 1);
    let mut gc = c.clone();
    gc["cni.dev/valid-attachments"] = json!(null);
    Call::new(OURS, "GC", "", "").run(&gc).ok();
    assert!(
        leases(tmp.path(), "mynet").is_empty(),
        "null is an empty list"
    );
}

#[test]
fn version_lists_every_spec_version() {
    let out = Call::new(OURS, "VERSION", "", "").run(&json!({"cniVersion": "0.4.0"}));
    let v = out.ok();
    assert_eq!(v["supportedVersions"], json!(ALL_VERSIONS));
}

#[test]
fn names_and_ids_that_leave_the_data_dir_are_refused_before_any_file_is_touched() {
    let netns = TestNetns::new("v");
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    for name in ["..", "../x", "a/b", "/abs"] {
        for command in ["ADD", "DEL", "CHECK"] {
            let c = conf("1.0.0", name, &data, json!([[{"subnet": "10.1.2.0/24"}]]));
            let (code, _) = Call::new(OURS, command, "dummy", &netns.path())
                .run(&c)
                .err();
            assert_eq!(code, 7, "{command} {name:?}");
        }
    }
    for id in ["..", "../x", "a/b"] {
        let c = conf(
            "1.0.0",
            "mynet",
            &data,
            json!([[{"subnet": "10.1.2.0/24"}]]),
        );
        let (code, _) = Call::new(OURS, "ADD", id, &netns.path()).run(&c).err();
        assert_eq!(code, 4, "{id:?}");
    }
    assert!(!data.exists());
    let mut entries: Vec<String> = fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    entries.sort();
    assert!(entries.is_empty(), "{entries:?}");
}

#[test]
fn unreadable_resolv_conf_fails_the_add() {
    let netns = TestNetns::new("v");
    let tmp = tempfile::tempdir().unwrap();
    let mut c = conf(
        "1.0.0",
        "mynet",
        tmp.path(),
        json!([[{"subnet": "10.1.2.0/24"}]]),
    );
    c["ipam"]["resolvConf"] = json!(tmp.path().join("missing.conf"));
    let (code, msg) = Call::new(OURS, "ADD", "a", &netns.path()).run(&c).err();
    assert_eq!(code, 5);
    assert!(msg.starts_with("failed to read resolvConf"), "{msg}");
    assert!(leases(tmp.path(), "mynet").is_empty());
}

#[test]
fn invalid_configurations_are_code_7() {
    let netns = TestNetns::new("v");
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        (json!({"cniVersion": "1.0.0", "name": "n"}), "IPAM config missing 'ipam' key"),
        (
            json!({"cniVersion": "1.0.0", "name": "n", "ipam": {"type": "host-local", "dataDir": tmp.path()}}),
            "no IP ranges specified",
        ),
        (
            conf("1.0.0", "n", tmp.path(), json!([[{"subnet": "192.0.2.12/24"}]])),
            "invalid range set 0: Network has host bits set. For a subnet mask of length 24 the network address is 192.0.2.0",
        ),
        (
            conf("1.0.0", "n", tmp.path(), json!([[{"subnet": "10.1.0.0/16"}], [{"subnet": "10.1.2.0/24"}]])),
            "range set 0 overlaps with 1",
        ),
    ];
    for (c, expected) in cases {
        let (code, msg) = Call::new(OURS, "ADD", "a", &netns.path()).run(&c).err();
        assert_eq!((code, msg.as_str()), (7, expected));
    }
    assert!(leases(tmp.path(), "n").is_empty());
}

/// `ipam.dataDir` is confined to the state folders (issue 28): with Multus
/// a namespace user writes it, and leases are written and deleted there.
/// The test's node policy allows only `allowed/`; a folder beside it, a
/// relative one and a link from `allowed/` to it are refused by every
/// verb (code 7, naming the key and the policy setting), and nothing is
/// made. The reference accepts any folder.
#[test]
fn a_data_dir_outside_the_state_folders_is_refused_by_every_verb() {
    let netns = TestNetns::new("v");
    let tmp = tempfile::tempdir().unwrap();
    let (allowed, outside) = (tmp.path().join("allowed"), tmp.path().join("outside"));
    fs::create_dir_all(&allowed).unwrap();
    fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, allowed.join("link")).unwrap();
    let policy = tmp.path().join("policy.json");
    fs::write(&policy, json!({"allow": {"state": [&allowed]}}).to_string()).unwrap();
    // Not writable by others whatever the umask, or it is refused.
    fs::set_permissions(&policy, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let run = |command: &str, data: &std::path::Path| {
        let mut c = conf("1.1.0", "net", data, json!([[{"subnet": "10.1.2.0/24"}]]));
        c["cni.dev/valid-attachments"] = json!([]);
        let mut cmd = std::process::Command::new(OURS);
        cmd.env_clear()
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", "a")
            .env("CNI_IFNAME", "eth0")
            .env("CNI_NETNS", netns.path())
            .env("CNI_PATH", "/usr/lib/cni")
            .env(libcni::confine::POLICY_ENV, &policy)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        run_with_stdin(cmd, &c)
    };
    let outside_data = outside.join("leases");
    for command in ["ADD", "CHECK", "DEL", "GC", "STATUS"] {
        let (code, msg) = run(command, &outside_data).err();
        assert_eq!(code, 7, "{command}: {msg}");
        assert_eq!(
            msg,
            format!(
                "ipam.dataDir {outside_data:?} is outside the folders allowed for state \
                 (/var/lib/cni, /run/cni, {}); the node's administrator can allow a folder \
                 with \"allow\": {{\"state\": [\"/folder\"]}} in {}",
                allowed.display(),
                policy.display()
            ),
            "{command}"
        );
        let (code, msg) = run(command, std::path::Path::new("leases")).err();
        assert_eq!(code, 7, "{command}: {msg}");
        assert!(msg.contains("must be an absolute path"), "{command}: {msg}");
        let (code, msg) = run(command, &allowed.join("link")).err();
        assert_eq!(code, 7, "{command}: {msg}");
        assert!(
            msg.contains("is reached through a symbolic link"),
            "{command}: {msg}"
        );
    }
    assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);
    // Inside the allowed folder, the same configuration works.
    let inside = allowed.join("leases");
    run("ADD", &inside).ok();
    assert_eq!(
        leases(&inside, "net"),
        std::collections::BTreeSet::from(["10.1.2.2".to_string()])
    );
    run("DEL", &inside).ok();
}
