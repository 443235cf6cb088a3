//! cluster-ipam against a real etcd: blocks, allocation inside them,
//! requested addresses, GC, STATUS, CHECK, and the grid check.

mod common;

use std::net::IpAddr;

use common::*;
use serde_json::json;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn a_node_claims_one_block_and_allocates_inside_it_without_etcd() {
    let (etcd, _ns) = start_etcd(1, Default::default());
    let root = tempfile::tempdir().unwrap();
    let node = Node::new(root.path(), "node-a");
    let ranges = json!({"ranges": [[{"subnet": "10.30.0.0/24"}]], "blockSize": 28,
                        "routes": [{"dst": "10.30.0.0/16"}],
                        "dns": {"nameservers": ["10.30.0.53"]}});
    let conf = net_conf("fabric", &node, &etcd.endpoints(), ranges.clone());

    let first = add(&conf, "c0").expect_ok("first ADD");
    let addr = first.ips()[0];
    assert_eq!(
        first.stdout["ips"][0]["address"].as_str().unwrap(),
        format!("{addr}/24")
    );
    assert_eq!(first.stdout["ips"][0]["gateway"], "10.30.0.1");
    assert_eq!(first.stdout["routes"][0]["dst"], "10.30.0.0/16");
    assert_eq!(first.stdout["dns"]["nameservers"][0], "10.30.0.53");
    let blocks = etcd_blocks(&etcd, "fabric");
    assert_eq!(blocks.len(), 1, "{blocks:?}");
    assert_eq!(blocks[0].1, "node-a");
    assert_eq!(node.blocks("fabric"), vec![blocks[0].0.clone()]);
    let block: ipnetwork::IpNetwork = blocks[0].0.parse().unwrap();
    assert!(block.contains(addr));
    assert_eq!(etcd_keys(&etcd, "/cluster-ipam/fabric/pool").len(), 1);

    // The rest of the block comes from the node's disk: with every etcd
    // endpoint wrong, ADDs still succeed until the block is full.
    let offline = net_conf("fabric", &node, &["http://127.0.0.1:9".to_string()], ranges);
    let capacity = if block.network() == ip("10.30.0.0") {
        14
    } else {
        16
    };
    let mut ips = vec![addr];
    for i in 1..capacity {
        let out = add(&offline, &format!("c{i}")).expect_ok("ADD inside the block");
        ips.push(out.ips()[0]);
    }
    assert_distinct(&ips);
    assert!(ips.iter().all(|a| block.contains(*a)));
    assert!(!ips.contains(&ip("10.30.0.1")), "gateway handed out");
    let full = add(&offline, "c-more");
    assert_eq!(full.code(), 11, "{:?}", full.stdout);
    assert!(full.msg().contains("127.0.0.1:9"), "{}", full.msg());

    // With etcd reachable the next ADD claims a second block.
    let more = add(&conf, "c-more").expect_ok("ADD that claims");
    assert!(!block.contains(more.ips()[0]));
    assert_eq!(node.blocks("fabric").len(), 2);

    run("CHECK", &conf, "c0", "net1", "").expect_ok("CHECK");
    let missing = run("CHECK", &conf, "nobody", "net1", "");
    assert_eq!(missing.code(), 999, "{:?}", missing.stdout);

    // GC keeps c0 only: the first block stays (c0), the second goes back.
    gc(&conf, &["c0"]).expect_ok("GC");
    assert_eq!(node.leases("fabric"), vec![addr]);
    assert_eq!(node.blocks("fabric"), vec![block.to_string()]);
    assert_eq!(etcd_blocks(&etcd, "fabric").len(), 1);
    let report = etcd
        .etcdctl(&[
            "get",
            "--print-value-only",
            "/cluster-ipam/fabric/nodes/node-a",
        ])
        .unwrap();
    assert!(report.contains("\"leases\":1"), "{report}");

    // DEL twice, then GC with nothing valid: the last block is kept (the
    // node's room for its next pod).
    del(&conf, "c0").expect_ok("DEL");
    del(&conf, "c0").expect_ok("DEL again");
    assert!(node.leases("fabric").is_empty());
    gc(&conf, &[]).expect_ok("GC of nothing");
    assert_eq!(node.blocks("fabric").len(), 1);
    status(&conf).expect_ok("STATUS");
}

#[test]
fn dual_stack_gets_one_address_per_family_from_blocks_of_each() {
    let (etcd, _ns) = start_etcd(1, Default::default());
    let root = tempfile::tempdir().unwrap();
    let node = Node::new(root.path(), "node-b");
    let conf = net_conf(
        "dual",
        &node,
        &etcd.endpoints(),
        json!({"ranges": [[{"subnet": "10.31.0.0/16"}], [{"subnet": "fd00:31::/64"}]],
               "exclude": ["10.31.0.0/20"]}),
    );
    let out = add(&conf, "c1").expect_ok("dual-stack ADD");
    let ips = out.ips();
    assert_eq!(ips.len(), 2);
    assert!(ips[0].is_ipv4() && ips[1].is_ipv6());
    assert!(!"10.31.0.0/20"
        .parse::<ipnetwork::IpNetwork>()
        .unwrap()
        .contains(ips[0]));
    let blocks = node.blocks("dual");
    assert_eq!(blocks.len(), 2);
    assert!(blocks.iter().any(|b| b.ends_with("/26")));
    assert!(blocks.iter().any(|b| b.ends_with("/122")));
}

#[test]
fn requested_addresses_are_reserved_cluster_wide() {
    let (etcd, _ns) = start_etcd(1, Default::default());
    let root = tempfile::tempdir().unwrap();
    let a = Node::new(root.path(), "node-a");
    let b = Node::new(root.path(), "node-b");
    let ranges = json!({"ranges": [[{"subnet": "10.32.0.0/24"}]], "blockSize": 28});
    let conf_a = net_conf("req", &a, &etcd.endpoints(), ranges.clone());
    let conf_b = net_conf("req", &b, &etcd.endpoints(), ranges);

    // a's block, then b asks for an address inside it: refused.
    let first = add(&conf_a, "a0").expect_ok("a ADD");
    let in_a = first.ips()[0];
    let next_in_a = ip(&format!(
        "10.32.0.{}",
        match in_a {
            IpAddr::V4(v) => v.octets()[3] + 1,
            _ => 0,
        }
    ));
    let refused = run("ADD", &conf_b, "b0", "net1", &format!("IP={next_in_a}"));
    assert_eq!(refused.code(), 11, "{:?}", refused.stdout);
    assert!(refused.msg().contains("node-a"), "{}", refused.msg());
    assert!(b.leases("req").is_empty());

    // An address in no block: b reserves it in etcd, a cannot have it.
    let free = ip("10.32.0.200");
    let got = run("ADD", &conf_b, "b1", "net1", &format!("IP={free}")).expect_ok("requested ADD");
    assert_eq!(got.ips(), vec![free]);
    assert_eq!(etcd_keys(&etcd, "/cluster-ipam/req/ips/").len(), 1);
    let conf_a_req = {
        let mut c = conf_a.clone();
        c["args"] = json!({"cni": {"ips": [free.to_string()]}});
        c
    };
    let taken = add(&conf_a_req, "a1");
    assert_eq!(taken.code(), 11, "{:?}", taken.stdout);
    assert!(taken.msg().contains("b1"), "{}", taken.msg());
    run("CHECK", &conf_b, "b1", "net1", "").expect_ok("CHECK of a reserved address");

    // A node may claim the block of a reserved address but never hands
    // that address out: a claims blocks until the pool is full.
    let mut leased = vec![in_a];
    let mut exhausted = false;
    for i in 2..300 {
        let out = add(&conf_a, &format!("a{i}"));
        if !out.ok() {
            assert_eq!(out.code(), 50, "{:?}", out.stdout);
            exhausted = true;
            break;
        }
        leased.extend(out.ips());
    }
    assert!(exhausted, "the pool never ran out");
    assert!(!leased.contains(&free));
    assert_distinct(&leased);
    assert_eq!(
        leased.len(),
        16 * 16 - 2 - 1 - 1,
        "all but network, gateway, broadcast and {free}"
    );
    let st = status(&conf_a);
    assert_eq!(st.code(), 50, "{:?}", st.stdout);

    // DEL deletes the reservation key; the owner of its block may now
    // hand it out (STATUS sees it), and does.
    del(&conf_b, "b1").expect_ok("DEL");
    assert!(etcd_keys(&etcd, "/cluster-ipam/req/ips/").is_empty());
    status(&conf_a).expect_ok("STATUS once the reservation is gone");
    let out = add(&conf_a, "a-last").expect_ok("ADD of the released address");
    assert_eq!(out.ips(), vec![free]);
}

#[test]
fn nodes_with_another_block_grid_cannot_claim() {
    let (etcd, _ns) = start_etcd(1, Default::default());
    let root = tempfile::tempdir().unwrap();
    let a = Node::new(root.path(), "node-a");
    let b = Node::new(root.path(), "node-b");
    let conf_a = net_conf(
        "grid",
        &a,
        &etcd.endpoints(),
        json!({"ranges": [[{"subnet": "10.33.0.0/24"}]], "blockSize": 26}),
    );
    let conf_b = net_conf(
        "grid",
        &b,
        &etcd.endpoints(),
        json!({"ranges": [[{"subnet": "10.33.0.0/24"}]], "blockSize": 28}),
    );
    add(&conf_a, "a0").expect_ok("a ADD");
    let out = add(&conf_b, "b0");
    assert_eq!(out.code(), 7, "{:?}", out.stdout);
    assert!(out.msg().contains("blockSize"), "{}", out.msg());
    assert!(b.leases("grid").is_empty());
    assert_eq!(etcd_blocks(&etcd, "grid").len(), 1);
}

#[test]
fn del_releases_even_with_a_corrupt_node_record_and_add_then_says_what_to_do() {
    let (etcd, _ns) = start_etcd(1, Default::default());
    let root = tempfile::tempdir().unwrap();
    let node = Node::new(root.path(), "node-c");
    let conf = net_conf(
        "corrupt",
        &node,
        &etcd.endpoints(),
        json!({"ranges": [[{"subnet": "10.34.0.0/24"}]]}),
    );
    add(&conf, "c0").expect_ok("ADD");
    std::fs::write(
        node.store("corrupt").join("cluster-blocks.json"),
        b"{broken",
    )
    .unwrap();
    del(&conf, "c0").expect_ok("DEL with a corrupt record");
    assert!(node.leases("corrupt").is_empty());
    let out = add(&conf, "c1");
    assert_eq!(out.code(), 5, "{:?}", out.stdout);
    assert!(out.msg().contains("move it away"), "{}", out.msg());
}
