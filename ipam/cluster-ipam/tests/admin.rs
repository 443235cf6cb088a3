//! The operator command against a real etcd: `show` and `release-node`.

mod common;

use common::*;
use serde_json::json;

#[test]
fn show_lists_blocks_and_owners_and_release_node_refuses_a_busy_node() {
    let (etcd, _ns) = start_etcd(1, Default::default());
    let root = tempfile::tempdir().unwrap();
    let a = Node::new(root.path(), "node-a");
    let b = Node::new(root.path(), "node-b");
    let ranges = json!({"ranges": [[{"subnet": "10.60.0.0/24"}]], "blockSize": 28});
    let conf_a = net_conf("ops", &a, &etcd.endpoints(), ranges.clone());
    let conf_b = net_conf("ops", &b, &etcd.endpoints(), ranges);
    add(&conf_a, "a0").expect_ok("a ADD");
    add(&conf_b, "b0").expect_ok("b ADD");
    run("ADD", &conf_b, "b1", "net1", "IP=10.60.0.250").expect_ok("b requested ADD");

    // The operator's file: a conflist as the node has it (plugin first,
    // cluster-ipam as its ipam), here with node-a's settings.
    let conflist = json!({
        "cniVersion": "1.1.0", "name": "ops",
        "plugins": [{"type": "rdma-sriov", "ipam": conf_a["ipam"].clone()}]
    });
    let file = root.path().join("ops.conflist");
    std::fs::write(&file, conflist.to_string()).unwrap();

    let (ok, shown, err) = admin(&file, &["show"]);
    assert!(ok, "show failed: {err}");
    assert!(
        shown.contains("grid: {\"blockSize\":28,\"blockSize6\":122}"),
        "{shown}"
    );
    for block in a.blocks("ops").iter().chain(b.blocks("ops").iter()) {
        assert!(
            shown.contains(block.as_str()),
            "{block} missing from:\n{shown}"
        );
    }
    assert!(
        shown.contains("node-a") && shown.contains("node-b"),
        "{shown}"
    );
    assert!(
        shown.contains("10.60.0.250") && shown.contains("b1"),
        "{shown}"
    );

    // node-b reported leases when it claimed: refused without --force.
    let (ok, _, err) = admin(&file, &["release-node", "node-b"]);
    assert!(!ok);
    assert!(err.contains("node-b") && err.contains("--force"), "{err}");
    assert_eq!(etcd_blocks(&etcd, "ops").len(), 2);
    let (ok, _, err) = admin(&file, &["release-node", "no-such-node"]);
    assert!(!ok && err.contains("holds nothing"), "{err}");
    let (ok, _, err) = admin(&file, &["release-node", "../x"]);
    assert!(!ok && err.contains("invalid node name"), "{err}");

    // node-a empties itself and reports it (GC), then it can be released.
    del(&conf_a, "a0").expect_ok("a DEL");
    gc(&conf_a, &[]).expect_ok("a GC");
    let (ok, out, err) = admin(&file, &["release-node", "node-a"]);
    assert!(ok, "release of an empty node failed: {err}");
    assert!(out.contains("1 block(s)"), "{out}");
    assert!(etcd_blocks(&etcd, "ops")
        .iter()
        .all(|(_, owner)| owner == "node-b"));

    // --force takes a busy node's blocks and reservations.
    let (ok, out, err) = admin(&file, &["release-node", "node-b", "--force"]);
    assert!(ok, "forced release failed: {err}");
    assert!(out.contains("1 reservation(s)"), "{out}");
    assert!(etcd_keys(&etcd, "/cluster-ipam/ops/blocks/").is_empty());
    assert!(etcd_keys(&etcd, "/cluster-ipam/ops/ips/").is_empty());
}
