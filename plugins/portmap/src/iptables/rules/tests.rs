//! Vectors from the reference's `portmap_iptables_test.go`.

use super::*;
use crate::config::{BackendChoice, BackendKind, PortMapping};

const LONG_ID: &str = "icee6giejonei6sohng6ahngee7laquohquee9shiGo7fohferakah3Feiyoolu2pei7ciPhoh7shaoX6vai3vuf0ahfaeng8yohb9ceu0daez5hashee8ooYai5wa3y";

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn mapping(host: u16, container: u16, protocol: Protocol, host_ip: Option<&str>) -> PortMapping {
    PortMapping {
        host_port: host,
        container_port: container,
        protocol,
        host_ip: host_ip.map(|ip| ip.parse().unwrap()),
    }
}

/// The reference test's configuration: eight mappings, SNAT, conditions.
fn reference_conf() -> PortMapConf {
    use Protocol::*;
    PortMapConf {
        network: "test".to_string(),
        backend: BackendChoice::Configured(BackendKind::Iptables),
        snat: true,
        masq_all: false,
        mark_masq_bit: 13,
        external_set_mark_chain: None,
        conditions_v4: strings(&["-a", "b"]),
        conditions_v6: strings(&["-c", "d"]),
        mappings: vec![
            mapping(8080, 80, Tcp, None),
            mapping(8081, 80, Tcp, None),
            mapping(8080, 81, Udp, None),
            mapping(8082, 82, Udp, None),
            mapping(8083, 83, Tcp, Some("192.168.0.2")),
            mapping(8084, 84, Tcp, Some("0.0.0.0")),
            mapping(8085, 85, Tcp, Some("2001:db8:a::1")),
            mapping(8086, 86, Tcp, Some("::")),
        ],
    }
}

#[test]
fn chain_name_vectors() {
    assert_eq!(
        dnat_chain_name("testNetName", LONG_ID),
        "CNI-DN-bfd599665540dd91d5d28"
    );
    assert_eq!(
        dnat_chain_name("test", LONG_ID),
        "CNI-DN-67e92b96e692a494b6b85"
    );
    // Measured with the Debian reference in a test namespace.
    assert_eq!(
        dnat_chain_name("test", "ctr1"),
        "CNI-DN-3a53437c165fe05c780a9"
    );
    assert_eq!(dnat_chain_name("a", "b").len(), 28);
    assert!(old_snat_chain_name("test", LONG_ID).starts_with("CNI-SN-"));
}

#[test]
fn entry_rules_group_ports_by_protocol() {
    let conf = reference_conf();
    let chain = "CNI-DN-67e92b96e692a494b6b85";
    let comment = format!("dnat name: \"test\" id: \"{LONG_ID}\"");
    let rule = |protocol: &str, ports: &str| {
        let mut r = strings(&["-m", "comment", "--comment"]);
        r.push(comment.clone());
        r.extend(strings(&[
            "-m",
            "multiport",
            "-p",
            protocol,
            "--destination-ports",
            ports,
            "-a",
            "b",
            "-j",
            chain,
        ]));
        r
    };
    assert_eq!(
        dnat_entry_rules(&conf, LONG_ID, IpFamily::V4, chain),
        vec![
            rule("tcp", "8080,8081,8083,8084,8085,8086"),
            rule("udp", "8080,8082")
        ]
    );
}

#[test]
fn entry_rules_split_at_fifteen_ports() {
    let mut conf = reference_conf();
    conf.conditions_v4.clear();
    conf.mappings = (1..=16)
        .map(|p| mapping(p, p, Protocol::Sctp, None))
        .collect();
    let rules = dnat_entry_rules(&conf, "c", IpFamily::V4, "X");
    assert_eq!(rules.len(), 2);
    assert!(rules[0].contains(&"1,2,3,4,5,6,7,8,9,10,11,12,13,14,15".to_string()));
    assert!(rules[1].contains(&"16".to_string()));
}

#[test]
fn container_chain_rules_ipv4() {
    let conf = reference_conf();
    let rules = dnat_chain_rules(&conf, "10.0.0.2/24".parse().unwrap());
    let expected: Vec<Vec<String>> = [
        &[
            "-p",
            "tcp",
            "--dport",
            "8080",
            "-s",
            "10.0.0.2/24",
            "-j",
            "CNI-HOSTPORT-SETMARK",
        ][..],
        &[
            "-p",
            "tcp",
            "--dport",
            "8080",
            "-s",
            "127.0.0.1",
            "-j",
            "CNI-HOSTPORT-SETMARK",
        ],
        &[
            "-p",
            "tcp",
            "--dport",
            "8080",
            "-j",
            "DNAT",
            "--to-destination",
            "10.0.0.2:80",
        ],
        &[
            "-p",
            "tcp",
            "--dport",
            "8081",
            "-s",
            "10.0.0.2/24",
            "-j",
            "CNI-HOSTPORT-SETMARK",
        ],
        &[
            "-p",
            "tcp",
            "--dport",
            "8081",
            "-s",
            "127.0.0.1",
            "-j",
            "CNI-HOSTPORT-SETMARK",
        ],
        &[
            "-p",
            "tcp",
            "--dport",
            "8081",
            "-j",
            "DNAT",
            "--to-destination",
            "10.0.0.2:80",
        ],
        &[
            "-p",
            "udp",
            "--dport",
            "8080",
            "-s",
            "10.0.0.2/24",
            "-j",
            "CNI-HOSTPORT-SETMARK",
        ],
        &[
            "-p",
            "udp",
            "--dport",
            "8080",
            "-s",
            "127.0.0.1",
            "-j",
            "CNI-HOSTPORT-SETMARK",
        ],
        &[
            "-p",
            "udp",
            "--dport",
            "8080",
            "-j",
            "DNAT",
            "--to-destination",
            "10.0.0.2:81",
        ],
        &[
            "-p",
            "udp",
            "--dport",
            "8082",
            "-s",
            "10.0.0.2/24",
            "-j",
            "CNI-HOSTPORT-SETMARK",
        ],
        &[
            "-p",
            "udp",
            "--dport",
            "8082",
            "-s",
            "127.0.0.1",
            "-j",
            "CNI-HOSTPORT-SETMARK",
        ],
        &[
            "-p",
            "udp",
            "--dport",
            "8082",
            "-j",
            "DNAT",
            "--to-destination",
            "10.0.0.2:82",
        ],
        &[
            "-p",
            "tcp",
            "--dport",
            "8083",
            "-d",
            "192.168.0.2",
            "-s",
            "10.0.0.2/24",
            "-j",
            "CNI-HOSTPORT-SETMARK",
        ],
        &[
            "-p",
            "tcp",
            "--dport",
            "8083",
            "-d",
            "192.168.0.2",
            "-s",
            "127.0.0.1",
            "-j",
            "CNI-HOSTPORT-SETMARK",
        ],
        &[
            "-p",
            "tcp",
            "--dport",
            "8083",
            "-d",
            "192.168.0.2",
            "-j",
            "DNAT",
            "--to-destination",
            "10.0.0.2:83",
        ],
        &[
            "-p",
            "tcp",
            "--dport",
            "8084",
            "-s",
            "10.0.0.2/24",
            "-j",
            "CNI-HOSTPORT-SETMARK",
        ],
        &[
            "-p",
            "tcp",
            "--dport",
            "8084",
            "-s",
            "127.0.0.1",
            "-j",
            "CNI-HOSTPORT-SETMARK",
        ],
        &[
            "-p",
            "tcp",
            "--dport",
            "8084",
            "-j",
            "DNAT",
            "--to-destination",
            "10.0.0.2:84",
        ],
    ]
    .iter()
    .map(|r| strings(r))
    .collect();
    assert_eq!(rules, expected);
}

#[test]
fn container_chain_rules_ipv6() {
    let conf = reference_conf();
    let rules = dnat_chain_rules(&conf, "2001:db8::2/64".parse().unwrap());
    let expected: Vec<Vec<String>> = [
        &[
            "-p",
            "tcp",
            "--dport",
            "8080",
            "-s",
            "2001:db8::2/64",
            "-j",
            "CNI-HOSTPORT-SETMARK",
        ][..],
        &[
            "-p",
            "tcp",
            "--dport",
            "8080",
            "-j",
            "DNAT",
            "--to-destination",
            "[2001:db8::2]:80",
        ],
        &[
            "-p",
            "tcp",
            "--dport",
            "8081",
            "-s",
            "2001:db8::2/64",
            "-j",
            "CNI-HOSTPORT-SETMARK",
        ],
        &[
            "-p",
            "tcp",
            "--dport",
            "8081",
            "-j",
            "DNAT",
            "--to-destination",
            "[2001:db8::2]:80",
        ],
        &[
            "-p",
            "udp",
            "--dport",
            "8080",
            "-s",
            "2001:db8::2/64",
            "-j",
            "CNI-HOSTPORT-SETMARK",
        ],
        &[
            "-p",
            "udp",
            "--dport",
            "8080",
            "-j",
            "DNAT",
            "--to-destination",
            "[2001:db8::2]:81",
        ],
        &[
            "-p",
            "udp",
            "--dport",
            "8082",
            "-s",
            "2001:db8::2/64",
            "-j",
            "CNI-HOSTPORT-SETMARK",
        ],
        &[
            "-p",
            "udp",
            "--dport",
            "8082",
            "-j",
            "DNAT",
            "--to-destination",
            "[2001:db8::2]:82",
        ],
        &[
            "-p",
            "tcp",
            "--dport",
            "8085",
            "-d",
            "2001:db8:a::1",
            "-s",
            "2001:db8::2/64",
            "-j",
            "CNI-HOSTPORT-SETMARK",
        ],
        &[
            "-p",
            "tcp",
            "--dport",
            "8085",
            "-d",
            "2001:db8:a::1",
            "-j",
            "DNAT",
            "--to-destination",
            "[2001:db8::2]:85",
        ],
        &[
            "-p",
            "tcp",
            "--dport",
            "8086",
            "-s",
            "2001:db8::2/64",
            "-j",
            "CNI-HOSTPORT-SETMARK",
        ],
        &[
            "-p",
            "tcp",
            "--dport",
            "8086",
            "-j",
            "DNAT",
            "--to-destination",
            "[2001:db8::2]:86",
        ],
    ]
    .iter()
    .map(|r| strings(r))
    .collect();
    assert_eq!(rules, expected);
}

#[test]
fn container_chain_rules_without_snat() {
    let mut conf = reference_conf();
    conf.snat = false;
    let rules = dnat_chain_rules(&conf, "10.0.0.2/24".parse().unwrap());
    let expected: Vec<Vec<String>> = [
        &[
            "-p",
            "tcp",
            "--dport",
            "8080",
            "-j",
            "DNAT",
            "--to-destination",
            "10.0.0.2:80",
        ][..],
        &[
            "-p",
            "tcp",
            "--dport",
            "8081",
            "-j",
            "DNAT",
            "--to-destination",
            "10.0.0.2:80",
        ],
        &[
            "-p",
            "udp",
            "--dport",
            "8080",
            "-j",
            "DNAT",
            "--to-destination",
            "10.0.0.2:81",
        ],
        &[
            "-p",
            "udp",
            "--dport",
            "8082",
            "-j",
            "DNAT",
            "--to-destination",
            "10.0.0.2:82",
        ],
        &[
            "-p",
            "tcp",
            "--dport",
            "8083",
            "-d",
            "192.168.0.2",
            "-j",
            "DNAT",
            "--to-destination",
            "10.0.0.2:83",
        ],
        &[
            "-p",
            "tcp",
            "--dport",
            "8084",
            "-j",
            "DNAT",
            "--to-destination",
            "10.0.0.2:84",
        ],
    ]
    .iter()
    .map(|r| strings(r))
    .collect();
    assert_eq!(rules, expected);
}

#[test]
fn external_mark_chain_and_masq_all() {
    let mut conf = reference_conf();
    conf.mappings = vec![mapping(8080, 80, Protocol::Tcp, None)];
    conf.external_set_mark_chain = Some("PLZ-SET-MARK".to_string());
    assert_eq!(
        dnat_chain_rules(&conf, "10.0.0.2/24".parse().unwrap()),
        vec![
            strings(&[
                "-p",
                "tcp",
                "--dport",
                "8080",
                "-s",
                "10.0.0.2/24",
                "-j",
                "PLZ-SET-MARK"
            ]),
            strings(&[
                "-p",
                "tcp",
                "--dport",
                "8080",
                "-s",
                "127.0.0.1",
                "-j",
                "PLZ-SET-MARK"
            ]),
            strings(&[
                "-p",
                "tcp",
                "--dport",
                "8080",
                "-j",
                "DNAT",
                "--to-destination",
                "10.0.0.2:80"
            ]),
        ]
    );
    conf.external_set_mark_chain = None;
    conf.masq_all = true;
    assert_eq!(
        dnat_chain_rules(&conf, "10.0.0.2/24".parse().unwrap())[..2],
        [
            strings(&[
                "-p",
                "tcp",
                "--dport",
                "8080",
                "-s",
                "0.0.0.0/0",
                "-j",
                "CNI-HOSTPORT-SETMARK"
            ]),
            strings(&[
                "-p",
                "tcp",
                "--dport",
                "8080",
                "-j",
                "DNAT",
                "--to-destination",
                "10.0.0.2:80"
            ]),
        ]
    );
    assert_eq!(
        dnat_chain_rules(&conf, "2001:db8::2/64".parse().unwrap())[0],
        strings(&[
            "-p",
            "tcp",
            "--dport",
            "8080",
            "-s",
            "::/0",
            "-j",
            "CNI-HOSTPORT-SETMARK"
        ])
    );
}

#[test]
fn shared_chain_rules() {
    assert_eq!(
        dnat_entry_jump(),
        strings(&[
            "-m",
            "addrtype",
            "--dst-type",
            "LOCAL",
            "-j",
            "CNI-HOSTPORT-DNAT"
        ])
    );
    assert_eq!(
        set_mark_rule(1 << 5),
        strings(&[
            "-m",
            "comment",
            "--comment",
            "CNI portfwd masquerade mark",
            "-j",
            "MARK",
            "--set-xmark",
            "0x20/0x20"
        ])
    );
    assert_eq!(
        mark_masq_rule(1 << 5),
        strings(&["-m", "mark", "--mark", "0x20/0x20", "-j", "MASQUERADE"])
    );
    assert_eq!(
        masq_entry_jump(),
        strings(&[
            "-m",
            "comment",
            "--comment",
            "CNI portfwd requiring masquerade",
            "-j",
            "CNI-HOSTPORT-MASQ"
        ])
    );
    assert_eq!(mark_spec(1 << 13), "0x2000/0x2000");
}

#[test]
fn comments_are_cut_and_parsed() {
    let comment = dnat_comment("test", "ctr1");
    assert_eq!(comment, r#"dnat name: "test" id: "ctr1""#);
    assert_eq!(parse_dnat_comment(&comment), Some(("test", "ctr1")));
    let long = "x".repeat(300);
    let cut = dnat_comment("test", &long);
    assert_eq!(cut.len(), 256);
    assert!(cut.ends_with("..."));
    assert_eq!(parse_dnat_comment(&cut), None);
    assert_eq!(parse_dnat_comment("CNI portfwd masquerade mark"), None);
}
