use super::*;
use serde_json::json;

fn plugin_conf(value: Value) -> PluginConf {
    PluginConf::from_slice(&serde_json::to_vec(&value).unwrap()).unwrap()
}

fn parse(value: Value) -> Result<PortMapConf, ConfigError> {
    PortMapConf::from_plugin_conf(&plugin_conf(value))
}

fn parse_err(value: Value) -> String {
    parse(value).unwrap_err().to_string()
}

fn base(extra: Value) -> Value {
    let mut conf = json!({"cniVersion": "1.0.0", "name": "test", "type": "portmap"});
    if let (Some(obj), Some(extra)) = (conf.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            obj.insert(k.clone(), v.clone());
        }
    }
    conf
}

#[test]
fn reference_add_config_parses() {
    let c = parse(base(json!({
        "backend": "iptables",
        "runtimeConfig": {"portMappings": [
            {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
            {"hostPort": 8081, "containerPort": 81, "protocol": "udp"}
        ]},
        "snat": false,
        "conditionsV4": ["-s", "1.2.3.4"],
        "conditionsV6": ["!", "-s", "12::34"]
    })))
    .unwrap();
    assert_eq!(c.network, "test");
    assert_eq!(c.backend, BackendChoice::Configured(BackendKind::Iptables));
    assert!(!c.snat);
    assert_eq!(c.conditions_v4, ["-s", "1.2.3.4"]);
    assert_eq!(c.conditions_v6, ["!", "-s", "12::34"]);
    assert_eq!(
        c.mappings,
        [
            PortMapping {
                host_port: 8080,
                container_port: 80,
                protocol: Protocol::Tcp,
                host_ip: None
            },
            PortMapping {
                host_port: 8081,
                container_port: 81,
                protocol: Protocol::Udp,
                host_ip: None
            },
        ]
    );
    assert_eq!(c.mark_masq_bit, DEFAULT_MARK_MASQ_BIT);
    assert_eq!(c.mark_value(), 0x2000);
}

#[test]
fn defaults_without_runtime_config() {
    let c = parse(base(json!({}))).unwrap();
    assert!(c.snat);
    assert!(!c.masq_all);
    assert_eq!(c.backend, BackendChoice::Auto);
    assert!(c.mappings.is_empty());
    assert!(c.external_set_mark_chain.is_none());
    // null is the same as absent, as in Go.
    let c = parse(base(
        json!({"snat": null, "runtimeConfig": null, "markMasqBit": null}),
    ))
    .unwrap();
    assert!(c.snat);
    assert!(c.mappings.is_empty());
    let c = parse(base(json!({"runtimeConfig": {"portMappings": null}}))).unwrap();
    assert!(c.mappings.is_empty());
}

#[test]
fn containerd_capitalised_keys_are_accepted() {
    let c = parse(base(json!({
        "runtimeConfig": {"portMappings": [
            {"HostPort": 8080, "ContainerPort": 80, "Protocol": "TCP", "HostIP": "192.168.0.2"},
            {"hostport": 53, "CONTAINERPORT": 5353, "protocol": "UDP", "hostIP": ""}
        ]}
    })))
    .unwrap();
    assert_eq!(c.mappings[0].host_port, 8080);
    assert_eq!(c.mappings[0].container_port, 80);
    assert_eq!(c.mappings[0].protocol, Protocol::Tcp);
    assert_eq!(c.mappings[0].host_ip, Some("192.168.0.2".parse().unwrap()));
    assert_eq!(c.mappings[1].protocol, Protocol::Udp);
    assert_eq!(c.mappings[1].container_port, 5353);
    assert_eq!(c.mappings[1].host_ip, None);
    // Top-level keys fold too, and an exact match wins over a folded one.
    let c = parse(base(
        json!({"SNAT": false, "RuntimeConfig": {"PortMappings": [
            {"hostPort": 1, "HostPort": 2, "containerPort": 3}
        ]}}),
    ))
    .unwrap();
    assert!(!c.snat);
    assert_eq!(c.mappings[0].host_port, 1);
    assert_eq!(
        c.mappings[0].protocol,
        Protocol::Tcp,
        "empty protocol means tcp"
    );
}

#[test]
fn invalid_ports_have_the_reference_messages() {
    let mappings = |m: Value| base(json!({"runtimeConfig": {"portMappings": [m]}}));
    assert_eq!(
        parse_err(mappings(
            json!({"hostPort": 0, "containerPort": 80, "protocol": "tcp"})
        )),
        "Invalid host port number: 0"
    );
    assert_eq!(
        parse_err(mappings(json!({"hostPort": 80, "containerPort": -1}))),
        "Invalid container port number: -1"
    );
    // The container port is checked first, as in the reference.
    assert_eq!(
        parse_err(mappings(json!({"hostPort": 0, "containerPort": 0}))),
        "Invalid container port number: 0"
    );
    assert_eq!(
        parse_err(mappings(json!({"hostPort": 70000, "containerPort": 80}))),
        "Invalid host port number: 70000"
    );
    assert_eq!(
        parse_err(mappings(json!({"hostPort": 65536, "containerPort": 80}))),
        "Invalid host port number: 65536"
    );
    assert_eq!(
        parse_err(mappings(json!({"hostPort": 80, "containerPort": 65536}))),
        "Invalid container port number: 65536"
    );
    let top = parse(mappings(json!({"hostPort": 65535, "containerPort": 65535}))).unwrap();
    assert_eq!(
        (top.mappings[0].host_port, top.mappings[0].container_port),
        (65535, 65535)
    );
    assert_eq!(
        parse_err(mappings(json!({"containerPort": 80}))),
        "Invalid host port number: 0"
    );
    assert_eq!(
        parse_err(base(json!({"runtimeConfig": {"portMappings": [null]}}))),
        "Invalid container port number: 0"
    );
}

#[test]
fn invalid_values_are_config_errors() {
    let mappings = |m: Value| base(json!({"runtimeConfig": {"portMappings": [m]}}));
    for (conf, fragment) in [
        (
            mappings(json!({"hostPort": "80", "containerPort": 80})),
            "hostPort: an integer",
        ),
        (
            mappings(json!({"hostPort": 80.5, "containerPort": 80})),
            "hostPort: an integer",
        ),
        (
            mappings(json!({"hostPort": 80, "containerPort": 80, "protocol": "icmp"})),
            "Invalid protocol \"icmp\"",
        ),
        (
            mappings(json!({"hostPort": 80, "containerPort": 80, "hostIP": "nope"})),
            "Invalid hostIP \"nope\"",
        ),
        (base(json!({"snat": "yes"})), "snat: a boolean"),
        (
            base(json!({"conditionsV4": "-s 1.2.3.4"})),
            "a list of strings",
        ),
        (
            base(json!({"runtimeConfig": {"portMappings": {}}})),
            "a list",
        ),
        (
            base(json!({"externalSetMarkChain": "BAD CHAIN"})),
            "invalid externalSetMarkChain",
        ),
    ] {
        let e = parse_err(conf);
        assert!(e.contains(fragment), "{e:?} should contain {fragment:?}");
    }
}

#[test]
fn mark_bit_rules() {
    assert_eq!(
        parse_err(base(json!({"markMasqBit": 32}))),
        "MasqMarkBit must be between 0 and 31"
    );
    assert_eq!(
        parse_err(base(json!({"markMasqBit": -1}))),
        "MasqMarkBit must be between 0 and 31"
    );
    assert_eq!(
        parse_err(base(
            json!({"markMasqBit": 5, "externalSetMarkChain": "KUBE-MARK-MASQ"})
        )),
        "Cannot specify externalSetMarkChain and markMasqBit"
    );
    let c = parse(base(json!({"markMasqBit": 5}))).unwrap();
    assert_eq!(c.mark_value(), 0x20);
    let c = parse(base(json!({"markMasqBit": 0}))).unwrap();
    assert_eq!(c.mark_value(), 1);
}

#[test]
fn backend_selection_and_mismatch_messages() {
    assert_eq!(
        parse(base(json!({"backend": "nftables"}))).unwrap().backend,
        BackendChoice::Configured(BackendKind::Nftables)
    );
    assert_eq!(
        parse_err(base(json!({"backend": "pf"}))),
        "unrecognized backend \"pf\""
    );
    let c = parse(base(json!({
        "backend": "nftables",
        "conditionsV4": ["ip", "saddr", "1.2.3.4"],
        "conditionsV6": ["ip6", "saddr", "12::34"]
    })))
    .unwrap();
    assert_eq!(c.conditions_v4, ["ip", "saddr", "1.2.3.4"]);
    assert_eq!(
        parse_err(base(json!({
            "backend": "iptables",
            "conditionsV4": ["ip", "saddr", "1.2.3.4"],
            "conditionsV6": ["ip6", "saddr", "12::34"]
        }))),
        "iptables backend was requested but configuration contains nftables-specific options [conditionsV4 conditionsV6]"
    );
    assert_eq!(
        parse_err(base(json!({
            "backend": "nftables",
            "externalSetMarkChain": "KUBE-MARK-MASQ",
            "conditionsV4": ["-s", "1.2.3.4"],
            "conditionsV6": ["-s", "12::34"]
        }))),
        "nftables backend was requested but configuration contains iptables-specific options [externalSetMarkChain conditionsV4 conditionsV6]"
    );
}

#[test]
fn options_choose_the_backend_when_none_is_named() {
    assert_eq!(
        parse(base(json!({"conditionsV4": ["-s", "1.2.3.4"]})))
            .unwrap()
            .backend,
        BackendChoice::Configured(BackendKind::Iptables)
    );
    assert_eq!(
        parse(base(json!({"externalSetMarkChain": "KUBE-MARK-MASQ"})))
            .unwrap()
            .backend,
        BackendChoice::Configured(BackendKind::Iptables)
    );
    assert_eq!(
        parse(base(json!({"conditionsV6": ["ip6 saddr ::1"]})))
            .unwrap()
            .backend,
        BackendChoice::Configured(BackendKind::Nftables)
    );
    // Empty lists and an empty first condition say nothing.
    assert_eq!(
        parse(base(json!({"conditionsV4": [], "conditionsV6": [""]})))
            .unwrap()
            .backend,
        BackendChoice::Auto
    );
    let e = parse_err(base(
        json!({"conditionsV4": ["-s", "1.2.3.4"], "conditionsV6": ["ip6 saddr ::1"]}),
    ));
    assert!(e.contains("both iptables-specific options [conditionsV4] and nftables-specific options [conditionsV6]"), "{e}");
}

#[test]
fn mapping_family_and_destination() {
    let mapping = |ip: Option<&str>| PortMapping {
        host_port: 1,
        container_port: 1,
        protocol: Protocol::Tcp,
        host_ip: ip.map(|s| s.parse().unwrap()),
    };
    assert!(mapping(None).applies_to(IpFamily::V4));
    assert!(mapping(None).applies_to(IpFamily::V6));
    assert!(mapping(Some("0.0.0.0")).applies_to(IpFamily::V4));
    assert!(!mapping(Some("0.0.0.0")).applies_to(IpFamily::V6));
    assert_eq!(mapping(Some("0.0.0.0")).destination(), None);
    assert_eq!(mapping(Some("::")).destination(), None);
    assert_eq!(
        mapping(Some("2001:db8::1")).destination(),
        Some("2001:db8::1".parse().unwrap())
    );
}

fn result(value: Value) -> v100::Result {
    serde_json::from_value(value).unwrap()
}

#[test]
fn container_ips_skip_host_interfaces() {
    // The reference's "correctly parses an ADD config" prevResult.
    let r = result(json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "host"}, {"name": "container", "sandbox": "netns"}],
        "ips": [
            {"address": "10.0.0.1/24", "gateway": "10.0.0.1", "interface": 0},
            {"address": "2001:db8:1::2/64", "gateway": "2001:db8:1::1", "interface": 1},
            {"address": "10.0.0.2/24", "gateway": "10.0.0.1", "interface": 1}
        ]
    }));
    let ips = ContainerIps::from_result(&r, "container");
    assert_eq!(ips.v4, Some("10.0.0.2/24".parse().unwrap()));
    assert_eq!(ips.v6, Some("2001:db8:1::2/64".parse().unwrap()));
    assert_eq!(ips.iter().count(), 2);
    // Another ifname: only the addresses of the named interface count.
    let ips = ContainerIps::from_result(&r, "eth1");
    assert!(ips.is_empty());
}

#[test]
fn container_ips_without_or_with_bad_interface_index_are_used() {
    let r = result(json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "host"}],
        "ips": [
            {"address": "10.0.0.1/24", "gateway": "10.0.0.1"},
            {"address": "2001:db8::5/64", "interface": 7},
            {"address": "10.0.0.9/24"}
        ]
    }));
    let ips = ContainerIps::from_result(&r, "eth0");
    assert_eq!(ips.v4, Some("10.0.0.1/24".parse().unwrap()));
    assert_eq!(ips.v6, Some("2001:db8::5/64".parse().unwrap()));
}
