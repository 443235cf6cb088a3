//! Golden JSON for every (source version, target version) pair.

use super::*;
use crate::version::{ResultFamily, SpecVersion};
use serde_json::{json, Value};

fn with_version(mut v: Value, version: SpecVersion) -> Value {
    v["cniVersion"] = json!(version.as_str());
    v
}

/// One rich source result per family.
fn source(family: ResultFamily) -> Value {
    match family {
        ResultFamily::V1 => json!({
            "interfaces": [
                {"name": "cni0", "mac": "00:11:22:33:44:55"},
                {"name": "veth1234", "mac": "66:77:88:99:aa:bb", "mtu": 1500},
                {"name": "eth0", "mac": "0a:58:0a:16:00:05", "mtu": 1500,
                 "sandbox": "/var/run/netns/blue", "socketPath": "/run/sock",
                 "pciID": "0000:af:06.0"}
            ],
            "ips": [
                {"interface": 2, "address": "10.22.0.5/16", "gateway": "10.22.0.1"},
                {"interface": 2, "address": "fd00:22::5/64", "gateway": "fd00:22::1"},
                {"interface": 0, "address": "10.23.0.9/24"}
            ],
            "routes": [
                {"dst": "0.0.0.0/0", "gw": "10.22.0.1", "mtu": 1400, "advmss": 1360,
                 "priority": 10, "table": 100, "scope": 0},
                {"dst": "::/0", "gw": "fd00:22::1"},
                {"dst": "192.168.0.0/16"}
            ],
            "dns": {"nameservers": ["10.22.0.1"], "domain": "cluster.local",
                    "search": ["svc.cluster.local"], "options": ["ndots:5"]}
        }),
        ResultFamily::V04 => json!({
            "interfaces": [
                {"name": "eth0", "mac": "0a:58:0a:16:00:05", "sandbox": "/var/run/netns/blue"}
            ],
            "ips": [
                {"version": "6", "interface": 0, "address": "fd00:22::5/64", "gateway": "fd00:22::1"},
                {"version": "4", "interface": 0, "address": "10.22.0.5/16", "gateway": "10.22.0.1"},
                {"version": "4", "address": "10.23.0.9/24"}
            ],
            "routes": [
                {"dst": "0.0.0.0/0", "gw": "10.22.0.1", "mtu": 1400},
                {"dst": "::/0"}
            ],
            "dns": {"nameservers": ["10.22.0.1"]}
        }),
        ResultFamily::V02 => json!({
            "ip4": {"ip": "10.1.2.3/24", "gateway": "10.1.2.1",
                    "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.2.1"}]},
            "ip6": {"ip": "2001:db8::3/64", "routes": [{"dst": "::/0"}]},
            "dns": {"nameservers": ["8.8.8.8"], "search": ["example.com"]}
        }),
    }
}

/// What `source(from)` becomes in the layout `to`.
fn expected(from: ResultFamily, to: ResultFamily) -> Value {
    use ResultFamily::*;
    match (from, to) {
        (V1, V1) | (V04, V04) | (V02, V02) => source(from),
        (V1, V04) => json!({
            "interfaces": [
                {"name": "cni0", "mac": "00:11:22:33:44:55"},
                {"name": "veth1234", "mac": "66:77:88:99:aa:bb"},
                {"name": "eth0", "mac": "0a:58:0a:16:00:05", "sandbox": "/var/run/netns/blue"}
            ],
            "ips": [
                {"version": "4", "interface": 2, "address": "10.22.0.5/16", "gateway": "10.22.0.1"},
                {"version": "6", "interface": 2, "address": "fd00:22::5/64", "gateway": "fd00:22::1"},
                {"version": "4", "interface": 0, "address": "10.23.0.9/24"}
            ],
            "routes": source(V1)["routes"].clone(),
            "dns": source(V1)["dns"].clone()
        }),
        (V1, V02) => json!({
            "ip4": {"ip": "10.22.0.5/16", "gateway": "10.22.0.1",
                    "routes": [{"dst": "0.0.0.0/0", "gw": "10.22.0.1"}, {"dst": "192.168.0.0/16"}]},
            "ip6": {"ip": "fd00:22::5/64", "gateway": "fd00:22::1",
                    "routes": [{"dst": "::/0", "gw": "fd00:22::1"}]},
            "dns": source(V1)["dns"].clone()
        }),
        (V04, V1) => json!({
            "interfaces": [
                {"name": "eth0", "mac": "0a:58:0a:16:00:05", "sandbox": "/var/run/netns/blue"}
            ],
            "ips": [
                {"interface": 0, "address": "fd00:22::5/64", "gateway": "fd00:22::1"},
                {"interface": 0, "address": "10.22.0.5/16", "gateway": "10.22.0.1"},
                {"address": "10.23.0.9/24"}
            ],
            "routes": source(V04)["routes"].clone(),
            "dns": {"nameservers": ["10.22.0.1"]}
        }),
        (V04, V02) => json!({
            "ip4": {"ip": "10.22.0.5/16", "gateway": "10.22.0.1",
                    "routes": [{"dst": "0.0.0.0/0", "gw": "10.22.0.1"}]},
            "ip6": {"ip": "fd00:22::5/64", "gateway": "fd00:22::1",
                    "routes": [{"dst": "::/0"}]},
            "dns": {"nameservers": ["10.22.0.1"]}
        }),
        (V02, V04) => json!({
            "ips": [
                {"version": "4", "address": "10.1.2.3/24", "gateway": "10.1.2.1"},
                {"version": "6", "address": "2001:db8::3/64"}
            ],
            "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.2.1"}, {"dst": "::/0"}],
            "dns": {"nameservers": ["8.8.8.8"], "search": ["example.com"]}
        }),
        (V02, V1) => json!({
            "ips": [
                {"address": "10.1.2.3/24", "gateway": "10.1.2.1"},
                {"address": "2001:db8::3/64"}
            ],
            "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.2.1"}, {"dst": "::/0"}],
            "dns": {"nameservers": ["8.8.8.8"], "search": ["example.com"]}
        }),
    }
}

#[test]
fn every_conversion_pair_matches_golden_json() {
    let mut pairs = 0;
    for from in SpecVersion::ALL {
        for to in SpecVersion::ALL {
            let src = with_version(source(from.family()), from);
            let bytes = serde_json::to_vec(&src).unwrap();
            let parsed = AnyResult::from_slice(&bytes, SpecVersion::V1_0_0).unwrap();
            assert_eq!(parsed.version(), from);
            let converted = parsed
                .convert_to(to)
                .unwrap_or_else(|e| panic!("{from} -> {to}: {e}"));
            assert_eq!(converted.version(), to);
            let want = with_version(expected(from.family(), to.family()), to);
            assert_eq!(converted.to_value(), want, "{from} -> {to}");
            pairs += 1;
        }
    }
    assert_eq!(pairs, 49);
}

#[test]
fn l2_only_result_cannot_go_down_to_0_2_0() {
    let l2 = json!({"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "mac": "0a:58:0a:16:00:05"}]});
    for to in [SpecVersion::V0_1_0, SpecVersion::V0_2_0] {
        let r = AnyResult::from_value(l2.clone(), SpecVersion::V1_0_0).unwrap();
        let err = r.convert_to(to).unwrap_err();
        assert!(matches!(err, ResultError::NoValidIps));
        assert_eq!(err.to_string(), "cannot convert: no valid IP addresses");
    }
    // The 0.4.0 form of the same result is fine.
    let r = AnyResult::from_value(l2, SpecVersion::V1_0_0).unwrap();
    assert!(r.convert_to(SpecVersion::V0_4_0).is_ok());
}

#[test]
fn missing_or_empty_version_takes_the_default() {
    for src in [
        json!({"ips": []}),
        json!({"cniVersion": "", "ips": []}),
        json!({"cniVersion": null}),
    ] {
        let r = AnyResult::from_value(src, SpecVersion::V0_3_1).unwrap();
        assert_eq!(r.version(), SpecVersion::V0_3_1);
        assert!(matches!(r, AnyResult::V04(_)));
    }
}

#[test]
fn bad_versions_and_shapes_are_errors_not_panics() {
    let cases = [
        json!({"cniVersion": "9.9.9"}),
        json!({"cniVersion": 1}),
        json!([1, 2]),
        json!({"cniVersion": "1.0.0", "ips": [{"address": "not-an-ip"}]}),
        json!({"cniVersion": "1.0.0", "ips": [{"interface": -1, "address": "10.0.0.1/24"}]}),
        json!({"cniVersion": "0.2.0", "ip4": {"ip": 7}}),
    ];
    for c in cases {
        assert!(
            AnyResult::from_value(c.clone(), SpecVersion::V1_0_0).is_err(),
            "{c}"
        );
    }
    assert!(AnyResult::from_slice(b"", SpecVersion::V1_0_0).is_err());
    assert!(AnyResult::from_slice(b"{", SpecVersion::V1_0_0).is_err());
}

#[test]
fn interface_index_zero_is_written_and_empty_dns_is_left_out() {
    let r = v100::Result {
        ips: vec![v100::IpConfig {
            interface: Some(0),
            address: "10.0.0.2/24".parse().unwrap(),
            gateway: None,
        }],
        ..v100::Result::new()
    };
    let v = AnyResult::from(r).to_value();
    assert_eq!(v["ips"][0]["interface"], json!(0));
    assert!(v.get("dns").is_none());
    assert!(v.get("interfaces").is_none());
    assert!(v.get("routes").is_none());
}

#[test]
fn null_lists_and_dns_are_accepted() {
    let src = json!({"cniVersion": "1.0.0", "interfaces": null, "ips": null, "routes": null, "dns": null});
    let r = AnyResult::from_value(src, SpecVersion::V1_0_0).unwrap();
    assert_eq!(r.to_value(), json!({"cniVersion": "1.0.0"}));
}

#[test]
fn host_bits_are_kept_in_addresses() {
    let src = json!({"cniVersion": "1.1.0", "ips": [{"address": "1.2.3.30/24"}]});
    let r = AnyResult::from_value(src, SpecVersion::V1_1_0).unwrap();
    assert_eq!(r.to_value()["ips"][0]["address"], json!("1.2.3.30/24"));
}

#[test]
fn pretty_output_is_indented_by_four_and_newline_terminated() {
    let r = AnyResult::from(v100::Result::new());
    let out = String::from_utf8(r.to_pretty_json()).unwrap();
    assert_eq!(out, "{\n    \"cniVersion\": \"1.1.0\"\n}\n");
}

#[test]
fn try_from_brings_old_results_to_1_1_0() {
    let src = with_version(source(ResultFamily::V02), SpecVersion::V0_2_0);
    let r = AnyResult::from_value(src, SpecVersion::V0_2_0).unwrap();
    let cur = v100::Result::try_from(r).unwrap();
    assert_eq!(cur.cni_version, SpecVersion::V1_1_0);
    assert_eq!(cur.ips.len(), 2);
    // A 1.0.0 result keeps its label.
    let r = AnyResult::from_value(json!({"cniVersion": "1.0.0"}), SpecVersion::V1_0_0).unwrap();
    assert_eq!(
        v100::Result::try_from(r).unwrap().cni_version,
        SpecVersion::V1_0_0
    );
}

#[test]
fn a_0_4_0_address_without_version_takes_its_family() {
    let src = json!({"cniVersion": "0.3.1", "ips": [
        {"address": "127.0.0.1/8", "interface": 0},
        {"address": "::1/128", "interface": 0}
    ]});
    let r = AnyResult::from_value(src, SpecVersion::V0_3_1).unwrap();
    let v = r.to_value();
    assert_eq!(v["ips"][0]["version"], "4");
    assert_eq!(v["ips"][1]["version"], "6");
}
