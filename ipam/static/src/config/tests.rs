use super::*;
use libcni::args::ArgsError;
use serde_json::json;

fn load(conf: Value, cni_args: &str) -> Result<StaticConfig, StaticError> {
    StaticConfig::load(&conf, cni_args)
}

fn net(version: &str, ipam: Value) -> Value {
    json!({"cniVersion": version, "name": "n", "type": "bridge", "ipam": ipam})
}

fn addrs(config: &StaticConfig) -> Vec<(String, Option<String>)> {
    config
        .addresses
        .iter()
        .map(|a| (a.address.to_string(), a.gateway.map(|g| g.to_string())))
        .collect()
}

fn pair(address: &str, gateway: Option<&str>) -> (String, Option<String>) {
    (address.to_string(), gateway.map(str::to_string))
}

fn config_error(result: Result<StaticConfig, StaticError>) -> ConfigError {
    match result {
        Err(StaticError::Config(e)) => e,
        other => panic!("expected a configuration error, got {other:?}"),
    }
}

#[test]
fn addresses_routes_and_dns_from_the_config() {
    let c = load(
        net(
            "1.0.0",
            json!({"type": "static",
                "addresses": [{"address": "10.10.0.1/24", "gateway": "10.10.0.254"},
                              {"address": "3ffe:ffff:0:01ff::1/64", "gateway": "3ffe:ffff:0::1"}],
                "routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "10.10.5.1"},
                           {"dst": "3ffe:ffff:0:01ff::1/64"}],
                "dns": {"nameservers": ["8.8.8.8"], "domain": "example.com",
                        "search": ["example.com"], "options": ["ndots:2"]}}),
        ),
        "",
    )
    .unwrap();
    assert_eq!(
        addrs(&c),
        vec![
            pair("10.10.0.1/24", Some("10.10.0.254")),
            pair("3ffe:ffff:0:1ff::1/64", Some("3ffe:ffff::1")),
        ]
    );
    assert_eq!(c.routes.len(), 3);
    assert_eq!(c.routes[1].gw, Some("10.10.5.1".parse().unwrap()));
    assert_eq!(c.dns.nameservers, vec!["8.8.8.8"]);
    assert_eq!(c.dns.domain, "example.com");
    assert_eq!(c.dns.options, vec!["ndots:2"]);
    assert_eq!(c.cni_version, "1.0.0");
}

#[test]
fn no_addresses_is_a_valid_config() {
    let c = load(net("1.0.0", json!({"type": "static"})), "").unwrap();
    assert!(c.addresses.is_empty());
    assert!(c.routes.is_empty());
    assert!(c.dns.is_empty());
}

#[test]
fn cni_args_addresses_are_appended_and_gateways_matched_to_them() {
    let c = load(
        net(
            "0.4.0",
            json!({"type": "static", "addresses": [{"address": "10.10.0.9/24"}]}),
        ),
        "IP=10.10.0.1/24, 11.11.0.1/24 ,2001:db8::5/64;GATEWAY=10.10.0.254,2001:db8::1",
    )
    .unwrap();
    assert_eq!(
        addrs(&c),
        vec![
            // GATEWAY never reaches an ipam.addresses entry (reference quirk).
            pair("10.10.0.9/24", None),
            pair("10.10.0.1/24", Some("10.10.0.254")),
            pair("11.11.0.1/24", None),
            pair("2001:db8::5/64", Some("2001:db8::1")),
        ]
    );
}

#[test]
fn the_last_matching_cni_args_gateway_wins() {
    let c = load(
        net("1.0.0", json!({"type": "static"})),
        "IP=10.10.0.1/16;GATEWAY=10.10.0.254,10.10.9.9,192.0.2.1",
    )
    .unwrap();
    assert_eq!(addrs(&c), vec![pair("10.10.0.1/16", Some("10.10.9.9"))]);
}

#[test]
fn args_ips_replace_config_and_cni_args_addresses() {
    let c = load(
        json!({"cniVersion": "1.0.0", "name": "n",
            "ipam": {"type": "static", "addresses": [{"address": "10.0.0.1/24", "gateway": "10.0.0.254"}]},
            "args": {"cni": {"ips": ["10.10.0.1/24", "2001:db8::1/64"]}}}),
        "IP=11.11.0.1/24;GATEWAY=11.11.0.254",
    )
    .unwrap();
    assert_eq!(
        addrs(&c),
        vec![pair("10.10.0.1/24", None), pair("2001:db8::1/64", None)]
    );
}

#[test]
fn runtime_config_ips_win_over_every_other_source() {
    let c = load(
        json!({"cniVersion": "1.0.0", "name": "n",
            "ipam": {"type": "static", "addresses": [{"address": "10.0.0.1/24"}]},
            "args": {"cni": {"ips": ["10.10.0.1/24"]}},
            "runtimeConfig": {"ips": ["10.20.0.1/24", "2001:db8::2/64"]}}),
        "IP=11.11.0.1/24",
    )
    .unwrap();
    assert_eq!(
        addrs(&c),
        vec![pair("10.20.0.1/24", None), pair("2001:db8::2/64", None)]
    );
}

#[test]
fn empty_ips_lists_replace_nothing() {
    let c = load(
        json!({"cniVersion": "1.0.0", "name": "n",
            "ipam": {"type": "static", "addresses": [{"address": "10.0.0.1/24"}]},
            "args": {"cni": {"ips": []}}, "runtimeConfig": {"ips": null}}),
        "IP=",
    )
    .unwrap();
    assert_eq!(addrs(&c), vec![pair("10.0.0.1/24", None)]);
}

#[test]
fn a_replaced_config_address_is_never_read() {
    // The reference parses ipam.addresses last, so a bad one that a
    // runtime list replaces goes unnoticed.
    let c = load(
        json!({"cniVersion": "1.0.0", "name": "n",
            "ipam": {"type": "static", "addresses": [{"address": "not-an-address"}]},
            "runtimeConfig": {"ips": ["10.20.0.1/24"]}}),
        "",
    )
    .unwrap();
    assert_eq!(addrs(&c), vec![pair("10.20.0.1/24", None)]);
    // A bad gateway is found while decoding, replaced or not.
    let e = config_error(load(
        json!({"cniVersion": "1.0.0", "name": "n",
            "ipam": {"type": "static", "addresses": [{"address": "10.0.0.1/24", "gateway": "x"}]},
            "runtimeConfig": {"ips": ["10.20.0.1/24"]}}),
        "",
    ));
    assert_eq!(e, ConfigError::InvalidIp("x".into()));
}

#[test]
fn keys_match_case_insensitively_like_go() {
    let c = load(
        json!({"cniVersion": "1.0.0", "name": "n",
            "IPAM": {"Type": "static", "Addresses": [{"ADDRESS": "10.0.0.1/24", "Gateway": "10.0.0.254"}],
                     "Routes": [{"Dst": "0.0.0.0/0", "GW": "10.0.0.254"}], "DNS": {"Nameservers": ["10.0.0.53"]}}}),
        "",
    )
    .unwrap();
    assert_eq!(addrs(&c), vec![pair("10.0.0.1/24", Some("10.0.0.254"))]);
    assert_eq!(c.routes[0].gw, Some("10.0.0.254".parse().unwrap()));
    assert_eq!(c.dns.nameservers, vec!["10.0.0.53"]);

    let c = load(
        json!({"cniVersion": "1.0.0", "name": "n", "ipam": {"type": "static"},
            "RuntimeConfig": {"IPs": ["10.20.0.1/24"]}}),
        "",
    )
    .unwrap();
    assert_eq!(addrs(&c), vec![pair("10.20.0.1/24", None)]);
}

#[test]
fn cni_args_keys_are_case_sensitive() {
    let e = load(net("1.0.0", json!({"type": "static"})), "ip=10.0.0.1/24");
    assert!(
        matches!(e, Err(StaticError::Args(ArgsError::Unknown(_)))),
        "{e:?}"
    );
    let c = load(
        net("1.0.0", json!({"type": "static"})),
        "IgnoreUnknown=1;ip=10.0.0.1/24;K8S_POD_NAME=p",
    )
    .unwrap();
    assert!(c.addresses.is_empty());
}

#[test]
fn ipv4_mapped_addresses_are_ipv4() {
    let c = load(
        net(
            "0.2.0",
            json!({"type": "static", "addresses": [
                {"address": "::ffff:10.10.0.9/120", "gateway": "::ffff:10.10.0.1"}]}),
        ),
        "",
    )
    .unwrap();
    assert_eq!(addrs(&c), vec![pair("10.10.0.9/24", Some("10.10.0.1"))]);
}

#[test]
fn go_address_object_is_read_and_wins_over_the_text() {
    let c = load(
        net(
            "1.0.0",
            json!({"type": "static", "addresses": [
                {"address": "192.0.2.1/24", "Address": {"IP": "10.1.1.1", "Mask": "////AA=="}},
                {"Address": {"IP": "10.2.2.2", "Mask": [255, 255, 0, 0]}, "Version": "4"},
                {"address": "10.3.3.3/8", "Address": {"IP": "", "Mask": null}}]}),
        ),
        "GATEWAY=10.1.1.254",
    )
    .unwrap();
    assert_eq!(
        addrs(&c),
        vec![
            // Parsed while decoding, so GATEWAY reaches it.
            pair("10.1.1.1/24", Some("10.1.1.254")),
            pair("10.2.2.2/16", None),
            pair("10.3.3.3/8", None),
        ]
    );
    for (mask, reason) in [
        (json!("////"), "'Mask' length does not fit the IP"),
        (json!("/wD/AA=="), "'Mask' is not a prefix"),
        (json!("%%"), "'Mask' is not base64"),
        (json!(null), "'Mask' is missing"),
    ] {
        let e = config_error(load(
            net(
                "1.0.0",
                json!({"type": "static", "addresses": [{"Address": {"IP": "10.1.1.1", "Mask": mask}}]}),
            ),
            "",
        ));
        assert_eq!(e, ConfigError::InvalidIpNet { index: 0, reason }, "{mask}");
    }
    // A 16-byte mask over an IPv4 address counts its last 4 bytes.
    let c = load(
        net(
            "1.0.0",
            json!({"type": "static", "addresses": [{"Address": {"IP": "10.1.1.1",
                "Mask": "////////////////////AA=="}}]}),
        ),
        "",
    )
    .unwrap();
    assert_eq!(addrs(&c), vec![pair("10.1.1.1/24", None)]);
}

#[test]
fn one_address_per_family_before_0_3_0() {
    for version in ["", "0.1.0", "0.2.0"] {
        let e = config_error(load(
            net(version, json!({"type": "static"})),
            "IP=10.10.0.1/24,11.11.0.1/24",
        ));
        assert_eq!(e, ConfigError::TooManyPerFamily(version.into()));
        assert_eq!(
            e.to_string(),
            format!("CNI version {version} does not support more than 1 address per family")
        );
        // One of each family is fine.
        let c = load(
            net(version, json!({"type": "static"})),
            "IP=10.10.0.1/24,2001:db8::1/64",
        )
        .unwrap();
        assert_eq!(c.addresses.len(), 2);
    }
    for version in ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
        let c = load(
            net(version, json!({"type": "static"})),
            "IP=10.10.0.1/24,11.11.0.1/24",
        )
        .unwrap();
        assert_eq!(c.addresses.len(), 2, "{version}");
    }
}

#[test]
fn reference_errors() {
    let cases: Vec<(Value, &str, ConfigError)> = vec![
        (
            json!({"cniVersion": "1.0.0", "name": "n"}),
            "IP=10.0.0.1/24",
            ConfigError::MissingIpam,
        ),
        (
            json!({"cniVersion": "1.0.0", "name": "n", "ipam": null,
                "runtimeConfig": {"ips": ["10.0.0.1/24"]}}),
            "",
            ConfigError::MissingIpam,
        ),
        (
            net("1.0.0", json!({"addresses": [{"address": "10.0.0.1"}]})),
            "",
            ConfigError::InvalidAddress("10.0.0.1".into()),
        ),
        (
            net("1.0.0", json!({"addresses": [{"gateway": "10.0.0.1"}]})),
            "",
            ConfigError::InvalidAddress(String::new()),
        ),
        (
            net("1.0.0", json!({"addresses": [null]})),
            "",
            ConfigError::InvalidAddress(String::new()),
        ),
        (
            net("1.0.0", json!({})),
            "IP=10.0.0.1/24, 10.0.0.2",
            ConfigError::InvalidEnvIp("10.0.0.2".into()),
        ),
        (
            net("1.0.0", json!({})),
            "IP=10.0.0.1/24,",
            ConfigError::InvalidEnvIp(String::new()),
        ),
        (
            net("1.0.0", json!({})),
            "GATEWAY=10.0.0.1, x",
            ConfigError::InvalidEnvGateway(" x".into()),
        ),
        (
            json!({"cniVersion": "1.0.0", "name": "n", "ipam": {},
                "args": {"cni": {"ips": ["10.0.0.1"]}}}),
            "",
            ConfigError::InvalidIps("10.0.0.1".into()),
        ),
        (
            json!({"cniVersion": "1.0.0", "name": "n", "ipam": {},
                "runtimeConfig": {"ips": ["10.0.0.1/24", " 10.0.0.2/24"]}}),
            "",
            ConfigError::InvalidIps(" 10.0.0.2/24".into()),
        ),
    ];
    for (conf, cni_args, expected) in cases {
        assert_eq!(
            config_error(load(conf.clone(), cni_args)),
            expected,
            "{conf}"
        );
    }
}

#[test]
fn wrong_types_name_the_key() {
    let cases = [
        (json!({"name": "n", "ipam": 5}), "ipam: expected an object"),
        (
            json!({"name": "n", "ipam": {"addresses": {}}}),
            "ipam.addresses: expected a list",
        ),
        (
            json!({"name": "n", "ipam": {"addresses": [{"address": 10}]}}),
            "ipam.addresses[0].address: invalid type",
        ),
        (
            json!({"name": "n", "ipam": {"addresses": [{"address": "10.0.0.1/8", "Version": 4}]}}),
            "ipam.addresses[0].Version: invalid type",
        ),
        (
            json!({"name": "n", "ipam": {"routes": [{"dst": "x"}]}}),
            "ipam.routes: ",
        ),
        (
            json!({"name": "n", "ipam": {"dns": []}}),
            "ipam.dns: expected an object",
        ),
        (
            json!({"name": "n", "ipam": {"routes": [["0.0.0.0/0"]]}}),
            "ipam.routes[0]: expected an object",
        ),
        (
            json!({"name": "n", "ipam": {"routes": [null]}}),
            "ipam.routes: invalid type",
        ),
        (
            json!({"name": "n", "ipam": {"type": 1}}),
            "ipam.type: invalid type",
        ),
        (
            json!({"name": "n", "ipam": {"name": 1}}),
            "ipam.Name: invalid type",
        ),
        (
            json!({"name": "n", "ipam": {}, "runtimeConfig": {"ips": "10.0.0.1/24"}}),
            "runtimeConfig.ips: invalid type",
        ),
        (
            json!({"name": "n", "ipam": {}, "args": {"cni": []}}),
            "args.cni: expected an object",
        ),
    ];
    for (conf, start) in cases {
        match config_error(load(conf.clone(), "")) {
            ConfigError::Decode(msg) => assert!(msg.starts_with(start), "{conf}: {msg}"),
            other => panic!("{conf}: {other:?}"),
        }
    }
}

#[test]
fn unknown_keys_and_nulls_are_ignored() {
    let c = load(
        json!({"cniVersion": "1.0.0", "name": "n", "runtimeConfig": null, "args": {"cni": null, "x": 1},
            "ipam": {"type": "static", "addresses": [{"address": "10.0.0.1/24", "gateway": null, "color": "red"}],
                     "routes": null, "dns": null, "subnet": "10.0.0.0/8"}}),
        "",
    )
    .unwrap();
    assert_eq!(addrs(&c), vec![pair("10.0.0.1/24", None)]);
    // An empty gateway is no gateway, as Go decodes it.
    let c = load(
        net(
            "1.0.0",
            json!({"addresses": [{"address": "10.0.0.1/24", "gateway": ""}]}),
        ),
        "",
    )
    .unwrap();
    assert_eq!(addrs(&c), vec![pair("10.0.0.1/24", None)]);
}

#[test]
fn status_checks_decoding_and_the_ipam_key_only() {
    assert!(StaticConfig::check_decodes(&net(
        "1.1.0",
        json!({"addresses": [{"address": "replaced-at-add"}]})
    ))
    .is_ok());
    assert!(StaticConfig::check_decodes(&json!({"name": "n"})).is_err());
    assert!(StaticConfig::check_decodes(&net(
        "1.1.0",
        json!({"addresses": [{"address": "10.0.0.1/24", "gateway": "x"}]})
    ))
    .is_err());
}

#[test]
fn mask_bytes() {
    assert_eq!(prefix_byte(24, 0), 0xff);
    assert_eq!(prefix_byte(24, 3), 0);
    assert_eq!(prefix_byte(20, 2), 0xf0);
    assert_eq!(prefix_byte(0, 0), 0);
}
