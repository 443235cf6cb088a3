//! portmap's log at `info`: one line with the DNAT rules it made, in the
//! form an operator writes them, naming the plugin and the container.

use std::fs;

use conformance::testnet::{PluginCall, TestNetns};
use libcni::logging::LogLine;
use serde_json::json;

const PLUGIN: &str = env!("CARGO_BIN_EXE_portmap");

#[test]
fn the_dnat_rules_are_one_info_line() {
    // The fake host whose firewall the rules go to.
    let host = TestNetns::new("pmlog-h");
    let pod = TestNetns::new("pmlog-p");
    let dir = tempfile::tempdir().unwrap();
    let log_file = dir.path().join("cni.log");
    let conf = json!({
        "cniVersion": "1.0.0",
        "name": "pmlog",
        "type": "portmap",
        "logLevel": "info",
        "logFile": log_file.display().to_string(),
        "runtimeConfig": {"portMappings": [
            {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
            {"hostPort": 5353, "containerPort": 53, "protocol": "udp", "hostIP": "127.0.0.1"},
        ]},
        "prevResult": {
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "eth0", "sandbox": pod.path().display().to_string()}],
            "ips": [{"address": "10.57.0.5/24", "interface": 0}],
        },
    });
    let call = |command: &str| {
        PluginCall::new(command)
            .attachment("ctr-pm", &pod.path(), "eth0")
            .stdin_json(&conf)
            .in_netns(&host)
            .run(PLUGIN.as_ref())
    };
    let read = || -> Vec<LogLine> {
        fs::read_to_string(&log_file)
            .unwrap_or_default()
            .lines()
            .map(|l| LogLine::parse(l).unwrap_or_else(|| panic!("not a log line: {l}")))
            .collect()
    };

    call("ADD").assert_ok();
    let lines = read();
    assert_eq!(lines.len(), 1, "{lines:#?}");
    let line = &lines[0];
    assert_eq!(
        (
            line.level.as_str(),
            line.plugin.as_str(),
            line.call.as_str()
        ),
        ("INFO", "portmap", "ADD container=ctr-pm ifname=eth0")
    );
    // The backend is whichever works on this machine.
    let rules = "DNAT *:8080/tcp -> 10.57.0.5:80, 127.0.0.1:5353/udp -> 10.57.0.5:53";
    assert!(
        line.message == format!("{rules} (iptables backend)")
            || line.message == format!("{rules} (nftables backend)"),
        "{}",
        line.message
    );

    fs::remove_file(&log_file).unwrap();
    call("DEL").assert_ok();
    let lines = read();
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert_eq!(
        lines[0].message,
        "removed the port mappings of this container, if any"
    );
    assert_eq!(lines[0].call, "DEL container=ctr-pm ifname=eth0");
}
