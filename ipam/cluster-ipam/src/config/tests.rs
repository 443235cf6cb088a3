use super::*;
use serde_json::json;

fn conf(ipam: Value) -> Value {
    let mut base = json!({
        "cniVersion": "1.1.0",
        "name": "fabric",
        "ipam": {
            "type": "cluster-ipam",
            "nodeName": "n1",
            "ranges": [[{"subnet": "10.1.0.0/16"}]],
            "etcd": {"endpoints": ["http://127.0.0.1:2379"]}
        }
    });
    if let (Some(b), Value::Object(extra)) = (base["ipam"].as_object_mut(), ipam) {
        for (k, v) in extra {
            b.insert(k, v);
        }
    }
    base
}

fn err(ipam: Value) -> String {
    AddConfig::from_value(&conf(ipam), None)
        .unwrap_err()
        .to_string()
}

#[test]
fn defaults() {
    let c = AddConfig::from_value(&conf(json!({})), None).unwrap();
    assert_eq!(c.cluster.store.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
    assert_eq!(c.ipam.store.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
    assert_eq!(
        c.cluster.grid,
        Grid {
            block_size: 26,
            block_size6: 122
        }
    );
    assert_eq!(c.cluster.etcd.prefix, "/cluster-ipam");
    assert_eq!(c.cluster.etcd.timeout, DEFAULT_ETCD_TIMEOUT);
    assert_eq!(c.cluster.keys.root(), "/cluster-ipam/fabric/");
    assert_eq!(c.cluster.node, "n1");

    let mut no_node = conf(json!({}));
    no_node["ipam"].as_object_mut().unwrap().remove("nodeName");
    let c = ClusterConfig::from_value(&no_node).unwrap();
    let host = nix::unistd::gethostname().unwrap().into_string().unwrap();
    assert_eq!(c.node, host);

    let c = AddConfig::from_value(
        &conf(json!({"dataDir": "/var/lib/cni/x", "blockSize": 24, "blockSize6": 120})),
        None,
    )
    .unwrap();
    assert_eq!(c.cluster.store.data_dir, PathBuf::from("/var/lib/cni/x"));
    assert_eq!(
        c.cluster.grid.to_value(),
        r#"{"blockSize":24,"blockSize6":120}"#
    );
    assert_eq!(
        store_config(&conf(json!({}))).unwrap().data_dir,
        PathBuf::from(DEFAULT_DATA_DIR)
    );
}

#[test]
fn etcd_keys_are_checked() {
    assert!(err(json!({"etcd": {}})).contains("endpoints"));
    assert!(err(json!({"etcd": {"endpoints": ["", " "]}})).contains("endpoints"));
    assert!(err(json!({"etcd": {"endpoints": ["http://h"]}})).contains("invalid etcd endpoint"));
    assert!(err(json!({"etcd": {"endpoints": ["http://h:1/x"]}})).contains("invalid etcd endpoint"));
    assert!(
        err(json!({"etcd": {"endpoints": ["http://h:1", "https://h:2"], "caFile": "/ca"}}))
            .contains("mix")
    );
    assert!(err(json!({"etcd": {"endpoints": ["https://h:1"]}})).contains("caFile"));
    assert!(
        err(json!({"etcd": {"endpoints": ["http://h:1"], "caFile": "/ca"}})).contains("https://")
    );
    assert!(
        err(json!({"etcd": {"endpoints": ["https://h:1"], "caFile": "/ca", "keyFile": "/k"}}))
            .contains("certFile")
    );
    assert!(
        err(json!({"etcd": {"endpoints": ["http://h:1"], "passwordFile": "/p"}}))
            .contains("username")
    );
    assert!(err(json!({"etcd": {"endpoints": ["http://h:1"], "prefix": "x"}})).contains("prefix"));
    // Each endpoint is asked for at least 50 ms of a call, past timeoutMs.
    let endpoints = |n: usize| -> Vec<String> {
        (0..n)
            .map(|i| format!("http://10.0.0.1:{}", 2000 + i))
            .collect()
    };
    assert_eq!(
        err(json!({"etcd": {"endpoints": endpoints(65)}})),
        "ipam.etcd.endpoints lists 65 endpoints: at most 64"
    );
    let c =
        AddConfig::from_value(&conf(json!({"etcd": {"endpoints": endpoints(64)}})), None).unwrap();
    assert_eq!(c.cluster.etcd.endpoints.len(), 64);
    // The issue's 2^63 held the store lock for ever against a refusing
    // endpoint; every value outside the range is refused with it.
    for (value, shown) in [
        (json!(0), "0"),
        (json!(9_223_372_036_854_775_808u64), "9223372036854775808"),
        (json!(30_001), "30001"),
        (json!(-1), "-1"),
        (json!(1.5), "1.5"),
        (json!(1e3), "1000.0"),
        (json!("5000"), "(a string)"),
        (json!([5000]), "(not a number)"),
    ] {
        assert_eq!(
            err(json!({"etcd": {"endpoints": ["http://h:1"], "timeoutMs": value}})),
            format!(
                "invalid ipam.etcd.timeoutMs {shown}: must be an integer from 1 to 30000 (milliseconds)"
            ),
            "{value}"
        );
    }
    for (value, expected) in [
        (json!(1), Duration::from_millis(1)),
        (json!(30_000), Duration::from_secs(30)),
        (json!(null), DEFAULT_ETCD_TIMEOUT),
    ] {
        let c = AddConfig::from_value(
            &conf(json!({"etcd": {"endpoints": ["http://h:1"], "timeoutMs": value}})),
            None,
        )
        .unwrap();
        assert_eq!(c.cluster.etcd.timeout, expected, "{value}");
    }
    let ok = AddConfig::from_value(
        &conf(json!({"etcd": {"endpoints": ["https://[::1]:2379/"], "caFile": "/etc/cni/cluster-ipam/ca", "certFile": "/etc/cni/cluster-ipam/c", "keyFile": "/etc/cni/cluster-ipam/k",
                               "username": "u", "passwordFile": "/etc/cni/cluster-ipam/p", "prefix": "/a/b", "timeoutMs": 250}})),
        None,
    )
    .unwrap();
    assert!(ok.cluster.etcd.uses_tls());
    assert_eq!(ok.cluster.etcd.timeout, Duration::from_millis(250));
    // The password is never part of the configuration's Debug text.
    assert!(!format!("{:?}", ok.cluster.etcd).contains("password\":"));
}

/// Issue 28's finding 3: a password only over TLS, and credential files
/// only from the credential folders (default /etc/cni/cluster-ipam), so a
/// namespace user's configuration cannot send the node's files anywhere.
#[test]
fn credentials_are_confined_and_sent_only_over_tls() {
    assert_eq!(
        err(
            json!({"etcd": {"endpoints": ["http://h:1"], "username": "u",
                            "passwordFile": "/etc/cni/cluster-ipam/p"}})
        ),
        "'ipam.etcd.passwordFile' is set but the etcd endpoints are http://: a password is \
         only sent over TLS; use https:// endpoints"
    );
    for key in ["caFile", "certFile", "keyFile", "passwordFile"] {
        let mut etcd = json!({"endpoints": ["https://h:1"], "caFile": "/etc/cni/cluster-ipam/ca",
            "certFile": "/etc/cni/cluster-ipam/c", "keyFile": "/etc/cni/cluster-ipam/k",
            "username": "u", "passwordFile": "/etc/cni/cluster-ipam/p"});
        etcd[key] = json!("/etc/kubernetes/pki/etcd/peer.key");
        assert_eq!(
            err(json!({ "etcd": etcd })),
            format!(
                "ipam.etcd.{key} \"/etc/kubernetes/pki/etcd/peer.key\" is outside the folders \
                 allowed for credentials (/etc/cni/cluster-ipam); the node's administrator can \
                 allow a folder with \"allow\": {{\"credentials\": [\"/folder\"]}} in \
                 /etc/cni/cni-rs-policy.json"
            ),
            "{key}"
        );
    }
    let relative = err(json!({"etcd": {"endpoints": ["https://h:1"], "caFile": "ca.pem"}}));
    assert!(relative.contains("must be an absolute path"), "{relative}");
}

/// A lease folder outside the state folders (issue 28): code 7, for ADD
/// and for what DEL reads alone.
#[test]
fn data_dir_is_confined_to_the_state_folders() {
    let e = err(json!({"dataDir": "/etc/cni-rs-absent"}));
    assert!(
        e.starts_with(
            "ipam.dataDir \"/etc/cni-rs-absent\" is outside the folders allowed for state"
        ),
        "{e}"
    );
    let raw = conf(json!({"dataDir": "/root/leases"}));
    let e = store_config(&raw).unwrap_err().to_string();
    assert!(
        e.contains("is outside the folders allowed for state"),
        "{e}"
    );
}

#[test]
fn grid_and_exclude_are_checked() {
    assert!(err(json!({"blockSize": 15})).contains("larger than range 10.1.0.0/16"));
    assert!(err(json!({"blockSize": 32})).contains("blockSize"));
    assert!(err(json!({"blockSize": 0})).contains("blockSize"));
    assert!(err(json!({"blockSize6": 128})).contains("blockSize6"));
    // Past a u8 or of the wrong type: the key and the range are named, as
    // for a value in u8 that is out of range (serde's own message named
    // neither).
    assert_eq!(
        err(json!({"blockSize": 300})),
        "invalid ipam.blockSize 300: an IPv4 block prefix length must be between the range's prefix and 31"
    );
    assert_eq!(
        err(json!({"blockSize6": "122"})),
        "invalid ipam.blockSize6 (a string): an IPv6 block prefix length must be between the range's prefix and 127"
    );
    assert_eq!(
        err(json!({"blockSize": -1})),
        "invalid ipam.blockSize -1: an IPv4 block prefix length must be between the range's prefix and 31"
    );
    assert!(
        err(json!({"ranges": [[{"subnet": "fd00::/120"}]], "blockSize6": 119}))
            .contains("blockSize6")
    );
    assert!(err(json!({"exclude": ["nope"]})).contains("exclude"));
    let c = AddConfig::from_value(
        &conf(json!({"exclude": ["10.1.2.3", "10.1.5.9/24", "fd00::1"]})),
        None,
    )
    .unwrap();
    let got: Vec<String> = c.cluster.exclude.iter().map(ToString::to_string).collect();
    assert_eq!(got, ["10.1.2.3/32", "10.1.5.0/24", "fd00::1/128"]);
}

#[test]
fn names_are_checked_before_keys_exist() {
    let mut c = conf(json!({}));
    c["name"] = json!("a..b");
    assert!(AddConfig::from_value(&c, None)
        .unwrap_err()
        .to_string()
        .contains("network name"));
    assert!(err(json!({"nodeName": "x/y"})).contains("node name"));
    // host-local's own checks come through unchanged.
    assert!(
        err(json!({"ranges": [[{"subnet": "10.1.0.0/16"}], [{"subnet": "10.1.0.0/24"}]]}))
            .contains("overlaps")
    );
    assert!(AddConfig::from_value(&conf(json!({})), Some("bad")).is_err());
}

#[test]
fn inline_dns() {
    let c = AddConfig::from_value(
        &conf(json!({"dns": {"nameservers": ["10.1.0.53"], "search": ["f.local"]}})),
        None,
    )
    .unwrap();
    let dns = c.dns.unwrap();
    assert_eq!(dns.nameservers, ["10.1.0.53"]);
    assert_eq!(dns.search, ["f.local"]);
    assert!(AddConfig::from_value(&conf(json!({"dns": {"nameservers": "x"}})), None).is_err());
}
