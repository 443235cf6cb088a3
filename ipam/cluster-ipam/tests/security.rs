//! TLS with client certificates, user/password auth, and configuration
//! errors, which must all be refused before any etcd write.

mod common;

use cluster_ipam::tls_probe::{refusal, TlsPem};
use common::*;
use etcd_cluster::ClusterOptions;
use serde_json::{json, Value};
use std::time::Duration;

fn ranges() -> Value {
    json!({"ranges": [[{"subnet": "10.50.0.0/24"}]], "blockSize": 28})
}

#[test]
fn tls_with_client_certificates_works_and_wrong_trust_is_a_clear_error() {
    let (etcd, _ns) = start_etcd(
        1,
        ClusterOptions {
            tls: true,
            ..Default::default()
        },
    );
    let tls = etcd.tls_files().expect("TLS files").clone();
    let root = tempfile::tempdir().unwrap();
    let node = Node::new(root.path(), "tls-node");
    let with = |ca: &std::path::Path, cert: Option<(&std::path::Path, &std::path::Path)>| {
        let mut conf = net_conf("secure", &node, &etcd.endpoints(), ranges());
        conf["ipam"]["etcd"]["caFile"] = json!(ca);
        conf["ipam"]["etcd"]["timeoutMs"] = json!(2000);
        if let Some((cert, key)) = cert {
            conf["ipam"]["etcd"]["certFile"] = json!(cert);
            conf["ipam"]["etcd"]["keyFile"] = json!(key);
        }
        conf
    };
    assert!(etcd.endpoints()[0].starts_with("https://"));

    let wrong_ca = add(&with(&tls.other_ca, Some((&tls.cert, &tls.key))), "c0");
    assert!(!wrong_ca.ok());
    assert!(
        wrong_ca.msg().to_lowercase().contains("certificate"),
        "{}",
        wrong_ca.msg()
    );
    let no_cert = add(&with(&tls.ca, None), "c0");
    assert!(!no_cert.ok());
    let untrusted = add(
        &with(&tls.ca, Some((&tls.other_cert, &tls.other_key))),
        "c0",
    );
    assert!(!untrusted.ok());
    for (what, out) in [
        ("wrong CA", &wrong_ca),
        ("no client cert", &no_cert),
        ("untrusted client cert", &untrusted),
    ] {
        assert_eq!(out.code(), 7, "{what}: {:?}", out.stdout);
        assert!(
            out.msg().contains("TLS with etcd") && out.msg().contains("caFile"),
            "{what}: {}",
            out.msg()
        );
        eprintln!("{what}: code {} {}", out.code(), out.msg());
    }
    assert!(
        node.leases("secure").is_empty(),
        "a refused ADD leased an address"
    );
    assert!(
        etcd_keys(&etcd, "/cluster-ipam").is_empty(),
        "a refused ADD wrote to etcd"
    );

    // The probe that tells a refused client certificate from a closed
    // connection (the race TLS 1.3 leaves the client) on its own: a fresh
    // handshake gets the member's verdict whoever wins the race above.
    let read = |path: &std::path::Path| std::fs::read(path).expect("TLS file");
    let pem = |ca: &std::path::Path, cert: Option<(&std::path::Path, &std::path::Path)>| TlsPem {
        ca: Some(read(ca)),
        identity: cert.map(|(cert, key)| (read(cert), read(key))),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let probe =
        |pem: TlsPem| runtime.block_on(refusal(&etcd.endpoints()[0], &pem, Duration::from_secs(5)));
    let untrusted = probe(pem(&tls.ca, Some((&tls.other_cert, &tls.other_key))));
    assert!(
        untrusted.as_deref().is_some_and(|r| r.contains("alert")),
        "untrusted client certificate: {untrusted:?}"
    );
    let missing = probe(pem(&tls.ca, None));
    assert!(
        missing.as_deref().is_some_and(|r| r.contains("alert")),
        "no client certificate: {missing:?}"
    );
    let wrong_ca = probe(pem(&tls.other_ca, Some((&tls.cert, &tls.key))));
    assert!(
        wrong_ca
            .as_deref()
            .is_some_and(|r| r.contains("UnknownIssuer")),
        "wrong CA: {wrong_ca:?}"
    );
    let accepted = probe(pem(&tls.ca, Some((&tls.cert, &tls.key))));
    assert_eq!(accepted, None, "the right files were refused");

    let good = with(&tls.ca, Some((&tls.cert, &tls.key)));
    add(&good, "c0").expect_ok("ADD over TLS");
    assert_eq!(etcd_blocks(&etcd, "secure").len(), 1);
}

#[test]
fn user_and_password_auth_works_and_a_bad_password_changes_nothing() {
    let (etcd, _ns) = start_etcd(
        1,
        // A password is only sent over TLS (issue 28).
        ClusterOptions {
            auth: Some(("root".into(), "s3cret-pw".into())),
            tls: true,
            ..Default::default()
        },
    );
    let tls = etcd.tls_files().expect("TLS files").clone();
    let root = tempfile::tempdir().unwrap();
    let node = Node::new(root.path(), "auth-node");
    let secrets = tempfile::tempdir().unwrap();
    let good_pw = secrets.path().join("good");
    let bad_pw = secrets.path().join("bad");
    std::fs::write(&good_pw, "s3cret-pw\n").unwrap();
    std::fs::write(&bad_pw, "wrong\n").unwrap();
    let with = |password: Option<&std::path::Path>| {
        let mut conf = net_conf("authed", &node, &etcd.endpoints(), ranges());
        conf["ipam"]["etcd"]["caFile"] = json!(tls.ca);
        conf["ipam"]["etcd"]["certFile"] = json!(tls.cert);
        conf["ipam"]["etcd"]["keyFile"] = json!(tls.key);
        if let Some(path) = password {
            conf["ipam"]["etcd"]["username"] = json!("root");
            conf["ipam"]["etcd"]["passwordFile"] = json!(path);
        }
        conf
    };

    let bad = add(&with(Some(&bad_pw)), "c0");
    assert_eq!(bad.code(), 7, "{:?}", bad.stdout);
    assert!(bad.msg().contains("authentication failed"), "{}", bad.msg());
    assert!(
        !bad.msg().contains("wrong") && !bad.stderr.contains("wrong"),
        "the password leaked: {bad:?}"
    );
    let none = add(&with(None), "c0");
    assert!(!none.ok(), "ADD without credentials succeeded");
    assert!(node.leases("authed").is_empty());
    assert!(etcd_keys(&etcd, "/cluster-ipam").is_empty());

    add(&with(Some(&good_pw)), "c0").expect_ok("ADD with the password");
    assert_eq!(etcd_blocks(&etcd, "authed").len(), 1);
}

#[test]
fn configuration_errors_are_spec_errors_before_any_etcd_request() {
    let (etcd, _ns) = start_etcd(1, Default::default());
    let root = tempfile::tempdir().unwrap();
    let node = Node::new(root.path(), "cfg-node");
    let base = net_conf("cfg", &node, &etcd.endpoints(), ranges());
    let cases: Vec<(&str, Value)> = vec![
        ("no endpoints", json!({"ipam": {"etcd": {"endpoints": []}}})),
        ("no etcd block", json!({"ipam": {"etcd": null}})),
        (
            "endpoint without scheme",
            json!({"ipam": {"etcd": {"endpoints": ["127.0.0.1:2379"]}}}),
        ),
        (
            "https without caFile",
            json!({"ipam": {"etcd": {"endpoints": ["https://127.0.0.1:2379"]}}}),
        ),
        (
            "certFile without keyFile",
            json!({"ipam": {"etcd": {"certFile": "/x.pem"}}}),
        ),
        (
            "username without passwordFile",
            json!({"ipam": {"etcd": {"username": "u"}}}),
        ),
        (
            "bad prefix",
            json!({"ipam": {"etcd": {"prefix": "/a/../b"}}}),
        ),
        (
            "overlapping ranges",
            json!({"ipam": {"ranges": [[{"subnet": "10.50.0.0/24"}], [{"subnet": "10.50.0.0/25"}]]}}),
        ),
        (
            "blockSize larger than the range",
            json!({"ipam": {"ranges": [[{"subnet": "10.50.0.0/24"}]], "blockSize": 20}}),
        ),
        (
            "blockSize out of bounds",
            json!({"ipam": {"blockSize": 32}}),
        ),
        ("bad exclude", json!({"ipam": {"exclude": ["10.50.0.300"]}})),
        (
            "node name with a slash",
            json!({"ipam": {"nodeName": "a/b"}}),
        ),
        ("node name with ..", json!({"ipam": {"nodeName": "a..b"}})),
        ("network name with ..", json!({"name": "net..1"})),
        ("zero timeout", json!({"ipam": {"etcd": {"timeoutMs": 0}}})),
        (
            "a password over http",
            json!({"ipam": {"etcd": {"username": "u", "passwordFile": "/etc/cni/cluster-ipam/p"}}}),
        ),
        (
            "a credential file outside the credential folders",
            json!({"ipam": {"etcd": {"endpoints": ["https://127.0.0.1:1"],
                "caFile": "/etc/kubernetes/pki/etcd/ca.crt"}}}),
        ),
    ];
    for (what, change) in cases {
        let mut conf = base.clone();
        merge(&mut conf, change);
        let out = add(&conf, "c0");
        assert_eq!(out.code(), 7, "{what}: {:?}", out.stdout);
        assert!(!out.msg().is_empty(), "{what}");
        let st = status(&conf);
        assert_eq!(st.code(), 7, "STATUS, {what}: {:?}", st.stdout);
    }
    let bad_ip = run("ADD", &base, "c0", "net1", "IP=not-an-ip");
    assert_eq!(bad_ip.code(), 4, "{:?}", bad_ip.stdout);
    assert!(
        etcd_keys(&etcd, "/cluster-ipam").is_empty(),
        "a refused configuration wrote to etcd"
    );
    assert!(node.leases("cfg").is_empty());
}
