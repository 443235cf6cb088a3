//! The firewalld backend against a fake firewalld: a private D-Bus daemon
//! started by the test (`dbus-daemon --session` on a socket in a temporary
//! directory) and an object that owns `org.fedoraproject.FirewallD1` and
//! serves the zone interface's addSource, removeSource and querySource
//! with zbus's object server, recording each zone's sources. The plugin
//! finds that bus through `DBUS_SYSTEM_BUS_ADDRESS`. The real firewalld
//! runs in `firewalld_real.rs`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use common::*;
use serde_json::json;

type Zones = Arc<Mutex<BTreeMap<String, BTreeSet<String>>>>;

/// firewalld's error replies: `org.fedoraproject.FirewallD1.Exception`
/// with a message starting with the error's code.
#[derive(Debug, zbus::DBusError)]
#[zbus(prefix = "org.fedoraproject.FirewallD1")]
enum FirewalldReply {
    #[zbus(error)]
    ZBus(zbus::Error),
    Exception(String),
}

struct FakeZoneInterface {
    zones: Zones,
}

#[zbus::interface(name = "org.fedoraproject.FirewallD1.zone")]
impl FakeZoneInterface {
    #[zbus(name = "addSource")]
    fn add_source(&self, zone: String, source: String) -> Result<String, FirewalldReply> {
        let mut zones = self.zones.lock().unwrap_or_else(|p| p.into_inner());
        if !zones
            .entry(zone.clone())
            .or_default()
            .insert(source.clone())
        {
            return Err(FirewalldReply::Exception(format!(
                "ZONE_ALREADY_SET: '{source}' already bound to '{zone}'"
            )));
        }
        Ok(zone)
    }

    #[zbus(name = "removeSource")]
    fn remove_source(&self, zone: String, source: String) -> Result<String, FirewalldReply> {
        let mut zones = self.zones.lock().unwrap_or_else(|p| p.into_inner());
        if !zones.entry(zone.clone()).or_default().remove(&source) {
            return Err(FirewalldReply::Exception(format!(
                "UNKNOWN_SOURCE: '{source}' is not in any zone"
            )));
        }
        Ok(zone)
    }

    #[zbus(name = "querySource")]
    fn query_source(&self, zone: String, source: String) -> bool {
        let zones = self.zones.lock().unwrap_or_else(|p| p.into_inner());
        zones.get(&zone).is_some_and(|s| s.contains(&source))
    }
}

/// A private bus, killed on drop.
struct PrivateBus {
    daemon: Child,
    address: String,
    _dir: tempfile::TempDir,
}

impl PrivateBus {
    fn start() -> PrivateBus {
        let dir = tempfile::tempdir().unwrap();
        let address = format!("unix:path={}", dir.path().join("bus").display());
        let mut daemon = Command::new("dbus-daemon")
            .args(["--session", "--nofork", "--print-address=1"])
            .arg(format!("--address={address}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run dbus-daemon (apt-get install dbus-daemon): {e}")
            });
        // The daemon prints its address once it listens.
        let mut line = String::new();
        let stdout = daemon.stdout.take().unwrap();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        assert!(line.starts_with("unix:"), "dbus-daemon printed {line:?}");
        PrivateBus {
            daemon,
            address,
            _dir: dir,
        }
    }
}

impl Drop for PrivateBus {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

/// The fake firewalld on `bus`; it answers while the connection lives.
fn fake_firewalld(bus: &PrivateBus) -> (zbus::blocking::Connection, Zones) {
    let zones = Zones::default();
    let connection = zbus::blocking::connection::Builder::address(bus.address.as_str())
        .unwrap()
        .name("org.fedoraproject.FirewallD1")
        .unwrap()
        .serve_at(
            "/org/fedoraproject/FirewallD1",
            FakeZoneInterface {
                zones: zones.clone(),
            },
        )
        .unwrap()
        .build()
        .unwrap();
    (connection, zones)
}

fn sources(zones: &Zones, zone: &str) -> BTreeSet<String> {
    zones.lock().unwrap().get(zone).cloned().unwrap_or_default()
}

fn both() -> BTreeSet<String> {
    [format!("{V4}/32"), format!("{V6}/128")].into()
}

#[test]
fn add_check_del_over_each_version() {
    let bus = PrivateBus::start();
    let (_server, zones) = fake_firewalld(&bus);
    for version in VERSIONS {
        let mut fx = Fixture::new("fwfwd-acd");
        fx.system_bus = bus.address.clone();
        let conf = with_prev(
            conf(version, json!({"backend": "firewalld"})),
            prev_result(version, V4, V6),
        );
        let out = fx.run("ADD", &conf);
        out.assert_ok();
        assert_eq!(ips_of(&out.json()), ips_of(&conf["prevResult"]));
        assert_eq!(sources(&zones, "trusted"), both(), "{version}");
        // ZONE_ALREADY_SET is success.
        fx.run("ADD", &conf).assert_ok();
        fx.run("CHECK", &conf).assert_ok();
        fx.run("DEL", &conf).assert_ok();
        assert!(sources(&zones, "trusted").is_empty(), "{version}");
        // Removing what is gone is ignored.
        fx.run("DEL", &conf).assert_ok();
        let out = fx.run("CHECK", &conf);
        assert_eq!(out.error_code(), 999);
        assert_eq!(
            out.json()["msg"],
            "the address 10.0.0.2/32 is not a source of trusted zone"
        );
        // Nothing went to iptables or nftables.
        assert!(fx.rules("iptables-save").is_empty());
        assert!(fx.nft_table().is_empty());
    }
}

/// Without `backend`, a running firewalld is chosen; `firewalldZone`
/// names the zone; STATUS passes.
#[test]
fn automatic_choice_picks_a_running_firewalld() {
    let bus = PrivateBus::start();
    let (_server, zones) = fake_firewalld(&bus);
    let mut fx = Fixture::new("fwfwd-auto");
    fx.system_bus = bus.address.clone();
    let conf = with_prev(
        conf("1.1.0", json!({"firewalldZone": "public"})),
        prev_result("1.1.0", V4, V6),
    );
    fx.run("ADD", &conf).assert_ok();
    assert_eq!(sources(&zones, "public"), both());
    assert!(sources(&zones, "trusted").is_empty());
    assert!(fx.rules("iptables-save").is_empty());
    fx.run("STATUS", &conf).assert_ok();
    fx.run("GC", &conf).assert_ok();
    assert_eq!(sources(&zones, "public"), both(), "GC leaves zone sources");
}

/// A bus without firewalld: the explicit backend's STATUS says so (11),
/// and the automatic choice falls back to iptables.
#[test]
fn bus_without_firewalld() {
    let bus = PrivateBus::start();
    let mut fx = Fixture::new("fwfwd-none");
    fx.system_bus = bus.address.clone();
    let out = fx.run("STATUS", &conf("1.1.0", json!({"backend": "firewalld"})));
    assert_eq!(out.error_code(), 11);
    assert!(
        out.json()["msg"]
            .as_str()
            .unwrap()
            .contains("firewalld is not running"),
        "{}",
        out.stdout
    );
    let out = fx.run(
        "ADD",
        &with_prev(
            conf("1.1.0", json!({"backend": "firewalld"})),
            prev_result("1.1.0", V4, V6),
        ),
    );
    assert_eq!(out.error_code(), 999, "{}", out.stdout);
    assert!(
        out.json()["msg"]
            .as_str()
            .unwrap()
            .starts_with("failed to add the address 10.0.0.2/32 to trusted zone: "),
        "{}",
        out.stdout
    );
    fx.run(
        "ADD",
        &with_prev(conf("1.1.0", json!({})), prev_result("1.1.0", V4, V6)),
    )
    .assert_ok();
    assert!(fx
        .rules("iptables-save")
        .iter()
        .any(|r| r.contains(&format!("{V4}/32"))));
}
