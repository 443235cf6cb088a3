//! Locks: a holder that dies releases them, a holder that stays gives the
//! next call a bounded wait ending in code 11 (try again later), never a
//! hang.
//!
//! - host-local's store lock (`<dataDir>/<network>/lock`): a real
//!   host-local is stopped inside its locked section (its round-robin file
//!   is made a FIFO, whose open blocks), so it holds the lock
//!   mid-operation; the chain's ADD then fails with 11 after
//!   `lockTimeoutMs`, and once the holder is SIGKILLed the next ADD works
//!   and the store still holds every earlier lease.
//! - the xtables lock: legacy iptables (which has one; iptables-nft does
//!   not) is put first in the plugins' PATH and pointed at a lock file of
//!   the test's own through `XTABLES_LOCKFILE`, so the machine's
//!   `/run/xtables.lock` is never touched. Held by another process, it
//!   makes bridge's masquerade set-up and portmap's DNAT set-up wait their
//!   bounded time and fail with 11; released during the wait, ADD goes
//!   through.

mod resilience_common;

use std::fs::{self, File};
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use conformance::testnet::{bin_dir, TestNetns};
use libcni::invoke::PluginEnv;
use libcni::runtime::RuntimeError;
use nix::fcntl::{Flock, FlockArg};
use nix::sys::stat::Mode;
use resilience_common::*;
use serde_json::json;

/// Far above every bounded wait of the plugins (10 s for xtables) and
/// far below a hang.
const NO_HANG: Duration = Duration::from_secs(60);

fn code_of(e: &RuntimeError) -> u32 {
    e.code()
        .unwrap_or_else(|| panic!("no plugin error code in: {e}"))
        .as_u32()
}

/// True when someone holds an exclusive flock on `path`.
fn is_locked(path: &Path) -> bool {
    let Ok(file) = File::open(path) else {
        return false;
    };
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(_ours) => false,
        Err((_, errno)) => errno == nix::errno::Errno::EWOULDBLOCK,
    }
}

/// A host-local ADD that blocks inside its locked section, and is
/// SIGKILLed on drop if the test has not done so.
struct StuckHolder {
    child: Child,
}

impl StuckHolder {
    /// Makes `last_reserved_ip.0` a FIFO and starts a host-local ADD: it
    /// takes the store lock, then blocks opening the FIFO.
    fn start(host: &TestHost, conf: &serde_json::Value) -> StuckHolder {
        let fifo = host.store_dir().join("last_reserved_ip.0");
        let _ = fs::remove_file(&fifo);
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).unwrap();
        let ipam = json!({
            "cniVersion": "1.1.0",
            "name": NETWORK,
            "ipam": conf["plugins"][0]["ipam"],
        });
        let mut child = Command::new(bin_dir().join("host-local"))
            .env_clear()
            .env("CNI_COMMAND", "ADD")
            .env("CNI_CONTAINERID", "stuck-holder")
            // Any netns but its own, which the skeleton refuses.
            .env("CNI_NETNS", host.host.path())
            .env("CNI_IFNAME", IFNAME)
            .env("CNI_PATH", bin_dir())
            .env(
                libcni::confine::POLICY_ENV,
                conformance::testnet::scratch_policy(),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(&serde_json::to_vec(&ipam).unwrap())
            .unwrap();
        let lock = host.store_dir().join("lock");
        let deadline = Instant::now() + NO_HANG;
        while !is_locked(&lock) {
            assert!(
                Instant::now() < deadline,
                "host-local never took the store lock"
            );
            assert!(
                child.try_wait().unwrap().is_none(),
                "host-local ended instead of blocking"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        StuckHolder { child }
    }

    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for StuckHolder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_store_lock_held_too_long_gives_11_and_a_killed_holder_blocks_nothing() {
    let mut options = HostOptions::new("rl-store", "10.236.0.0/24");
    options.lock_timeout_ms = Some(1000);
    let host = TestHost::with_options(options);
    let backend = Backend::Nftables;

    // Earlier pods, whose leases must survive all of this.
    let mut earlier = Vec::new();
    for n in 0..3 {
        let pod = TestNetns::new("rl-e");
        let rt = host.runtime_conf(&format!("lock-early-{n}"), &pod, 32000 + n);
        let result = host.add(backend, &rt).unwrap();
        earlier.push((pod, rt, result_ips(&result)));
    }
    let baseline = TestHost::chains(&host.firewall());

    let holder = StuckHolder::start(&host, &host.chain_conf(backend).conflist());

    // Locked: a bounded wait, then 11, and ADD's rollback leaves nothing.
    let pod = TestNetns::new("rl-p");
    let rt = host.runtime_conf("lock-waiter", &pod, 32100);
    let start = Instant::now();
    let err = host.add(backend, &rt).unwrap_err();
    let waited = start.elapsed();
    println!("store lock held: ADD failed after {waited:?}: {err}");
    assert_eq!(code_of(&err), 11, "{err}");
    assert!(waited < NO_HANG, "ADD waited {waited:?}");
    assert!(
        err.to_string().contains("lock"),
        "the error should say what it waited for: {err}"
    );
    // DEL as a runtime does after a failed ADD: locked too, so 11 again.
    let err = host.del(backend, &rt).unwrap_err();
    assert_eq!(code_of(&err), 11, "{err}");

    // The holder dies mid-operation: the lock is free at once.
    holder.kill();
    fs::remove_file(host.store_dir().join("last_reserved_ip.0")).unwrap();
    host.del(backend, &rt).unwrap();
    let result = host.add(backend, &rt).unwrap();
    let ips = result_ips(&result);
    for (_, early_rt, early_ips) in &earlier {
        assert!(
            early_ips.iter().all(|ip| !ips.contains(ip)),
            "{ips:?} was already {}'s",
            early_rt.container_id
        );
        host.cni
            .check_network_list(host.list(backend), early_rt)
            .unwrap();
    }
    let leases = host.leases();
    assert_eq!(leases.len(), 4, "{leases:?}");
    assert!(
        !leases
            .values()
            .any(|holder| holder.contains("stuck-holder")),
        "the killed holder reserved nothing: {leases:?}"
    );

    host.del(backend, &rt).unwrap();
    for (_, early_rt, _) in &earlier {
        host.del(backend, early_rt).unwrap();
    }
    let left = host.leftovers(&["lock-"], &baseline);
    assert!(left.is_empty(), "left: {left:#?}");
}

/// A folder whose `iptables-save`/`-restore` (and ip6tables) are the
/// legacy ones.
fn legacy_iptables_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for family in ["iptables", "ip6tables"] {
        for tool in ["", "-save", "-restore"] {
            let legacy = format!("/usr/sbin/{family}-legacy{tool}");
            assert!(Path::new(&legacy).exists(), "{legacy} missing");
            symlink(&legacy, dir.path().join(format!("{family}{tool}"))).unwrap();
        }
    }
    dir
}

/// Holds the xtables lock file like another iptables would.
fn hold_lock(path: &Path) -> Flock<File> {
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .unwrap();
    Flock::lock(file, FlockArg::LockExclusiveNonblock)
        .map_err(|(_, e)| e)
        .unwrap()
}

#[test]
fn the_xtables_lock_held_elsewhere_gives_a_bounded_wait() {
    let tools = legacy_iptables_dir();
    let lock_path = tools.path().join("xtables.lock");
    let path = format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", tools.path().display());
    let env = PluginEnv::from_process()
        .with("PATH", path)
        .with("XTABLES_LOCKFILE", lock_path.as_os_str());
    let mut options = HostOptions::new("rl-xt", "10.237.0.0/24");
    options.base_env = Some(env);
    let host = TestHost::with_options(options);
    let backend = Backend::Iptables;
    let real_lock = Path::new("/run/xtables.lock");
    let real_before = fs::metadata(real_lock).ok().map(|m| m.modified().unwrap());

    // Unlocked, everything works (and creates the shared chains).
    {
        let pod = TestNetns::new("rl-xw");
        let rt = host.runtime_conf("xt-warm", &pod, 33000);
        host.add(backend, &rt).unwrap();
        host.del(backend, &rt).unwrap();
    }
    let baseline = TestHost::chains(&host.firewall());
    let legacy_rules = host.run_in_host(
        &tools.path().join("iptables-save").display().to_string(),
        &["-t", "nat"],
    );
    assert!(
        legacy_rules.contains("CNI-HOSTPORT-DNAT"),
        "the plugins did not use legacy iptables: {legacy_rules}"
    );

    // Bridge's masquerade set-up waits, then 11.
    let pod = TestNetns::new("rl-xp");
    let rt = host.runtime_conf("xt-masq", &pod, 33001);
    let held = hold_lock(&lock_path);
    let start = Instant::now();
    let err = host.add(backend, &rt).unwrap_err();
    let waited = start.elapsed();
    println!("xtables lock held: ADD failed after {waited:?}: {err}");
    assert!(waited < NO_HANG);
    assert_eq!(code_of(&err), 11, "{err}");
    assert!(err.to_string().contains("bridge"), "{err}");
    drop(held);
    host.del(backend, &rt).unwrap();

    // Released during the wait: ADD goes through.
    let held = hold_lock(&lock_path);
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(2));
        drop(held);
    });
    host.add(backend, &rt).unwrap();
    releaser.join().unwrap();
    host.del(backend, &rt).unwrap();

    // Portmap's DNAT set-up (bridge without masquerade) waits, then 11.
    let mut no_masq = host.chain_conf(backend);
    no_masq.ip_masq = false;
    let list = no_masq.list();
    let held = hold_lock(&lock_path);
    let start = Instant::now();
    let err = host.cni.add_network_list(&list, &rt).unwrap_err();
    let waited = start.elapsed();
    println!("xtables lock held, no masquerade: ADD failed after {waited:?}: {err}");
    assert!(waited < NO_HANG);
    assert_eq!(code_of(&err), 11, "{err}");
    assert!(err.to_string().contains("portmap"), "{err}");
    drop(held);
    host.cni.del_network_list(&list, &rt).unwrap();

    let left = host.leftovers(&["xt-"], &baseline);
    assert!(left.is_empty(), "left: {left:#?}");
    let real_after = fs::metadata(real_lock).ok().map(|m| m.modified().unwrap());
    assert_eq!(
        real_before, real_after,
        "the machine's xtables lock was touched"
    );
}
