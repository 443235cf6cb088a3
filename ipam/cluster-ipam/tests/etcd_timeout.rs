//! `etcd.timeoutMs` bounds a call's etcd work, and with it how long a
//! block claim holds the node's store lock of the network (issue 32): with
//! `"timeoutMs": 9223372036854775808` and an endpoint that refused, ADD
//! never returned, and a second ADD of the network on the node waited as
//! long as it was given. No etcd here: the endpoint is a localhost port
//! nothing listens on.
//!
//! The time bounds are generous (a machine twice as slow, with the other
//! core busy, passes); what each test pins is the outcome: the code, the
//! message, and that the second ADD got the lock instead of timing out on
//! it.

mod common;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// Far above what either call needs (a few seconds), far below "never".
const GENEROUS: Duration = Duration::from_secs(60);

/// `http://127.0.0.1:PORT` of a port bound and closed again: connections
/// to it are refused.
fn refusing_endpoint() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free localhost port");
    let address = listener.local_addr().expect("its address");
    drop(listener);
    format!("http://{address}")
}

fn conf(node: &Node, endpoint: &str, ipam_extra: Value) -> Value {
    let mut ipam = json!({"ranges": [[{"subnet": "10.66.0.0/24"}]], "blockSize": 28});
    merge(&mut ipam, ipam_extra);
    net_conf("timeoutnet", node, &[endpoint.to_string()], ipam)
}

#[test]
fn a_timeout_outside_its_range_is_refused_before_etcd() {
    let _ns = netns();
    let root = tempfile::tempdir().unwrap();
    let node = Node::new(root.path(), "range-node");
    let endpoint = refusing_endpoint();
    for (value, shown) in [
        (json!(9_223_372_036_854_775_808u64), "9223372036854775808"),
        (json!(30_001), "30001"),
        (json!(0), "0"),
        (json!(-1), "-1"),
        (json!(2.5), "2.5"),
    ] {
        let conf = conf(&node, &endpoint, json!({"etcd": {"timeoutMs": value}}));
        let started = Instant::now();
        let out = add(&conf, "c0");
        let took = started.elapsed();
        assert_eq!(out.status, 1, "{value}: {} {}", out.stdout, out.stderr);
        assert_eq!(out.code(), 7, "{value}: {}", out.stdout);
        assert_eq!(
            out.msg(),
            format!(
                "invalid ipam.etcd.timeoutMs {shown}: must be an integer from 1 to 30000 (milliseconds)"
            )
        );
        assert!(took < GENEROUS, "{value}: {took:?}");
        assert!(node.leases("timeoutnet").is_empty());
    }
}

/// A claim against a refusing endpoint ends within its timeout with code
/// 11, and the ADD queued behind it on the node's store lock gets the lock
/// (its own claim fails the same way) instead of timing out on the lock.
#[test]
fn a_claim_against_a_refusing_endpoint_ends_and_frees_the_store_lock() {
    let _ns = netns();
    let root = tempfile::tempdir().unwrap();
    let node = Node::new(root.path(), "refused-node");
    let endpoint = refusing_endpoint();
    // The lock wait is far longer than the etcd time, so a second ADD that
    // fails on the lock would show the first held it past its timeout.
    let conf = conf(
        &node,
        &endpoint,
        json!({"etcd": {"timeoutMs": 2000}, "lockTimeoutMs": 50_000}),
    );
    let started = Instant::now();
    let first = spawn("ADD", &conf, "c1", "net1", "");
    let second = spawn("ADD", &conf, "c2", "net1", "");
    let outcomes: Vec<(Outcome, Duration)> = [first, second]
        .into_iter()
        .map(|child| {
            let out = child.wait_with_output().expect("plugin process runs");
            let out = Outcome {
                status: out.status.code().unwrap_or(-1),
                stdout: serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            };
            (out, started.elapsed())
        })
        .collect();
    for (out, took) in &outcomes {
        assert_eq!(out.status, 1, "{} {}", out.stdout, out.stderr);
        assert_eq!(out.code(), 11, "{}", out.stdout);
        let msg = out.msg();
        assert!(msg.starts_with("etcd unreachable within 2s"), "{msg}");
        assert!(msg.contains(&endpoint), "{msg}");
        assert!(*took < GENEROUS, "{took:?}: {msg}");
    }
    eprintln!(
        "refusing endpoint, timeoutMs 2000: ADDs ended after {:?} and {:?}",
        outcomes[0].1, outcomes[1].1
    );
    assert!(node.leases("timeoutnet").is_empty());
}
