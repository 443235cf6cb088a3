use super::*;

use serde_json::json;

use crate::range::Range;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn load(conf: Value, env_ip: Option<&str>) -> Result<IpamConfig, ConfigError> {
    IpamConfig::from_value(&conf, env_ip)
}

fn range(subnet: &str, start: &str, end: &str, gateway: &str) -> Range {
    Range {
        subnet: subnet.parse().unwrap(),
        range_start: ip(start),
        range_end: ip(end),
        gateway: ip(gateway),
    }
}

fn ranges_of(config: &IpamConfig) -> Vec<Vec<Range>> {
    config
        .range_sets
        .iter()
        .map(|s| s.ranges().to_vec())
        .collect()
}

#[test]
fn old_style_config() {
    let c = load(
        json!({"cniVersion": "0.3.1", "name": "mynet", "type": "ipvlan", "master": "foo0",
            "ipam": {"type": "host-local", "subnet": "10.1.2.0/24", "rangeStart": "10.1.2.9",
                     "rangeEnd": "10.1.2.20", "gateway": "10.1.2.30"}}),
        None,
    )
    .unwrap();
    assert_eq!(c.cni_version, "0.3.1");
    assert_eq!(c.store.network, "mynet");
    assert_eq!(
        ranges_of(&c),
        [[range("10.1.2.0/24", "10.1.2.9", "10.1.2.20", "10.1.2.30")]]
    );
    assert!(c.requested_ips.is_empty());
    assert!(c.routes.is_empty());
    assert_eq!(c.resolv_conf, None);
    assert_eq!(c.store.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
    assert_eq!(c.store.lock_timeout, DEFAULT_LOCK_TIMEOUT);
    assert_eq!(c.store.range_sets, 1);
}

#[test]
fn new_style_config() {
    let c = load(
        json!({"cniVersion": "0.3.1", "name": "mynet", "ipam": {"type": "host-local", "ranges": [
            [{"subnet": "10.1.2.0/24", "rangeStart": "10.1.2.9", "rangeEnd": "10.1.2.20", "gateway": "10.1.2.30"},
             {"subnet": "10.1.4.0/24"}],
            [{"subnet": "11.1.2.0/24", "rangeStart": "11.1.2.9", "rangeEnd": "11.1.2.20", "gateway": "11.1.2.30"}]
        ]}}),
        None,
    )
    .unwrap();
    assert_eq!(
        ranges_of(&c),
        [
            vec![
                range("10.1.2.0/24", "10.1.2.9", "10.1.2.20", "10.1.2.30"),
                range("10.1.4.0/24", "10.1.4.1", "10.1.4.254", "10.1.4.1"),
            ],
            vec![range("11.1.2.0/24", "11.1.2.9", "11.1.2.20", "11.1.2.30")],
        ]
    );
}

#[test]
fn mixed_config_puts_runtime_ranges_first_then_legacy_then_ranges() {
    let c = load(
        json!({"cniVersion": "0.3.1", "name": "mynet",
            "runtimeConfig": {"irrelevant": "a", "ipRanges": [[{"subnet": "12.1.3.0/24"}]]},
            "ipam": {"type": "host-local", "subnet": "10.1.2.0/24", "rangeStart": "10.1.2.9",
                "rangeEnd": "10.1.2.20", "gateway": "10.1.2.30",
                "ranges": [[{"subnet": "11.1.2.0/24", "rangeStart": "11.1.2.9",
                             "rangeEnd": "11.1.2.20", "gateway": "11.1.2.30"}]]}}),
        None,
    )
    .unwrap();
    assert_eq!(
        ranges_of(&c),
        [
            [range("12.1.3.0/24", "12.1.3.1", "12.1.3.254", "12.1.3.1")],
            [range("10.1.2.0/24", "10.1.2.9", "10.1.2.20", "10.1.2.30")],
            [range("11.1.2.0/24", "11.1.2.9", "11.1.2.20", "11.1.2.30")],
        ]
    );
    assert_eq!(c.store.range_sets, 3);
}

fn one_range_conf() -> Value {
    json!({"cniVersion": "0.3.1", "name": "mynet", "ipam": {"type": "host-local", "ranges": [[
        {"subnet": "10.1.2.0/24", "rangeStart": "10.1.2.9", "rangeEnd": "10.1.2.20", "gateway": "10.1.2.30"}
    ]]}})
}

#[test]
fn cni_args_ip_without_and_with_prefix() {
    let c = load(one_range_conf(), Some("10.1.2.10")).unwrap();
    assert_eq!(c.requested_ips, [ip("10.1.2.10")]);
    let c = load(one_range_conf(), Some("10.1.2.11/24")).unwrap();
    assert_eq!(c.requested_ips, [ip("10.1.2.11")]);
    // An empty value asks for nothing.
    let c = load(one_range_conf(), Some("")).unwrap();
    assert!(c.requested_ips.is_empty());
}

fn three_sets_with_args(ips: &[&str]) -> Value {
    json!({"cniVersion": "0.3.1", "name": "mynet",
    "args": {"cni": {"ips": ips}},
    "ipam": {"type": "host-local", "ranges": [
        [{"subnet": "10.1.2.0/24", "rangeStart": "10.1.2.9", "rangeEnd": "10.1.2.20", "gateway": "10.1.2.30"}],
        [{"subnet": "11.1.2.0/24", "rangeStart": "11.1.2.9", "rangeEnd": "11.1.2.20", "gateway": "11.1.2.30"}],
        [{"subnet": "2001:db8:1::/64"}]
    ]}})
}

#[test]
fn config_args_ips_follow_cni_args_without_prefix() {
    let c = load(
        three_sets_with_args(&["10.1.2.11", "11.11.11.11", "2001:db8:1::11"]),
        Some("10.1.2.10"),
    )
    .unwrap();
    assert_eq!(
        c.requested_ips,
        [
            ip("10.1.2.10"),
            ip("10.1.2.11"),
            ip("11.11.11.11"),
            ip("2001:db8:1::11")
        ]
    );
}

#[test]
fn config_args_ips_follow_cni_args_with_prefix() {
    let c = load(
        three_sets_with_args(&["10.1.2.11/24", "11.11.11.11/24", "2001:db8:1::11/64"]),
        Some("10.1.2.10/24"),
    )
    .unwrap();
    assert_eq!(
        c.requested_ips,
        [
            ip("10.1.2.10"),
            ip("10.1.2.11"),
            ip("11.11.11.11"),
            ip("2001:db8:1::11")
        ]
    );
}

#[test]
fn runtime_config_ips_come_last() {
    let c = load(
        json!({"cniVersion": "0.3.1", "name": "mynet",
            "args": {"cni": {"ips": ["10.1.2.5"]}},
            "runtimeConfig": {"ips": ["192.168.0.1", "192.168.0.5/24", "2001:db8::1/64"]},
            "ipam": {"type": "host-local", "subnet": "10.1.2.0/24"}}),
        None,
    )
    .unwrap();
    assert_eq!(
        c.requested_ips,
        [
            ip("10.1.2.5"),
            ip("192.168.0.1"),
            ip("192.168.0.5"),
            ip("2001:db8::1")
        ]
    );
}

#[test]
fn malformed_requested_ips_are_refused() {
    let e = load(one_range_conf(), Some("10.1.2")).unwrap_err();
    assert!(matches!(e, ConfigError::InvalidEnvIp(_)), "{e}");
    let mut conf = one_range_conf();
    conf["args"] = json!({"cni": {"ips": ["10.1.2.300"]}});
    let e = load(conf, None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "cannot understand ip: \"10.1.2.300\" (args.cni.ips)"
    );
    let mut conf = one_range_conf();
    conf["runtimeConfig"] = json!({"ips": ["nope/24"]});
    let e = load(conf, None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "cannot understand ip: \"nope/24\" (runtimeConfig.ips)"
    );
    let mut conf = one_range_conf();
    conf["args"] = json!({"cni": {"ips": "10.1.2.9"}});
    assert!(matches!(load(conf, None), Err(ConfigError::Decode(_))));
}

#[test]
fn unknown_keys_are_ignored() {
    let mut conf = one_range_conf();
    conf["args"] = json!({"cni": {"labels": [{"key": "a", "value": "b"}]}, "other": 1});
    conf["ipam"]["somethingElse"] = json!(true);
    assert!(load(conf, None).is_ok());
}

#[test]
fn overlap_between_range_sets() {
    let e = load(
        json!({"cniVersion": "0.3.1", "name": "mynet", "ipam": {"type": "host-local", "ranges": [
            [{"subnet": "10.1.2.0/24"}, {"subnet": "10.2.2.0/24"}],
            [{"subnet": "10.1.4.0/24"}, {"subnet": "10.1.6.0/24"}, {"subnet": "10.1.8.0/24"}, {"subnet": "10.1.2.0/24"}]
        ]}}),
        None,
    )
    .unwrap_err();
    assert_eq!(e.to_string(), "range set 0 overlaps with 1");
}

#[test]
fn overlap_within_a_range_set() {
    let e = load(
        json!({"cniVersion": "0.3.1", "name": "mynet", "ipam": {"type": "host-local", "ranges": [
            [{"subnet": "10.1.0.0/22"}, {"subnet": "10.1.2.0/24"}]
        ]}}),
        None,
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid range set 0: subnets 10.1.0.1-10.1.3.254 and 10.1.2.1-10.1.2.254 overlap"
    );
}

#[test]
fn mixed_families_in_a_range_set() {
    let e = load(
        json!({"cniVersion": "0.3.1", "name": "mynet", "ipam": {"type": "host-local", "ranges": [
            [{"subnet": "10.1.0.0/22"}, {"subnet": "2001:db8:5::/64"}]
        ]}}),
        None,
    )
    .unwrap_err();
    assert_eq!(e.to_string(), "invalid range set 0: mixed address families");
}

#[test]
fn invalid_range_is_named_with_its_set() {
    let e = load(
        json!({"cniVersion": "0.3.1", "name": "mynet", "ipam": {"type": "host-local", "ranges": [
            [{"subnet": "10.1.0.0/24"}], [{"subnet": "192.0.2.0/31"}]
        ]}}),
        None,
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid range set 1: Network 192.0.2.0/31 too small to allocate from"
    );
    let e = load(
        json!({"cniVersion": "0.3.1", "name": "mynet", "ipam": {"type": "host-local", "ranges": [[]]}}),
        None,
    )
    .unwrap_err();
    assert_eq!(e.to_string(), "invalid range set 0: empty range set");
}

#[test]
fn too_many_ranges_before_0_3_0() {
    for version in ["0.1.0", "0.2.0", ""] {
        let e = load(
            json!({"cniVersion": version, "name": "mynet", "ipam": {"type": "host-local", "ranges": [
                [{"subnet": "10.1.2.0/24"}], [{"subnet": "11.1.2.0/24"}]
            ]}}),
            None,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("CNI version {version} does not support more than 1 address per family")
        );
    }
    for version in ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
        assert!(load(
            json!({"cniVersion": version, "name": "mynet", "ipam": {"type": "host-local", "ranges": [
                [{"subnet": "10.1.2.0/24"}], [{"subnet": "11.1.2.0/24"}]
            ]}}),
            None
        )
        .is_ok());
    }
}

#[test]
fn one_range_per_family_is_fine_for_0_2_0() {
    assert!(load(
        json!({"cniVersion": "0.2.0", "name": "mynet", "ipam": {"type": "host-local", "ranges": [
            [{"subnet": "10.1.2.0/24"}], [{"subnet": "2001:db8:1::/48"}]
        ]}}),
        None
    )
    .is_ok());
}

#[test]
fn missing_ipam_and_missing_ranges() {
    let e = load(json!({"cniVersion": "0.3.1", "name": "mynet"}), None).unwrap_err();
    assert_eq!(e.to_string(), "IPAM config missing 'ipam' key");
    let e = load(
        json!({"cniVersion": "0.3.1", "name": "mynet", "ipam": null}),
        None,
    )
    .unwrap_err();
    assert!(matches!(e, ConfigError::MissingIpam));
    let e = load(
        json!({"cniVersion": "0.3.1", "name": "mynet", "ipam": {"type": "host-local"}}),
        None,
    )
    .unwrap_err();
    assert_eq!(e.to_string(), "no IP ranges specified");
    // A legacy range needs a subnet; its other keys alone are no range.
    let e = load(
        json!({"cniVersion": "0.3.1", "name": "mynet", "ipam": {"type": "host-local", "rangeStart": "10.0.0.1"}}),
        None,
    )
    .unwrap_err();
    assert!(matches!(e, ConfigError::NoRanges));
}

#[test]
fn network_names_that_leave_the_data_dir_are_refused() {
    for name in ["..", ".", "../etc", "a/b", "/abs", ""] {
        let mut conf = one_range_conf();
        conf["name"] = json!(name);
        let e = load(conf.clone(), None).unwrap_err();
        assert!(
            matches!(e, ConfigError::InvalidName(_) | ConfigError::MissingName),
            "{name:?}: {e}"
        );
        assert!(StoreConfig::from_value(&conf).is_err(), "{name:?}");
    }
}

#[test]
fn store_options() {
    let c = load(
        json!({"cniVersion": "1.0.0", "name": "n1", "ipam": {"type": "host-local",
            "subnet": "10.0.0.0/24", "dataDir": "/tmp/x", "resolvConf": "/etc/r.conf",
            "lockTimeoutMs": 250,
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "10.0.0.254"}]}}),
        None,
    )
    .unwrap();
    assert_eq!(c.store.data_dir, PathBuf::from("/tmp/x"));
    assert_eq!(c.store.lock_timeout, Duration::from_millis(250));
    assert_eq!(c.resolv_conf, Some(PathBuf::from("/etc/r.conf")));
    assert_eq!(c.routes.len(), 2);
    assert_eq!(c.routes[1].gw, Some(ip("10.0.0.254")));
}

#[test]
fn store_config_ignores_invalid_ranges_and_cni_args() {
    let conf = json!({"cniVersion": "1.0.0", "name": "n1", "ipam": {"type": "host-local",
        "dataDir": "/tmp/y", "ranges": [[{"subnet": "10.0.0.0/31"}], [{"subnet": "bogus"}]]}});
    assert!(load(conf.clone(), None).is_err());
    let s = StoreConfig::from_value(&conf).unwrap();
    assert_eq!(s.network, "n1");
    assert_eq!(s.data_dir, PathBuf::from("/tmp/y"));
    assert_eq!(s.range_sets, 2);
    assert!(matches!(
        StoreConfig::from_value(&json!({"name": "n1"})),
        Err(ConfigError::MissingIpam)
    ));
}

#[test]
fn lock_timeout_has_a_range() {
    let with = |value: Value| {
        json!({"cniVersion": "1.0.0", "name": "n1", "ipam": {"type": "host-local",
            "subnet": "10.0.0.0/24", "lockTimeoutMs": value}})
    };
    // 2^63 waited on a stuck holder for ever.
    for (value, shown) in [
        (json!(0), "0"),
        (json!(300_001), "300001"),
        (json!(9_223_372_036_854_775_808u64), "9223372036854775808"),
        (json!(-1), "-1"),
        (json!(2.5), "2.5"),
        (json!("250"), "(a string)"),
    ] {
        let e = load(with(value.clone()), None).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "invalid ipam.lockTimeoutMs {shown}: must be an integer from 1 to 300000 (milliseconds)"
            ),
            "{value}"
        );
        // DEL and GC locate the store with the same check.
        assert!(StoreConfig::from_value(&with(value)).is_err());
    }
    for (value, expected) in [
        (json!(1), Duration::from_millis(1)),
        (json!(300_000), Duration::from_secs(300)),
        (json!(null), DEFAULT_LOCK_TIMEOUT),
    ] {
        let c = load(with(value.clone()), None).unwrap();
        assert_eq!(c.store.lock_timeout, expected, "{value}");
    }
}
