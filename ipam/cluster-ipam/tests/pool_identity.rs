//! A node's record is bound to the pool it came from (issue 30): the etcd
//! cluster, the key prefix and the network. Changing `etcd.prefix` or
//! pointing the endpoints at another etcd cluster while the node holds
//! blocks is a code 7 error naming both pools, with nothing claimed; a
//! record never lists a block twice; `/cluster-ipam/` is `/cluster-ipam`;
//! records written before the identity existed keep working.

mod common;

use std::net::IpAddr;

use common::*;
use ipnetwork::IpNetwork;
use serde_json::{json, Value};

fn ranges() -> Value {
    json!({"ranges": [[{"subnet": "10.70.0.0/24"}]], "blockSize": 28})
}

/// ADDs on `conf` until the node's first block is full; returns the block
/// and its addresses.
fn fill_one_block(conf: &Value, node: &Node, network: &str) -> (IpNetwork, Vec<IpAddr>) {
    let first = add(conf, "fill-0").expect_ok("first ADD");
    let blocks = node.blocks(network);
    assert_eq!(blocks.len(), 1, "{blocks:?}");
    let block: IpNetwork = blocks[0].parse().unwrap();
    let mut ips = first.ips();
    // A /28 hands out 16 addresses, 14 when it holds the subnet's network
    // address and the gateway.
    let capacity = if block.network() == "10.70.0.0".parse::<IpAddr>().unwrap() {
        14
    } else {
        16
    };
    for i in 1..capacity {
        ips.extend(
            add(conf, &format!("fill-{i}"))
                .expect_ok("ADD in the block")
                .ips(),
        );
    }
    assert!(ips.iter().all(|ip| block.contains(*ip)));
    assert_eq!(node.blocks(network).len(), 1, "the block filled up early");
    (block, ips)
}

#[test]
fn a_changed_prefix_on_a_node_with_a_full_block_is_refused_naming_both_pools() {
    let (etcd, _ns) = start_etcd(1, Default::default());
    let root = tempfile::tempdir().unwrap();
    let node = Node::new(root.path(), "node-p");
    let conf = net_conf("ident", &node, &etcd.endpoints(), ranges());
    let (block, _) = fill_one_block(&conf, &node, "ident");

    let mut moved = conf.clone();
    moved["ipam"]["etcd"]["prefix"] = json!("/moved");
    // As the operator saw it: eight ADDs. Each must be refused the same
    // way, and none may claim anything in the new pool.
    for i in 0..8 {
        let out = add(&moved, &format!("after-{i}"));
        assert_eq!(out.code(), 7, "ADD {i}: {:?} {}", out.stdout, out.stderr);
        let msg = out.msg();
        assert!(
            msg.contains("prefix /cluster-ipam") && msg.contains("prefix /moved"),
            "{msg}"
        );
        assert!(msg.contains("network ident"), "{msg}");
    }
    assert!(
        etcd_keys(&etcd, "/moved").is_empty(),
        "refused ADDs wrote to the new pool: {:?}",
        etcd_keys(&etcd, "/moved")
    );
    assert_eq!(node.blocks("ident"), vec![block.to_string()]);
    let status = status(&moved);
    assert_eq!(status.code(), 7, "{:?}", status.stdout);
    // DEL still releases locally (best effort), and the old settings work.
    let held = node.leases("ident").len();
    del(&moved, "fill-0").expect_ok("DEL with the moved prefix");
    assert_eq!(node.leases("ident").len(), held - 1);
    let back = add(&conf, "back").expect_ok("ADD with the old prefix");
    assert!(block.contains(back.ips()[0]), "{:?}", back.ips());
    assert_eq!(node.blocks("ident"), vec![block.to_string()]);
}

#[test]
fn another_etcd_cluster_is_refused_naming_both_cluster_ids() {
    let (etcd_a, _ns) = start_etcd(1, Default::default());
    let (etcd_b, _ns_b) = start_etcd(1, Default::default());
    let root = tempfile::tempdir().unwrap();
    let node = Node::new(root.path(), "node-c");
    let conf = net_conf("ident2", &node, &etcd_a.endpoints(), ranges());
    let (block, _) = fill_one_block(&conf, &node, "ident2");
    let recorded = node.state("ident2");
    let cluster_a = recorded["pool"]["clusterId"]
        .as_str()
        .expect("the record names its etcd cluster")
        .to_string();

    let other = net_conf("ident2", &node, &etcd_b.endpoints(), ranges());
    for i in 0..3 {
        let out = add(&other, &format!("other-{i}"));
        assert_eq!(out.code(), 7, "{:?} {}", out.stdout, out.stderr);
        assert!(
            out.msg().contains(&format!("etcd cluster {cluster_a}")),
            "{}",
            out.msg()
        );
    }
    assert!(etcd_keys(&etcd_b, "/cluster-ipam").is_empty());
    assert_eq!(node.blocks("ident2"), vec![block.to_string()]);
    assert_eq!(node.state("ident2")["pool"]["clusterId"], json!(cluster_a));

    // Other endpoints of the same cluster (here its single member spelt
    // with a trailing slash) are the same pool: adopted after one check.
    let mut respelt = conf.clone();
    respelt["ipam"]["etcd"]["endpoints"] = json!([format!("{}/", etcd_a.endpoints()[0])]);
    del(&conf, "fill-1").expect_ok("DEL");
    let out = add(&respelt, "same-cluster").expect_ok("ADD through respelt endpoints");
    assert!(block.contains(out.ips()[0]));
}

#[test]
fn a_trailing_slash_in_the_prefix_is_the_same_pool() {
    let (etcd, _ns) = start_etcd(1, Default::default());
    let root = tempfile::tempdir().unwrap();
    let node = Node::new(root.path(), "node-s");
    let conf = net_conf("slash", &node, &etcd.endpoints(), ranges());
    let first = add(&conf, "c0").expect_ok("ADD");
    let mut slashed = conf.clone();
    slashed["ipam"]["etcd"]["prefix"] = json!("/cluster-ipam/");
    let second = add(&slashed, "c1").expect_ok("ADD with /cluster-ipam/");
    assert_eq!(node.blocks("slash").len(), 1);
    let block: IpNetwork = node.blocks("slash")[0].parse().unwrap();
    assert!(block.contains(first.ips()[0]) && block.contains(second.ips()[0]));
    let keys = etcd_keys(&etcd, "/cluster-ipam");
    assert!(
        keys.iter()
            .all(|k| k.starts_with("/cluster-ipam/slash/") && !k.contains("//")),
        "{keys:?}"
    );
    // A fresh node configured with the slash lands in the same keys.
    let other = Node::new(root.path(), "node-t");
    let mut conf_t = net_conf("slash", &other, &etcd.endpoints(), ranges());
    conf_t["ipam"]["etcd"]["prefix"] = json!("/cluster-ipam/");
    add(&conf_t, "t0").expect_ok("ADD on a second node");
    assert_eq!(etcd_blocks(&etcd, "slash").len(), 2);
    assert_eq!(node.state("slash")["pool"]["prefix"], "/cluster-ipam");
}

#[test]
fn a_record_written_before_the_pool_identity_is_migrated_on_first_write() {
    let (etcd, _ns) = start_etcd(1, Default::default());
    let root = tempfile::tempdir().unwrap();
    let node = Node::new(root.path(), "node-m");
    let conf = net_conf("legacy", &node, &etcd.endpoints(), ranges());
    let (block, _) = fill_one_block(&conf, &node, "legacy");
    // The record as the previous version wrote it: no "pool", and the
    // block listed twice, as the bug of issue 30 left it.
    let path = node.store("legacy").join("cluster-blocks.json");
    let mut old = node.state("legacy");
    old.as_object_mut().unwrap().remove("pool");
    let held = old["blocks"][0].clone();
    old["blocks"] = json!([held.clone(), held]);
    std::fs::write(&path, old.to_string()).unwrap();

    // Full block: this ADD claims a second one (a write), and works.
    let out = add(&conf, "next").expect_ok("ADD on a legacy record");
    assert!(!block.contains(out.ips()[0]));
    let state = node.state("legacy");
    assert_eq!(state["pool"]["prefix"], "/cluster-ipam");
    assert_eq!(state["pool"]["network"], "legacy");
    assert!(state["pool"]["clusterId"].is_string(), "{state}");
    let blocks = node.blocks("legacy");
    assert_eq!(blocks.len(), 2, "{blocks:?}");
    assert_ne!(blocks[0], blocks[1]);
    // From now on the record is bound: a prefix change is refused.
    let mut moved = conf.clone();
    moved["ipam"]["etcd"]["prefix"] = json!("/moved");
    assert_eq!(add(&moved, "moved").code(), 7);
}

#[test]
fn a_node_holding_nothing_follows_a_prefix_change() {
    let (etcd, _ns) = start_etcd(1, Default::default());
    let root = tempfile::tempdir().unwrap();
    let node = Node::new(root.path(), "node-e");
    let conf = net_conf("empty", &node, &etcd.endpoints(), ranges());
    add(&conf, "c0").expect_ok("ADD");
    del(&conf, "c0").expect_ok("DEL");
    // The operator hands the block back and clears the node's record of
    // it, as release-node plus a GC leave it: here by writing a record
    // without blocks.
    let path = node.store("empty").join("cluster-blocks.json");
    let mut state = node.state("empty");
    state["blocks"] = json!([]);
    std::fs::write(&path, state.to_string()).unwrap();
    let mut moved = conf.clone();
    moved["ipam"]["etcd"]["prefix"] = json!("/moved");
    add(&moved, "c1").expect_ok("ADD in the new pool");
    assert_eq!(node.state("empty")["pool"]["prefix"], "/moved");
    assert_eq!(etcd_keys(&etcd, "/moved/empty/blocks/").len(), 1);
}
