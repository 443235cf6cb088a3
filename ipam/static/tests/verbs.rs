//! The built binary through every verb and every spec version: the
//! scenarios of the reference's static_test.go (each source of addresses
//! and their precedence, both families, routes and DNS, the errors), plus
//! CHECK, GC, STATUS and the error codes.

mod common;

use common::*;
use conformance::testnet::TestNetns;
use serde_json::{json, Value};

fn dual_stack_ipam() -> Value {
    json!({
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
    })
}

#[test]
fn config_addresses_routes_and_dns_in_every_version() {
    let ns = TestNetns::new("st-v");
    let dns = json!({"nameservers": ["8.8.8.8"], "domain": "example.com",
                     "search": ["example.com"], "options": ["ndots:2"]});
    for version in ALL_VERSIONS {
        let out = Call::ours("ADD", &ns).run(&conf(version, dual_stack_ipam(), json!({})));
        let result = ok(&out);
        assert!(
            out.stderr.is_empty(),
            "{version}: no stderr noise: {}",
            out.stderr
        );
        let expected = if has_ips_list(version) {
            json!({
                "cniVersion": version,
                "ips": [
                    ip_entry(version, "10.10.0.1/24", Some("10.10.0.254")),
                    ip_entry(version, "3ffe:ffff:0:1ff::1/64", Some("3ffe:ffff::1")),
                ],
                "routes": [
                    {"dst": "0.0.0.0/0"},
                    {"dst": "10.1.0.0/16", "gw": "10.10.0.253"},
                    {"dst": "3ffe:ffff:0:1ff::1/64"}
                ],
                "dns": dns,
            })
        } else {
            // 0.1.0/0.2.0: one address per family, routes by family.
            json!({
                "cniVersion": version,
                "ip4": {"ip": "10.10.0.1/24", "gateway": "10.10.0.254",
                        "routes": [{"dst": "0.0.0.0/0"}, {"dst": "10.1.0.0/16", "gw": "10.10.0.253"}]},
                "ip6": {"ip": "3ffe:ffff:0:1ff::1/64", "gateway": "3ffe:ffff::1",
                        "routes": [{"dst": "3ffe:ffff:0:1ff::1/64"}]},
                "dns": dns,
            })
        };
        assert_eq!(result, expected, "{version}");
        // The 0.3.x/0.4.0 results name the family of each address.
        assert_eq!(
            out.stdout.contains("\"version\":"),
            has_ip_version(version),
            "{version}"
        );
    }
}

#[test]
fn ecmp_default_routes_are_kept_in_order() {
    let ns = TestNetns::new("st-ecmp");
    for version in ["0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
        let ipam = json!({
            "type": "static",
            "addresses": [{"address": "10.10.0.1/24", "gateway": "10.10.0.254"}],
            "routes": [
                {"dst": "0.0.0.0/0", "gw": "10.10.0.254"},
                {"dst": "0.0.0.0/0", "gw": "10.10.0.253"},
                {"dst": "0.0.0.0/0", "gw": "10.10.0.252", "priority": 10}
            ]
        });
        let result = ok(&Call::ours("ADD", &ns).run(&conf(version, ipam, json!({}))));
        assert_eq!(
            result["routes"],
            json!([
                {"dst": "0.0.0.0/0", "gw": "10.10.0.254"},
                {"dst": "0.0.0.0/0", "gw": "10.10.0.253"},
                {"dst": "0.0.0.0/0", "gw": "10.10.0.252", "priority": 10}
            ]),
            "{version}"
        );
    }
}

#[test]
fn no_addresses_is_an_empty_result_from_0_3_0() {
    let ns = TestNetns::new("st-none");
    for version in ALL_VERSIONS {
        let out = Call::ours("ADD", &ns).run(&conf(version, json!({"type": "static"}), json!({})));
        if has_ips_list(version) {
            assert_eq!(ok(&out), json!({"cniVersion": version}), "{version}");
        } else {
            // 0.1.0/0.2.0 results cannot be empty.
            assert_eq!(
                err(&out),
                (1, "cannot convert: no valid IP addresses".to_string()),
                "{version}"
            );
        }
    }
}

#[test]
fn cni_args_ip_and_gateway() {
    let ns = TestNetns::new("st-env");
    for version in ALL_VERSIONS {
        let ipam = json!({"type": "static", "routes": [{"dst": "0.0.0.0/0"}]});
        let result = ok(&Call::ours("ADD", &ns)
            .cni_args("IP=10.10.0.1/24;GATEWAY=10.10.0.254")
            .run(&conf(version, ipam.clone(), json!({}))));
        if has_ips_list(version) {
            assert_eq!(
                result["ips"],
                json!([ip_entry(version, "10.10.0.1/24", Some("10.10.0.254"))]),
                "{version}"
            );
            assert_eq!(result["routes"], json!([{"dst": "0.0.0.0/0"}]));
        } else {
            assert_eq!(
                result["ip4"],
                json!({"ip": "10.10.0.1/24", "gateway": "10.10.0.254",
                       "routes": [{"dst": "0.0.0.0/0"}]}),
                "{version}"
            );
        }

        // Two addresses of one family: too many before 0.3.0; otherwise
        // the gateway goes to the one whose subnet holds it.
        let out = Call::ours("ADD", &ns)
            .cni_args("IP=10.10.0.1/24,11.11.0.1/24;GATEWAY=10.10.0.254")
            .run(&conf(version, ipam, json!({})));
        if has_ips_list(version) {
            assert_eq!(
                ok(&out)["ips"],
                json!([
                    ip_entry(version, "10.10.0.1/24", Some("10.10.0.254")),
                    ip_entry(version, "11.11.0.1/24", None),
                ]),
                "{version}"
            );
        } else {
            assert_eq!(
                err(&out),
                (
                    7,
                    format!(
                        "CNI version {version} does not support more than 1 address per family"
                    )
                )
            );
        }
    }
}

#[test]
fn cni_args_add_to_config_addresses_and_gateway_reaches_only_their_own() {
    let ns = TestNetns::new("st-envcfg");
    let ipam = json!({"type": "static", "addresses": [{"address": "10.10.0.9/24"}]});
    let result = ok(&Call::ours("ADD", &ns)
        .cni_args("IP=10.10.0.1/24, 2001:db8::5/64 ;GATEWAY=10.10.0.254,2001:db8::1;IgnoreUnknown=1;K8S_POD_NAME=p")
        .run(&conf("1.0.0", ipam, json!({}))));
    assert_eq!(
        result["ips"],
        json!([
            {"address": "10.10.0.9/24"},
            {"address": "10.10.0.1/24", "gateway": "10.10.0.254"},
            {"address": "2001:db8::5/64", "gateway": "2001:db8::1"}
        ])
    );
}

#[test]
fn runtime_config_ips_dual_stack() {
    let ns = TestNetns::new("st-rc");
    for version in ALL_VERSIONS {
        // Spelled as the reference's test spells it: Go matches keys
        // case-insensitively.
        let c = conf(
            version,
            json!({"type": "static", "routes": [{"dst": "0.0.0.0/0", "gw": "10.10.0.254"},
                                                {"dst": "3ffe:ffff:0:01ff::1/64", "gw": "3ffe:ffff:0::1"}],
                   "dns": {"nameservers": ["8.8.8.8"]}}),
            json!({"capabilities": {"ips": true},
                   "RuntimeConfig": {"ips": ["10.10.0.1/24", "3ffe:ffff:0:01ff::1/64"]}}),
        );
        let result = ok(&Call::ours("ADD", &ns).run(&c));
        if has_ips_list(version) {
            assert_eq!(
                result["ips"],
                json!([
                    ip_entry(version, "10.10.0.1/24", None),
                    ip_entry(version, "3ffe:ffff:0:1ff::1/64", None),
                ]),
                "{version}"
            );
            assert_eq!(result["routes"].as_array().unwrap().len(), 2);
            assert_eq!(result["dns"], json!({"nameservers": ["8.8.8.8"]}));
        } else {
            assert_eq!(result["ip4"]["ip"], "10.10.0.1/24", "{version}");
            assert_eq!(result["ip6"]["ip"], "3ffe:ffff:0:1ff::1/64", "{version}");
            assert!(result["ip4"].get("gateway").is_none(), "{version}");
        }
    }
}

#[test]
fn args_cni_ips_dual_stack() {
    let ns = TestNetns::new("st-args");
    for version in ALL_VERSIONS {
        let c = conf(
            version,
            json!({"type": "static", "addresses": [{"address": "10.0.0.1/24", "gateway": "10.0.0.254"}]}),
            json!({"args": {"cni": {"ips": ["10.10.0.1/24", "3ffe:ffff:0:01ff::1/64"]}}}),
        );
        let result = ok(&Call::ours("ADD", &ns).run(&c));
        if has_ips_list(version) {
            assert_eq!(
                result["ips"],
                json!([
                    ip_entry(version, "10.10.0.1/24", None),
                    ip_entry(version, "3ffe:ffff:0:1ff::1/64", None),
                ]),
                "{version}"
            );
        } else {
            assert_eq!(result["ip4"], json!({"ip": "10.10.0.1/24"}), "{version}");
            assert_eq!(
                result["ip6"],
                json!({"ip": "3ffe:ffff:0:1ff::1/64"}),
                "{version}"
            );
        }
    }
}

#[test]
fn runtime_config_wins_over_args_and_cni_args() {
    let ns = TestNetns::new("st-prec");
    for version in ALL_VERSIONS {
        let c = conf(
            version,
            json!({"type": "static", "addresses": [{"address": "10.0.0.1/24"}]}),
            json!({"RuntimeConfig": {"ips": ["10.10.0.1/24", "3ffe:ffff:0:01ff::1/64"]},
                   "args": {"cni": {"ips": ["10.10.0.2/24", "3ffe:ffff:0:01ff::2/64"]}}}),
        );
        let result = ok(&Call::ours("ADD", &ns)
            .cni_args("IP=10.10.0.3/24,11.11.0.3/24;GATEWAY=10.10.0.254")
            .run(&c));
        // Only the runtimeConfig addresses; had the CNI_ARGS pair
        // survived, 0.1.0/0.2.0 would have refused two IPv4 addresses.
        if has_ips_list(version) {
            assert_eq!(
                result["ips"],
                json!([
                    ip_entry(version, "10.10.0.1/24", None),
                    ip_entry(version, "3ffe:ffff:0:1ff::1/64", None),
                ]),
                "{version}"
            );
        } else {
            assert_eq!(result["ip4"], json!({"ip": "10.10.0.1/24"}), "{version}");
            assert_eq!(
                result["ip6"],
                json!({"ip": "3ffe:ffff:0:1ff::1/64"}),
                "{version}"
            );
        }
    }
}

#[test]
fn bad_input_is_an_error_with_its_code_and_message() {
    let ns = TestNetns::new("st-bad");
    let ipam = json!({"type": "static"});
    // (configuration, CNI_ARGS, code, message)
    let cases: Vec<(Value, &str, u64, &str)> = vec![
        (
            json!({"cniVersion": "1.0.0", "name": NETWORK}),
            "IP=10.10.0.1/24;GATEWAY=10.10.0.254",
            7,
            "IPAM config missing 'ipam' key",
        ),
        (
            json!({"cniVersion": "1.0.0", "name": NETWORK,
                   "runtimeConfig": {"ips": ["10.10.0.1/24"]}}),
            "",
            7,
            "IPAM config missing 'ipam' key",
        ),
        (
            conf(
                "1.0.0",
                json!({"type": "static", "addresses": [{"address": "10.10.0.1"}]}),
                json!({}),
            ),
            "",
            7,
            "the 'address' field is expected to be in CIDR notation, got: '10.10.0.1'",
        ),
        (
            conf("1.0.0", ipam.clone(), json!({})),
            "IP=10.10.0.1",
            4,
            "the 'ip' field is expected to be in CIDR notation, got: '10.10.0.1'",
        ),
        (
            conf(
                "1.0.0",
                ipam.clone(),
                json!({"args": {"cni": {"ips": ["10.10.0.1"]}}}),
            ),
            "",
            7,
            "an entry in the 'ips' field is NOT in CIDR notation, got: '10.10.0.1'",
        ),
        (
            conf(
                "1.0.0",
                ipam.clone(),
                json!({"RuntimeConfig": {"ips": ["10.10.0.1"]}}),
            ),
            "",
            7,
            "an entry in the 'ips' field is NOT in CIDR notation, got: '10.10.0.1'",
        ),
        (
            conf(
                "1.0.0",
                json!({"type": "static", "addresses": [{"address": "10.10.0.1/24", "gateway": "10.10.0"}]}),
                json!({}),
            ),
            "",
            7,
            "invalid IP address: 10.10.0",
        ),
        (
            conf("1.0.0", ipam.clone(), json!({})),
            "IP=10.10.0.1/24;GATEWAY=10.10.0.254,nope",
            4,
            "invalid gateway address: nope",
        ),
        (
            conf("1.0.0", ipam.clone(), json!({})),
            "IP=10.10.0.1/24;MAC=aa:bb:cc:dd:ee:ff",
            4,
            "ARGS: unknown args [\"MAC=aa:bb:cc:dd:ee:ff\"]",
        ),
        (
            conf("1.0.0", ipam.clone(), json!({})),
            "IP",
            4,
            "ARGS: invalid pair \"IP\"",
        ),
        (
            conf("0.2.0", ipam.clone(), json!({})),
            "IP=10.10.0.1/24,10.10.0.2/24",
            7,
            "CNI version 0.2.0 does not support more than 1 address per family",
        ),
        (
            conf(
                "1.0.0",
                json!({"type": "static", "routes": [{"dst": "0.0.0.0/0", "gw": 7}]}),
                json!({}),
            ),
            "",
            7,
            "",
        ),
        (
            conf(
                "1.0.0",
                json!({"type": "static", "addresses": "10.10.0.1/24"}),
                json!({}),
            ),
            "",
            7,
            "invalid network config: ipam.addresses: expected a list",
        ),
        (
            conf("9.9.9", ipam.clone(), json!({})),
            "",
            1,
            "incompatible CNI versions",
        ),
    ];
    for (c, cni_args, code, msg) in cases {
        let out = Call::ours("ADD", &ns).cni_args(cni_args).run(&c);
        let (got_code, got_msg) = err(&out);
        assert_eq!(got_code, code, "{c} {cni_args}: {}", out.stdout);
        if msg.is_empty() {
            assert!(
                got_msg.starts_with("invalid network config: ipam.routes"),
                "{got_msg}"
            );
        } else {
            assert_eq!(got_msg, msg, "{c} {cni_args}");
        }
    }

    for stdin in [&b""[..], b"{", b"[1]"] {
        let out = Call::ours("ADD", &ns).run_bytes(stdin);
        assert_eq!(err(&out).0, 6, "{:?}", String::from_utf8_lossy(stdin));
    }
}

#[test]
fn del_always_succeeds_and_prints_nothing() {
    let ns = TestNetns::new("st-del");
    for version in ALL_VERSIONS {
        for c in [
            conf(version, dual_stack_ipam(), json!({})),
            // A configuration ADD would refuse: DEL has nothing to release.
            json!({"cniVersion": version, "name": NETWORK}),
            conf(
                version,
                json!({"addresses": [{"address": "not-cidr"}]}),
                json!({}),
            ),
        ] {
            for call in [
                Call::ours("DEL", &ns),
                Call::ours("DEL", &ns).without_netns(),
                Call::ours("DEL", &ns).cni_args("IP=bad;FOO=1"),
            ] {
                let out = call.run(&c);
                out.assert_ok();
                assert_eq!(out.stdout, "", "{version} {c}");
            }
        }
    }
}

#[test]
fn check_compares_prev_result_with_the_config() {
    let ns = TestNetns::new("st-chk");
    for version in ALL_VERSIONS {
        let c = conf(version, dual_stack_ipam(), json!({}));
        let added = ok(&Call::ours("ADD", &ns).run(&c));
        let mut with_prev = c.clone();
        with_prev["prevResult"] = added.clone();
        let out = Call::ours("CHECK", &ns).run(&with_prev);
        if !matches!(version, "0.4.0" | "1.0.0" | "1.1.0") {
            assert_eq!(
                err(&out),
                (1, "config version does not allow CHECK".to_string()),
                "{version}"
            );
            continue;
        }
        out.assert_ok();
        assert_eq!(out.stdout, "", "{version}: CHECK prints nothing");

        // No prevResult.
        assert_eq!(
            err(&Call::ours("CHECK", &ns).run(&c)),
            (7, "Required prevResult missing".to_string())
        );

        // The configured address with another gateway.
        let mut changed = added.clone();
        changed["ips"][0]["gateway"] = json!("10.10.0.253");
        let mut with_changed = c.clone();
        with_changed["prevResult"] = changed;
        assert_eq!(
            err(&Call::ours("CHECK", &ns).run(&with_changed)),
            (
                999,
                "static: Failed to match addr 10.10.0.1 on interface eth0".to_string()
            ),
            "{version}"
        );

        // An address missing from prevResult passes, as in the reference
        // (the calling plugin checks its interface).
        let mut fewer = added.clone();
        fewer["ips"].as_array_mut().unwrap().remove(0);
        let mut with_fewer = c.clone();
        with_fewer["prevResult"] = fewer;
        Call::ours("CHECK", &ns).run(&with_fewer).assert_ok();

        // CHECK reads the configuration as ADD does: CNI_ARGS included.
        let out = Call::ours("CHECK", &ns)
            .cni_args("IP=10.10.0.7")
            .run(&with_prev);
        assert_eq!(err(&out).0, 4, "{version}");
        let mut bad = with_prev.clone();
        bad["ipam"]["addresses"][0]["address"] = json!("10.10.0.1");
        assert_eq!(err(&Call::ours("CHECK", &ns).run(&bad)).0, 7, "{version}");

        // A CNI_ARGS gateway that prevResult lacks.
        let out = Call::ours("CHECK", &ns)
            .cni_args("IP=10.10.0.1/24;GATEWAY=10.10.0.200")
            .run(&with_prev);
        assert_eq!(err(&out).0, 999, "{version}");
    }
}

#[test]
fn check_of_a_prev_result_in_an_older_version() {
    let ns = TestNetns::new("st-chk-old");
    let c = conf("1.0.0", dual_stack_ipam(), json!({}));
    let mut with_prev = c.clone();
    with_prev["prevResult"] = json!({
        "cniVersion": "0.4.0",
        "ips": [{"version": "4", "address": "10.10.0.1/24", "gateway": "10.10.0.254"}]
    });
    Call::ours("CHECK", &ns).run(&with_prev).assert_ok();
    with_prev["prevResult"] = json!({"cniVersion": "1.0.0", "ips": 5});
    assert_eq!(err(&Call::ours("CHECK", &ns).run(&with_prev)).0, 6);
}

#[test]
fn gc_and_status() {
    let ns = TestNetns::new("st-gc");
    let good = conf("1.1.0", dual_stack_ipam(), json!({}));
    for command in ["GC", "STATUS"] {
        let out = Call::ours(command, &ns).without_netns().run(&good);
        out.assert_ok();
        assert_eq!(out.stdout, "", "{command}");
        // Only 1.1.0 configurations know these verbs.
        let old = conf("1.0.0", dual_stack_ipam(), json!({}));
        let out = Call::ours(command, &ns).without_netns().run(&old);
        assert_eq!(err(&out).0, 1, "{command}");
    }
    // STATUS: ADD can never work without an ipam section, or with keys of
    // the wrong type; addresses are left to ADD (runtime ips replace them).
    let cases = [
        (json!({"cniVersion": "1.1.0", "name": NETWORK}), Some(7)),
        (conf("1.1.0", json!({"routes": {}}), json!({})), Some(7)),
        (
            conf(
                "1.1.0",
                json!({"addresses": [{"address": "replaced-by-runtime-ips"}]}),
                json!({}),
            ),
            None,
        ),
    ];
    for (c, code) in cases {
        let out = Call::ours("STATUS", &ns).without_netns().run(&c);
        match code {
            Some(code) => assert_eq!(err(&out).0, code, "{c}"),
            None => {
                out.assert_ok();
            }
        }
        // GC holds nothing and reads nothing.
        Call::ours("GC", &ns).without_netns().run(&c).assert_ok();
    }
}

#[test]
fn version_lists_every_spec_version() {
    let ns = TestNetns::new("st-ver");
    let out = Call::ours("VERSION", &ns).run_bytes(b"");
    let v = ok(&out);
    assert_eq!(v["supportedVersions"], json!(ALL_VERSIONS));
}
