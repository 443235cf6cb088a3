use super::*;
use serde_json::json;

fn plugin_conf(v: Value) -> PluginConf {
    PluginConf::from_slice(&serde_json::to_vec(&v).unwrap()).unwrap()
}

fn parse(v: Value) -> Result<BridgeConf, ConfigError> {
    BridgeConf::from_conf(&plugin_conf(v), "")
}

fn base() -> Value {
    json!({"cniVersion": "1.0.0", "name": "testConfig", "type": "bridge"})
}

fn with(mut v: Value, extra: Value) -> Value {
    let obj = v.as_object_mut().unwrap();
    for (k, x) in extra.as_object().unwrap() {
        obj.insert(k.clone(), x.clone());
    }
    v
}

fn entry(min_id: Option<i64>, max_id: Option<i64>, id: Option<i64>) -> TrunkEntry {
    TrunkEntry { min_id, max_id, id }
}

#[test]
fn defaults_match_the_reference() {
    let c = parse(base()).unwrap();
    assert_eq!(c.bridge, "cni0");
    assert_eq!(c.network, "testConfig");
    assert!(!c.is_gateway && !c.is_default_gateway && !c.force_address);
    assert!(!c.ip_masq && c.masq_backend.is_none());
    assert_eq!(c.mtu, None);
    assert!(!c.hairpin_mode && !c.promisc_mode);
    assert_eq!(c.vlan, None);
    assert!(c.vlan_trunk.is_empty() && !c.vlan_filtering);
    assert!(
        !c.preserve_default_vlan,
        "the code's default, not the docs'"
    );
    assert!(!c.enable_dad && !c.mac_spoof_check);
    assert!(!c.disable_container_interface && !c.port_isolation);
    assert_eq!(c.ipam_type, None);
    assert!(!c.is_layer3());
    assert_eq!(c.dns, None);
    assert_eq!(c.mac, None);
}

#[test]
fn every_key_is_read() {
    let c = parse(with(
        base(),
        json!({"bridge": "br9", "isGateway": true, "forceAddress": true, "ipMasq": true,
            "ipMasqBackend": "nftables", "mtu": 1400, "hairpinMode": true, "vlan": 100,
            "vlanTrunk": [{"id": 7}], "preserveDefaultVlan": true, "enabledad": true,
            "macspoofchk": true, "portIsolation": true,
            "ipam": {"type": "host-local"}, "dns": {"nameservers": ["10.0.0.53"]}}),
    ))
    .unwrap();
    assert_eq!(c.bridge, "br9");
    assert!(c.is_gateway && !c.is_default_gateway && c.force_address && c.ip_masq);
    assert_eq!(c.masq_backend, Some(MasqBackend::Nftables));
    assert_eq!(c.mtu, Some(1400));
    assert!(c.hairpin_mode);
    assert_eq!(c.vlan, Some(100));
    assert_eq!(c.vlan_trunk, vec![7]);
    assert!(c.vlan_filtering && c.preserve_default_vlan);
    assert!(c.enable_dad && c.mac_spoof_check && c.port_isolation);
    assert_eq!(c.ipam_type.as_deref(), Some("host-local"));
    assert_eq!(
        c.dns.as_ref().unwrap().nameservers,
        vec!["10.0.0.53".to_string()]
    );
    assert_eq!(c.vlan_gateway_name().as_deref(), Some("br9.100"));
}

#[test]
fn default_gateway_implies_gateway() {
    let c = parse(with(base(), json!({"isDefaultGateway": true}))).unwrap();
    assert!(c.is_gateway && c.is_default_gateway);
}

#[test]
fn empty_ipam_type_is_layer2() {
    let c = parse(with(base(), json!({"ipam": {}}))).unwrap();
    assert!(!c.is_layer3());
}

#[test]
fn keys_match_case_insensitively_like_go() {
    let c = parse(with(
        base(),
        json!({"IsGateway": true, "BRIDGE": "brx", "RuntimeConfig": {"MAC": "02:00:00:00:00:01"}}),
    ))
    .unwrap();
    assert!(c.is_gateway);
    assert_eq!(c.bridge, "brx");
    assert_eq!(c.mac, Some([2, 0, 0, 0, 0, 1]));
    // The exact spelling wins over a case variant.
    let c = parse(with(
        base(),
        json!({"bridge": "exact", "Bridge": "variant"}),
    ))
    .unwrap();
    assert_eq!(c.bridge, "exact");
}

#[test]
fn null_is_absent() {
    let c = parse(with(
        base(),
        json!({"bridge": null, "isGateway": null, "vlan": null, "vlanTrunk": null, "mtu": null}),
    ))
    .unwrap();
    assert_eq!(c.bridge, "cni0");
    assert!(!c.is_gateway && !c.vlan_filtering);
}

#[test]
fn wrong_types_name_the_key_with_code_7() {
    for (extra, key) in [
        (json!({"isGateway": "true"}), "isGateway"),
        (json!({"vlan": 1.5}), "vlan"),
        (json!({"mtu": "1500"}), "mtu"),
        (json!({"bridge": 5}), "bridge"),
        (json!({"vlanTrunk": {"id": 5}}), "vlanTrunk"),
        (json!({"vlanTrunk": [5]}), "vlanTrunk[0]"),
        (json!({"vlanTrunk": [{"id": "5"}]}), "vlanTrunk[0].id"),
        (json!({"args": {"cni": {"mac": 5}}}), "args.cni.mac"),
        (json!({"runtimeConfig": []}), "runtimeConfig"),
    ] {
        let e = parse(with(base(), extra.clone())).unwrap_err();
        match &e {
            ConfigError::WrongType { key: k, .. } => assert_eq!(k, key, "{extra}"),
            other => panic!("{extra}: {other}"),
        }
        assert_eq!(e.to_cni_error().code, ErrorCode::InvalidNetworkConfig);
    }
}

/// The reference's "check vlan id when loading net conf" cases.
#[test]
fn vlan_range_is_validated() {
    for version in ["1.0.0", "0.4.0"] {
        let conf = |vlan: i64| with(base(), json!({"cniVersion": version, "vlan": vlan}));
        assert_eq!(parse(conf(0)).unwrap().vlan, None);
        for bad in [-100, 5000, 4095] {
            let e = parse(conf(bad)).unwrap_err();
            assert_eq!(e, ConfigError::InvalidVlan(bad));
            assert_eq!(
                e.to_string(),
                format!("invalid VLAN ID {bad} (must be between 0 and 4094)")
            );
        }
        assert_eq!(parse(conf(4094)).unwrap().vlan, Some(4094));
        assert_eq!(parse(conf(1)).unwrap().vlan, Some(1));
    }
}

/// The reference's "collectVlanTrunk succeeds" table.
#[test]
fn vlan_trunk_parsing_succeeds() {
    let cases: [(Vec<TrunkEntry>, Vec<u16>); 4] = [
        (vec![], vec![]),
        (
            vec![entry(Some(100), Some(105), None)],
            vec![100, 101, 102, 103, 104, 105],
        ),
        (vec![entry(None, None, Some(10))], vec![10]),
        (
            vec![
                entry(None, None, Some(10)),
                entry(Some(100), Some(105), None),
            ],
            vec![10, 100, 101, 102, 103, 104, 105],
        ),
    ];
    for (entries, expected) in cases {
        assert_eq!(
            collect_vlan_trunk(&entries).unwrap(),
            expected,
            "{entries:?}"
        );
    }
}

/// The reference's "collectVlanTrunk failed" table (its "maxID is
/// negative" row passes 5000; both values are tested here).
#[test]
fn vlan_trunk_parsing_fails() {
    let cases = [
        (entry(Some(100), None, None), TrunkError::MaxMissing),
        (entry(None, Some(105), None), TrunkError::MinMissing),
        (entry(Some(-1), Some(105), None), TrunkError::MinId),
        (entry(Some(5000), Some(105), None), TrunkError::MinId),
        (entry(Some(100), Some(5000), None), TrunkError::MaxId),
        (entry(Some(100), Some(-1), None), TrunkError::MaxId),
        (entry(None, None, Some(5000)), TrunkError::Id),
        (entry(None, None, Some(-1)), TrunkError::Id),
        (
            entry(Some(1000), Some(100), None),
            TrunkError::MinGreaterThanMax,
        ),
    ];
    for (bad, expected) in cases {
        assert_eq!(collect_vlan_trunk(&[bad]), Err(expected.clone()), "{bad:?}");
    }
    assert_eq!(
        TrunkError::MaxMissing.to_string(),
        "minID and maxID should be configured simultaneously, maxID is missing"
    );
    assert_eq!(
        TrunkError::MinGreaterThanMax.to_string(),
        "minID is greater than maxID in trunk parameter"
    );
    // Zero is "untagged", never a trunk id.
    assert_eq!(
        collect_vlan_trunk(&[entry(None, None, Some(0))]),
        Err(TrunkError::Id)
    );
}

#[test]
fn trunk_ids_are_deduplicated_and_sorted_through_the_config() {
    let c = parse(with(
        base(),
        json!({"vlanTrunk": [{"id": 210}, {"minID": 200, "maxID": 210}, {"id": 101}, null]}),
    ))
    .unwrap();
    let mut expected = vec![101];
    expected.extend(200..=210);
    assert_eq!(c.vlan_trunk, expected);
    let e = parse(with(base(), json!({"vlanTrunk": [{"minID": 5}]}))).unwrap_err();
    assert_eq!(e, ConfigError::Trunk(TrunkError::MaxMissing));
    assert_eq!(e.to_cni_error().code, ErrorCode::InvalidNetworkConfig);
}

#[test]
fn empty_trunk_list_still_asks_for_vlan_filtering() {
    let c = parse(with(base(), json!({"vlanTrunk": []}))).unwrap();
    assert!(c.vlan_trunk.is_empty());
    assert!(c.vlan_filtering);
}

#[test]
fn mac_precedence_is_cni_args_then_args_then_runtime_config() {
    let conf = |extra: Value| plugin_conf(with(base(), extra));
    let only_env = BridgeConf::from_conf(&conf(json!({})), "MAC=02:00:00:00:04:56").unwrap();
    assert_eq!(only_env.mac, Some([2, 0, 0, 0, 4, 0x56]));
    let args = conf(json!({"args": {"cni": {"mac": "02:00:00:00:00:00"}}}));
    let c = BridgeConf::from_conf(&args, "MAC=02:00:00:00:04:56").unwrap();
    assert_eq!(c.mac, Some([2, 0, 0, 0, 0, 0]));
    let all = conf(json!({"args": {"cni": {"mac": "02:00:00:00:07:89"}},
        "runtimeConfig": {"mac": "02:00:00:00:00:00"}}));
    let c = BridgeConf::from_conf(&all, "MAC=02:00:00:00:04:56").unwrap();
    assert_eq!(c.mac, Some([2, 0, 0, 0, 0, 0]));
    // An empty value does not override a lower source.
    let empty = conf(json!({"runtimeConfig": {"mac": ""}}));
    let c = BridgeConf::from_conf(&empty, "MAC=02:00:00:00:04:56").unwrap();
    assert_eq!(c.mac, Some([2, 0, 0, 0, 4, 0x56]));
}

#[test]
fn bad_macs_are_refused_naming_the_source() {
    let conf = plugin_conf(with(
        base(),
        json!({"runtimeConfig": {"mac": "01:00:5e:00:00:01"}}),
    ));
    let e = BridgeConf::from_conf(&conf, "").unwrap_err();
    assert!(e.to_string().contains("runtimeConfig.mac"), "{e}");
    assert!(e.to_string().contains("multicast"), "{e}");
    let e = BridgeConf::from_conf(&plugin_conf(base()), "MAC=zz:00:00:00:00:01").unwrap_err();
    assert!(e.to_string().contains("CNI_ARGS MAC"), "{e}");
    let e = BridgeConf::from_conf(&plugin_conf(base()), "MAC=+2:00:00:00:00:01").unwrap_err();
    assert!(e.to_string().contains("not a 6-byte MAC address"), "{e}");
    // Every form Go's net.ParseMAC reads for 6 bytes, as the reference.
    for form in ["0A-0b-0C-00-00-01", "0a0b.0c00.0001"] {
        let c = BridgeConf::from_conf(&plugin_conf(base()), &format!("MAC={form}")).unwrap();
        assert_eq!(c.mac, Some([10, 11, 12, 0, 0, 1]), "{form}");
    }
}

#[test]
fn cni_args_follow_the_library_rules() {
    let e = BridgeConf::from_conf(&plugin_conf(base()), "FOO=1").unwrap_err();
    assert_eq!(e.to_cni_error().code, ErrorCode::InvalidEnvironment);
    let c = BridgeConf::from_conf(&plugin_conf(base()), "IgnoreUnknown=1;FOO=1;K8S_POD_NAME=x")
        .unwrap();
    assert_eq!(c.mac, None);
}

#[test]
fn unknown_masq_backend_is_code_2_with_key_and_value() {
    let e = parse(with(base(), json!({"ipMasqBackend": "ebtables"}))).unwrap_err();
    let cni = e.to_cni_error();
    assert_eq!(cni.code, ErrorCode::UnsupportedField);
    assert!(
        cni.msg.contains("ipMasqBackend") && cni.msg.contains("\"ebtables\""),
        "{cni:?}"
    );
    assert_eq!(
        parse(with(base(), json!({"ipMasqBackend": "iptables"})))
            .unwrap()
            .masq_backend,
        Some(MasqBackend::Iptables)
    );
}

#[test]
fn mtu_and_bridge_name_are_checked() {
    for bad in [-1, 1, 67, 65536] {
        assert_eq!(
            parse(with(base(), json!({"mtu": bad}))).unwrap_err(),
            ConfigError::InvalidMtu(bad)
        );
    }
    assert_eq!(parse(with(base(), json!({"mtu": 0}))).unwrap().mtu, None);
    for edge in [68, 65535] {
        assert_eq!(
            parse(with(base(), json!({"mtu": edge}))).unwrap().mtu,
            Some(edge as u32)
        );
    }
    let e = parse(with(base(), json!({"mtu": 65536}))).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid MTU 65536 (must be 0 for the kernel default, or between 68 and 65535)"
    );
    assert_eq!(e.to_cni_error().code, ErrorCode::InvalidNetworkConfig);
    for bad in ["a/b", "sixteen-bytes-xx", "a b", "..", "br\u{1b}0"] {
        let e = parse(with(base(), json!({"bridge": bad}))).unwrap_err();
        assert!(matches!(e, ConfigError::LinkName(_)), "{bad}: {e}");
        assert!(e.to_string().starts_with("invalid bridge \""), "{e}");
    }
    let e = parse(with(
        base(),
        json!({"bridge": "fifteen-bytes-x", "isGateway": true, "vlan": 100}),
    ))
    .unwrap_err();
    assert!(matches!(e, ConfigError::VlanGatewayNameTooLong(_)), "{e}");
}

#[test]
fn exclusive_settings_are_refused() {
    let e = parse(with(
        base(),
        json!({"hairpinMode": true, "promiscMode": true}),
    ))
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "cannot set hairpin mode and promiscuous mode at the same time"
    );
    let e = parse(with(
        base(),
        json!({"disableContainerInterface": true, "ipam": {"type": "host-local"}}),
    ))
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "cannot use IPAM when DisableContainerInterface flag is set"
    );
    assert_eq!(e.to_cni_error().code, ErrorCode::InvalidNetworkConfig);
}

#[test]
fn layer2_results_do_not_exist_before_0_3_0() {
    for (version, ok) in [
        ("0.1.0", false),
        ("0.2.0", false),
        ("0.3.0", true),
        ("1.1.0", true),
    ] {
        let c = parse(with(base(), json!({"cniVersion": version}))).unwrap();
        assert_eq!(c.result_expressible(), ok, "{version}");
        let c = parse(with(
            base(),
            json!({"cniVersion": version, "ipam": {"type": "host-local"}}),
        ))
        .unwrap();
        assert!(c.result_expressible(), "{version} with IPAM");
    }
}

#[test]
fn teardown_reads_only_what_it_needs() {
    // A configuration ADD refuses can still be deleted.
    let conf = plugin_conf(with(
        base(),
        json!({"vlan": 9999, "mtu": -5, "ipMasq": true, "macspoofchk": true,
            "ipam": {"type": "host-local"}}),
    ));
    assert!(BridgeConf::from_conf(&conf, "").is_err());
    let t = TeardownConf::from_conf(&conf).unwrap();
    assert!(t.ip_masq && t.mac_spoof_check);
    assert_eq!(t.ipam_type.as_deref(), Some("host-local"));
    assert_eq!(t.network, "testConfig");
    let conf = plugin_conf(with(base(), json!({"macspoofchk": "yes"})));
    assert!(TeardownConf::from_conf(&conf).is_err());
}
