//! `cni-node run` keeps the node known alive in a cluster-ipam network
//! of its conflist folder (issue 30), against a real etcd started by the
//! `etcd-cluster` harness: the node is shown alive (by the function
//! `cluster-ipam-admin show` uses) and stays so on one lease while the GC
//! pass interval is an hour (the heartbeat beats on its own); on SIGTERM
//! the agent revokes the lease and the node is shown silent. No runtime
//! runs: the passes find the CRI socket missing and release nothing.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cluster_ipam::admin::{load_network, read_pool, sign_of_life, PoolView};
use cluster_ipam::config::ClusterConfig;
use cluster_ipam::etcd::Etcd;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::json;

const AGENT: &str = env!("CARGO_BIN_EXE_cni-node");
const NODE: &str = "node-hb";

/// A node policy file (root's, 0600) allowing the test's folder as state.
fn policy(dir: &Path) -> std::path::PathBuf {
    let folder = dir.display().to_string();
    let policy = json!({"allow": {"credentials": [folder], "state": [folder]}});
    let path = dir.join("cni-rs-policy.json");
    libcni::state_file::write_atomically(&path, policy.to_string().as_bytes())
        .expect("the test's policy file");
    path
}

fn pool(cluster: &ClusterConfig) -> PoolView {
    let mut etcd = Etcd::new(&cluster.etcd, &cluster.node).expect("etcd client");
    read_pool(&mut etcd, cluster).expect("the pool reads")
}

/// Polls until `cond` holds on the pool, with a generous bound: the agent
/// starts, reads its folder and beats first.
fn wait_for(cluster: &ClusterConfig, what: &str, cond: impl Fn(&PoolView) -> bool) -> PoolView {
    let start = Instant::now();
    loop {
        let view = pool(cluster);
        if cond(&view) {
            return view;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "not {what} after 60 s: {}",
            sign_of_life(&view, NODE)
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn run_keeps_the_node_alive_and_sigterm_revokes_its_lease() {
    let etcd = match etcd_cluster::EtcdCluster::start(1, Default::default()) {
        Ok(etcd) => etcd,
        Err(etcd_cluster::HarnessError::EtcdMissing) => {
            libcni::test_skip::skip(
                "run_keeps_the_node_alive_and_sigterm_revokes_its_lease",
                "etcd is not installed (.ci/install-deps)",
            );
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let root = tempfile::tempdir().unwrap();
    let policy = policy(root.path());
    libcni::confine::override_policy_file(&policy);
    let conf_dir = root.path().join("net.d");
    std::fs::create_dir(&conf_dir).unwrap();
    let ipam = json!({
        "type": "cluster-ipam",
        "nodeName": NODE,
        "dataDir": root.path().join("data"),
        "etcd": {"endpoints": etcd.endpoints(), "timeoutMs": 3000, "prefix": "/hb-test/"},
        "ranges": [[{"subnet": "10.92.0.0/24"}]],
        "blockSize": 28,
    });
    let conflist = conf_dir.join("10-hb.conflist");
    std::fs::write(
        &conflist,
        json!({"cniVersion": "1.1.0", "name": "hbnet",
               "plugins": [{"type": "bridge", "bridge": "cni-hb0", "ipam": ipam}]})
        .to_string(),
    )
    .unwrap();
    // A second file of the same pool (the prefix without its trailing
    // slash means the same pool): one heartbeat, not two.
    let mut same = ipam.clone();
    same["etcd"]["prefix"] = json!("/hb-test");
    std::fs::write(
        conf_dir.join("20-hb.conf"),
        json!({"cniVersion": "1.1.0", "name": "hbnet", "type": "bridge", "ipam": same}).to_string(),
    )
    .unwrap();
    // A network without cluster-ipam: no heartbeat, no error.
    std::fs::write(
        conf_dir.join("30-local.conflist"),
        json!({"cniVersion": "1.1.0", "name": "local",
               "plugins": [{"type": "bridge", "ipam": {"type": "host-local", "subnet": "10.93.0.0/24"}}]})
        .to_string(),
    )
    .unwrap();
    let cluster = load_network(&conflist).expect("the conflist names cluster-ipam");
    let log_path = root.path().join("agent.log");
    let child = Command::new(AGENT)
        .env(libcni::confine::POLICY_ENV, &policy)
        .env("RUST_LOG", "info")
        .args([
            "run",
            "--interval",
            "1h",
            "--metrics-port",
            "0",
            "--heartbeat-ttl",
            "6s",
        ])
        .arg("--conf-dir")
        .arg(&conf_dir)
        .arg("--cri-endpoint")
        .arg(format!(
            "unix://{}",
            root.path().join("no-runtime.sock").display()
        ))
        .arg("--cache-dir")
        .arg(root.path().join("cache"))
        .arg("--bin-dir")
        .arg(root.path().join("bin"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .expect("cni-node runs");
    let mut agent = Agent(child);

    let view = wait_for(&cluster, "alive", |v| v.alive.contains_key(NODE));
    let first = view.alive[NODE];
    assert_eq!(first.ttl, 6);
    assert!(sign_of_life(&view, NODE).starts_with("alive since"));

    // Over two TTLs later, with no pass since the first (interval 1h), the
    // node is still alive on the same lease: the heartbeat beats on its
    // own interval (every 2 s; a 6 s TTL leaves room for a slow beat).
    // Waiting longer only makes this stricter.
    std::thread::sleep(Duration::from_secs(13));
    let view = pool(&cluster);
    assert_eq!(
        view.alive.get(NODE),
        Some(&first),
        "the lease lapsed or was remade"
    );

    // SIGTERM: the agent revokes the lease before it exits.
    kill(Pid::from_raw(agent.0.id() as i32), Signal::SIGTERM).unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(status) = agent.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "cni-node still runs 60 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(status.success(), "{status}: {log}");
    assert_eq!(
        log.matches("known alive (new lease)").count(),
        1,
        "one heartbeat for the two files of one pool: {log}"
    );
    assert!(
        log.contains("network hbnet: node node-hb's lease revoked"),
        "{log}"
    );
    assert!(!log.contains("heartbeat: network local"), "{log}");
    // Read once, at once: the revoke ended before the agent exited, so no
    // wait is needed (a lease left to expire would still be there for up
    // to its TTL).
    let view = pool(&cluster);
    let shown = sign_of_life(&view, NODE);
    assert!(shown.starts_with("silent, last seen"), "{shown}");
    drop(etcd);
}
