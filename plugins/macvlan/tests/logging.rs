//! macvlan's log at `info`, as the sub-link plugins (macvlan, ipvlan,
//! vlan) write it: the link made on its master, the addresses and routes
//! configured, host-local's lines as its delegate, DEL's deletion; each
//! line naming the plugin and the container.

use std::fs;

use conformance::testnet::{workspace_plugin, MasterNet};
use libcni::logging::LogLine;
use serde_json::json;

const PLUGIN: &str = env!("CARGO_BIN_EXE_macvlan");

#[test]
fn info_lines_say_what_add_and_del_did() {
    workspace_plugin("host-local");
    let net = MasterNet::new("mvlog", false);
    let dir = tempfile::tempdir().unwrap();
    let log_file = dir.path().join("cni.log");
    let conf = json!({
        "cniVersion": "1.0.0",
        "name": "mvlog",
        "type": "macvlan",
        "master": "master0",
        "mode": "private",
        "logLevel": "info",
        "logFile": log_file.display().to_string(),
        "ipam": {
            "type": "host-local",
            "dataDir": dir.path().join("ipam").display().to_string(),
            "ranges": [[{"subnet": "10.56.0.0/24", "gateway": "10.56.0.1"}]],
            "routes": [{"dst": "0.0.0.0/0"}],
        },
    });
    let call = |command: &str| {
        net.call(command, "ctr-log", "net1", &conf)
            .run(PLUGIN.as_ref())
    };

    let out = call("ADD");
    out.assert_ok();
    let mac = out.json()["interfaces"][0]["mac"]
        .as_str()
        .unwrap()
        .to_string();
    let read = || -> Vec<(String, String)> {
        let text = fs::read_to_string(&log_file).unwrap_or_default();
        text.lines()
            .map(|l| {
                let line = LogLine::parse(l).unwrap_or_else(|| panic!("not a log line: {l}"));
                assert_eq!(line.level, "INFO", "{l}");
                assert!(line.call.ends_with(" container=ctr-log ifname=net1"), "{l}");
                let who = match &line.delegated_by {
                    Some(caller) => format!("{} of {caller}", line.plugin),
                    None => line.plugin.clone(),
                };
                (who, line.message)
            })
            .collect()
    };
    let owned = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(w, m)| (w.to_string(), m.to_string()))
            .collect()
    };
    assert_eq!(
        read(),
        owned(&[
            (
                "macvlan",
                &format!(
                    "created macvlan net1 (mode private, MAC {mac}) on master master0 in the \
                     container"
                ),
            ),
            (
                "host-local of macvlan",
                "reserved 10.56.0.2 in network mvlog for ctr-log/net1",
            ),
            ("macvlan", "addresses 10.56.0.2/24 on net1",),
            ("macvlan", "routes through net1: 0.0.0.0/0 via 10.56.0.1",),
        ])
    );

    fs::remove_file(&log_file).unwrap();
    call("DEL").assert_ok();
    assert_eq!(
        read(),
        owned(&[
            ("macvlan", "deleted net1"),
            (
                "host-local of macvlan",
                "released 10.56.0.2 in network mvlog of ctr-log/net1",
            ),
        ])
    );
}
