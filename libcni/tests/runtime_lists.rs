//! List operations of the runtime against a recording fake of plugin
//! execution: what each plugin is given, in which order, and what is cached.

mod runtime_support;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;

use base64::Engine;
use libcni::conf::{conflist_from_bytes, plugin_conf_from_bytes, NetworkConfigList};
use libcni::invoke::PluginEnv;
use libcni::runtime::{CniConfig, GcArgs, GcAttachment, RuntimeConf, RuntimeError};
use libcni::ErrorCode;
use runtime_support::{plugin_error, Call, FakeExec};
use serde_json::{json, Map, Value};
use tempfile::TempDir;

const PLUGINS: [&str; 3] = ["first", "second", "third"];

struct Fixture {
    exec: Arc<FakeExec>,
    cni: CniConfig,
    cache_dir: TempDir,
}

fn fixture() -> Fixture {
    let exec = FakeExec::new(&PLUGINS);
    let cache_dir = tempfile::tempdir().unwrap();
    let cni = CniConfig::with_exec(
        vec![PathBuf::from("/opt/a"), PathBuf::from("/opt/b")],
        exec.clone(),
    )
    .with_cache_dir(cache_dir.path())
    .with_base_env(
        PluginEnv::new()
            .with("INHERITED", "yes")
            .with("CNI_COMMAND", "stale"),
    );
    Fixture {
        exec,
        cni,
        cache_dir,
    }
}

fn list(version: &str) -> NetworkConfigList {
    conflist_from_bytes(
        json!({
            "cniVersion": version,
            "name": "testnet",
            "plugins": [
                {
                    "type": "first",
                    "capabilities": {"portMappings": true, "bandwidth": false},
                    "runtimeConfig": {"static": 1},
                    "some-key": "some-value",
                    "nested": {"a": [1, 2], "b": null}
                },
                {"type": "second", "capabilities": {"ips": true}},
                {"type": "third"}
            ]
        })
        .to_string()
        .as_bytes(),
    )
    .unwrap()
}

fn port_mappings() -> Value {
    json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}])
}

fn rt() -> RuntimeConf {
    let mut caps = Map::new();
    caps.insert("portMappings".into(), port_mappings());
    caps.insert("bandwidth".into(), json!({"ingressRate": 1000}));
    caps.insert("ips".into(), json!(["10.0.0.5/24"]));
    caps.insert("unused".into(), json!(1));
    RuntimeConf {
        container_id: "some-container-id".into(),
        netns: "/some/netns/path".into(),
        ifname: "eth0".into(),
        args: vec![("FOO".into(), "BAR".into())],
        capability_args: caps,
    }
}

fn rt_without_caps() -> RuntimeConf {
    RuntimeConf {
        capability_args: Map::new(),
        ..rt()
    }
}

impl Fixture {
    fn cache_file(&self) -> PathBuf {
        self.cache_dir
            .path()
            .join("results/testnet-some-container-id-eth0")
    }

    fn calls_for(&self, command: &str) -> Vec<Call> {
        self.exec
            .calls()
            .into_iter()
            .filter(|c| c.command() == command)
            .collect()
    }
}

fn interface_names(result: &Value) -> Vec<String> {
    result["interfaces"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|i| i["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn add_derives_each_plugin_config_and_chains_results() {
    let f = fixture();
    let result = f.cni.add_network_list(&list("1.0.0"), &rt()).unwrap();
    assert_eq!(
        interface_names(&result.to_value()),
        vec!["first", "second", "third"]
    );

    let calls = f.exec.calls();
    assert_eq!(
        f.exec.log(),
        vec![
            ("first".to_string(), "ADD".to_string()),
            ("second".to_string(), "ADD".to_string()),
            ("third".to_string(), "ADD".to_string()),
        ]
    );

    // Only enabled capabilities with an argument, replacing the static
    // runtimeConfig; unknown keys pass through; capabilities stay.
    let first = &calls[0].stdin;
    assert_eq!(first["name"], "testnet");
    assert_eq!(first["cniVersion"], "1.0.0");
    assert_eq!(
        first["runtimeConfig"],
        json!({"portMappings": port_mappings()})
    );
    assert_eq!(first["some-key"], "some-value");
    assert_eq!(first["nested"], json!({"a": [1, 2], "b": null}));
    assert_eq!(
        first["capabilities"],
        json!({"portMappings": true, "bandwidth": false})
    );
    assert!(first.get("prevResult").is_none());

    let second = &calls[1].stdin;
    assert_eq!(second["runtimeConfig"], json!({"ips": ["10.0.0.5/24"]}));
    assert_eq!(interface_names(&second["prevResult"]), vec!["first"]);

    let third = &calls[2].stdin;
    assert!(third.get("runtimeConfig").is_none());
    assert_eq!(
        interface_names(&third["prevResult"]),
        vec!["first", "second"]
    );

    for call in &calls {
        assert_eq!(call.path, PathBuf::from("/opt/a").join(&call.plugin));
        assert_eq!(call.var("CNI_COMMAND"), "ADD");
        assert_eq!(call.var("CNI_CONTAINERID"), "some-container-id");
        assert_eq!(call.var("CNI_NETNS"), "/some/netns/path");
        assert_eq!(call.var("CNI_IFNAME"), "eth0");
        assert_eq!(call.var("CNI_ARGS"), "FOO=BAR");
        assert_eq!(call.var("CNI_PATH"), "/opt/a:/opt/b");
        assert_eq!(call.var("INHERITED"), "yes");
    }
}

#[test]
fn static_runtime_config_stays_when_nothing_is_injected() {
    let f = fixture();
    f.cni
        .add_network_list(&list("1.0.0"), &rt_without_caps())
        .unwrap();
    let first = &f.exec.calls()[0].stdin;
    assert_eq!(first["runtimeConfig"], json!({"static": 1}));
}

#[test]
fn add_caches_the_final_result_in_go_format() {
    let f = fixture();
    let list = list("1.0.0");
    let result = f.cni.add_network_list(&list, &rt()).unwrap();

    let text = std::fs::read_to_string(f.cache_file()).unwrap();
    let expected = format!(
        "{{\"kind\":\"cniCacheV1\",\"containerId\":\"some-container-id\",\"config\":\"{}\",\"ifName\":\"eth0\",\"networkName\":\"testnet\",\"netns\":\"/some/netns/path\",\"cniArgs\":[[\"FOO\",\"BAR\"]],\"capabilityArgs\":{},\"result\":{}}}",
        base64::engine::general_purpose::STANDARD.encode(&list.bytes),
        serde_json::to_string(&rt().capability_args).unwrap(),
        serde_json::to_string(&result.to_value()).unwrap(),
    );
    assert_eq!(text, expected);

    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&f.cache_file()), 0o600);
    assert_eq!(mode(&f.cache_dir.path().join("results")), 0o700);
    // Nothing but the record is left in the directory.
    let names: Vec<_> = std::fs::read_dir(f.cache_dir.path().join("results"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1);

    let cached = f
        .cni
        .get_network_list_cached_result(&list, &rt())
        .unwrap()
        .unwrap();
    assert_eq!(cached, result);
    let (config, cached_rt) = f
        .cni
        .get_network_list_cached_config(&list, &rt_without_caps())
        .unwrap()
        .unwrap();
    assert_eq!(config, list.bytes);
    assert_eq!(cached_rt.args, rt().args);
    assert_eq!(cached_rt.capability_args, rt().capability_args);

    let attachments = f.cni.get_cached_attachments("some-container-id").unwrap();
    assert_eq!(attachments.len(), 1);
    assert_eq!(attachments[0].network, "testnet");
    assert_eq!(attachments[0].ifname, "eth0");
    assert_eq!(attachments[0].netns, "/some/netns/path");
    assert!(f.cni.get_cached_attachments("other").unwrap().is_empty());
}

#[test]
fn a_failing_plugin_stops_add_and_nothing_is_cached() {
    let f = fixture();
    f.exec.on("second", |c| match c.command() {
        "ADD" => Err(plugin_error(117, "cannot frobnicate")),
        _ => Ok(Vec::new()),
    });
    let err = f.cni.add_network_list(&list("1.0.0"), &rt()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "plugin type=\"second\" name=\"testnet\" failed (add): cannot frobnicate"
    );
    assert_eq!(err.code(), Some(ErrorCode::Other(117)));
    assert_eq!(err.cni_error().unwrap().msg, "cannot frobnicate");
    assert_eq!(
        f.exec.log(),
        vec![
            ("first".to_string(), "ADD".to_string()),
            ("second".to_string(), "ADD".to_string()),
        ]
    );
    assert!(!f.cache_file().exists());
}

#[test]
fn a_missing_plugin_fails_add_naming_it() {
    let f = fixture();
    let mut l = list("1.0.0");
    l.plugins
        .push(plugin_conf_from_bytes(br#"{"type":"absent"}"#).unwrap());
    let err = f.cni.add_network_list(&l, &rt()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "plugin type=\"absent\" name=\"testnet\" failed (add): failed to find plugin \"absent\" in path [/opt/a /opt/b]"
    );
    assert!(!f.cache_file().exists());
}

#[test]
fn add_validates_ids_and_names_before_running_anything() {
    let cases: Vec<(RuntimeConf, &str, ErrorCode, &str)> = vec![
        (
            RuntimeConf {
                container_id: String::new(),
                ..rt()
            },
            "testnet",
            ErrorCode::UnknownContainer,
            "missing containerID",
        ),
        (
            RuntimeConf {
                container_id: "bad id!".into(),
                ..rt()
            },
            "testnet",
            ErrorCode::InvalidEnvironment,
            "invalid characters in containerID",
        ),
        (
            rt(),
            "bad/name",
            ErrorCode::InvalidNetworkConfig,
            "invalid characters found in network name",
        ),
        (
            rt(),
            "-dash",
            ErrorCode::InvalidNetworkConfig,
            "invalid characters found in network name",
        ),
        (
            RuntimeConf {
                ifname: String::new(),
                ..rt()
            },
            "testnet",
            ErrorCode::InvalidEnvironment,
            "interface name is empty",
        ),
        (
            RuntimeConf {
                ifname: "0123456789abcdef".into(),
                ..rt()
            },
            "testnet",
            ErrorCode::InvalidEnvironment,
            "interface name is too long",
        ),
        (
            RuntimeConf {
                ifname: ".".into(),
                ..rt()
            },
            "testnet",
            ErrorCode::InvalidEnvironment,
            "interface name is . or ..",
        ),
        (
            RuntimeConf {
                ifname: "..".into(),
                ..rt()
            },
            "testnet",
            ErrorCode::InvalidEnvironment,
            "interface name is . or ..",
        ),
        (
            RuntimeConf {
                ifname: "eth/0".into(),
                ..rt()
            },
            "testnet",
            ErrorCode::InvalidEnvironment,
            "interface name contains / or : or whitespace characters",
        ),
        (
            RuntimeConf {
                ifname: "eth:0".into(),
                ..rt()
            },
            "testnet",
            ErrorCode::InvalidEnvironment,
            "interface name contains / or : or whitespace characters",
        ),
        (
            RuntimeConf {
                ifname: "eth 0".into(),
                ..rt()
            },
            "testnet",
            ErrorCode::InvalidEnvironment,
            "interface name contains / or : or whitespace characters",
        ),
    ];
    for (rt, name, code, msg) in cases {
        let f = fixture();
        let mut l = list("1.0.0");
        l.name = name.to_string();
        let err = f.cni.add_network_list(&l, &rt).unwrap_err();
        assert_eq!(err.code(), Some(code), "{rt:?} {name}");
        assert_eq!(err.cni_error().unwrap().msg, msg);
        assert!(f.exec.calls().is_empty());
    }
    // Fifteen bytes is still a valid name.
    let f = fixture();
    let ok = RuntimeConf {
        ifname: "0123456789abcde".into(),
        ..rt()
    };
    f.cni.add_network_list(&list("1.0.0"), &ok).unwrap();
}

#[test]
fn del_runs_in_reverse_with_cached_result_and_cached_capabilities() {
    for version in ["0.4.0", "1.0.0", "1.1.0"] {
        let f = fixture();
        let l = list(version);
        let added = f.cni.add_network_list(&l, &rt()).unwrap();
        f.exec.clear();

        // The runtime sends no capability args on DEL (containerd's second
        // DEL, cnitool without CAP_ARGS): the cached ones are used.
        f.cni.del_network_list(&l, &rt_without_caps()).unwrap();
        assert_eq!(
            f.exec.log(),
            vec![
                ("third".to_string(), "DEL".to_string()),
                ("second".to_string(), "DEL".to_string()),
                ("first".to_string(), "DEL".to_string()),
            ],
            "{version}"
        );
        let calls = f.exec.calls();
        for call in &calls {
            assert_eq!(call.stdin["prevResult"], added.to_value(), "{version}");
            assert_eq!(call.stdin["cniVersion"], version);
            assert_eq!(call.var("CNI_ARGS"), "FOO=BAR");
        }
        assert_eq!(
            calls[2].stdin["runtimeConfig"],
            json!({"portMappings": port_mappings()}),
            "{version}"
        );
        assert_eq!(
            calls[1].stdin["runtimeConfig"],
            json!({"ips": ["10.0.0.5/24"]})
        );
        assert!(!f.cache_file().exists());

        // Repeated DEL succeeds with no cache and no prevResult.
        f.exec.clear();
        f.cni.del_network_list(&l, &rt_without_caps()).unwrap();
        assert!(f
            .exec
            .calls()
            .iter()
            .all(|c| c.stdin.get("prevResult").is_none()));
        assert!(f.exec.calls()[2].stdin.get("runtimeConfig").unwrap()["static"] == 1);
    }
}

#[test]
fn del_with_capability_args_uses_them_not_the_cache() {
    let f = fixture();
    let l = list("1.0.0");
    f.cni.add_network_list(&l, &rt()).unwrap();
    f.exec.clear();
    let mut given = rt_without_caps();
    given.capability_args.insert(
        "portMappings".into(),
        json!([{"hostPort": 1, "containerPort": 2, "protocol": "udp"}]),
    );
    f.cni.del_network_list(&l, &given).unwrap();
    let first = f
        .exec
        .calls()
        .into_iter()
        .find(|c| c.plugin == "first")
        .unwrap();
    assert_eq!(
        first.stdin["runtimeConfig"]["portMappings"],
        json!([{"hostPort": 1, "containerPort": 2, "protocol": "udp"}])
    );
    // `ips` was not given and is not taken from the cache either.
    let second = f
        .exec
        .calls()
        .into_iter()
        .find(|c| c.plugin == "second")
        .unwrap();
    assert!(second.stdin.get("runtimeConfig").is_none());
}

#[test]
fn del_before_0_4_0_sends_no_prev_result() {
    let f = fixture();
    let l = list("0.3.1");
    f.cni.add_network_list(&l, &rt()).unwrap();
    assert!(f.cache_file().exists());
    f.exec.clear();
    f.cni.del_network_list(&l, &rt_without_caps()).unwrap();
    assert_eq!(f.exec.calls().len(), 3);
    for call in f.exec.calls() {
        assert!(call.stdin.get("prevResult").is_none());
    }
    // Cached capability args are reused whatever the version.
    assert_eq!(
        f.exec.calls()[2].stdin["runtimeConfig"],
        json!({"portMappings": port_mappings()})
    );
    assert!(!f.cache_file().exists());
}

#[test]
fn del_tolerates_an_unusable_cache() {
    for garbage in [
        // What a crash can leave of a cache file (it is written without
        // fsync, as Go libcni writes it).
        &b""[..],
        &b"{not json"[..],
        br#"{"cniVersion":"1.0.0","ips":[{"address":"nonsense"}]}"#,
    ] {
        let f = fixture();
        std::fs::create_dir_all(f.cache_file().parent().unwrap()).unwrap();
        std::fs::write(f.cache_file(), garbage).unwrap();
        f.cni.del_network_list(&list("1.0.0"), &rt()).unwrap();
        assert_eq!(f.exec.calls().len(), 3);
        for call in f.exec.calls() {
            assert!(call.stdin.get("prevResult").is_none());
        }
        assert!(!f.cache_file().exists());
    }
}

#[test]
fn del_converts_the_cached_result_to_the_list_version() {
    let f = fixture();
    f.cni.add_network_list(&list("1.0.0"), &rt()).unwrap();
    f.exec.clear();
    f.cni.del_network_list(&list("0.4.0"), &rt()).unwrap();
    let prev = &f.exec.calls()[0].stdin["prevResult"];
    assert_eq!(prev["cniVersion"], "0.4.0");
    assert_eq!(prev["ips"][0]["version"], "4");
}

#[test]
fn a_failing_del_keeps_the_cache() {
    let f = fixture();
    let l = list("1.0.0");
    f.cni.add_network_list(&l, &rt()).unwrap();
    f.exec.on("second", |c| match c.command() {
        "DEL" => Err(plugin_error(11, "busy")),
        _ => Ok(Vec::new()),
    });
    f.exec.clear();
    let err = f.cni.del_network_list(&l, &rt()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "plugin type=\"second\" name=\"testnet\" failed (delete): busy"
    );
    assert_eq!(err.code(), Some(ErrorCode::TryAgainLater));
    assert_eq!(f.exec.log().len(), 2);
    assert!(f.cache_file().exists());
}

#[test]
fn check_gates_and_order() {
    // Before 0.4.0 there is no CHECK.
    let f = fixture();
    let err = f.cni.check_network_list(&list("0.3.1"), &rt()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "configuration version \"0.3.1\" does not support the CHECK command"
    );
    assert!(f.exec.calls().is_empty());

    // disableCheck: success without calling anything.
    let mut disabled = list("1.0.0");
    disabled.disable_check = true;
    f.cni.check_network_list(&disabled, &rt()).unwrap();
    assert!(f.exec.calls().is_empty());

    // In order, with the cached result.
    let l = list("0.4.0");
    let added = f.cni.add_network_list(&l, &rt()).unwrap();
    f.exec.clear();
    f.cni.check_network_list(&l, &rt()).unwrap();
    assert_eq!(
        f.exec.log(),
        vec![
            ("first".to_string(), "CHECK".to_string()),
            ("second".to_string(), "CHECK".to_string()),
            ("third".to_string(), "CHECK".to_string()),
        ]
    );
    for call in f.exec.calls() {
        assert_eq!(call.stdin["prevResult"], added.to_value());
    }
    assert_eq!(
        f.exec.calls()[0].stdin["runtimeConfig"],
        json!({"portMappings": port_mappings()})
    );

    // A plugin's CHECK failure stops the run and keeps its code.
    f.exec.on("second", |c| match c.command() {
        "CHECK" => Err(plugin_error(120, "veth gone")),
        _ => Ok(Vec::new()),
    });
    f.exec.clear();
    let err = f.cni.check_network_list(&l, &rt()).unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::Other(120)));
    assert_eq!(f.exec.log().len(), 2);
}

#[test]
fn check_without_cache_sends_no_prev_result_and_rejects_a_broken_cache() {
    let f = fixture();
    f.cni.check_network_list(&list("1.0.0"), &rt()).unwrap();
    assert!(f
        .exec
        .calls()
        .iter()
        .all(|c| c.stdin.get("prevResult").is_none()));

    std::fs::create_dir_all(f.cache_file().parent().unwrap()).unwrap();
    std::fs::write(f.cache_file(), b"{broken").unwrap();
    f.exec.clear();
    let err = f.cni.check_network_list(&list("1.0.0"), &rt()).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("failed to get network \"testnet\" cached result: "),
        "{err}"
    );
    assert!(f.exec.calls().is_empty());
}

/// The GC tests' start: a 1.1.0 list with one attachment added (and
/// cached), the calls of that ADD forgotten.
fn attached_on_1_1_0() -> (Fixture, NetworkConfigList) {
    let f = fixture();
    let l = list("1.1.0");
    f.cni.add_network_list(&l, &rt()).unwrap();
    f.exec.clear();
    (f, l)
}

/// A GC call to each plugin of the list, in order.
fn gc_of_every_plugin() -> Vec<(String, String)> {
    PLUGINS
        .iter()
        .map(|p| (p.to_string(), "GC".to_string()))
        .collect()
}

#[test]
fn gc_deletes_stale_attachments_then_gcs_every_plugin() {
    let (f, mut l) = attached_on_1_1_0();

    // disableGC: nothing at all.
    l.disable_gc = true;
    f.cni.gc_network_list(&l, Some(&GcArgs::default())).unwrap();
    assert!(f.exec.calls().is_empty());
    l.disable_gc = false;

    // The attachment is valid: no DEL, GC told about it under both keys.
    let valid = GcArgs {
        valid_attachments: vec![GcAttachment {
            container_id: "some-container-id".into(),
            ifname: "eth0".into(),
        }],
    };
    f.cni.gc_network_list(&l, Some(&valid)).unwrap();
    assert_eq!(f.exec.log(), gc_of_every_plugin());
    for call in f.exec.calls() {
        let expected = json!([{"containerID": "some-container-id", "ifname": "eth0"}]);
        assert_eq!(call.stdin["cni.dev/valid-attachments"], expected);
        assert_eq!(call.stdin["cni.dev/attachments"], expected);
        assert_eq!(call.stdin["name"], "testnet");
        assert_eq!(call.stdin["cniVersion"], "1.1.0");
        assert!(call.stdin.get("runtimeConfig").is_none() || call.plugin == "first");
        assert!(call.stdin.get("prevResult").is_none());
        assert_eq!(call.var("CNI_CONTAINERID"), "");
        assert_eq!(call.var("CNI_IFNAME"), "");
        assert_eq!(call.var("CNI_NETNS"), "");
        assert_eq!(call.var("CNI_PATH"), "/opt/a:/opt/b");
    }
    // The static runtimeConfig of the file is passed as written.
    assert_eq!(
        f.exec.calls()[0].stdin["runtimeConfig"],
        json!({"static": 1})
    );
    assert!(f.cache_file().exists());

    // Nothing is valid any more: DEL (reverse, with what ADD recorded),
    // then GC with an empty list.
    f.exec.clear();
    f.cni.gc_network_list(&l, Some(&GcArgs::default())).unwrap();
    let log = f.exec.log();
    let expected: Vec<(String, String)> = ["third", "second", "first"]
        .iter()
        .map(|p| (p.to_string(), "DEL".to_string()))
        .chain(gc_of_every_plugin())
        .collect();
    assert_eq!(log, expected);
    let calls = f.exec.calls();
    assert_eq!(calls[0].var("CNI_CONTAINERID"), "some-container-id");
    assert_eq!(calls[0].var("CNI_NETNS"), "/some/netns/path");
    assert_eq!(calls[0].var("CNI_ARGS"), "FOO=BAR");
    assert_eq!(
        calls[2].stdin["runtimeConfig"],
        json!({"portMappings": port_mappings()})
    );
    assert_eq!(calls[3].stdin["cni.dev/valid-attachments"], json!([]));
    assert!(!f.cache_file().exists());
}

#[test]
fn gc_plugins_sends_gc_only_and_keeps_the_cache() {
    let (f, mut l) = attached_on_1_1_0();

    // Nothing valid: every plugin gets GC with an empty list under both
    // keys, no DEL is sent and the cached attachment stays.
    f.cni.gc_plugins(&l, Some(&GcArgs::default())).unwrap();
    assert_eq!(f.exec.log(), gc_of_every_plugin());
    for call in f.exec.calls() {
        assert_eq!(call.stdin["cni.dev/valid-attachments"], json!([]));
        assert_eq!(call.stdin["cni.dev/attachments"], json!([]));
    }
    assert!(f.cache_file().exists());

    // Before 1.1.0 and with disableGC: nothing is sent.
    f.exec.clear();
    f.cni
        .gc_plugins(&list("1.0.0"), Some(&GcArgs::default()))
        .unwrap();
    l.disable_gc = true;
    f.cni.gc_plugins(&l, Some(&GcArgs::default())).unwrap();
    assert!(f.exec.calls().is_empty());
}

#[test]
fn gc_without_args_treats_every_attachment_of_the_network_as_stale() {
    let f = fixture();
    let l = list("1.1.0");
    f.cni.add_network_list(&l, &rt()).unwrap();
    let mut other = list("1.1.0");
    other.name = "othernet".into();
    f.cni.add_network_list(&other, &rt()).unwrap();
    f.exec.clear();

    f.cni.gc_network_list(&l, None).unwrap();
    let calls = f.exec.calls();
    assert_eq!(calls.iter().filter(|c| c.command() == "DEL").count(), 3);
    assert!(calls.iter().all(|c| c.stdin["name"] == "testnet"));
    for gc in calls.iter().filter(|c| c.command() == "GC") {
        assert!(gc.stdin.get("cni.dev/valid-attachments").is_none());
        assert!(gc.stdin.get("cni.dev/attachments").is_none());
    }
    assert!(!f.cache_file().exists());
    // The other network's attachment is untouched.
    assert_eq!(f.cni.get_cached_attachments("").unwrap().len(), 1);
}

#[test]
fn gc_before_1_1_0_only_deletes_stale_attachments() {
    let f = fixture();
    let l = list("1.0.0");
    f.cni.add_network_list(&l, &rt()).unwrap();
    f.exec.clear();
    f.cni.gc_network_list(&l, Some(&GcArgs::default())).unwrap();
    assert!(f.exec.log().iter().all(|(_, cmd)| cmd == "DEL"));
    assert_eq!(f.exec.log().len(), 3);
}

#[test]
fn gc_goes_on_after_failures_and_reports_them_all() {
    let f = fixture();
    f.exec
        .on("first", |_| Err(plugin_error(999, "first broke")));
    f.exec
        .on("third", |_| Err(plugin_error(999, "third broke")));
    let err = f
        .cni
        .gc_network_list(&list("1.1.0"), Some(&GcArgs::default()))
        .unwrap_err();
    assert_eq!(f.exec.log().len(), 3);
    assert_eq!(
        err.to_string(),
        "failed to GC plugin first: first broke\nfailed to GC plugin third: third broke"
    );
    assert!(matches!(err, RuntimeError::Multiple(ref v) if v.len() == 2));
}

#[test]
fn status_stops_at_the_first_failure_and_keeps_its_code() {
    let f = fixture();
    f.exec.on("second", |c| {
        assert_eq!(c.command(), "STATUS");
        Err(plugin_error(50, "plugin error: banana"))
    });
    let err = f.cni.get_status_network_list(&list("1.1.0")).unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::NotAvailable));
    assert_eq!(err.cni_error().unwrap().msg, "plugin error: banana");
    assert_eq!(
        f.exec.log(),
        vec![
            ("first".to_string(), "STATUS".to_string()),
            ("second".to_string(), "STATUS".to_string()),
        ]
    );
    let first = &f.exec.calls()[0];
    assert_eq!(first.stdin["name"], "testnet");
    assert_eq!(first.stdin["cniVersion"], "1.1.0");
    assert_eq!(first.var("CNI_CONTAINERID"), "");

    // Before 1.1.0 there is no STATUS: success without calls.
    f.exec.clear();
    f.cni.get_status_network_list(&list("1.0.0")).unwrap();
    assert!(f.exec.calls().is_empty());
}

#[test]
fn validate_checks_presence_and_version() {
    let f = fixture();
    assert_eq!(
        f.cni.validate_network_list(&list("1.1.0")).unwrap(),
        vec!["ips".to_string(), "portMappings".to_string()]
    );
    assert!(f.calls_for("VERSION").len() == 3);

    f.exec.on("second", |_| {
        Ok(br#"{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}"#.to_vec())
    });
    let mut l = list("1.1.0");
    l.plugins
        .push(plugin_conf_from_bytes(br#"{"type":"absent"}"#).unwrap());
    let err = f.cni.validate_network_list(&l).unwrap_err();
    assert_eq!(
        err.to_string(),
        "plugin second does not support config version \"1.1.0\"\nfailed to find plugin \"absent\" in path [/opt/a /opt/b]"
    );
    assert!(f.cni.validate_network_list(&list("1.0.0")).is_ok());

    let info = f.cni.get_version_info("second").unwrap();
    assert_eq!(info.supported_versions, vec!["0.4.0", "1.0.0"]);
    let version_call = f.calls_for("VERSION").pop().unwrap();
    assert_eq!(version_call.var("CNI_NETNS"), "dummy");
    assert!(f.cni.get_version_info("absent").is_err());
}

#[test]
fn validate_single_plugin_without_version_expects_0_1_0() {
    let f = fixture();
    f.exec
        .on("first", |_| Ok(br#"{"cniVersion":"0.2.0"}"#.to_vec()));
    let plugin =
        plugin_conf_from_bytes(br#"{"name":"n","type":"first","capabilities":{"mac":true}}"#)
            .unwrap();
    assert_eq!(f.cni.validate_network(&plugin).unwrap(), vec!["mac"]);
    let plugin =
        plugin_conf_from_bytes(br#"{"name":"n","cniVersion":"0.3.1","type":"first"}"#).unwrap();
    assert!(f.cni.validate_network(&plugin).is_err());
}

#[test]
fn single_plugin_add_check_del() {
    let f = fixture();
    let plugin = plugin_conf_from_bytes(
        br#"{"cniVersion":"1.0.0","name":"single","type":"first","capabilities":{"portMappings":true}}"#,
    )
    .unwrap();
    let added = f.cni.add_network(&plugin, &rt()).unwrap();
    let file = f
        .cache_dir
        .path()
        .join("results/single-some-container-id-eth0");
    let entry: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(entry["networkName"], "single");
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(entry["config"].as_str().unwrap())
            .unwrap(),
        plugin.bytes()
    );

    f.cni.check_network(&plugin, &rt()).unwrap();
    let check = f.calls_for("CHECK").pop().unwrap();
    assert_eq!(check.stdin["prevResult"], added.to_value());

    f.cni.del_network(&plugin, &rt_without_caps()).unwrap();
    let del = f.calls_for("DEL").pop().unwrap();
    assert_eq!(del.stdin["prevResult"], added.to_value());
    assert_eq!(
        del.stdin["runtimeConfig"],
        json!({"portMappings": port_mappings()})
    );
    assert!(!file.exists());

    let old = plugin_conf_from_bytes(br#"{"cniVersion":"0.3.0","name":"single","type":"first"}"#)
        .unwrap();
    assert!(matches!(
        f.cni.check_network(&old, &rt()),
        Err(RuntimeError::CheckNotSupported { .. })
    ));
}

#[test]
fn a_list_without_plugins_cannot_be_added() {
    let f = fixture();
    let l = conflist_from_bytes(br#"{"name":"empty","cniVersion":"1.0.0"}"#).unwrap();
    let err = f.cni.add_network_list(&l, &rt()).unwrap_err();
    assert_eq!(err.to_string(), "network \"empty\" has no plugins");
}
