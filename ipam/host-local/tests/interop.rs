//! Side by side with the reference plugin (Debian's /usr/lib/cni/host-local,
//! version 1.1.1, spec versions up to 1.0.0) in one data directory: a node
//! can switch in either direction without losing or double-assigning an
//! address, and both can even run at once.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::thread;

use common::*;
use serde_json::{json, Value};

fn dual_stack(data: &Path) -> Value {
    conf(
        "1.0.0",
        "mixnet",
        data,
        json!([[{"subnet": "10.20.0.0/24"}], [{"subnet": "2001:db8:20::/64"}]]),
    )
}

fn add(binary: &str, conf: &Value, cid: &str, netns: &str) -> Vec<String> {
    result_addresses(&Call::new(binary, "ADD", cid, netns).run(conf).ok())
}

#[test]
fn a_store_written_by_the_reference_is_read_extended_and_released_by_ours() {
    require_reference();
    let netns = TestNetns::new("i");
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path();
    let c = dual_stack(data);

    assert_eq!(
        add(REFERENCE, &c, "r1", &netns.path()),
        ["10.20.0.2/24", "2001:db8:20::2/64"]
    );
    assert_eq!(
        add(REFERENCE, &c, "r2", &netns.path()),
        ["10.20.0.3/24", "2001:db8:20::3/64"]
    );
    assert_eq!(
        add(REFERENCE, &c, "r3", &netns.path()),
        ["10.20.0.4/24", "2001:db8:20::4/64"]
    );

    // Ours continues the round-robin where the reference stopped.
    assert_eq!(
        add(OURS, &c, "o1", &netns.path()),
        ["10.20.0.5/24", "2001:db8:20::5/64"]
    );
    // It sees the reference's leases: no second address for r1.
    let (code, msg) = Call::new(OURS, "ADD", "r1", &netns.path()).run(&c).err();
    assert_eq!(code, 100, "{msg}");
    Call::new(OURS, "CHECK", "r2", &netns.path()).run(&c).ok();

    Call::new(OURS, "DEL", "r2", &netns.path()).run(&c).ok();
    let left: Vec<String> = leases(data, "mixnet").into_iter().collect();
    assert_eq!(
        left,
        [
            "10.20.0.2",
            "10.20.0.4",
            "10.20.0.5",
            "2001:db8:20::2",
            "2001:db8:20::4",
            "2001:db8:20::5"
        ]
    );

    // The reference allocates again behind our back; ours still finds it.
    assert_eq!(
        add(REFERENCE, &c, "r4", &netns.path()),
        ["10.20.0.6/24", "2001:db8:20::6/64"]
    );
    assert_eq!(
        add(OURS, &c, "o2", &netns.path()),
        ["10.20.0.7/24", "2001:db8:20::7/64"]
    );
    for cid in ["r1", "r3", "r4", "o1", "o2"] {
        Call::new(OURS, "DEL", cid, &netns.path()).run(&c).ok();
    }
    assert!(leases(data, "mixnet").is_empty());
    // The reference layout is intact for a switch back.
    let dir = store_dir(data, "mixnet");
    for file in ["lock", "last_reserved_ip.0", "last_reserved_ip.1"] {
        assert!(dir.join(file).is_file(), "{file}");
    }
    assert_eq!(
        add(REFERENCE, &c, "r5", &netns.path()),
        ["10.20.0.8/24", "2001:db8:20::8/64"]
    );
}

#[test]
fn a_store_written_by_ours_is_read_extended_and_released_by_the_reference() {
    require_reference();
    let netns = TestNetns::new("i");
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path();
    let c = dual_stack(data);

    assert_eq!(
        add(OURS, &c, "o1", &netns.path()),
        ["10.20.0.2/24", "2001:db8:20::2/64"]
    );
    assert_eq!(
        add(OURS, &c, "o2", &netns.path()),
        ["10.20.0.3/24", "2001:db8:20::3/64"]
    );
    Call::new(OURS, "ADD", "o2", &netns.path())
        .ifname("net1")
        .run(&c)
        .ok();

    // The reference reads our leases: next addresses, no duplicate for o2.
    assert_eq!(
        add(REFERENCE, &c, "r1", &netns.path()),
        ["10.20.0.5/24", "2001:db8:20::5/64"]
    );
    let out = Call::new(REFERENCE, "ADD", "o2", &netns.path()).run(&c);
    assert_ne!(out.code, 0, "reference allowed a duplicate: {out:?}");
    assert!(
        out.stdout.contains("duplicate allocation is not allowed"),
        "{out:?}"
    );
    Call::new(REFERENCE, "CHECK", "o1", &netns.path())
        .run(&c)
        .ok();

    // The reference releases one of ours; only that attachment's leases go.
    Call::new(REFERENCE, "DEL", "o2", &netns.path())
        .run(&c)
        .ok();
    let left: Vec<String> = leases(data, "mixnet").into_iter().collect();
    assert_eq!(
        left,
        [
            "10.20.0.2",
            "10.20.0.4",
            "10.20.0.5",
            "2001:db8:20::2",
            "2001:db8:20::4",
            "2001:db8:20::5"
        ]
    );
    // Ours agrees: o2/eth0 holds nothing now and may be added again.
    assert_eq!(
        Call::new(OURS, "CHECK", "o2", &netns.path())
            .run(&c)
            .err()
            .0,
        999
    );
    Call::new(OURS, "CHECK", "o2", &netns.path())
        .ifname("net1")
        .run(&c)
        .ok();
    assert_eq!(
        add(OURS, &c, "o2", &netns.path()),
        ["10.20.0.6/24", "2001:db8:20::6/64"]
    );

    for cid in ["o1", "o2", "r1"] {
        Call::new(REFERENCE, "DEL", cid, &netns.path()).run(&c).ok();
    }
    Call::new(REFERENCE, "DEL", "o2", &netns.path())
        .ifname("net1")
        .run(&c)
        .ok();
    assert!(leases(data, "mixnet").is_empty());
    // Our index survived the reference's DELs and is simply stale now.
    assert!(store_dir(data, "mixnet").join(".host-local-index").is_dir());
    assert_eq!(
        Call::new(OURS, "CHECK", "o1", &netns.path())
            .run(&c)
            .err()
            .0,
        999
    );
}

#[test]
fn ours_and_the_reference_at_once_never_share_an_address() {
    require_reference();
    let netns = TestNetns::new("i");
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path();
    let c = conf(
        "1.0.0",
        "mixnet",
        data,
        json!([[{"subnet": "10.30.0.0/16"}]]),
    );
    let netns_path = netns.path();

    let workers: Vec<_> = (0..8)
        .map(|w| {
            let c = c.clone();
            let netns_path = netns_path.clone();
            thread::spawn(move || {
                let binary = if w % 2 == 0 { OURS } else { REFERENCE };
                (0..25)
                    .map(|i| {
                        let cid = format!("w{w}-p{i}");
                        let out = Call::new(binary, "ADD", &cid, &netns_path).run(&c);
                        (cid, result_addresses(&out.ok()))
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut all = Vec::new();
    for worker in workers {
        all.extend(worker.join().unwrap());
    }
    assert_eq!(all.len(), 200);
    let distinct: BTreeSet<&String> = all.iter().flat_map(|(_, ips)| ips).collect();
    assert_eq!(distinct.len(), 200, "an address was handed out twice");
    assert_eq!(leases(data, "mixnet").len(), 200);

    // Released by whichever implementation did not create them.
    for (cid, _) in &all {
        let w: u32 = cid[1..cid.find('-').unwrap()].parse().unwrap();
        let binary = if w.is_multiple_of(2) { REFERENCE } else { OURS };
        Call::new(binary, "DEL", cid, &netns_path).run(&c).ok();
    }
    assert!(leases(data, "mixnet").is_empty());
}
