//! Our plugin and daemon against a real dnsmasq: the scenarios of the
//! reference's dhcp tests (a lease of 192.168.1.5/24, concurrent DELs,
//! "no more tries" when the pool is empty), renewal, release, leases kept
//! across a daemon restart, CHECK without acquiring, GC and STATUS.

mod common;

use std::time::Duration;

use common::*;
use conformance::testnet::{PluginCall, ALL_VERSIONS};
use serde_json::json;

#[test]
fn lease_in_every_version_and_release_on_del() {
    let mut lab = Lab::start("dh-v", "192.168.1.20", None);
    let ct = lab.container("dh-vc", "eth0");
    let daemon = Daemon::ours(lab.dir.path(), &lab.dir.path().join("state"), &[]);
    for version in ALL_VERSIONS {
        let conf = conf(version, &daemon.socket);
        let out = run(&ours(), "ADD", &ct, "ctr-v", "eth0", &conf);
        out.assert_ok();
        let result = out.json();
        assert_eq!(address_of(&result), "192.168.1.5/24", "{version}: {result}");
        assert_eq!(result["cniVersion"], version);
        if version >= "0.3.0" {
            assert_eq!(
                result["ips"][0]["gateway"], SERVER_IP,
                "{version}: {result}"
            );
            assert_eq!(
                result["routes"],
                json!([{"dst": "0.0.0.0/0", "gw": SERVER_IP}]),
                "{version}"
            );
        }
        assert!(lab.leased(FIRST_IP), "{version}: dnsmasq has the lease");
        run(&ours(), "DEL", &ct, "ctr-v", "eth0", &conf).assert_ok();
        assert!(
            wait_for(Duration::from_secs(5), || !lab.leased(FIRST_IP)),
            "{version}: DEL released the lease: {:?}",
            lab.leases()
        );
    }
    assert!(lab.count("DHCPRELEASE(dhcpbr0) 192.168.1.5") >= ALL_VERSIONS.len());
}

#[test]
fn concurrent_dels_all_succeed() {
    let mut lab = Lab::start("dh-d", "192.168.1.20", None);
    let ct = lab.container("dh-dc", "eth0");
    let daemon = Daemon::ours(lab.dir.path(), &lab.dir.path().join("state"), &[]);
    let conf = conf("1.0.0", &daemon.socket);
    run(&ours(), "ADD", &ct, "ctr-d", "eth0", &conf).assert_ok();
    std::thread::scope(|scope| {
        let dels: Vec<_> = (0..3)
            .map(|_| scope.spawn(|| run(&ours(), "DEL", &ct, "ctr-d", "eth0", &conf)))
            .collect();
        for del in dels {
            del.join().expect("DEL thread").assert_ok();
        }
    });
    run(&ours(), "DEL", &ct, "ctr-d", "eth0", &conf).assert_ok();
    assert!(wait_for(Duration::from_secs(5), || !lab.leased(FIRST_IP)));
    // Released once: the other DELs found nothing to release.
    assert_eq!(lab.count("DHCPRELEASE(dhcpbr0) 192.168.1.5"), 1);
}

#[test]
fn renewal_reaches_the_server() {
    let mut lab = Lab::start("dh-r", "192.168.1.20", Some(3));
    let ct = lab.container("dh-rc", "eth0");
    let daemon = Daemon::ours(lab.dir.path(), &lab.dir.path().join("state"), &[]);
    let conf = conf("1.0.0", &daemon.socket);
    run(&ours(), "ADD", &ct, "ctr-r", "eth0", &conf).assert_ok();
    // Applied as the calling plugin would: renewals then go unicast
    // (RENEWING) from it; without it they are broadcast (see the restart
    // test, where nothing applies the address).
    ct.ip(&["addr", "add", "192.168.1.5/24", "dev", "eth0"]);
    // dnsmasq pinged 192.168.1.5 before offering it, when nothing answered:
    // the host's neighbour entry for it is FAILED, and the first unicast
    // ACK to it would be lost. Traffic to the container, as there is once
    // it runs, resolves it.
    assert!(wait_for(Duration::from_secs(10), || lab
        .host
        .ping(FIRST_IP)));
    let first_expiry = lab.expiry_of(FIRST_IP).expect("leased");
    let acks = lab.count("DHCPACK(dhcpbr0) 192.168.1.5");
    assert!(
        wait_for(Duration::from_secs(30), || {
            lab.count("DHCPACK(dhcpbr0) 192.168.1.5") > acks
                && lab.expiry_of(FIRST_IP).is_some_and(|e| e > first_expiry)
        }),
        "no renewal: {:?}\n{}",
        lab.leases(),
        daemon.log_text()
    );
    assert!(daemon.log_text().contains("extended (Renew)"));
    run(&ours(), "DEL", &ct, "ctr-r", "eth0", &conf).assert_ok();
}

/// The reference's "lease unavailable" test: one address, two interfaces.
#[test]
fn empty_pool_is_no_more_tries() {
    let mut lab = Lab::start("dh-u", FIRST_IP, None);
    let first = lab.container("dh-u1", "eth0");
    let second = lab.container("dh-u2", "eth1");
    let daemon = Daemon::ours(
        lab.dir.path(),
        &lab.dir.path().join("state"),
        &[
            "-timeout",
            "2s",
            "-resendmax",
            "8s",
            "--resendtimeout",
            "10s",
        ],
    );
    let conf = conf("1.0.0", &daemon.socket);
    let out = run(&ours(), "ADD", &first, "ctr-u", "eth0", &conf);
    assert_eq!(address_of(&out.assert_ok().json()), "192.168.1.5/24");
    let out = run(&ours(), "ADD", &second, "ctr-u", "eth1", &conf);
    assert_eq!(out.error_code(), 999);
    assert_eq!(
        out.json()["msg"],
        "error calling DHCP.Allocate: no more tries"
    );
    run(&ours(), "DEL", &second, "ctr-u", "eth1", &conf).assert_ok();
    run(&ours(), "DEL", &first, "ctr-u", "eth0", &conf).assert_ok();
}

#[test]
fn leases_kept_across_daemon_restart() {
    let mut lab = Lab::start("dh-k", "192.168.1.20", Some(3));
    let ct = lab.container("dh-kc", "eth0");
    let state = lab.dir.path().join("state");
    let mut daemon = Daemon::ours(lab.dir.path(), &state, &[]);
    let conf = conf("1.0.0", &daemon.socket);
    let out = run(&ours(), "ADD", &ct, "ctr-k", "eth0", &conf);
    assert_eq!(address_of(&out.assert_ok().json()), "192.168.1.5/24");
    daemon.stop();
    assert!(!daemon.socket.exists(), "SIGTERM removes the socket");
    let stored = std::fs::read_dir(&state).expect("state dir").count();
    assert_eq!(stored, 1, "the lease is on disk");

    let discovers = lab.count("DHCPDISCOVER");
    let acks = lab.count("DHCPACK(dhcpbr0) 192.168.1.5");
    let restarted = Daemon::ours(lab.dir.path(), &state, &[]);
    let conf = common::conf("1.0.0", &restarted.socket);
    // Renewal goes on under the new daemon ...
    assert!(
        wait_for(Duration::from_secs(30), || lab
            .count("DHCPACK(dhcpbr0) 192.168.1.5")
            > acks),
        "no renewal after restart: {}",
        restarted.log_text()
    );
    assert!(restarted
        .log_text()
        .contains("resuming lease of 192.168.1.5"));
    // ... and ADD of the same attachment gets the same lease, no new DISCOVER.
    let out = run(&ours(), "ADD", &ct, "ctr-k", "eth0", &conf);
    assert_eq!(address_of(&out.assert_ok().json()), "192.168.1.5/24");
    assert_eq!(lab.count("DHCPDISCOVER"), discovers);
    run(&ours(), "DEL", &ct, "ctr-k", "eth0", &conf).assert_ok();
    assert!(wait_for(Duration::from_secs(5), || !lab.leased(FIRST_IP)));
    assert_eq!(std::fs::read_dir(&state).expect("state dir").count(), 0);
}

#[test]
fn restart_forgets_leases_whose_interface_is_gone() {
    let mut lab = Lab::start("dh-g", "192.168.1.20", None);
    let ct = lab.container("dh-gc", "eth0");
    let state = lab.dir.path().join("state");
    let mut daemon = Daemon::ours(lab.dir.path(), &state, &[]);
    let conf = conf("1.0.0", &daemon.socket);
    run(&ours(), "ADD", &ct, "ctr-g", "eth0", &conf).assert_ok();
    daemon.stop();
    drop(ct);
    let restarted = Daemon::ours(lab.dir.path(), &state, &[]);
    assert!(
        wait_for(Duration::from_secs(5), || std::fs::read_dir(&state)
            .map(|d| d.count() == 0)
            .unwrap_or(false)),
        "{}",
        restarted.log_text()
    );
}

#[test]
fn check_never_acquires_and_gc_releases_stale_attachments() {
    let mut lab = Lab::start("dh-c", "192.168.1.20", None);
    let one = lab.container("dh-c1", "eth0");
    let two = lab.container("dh-c2", "eth0");
    let daemon = Daemon::ours(lab.dir.path(), &lab.dir.path().join("state"), &[]);
    let conf = conf("1.1.0", &daemon.socket);

    let out = run(&ours(), "CHECK", &one, "ctr-1", "eth0", &conf);
    assert_eq!(out.error_code(), 999);
    assert!(out.stdout.contains("no DHCP lease"), "{}", out.stdout);
    assert!(lab.leases().is_empty(), "CHECK acquired nothing");
    assert_eq!(lab.count("DHCPDISCOVER"), 0);

    let first = run(&ours(), "ADD", &one, "ctr-1", "eth0", &conf);
    let first = first.assert_ok().json();
    run(&ours(), "ADD", &two, "ctr-2", "eth0", &conf).assert_ok();
    assert!(lab.leased("192.168.1.6"));

    let mut with_prev = conf.clone();
    with_prev["prevResult"] = first.clone();
    run(&ours(), "CHECK", &one, "ctr-1", "eth0", &with_prev).assert_ok();
    let mut wrong = first.clone();
    wrong["ips"][0]["address"] = json!("192.168.1.99/24");
    with_prev["prevResult"] = wrong;
    let out = run(&ours(), "CHECK", &one, "ctr-1", "eth0", &with_prev);
    assert_eq!(out.error_code(), 999, "{}", out.stdout);

    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "ctr-1", "ifname": "eth0"}]);
    PluginCall::new("GC")
        .stdin_json(&gc)
        .run(&ours())
        .assert_ok();
    assert!(
        wait_for(Duration::from_secs(5), || !lab.leased("192.168.1.6")),
        "GC released the stale lease"
    );
    assert!(lab.leased(FIRST_IP), "GC kept the valid one");
    // DEL reads only the socket path: an option that no longer parses does
    // not keep the lease from being released.
    let mut changed = conf.clone();
    changed["ipam"]["request"] = json!([{"option": "doNotparseMe"}]);
    run(&ours(), "DEL", &one, "ctr-1", "eth0", &changed).assert_ok();
    assert!(wait_for(Duration::from_secs(5), || !lab.leased(FIRST_IP)));
}

#[test]
fn status_and_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ct = conformance::testnet::TestNetns::new("dh-e");
    let absent = dir.path().join("none.sock");
    let conf = conf("1.1.0", &absent);

    let out = PluginCall::new("STATUS").stdin_json(&conf).run(&ours());
    assert_eq!(out.error_code(), 50, "{}", out.stdout);
    let out = run(&ours(), "ADD", &ct, "ctr-e", "eth0", &conf);
    assert_eq!(out.error_code(), 11);
    assert!(out.json()["msg"]
        .as_str()
        .unwrap_or("")
        .starts_with("error dialing DHCP daemon: "));

    let daemon = Daemon::ours(dir.path(), &dir.path().join("state"), &[]);
    let up = common::conf("1.1.0", &daemon.socket);
    PluginCall::new("STATUS")
        .stdin_json(&up)
        .run(&ours())
        .assert_ok();
    // DEL of an attachment the daemon never saw.
    run(&ours(), "DEL", &ct, "ctr-e", "eth0", &up).assert_ok();

    let mut bad = up.clone();
    bad["ipam"]["request"] = json!([{"option": "doNotparseMe"}]);
    let out = run(&ours(), "ADD", &ct, "ctr-e", "eth0", &bad);
    assert_eq!(out.error_code(), 7);
    assert!(
        out.stdout
            .contains("Can not parse option \\\"doNotparseMe\\\""),
        "{}",
        out.stdout
    );
    let mut long = up.clone();
    long["ipam"]["provide"] = json!([{"option": "host-name", "value": "x".repeat(256)}]);
    assert_eq!(
        run(&ours(), "ADD", &ct, "ctr-e", "eth0", &long).error_code(),
        7
    );
    // The interface does not exist: the daemon's lookup error comes back.
    let out = run(&ours(), "ADD", &ct, "ctr-e", "eth9", &up);
    assert_eq!(out.error_code(), 999);
    assert!(
        out.stdout.contains("error looking up \\\"eth9\\\""),
        "{}",
        out.stdout
    );
}

#[test]
fn daemon_flags_and_socket_activation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run_daemon = |args: &[&str], env: &[(&str, &str)]| {
        // Bounded: a daemon that wrongly starts serving must not hang the test.
        std::process::Command::new("timeout")
            .arg("20")
            .arg(ours())
            .arg("daemon")
            .args(args)
            .envs(env.iter().copied())
            .output()
            .expect("run daemon")
    };
    let out = run_daemon(&["-pidfile", "relative.pid"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("Error writing pidfile \"relative.pid\": path not absolute"));
    let out = run_daemon(&["-bogus"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("flag provided but not defined: -bogus"));
    let socket = dir.path().join("a.sock");
    let socket = socket.display().to_string();
    let activated = |fds: &str| {
        std::process::Command::new("timeout")
            .args(["20", "sh", "-c"])
            .arg(format!(
                "LISTEN_PID=$$ LISTEN_FDS={fds} exec \"$0\" daemon -socketpath \"$1\""
            ))
            .arg(ours())
            .arg(&socket)
            .output()
            .expect("run daemon")
    };
    let out = activated("2");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("Too many (2) FDs passed through socket activation"));

    // The pidfile is written and removed with the socket on SIGTERM.
    let pidfile = dir.path().join("dhcp.pid");
    let mut daemon = Daemon::ours(
        dir.path(),
        &dir.path().join("state"),
        &["--pidfile", &pidfile.display().to_string()],
    );
    let pid = std::fs::read_to_string(&pidfile).expect("pidfile");
    assert!(pid.trim().parse::<u32>().is_ok());
    daemon.stop();
    assert!(!pidfile.exists());
    assert!(!daemon.socket.exists());
}

/// `provide` (a CNI_ARGS value as host name), `request` (classless routes)
/// and `priority` end to end: dnsmasq records the host name and sends
/// option 121, whose routes replace the router's default route.
#[test]
fn provided_options_requested_routes_and_priority() {
    let mut lab = Lab::start_with(
        "dh-o",
        "192.168.1.20",
        &["--dhcp-option=121,10.9.0.0/16,192.168.1.254,0.0.0.0/0,192.168.1.1".to_string()],
    );
    let ct = lab.container("dh-oc", "eth0");
    let daemon = Daemon::ours(lab.dir.path(), &lab.dir.path().join("state"), &[]);
    let mut conf = conf("1.0.0", &daemon.socket);
    conf["ipam"]["provide"] = json!([{"option": "host-name", "fromArg": "K8S_POD_NAME"}]);
    conf["ipam"]["request"] = json!([{"option": "121"}]);
    conf["ipam"]["priority"] = json!(30);
    let out = PluginCall::new("ADD")
        .attachment("ctr-o", &ct.path(), "eth0")
        .var("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAME=web-0")
        .stdin_json(&conf)
        .run(&ours());
    let result = out.assert_ok().json();
    assert_eq!(
        result["routes"],
        json!([
            {"dst": "10.9.0.0/16", "gw": "192.168.1.254", "priority": 30},
            {"dst": "0.0.0.0/0", "gw": SERVER_IP, "priority": 30}
        ]),
        "{result}"
    );
    let hostnames: Vec<String> = std::fs::read_to_string(lab.dir.path().join("leases"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(3).map(str::to_string))
        .collect();
    assert_eq!(hostnames, ["web-0"], "dnsmasq got the provided host name");
    run(&ours(), "DEL", &ct, "ctr-o", "eth0", &conf).assert_ok();
}

/// DEL after the container's namespace is gone: nothing can be sent from
/// the interface, but the daemon forgets the lease and DEL succeeds.
#[test]
fn del_with_the_netns_gone() {
    let mut lab = Lab::start("dh-n", "192.168.1.20", None);
    let ct = lab.container("dh-nc", "eth0");
    let state = lab.dir.path().join("state");
    let daemon = Daemon::ours(lab.dir.path(), &state, &[]);
    let conf = conf("1.0.0", &daemon.socket);
    run(&ours(), "ADD", &ct, "ctr-n", "eth0", &conf).assert_ok();
    let path = ct.path();
    drop(ct);
    PluginCall::new("DEL")
        .attachment("ctr-n", &path, "eth0")
        .stdin_json(&conf)
        .run(&ours())
        .assert_ok();
    assert_eq!(std::fs::read_dir(&state).expect("state dir").count(), 0);
}

/// systemd socket activation: the daemon serves on the socket it is given
/// as fd 3 (LISTEN_FDS=1 with LISTEN_PID its own PID) instead of binding.
#[test]
fn socket_activation_serves_the_passed_socket() {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;

    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("activated.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
    let listener_fd = listener.as_raw_fd();
    let unused = dir.path().join("unused.sock");
    let mut command = std::process::Command::new("sh");
    command
        .arg("-c")
        .arg("LISTEN_PID=$$ LISTEN_FDS=1 exec \"$0\" daemon -socketpath \"$1\" -statedir \"$2\"")
        .arg(ours())
        .arg(&unused)
        .arg(dir.path().join("state"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: dup2 and fcntl are async-signal-safe; they make the listener
    // fd 3 without close-on-exec, in the child only. When it already is fd
    // 3, dup2 would do nothing and leave close-on-exec set.
    unsafe {
        command.pre_exec(move || {
            let rc = if listener_fd == 3 {
                libc::fcntl(3, libc::F_SETFD, 0)
            } else {
                libc::dup2(listener_fd, 3)
            };
            if rc < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().expect("start daemon");
    drop(listener);
    let status = |path: &std::path::Path| {
        PluginCall::new("STATUS")
            .stdin_json(&conf("1.1.0", path))
            .run(&ours())
    };
    let served = wait_for(Duration::from_secs(10), || status(&socket).code == 0);
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    assert!(served, "the daemon answered on the passed socket");
    assert!(!unused.exists(), "and bound no socket of its own");
}

/// A stored lease found expired at start: the interface is set down (its
/// address is no longer the container's) and the lease forgotten.
#[test]
fn expired_lease_sets_the_link_down() {
    let mut lab = Lab::start("dh-x", "192.168.1.20", None);
    let ct = lab.container("dh-xc", "eth0");
    let state = lab.dir.path().join("state");
    let mut daemon = Daemon::ours(lab.dir.path(), &state, &[]);
    let conf = conf("1.0.0", &daemon.socket);
    run(&ours(), "ADD", &ct, "ctr-x", "eth0", &conf).assert_ok();
    daemon.stop();
    let file = std::fs::read_dir(&state)
        .expect("state dir")
        .next()
        .expect("one lease file")
        .expect("entry")
        .path();
    let mut record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).expect("read")).expect("json");
    let bound_at = record["bound_at"].as_u64().expect("bound_at");
    record["bound_at"] = json!(bound_at - 3600);
    std::fs::write(&file, serde_json::to_vec(&record).expect("json")).expect("write");
    let up = |ns: &conformance::testnet::TestNetns| {
        ns.ip_json(&["link", "show", "eth0"])[0]["flags"]
            .as_array()
            .is_some_and(|f| f.iter().any(|x| x == "UP"))
    };
    assert!(up(&ct));
    let restarted = Daemon::ours(lab.dir.path(), &state, &[]);
    assert!(
        wait_for(Duration::from_secs(10), || !up(&ct)),
        "eth0 set down: {}",
        restarted.log_text()
    );
    assert!(wait_for(Duration::from_secs(5), || !file.exists()));
    assert!(restarted.log_text().contains("expired"));
}

/// A renewal answered with DHCPNAK ends the lease at once: dnsmasq comes
/// back authoritative for another range, refuses 192.168.1.5, and the
/// daemon sets the interface down and forgets the lease.
#[test]
fn nak_on_renewal_ends_the_lease() {
    let mut lab = Lab::start("dh-k2", "192.168.1.20", Some(3));
    let ct = lab.container("dh-k2c", "eth0");
    let state = lab.dir.path().join("state");
    let daemon = Daemon::ours(lab.dir.path(), &state, &[]);
    let conf = conf("1.0.0", &daemon.socket);
    run(&ours(), "ADD", &ct, "ctr-k2", "eth0", &conf).assert_ok();
    lab.restart_server(
        "192.168.1.60",
        "192.168.1.50",
        &[
            "--dhcp-authoritative".to_string(),
            "--dhcp-option=option:T1,3".to_string(),
        ],
    );
    let up = || {
        ct.ip_json(&["link", "show", "eth0"])[0]["flags"]
            .as_array()
            .is_some_and(|f| f.iter().any(|x| x == "UP"))
    };
    assert!(
        wait_for(Duration::from_secs(30), || !up()),
        "eth0 set down after the NAK: {}\n{}",
        daemon.log_text(),
        lab.log()
    );
    assert!(lab.log().contains("DHCPNAK"));
    assert!(daemon.log_text().contains("DHCPNAK"));
    assert!(wait_for(Duration::from_secs(5), || std::fs::read_dir(
        &state
    )
    .map(|d| d.count() == 0)
    .unwrap_or(false)));
}

/// The address applied (as the calling plugin does), renewals go unicast
/// to the server that gave the lease. That server's address moves away
/// (dnsmasq back on 192.168.1.2), so they fail; past T2 the daemon
/// rebinds by broadcast and the server, under its new address, extends
/// the lease.
#[test]
fn rebinding_after_failed_renewals() {
    let times = [
        "--dhcp-option=option:T1,4".to_string(),
        "--dhcp-option=option:T2,9".to_string(),
    ];
    let mut lab = Lab::start_with("dh-b", "192.168.1.20", &times);
    let ct = lab.container("dh-bc", "eth0");
    let daemon = Daemon::ours(
        lab.dir.path(),
        &lab.dir.path().join("state"),
        &["-timeout", "1s"],
    );
    let conf = conf("1.0.0", &daemon.socket);
    run(&ours(), "ADD", &ct, "ctr-b", "eth0", &conf).assert_ok();
    ct.ip(&["addr", "add", "192.168.1.5/24", "dev", "eth0"]);
    // As in the renewal test: the neighbour entry dnsmasq's ping left FAILED.
    assert!(wait_for(Duration::from_secs(10), || lab
        .host
        .ping(FIRST_IP)));
    lab.stop_server();
    lab.host
        .ip(&["addr", "del", "192.168.1.1/24", "dev", "dhcpbr0"]);
    lab.host
        .ip(&["addr", "add", "192.168.1.2/24", "dev", "dhcpbr0"]);
    lab.restart_server("192.168.1.20", FIRST_IP, &times);
    assert!(
        wait_for(Duration::from_secs(40), || daemon
            .log_text()
            .contains("extended (Rebind)")),
        "rebound: {}\n{}",
        daemon.log_text(),
        lab.log()
    );
    let log = daemon.log_text();
    assert!(log.contains("Renew failed"), "{log}");
    assert!(!log.contains("extended (Renew)"), "{log}");
    assert!(lab.leased(FIRST_IP));
    run(&ours(), "DEL", &ct, "ctr-b", "eth0", &conf).assert_ok();
}
