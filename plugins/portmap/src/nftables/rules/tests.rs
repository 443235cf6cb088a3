use super::*;
use netlink_packet_core::Emitable;

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
        family: Family::V4,
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
        family: Family::V6,
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
        address(Direction::Source, CmpOp::Neq, "10.1.2.3/8").nft_text(Family::V4),
        "ip saddr != 10.0.0.0/8"
    );
    assert_eq!(
        Matcher::LocalDestination.nft_text(Family::V4),
        "fib daddr type local"
    );
}

/// The expressions as (name, attributes emitted) pairs, for comparing
/// with what `nft --debug=netlink` shows for the same rule.
fn names(rule: &RuleSpec) -> Vec<String> {
    rule.expressions()
        .iter()
        .map(|e| match e {
            ListAttribute::Element(attrs) => attrs
                .iter()
                .find_map(|a| match a {
                    ExpressionAttribute::Name(n) => Some(n.clone()),
                    _ => None,
                })
                .unwrap_or_default(),
            _ => String::new(),
        })
        .collect()
}

#[test]
fn expressions_follow_nft() {
    let rule = RuleSpec {
        family: Family::V4,
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
        family: Family::V6,
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

/// The bytes of one expression's data attribute.
fn emitted(expression: &ListAttribute<ExpressionAttribute>) -> Vec<u8> {
    let mut out = vec![0u8; expression.buffer_len()];
    expression.emit(&mut out);
    out
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn fib_and_nat_attributes() {
    let mut out = Vec::new();
    Matcher::LocalDestination.expressions(Family::V4, &mut out);
    let fib = emitted(&out[0]);
    // NFTA_FIB_DREG=1, NFTA_FIB_RESULT=ADDRTYPE(3), NFTA_FIB_FLAGS=DADDR(2),
    // each a big-endian u32 attribute.
    for (kind, value) in [(1u16, 1u32), (2, 3), (3, 2)] {
        let mut attr = 8u16.to_ne_bytes().to_vec();
        attr.extend_from_slice(&kind.to_ne_bytes());
        attr.extend_from_slice(&value.to_be_bytes());
        assert!(contains(&fib, &attr), "fib lacks attribute {kind}");
    }
    let cmp = emitted(&out[1]);
    assert!(
        contains(&cmp, &2u32.to_ne_bytes()),
        "RTN_LOCAL in host order"
    );

    let mut out = Vec::new();
    Action::DnatTo {
        address: "10.0.0.2".parse().unwrap(),
        port: 80,
    }
    .expressions(Family::V4, &mut out);
    assert!(contains(&emitted(&out[0]), &[10, 0, 0, 2]));
    assert!(contains(&emitted(&out[1]), &80u16.to_be_bytes()));
    let nat = emitted(&out[2]);
    assert!(contains(&nat, b"nat\0"));
    assert!(contains(&nat, &NFPROTO_IPV4.to_be_bytes()));
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
    .expressions(Family::V4, &mut out);
    let mut padded = b"eth0".to_vec();
    padded.resize(16, 0);
    assert!(contains(&emitted(&out[1]), &padded));
    let mut out = Vec::new();
    Matcher::InterfaceName {
        direction: Direction::Source,
        op: CmpOp::Eq,
        name: "veth".into(),
        prefix: true,
    }
    .expressions(Family::V4, &mut out);
    let cmp = emitted(&out[1]);
    assert!(contains(&cmp, b"veth"));
    assert!(!contains(&cmp, b"veth\0"));
}
