//! The pool under a real 3-member etcd cluster: many nodes at once, a
//! member lost in the middle, the whole cluster down and back, and
//! claimers killed at random points.

mod common;

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use ipnetwork::IpNetwork;
use serde_json::{json, Value};

const POOL: &str = "10.40.0.0/20";
const EXCLUDED: &str = "10.40.4.0/24";

fn pool_ranges() -> Value {
    json!({"ranges": [[{"subnet": POOL}]], "blockSize": 28, "exclude": [EXCLUDED, "10.40.0.77"]})
}

/// Checks that every block in etcd has one owner whose record holds it,
/// and that no node's record holds a block etcd does not give it.
#[track_caller]
fn assert_blocks_accounted(etcd: &etcd_cluster::EtcdCluster, network: &str, nodes: &[Node]) {
    let in_etcd = etcd_blocks(etcd, network);
    let mut owner_of: HashMap<String, String> = HashMap::new();
    for (block, owner) in &in_etcd {
        assert!(
            owner_of.insert(block.clone(), owner.clone()).is_none(),
            "block {block} twice"
        );
    }
    let mut held_anywhere = HashSet::new();
    for node in nodes {
        for block in node.blocks(network) {
            assert_eq!(
                owner_of.get(&block),
                Some(&node.name),
                "node {} records block {block}, etcd says {:?}",
                node.name,
                owner_of.get(&block)
            );
            assert!(
                held_anywhere.insert(block.clone()),
                "block {block} recorded by two nodes"
            );
        }
    }
    for (block, owner) in &owner_of {
        assert!(
            held_anywhere.contains(block),
            "block {block} of {owner} is in no node's record"
        );
    }
}

#[test]
fn twenty_nodes_a_thousand_adds_with_a_member_killed_midway() {
    let (etcd, _ns) = start_etcd(3, Default::default());
    let etcd = Arc::new(Mutex::new(etcd));
    let endpoints = etcd.lock().unwrap().endpoints();
    let root = tempfile::tempdir().unwrap();
    let nodes: Vec<Node> = (0..20)
        .map(|i| Node::new(root.path(), &format!("gpu-node-{i:02}")))
        .collect();
    let confs: Vec<Value> = nodes
        .iter()
        .map(|n| net_conf("rails", n, &endpoints, pool_ranges()))
        .collect();

    // 1000 ADDs: 50 per node, by 4 workers that take nodes round robin, so
    // every node's calls run in parallel with other nodes' (each node's
    // own calls are serial in a runtime, too).
    let done = Arc::new(Mutex::new(0usize));
    let results: Arc<Mutex<Vec<(usize, String, Outcome)>>> = Arc::default();
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let confs = confs.clone();
            let results = results.clone();
            let done = done.clone();
            let etcd = etcd.clone();
            std::thread::spawn(move || {
                for pod in 0..50 {
                    for node in (w..20).step_by(4) {
                        let container = format!("pod-{node}-{pod}");
                        let out = add(&confs[node], &container);
                        results.lock().unwrap().push((node, container, out));
                        let mut n = done.lock().unwrap();
                        *n += 1;
                        if *n == 300 {
                            // A member dies in the middle of the run.
                            etcd.lock().unwrap().kill(1).expect("kill member 1");
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    let results = std::mem::take(&mut *results.lock().unwrap());
    assert_eq!(results.len(), 1000);
    let failed: Vec<_> = results.iter().filter(|(_, _, o)| !o.ok()).collect();
    assert!(
        failed.is_empty(),
        "{} ADDs failed, first: {:?}",
        failed.len(),
        failed.first()
    );
    let ips: Vec<IpAddr> = results.iter().flat_map(|(_, _, o)| o.ips()).collect();
    assert_eq!(ips.len(), 1000);
    assert_distinct(&ips);
    let pool: IpNetwork = POOL.parse().unwrap();
    let excluded: IpNetwork = EXCLUDED.parse().unwrap();
    for ip in &ips {
        assert!(pool.contains(*ip), "{ip} outside the pool");
        assert!(
            !excluded.contains(*ip) && *ip != "10.40.0.77".parse::<IpAddr>().unwrap(),
            "{ip} excluded"
        );
    }
    let etcd_guard = etcd.lock().unwrap();
    assert_blocks_accounted(&etcd_guard, "rails", &nodes);
    // Each node's leases are inside its own blocks.
    for node in &nodes {
        let blocks: Vec<IpNetwork> = node
            .blocks("rails")
            .iter()
            .map(|b| b.parse().unwrap())
            .collect();
        for lease in node.leases("rails") {
            assert!(
                blocks.iter().any(|b| b.contains(lease)),
                "{} leases {lease} outside its blocks",
                node.name
            );
        }
    }
    drop(etcd_guard);

    for (node, container, _) in &results {
        del(&confs[*node], container).expect_ok("DEL");
    }
    for node in &nodes {
        assert!(
            node.leases("rails").is_empty(),
            "{} keeps leases",
            node.name
        );
    }
}

#[test]
fn with_etcd_down_held_blocks_serve_and_new_blocks_fail_fast_with_11() {
    let (mut etcd, _ns) = start_etcd(3, Default::default());
    let root = tempfile::tempdir().unwrap();
    let node = Node::new(root.path(), "offline-node");
    let mut conf = net_conf(
        "outage",
        &node,
        &etcd.endpoints(),
        json!({"ranges": [[{"subnet": "10.41.0.0/24"}]], "blockSize": 29}),
    );
    conf["ipam"]["etcd"]["timeoutMs"] = json!(1500);
    let first = add(&conf, "p0").expect_ok("ADD with etcd up");
    let block: IpNetwork = node.blocks("outage")[0].parse().unwrap();
    let room = if block.contains("10.41.0.1".parse().unwrap()) {
        5
    } else {
        7
    };
    let state_before = node.state("outage");

    etcd.stop_all();
    let mut ips = first.ips();
    for i in 1..room {
        let out = add(&conf, &format!("p{i}")).expect_ok("ADD inside the held block, etcd down");
        ips.extend(out.ips());
    }
    assert!(ips.iter().all(|ip| block.contains(*ip)));
    let started = Instant::now();
    let out = add(&conf, "needs-a-block");
    let took = started.elapsed();
    assert_eq!(out.code(), 11, "{:?}", out.stdout);
    for endpoint in etcd.endpoints() {
        assert!(
            out.msg().contains(&endpoint),
            "{} does not name {endpoint}",
            out.msg()
        );
    }
    // Within the timeout and a margin for two process starts and refused
    // connects on a loaded machine: the point is that it does not hang.
    assert!(
        took < Duration::from_millis(1500 + 4000),
        "took {took:?} with a 1.5 s timeout"
    );
    // Nothing half-written: no lease, the same record.
    assert_eq!(node.leases("outage").len(), room);
    assert_eq!(node.state("outage"), state_before);
    // DEL works without etcd.
    del(&conf, "p0").expect_ok("DEL with etcd down");
    let st = status(&conf);
    assert!(st.ok(), "room again after the DEL: {:?}", st.stdout);
    add(&conf, "p0-again").expect_ok("ADD into the freed address");
    let st = status(&conf);
    assert_eq!(st.code(), 11, "full blocks and no etcd: {:?}", st.stdout);

    etcd.restart_all().expect("members restart");
    let out = add(&conf, "needs-a-block").expect_ok("ADD after etcd is back");
    assert!(!block.contains(out.ips()[0]));
    assert_eq!(node.blocks("outage").len(), 2);
    assert_blocks_accounted(&etcd, "outage", std::slice::from_ref(&node));
}

/// A tiny deterministic generator: the trial points are reproducible from
/// the printed seed.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % below.max(1)
    }
}

#[test]
fn sigkill_at_random_points_of_a_claim_loses_no_block_and_duplicates_nothing() {
    let (etcd, _ns) = start_etcd(1, Default::default());
    let root = tempfile::tempdir().unwrap();
    // Ten nodes, blocks of two addresses: nearly every ADD claims.
    let nodes: Vec<Node> = (0..10)
        .map(|i| Node::new(root.path(), &format!("k{i}")))
        .collect();
    let ranges = json!({"ranges": [[{"subnet": "10.42.0.0/20"}]], "blockSize": 31});
    let confs: Vec<Value> = nodes
        .iter()
        .map(|n| net_conf("kill", n, &etcd.endpoints(), ranges.clone()))
        .collect();

    // How long a claiming ADD takes here, to spread the kills over it.
    let started = Instant::now();
    add(&confs[0], "warm-0").expect_ok("warm-up");
    add(&confs[0], "warm-1").expect_ok("warm-up");
    add(&confs[0], "warm-2").expect_ok("warm-up");
    let span = (started.elapsed().as_micros() / 3).max(2000) as u64;
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    eprintln!("seed {seed}, kill points in 0..{span} µs");
    let mut rng = Lcg(seed);

    let mut survivors: Vec<(usize, String)> = vec![
        (0, "warm-0".into()),
        (0, "warm-1".into()),
        (0, "warm-2".into()),
    ];
    let (mut killed, mut pending, mut unrecorded) = (0, 0, 0);
    for trial in 0..200 {
        let n = trial % nodes.len();
        let container = format!("t{trial}");
        let mut child = spawn("ADD", &confs[n], &container, "net1", "");
        std::thread::sleep(Duration::from_micros(rng.next(span)));
        let _ = child.kill();
        let status = child.wait().expect("wait");
        if status.success() {
            survivors.push((n, container));
        } else {
            killed += 1;
            if nodes[n].state("kill")["claimPending"] == json!(true) {
                pending += 1;
            }
            let in_etcd = etcd_blocks(&etcd, "kill");
            let recorded = nodes[n].blocks("kill");
            if in_etcd
                .iter()
                .any(|(b, o)| *o == nodes[n].name && !recorded.contains(b))
            {
                unrecorded += 1;
            }
            // What a runtime does after a failed ADD: DEL.
            del(&confs[n], &container).expect_ok("DEL after a killed ADD");
        }
    }
    eprintln!(
        "{killed} of 200 ADDs killed before they finished; {pending} left a claim pending, \
         {unrecorded} a block in etcd that the node had not recorded"
    );
    assert!(killed >= 50, "only {killed} kills landed inside a call");
    assert!(
        pending >= 1,
        "no kill landed inside a claim: the test proves nothing"
    );

    // The next call of each node settles any interrupted claim.
    for (n, conf) in confs.iter().enumerate() {
        let out = add(conf, &format!("after-{n}")).expect_ok("ADD after the kills");
        survivors.push((n, format!("after-{n}")));
        assert!(!out.ips().is_empty());
    }
    assert_blocks_accounted(&etcd, "kill", &nodes);
    let mut all = Vec::new();
    for node in &nodes {
        let blocks: Vec<IpNetwork> = node
            .blocks("kill")
            .iter()
            .map(|b| b.parse().unwrap())
            .collect();
        for lease in node.leases("kill") {
            assert!(
                blocks.iter().any(|b| b.contains(lease)),
                "{} leases {lease} outside its blocks",
                node.name
            );
            all.push(lease);
        }
        assert_eq!(
            node.state("kill")["claimPending"],
            json!(false),
            "{} left a claim pending",
            node.name
        );
    }
    assert_distinct(&all);
    assert_eq!(
        all.len(),
        survivors.len(),
        "leases besides the surviving ADDs"
    );
}

#[test]
fn a_pending_claim_that_etcd_cannot_settle_is_left_alone_for_a_while() {
    let (mut etcd, _ns) = start_etcd(1, Default::default());
    let root = tempfile::tempdir().unwrap();
    let node = Node::new(root.path(), "pending-node");
    let mut conf = net_conf(
        "pending",
        &node,
        &etcd.endpoints(),
        json!({"ranges": [[{"subnet": "10.43.0.0/24"}]], "blockSize": 28}),
    );
    conf["ipam"]["etcd"]["timeoutMs"] = json!(1000);
    add(&conf, "p0").expect_ok("ADD with etcd up");
    // As a claimer killed after sending its claim leaves it.
    let path = node.store("pending").join("cluster-blocks.json");
    let mut state = node.state("pending");
    state["claimPending"] = json!(true);
    std::fs::write(&path, state.to_string()).unwrap();

    etcd.stop_all();
    add(&conf, "p1").expect_ok("ADD from the held block, etcd down");
    let after_first = node.state("pending");
    assert_eq!(after_first["claimPending"], json!(true));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        after_first["settleAfter"].as_u64().unwrap() > now,
        "{after_first}"
    );
    add(&conf, "p2").expect_ok("second ADD, etcd down");
    assert_eq!(
        node.state("pending"),
        after_first,
        "the second ADD tried to settle again"
    );

    // The next claim settles it.
    etcd.restart_all().expect("restart");
    for i in 3..20 {
        add(&conf, &format!("p{i}")).expect_ok("ADD after etcd is back");
    }
    assert_eq!(node.state("pending")["claimPending"], json!(false));
    assert_blocks_accounted(&etcd, "pending", std::slice::from_ref(&node));
}

#[test]
fn an_endpoint_that_never_answers_does_not_use_up_the_deadline() {
    let (etcd, _ns) = start_etcd(1, Default::default());
    // Accepts connections (the kernel's backlog) and never says a word,
    // as a host behind a partition that drops replies would.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("http://{}", silent.local_addr().unwrap());
    let root = tempfile::tempdir().unwrap();
    let endpoints = vec![silent_url.clone(), etcd.endpoints()[0].clone()];
    // Node names whose byte sums differ in parity start at either endpoint.
    for name in ["node-a", "node-b"] {
        let node = Node::new(root.path(), name);
        let mut conf = net_conf(
            "silent",
            &node,
            &endpoints,
            json!({"ranges": [[{"subnet": "10.44.0.0/24"}]], "blockSize": 28}),
        );
        conf["ipam"]["etcd"]["timeoutMs"] = json!(8000);
        let started = Instant::now();
        add(&conf, "p0").expect_ok("ADD with one silent endpoint");
        let took = started.elapsed();
        assert_eq!(node.blocks("silent").len(), 1);
        // The silent endpoint may hold a call for its share of the deadline
        // (half, with two endpoints: 4 s), not all of it: the answer comes
        // from the other endpoint with time to spare. 3 s of margin for the
        // plugin's start and etcd's answers on a loaded machine (the test
        // had 1 s with a 3 s deadline).
        assert!(
            took < Duration::from_millis(7000),
            "{name}: took {took:?} of an 8 s deadline"
        );
    }
    drop(silent);
}

#[test]
fn a_leader_that_stops_answering_costs_no_add_of_nodes_claiming_meanwhile() {
    let (mut etcd, _ns) = start_etcd(3, Default::default());
    let endpoints = etcd.endpoints();
    let leader = etcd
        .leader()
        .expect("etcdctl endpoint status")
        .expect("a 3-member cluster that serves writes has a leader");
    let root = tempfile::tempdir().unwrap();
    // Nine nodes without a block (their names start them at each endpoint
    // in turn), so every ADD writes to etcd while the other two members
    // elect a new leader. The frozen leader accepts connections and never
    // answers; a follower asked before the election forwards the write to
    // it and never answers either. Only a request sent after the election
    // goes through, late in the deadline.
    let nodes: Vec<Node> = (0..9)
        .map(|i| Node::new(root.path(), &format!("late-node-{i}")))
        .collect();
    etcd.freeze(leader).expect("freeze the leader");
    let outcomes: Vec<Outcome> = std::thread::scope(|scope| {
        let calls: Vec<_> = nodes
            .iter()
            .map(|node| {
                let mut conf = net_conf("election", node, &endpoints, pool_ranges());
                // 6 s, not the usual 3: the election itself (1 s election
                // timeout) took over 3 s in CI while the thousand-ADD test
                // shared the 2 cores, and every ADD correctly got 11. What
                // is tested is that the frozen leader and the followers
                // forwarding to it do not use up the deadline.
                conf["ipam"]["etcd"]["timeoutMs"] = json!(6000);
                scope.spawn(move || add(&conf, "p0"))
            })
            .collect();
        calls.into_iter().map(|c| c.join().expect("ADD")).collect()
    });
    etcd.thaw(leader).expect("thaw the old leader");
    for (node, outcome) in nodes.iter().zip(&outcomes) {
        assert!(
            outcome.ok(),
            "{} failed across the election: {:?}",
            node.name,
            outcome
        );
        assert_eq!(node.blocks("election").len(), 1, "{}", node.name);
    }
    let ips: Vec<IpAddr> = outcomes.iter().flat_map(Outcome::ips).collect();
    assert_eq!(ips.len(), 9);
    assert_distinct(&ips);
    etcd.wait_writable()
        .expect("the cluster serves writes again");
    assert_blocks_accounted(&etcd, "election", &nodes);
}
