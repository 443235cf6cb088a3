//! What the bridge writes to its log file, read back as an operator reads
//! it: every line names the plugin and the container, ADD at `info` gives
//! one line per step in human form, host-local's lines land in the same
//! file marked as the bridge's delegate, an unknown level is warned about,
//! and a failure is logged once.

mod bridge_common;

use std::fs;
use std::path::Path;

use bridge_common::*;
use libcni::logging::LogLine;
use serde_json::{json, Value};

fn read_log(path: &Path) -> Vec<LogLine> {
    let text = fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|l| {
            let line = LogLine::parse(l).unwrap_or_else(|| panic!("not a log line: {l}"));
            assert!(line.time.len() == 24 && line.time.ends_with('Z'), "{l}");
            line
        })
        .collect()
}

/// `bridge`, or `host-local (delegate of bridge)`.
fn who(line: &LogLine) -> String {
    match &line.delegated_by {
        Some(caller) => format!("{} (delegate of {caller})", line.plugin),
        None => line.plugin.clone(),
    }
}

/// Messages of `plugin`'s lines at `level`.
fn messages<'a>(lines: &'a [LogLine], level: &str, plugin: &str) -> Vec<&'a str> {
    lines
        .iter()
        .filter(|l| l.level == level && who(l) == plugin)
        .map(|l| l.message.as_str())
        .collect()
}

const DELEGATE: &str = "host-local (delegate of bridge)";

fn logged_conf(fx: &Fixture, log_file: &Path, level: &str, extra: Value) -> Value {
    let mut conf = conf(
        "1.0.0",
        json!({
            "isGateway": true,
            "isDefaultGateway": true,
            "ipMasq": true,
            "ipam": fx.ipam(&["10.1.2.0/24"]),
            "logLevel": level,
            "logFile": log_file.display().to_string(),
        }),
    );
    if let (Some(obj), Some(more)) = (conf.as_object_mut(), extra.as_object()) {
        for (k, v) in more {
            obj.insert(k.clone(), v.clone());
        }
    }
    conf
}

#[test]
fn info_gives_one_line_per_step_naming_plugin_and_container() {
    let fx = Fixture::new("log");
    let log_file = fx.data_path().join("cni.log");
    let conf = logged_conf(&fx, &log_file, "info", json!({}));

    let out = fx.add(&conf);
    out.assert_ok();
    let result = out.json();
    let veth = result["interfaces"][1]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let mac = result["interfaces"][2]["mac"].as_str().unwrap().to_string();

    let lines = read_log(&log_file);
    for line in &lines {
        assert_eq!(line.call, "ADD container=dummy-0 ifname=eth0", "{line:?}");
        assert_eq!(line.level, "INFO", "{line:?}");
        // Human forms only: no Rust Debug output, no quoted names.
        for debug_mark in ["V4(", "Ipv4Network", "Some(", "{ ", "\""] {
            assert!(!line.message.contains(debug_mark), "{line:?}");
        }
    }
    let bridge = messages(&lines, "INFO", "bridge");
    assert_eq!(bridge.len(), 6, "{bridge:#?}");
    assert_eq!(bridge[0], format!("created bridge {BRIDGE}"));
    assert_eq!(
        bridge[1],
        format!("veth {veth} attached to bridge {BRIDGE}, peer eth0 (MAC {mac}) in the container")
    );
    assert_eq!(
        bridge[2],
        "addresses 10.1.2.2/24 on eth0 (from IPAM host-local)"
    );
    assert_eq!(bridge[3], format!("gateway 10.1.2.1/24 on {BRIDGE}"));
    // Which backend depends on the machine (iptables-nft or nftables).
    let masq = bridge[4];
    assert!(
        masq == "masquerading traffic from 10.1.2.2/24 that leaves its subnet (iptables backend)"
            || masq
                == "masquerading traffic from 10.1.2.2/24 that leaves its subnet (nftables backend)",
        "{masq}"
    );
    assert_eq!(bridge[5], "routes through eth0: 0.0.0.0/0 via 10.1.2.1");
    assert_eq!(
        messages(&lines, "INFO", DELEGATE),
        vec!["reserved 10.1.2.2 in network testConfig for dummy-0/eth0"],
        "IPAM writes into the bridge's file, saying whose delegate it is"
    );
    assert_eq!(lines.len(), 7, "nothing else at info: {lines:#?}");

    // DEL: its three steps run side by side, so any order.
    fs::remove_file(&log_file).unwrap();
    fx.del(&with_prev_result(conf, &result)).assert_ok();
    let lines = read_log(&log_file);
    let mut logged: Vec<(String, String)> = lines
        .iter()
        .map(|l| {
            assert_eq!(l.call, "DEL container=dummy-0 ifname=eth0", "{l:?}");
            (who(l), l.message.clone())
        })
        .collect();
    logged.sort();
    let expected = [
        ("bridge", "deleted eth0 and its veth peer on the bridge"),
        (
            "bridge",
            "removed the masquerade rules of network testConfig, if any",
        ),
        (
            DELEGATE,
            "released 10.1.2.2 in network testConfig of dummy-0/eth0",
        ),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(p, m)| (p.to_string(), m.to_string()))
        .collect();
    assert_eq!(logged, expected);
}

#[test]
fn the_default_level_logs_nothing_on_success() {
    let fx = Fixture::new("logw");
    let log_file = fx.data_path().join("cni.log");
    for version in ALL_VERSIONS {
        let mut conf = logged_conf(&fx, &log_file, "info", json!({"cniVersion": version}));
        conf.as_object_mut().unwrap().remove("logLevel");
        fx.add(&conf).assert_ok();
        fx.del(&conf).assert_ok();
        assert_eq!(
            fs::read_to_string(&log_file).unwrap_or_default(),
            "",
            "{version}"
        );
    }
}

/// host-local refuses the range; the bridge reports it to the runtime.
fn failing_ipam(fx: &Fixture) -> Value {
    let mut ipam = fx.ipam(&["10.1.2.0/24"]);
    ipam["ranges"][0][0]["rangeStart"] = json!("10.9.9.1");
    ipam
}

const IPAM_ERROR: &str = "IPAM ADD with \"host-local\": invalid range set 0: RangeStart \
                          10.9.9.1 not in network 10.1.2.0/24";

#[test]
fn an_unknown_level_is_warned_about_and_a_failure_logged_once() {
    let fx = Fixture::new("logf");
    let log_file = fx.data_path().join("cni.log");
    let conf = logged_conf(&fx, &log_file, "loud", json!({"ipam": failing_ipam(&fx)}));

    let out = fx.add(&conf);
    assert_eq!(out.error_code(), 7, "{}", out.stdout);
    let lines = read_log(&log_file);
    assert_eq!(
        messages(&lines, "WARN", "bridge"),
        vec![
            "unknown log level \"loud\" in logLevel (known: off, error, warn, info, debug, \
             trace); ignored; logging at the default, warn"
        ],
        "warned once, by the bridge (host-local does not repeat it)"
    );
    assert_eq!(
        messages(&lines, "ERROR", "bridge"),
        vec![format!("ADD failed: {IPAM_ERROR}")]
    );
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(fx.host_veths().is_empty(), "rolled back");
}

#[test]
fn at_debug_the_delegate_notes_its_failure_without_repeating_the_error() {
    let fx = Fixture::new("logd");
    let log_file = fx.data_path().join("cni.log");
    let conf = logged_conf(&fx, &log_file, "debug", json!({"ipam": failing_ipam(&fx)}));

    // The environment's level wins over the configuration's; a bad one
    // falls back to the configuration's, with a warning saying so.
    let out = fx.run(fx.call("ADD", &conf).var("CNI_LOG_LEVEL", "verbose"));
    assert_eq!(out.error_code(), 7, "{}", out.stdout);
    let lines = read_log(&log_file);
    assert_eq!(
        messages(&lines, "WARN", "bridge"),
        vec![
            "unknown log level \"verbose\" in CNI_LOG_LEVEL (known: off, error, warn, info, \
             debug, trace); ignored; logging at debug from logLevel"
        ]
    );
    let errors: Vec<&LogLine> = lines.iter().filter(|l| l.level == "ERROR").collect();
    assert_eq!(errors.len(), 1, "{lines:#?}");
    assert_eq!(who(errors[0]), "bridge");
    assert_eq!(errors[0].message, format!("ADD failed: {IPAM_ERROR}"));
    let delegate_failure: Vec<&str> = messages(&lines, "DEBUG", DELEGATE)
        .into_iter()
        .filter(|m| m.starts_with("ADD failed"))
        .collect();
    assert_eq!(
        delegate_failure,
        vec![
            "ADD failed, reported by bridge: invalid range set 0: RangeStart 10.9.9.1 not in \
             network 10.1.2.0/24"
        ]
    );
    // The skeleton's first line, in human form.
    assert!(
        messages(&lines, "DEBUG", "bridge").contains(
            &format!(
                "network testConfig, netns {}, CNI version 1.0.0",
                fx.pod.path().display()
            )
            .as_str()
        ),
        "{lines:#?}"
    );
}
