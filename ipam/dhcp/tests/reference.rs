//! Wire compatibility with the Go reference (Debian's /usr/lib/cni/dhcp):
//! our plugin against the Go daemon, and the Go plugin against our daemon,
//! both over the Go net/rpc + gob protocol, with a real dnsmasq.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use conformance::testnet::PluginCall;

fn reference_present() -> bool {
    Path::new(REFERENCE_DHCP).exists()
}

#[test]
fn our_plugin_with_the_reference_daemon() {
    assert!(
        reference_present(),
        "{REFERENCE_DHCP} (containernetworking-plugins) is needed"
    );
    let mut lab = Lab::start("dh-og", "192.168.1.20", None);
    let ct = lab.container("dh-ogc", "eth0");
    let daemon = Daemon::reference(lab.dir.path(), &[]);
    for version in ["0.3.1", "1.0.0", "1.1.0"] {
        let conf = conf(version, &daemon.socket);
        let out = run(&ours(), "ADD", &ct, "ctr-og", "eth0", &conf);
        let result = out.assert_ok().json();
        assert_eq!(address_of(&result), "192.168.1.5/24", "{version}: {result}");
        assert_eq!(result["ips"][0]["gateway"], SERVER_IP);
        assert_eq!(result["routes"][0]["dst"], "0.0.0.0/0");
        assert!(lab.leased(FIRST_IP));
        if version == "1.1.0" {
            // The Go daemon lacks Check, GC and Status ("can't find
            // method"): CHECK and GC pass, STATUS finds it reachable.
            let mut check = conf.clone();
            check["prevResult"] = result.clone();
            run(&ours(), "CHECK", &ct, "ctr-og", "eth0", &check).assert_ok();
            PluginCall::new("STATUS")
                .stdin_json(&conf)
                .run(&ours())
                .assert_ok();
            PluginCall::new("GC")
                .stdin_json(&conf)
                .run(&ours())
                .assert_ok();
            assert!(lab.leased(FIRST_IP), "nothing collected");
        }
        run(&ours(), "DEL", &ct, "ctr-og", "eth0", &conf).assert_ok();
        assert!(
            wait_for(Duration::from_secs(5), || !lab.leased(FIRST_IP)),
            "{version}: the Go daemon released on our DEL"
        );
    }
    // An error from the Go daemon comes back as its text.
    let conf = conf("1.0.0", &daemon.socket);
    let out = run(&ours(), "ADD", &ct, "ctr-og", "eth9", &conf);
    assert_eq!(out.error_code(), 999);
    assert!(
        out.json()["msg"]
            .as_str()
            .unwrap_or("")
            .starts_with("error calling DHCP.Allocate: "),
        "{}",
        out.stdout
    );
}

#[test]
fn reference_plugin_with_our_daemon() {
    assert!(
        reference_present(),
        "{REFERENCE_DHCP} (containernetworking-plugins) is needed"
    );
    let reference = Path::new(REFERENCE_DHCP);
    let mut lab = Lab::start("dh-go", "192.168.1.20", None);
    let ct = lab.container("dh-goc", "eth0");
    let daemon = Daemon::ours(lab.dir.path(), &lab.dir.path().join("state"), &[]);
    for version in ["0.3.1", "0.4.0", "1.0.0"] {
        let conf = conf(version, &daemon.socket);
        let out = run(reference, "ADD", &ct, "ctr-go", "eth0", &conf);
        let result = out.assert_ok().json();
        assert_eq!(address_of(&result), "192.168.1.5/24", "{version}: {result}");
        assert_eq!(result["ips"][0]["gateway"], SERVER_IP);
        assert_eq!(result["routes"][0]["gw"], SERVER_IP);
        assert!(lab.leased(FIRST_IP));
        // The Go plugin's CHECK calls Allocate: our daemon answers with the
        // lease it holds, no new one.
        if version != "0.3.1" {
            run(reference, "CHECK", &ct, "ctr-go", "eth0", &conf).assert_ok();
        }
        std::thread::scope(|scope| {
            let dels: Vec<_> = (0..3)
                .map(|_| scope.spawn(|| run(reference, "DEL", &ct, "ctr-go", "eth0", &conf)))
                .collect();
            for del in dels {
                del.join().expect("DEL thread").assert_ok();
            }
        });
        assert!(
            wait_for(Duration::from_secs(5), || !lab.leased(FIRST_IP)),
            "{version}: our daemon released on the Go plugin's DEL"
        );
    }
    assert_eq!(
        lab.count("DHCPDISCOVER"),
        3,
        "one lease per version, CHECK acquired none"
    );
    // Our daemon's error text reaches the Go plugin.
    let conf = conf("1.0.0", &daemon.socket);
    let out = run(reference, "ADD", &ct, "ctr-go", "eth9", &conf);
    assert_eq!(out.code, 1);
    assert!(
        out.stdout
            .contains("error calling DHCP.Allocate: error looking up \\\"eth9\\\""),
        "{}",
        out.stdout
    );
}
