//! Traffic through the shaped veth: a bounded TCP transfer (1 MiB) in each
//! direction, measured by the receiver, must come within ±30% of the
//! configured rate; traffic the subnet lists exempt must not be limited
//! (at least 3× the rate). Also the subnet layouts' qdiscs, classes and
//! filters, and CHECK of them.
//!
//! The pod's host veth has 10.77.0.1/24 (the container is 10.77.0.2) and
//! 10.78.0.1/24; the container reaches 10.78.0.0/24 through 10.77.0.1. The
//! container always connects to a host address; which side writes makes
//! the direction, and the host side's address is the remote one the
//! subnet filters see.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use common::*;
use libcni::netns::NetNs;
use serde_json::{json, Value};

/// Bits per second: 1 MiB takes about one second.
const RATE: u64 = 8_000_000;
/// Bits: 32 KiB, a small part of the transfer.
const BURST: u64 = 262_144;
const PAYLOAD: usize = 1024 * 1024;
/// The shaper's ceiling: a transfer may not beat the rate by more than this
/// (the 32 KiB burst is 3 % of the payload).
const ABOVE: f64 = 0.30;
/// How far below the rate a transfer may come: a loaded machine (another
/// core busy, the receiver descheduled) only ever slows it, so the floor is
/// loose; it still tells a shaped flow from a stalled one.
const BELOW: f64 = 0.60;
const SECOND_HOST_IP: &str = "10.78.0.1";
const SECOND_SUBNET: &str = "10.78.0.0/24";
const IO_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy)]
enum Direction {
    ToContainer,
    FromContainer,
}

fn pod(tag: &str) -> Pod {
    let pod = Pod::with_mtu(tag, 1500);
    pod.host.ip(&[
        "addr",
        "add",
        &format!("{SECOND_HOST_IP}/24"),
        "dev",
        HOST_VETH,
    ]);
    pod.container
        .ip(&["route", "add", SECOND_SUBNET, "via", HOST_IP]);
    pod
}

/// Sends [`PAYLOAD`] bytes between the container and `host_ip`; returns
/// the receiver's rate in bits per second, from its first byte to the
/// end.
fn transfer(pod: &Pod, host_ip: &str, direction: Direction) -> f64 {
    let host = NetNs::open(pod.host.path()).expect("open host netns");
    let container = NetNs::open(pod.container.path()).expect("open container netns");
    let listener = host
        .run(|| TcpListener::bind((host_ip, 0)))
        .expect("enter host")
        .expect("listen");
    let address: SocketAddr = listener.local_addr().expect("address");
    let connected = container
        .run(|| TcpStream::connect_timeout(&address, Duration::from_secs(5)))
        .expect("enter container")
        .unwrap_or_else(|e| panic!("connect to {address}: {e}"));
    listener.set_nonblocking(true).expect("nonblocking");
    let deadline = Instant::now() + Duration::from_secs(5);
    let accepted = loop {
        match listener.accept() {
            Ok((stream, _)) => break stream,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => panic!("accept on {address}: {e}"),
        }
    };
    accepted.set_nonblocking(false).expect("blocking");
    let (mut writer, mut reader) = match direction {
        Direction::ToContainer => (accepted, connected),
        Direction::FromContainer => (connected, accepted),
    };
    for stream in [&writer, &reader] {
        stream.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
        stream.set_write_timeout(Some(IO_TIMEOUT)).expect("timeout");
    }
    let receiver = std::thread::spawn(move || {
        let mut buffer = vec![0u8; 64 * 1024];
        let mut total = 0usize;
        let mut first = None;
        loop {
            let n = reader.read(&mut buffer).expect("read");
            if n == 0 {
                break;
            }
            first.get_or_insert_with(Instant::now);
            total += n;
        }
        (total, first.map(|f| f.elapsed()).unwrap_or_default())
    });
    writer.write_all(&vec![0x5a; PAYLOAD]).expect("write");
    writer.shutdown(Shutdown::Write).expect("shutdown");
    let (total, elapsed) = receiver.join().expect("receiver");
    assert_eq!(total, PAYLOAD);
    total as f64 * 8.0 / elapsed.as_secs_f64().max(1e-6)
}

fn assert_shaped(pod: &Pod, host_ip: &str, direction: Direction) {
    let rate = transfer(pod, host_ip, direction);
    eprintln!("shaped {direction:?} {host_ip}: {rate:.0} bit/s");
    let ratio = rate / RATE as f64;
    assert!(
        (1.0 - BELOW..=1.0 + ABOVE).contains(&ratio),
        "{direction:?} {host_ip}: {rate:.0} bit/s is not within -{BELOW}/+{ABOVE} of {RATE}"
    );
}

fn assert_unshaped(pod: &Pod, host_ip: &str, direction: Direction) {
    let rate = transfer(pod, host_ip, direction);
    eprintln!("unshaped {direction:?} {host_ip}: {rate:.0} bit/s");
    assert!(
        rate > 3.0 * RATE as f64,
        "{direction:?} {host_ip}: {rate:.0} bit/s looks limited (configured {RATE})"
    );
}

fn limits(extra: Value) -> Value {
    let mut entry = json!({"ingressRate": RATE, "ingressBurst": BURST,
                           "egressRate": RATE, "egressBurst": BURST});
    if let (Some(entry), Some(extra)) = (entry.as_object_mut(), extra.as_object()) {
        entry.extend(extra.clone());
    }
    entry
}

#[test]
fn both_directions_are_shaped_to_the_configured_rate() {
    let pod = pod("bwtr");
    assert_unshaped(&pod, HOST_IP, Direction::ToContainer);
    let conf = pod.conf("1.0.0", limits(json!({})));
    pod.call("ADD", &conf).assert_ok();
    assert_shaped(&pod, HOST_IP, Direction::ToContainer);
    assert_shaped(&pod, HOST_IP, Direction::FromContainer);
    pod.call("DEL", &conf).assert_ok();
}

/// `unshapedSubnets`: traffic with 10.78.0.0/24 passes at veth speed in
/// both directions, the rest is shaped. The layout is the documented one.
#[test]
fn unshaped_subnets_bypass_the_limit() {
    let pod = pod("bwun");
    let conf = pod.conf(
        "1.1.0",
        limits(json!({"unshapedSubnets": [SECOND_SUBNET, "fd00:78::/64"]})),
    );
    pod.call("ADD", &conf).assert_ok();
    pod.call("CHECK", &conf).assert_ok();

    let on_host = pod.qdiscs_of(HOST_VETH);
    let kinds: Vec<(&str, &str)> = on_host
        .iter()
        .map(|q| {
            (
                q["kind"].as_str().unwrap_or_default(),
                q["handle"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(kinds, [("htb", "1:"), ("tbf", "2:"), ("ingress", "ffff:")]);
    assert_eq!(on_host[0]["options"]["default"], "0x2");
    assert_eq!(on_host[1]["parent"], "1:2");
    let root_filters = tc_json(
        &pod.host,
        &["filter", "show", "dev", HOST_VETH, "parent", "1:"],
    );
    let matched: Vec<&Value> = root_filters
        .iter()
        .filter(|f| f["options"]["match"].is_object())
        .collect();
    assert_eq!(matched.len(), 2, "{root_filters:?}");
    assert!(matched.iter().all(|f| f["options"]["flowid"] == "1:1"));
    let redirects = pod.ingress_filters();
    let redirected: Vec<&Value> = redirects
        .iter()
        .filter(|f| f["options"]["actions"].is_array())
        .collect();
    assert_eq!(redirected.len(), 1, "{redirects:?}");
    assert_eq!(redirected[0]["pref"], 3);

    assert_unshaped(&pod, SECOND_HOST_IP, Direction::ToContainer);
    assert_unshaped(&pod, SECOND_HOST_IP, Direction::FromContainer);
    assert_shaped(&pod, HOST_IP, Direction::ToContainer);
    assert_shaped(&pod, HOST_IP, Direction::FromContainer);

    // A subnet filter lost is a CHECK failure.
    let out = pod.host.exec(
        "tc",
        &[
            "filter", "del", "dev", HOST_VETH, "parent", "1:", "pref", "2",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = pod.call("CHECK", &conf);
    assert_eq!(out.error_code(), 999);
    let msg = out.json()["msg"].as_str().unwrap_or_default().to_string();
    assert!(
        msg.starts_with("the subnet filters on host-veth do not match"),
        "{msg}"
    );
    pod.call("DEL", &conf).assert_ok();
    assert!(pod.ifbs().is_empty());
}

/// `shapedSubnets`: only traffic with 10.78.0.0/24 is shaped.
#[test]
fn shaped_subnets_limit_only_those() {
    let pod = pod("bwsh");
    let conf = pod.conf("1.0.0", limits(json!({"shapedSubnets": [SECOND_SUBNET]})));
    pod.call("ADD", &conf).assert_ok();
    pod.call("CHECK", &conf).assert_ok();
    let on_host = pod.qdiscs_of(HOST_VETH);
    assert_eq!(on_host[0]["options"]["default"], "0x1");
    assert_shaped(&pod, SECOND_HOST_IP, Direction::ToContainer);
    assert_shaped(&pod, SECOND_HOST_IP, Direction::FromContainer);
    assert_unshaped(&pod, HOST_IP, Direction::ToContainer);
    assert_unshaped(&pod, HOST_IP, Direction::FromContainer);
    pod.call("DEL", &conf).assert_ok();
}

/// The same over IPv6: the u32 keys of a v6 subnet (source and
/// destination offsets of the IPv6 header) exempt fd00:78::/64, while
/// traffic with fd00:77::1 is shaped.
#[test]
fn unshaped_ipv6_subnet_bypasses_the_limit() {
    let pod = pod("bwun6");
    for (address, dev) in [("fd00:77::1/64", HOST_VETH), ("fd00:78::1/64", HOST_VETH)] {
        pod.host
            .ip(&["-6", "addr", "add", address, "dev", dev, "nodad"]);
    }
    pod.container.ip(&[
        "-6",
        "addr",
        "add",
        "fd00:77::2/64",
        "dev",
        CONTAINER_VETH,
        "nodad",
    ]);
    pod.container
        .ip(&["-6", "route", "add", "fd00:78::/64", "via", "fd00:77::1"]);
    let conf = pod.conf(
        "1.0.0",
        limits(json!({"unshapedSubnets": ["fd00:78::/64"]})),
    );
    pod.call("ADD", &conf).assert_ok();
    pod.call("CHECK", &conf).assert_ok();
    assert_unshaped(&pod, "fd00:78::1", Direction::ToContainer);
    assert_unshaped(&pod, "fd00:78::1", Direction::FromContainer);
    assert_shaped(&pod, "fd00:77::1", Direction::ToContainer);
    assert_shaped(&pod, "fd00:77::1", Direction::FromContainer);
    pod.call("DEL", &conf).assert_ok();
}
