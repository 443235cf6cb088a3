//! Runs real etcd. Without /usr/bin/etcd these tests fail with the install
//! hint on purpose: a skipped test would hide that nothing was checked.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use etcd_cluster::{ClusterOptions, EtcdCluster, HarnessError};

fn start(members: usize, opts: ClusterOptions) -> EtcdCluster {
    match EtcdCluster::start(members, opts) {
        Ok(cluster) => cluster,
        Err(e) => panic!("{e}"),
    }
}

/// Whether `pid` runs; a zombie (killed, not yet reaped by whoever
/// inherited it) does not.
fn alive(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state follows the command name in parentheses: "pid (comm) S ...".
    let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
    state.is_some_and(|s| s != Some('Z'))
}

#[test]
fn one_member_put_get() {
    let cluster = start(1, ClusterOptions::default());
    assert_eq!(cluster.endpoints().len(), 1);
    assert!(cluster.member_endpoint(0).starts_with("http://127.0.0.1:"));
    cluster.etcdctl(&["put", "/x/a", "1"]).expect("put");
    let out = cluster.etcdctl(&["get", "--prefix", "/x"]).expect("get");
    assert_eq!(out, "/x/a\n1\n");
}

#[test]
fn three_members_survive_a_kill_and_it_rejoins() {
    let t = Instant::now();
    let mut cluster = start(3, ClusterOptions::default());
    eprintln!("3-member start took {:?}", t.elapsed());
    cluster.etcdctl(&["put", "/x/before", "1"]).expect("put");

    let killed = cluster.pids()[0].expect("member 0 runs");
    cluster.kill(0).expect("kill");
    assert!(!alive(killed), "member 0 (pid {killed}) still there");
    assert_eq!(cluster.pids()[0], None);
    assert!(matches!(cluster.kill(0), Err(HarnessError::NotRunning(0))));
    // If member 0 led, the others need a moment to elect a new leader.
    cluster
        .wait_writable()
        .expect("writable with one member down");
    cluster
        .etcdctl(&["put", "/x/during", "2"])
        .expect("put with one member down");
    cluster
        .etcdctl_on(1, &["put", "/x/during1", "2"])
        .expect("put via member 1");
    cluster
        .etcdctl_on(2, &["put", "/x/during2", "2"])
        .expect("put via member 2");
    let killed_get = cluster.etcdctl_on(0, &["get", "/x/during"]);
    assert!(
        matches!(killed_get, Err(HarnessError::NotRunning(0))),
        "{killed_get:?}"
    );

    let t = Instant::now();
    cluster.restart(0).expect("restart");
    eprintln!("restart of one member took {:?}", t.elapsed());
    // A serializable read answers from member 0's own store: it has caught
    // up with the write made while it was down.
    let get = ["get", "--consistency=s", "--prefix", "/x"];
    let out = cluster.etcdctl_on(0, &get).expect("get from member 0");
    assert!(out.contains("/x/during2\n2\n"), "{out}");

    cluster.stop_all();
    assert!(cluster.pids().iter().all(Option::is_none));
    cluster.restart_all().expect("restart_all");
    let out = cluster
        .etcdctl(&["get", "/x/before"])
        .expect("get after restart_all");
    assert_eq!(out, "/x/before\n1\n");
}

/// etcdctl as a client with the given CA and client certificate.
fn etcdctl_with(cluster: &EtcdCluster, ca: &Path, cert: &Path, key: &Path) -> bool {
    let out = Command::new("/usr/bin/etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", cluster.endpoints().join(",")))
        .args(["--dial-timeout=1s", "--command-timeout=1s"])
        .arg("--cacert")
        .arg(ca)
        .arg("--cert")
        .arg(cert)
        .arg("--key")
        .arg(key)
        .args(["put", "/tls/k", "v"])
        .output()
        .expect("running etcdctl");
    out.status.success()
}

#[test]
fn tls_wants_the_right_ca_and_client_cert() {
    let cluster = start(
        1,
        ClusterOptions {
            tls: true,
            ..ClusterOptions::default()
        },
    );
    assert!(cluster.member_endpoint(0).starts_with("https://127.0.0.1:"));
    cluster
        .etcdctl(&["put", "/x/a", "1"])
        .expect("put over TLS");
    let tls = cluster.tls_files().expect("TLS files");
    assert!(etcdctl_with(&cluster, &tls.ca, &tls.cert, &tls.key));
    assert!(
        !etcdctl_with(&cluster, &tls.other_ca, &tls.cert, &tls.key),
        "wrong CA accepted"
    );
    assert!(
        !etcdctl_with(&cluster, &tls.ca, &tls.other_cert, &tls.other_key),
        "untrusted client cert accepted"
    );
}

#[test]
fn auth_wants_the_password() {
    let auth = Some(("root".to_string(), "s3cret".to_string()));
    let mut cluster = start(
        1,
        ClusterOptions {
            tls: true,
            auth,
            ..ClusterOptions::default()
        },
    );
    cluster.etcdctl(&["put", "/x/a", "1"]).expect("put as root");
    assert_eq!(cluster.etcdctl(&["get", "/x/a"]).expect("get"), "/x/a\n1\n");

    let tls = cluster.tls_files().expect("TLS files");
    let run = |user: Option<&str>| {
        let mut cmd = Command::new("/usr/bin/etcdctl");
        cmd.env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", cluster.member_endpoint(0)))
            .arg("--cacert")
            .arg(&tls.ca)
            .arg("--cert")
            .arg(&tls.cert)
            .arg("--key")
            .arg(&tls.key);
        if let Some(user) = user {
            cmd.arg(format!("--user={user}"));
        }
        cmd.args(["get", "/x/a"]).output().expect("running etcdctl")
    };
    // With a client certificate etcd takes its CN as the user: no such user.
    let anonymous = run(None);
    let stderr = String::from_utf8_lossy(&anonymous.stderr);
    assert!(!anonymous.status.success(), "read without a password");
    assert!(stderr.contains("permission denied"), "{stderr}");
    assert!(
        !run(Some("root:wrong")).status.success(),
        "wrong password accepted"
    );
    let ok = run(Some("root:s3cret"));
    assert_eq!(String::from_utf8_lossy(&ok.stdout), "/x/a\n1\n");

    // The readiness polls of a restart log in too.
    cluster.stop_all();
    cluster.restart_all().expect("restart_all with auth");
    assert_eq!(cluster.etcdctl(&["get", "/x/a"]).expect("get"), "/x/a\n1\n");
}

#[test]
fn auth_for_another_user() {
    let auth = Some(("ipam".to_string(), "pw:with:colons".to_string()));
    let cluster = start(
        1,
        ClusterOptions {
            auth,
            ..ClusterOptions::default()
        },
    );
    cluster.etcdctl(&["put", "/x/a", "1"]).expect("put as ipam");
    let out = Command::new("/usr/bin/etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", cluster.member_endpoint(0)))
        .args(["put", "/x/b", "2"])
        .output()
        .expect("running etcdctl");
    assert!(!out.status.success(), "write without a user");
}

#[test]
fn drop_leaves_no_etcd_behind() {
    let cluster = start(3, ClusterOptions::default());
    let pids: Vec<u32> = cluster.pids().into_iter().flatten().collect();
    assert_eq!(pids.len(), 3);
    assert!(pids.iter().all(|&pid| alive(pid)));
    drop(cluster);
    for pid in pids {
        assert!(!alive(pid), "etcd pid {pid} outlived its cluster");
    }
}

#[test]
fn drop_on_panic_kills_members() {
    let pids = std::sync::Mutex::new(Vec::new());
    let result = std::panic::catch_unwind(|| {
        let cluster = start(1, ClusterOptions::default());
        pids.lock()
            .unwrap()
            .extend(cluster.pids().into_iter().flatten());
        panic!("deliberate panic with a live cluster (this test expects it)");
    });
    assert!(result.is_err());
    let pids = pids.into_inner().unwrap();
    assert_eq!(pids.len(), 1);
    assert!(!alive(pids[0]), "etcd pid {} outlived a panic", pids[0]);
}

#[test]
fn members_outlive_the_thread_that_started_them() {
    // PR_SET_PDEATHSIG follows the forking thread; the harness forks from
    // its own long-lived thread, so this cluster's member must survive.
    let mut cluster = std::thread::spawn(|| start(1, ClusterOptions::default()))
        .join()
        .expect("start thread");
    std::thread::sleep(Duration::from_millis(200));
    cluster
        .etcdctl(&["put", "/x/a", "1"])
        .expect("put after the starting thread ended");
    cluster.kill(0).expect("kill");
    let cluster = std::thread::spawn(move || {
        cluster.restart(0).expect("restart from another thread");
        cluster
    })
    .join()
    .expect("restart thread");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(cluster.etcdctl(&["get", "/x/a"]).expect("get"), "/x/a\n1\n");
}

/// Set in the copy of this test binary that `members_die_with_a_killed_harness`
/// starts and then SIGKILLs.
const ORPHAN_ENV: &str = "ETCD_CLUSTER_TEST_ORPHAN";

#[test]
fn members_die_with_a_killed_harness() {
    if std::env::var_os(ORPHAN_ENV).is_some() {
        let cluster = start(2, ClusterOptions::default());
        let pids: Vec<String> = cluster
            .pids()
            .iter()
            .flatten()
            .map(u32::to_string)
            .collect();
        println!("etcd-pids: {}", pids.join(" "));
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    let exe = std::env::current_exe().expect("test binary path");
    // The killed copy cannot remove its cluster's temp dir; this one does.
    let tmp = tempfile::tempdir().expect("temp dir");
    let mut harness = Command::new(exe)
        .env("TMPDIR", tmp.path())
        .args([
            "--exact",
            "members_die_with_a_killed_harness",
            "--nocapture",
        ])
        .env(ORPHAN_ENV, "1")
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting the harness copy");
    let stdout = harness.stdout.take().expect("piped stdout");
    let line = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find(|l| l.starts_with("etcd-pids: "));
    // SIGKILL: no Drop runs in the harness; only PR_SET_PDEATHSIG is left.
    harness.kill().expect("killing the harness copy");
    harness.wait().expect("reaping the harness copy");
    let line = line.expect("the harness copy printed no etcd pids");
    let pids: Vec<u32> = line["etcd-pids: ".len()..]
        .split(' ')
        .map(|p| p.parse().expect("a pid"))
        .collect();
    assert_eq!(pids.len(), 2);
    let deadline = Instant::now() + Duration::from_secs(5);
    while pids.iter().any(|&pid| alive(pid)) {
        assert!(
            Instant::now() < deadline,
            "etcd {pids:?} outlived the killed harness"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
