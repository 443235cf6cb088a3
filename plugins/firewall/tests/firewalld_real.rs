//! The firewalld backend against the real firewalld (Debian's 1.3), not a
//! fake: each test starts its own system-style dbus-daemon on a socket in
//! a temporary folder and one firewalld on it, in the fake host namespace
//! the plugin runs in, with the nftables backend, and checks what the
//! plugin did through firewalld's own D-Bus API (`getZoneOfSource`) and in
//! the nft rules firewalld wrote in that namespace; the reference plugin
//! runs the same calls beside ours.
//!
//! firewalld runs in the foreground (`--nofork --nopid`) under
//! `ip netns exec` (its network namespace, so its rules land there) and
//! `unshare --mount` with tmpfs over `/run`, `/var/log` and `/etc/firewalld`
//! (so nothing it writes reaches the machine, and the machine's system bus
//! socket is out of its sight); its configuration is a copy in the test's
//! folder (`--system-config`). It is stopped by its PID when the test ends,
//! also when it fails.
//!
//! Where firewalld comes from: `.ci/install-deps` unpacks Debian's
//! `firewalld` package into [`CACHED_ROOT`] without installing it (an
//! installed firewalld would be enabled as the machine's firewall service),
//! and installs its Python libraries (python3-firewall, python3-nftables)
//! as ordinary packages. A firewalld installed on the machine is used when
//! there is no such folder; `CNI_TEST_FIREWALLD_ROOT` names another
//! unpacked root. Skipped, with a SKIPPED line, only when none is found
//! and skips are allowed (`.ci/run` refuses them: libcni::test_skip); once
//! one is found, every failure fails.

mod common;

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

/// Where `.ci/install-deps` unpacks Debian's firewalld package.
const CACHED_ROOT: &str = "/var/cache/cni-rs-test/firewalld";
const BUS_NAME: &str = "org.fedoraproject.FirewallD1";
const OBJECT_PATH: &str = "/org/fedoraproject/FirewallD1";
const MAIN_INTERFACE: &str = "org.fedoraproject.FirewallD1";
const ZONE_INTERFACE: &str = "org.fedoraproject.FirewallD1.zone";
/// From start to `state` RUNNING: 0.55 to 1.6 s here; the bound is for a
/// loaded CI machine.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// The versions both speak: Debian's reference (1.1.1) has no 1.1.0.
const REFERENCE_VERSIONS: [&str; 2] = ["0.4.0", "1.0.0"];
/// SIGTERM to exit (firewalld removes its rules on the way out).
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// An unpacked (or installed) firewalld: the daemon, its shipped zones
/// and services, and its firewalld.conf.
struct Install {
    daemon: PathBuf,
    default_config: PathBuf,
    conf: PathBuf,
}

impl Install {
    fn at(root: &Path) -> Option<Install> {
        let install = Install {
            daemon: root.join("usr/sbin/firewalld"),
            default_config: root.join("usr/lib/firewalld"),
            conf: root.join("etc/firewalld/firewalld.conf"),
        };
        (install.daemon.is_file()
            && install.default_config.join("zones/trusted.xml").is_file()
            && install.conf.is_file())
        .then_some(install)
    }

    fn find() -> Option<Install> {
        if let Some(root) = std::env::var_os("CNI_TEST_FIREWALLD_ROOT") {
            let root = PathBuf::from(root);
            return Some(Install::at(&root).unwrap_or_else(|| {
                panic!(
                    "CNI_TEST_FIREWALLD_ROOT={} holds no unpacked firewalld",
                    root.display()
                )
            }));
        }
        Install::at(Path::new(CACHED_ROOT)).or_else(|| Install::at(Path::new("/")))
    }
}

/// The install, or None after printing why the test is skipped; in CI a
/// missing firewalld fails.
fn install_or_skip(test: &str) -> Option<Install> {
    let found = Install::find();
    if found.is_none() {
        let why = format!(
            "no firewalld in {CACHED_ROOT} nor installed (.ci/install-deps unpacks it there)"
        );
        libcni::test_skip::skip(test, &why);
    }
    found
}

/// A system-style bus of the test's own, killed on drop.
struct Bus {
    daemon: Child,
    address: String,
}

impl Bus {
    fn start(dir: &Path) -> Bus {
        let socket = dir.join("system_bus_socket");
        let config = dir.join("bus.conf");
        // A system bus (firewalld asks for the system bus) that lets root,
        // the only user here, own and call anything: the machine's policy
        // files are not read.
        fs::write(
            &config,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="root"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"#,
                socket.display()
            ),
        )
        .unwrap();
        let mut daemon = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--print-address=1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run dbus-daemon (package dbus-daemon): {e}"));
        // It prints its address once it listens.
        let mut line = String::new();
        if let Some(stdout) = daemon.stdout.take() {
            let _ = BufReader::new(stdout).read_line(&mut line);
        }
        if !line.starts_with("unix:") {
            let _ = daemon.kill();
            let _ = daemon.wait();
            panic!("dbus-daemon printed {line:?}");
        }
        Bus {
            daemon,
            address: format!("unix:path={}", socket.display()),
        }
    }

    fn connect(&self) -> zbus::blocking::Connection {
        zbus::blocking::connection::Builder::address(self.address.as_str())
            .and_then(|b| b.method_timeout(Duration::from_secs(30)).build())
            .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", self.address))
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

/// One firewalld in a fixture's host namespace, on a bus of its own.
/// Dropped in field order: firewalld, then the bus, then the folder.
struct RealFirewalld {
    daemon: Child,
    _bus: Bus,
    client: zbus::blocking::Connection,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

/// Run by `sh` between `unshare --mount` and the daemon: the mounts that
/// keep what firewalld writes (its state under /run, a log under
/// /var/log, anything under /etc/firewalld) in its own mount namespace.
/// `--propagation private` keeps them from propagating back.
const PRIVATE_MOUNTS: &str = "set -e
mount -t tmpfs cnitest-firewalld /run
mount -t tmpfs cnitest-firewalld /var/log
if [ -d /etc/firewalld ]; then mount -t tmpfs cnitest-firewalld /etc/firewalld; fi
exec \"$@\"";

impl RealFirewalld {
    fn start(install: &Install, fx: &mut Fixture) -> RealFirewalld {
        let dir = tempfile::tempdir().unwrap();
        let bus = Bus::start(dir.path());
        let etc = dir.path().join("etc");
        for sub in [
            "zones",
            "services",
            "icmptypes",
            "ipsets",
            "helpers",
            "policies",
        ] {
            fs::create_dir_all(etc.join(sub)).unwrap();
        }
        // The shipped settings, with the nftables backend whatever they say.
        let conf = fs::read_to_string(&install.conf).unwrap();
        let mut conf: Vec<&str> = conf
            .lines()
            .filter(|l| !l.trim_start().starts_with("FirewallBackend="))
            .collect();
        conf.push("FirewallBackend=nftables");
        fs::write(etc.join("firewalld.conf"), conf.join("\n") + "\n").unwrap();

        let log = dir.path().join("firewalld.log");
        let out = fs::File::create(&log).unwrap();
        let err = out.try_clone().unwrap();
        let started = Instant::now();
        // `ip netns exec`, `unshare` (no --fork) and `sh -c 'exec'` each
        // exec the next, so the child's PID is the daemon's.
        let daemon = Command::new("ip")
            .args(["netns", "exec", fx.host.name()])
            .args(["unshare", "--mount", "--propagation", "private", "--"])
            .args(["sh", "-c", PRIVATE_MOUNTS, "sh"])
            .arg(&install.daemon)
            .args(["--nofork", "--nopid", "--log-target", "console"])
            .arg("--system-config")
            .arg(&etc)
            .arg("--default-config")
            .arg(&install.default_config)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("DBUS_SYSTEM_BUS_ADDRESS", &bus.address)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", install.daemon.display()));
        let client = bus.connect();
        fx.system_bus = bus.address.clone();
        let mut fwd = RealFirewalld {
            daemon,
            _bus: bus,
            client,
            log,
            _dir: dir,
        };
        fwd.wait_running(started);
        fwd
    }

    /// Until firewalld's `state` property is RUNNING; panics with its log
    /// when it exits or does not get there.
    fn wait_running(&mut self, started: Instant) {
        loop {
            if let Ok(Some(status)) = self.daemon.try_wait() {
                panic!("firewalld exited ({status}) at start:\n{}", self.log_text());
            }
            if self.state().as_deref() == Some("RUNNING") {
                eprintln!("firewalld RUNNING after {:?}", started.elapsed());
                return;
            }
            assert!(
                started.elapsed() < START_TIMEOUT,
                "firewalld not RUNNING after {START_TIMEOUT:?}:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn state(&self) -> Option<String> {
        let proxy = zbus::blocking::fdo::PropertiesProxy::builder(&self.client)
            .destination(BUS_NAME)
            .ok()?
            .path(OBJECT_PATH)
            .ok()?
            .build()
            .ok()?;
        let value = proxy.get(MAIN_INTERFACE.try_into().ok()?, "state").ok()?;
        String::try_from(value).ok()
    }

    fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn call<B>(&self, method: &str, args: &B) -> zbus::Result<zbus::message::Message>
    where
        B: serde::Serialize + zbus::zvariant::DynamicType,
    {
        self.client.call_method(
            Some(BUS_NAME),
            OBJECT_PATH,
            Some(ZONE_INTERFACE),
            method,
            args,
        )
    }

    /// firewalld's answer to `getZoneOfSource`: "" when in no zone.
    fn zone_of_source(&self, source: &str) -> String {
        self.call("getZoneOfSource", &(source,))
            .and_then(|r| r.body().deserialize::<String>())
            .unwrap_or_else(|e| panic!("getZoneOfSource({source}): {e}"))
    }

    fn zone_of_both(&self) -> [String; 2] {
        [
            self.zone_of_source(&format!("{V4}/32")),
            self.zone_of_source(&format!("{V6}/128")),
        ]
    }

    /// The rules firewalld keeps in its table, in the namespace it runs in.
    fn nft_rules(&self, fx: &Fixture) -> String {
        let out = fx.host.exec("nft", &["list", "table", "inet", "firewalld"]);
        assert!(
            out.status.success(),
            "nft list table inet firewalld: {out:?}"
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The jumps firewalld generates for a source of `zone`, both families.
    fn assert_source_rules(&self, fx: &Fixture, zone: &str) {
        let rules = self.nft_rules(fx);
        for rule in [
            format!("ip saddr {V4} goto filter_IN_{zone}"),
            format!("ip saddr {V4} goto filter_FWD_{zone}"),
            format!("ip6 saddr {V6} goto filter_IN_{zone}"),
            format!("ip6 saddr {V6} goto filter_FWD_{zone}"),
        ] {
            assert!(rules.contains(&rule), "no `{rule}` in\n{rules}");
        }
    }

    fn assert_no_source_rules(&self, fx: &Fixture) {
        let rules = self.nft_rules(fx);
        for address in [V4, V6] {
            assert!(
                !rules.contains(&format!(" {address} ")),
                "{address} still in\n{rules}"
            );
        }
    }
}

impl Drop for RealFirewalld {
    /// SIGTERM by PID, then SIGKILL if it has not exited in time.
    fn drop(&mut self) {
        let stopping = Instant::now();
        if let Ok(pid) = i32::try_from(self.daemon.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        while stopping.elapsed() < STOP_TIMEOUT {
            if let Ok(Some(_)) = self.daemon.try_wait() {
                eprintln!("firewalld stopped after {:?}", stopping.elapsed());
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("firewalld still running after {STOP_TIMEOUT:?}: SIGKILL");
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

/// The inode of a namespace file, to compare namespaces.
fn ns_inode(path: &Path) -> u64 {
    fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .ino()
}

/// Whether the machine's own namespace has firewalld's table.
fn machine_has_firewalld_table() -> bool {
    Command::new("nft")
        .args(["list", "table", "inet", "firewalld"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// ADD puts both addresses into the zone, CHECK passes, DEL takes them
/// out, for each spec version; firewalld's own API and its rules say so.
#[test]
fn add_check_del_in_real_firewalld() {
    let Some(install) = install_or_skip("add_check_del_in_real_firewalld") else {
        return;
    };
    let machine_table_before = machine_has_firewalld_table();
    let mut fx = Fixture::new("fwreal-acd");
    let fwd = RealFirewalld::start(&install, &mut fx);

    // The daemon runs in the fixture's host namespace, in a mount
    // namespace of its own.
    let pid = fwd.daemon.id();
    assert_eq!(
        ns_inode(Path::new(&format!("/proc/{pid}/ns/net"))),
        ns_inode(&fx.host.path()),
        "firewalld is not in the test's namespace"
    );
    assert_ne!(
        ns_inode(Path::new(&format!("/proc/{pid}/ns/mnt"))),
        ns_inode(Path::new("/proc/self/ns/mnt")),
        "firewalld shares the machine's mount namespace"
    );
    assert_eq!(fwd.zone_of_both(), [String::new(), String::new()]);

    for version in VERSIONS {
        let conf = with_prev(
            conf(version, json!({"backend": "firewalld"})),
            prev_result(version, V4, V6),
        );
        let out = fx.run("ADD", &conf);
        out.assert_ok();
        assert_eq!(ips_of(&out.json()), ips_of(&conf["prevResult"]));
        assert_eq!(fwd.zone_of_both(), ["trusted", "trusted"], "{version}");
        fwd.assert_source_rules(&fx, "trusted");
        // firewalld answers ZONE_ALREADY_SET: success.
        fx.run("ADD", &conf).assert_ok();
        fx.run("CHECK", &conf).assert_ok();
        fx.run("DEL", &conf).assert_ok();
        assert_eq!(fwd.zone_of_both(), ["", ""], "{version}");
        fwd.assert_no_source_rules(&fx);
        // firewalld answers UNKNOWN_SOURCE: ignored.
        fx.run("DEL", &conf).assert_ok();
        let out = fx.run("CHECK", &conf);
        assert_eq!(out.error_code(), 999, "{}", out.stdout);
        assert_eq!(
            out.json()["msg"],
            "the address 10.0.0.2/32 is not a source of trusted zone"
        );
        // Nothing went to iptables or to our own nftables table.
        assert!(fx.rules("iptables-save").is_empty());
        assert!(fx.nft_table().is_empty());
    }

    // Without `backend` the running firewalld is chosen; another zone.
    let public = with_prev(
        conf("1.1.0", json!({"firewalldZone": "public"})),
        prev_result("1.1.0", V4, V6),
    );
    fx.run("STATUS", &public).assert_ok();
    fx.run("ADD", &public).assert_ok();
    assert_eq!(fwd.zone_of_both(), ["public", "public"]);
    fwd.assert_source_rules(&fx, "public");
    // A zone firewalld does not have: its INVALID_ZONE, code 999.
    let bad = with_prev(
        conf(
            "1.1.0",
            json!({"backend": "firewalld", "firewalldZone": "cnitest-none"}),
        ),
        prev_result("1.1.0", "10.0.0.3", "2001:db8:1:2::3"),
    );
    let out = fx.run("ADD", &bad);
    assert_eq!(out.error_code(), 999, "{}", out.stdout);
    assert!(
        out.json()["msg"]
            .as_str()
            .is_some_and(|m| m.contains("INVALID_ZONE")),
        "{}",
        out.stdout
    );
    assert_eq!(fwd.zone_of_source("10.0.0.3/32"), "");
    // GC leaves the zone alone.
    fx.run("GC", &public).assert_ok();
    assert_eq!(fwd.zone_of_both(), ["public", "public"]);
    fx.run("DEL", &public).assert_ok();
    assert_eq!(fwd.zone_of_both(), ["", ""]);
    fwd.assert_no_source_rules(&fx);

    drop(fwd);
    assert_eq!(
        machine_has_firewalld_table(),
        machine_table_before,
        "the machine's own nftables changed"
    );
}

/// The reference plugin on the same firewalld, call for call: the same
/// zone sources and rules, and each reads what the other wrote.
#[test]
fn reference_side_by_side_on_real_firewalld() {
    let Some(install) = install_or_skip("reference_side_by_side_on_real_firewalld") else {
        return;
    };
    assert!(
        Path::new(REFERENCE).is_file(),
        "{REFERENCE} is missing: this test compares with the Debian reference plugins (apt-get install containernetworking-plugins)"
    );
    let mut fx = Fixture::new("fwreal-ref");
    let fwd = RealFirewalld::start(&install, &mut fx);
    for version in REFERENCE_VERSIONS {
        let conf = with_prev(
            conf(version, json!({"backend": "firewalld"})),
            prev_result(version, V4, V6),
        );
        let out = fx.run_reference("ADD", &conf);
        out.assert_ok();
        let reference_zones = fwd.zone_of_both();
        let reference_rules = fwd.nft_rules(&fx);
        assert_eq!(reference_zones, ["trusted", "trusted"], "{version}");
        fx.run("CHECK", &conf).assert_ok();
        fx.run("DEL", &conf).assert_ok();
        assert_eq!(fwd.zone_of_both(), ["", ""], "{version}");

        fx.run("ADD", &conf).assert_ok();
        assert_eq!(fwd.zone_of_both(), reference_zones, "{version}");
        assert_eq!(fwd.nft_rules(&fx), reference_rules, "{version}");
        fx.run_reference("CHECK", &conf).assert_ok();
        fx.run_reference("DEL", &conf).assert_ok();
        assert_eq!(fwd.zone_of_both(), ["", ""], "{version}");
        fwd.assert_no_source_rules(&fx);
        // After DEL, ours fails CHECK; the reference passes firewalld's
        // `false` (the difference firewalld.rs's module docs name).
        assert_eq!(fx.run("CHECK", &conf).error_code(), 999);
        fx.run_reference("CHECK", &conf).assert_ok();
    }
}
