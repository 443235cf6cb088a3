//! Nodes known alive (issue 30) against a real etcd: a heartbeat keeps
//! the node's lease; the node is shown silent once its beats stop and the
//! lease expires; `release-node` refuses a live node; a node that comes
//! back after its blocks were released never hands out from them again,
//! and its STATUS says so.

mod common;

use std::time::{Duration, Instant};

use cluster_ipam::config::ClusterConfig;
use cluster_ipam::liveness::NodeHeartbeat;
use common::*;
use ipnetwork::IpNetwork;
use serde_json::{json, Value};

/// The heartbeat in this process reads the same policy as the plugin runs.
fn heartbeat(conf: &Value, ttl: Duration) -> NodeHeartbeat {
    libcni::confine::override_policy_file(scratch_policy());
    let cluster = ClusterConfig::from_value(conf).expect("the network's configuration");
    NodeHeartbeat::new(&cluster, ttl).expect("heartbeat")
}

/// `show`'s line for `node`.
fn show_line(file: &std::path::Path, node: &str) -> String {
    let (ok, shown, err) = admin(file, &["show"]);
    assert!(ok, "show failed: {err}");
    shown
        .lines()
        .find(|l| l.starts_with(node))
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_silent_node_is_shown_released_only_when_silent_and_never_uses_released_blocks() {
    let (etcd, _ns) = start_etcd(1, Default::default());
    let root = tempfile::tempdir().unwrap();
    let node = Node::new(root.path(), "node-live");
    let ranges = json!({"ranges": [[{"subnet": "10.90.0.0/24"}]], "blockSize": 28});
    let conf = net_conf("alive", &node, &etcd.endpoints(), ranges);
    add(&conf, "p0").expect_ok("ADD");
    add(&conf, "p1").expect_ok("ADD");
    let old_block: IpNetwork = node.blocks("alive")[0].parse().unwrap();
    let file = root.path().join("alive.conflist");
    std::fs::write(
        &file,
        json!({"cniVersion": "1.1.0", "name": "alive",
               "plugins": [{"type": "bridge", "ipam": conf["ipam"].clone()}]})
        .to_string(),
    )
    .unwrap();

    // The agent beats: the node is alive, and release-node refuses it,
    // even forced, saying since when.
    let ttl = Duration::from_secs(2);
    let mut beating = heartbeat(&conf, ttl);
    let first = beating.beat().expect("first beat");
    assert!(first.new_lease && first.released.is_empty(), "{first:?}");
    assert!(!beating.beat().expect("second beat").new_lease);
    let line = show_line(&file, "node-live");
    assert!(line.contains("alive since"), "{line}");
    assert!(line.contains(&old_block.to_string()), "{line}");
    let (ok, _, err) = admin(&file, &["release-node", "node-live", "--force"]);
    assert!(!ok, "a live node was released");
    assert!(err.contains("is alive") && err.contains("since"), "{err}");
    let (ok, out, _) = admin(&file, &["reclaimable", "--silent-for", "0"]);
    assert!(ok && !out.contains("node-live"), "{out}");

    // The agent dies (no revoke, as a crash): once the lease expires the
    // node is shown silent. Polled with a generous bound: etcd expires
    // leases on its own clock.
    drop(beating);
    let start = Instant::now();
    loop {
        let line = show_line(&file, "node-live");
        if line.contains("silent, last seen") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "still not silent after 60 s: {line}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let (ok, out, err) = admin(&file, &["reclaimable", "--silent-for", "0"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("node node-live") && out.contains(&old_block.to_string()),
        "{out}"
    );
    let (ok, out, err) = admin(&file, &["release-node", "node-live", "--force"]);
    assert!(ok, "release of a silent node failed: {err}");
    assert!(out.contains("1 block(s)"), "{out}");

    // The node comes back: its first beat finds the block released and
    // takes it out of the node's record.
    let mut back = heartbeat(&conf, ttl);
    let beat = back.beat().expect("beat after coming back");
    assert_eq!(beat.released, vec![old_block]);
    assert!(node.blocks("alive").is_empty());
    assert_eq!(
        node.state("alive")["revoked"][0]["cidr"],
        json!(old_block.to_string())
    );
    // It never hands out from the released block again: new pods get a
    // block claimed afresh.
    let mut new_ips = Vec::new();
    for i in 0..4 {
        let out = add(&conf, &format!("after-{i}")).expect_ok("ADD after coming back");
        new_ips.extend(out.ips());
    }
    assert!(
        new_ips.iter().all(|ip| !old_block.contains(*ip)),
        "{new_ips:?} from released {old_block}"
    );
    assert_distinct(&new_ips);
    // STATUS: the pods still in the released block (p0, p1) may have
    // their addresses handed out elsewhere.
    let st = status(&conf);
    assert_eq!(st.code(), 51, "{:?}", st.stdout);
    assert!(
        st.msg().contains(&old_block.to_string()) && st.msg().contains("released"),
        "{}",
        st.msg()
    );
    assert!(st.msg().contains("2 pod address"), "{}", st.msg());
    // Those pods gone, STATUS is ready again.
    del(&conf, "p0").expect_ok("DEL p0");
    del(&conf, "p1").expect_ok("DEL p1");
    status(&conf).expect_ok("STATUS once the released block is empty");
    assert_eq!(
        node.state("alive")["revoked"].as_array().map(Vec::len),
        Some(1)
    );
    let keep: Vec<String> = (0..4).map(|i| format!("after-{i}")).collect();
    let keep: Vec<&str> = keep.iter().map(String::as_str).collect();
    gc(&conf, &keep).expect_ok("GC");
    assert!(
        node.state("alive").get("revoked").is_none(),
        "GC keeps a released block nobody uses: {}",
        node.state("alive")
    );
    back.stop().expect("the lease is revoked");
    assert!(show_line(&file, "node-live").contains("silent"));
}

#[test]
fn a_node_without_heartbeat_finds_released_blocks_at_its_next_claim() {
    let (etcd, _ns) = start_etcd(1, Default::default());
    let root = tempfile::tempdir().unwrap();
    let node = Node::new(root.path(), "node-quiet");
    let ranges = json!({"ranges": [[{"subnet": "10.91.0.0/24"}]], "blockSize": 28});
    let conf = net_conf("quiet", &node, &etcd.endpoints(), ranges);
    add(&conf, "q0").expect_ok("ADD");
    let old_block: IpNetwork = node.blocks("quiet")[0].parse().unwrap();
    // The operator deletes the block's key (as release-node --force does).
    let key = format!("/cluster-ipam/quiet/blocks/{old_block}");
    etcd.etcdctl(&["del", &key]).expect("etcdctl del");
    // Fill what is left of the block, then one ADD more claims: it reads
    // the pool, finds the block gone, and never hands it out again.
    let mut ips = Vec::new();
    for i in 0..20 {
        let out = add(&conf, &format!("q{}", i + 1)).expect_ok("ADD");
        ips.extend(out.ips());
        if node
            .blocks("quiet")
            .iter()
            .all(|b| *b != old_block.to_string())
        {
            break;
        }
    }
    assert!(
        !node.blocks("quiet").contains(&old_block.to_string()),
        "the released block is still used"
    );
    let last = *ips.last().unwrap();
    assert!(
        !old_block.contains(last),
        "{last} from released {old_block}"
    );
}

#[test]
fn a_node_back_before_its_heartbeat_hands_out_nothing_from_released_blocks() {
    let (etcd, _ns) = start_etcd(1, Default::default());
    let root = tempfile::tempdir().unwrap();
    let node = Node::new(root.path(), "node-early");
    let ranges = json!({"ranges": [[{"subnet": "10.92.0.0/24"}]], "blockSize": 28});
    let conf = net_conf("early", &node, &etcd.endpoints(), ranges);
    add(&conf, "e0").expect_ok("ADD");
    let old_block: IpNetwork = node.blocks("early")[0].parse().unwrap();
    let mut beating = heartbeat(&conf, Duration::from_secs(2));
    beating.beat().expect("beat");
    // While the heartbeat holds the lease, ADDs stay on the node's disk.
    let inside = add(&conf, "e1").expect_ok("ADD while alive");
    assert!(old_block.contains(inside.ips()[0]));
    drop(beating);
    // Silent: the lease expires, the operator releases the block.
    let key = format!("/cluster-ipam/early/alive/{}", node.name);
    let start = Instant::now();
    while !etcd_keys(&etcd, &key).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "lease never expired"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    etcd.etcdctl(&["del", &format!("/cluster-ipam/early/blocks/{old_block}")])
        .expect("etcdctl del");
    // Back, the runtime's ADD comes before the agent's first beat: the
    // node reads the pool first and takes a new block.
    let out = add(&conf, "e2").expect_ok("ADD after coming back");
    assert!(
        !old_block.contains(out.ips()[0]),
        "{:?} from released {old_block}",
        out.ips()
    );
    assert!(!node.blocks("early").contains(&old_block.to_string()));
    assert_eq!(status(&conf).code(), 51);
}
