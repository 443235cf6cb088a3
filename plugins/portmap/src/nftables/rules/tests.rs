use super::*;
use libcni::nftables::Family as NftFamily;
use libcni::nftables::PayloadBase;

fn address(direction: Direction, op: CmpOp, text: &str) -> Matcher {
    Matcher::Address {
        direction,
        op,
        network: text.parse().unwrap(),
    }
}

#[test]
fn text_matches_nft_listing() {
    let rule = RuleSpec {
        family: IpFamily::V4,
        chain: "hostports",
        matchers: vec![
            address(Direction::Destination, CmpOp::Eq, "192.168.0.2"),
            Matcher::DestinationPort {
                protocol: Protocol::Tcp,
                port: 8083,
            },
        ],
        action: Action::DnatTo {
            address: "10.0.0.2".parse().unwrap(),
            port: 83,
        },
        comment: Some("icee6giejonei6so".to_string()),
    };
    assert_eq!(
        rule.nft_add_line("cni_hostport"),
        r#"add rule ip cni_hostport hostports ip daddr 192.168.0.2 tcp dport 8083 dnat to 10.0.0.2:83 comment "icee6giejonei6so""#
    );
    let rule = RuleSpec {
        family: IpFamily::V6,
        chain: "masquerading",
        matchers: vec![
            address(Direction::Source, CmpOp::Eq, "::/0"),
            address(Direction::Destination, CmpOp::Eq, "2001:db8::2"),
        ],
        action: Action::Masquerade,
        comment: None,
    };
    assert_eq!(
        rule.nft_text(),
        "ip6 saddr ::/0 ip6 daddr 2001:db8::2 masquerade"
    );
    assert_eq!(
        Action::DnatTo {
            address: "2001:db8::2".parse().unwrap(),
            port: 85
        }
        .nft_text(),
        "dnat to [2001:db8::2]:85"
    );
    assert_eq!(
        address(Direction::Source, CmpOp::Neq, "10.1.2.3/8").nft_text(IpFamily::V4),
        "ip saddr != 10.0.0.0/8"
    );
    assert_eq!(
        Matcher::LocalDestination.nft_text(IpFamily::V4),
        "fib daddr type local"
    );
}

/// The kernel names of the rule's expressions, for comparing with what
/// `nft --debug=netlink` shows for the same rule.
fn names(rule: &RuleSpec) -> Vec<&'static str> {
    rule.expressions().iter().map(Expr::name).collect()
}

#[test]
fn expressions_follow_nft() {
    let rule = RuleSpec {
        family: IpFamily::V4,
        chain: "prerouting",
        matchers: vec![
            address(Direction::Source, CmpOp::Eq, "10.0.0.0/8"),
            Matcher::InterfaceName {
                direction: Direction::Source,
                op: CmpOp::Neq,
                name: "eth0".into(),
                prefix: false,
            },
            Matcher::LocalDestination,
        ],
        action: Action::Jump("hostports_all"),
        comment: None,
    };
    assert_eq!(
        names(&rule),
        [
            "payload",
            "bitwise",
            "cmp",
            "meta",
            "cmp",
            "fib",
            "cmp",
            "immediate"
        ]
    );
    let dnat = RuleSpec {
        family: IpFamily::V6,
        chain: "hostports",
        matchers: vec![Matcher::DestinationPort {
            protocol: Protocol::Sctp,
            port: 8085,
        }],
        action: Action::DnatTo {
            address: "2001:db8::2".parse().unwrap(),
            port: 85,
        },
        comment: None,
    };
    assert_eq!(
        names(&dnat),
        [
            "meta",
            "cmp",
            "payload",
            "cmp",
            "immediate",
            "immediate",
            "nat"
        ]
    );
}

#[test]
fn fib_and_nat_expressions() {
    let mut out = Vec::new();
    Matcher::LocalDestination.expressions(IpFamily::V4, &mut out);
    assert_eq!(
        out,
        [
            Expr::FibDaddrType,
            // RTN_LOCAL in host byte order.
            Expr::Cmp {
                op: CmpOp::Eq,
                data: 2u32.to_ne_bytes().to_vec(),
            },
        ]
    );

    let mut out = Vec::new();
    Action::DnatTo {
        address: "10.0.0.2".parse().unwrap(),
        port: 80,
    }
    .expressions(IpFamily::V4, &mut out);
    assert_eq!(
        out,
        [
            Expr::Immediate {
                register: DataRegister::Reg1,
                data: vec![10, 0, 0, 2],
            },
            Expr::Immediate {
                register: DataRegister::Reg2,
                data: 80u16.to_be_bytes().to_vec(),
            },
            Expr::Dnat {
                family: NftFamily::Ip
            },
        ]
    );
    let mut out = Vec::new();
    Action::DnatTo {
        address: "2001:db8::2".parse().unwrap(),
        port: 80,
    }
    .expressions(IpFamily::V6, &mut out);
    assert_eq!(
        out.last(),
        Some(&Expr::Dnat {
            family: NftFamily::Ip6
        })
    );
}

#[test]
fn addresses_are_masked_unless_full_length() {
    let mut out = Vec::new();
    address(Direction::Source, CmpOp::Neq, "10.1.2.3/8").expressions(IpFamily::V4, &mut out);
    assert_eq!(
        out,
        [
            Expr::Payload {
                base: PayloadBase::Network,
                offset: 12,
                len: 4
            },
            Expr::Mask(vec![255, 0, 0, 0]),
            Expr::Cmp {
                op: CmpOp::Neq,
                data: vec![10, 0, 0, 0]
            },
        ]
    );
    let mut out = Vec::new();
    address(Direction::Destination, CmpOp::Eq, "2001:db8::1").expressions(IpFamily::V6, &mut out);
    assert_eq!(out.len(), 2);
    assert_eq!(
        out[0],
        Expr::Payload {
            base: PayloadBase::Network,
            offset: 24,
            len: 16
        }
    );
}

#[test]
fn interface_names_exact_and_prefix() {
    let mut out = Vec::new();
    Matcher::InterfaceName {
        direction: Direction::Destination,
        op: CmpOp::Eq,
        name: "eth0".into(),
        prefix: false,
    }
    .expressions(IpFamily::V4, &mut out);
    let mut padded = b"eth0".to_vec();
    padded.resize(16, 0);
    assert_eq!(
        out,
        [
            Expr::Meta(MetaKey::Oifname),
            Expr::Cmp {
                op: CmpOp::Eq,
                data: padded
            }
        ]
    );
    let mut out = Vec::new();
    Matcher::InterfaceName {
        direction: Direction::Source,
        op: CmpOp::Eq,
        name: "veth".into(),
        prefix: true,
    }
    .expressions(IpFamily::V4, &mut out);
    assert_eq!(
        out,
        [
            Expr::Meta(MetaKey::Iifname),
            Expr::Cmp {
                op: CmpOp::Eq,
                data: b"veth".to_vec()
            }
        ]
    );
}
