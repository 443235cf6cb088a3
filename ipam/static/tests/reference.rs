//! Same input to ours and to the reference plugin (the Debian package's
//! /usr/lib/cni/static, 1.1.1, which speaks up to 1.0.0): the same result
//! JSON, and the same error message where the reference fails (its code is
//! always 999; ours is the spec's).

mod common;

use std::path::Path;

use common::*;
use conformance::testnet::{TestNetns, REFERENCE_DIR};
use serde_json::{json, Value};

/// The versions the reference speaks.
const REFERENCE_VERSIONS: [&str; 6] = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0"];

fn reference() -> std::path::PathBuf {
    let path = Path::new(REFERENCE_DIR).join("static");
    assert!(
        path.exists(),
        "{} is missing: this test compares against the reference plugin \
         (apt-get install containernetworking-plugins)",
        path.display()
    );
    path
}

/// The reference always prints `dns`, empty or not; results leave an
/// empty one out.
fn without_empty_dns(mut result: Value) -> Value {
    if result["dns"] == json!({}) {
        if let Some(obj) = result.as_object_mut() {
            obj.remove("dns");
        }
    }
    result
}

/// Runs `command` on both with the same input and compares: both succeed
/// with the same output, or both fail with the same message (returns our
/// error code then).
fn compare(ns: &TestNetns, command: &str, c: &Value, cni_args: &str) -> Option<u64> {
    let theirs = Call::new(reference(), command, ns)
        .cni_args(cni_args)
        .run(c);
    let ours = Call::ours(command, ns).cni_args(cni_args).run(c);
    let context = format!("{command} {c} CNI_ARGS={cni_args:?}");
    if theirs.code == 0 {
        assert_eq!(ours.code, 0, "{context}: ours failed: {}", ours.stdout);
        if theirs.stdout.is_empty() {
            assert_eq!(ours.stdout, "", "{context}");
        } else {
            assert_eq!(ours.json(), without_empty_dns(theirs.json()), "{context}");
        }
        None
    } else {
        let (their_code, their_msg) = err(&theirs);
        assert_eq!(their_code, 999, "{context}");
        let (code, msg) = err(&ours);
        assert_eq!(msg, their_msg, "{context}");
        Some(code)
    }
}

#[test]
fn same_results_as_the_reference() {
    let ns = TestNetns::new("st-ref");
    let dual = json!({
        "type": "static",
        "addresses": [
            {"address": "10.10.0.1/24", "gateway": "10.10.0.254"},
            {"address": "3ffe:ffff:0:01ff::1/64", "gateway": "3ffe:ffff:0::1"}
        ],
        "routes": [
            {"dst": "0.0.0.0/0"},
            {"dst": "10.1.0.0/16", "gw": "10.10.0.253"},
            {"dst": "3ffe:ffff:0:01ff::1/64"}
        ],
        "dns": {"nameservers": ["8.8.8.8"], "domain": "example.com",
                "search": ["example.com"], "options": ["ndots:2"]}
    });
    // (ipam, top-level keys, CNI_ARGS)
    let cases: Vec<(Value, Value, &str)> = vec![
        (dual.clone(), json!({}), ""),
        // CNI_ARGS added to the config's address; GATEWAY reaches only them.
        (
            json!({"type": "static", "addresses": [{"address": "10.10.0.9/24"}],
                   "routes": [{"dst": "0.0.0.0/0"}]}),
            json!({}),
            "IP=10.10.0.1/24;GATEWAY=10.10.0.254",
        ),
        (
            json!({"type": "static"}),
            json!({}),
            "IP=10.10.0.1/24, 2001:db8::5/64;GATEWAY=10.10.0.254,2001:db8::1,192.0.2.1",
        ),
        (
            json!({"type": "static"}),
            json!({"args": {"cni": {"ips": ["10.10.0.1/24", "3ffe:ffff:0:01ff::1/64"]}}}),
            "",
        ),
        (
            json!({"type": "static", "addresses": [{"address": "10.0.0.1/24"}]}),
            json!({"RuntimeConfig": {"ips": ["10.10.0.1/24", "3ffe:ffff:0:01ff::1/64"]},
                   "args": {"cni": {"ips": ["10.10.0.2/24"]}}}),
            "IP=10.10.0.3/24,11.11.0.3/24;GATEWAY=10.10.0.254",
        ),
        // A bad config address that runtime ips replace is never read.
        (
            json!({"type": "static", "addresses": [{"address": "bad"}]}),
            json!({"runtimeConfig": {"ips": ["10.10.0.1/24"]}}),
            "",
        ),
        // IPv4-mapped IPv6 addresses are IPv4.
        (
            json!({"type": "static", "addresses": [
                {"address": "::ffff:10.10.0.9/120", "gateway": "::ffff:10.10.0.1"}]}),
            json!({}),
            "",
        ),
        // Go's own address object, and keys in other cases.
        (
            json!({"type": "static", "addresses": [
                {"address": "192.0.2.1/24", "Address": {"IP": "10.1.1.1", "Mask": "////AA=="}}]}),
            json!({}),
            "GATEWAY=10.1.1.254",
        ),
        (
            json!({"Type": "static", "ADDRESSES": [{"ADDRESS": "10.1.1.1/24",
                   "Gateway": "10.1.1.2"}], "Routes": [{"DST": "0.0.0.0/0", "GW": "10.1.1.3"}],
                   "DNS": {"NameServers": ["10.1.1.53"]}}),
            json!({}),
            "",
        ),
        // Several default routes, an empty and a null gateway.
        (
            json!({"type": "static",
                   "addresses": [{"address": "10.10.0.1/24", "gateway": ""},
                                 {"address": "2001:db8::1/64", "gateway": null}],
                   "routes": [{"dst": "0.0.0.0/0", "gw": "10.10.0.254"},
                              {"dst": "0.0.0.0/0", "gw": "10.10.0.253"}]}),
            json!({}),
            "",
        ),
        (json!({"type": "static"}), json!({}), ""),
        (
            json!({"type": "static"}),
            json!({}),
            "IgnoreUnknown=1;K8S_POD_NAME=web;IP=10.10.0.1/24",
        ),
    ];
    for version in REFERENCE_VERSIONS {
        for (ipam, extra, cni_args) in &cases {
            let c = conf(version, ipam.clone(), extra.clone());
            if let Some(code) = compare(&ns, "ADD", &c, cni_args) {
                // The only failures here are of 0.1.0/0.2.0: an empty
                // result (1), two addresses of a family (7).
                assert!(!has_ips_list(version), "{version} {c}");
                assert!([1, 7].contains(&code), "{version} {c} {cni_args}");
            }
            compare(&ns, "DEL", &c, cni_args);
        }
    }
}

#[test]
fn same_errors_as_the_reference() {
    let ns = TestNetns::new("st-referr");
    let static_ipam = json!({"type": "static"});
    // (configuration, CNI_ARGS, our code)
    let cases: Vec<(Value, &str, u64)> = vec![
        (
            json!({"cniVersion": "1.0.0", "name": NETWORK}),
            "IP=10.10.0.1/24",
            7,
        ),
        (
            json!({"cniVersion": "1.0.0", "name": NETWORK, "runtimeConfig": {"ips": ["10.0.0.1/24"]}}),
            "",
            7,
        ),
        (
            conf(
                "1.0.0",
                json!({"addresses": [{"address": "10.10.0.1"}]}),
                json!({}),
            ),
            "",
            7,
        ),
        (
            conf(
                "1.0.0",
                json!({"addresses": [{"gateway": "10.10.0.1"}]}),
                json!({}),
            ),
            "",
            7,
        ),
        (
            conf(
                "1.0.0",
                json!({"addresses": [{"address": "10.10.0.1/24", "gateway": "10.10.0.x"}]}),
                json!({"runtimeConfig": {"ips": ["10.0.0.1/24"]}}),
            ),
            "",
            7,
        ),
        (
            conf("1.0.0", static_ipam.clone(), json!({})),
            "IP=10.10.0.1/24, 11.11.0.1",
            4,
        ),
        (
            conf("1.0.0", static_ipam.clone(), json!({})),
            "IP=10.10.0.1/24;GATEWAY=10.10.0.1, x",
            4,
        ),
        (
            conf("1.0.0", static_ipam.clone(), json!({})),
            "IP=10.10.0.1/24;FOO=1",
            4,
        ),
        (
            conf("1.0.0", static_ipam.clone(), json!({})),
            "IP=10.10.0.1/24;GATEWAY",
            4,
        ),
        (
            conf(
                "1.0.0",
                static_ipam.clone(),
                json!({"args": {"cni": {"ips": ["10.10.0.1/24", "10.10.0.2"]}}}),
            ),
            "",
            7,
        ),
        (
            conf(
                "1.0.0",
                static_ipam.clone(),
                json!({"RuntimeConfig": {"ips": ["10.10.0.1"]}}),
            ),
            "",
            7,
        ),
        (
            conf("0.2.0", static_ipam.clone(), json!({})),
            "IP=10.10.0.1/24,10.10.0.2/24",
            7,
        ),
        (
            conf(
                "0.1.0",
                static_ipam.clone(),
                json!({"runtimeConfig": {"ips": ["2001:db8::1/64", "2001:db8::2/64"]}}),
            ),
            "",
            7,
        ),
    ];
    for (c, cni_args, code) in cases {
        assert_eq!(compare(&ns, "ADD", &c, cni_args), Some(code), "{c}");
    }
}

#[test]
fn same_check_verdicts_as_the_reference() {
    let ns = TestNetns::new("st-refchk");
    let ipam = json!({"type": "static", "addresses": [
        {"address": "10.10.0.1/24", "gateway": "10.10.0.254"},
        {"address": "2001:db8::1/64"}]});
    for version in ["0.4.0", "1.0.0"] {
        let c = conf(version, ipam.clone(), json!({}));
        let added = ok(&Call::ours("ADD", &ns).run(&c));
        let with_prev = |prev: Value| {
            let mut c = c.clone();
            c["prevResult"] = prev;
            c
        };
        assert_eq!(compare(&ns, "CHECK", &with_prev(added.clone()), ""), None);
        assert_eq!(compare(&ns, "CHECK", &c, ""), Some(7), "no prevResult");

        let mut other_gateway = added.clone();
        other_gateway["ips"][0]["gateway"] = json!("10.10.0.1");
        assert_eq!(
            compare(&ns, "CHECK", &with_prev(other_gateway), ""),
            Some(999)
        );
        let mut no_gateway = added.clone();
        no_gateway["ips"][0]
            .as_object_mut()
            .unwrap()
            .remove("gateway");
        assert_eq!(compare(&ns, "CHECK", &with_prev(no_gateway), ""), Some(999));

        // Addresses missing from prevResult, or a configured address
        // without a gateway: both pass.
        let mut missing = added.clone();
        missing["ips"] = json!([]);
        assert_eq!(compare(&ns, "CHECK", &with_prev(missing), ""), None);
        let mut v6_gateway = added.clone();
        v6_gateway["ips"][1]["gateway"] = json!("2001:db8::ff");
        assert_eq!(compare(&ns, "CHECK", &with_prev(v6_gateway), ""), None);

        assert_eq!(
            compare(
                &ns,
                "CHECK",
                &with_prev(added.clone()),
                "IP=10.10.0.1/24;GATEWAY=10.10.0.9"
            ),
            Some(999)
        );
    }
}
