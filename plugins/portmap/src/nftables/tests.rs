//! Rule plans against the reference's `portmap_nftables_test.go` dumps.

use super::*;
use crate::config::{BackendChoice, BackendKind, PortMapping, Protocol};
use libcni::netlink::BatchMessage;
use netlink_packet_netfilter::nftables::NfTablesMessage;
use netlink_packet_netfilter::{NetfilterMessage, NetfilterMessageInner};

/// The messages of the setup part of an ADD's batch.
fn setup_messages(
    plan: &FamilyPlan,
    listed: &[ListedRule],
    existing: &ExistingChains,
) -> Vec<BatchMessage<NetfilterMessage>> {
    let mut batch = Batch::new();
    plan.add_setup(&mut batch, listed, existing);
    batch.messages().to_vec()
}

const ID: &str = "icee6giejonei6so";

fn mapping(host: u16, container: u16, protocol: Protocol, host_ip: Option<&str>) -> PortMapping {
    PortMapping {
        host_port: host,
        container_port: container,
        protocol,
        host_ip: host_ip.map(|ip| ip.parse().unwrap()),
    }
}

fn reference_conf() -> PortMapConf {
    use Protocol::*;
    PortMapConf {
        network: "test".to_string(),
        backend: BackendChoice::Configured(BackendKind::Nftables),
        snat: true,
        masq_all: false,
        mark_masq_bit: 13,
        external_set_mark_chain: None,
        conditions_v4: Vec::new(),
        conditions_v6: Vec::new(),
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

fn lines(rules: &[RuleSpec]) -> Vec<String> {
    rules.iter().map(|r| r.nft_add_line(TABLE)).collect()
}

#[test]
fn ipv4_rules_match_the_reference_dump() {
    let plan = FamilyPlan::new(&reference_conf(), ID, "10.0.0.2/24".parse().unwrap()).unwrap();
    assert_eq!(
        lines(&plan.container_rules),
        [
            r#"add rule ip cni_hostport hostports tcp dport 8080 dnat to 10.0.0.2:80 comment "icee6giejonei6so""#,
            r#"add rule ip cni_hostport hostports tcp dport 8081 dnat to 10.0.0.2:80 comment "icee6giejonei6so""#,
            r#"add rule ip cni_hostport hostports udp dport 8080 dnat to 10.0.0.2:81 comment "icee6giejonei6so""#,
            r#"add rule ip cni_hostport hostports udp dport 8082 dnat to 10.0.0.2:82 comment "icee6giejonei6so""#,
            r#"add rule ip cni_hostport hostports ip daddr 192.168.0.2 tcp dport 8083 dnat to 10.0.0.2:83 comment "icee6giejonei6so""#,
            r#"add rule ip cni_hostport hostports tcp dport 8084 dnat to 10.0.0.2:84 comment "icee6giejonei6so""#,
            r#"add rule ip cni_hostport masquerading ip saddr 10.0.0.2 ip daddr 10.0.0.2 masquerade comment "icee6giejonei6so""#,
            r#"add rule ip cni_hostport masquerading ip saddr 127.0.0.1 ip daddr 10.0.0.2 masquerade comment "icee6giejonei6so""#,
        ]
    );
    assert_eq!(
        lines(&plan.base_rules),
        [
            "add rule ip cni_hostport hostports_all jump hostip_hostports",
            "add rule ip cni_hostport hostports_all jump hostports",
            "add rule ip cni_hostport prerouting fib daddr type local jump hostports_all",
            "add rule ip cni_hostport output fib daddr type local jump hostports_all",
        ]
    );
    assert!(plan.snat);
}

#[test]
fn ipv6_rules_without_snat_match_the_reference_dump() {
    let mut conf = reference_conf();
    conf.snat = false;
    conf.conditions_v6 = vec!["ip6".into(), "saddr".into(), "2001:db8:1::/48".into()];
    let plan = FamilyPlan::new(&conf, ID, "2001:db8::2/64".parse().unwrap()).unwrap();
    assert_eq!(
        lines(&plan.container_rules),
        [
            r#"add rule ip6 cni_hostport hostports tcp dport 8080 dnat to [2001:db8::2]:80 comment "icee6giejonei6so""#,
            r#"add rule ip6 cni_hostport hostports tcp dport 8081 dnat to [2001:db8::2]:80 comment "icee6giejonei6so""#,
            r#"add rule ip6 cni_hostport hostports udp dport 8080 dnat to [2001:db8::2]:81 comment "icee6giejonei6so""#,
            r#"add rule ip6 cni_hostport hostports udp dport 8082 dnat to [2001:db8::2]:82 comment "icee6giejonei6so""#,
            r#"add rule ip6 cni_hostport hostports ip6 daddr 2001:db8:a::1 tcp dport 8085 dnat to [2001:db8::2]:85 comment "icee6giejonei6so""#,
            r#"add rule ip6 cni_hostport hostports tcp dport 8086 dnat to [2001:db8::2]:86 comment "icee6giejonei6so""#,
        ]
    );
    assert_eq!(
        lines(&plan.base_rules)[2..],
        [
            "add rule ip6 cni_hostport prerouting ip6 saddr 2001:db8:1::/48 fib daddr type local jump hostports_all",
            "add rule ip6 cni_hostport output ip6 saddr 2001:db8:1::/48 fib daddr type local jump hostports_all",
        ]
    );
    assert!(!plan.snat);
    // No masquerading chain without SNAT.
    let chains = setup_messages(&plan, &[], &ExistingChains::new()).len();
    let with_snat = setup_messages(
        &FamilyPlan::new(&reference_conf(), ID, "2001:db8::2/64".parse().unwrap()).unwrap(),
        &[],
        &ExistingChains::new(),
    )
    .len();
    assert_eq!(with_snat, chains + 1);
}

#[test]
fn masq_all_uses_any_source() {
    let mut conf = reference_conf();
    conf.masq_all = true;
    conf.mappings = vec![mapping(8080, 80, Protocol::Tcp, None)];
    let v4 = FamilyPlan::new(&conf, ID, "10.0.0.2/24".parse().unwrap()).unwrap();
    assert_eq!(
        lines(&v4.container_rules)[1..],
        [
            r#"add rule ip cni_hostport masquerading ip saddr 0.0.0.0/0 ip daddr 10.0.0.2 masquerade comment "icee6giejonei6so""#
        ]
    );
    let v6 = FamilyPlan::new(&conf, ID, "2001:db8::2/64".parse().unwrap()).unwrap();
    assert_eq!(
        lines(&v6.container_rules)[1..],
        [
            r#"add rule ip6 cni_hostport masquerading ip6 saddr ::/0 ip6 daddr 2001:db8::2 masquerade comment "icee6giejonei6so""#
        ]
    );
}

#[test]
fn unsupported_conditions_are_config_errors() {
    let mut conf = reference_conf();
    conf.conditions_v4 = vec!["a".into(), "b".into()];
    let e = FamilyPlan::new(&conf, ID, "10.0.0.2/24".parse().unwrap()).unwrap_err();
    assert!(NftError::from(e).is_config());
}

#[test]
fn setup_creates_table_chains_and_refills_base_chains() {
    let plan = FamilyPlan::new(&reference_conf(), ID, "10.0.0.2/24".parse().unwrap()).unwrap();
    let kinds: Vec<String> = setup_messages(&plan, &[], &ExistingChains::new())
        .iter()
        .map(|m| match &m.message.inner {
            NetfilterMessageInner::NfTables(inner) => {
                format!("{:?}", inner.message_type())
            }
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "NewTable",
            "NewChain",
            "NewChain",
            "NewChain",
            "NewChain",
            "NewChain",
            "NewChain",
            "DeleteRule",
            "DeleteRule",
            "DeleteRule",
            "NewRule",
            "NewRule",
            "NewRule",
            "NewRule",
        ]
    );
    // Creation never uses NLM_F_EXCL, so an existing table or chain is fine.
    assert!(setup_messages(&plan, &[], &ExistingChains::new())
        .iter()
        .all(|m| m.flags & netlink_packet_core::NLM_F_EXCL == 0));
}

#[test]
fn userdata_round_trips_and_reference_comments_parse() {
    let data = rule_userdata("ctr1", "test").unwrap();
    assert_eq!(data, b"\x00\x05ctr1\x00\xc0\x05test\x00");
    let tags = parse_rule_userdata(&data);
    assert_eq!(tags.comment.as_deref(), Some("ctr1"));
    assert_eq!(tags.network.as_deref(), Some("test"));
    assert_eq!(tags.spec, None);
    // What nft writes for `comment "icee6giejonei6so"`.
    assert_eq!(
        parse_rule_userdata(b"\x00\x11icee6giejonei6so\x00")
            .comment
            .as_deref(),
        Some(ID)
    );
    // Truncated or empty data never panics.
    assert_eq!(parse_rule_userdata(b"\x00\x40abc"), RuleTags::default());
    assert_eq!(parse_rule_userdata(b""), RuleTags::default());
    assert_eq!(parse_rule_userdata(b"\x00"), RuleTags::default());
    // A long network name is dropped rather than overflowing userdata.
    let long_network = "n".repeat(200);
    let data = rule_userdata(&"c".repeat(64), &long_network).unwrap();
    assert_eq!(parse_rule_userdata(&data).network, None);
    assert!(matches!(
        rule_userdata(&"c".repeat(300), "test"),
        Err(NftError::CommentTooLong(300))
    ));
}

#[test]
fn ownership_of_listed_rules() {
    let rule = |chain: &str, comment: Option<&str>, network: Option<&str>| ListedRule {
        family: IpFamily::V4,
        chain: chain.to_string(),
        handle: 1,
        comment: comment.map(String::from),
        network: network.map(String::from),
        spec: None,
    };
    assert!(rule("hostports", Some("a"), Some("net")).belongs_to("net", "a"));
    // Made by the reference: no network record.
    assert!(rule("masquerading", Some("a"), None).belongs_to("net", "a"));
    assert!(rule("hostip_hostports", Some("a"), None).belongs_to("net", "a"));
    assert!(!rule("hostports", Some("a"), Some("other")).belongs_to("net", "a"));
    assert!(!rule("hostports", Some("b"), Some("net")).belongs_to("net", "a"));
    assert!(!rule("prerouting", Some("a"), Some("net")).belongs_to("net", "a"));
}

#[test]
fn base_chains_are_rewritten_only_when_they_differ() {
    let plan = FamilyPlan::new(&reference_conf(), ID, "10.0.0.2/24".parse().unwrap()).unwrap();
    let listed_rule = |family: IpFamily, rule: &RuleSpec, spec: Option<String>| ListedRule {
        family,
        chain: rule.chain.to_string(),
        handle: 1,
        comment: None,
        network: None,
        spec,
    };
    let current: Vec<ListedRule> = plan
        .base_rules
        .iter()
        .map(|r| listed_rule(IpFamily::V4, r, Some(spec_fingerprint(r))))
        .collect();
    let flushes = |listed: &[ListedRule]| {
        setup_messages(&plan, listed, &ExistingChains::new())
            .iter()
            .filter(|m| {
                matches!(
                    &m.message.inner,
                    NetfilterMessageInner::NfTables(NfTablesMessage::DeleteRule(_))
                )
            })
            .count()
    };
    assert_eq!(flushes(&current), 0);
    assert_eq!(flushes(&[]), 3);
    // Rules of the reference (no fingerprint), a duplicate, another
    // family's rules, or other conditions: rewrite.
    let mut unmarked = current.clone();
    unmarked[2].spec = None;
    assert_eq!(flushes(&unmarked), 3);
    let mut duplicated = current.clone();
    duplicated.push(current[2].clone());
    assert_eq!(flushes(&duplicated), 3);
    let other_family: Vec<ListedRule> = current
        .iter()
        .map(|r| ListedRule {
            family: IpFamily::V6,
            ..r.clone()
        })
        .collect();
    assert_eq!(flushes(&other_family), 3);
    let mut conf = reference_conf();
    conf.conditions_v4 = vec!["iifname".into(), "eth0".into()];
    let other = FamilyPlan::new(&conf, ID, "10.0.0.2/24".parse().unwrap()).unwrap();
    assert_ne!(
        spec_fingerprint(&other.base_rules[2]),
        spec_fingerprint(&plan.base_rules[2])
    );
    // Pinned: a rule an older version wrote is recognised by this value.
    let rule = &plan.base_rules[2];
    assert_eq!(
        format!("{} {}", rule.chain, rule.nft_text()),
        "prerouting fib daddr type local jump hostports_all"
    );
    assert_eq!(spec_fingerprint(rule), "5450430e59ef62f5e55255f228e2446b");
}

#[test]
fn existing_chains_are_not_created_again() {
    let plan = FamilyPlan::new(&reference_conf(), ID, "10.0.0.2/24".parse().unwrap()).unwrap();
    let new_chains = |existing: &ExistingChains| {
        setup_messages(&plan, &[], existing)
            .iter()
            .filter(|m| {
                matches!(
                    &m.message.inner,
                    NetfilterMessageInner::NfTables(NfTablesMessage::NewChain(_))
                )
            })
            .count()
    };
    assert_eq!(new_chains(&ExistingChains::new()), 6);
    let mut existing: ExistingChains = [
        (HOSTPORTS_CHAIN, None),
        (HOSTIP_HOSTPORTS_CHAIN, None),
        (HOSTPORTS_ALL_CHAIN, None),
        (PREROUTING_CHAIN, Some((0, -100))),
        (OUTPUT_CHAIN, Some((3, -100))),
        (MASQUERADING_CHAIN, Some((4, 100))),
    ]
    .into_iter()
    .map(|(n, h)| (n.to_string(), h))
    .collect();
    assert_eq!(new_chains(&existing), 0);
    // A chain of that name without the right hook is sent again, so the
    // kernel reports the conflict instead of rules silently not applying.
    existing.insert(PREROUTING_CHAIN.to_string(), None);
    existing.insert(OUTPUT_CHAIN.to_string(), Some((3, 0)));
    assert_eq!(new_chains(&existing), 2);
}

/// The byte check DEL and GC filter listings with never turns away a rule
/// the full check would take, and turns away other pods' rules.
#[test]
fn the_userdata_prefilter_keeps_every_rule_the_text_reading_matches() {
    let mut data = Userdata::new();
    data.push_text(userdata::COMMENT, "ctr-1");
    data.push_text(userdata::NETWORK, "net");
    let tagged = data.into_bytes();
    assert!(may_be_text(&tagged, userdata::COMMENT, "ctr-1"));
    assert!(may_be_text(&tagged, userdata::NETWORK, "net"));
    assert!(!may_be_text(&tagged, userdata::COMMENT, "ctr-10"));
    assert!(!may_be_text(&tagged, userdata::COMMENT, "ctr-"));
    assert!(!may_be_text(&tagged, userdata::FINGERPRINT, "ctr-1"));
    assert!(!may_be_text(&[], userdata::COMMENT, "ctr-1"));
    // Not UTF-8: left to the text reading, which replaces the bad byte.
    let odd = [userdata::COMMENT, 3, b'a', 0xff, 0];
    assert_eq!(userdata::text(&odd[2..]), "a\u{fffd}");
    assert!(may_be_text(&odd, userdata::COMMENT, "a\u{fffd}"));
    for (blob, wanted) in [
        (&tagged[..], "ctr-1"),
        (&odd[..], "a\u{fffd}"),
        (&tagged[..], "x"),
    ] {
        let reads_as = userdata::find(blob, userdata::COMMENT)
            .map(userdata::text)
            .as_deref()
            == Some(wanted);
        assert!(!reads_as || may_be_text(blob, userdata::COMMENT, wanted));
    }
}
