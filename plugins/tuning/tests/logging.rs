//! tuning's log at `info`: one line saying what ADD changed, old values
//! included, and DEL's restores, each naming the plugin and the container.

use std::fs;

use conformance::testnet::{PluginCall, TestNetns};
use libcni::logging::LogLine;
use serde_json::json;

const PLUGIN: &str = env!("CARGO_BIN_EXE_tuning");

#[test]
fn what_changed_is_one_info_line() {
    let pod = TestNetns::new("tulog");
    pod.ip(&[
        "link", "add", "eth0", "type", "veth", "peer", "name", "peer0",
    ]);
    pod.ip(&["link", "set", "eth0", "mtu", "1500"]);
    let dir = tempfile::tempdir().unwrap();
    let log_file = dir.path().join("cni.log");
    let conf = json!({
        "cniVersion": "1.0.0",
        "name": "tulog",
        "type": "tuning",
        "mtu": 1400,
        "promisc": true,
        "sysctl": {"net.ipv4.conf.eth0.forwarding": "1"},
        "dataDir": dir.path().join("data").display().to_string(),
        "logLevel": "info",
        "logFile": log_file.display().to_string(),
        "prevResult": {
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "eth0", "sandbox": pod.path().display().to_string()}],
        },
    });
    let call = |command: &str| {
        PluginCall::new(command)
            .attachment("ctr-tu", &pod.path(), "eth0")
            .stdin_json(&conf)
            .run(PLUGIN.as_ref())
    };
    let read = || -> Vec<(String, String, String)> {
        fs::read_to_string(&log_file)
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let line = LogLine::parse(l).unwrap_or_else(|| panic!("not a log line: {l}"));
                assert_eq!(line.plugin, "tuning", "{l}");
                (line.level, line.call, line.message)
            })
            .collect()
    };
    let add = "ADD container=ctr-tu ifname=eth0".to_string();
    let del = "DEL container=ctr-tu ifname=eth0".to_string();
    let info = "INFO".to_string();

    call("ADD").assert_ok();
    assert_eq!(
        read(),
        vec![(
            info.clone(),
            add,
            "changed net/ipv4/conf/eth0/forwarding 1 (was 0), eth0 promisc on (was promisc \
             off), eth0 mtu 1400 (was mtu 1500)"
                .to_string()
        )]
    );

    fs::remove_file(&log_file).unwrap();
    call("DEL").assert_ok();
    let mut restored = read();
    restored.sort();
    assert_eq!(
        restored,
        vec![
            (
                info.clone(),
                del.clone(),
                "restored mtu 1500 on eth0".to_string()
            ),
            (info, del, "restored promisc off on eth0".to_string()),
        ]
    );
}
