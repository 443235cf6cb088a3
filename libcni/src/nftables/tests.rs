//! The nf_tables layer against the running kernel, each test in a network
//! namespace of its own: a thread that unshares its namespace, so nothing
//! of the machine is touched and nothing is left behind when it ends.

use super::*;
use crate::netlink::test_support::{in_private_netns, nft};
use crate::nftables::expr::{data_attributes, encoded_element};

const NAT_PREROUTING: BaseChain = BaseChain {
    chain_type: "nat",
    hook: Hook {
        number: HOOK_PREROUTING,
        priority: -100,
    },
    policy_accept: false,
};

const NAT_POSTROUTING: BaseChain = BaseChain {
    chain_type: "nat",
    hook: Hook {
        number: HOOK_POSTROUTING,
        priority: 100,
    },
    policy_accept: true,
};

/// The rules of the round-trip test: (chain, expressions, `nft list` text).
fn sample_rules(family: Family) -> Vec<(&'static str, Vec<Expr>, &'static str)> {
    let v4 = family == Family::Ip;
    let (saddr, daddr, width) = if v4 { (12, 16, 4) } else { (8, 24, 16) };
    let mut network = vec![0u8; width];
    network[0] = 10;
    let mut container = network.clone();
    container[width - 1] = 2;
    let port = 8080u16.to_be_bytes().to_vec();
    let mut named = b"eth0".to_vec();
    named.resize(IFNAMSIZ, 0);
    let l4 = |proto: u8| {
        vec![
            Expr::Meta(MetaKey::L4Proto),
            Expr::Cmp {
                op: CmpOp::Eq,
                data: vec![proto],
            },
            Expr::Payload {
                base: PayloadBase::Transport,
                offset: 2,
                len: 2,
            },
            Expr::Cmp {
                op: CmpOp::Eq,
                data: port.clone(),
            },
        ]
    };
    let mut local = vec![
        Expr::FibDaddrType,
        Expr::Cmp {
            op: CmpOp::Eq,
            data: 2u32.to_ne_bytes().to_vec(),
        },
    ];
    local.push(Expr::Verdict(Verdict::Jump("hostports".into())));
    let mut dnat = l4(6);
    dnat.extend([
        Expr::Immediate {
            register: DataRegister::Reg1,
            data: container.clone(),
        },
        Expr::Immediate {
            register: DataRegister::Reg2,
            data: 80u16.to_be_bytes().to_vec(),
        },
        Expr::Dnat { family },
    ]);
    let mut masq = Expr::prefix_match(PayloadBase::Network, saddr, &container, 255, CmpOp::Eq);
    masq.extend(Expr::prefix_match(
        PayloadBase::Network,
        daddr,
        &network,
        8,
        CmpOp::Neq,
    ));
    masq.push(Expr::Masquerade);
    let mut masked = Expr::prefix_match(PayloadBase::Network, daddr, &network, 4, CmpOp::Eq);
    masked.push(Expr::Verdict(Verdict::Return));
    let mut iif = vec![
        Expr::Meta(MetaKey::Iifname),
        Expr::Cmp {
            op: CmpOp::Neq,
            data: named,
        },
        Expr::Meta(MetaKey::Oifname),
        Expr::Cmp {
            op: CmpOp::Eq,
            data: b"veth".to_vec(),
        },
    ];
    iif.push(Expr::Verdict(Verdict::Goto("hostports".into())));
    let (dnat_text, masq_text, masked_text) = if v4 {
        (
            "tcp dport 8080 dnat to 10.0.0.2:80",
            "ip saddr 10.0.0.2 ip daddr != 10.0.0.0/8 masquerade",
            "ip daddr 0.0.0.0/4 return",
        )
    } else {
        (
            "tcp dport 8080 dnat to [a00::2]:80",
            "ip6 saddr a00::2 ip6 daddr != a00::/8 masquerade",
            "ip6 daddr ::/4 return",
        )
    };
    vec![
        ("prerouting", local, "fib daddr type local jump hostports"),
        ("hostports", dnat, dnat_text),
        ("postrouting", masq, masq_text),
        ("plain", masked, masked_text),
        (
            "plain",
            iif,
            "iifname != \"eth0\" oifname \"veth*\" goto hostports",
        ),
        ("plain", vec![Expr::Verdict(Verdict::Drop)], "drop"),
        ("plain", vec![Expr::Verdict(Verdict::Accept)], "accept"),
    ]
}

#[test]
fn every_expression_round_trips_through_the_kernel_and_lists_like_nft() {
    in_private_netns(|| {
        let mut socket = NfTablesSocket::open().unwrap();
        socket.probe().unwrap();
        for family in [Family::Ip, Family::Ip6] {
            let rules = sample_rules(family);
            let mut batch = Batch::new();
            batch.add_table(family, "t", Some(userdata::comment(b"test table")));
            batch.add_chain(family, "t", "hostports", None, None);
            batch.add_chain(family, "t", "plain", None, None);
            batch.add_chain(family, "t", "prerouting", Some(NAT_PREROUTING), None);
            batch.add_chain(family, "t", "postrouting", Some(NAT_POSTROUTING), None);
            for (chain, exprs, _) in &rules {
                let rule = Rule::new(exprs.clone()).with_comment(b"round trip");
                batch.add_rule(family, "t", chain, &rule);
            }
            socket.commit(batch).unwrap();

            let listed = socket.list_rules(family, "t", None).unwrap();
            assert_eq!(listed.len(), rules.len());
            for (chain, exprs, _) in &rules {
                let found = listed
                    .iter()
                    .filter(|r| r.chain == *chain)
                    .any(|r| r.expressions().as_ref() == Some(exprs));
                assert!(found, "{family:?} {chain}: {exprs:?} not read back");
            }
            assert!(listed.iter().all(|r| r.family == family && r.table == "t"));
            assert!(listed
                .iter()
                .all(|r| r.comment() == Some(&b"round trip"[..])));
            let text = nft(&["list", "table", family.name(), "t"], None);
            for (_, _, line) in &rules {
                assert!(
                    text.contains(&format!("{line} comment \"round trip\"")),
                    "{line:?} not in\n{text}"
                );
            }
            assert!(text.contains("comment \"test table\""), "{text}");
            // One chain only.
            let plain = socket.list_rules(family, "t", Some("plain")).unwrap();
            assert_eq!(plain.len(), 4);
            assert!(plain.iter().all(|r| r.chain == "plain"));
        }
    });
}

#[test]
fn foreign_rules_list_but_do_not_decode() {
    in_private_netns(|| {
        nft(
            &["-f", "-"],
            Some(
                "table inet other {\n\
                 chain c { log prefix \"y\"; ip saddr 10.0.0.1 limit rate 5/second log prefix \"x\" comment \"theirs\"; }\n\
                 }\n",
            ),
        );
        let mut socket = NfTablesSocket::open().unwrap();
        let listed = socket.list_rules(Family::Inet, "other", Some("c")).unwrap();
        assert_eq!(listed.len(), 2);
        assert!(listed.iter().all(|r| r.expressions().is_none()));
        assert_eq!(listed[1].comment(), Some(&b"theirs"[..]));
        assert!(listed[0].handle < listed[1].handle);
        // Other families and tables see none of it.
        assert!(socket
            .list_rules(Family::Ip, "other", None)
            .unwrap()
            .is_empty());
        assert!(socket
            .list_rules(Family::Inet, "none", None)
            .unwrap()
            .is_empty());
        assert!(socket
            .list_rules(Family::Inet, "other", Some("none"))
            .unwrap()
            .is_empty());
    });
}

/// A filtered listing keeps exactly the rules its filter accepts, in
/// order, with everything a full listing gives them, over a dump long
/// enough to take several datagrams (600 rules of about 150 bytes).
#[test]
fn a_filtered_listing_keeps_what_the_filter_accepts_across_datagrams() {
    in_private_netns(|| {
        let mut socket = NfTablesSocket::open().unwrap();
        let mut batch = Batch::new();
        batch.add_table(Family::Ip, "t", None);
        batch.add_chain(Family::Ip, "t", "many", None, None);
        batch.add_chain(Family::Ip, "t", "target", None, None);
        for n in 0..600u32 {
            let verdict = if n % 7 == 0 {
                Verdict::Jump("target".into())
            } else {
                Verdict::Accept
            };
            let rule =
                Rule::new(vec![Expr::Verdict(verdict)]).with_comment(format!("pod-{n}").as_bytes());
            batch.add_rule(Family::Ip, "t", "many", &rule);
        }
        socket.commit(batch).unwrap();

        let all = socket.list_rules(Family::Ip, "t", None).unwrap();
        assert_eq!(all.len(), 600);
        let by_comment = socket
            .list_rules_where(Family::Ip, "t", Some("many"), |r| {
                r.comment() == Some(&b"pod-599"[..])
            })
            .unwrap();
        assert_eq!(by_comment, vec![all[599].clone()]);
        let jumps = socket
            .list_rules_where(Family::Ip, "t", None, |r| {
                r.verdict_chain().as_deref() == Some("target")
            })
            .unwrap();
        let expected: Vec<ListedRule> = all
            .iter()
            .filter(|r| r.verdict_chain().as_deref() == Some("target"))
            .cloned()
            .collect();
        assert_eq!(expected.len(), 86);
        assert_eq!(jumps, expected);
        let mut seen = 0;
        let none = socket
            .list_rules_where(Family::Ip, "t", None, |_| {
                seen += 1;
                false
            })
            .unwrap();
        assert!(none.is_empty());
        assert_eq!(seen, 600, "every rule is shown to the filter once");
        // A batch whose acknowledgements outgrow the socket's default
        // receive buffer (before the socket made room for them, 603
        // messages ended in ENOBUFS).
        let mut batch = Batch::new();
        batch.add_chain(Family::Ip, "t", "more", None, None);
        for _ in 0..3000 {
            batch.add_rule(
                Family::Ip,
                "t",
                "more",
                &Rule::new(vec![Expr::Verdict(Verdict::Accept)]),
            );
        }
        socket.commit(batch).unwrap();
        assert_eq!(
            socket
                .list_rules(Family::Ip, "t", Some("more"))
                .unwrap()
                .len(),
            3000
        );
        // A missing table is no rules, as for the full listing.
        assert!(socket
            .list_rules_where(Family::Ip, "none", None, |_| true)
            .unwrap()
            .is_empty());
    });
}

#[test]
fn chains_report_their_hooks() {
    in_private_netns(|| {
        let mut socket = NfTablesSocket::open().unwrap();
        assert_eq!(socket.get_chain(Family::Bridge, "nat", "X").unwrap(), None);
        let mut batch = Batch::new();
        batch.add_table(Family::Bridge, "nat", None);
        batch.add_chain(
            Family::Bridge,
            "nat",
            "PREROUTING",
            Some(BaseChain {
                chain_type: "filter",
                hook: Hook {
                    number: HOOK_PREROUTING,
                    priority: -300,
                },
                policy_accept: true,
            }),
            None,
        );
        batch.add_chain(Family::Bridge, "nat", "regular", None, None);
        socket.commit(batch).unwrap();
        let prerouting = socket
            .get_chain(Family::Bridge, "nat", "PREROUTING")
            .unwrap()
            .unwrap();
        assert_eq!(
            prerouting,
            ListedChain {
                hook: Some(Hook {
                    number: HOOK_PREROUTING,
                    priority: -300
                }),
                chain_type: Some("filter".to_string()),
                policy_accept: Some(true),
                use_count: 0,
            }
        );
        let regular = socket
            .get_chain(Family::Bridge, "nat", "regular")
            .unwrap()
            .unwrap();
        assert_eq!(
            regular,
            ListedChain {
                hook: None,
                chain_type: None,
                policy_accept: None,
                use_count: 0,
            }
        );
        // The use count is rules plus jumps: one rule in PREROUTING that
        // jumps to `regular`.
        let mut batch = Batch::new();
        batch.add_rule(
            Family::Bridge,
            "nat",
            "PREROUTING",
            &Rule::new(vec![Expr::Verdict(Verdict::Jump("regular".into()))]),
        );
        socket.commit(batch).unwrap();
        let count = |socket: &mut NfTablesSocket, chain: &str| {
            socket
                .get_chain(Family::Bridge, "nat", chain)
                .unwrap()
                .unwrap()
                .use_count
        };
        assert_eq!(count(&mut socket, "PREROUTING"), 1);
        assert_eq!(count(&mut socket, "regular"), 1);
        let wanted = BaseChain {
            chain_type: "filter",
            hook: prerouting.hook.unwrap(),
            policy_accept: true,
        };
        assert!(wanted.is_in_place(&prerouting));
        assert!(!wanted.is_in_place(&regular));
        assert!(!BaseChain {
            chain_type: "nat",
            ..wanted
        }
        .is_in_place(&prerouting));
        nft(&["add chain bridge nat PREROUTING { policy drop; }"], None);
        let dropping = socket
            .get_chain(Family::Bridge, "nat", "PREROUTING")
            .unwrap()
            .unwrap();
        assert_eq!(dropping.policy_accept, Some(false));
        assert!(!wanted.is_in_place(&dropping));
        assert!(BaseChain {
            policy_accept: false,
            ..wanted
        }
        .is_in_place(&dropping));
        assert_eq!(socket.get_chain(Family::Bridge, "nat", "X").unwrap(), None);
        assert!(nft(&["list", "ruleset"], None)
            .contains("type filter hook prerouting priority dstnat; policy drop;"));
    });
}

#[test]
fn a_failed_batch_applies_nothing_and_names_the_operation() {
    in_private_netns(|| {
        let mut socket = NfTablesSocket::open().unwrap();
        let mut batch = Batch::new();
        batch.add_table(Family::Inet, "t", None);
        batch.add_chain(Family::Inet, "t", "c", None, None);
        socket.commit(batch).unwrap();

        let mut batch = Batch::new();
        batch.add_rule(
            Family::Inet,
            "t",
            "c",
            &Rule::new(vec![Expr::Verdict(Verdict::Accept)]),
        );
        batch.delete_rule(Family::Inet, "t", "c", 9999);
        let e = socket.commit(batch).unwrap_err();
        assert_eq!(e.errno(), Some(Errno::ENOENT));
        assert!(
            e.to_string()
                .starts_with("nftables: delete rule inet t c handle 9999: ENOENT"),
            "{e}"
        );
        assert!(socket
            .list_rules(Family::Inet, "t", None)
            .unwrap()
            .is_empty());
        // The socket is usable afterwards (no reply left behind).
        socket.probe().unwrap();
        let mut batch = Batch::new();
        batch.flush_chain(Family::Inet, "t", "c");
        batch.delete_chain(Family::Inet, "t", "c");
        socket.commit(batch).unwrap();
        assert_eq!(socket.get_chain(Family::Inet, "t", "c").unwrap(), None);
        socket.commit(Batch::new()).unwrap();
    });
}

#[test]
fn retry_if_vanished_retries_enoent_only_and_boundedly() {
    let mut calls = 0;
    let result: Result<(), NfTablesError> = retry_if_vanished(NfTablesError::errno, || {
        calls += 1;
        Err(NfTablesError(NetlinkError::Kernel {
            errno: Errno::ENOENT,
            message: None,
        }))
    });
    assert!(result.is_err());
    assert_eq!(calls, ATTEMPTS);
    let mut calls = 0;
    let result: Result<(), NfTablesError> = retry_if_vanished(NfTablesError::errno, || {
        calls += 1;
        Err(NfTablesError(NetlinkError::Kernel {
            errno: Errno::EEXIST,
            message: None,
        }))
    });
    assert!(result.is_err());
    assert_eq!(calls, 1);
}

#[test]
fn prefix_match_like_nft() {
    let base = PayloadBase::Network;
    // 10.0.0.0/24: three bytes, no mask.
    let e = Expr::prefix_match(base, 16, &[10, 0, 0, 0], 24, CmpOp::Neq);
    assert_eq!(
        e,
        vec![
            Expr::Payload {
                base,
                offset: 16,
                len: 3
            },
            Expr::Cmp {
                op: CmpOp::Neq,
                data: vec![10, 0, 0]
            }
        ]
    );
    // 224.0.0.0/4: four bytes masked with f0000000.
    let e = Expr::prefix_match(base, 16, &[224, 0, 0, 0], 4, CmpOp::Eq);
    assert_eq!(e[1], Expr::Mask(vec![0xf0, 0, 0, 0]));
    // 10.0.0.0/20: mask ff.ff.f0.00, data masked.
    let e = Expr::prefix_match(base, 16, &[10, 0, 15, 1], 20, CmpOp::Neq);
    assert_eq!(e[1], Expr::Mask(vec![0xff, 0xff, 0xf0, 0]));
    assert_eq!(
        e[2],
        Expr::Cmp {
            op: CmpOp::Neq,
            data: vec![10, 0, 0, 0]
        }
    );
    // /0: whole field, zero mask.
    let e = Expr::prefix_match(base, 16, &[0, 0, 0, 0], 0, CmpOp::Neq);
    assert_eq!(e[1], Expr::Mask(vec![0, 0, 0, 0]));
    // Out-of-range prefixes are clamped, never panic.
    let e = Expr::prefix_match(base, 16, &[1, 2, 3, 4], 200, CmpOp::Eq);
    assert_eq!(e.len(), 2);
}

#[test]
fn ct_state_is_encoded_as_nft_writes_it() {
    // `ct state established,related`: NFTA_CT_DREG=1 (reg 1),
    // NFTA_CT_KEY=2 (NFT_CT_STATE, 0), as big-endian u32.
    let ct = data_attributes(&encoded_element(&Expr::CtState));
    assert_eq!(
        ct,
        [
            (1, 1u32.to_be_bytes().to_vec()),
            (2, 0u32.to_be_bytes().to_vec()),
        ]
    );
    assert_eq!(
        crate::nftables::expr::CT_STATE_ESTABLISHED | crate::nftables::expr::CT_STATE_RELATED,
        6
    );
}

#[test]
fn fib_and_nat_are_encoded_with_their_uapi_values() {
    // NFTA_FIB_DREG=1 (reg 1), NFTA_FIB_RESULT=2 (ADDRTYPE, 3),
    // NFTA_FIB_FLAGS=3 (DADDR, 2), as big-endian u32.
    let fib = data_attributes(&encoded_element(&Expr::FibDaddrType));
    assert_eq!(
        fib,
        [
            (1, 1u32.to_be_bytes().to_vec()),
            (2, 3u32.to_be_bytes().to_vec()),
            (3, 2u32.to_be_bytes().to_vec()),
        ]
    );
    let nat = data_attributes(&encoded_element(&Expr::Dnat {
        family: Family::Ip6,
    }));
    assert_eq!(
        nat,
        [
            (1, 1u32.to_be_bytes().to_vec()),
            (2, 10u32.to_be_bytes().to_vec()),
            (3, 1u32.to_be_bytes().to_vec()),
            (5, 2u32.to_be_bytes().to_vec()),
            (7, 2u32.to_be_bytes().to_vec()),
        ]
    );
    assert!(data_attributes(&encoded_element(&Expr::Masquerade)).is_empty());
    let names: Vec<&str> = [
        Expr::Meta(MetaKey::Nfproto),
        Expr::Mask(vec![0xff]),
        Expr::Verdict(Verdict::Drop),
        Expr::Immediate {
            register: DataRegister::Reg2,
            data: vec![0, 80],
        },
    ]
    .iter()
    .map(Expr::name)
    .collect();
    assert_eq!(names, ["meta", "bitwise", "immediate", "immediate"]);
}

#[test]
fn garbage_never_decodes_nor_panics() {
    assert_eq!(expr::decode_list(&[0xff; 3]), None);
    assert_eq!(
        expr::decode_list(&[8, 0, 1, 0, 0xff, 0xff, 0xff, 0xff]),
        None
    );
    assert_eq!(expr::decode_list(&[]), Some(Vec::new()));
    assert_eq!(listed_rule(Family::Ip, &[1, 2, 3]), None);
    assert_eq!(chain_hook(&[0xff]), None);
    assert_eq!(Family::from_nfproto(99), None);
    assert_eq!(Family::from_nfproto(7), Some(Family::Bridge));
}

#[test]
fn chain_hooks_are_read_from_listings() {
    use crate::netlink::attributes::nla;
    let hook = [
        nla(1, &3u32.to_be_bytes()),
        nla(2, &(-100i32).to_be_bytes()),
    ]
    .concat();
    let attrs = [nla(1, b"cni_hostport\0"), nla(4 | 0x8000, &hook)].concat();
    assert_eq!(
        chain_hook(&attrs),
        Some(Hook {
            number: HOOK_OUTPUT,
            priority: -100
        })
    );
    assert_eq!(chain_hook(&nla(1, b"cni_hostport\0")), None);
    // A hook without its priority is no hook rather than a guess.
    assert_eq!(chain_hook(&nla(4, &nla(1, &3u32.to_be_bytes()))), None);
    assert_eq!(chain_hook(&[0xff]), None);
}

/// A parked socket released by a detached child leaves the ruleset as
/// committed, and the socket's namespace keeps working for the next caller.
#[test]
fn detached_release_keeps_what_was_committed() {
    in_private_netns(|| {
        let mut socket = NfTablesSocket::open().unwrap();
        let mut batch = Batch::new();
        batch.add_table(Family::Ip, "t", None);
        batch.add_chain(Family::Ip, "t", "c", None, None);
        batch.add_rule(Family::Ip, "t", "c", &Rule::new(vec![Expr::Counter]));
        socket.commit(batch).unwrap();
        let mut batch = Batch::new();
        batch.flush_chain(Family::Ip, "t", "c");
        batch.delete_chain(Family::Ip, "t", "c");
        socket.commit(batch).unwrap();
        drop(socket);
        crate::detached::release_parked();
        let mut socket = NfTablesSocket::open().unwrap();
        assert!(socket.get_chain(Family::Ip, "t", "c").unwrap().is_none());
        assert!(socket.list_rules(Family::Ip, "t", None).unwrap().is_empty());
        let text = nft(&["list", "table", "ip", "t"], None);
        assert!(!text.contains("chain c"), "{text}");
    });
}
