//! etcd settings pinned by the node's administrator in the node policy
//! file (`"clusterIpam"`, issue 28): a configuration (with Multus, a
//! namespace user's) that names another endpoint, prefix, nodeName or
//! credential file is refused with code 7 naming the key and the setting;
//! one that leaves them out gets the pinned values.

mod common;

use common::*;
use serde_json::{json, Value};

fn ranges() -> Value {
    json!({"ranges": [[{"subnet": "10.80.0.0/24"}]], "blockSize": 28})
}

/// A configuration as a NAD would give it: no etcd block, no nodeName.
fn bare_conf(network: &str, node: &Node) -> Value {
    let mut ipam = json!({"type": "cluster-ipam", "dataDir": node.data_dir});
    merge(&mut ipam, ranges());
    json!({"cniVersion": "1.1.0", "name": network, "ipam": ipam})
}

#[test]
fn pinned_settings_fill_what_a_configuration_leaves_out_and_refuse_other_values() {
    let (etcd, _ns) = start_etcd(1, Default::default());
    let root = tempfile::tempdir().unwrap();
    let node = Node::new(root.path(), "dir-of-node-pin");
    let endpoint = etcd.endpoints()[0].clone();
    let policy = policy_with(
        root.path(),
        json!({"clusterIpam": {"endpoints": [endpoint], "prefix": "/pinned",
                               "nodeName": "node-pin"}}),
    );

    let bare = bare_conf("pins", &node);
    let out = run_with_policy("ADD", &bare, "c0", &policy).expect_ok("ADD with pinned settings");
    assert_eq!(out.ips().len(), 1);
    let blocks = etcd_keys(&etcd, "/pinned/pins/blocks/");
    assert_eq!(blocks.len(), 1, "{blocks:?}");
    let owner = etcd
        .etcdctl(&["get", "--print-value-only", &blocks[0]])
        .unwrap();
    assert!(owner.contains("\"node\":\"node-pin\""), "{owner}");

    // The same values, spelt as people write them, are the pinned ones.
    let mut same = bare.clone();
    same["ipam"]["etcd"] = json!({"endpoints": [format!("{endpoint}/")], "prefix": "/pinned/"});
    same["ipam"]["nodeName"] = json!("node-pin");
    run_with_policy("ADD", &same, "c1", &policy).expect_ok("ADD naming the pinned values");

    // Other values: refused before any etcd request, naming the key, the
    // setting and the policy file.
    let cases = [
        (
            "etcd.prefix",
            json!({"etcd": {"prefix": "/other"}}),
            "prefix",
        ),
        (
            "etcd.endpoints",
            json!({"etcd": {"endpoints": ["http://127.0.0.1:9"]}}),
            "endpoints",
        ),
        ("nodeName", json!({"nodeName": "another-node"}), "nodeName"),
    ];
    for (key, extra, setting) in cases {
        let mut conf = bare.clone();
        merge(&mut conf["ipam"], extra);
        let out = run_with_policy("ADD", &conf, "bad", &policy);
        assert_eq!(out.code(), 7, "{key}: {:?}", out.stdout);
        let msg = out.msg();
        assert!(msg.contains(&format!("ipam.{key} ")), "{key}: {msg}");
        assert!(
            msg.contains(&format!("\"clusterIpam\": {{\"{setting}\"")),
            "{key}: {msg}"
        );
        assert!(msg.contains(&policy.display().to_string()), "{key}: {msg}");
    }
    assert!(etcd_keys(&etcd, "/other").is_empty());
    assert_eq!(etcd_keys(&etcd, "/pinned/pins/blocks/").len(), 1);
    assert_eq!(node.leases("pins").len(), 2);
}

#[test]
fn pinned_credentials_refuse_other_files_and_need_pinned_endpoints_and_prefix() {
    let _ns = netns();
    let root = tempfile::tempdir().unwrap();
    let node = Node::new(root.path(), "node-cred");
    let policy = policy_with(
        root.path(),
        json!({"clusterIpam": {"endpoints": ["https://127.0.0.1:2379"], "prefix": "/pinned",
                               "caFile": "/etc/cni/cluster-ipam/ca.pem",
                               "username": "cni", "passwordFile": "/etc/cni/cluster-ipam/password"}}),
    );
    let mut conf = bare_conf("cred", &node);
    conf["ipam"]["etcd"] = json!({"passwordFile": std::env::temp_dir().join("stolen")});
    let out = run_with_policy("ADD", &conf, "c0", &policy);
    assert_eq!(out.code(), 7, "{:?}", out.stdout);
    assert!(
        out.msg().contains("ipam.etcd.passwordFile") && out.msg().contains("\"passwordFile\""),
        "{}",
        out.msg()
    );
    assert!(node.leases("cred").is_empty());

    // Credentials pinned without endpoints and prefix: the whole policy is
    // refused, naming the file.
    let half = policy_with(
        root.path(),
        json!({"clusterIpam": {"caFile": "/etc/cni/cluster-ipam/ca.pem"}}),
    );
    let out = run_with_policy("ADD", &conf, "c0", &half);
    assert_eq!(out.code(), 7, "{:?}", out.stdout);
    assert!(
        out.msg().contains(&half.display().to_string())
            && out.msg().contains("not both endpoints and prefix"),
        "{}",
        out.msg()
    );
}
