//! Reading cache files as Go libcni writes them (fixtures built by hand
//! from that format, see fixtures/cache/README.md) and acting on them.

mod runtime_support;

use std::path::{Path, PathBuf};

use libcni::cache::{CacheEntry, ResultCache};
use libcni::conf::conflist_from_file;
use libcni::invoke::PluginEnv;
use libcni::runtime::{CniConfig, RuntimeConf, RuntimeError};
use libcni::types::AnyResult;
use libcni::SpecVersion;
use runtime_support::FakeExec;
use serde_json::{json, Value};
use tempfile::TempDir;

const CID: &str = "3f1b8ce2a7d94e0c9b6a5f4e3d2c1b0a9f8e7d6c5b4a39281706f5e4d3c2b1a0";
const NETNS: &str = "/var/run/netns/cni-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cache")
}

fn go_file_name() -> String {
    format!("mynet-{CID}-eth0")
}

/// A cache directory holding the Go-written fixtures.
fn cache_dir() -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results");
    std::fs::create_dir(&results).unwrap();
    for name in [go_file_name(), "legacy-net-oldctr-eth0".to_string()] {
        std::fs::copy(fixtures().join(&name), results.join(&name)).unwrap();
    }
    dir
}

fn rt(container_id: &str) -> RuntimeConf {
    RuntimeConf {
        container_id: container_id.into(),
        netns: NETNS.into(),
        ifname: "eth0".into(),
        ..RuntimeConf::default()
    }
}

fn cni(exec: std::sync::Arc<FakeExec>, dir: &TempDir) -> CniConfig {
    CniConfig::with_exec(vec![PathBuf::from("/opt/cni/bin")], exec)
        .with_cache_dir(dir.path())
        .with_base_env(PluginEnv::new())
}

fn mynet() -> libcni::conf::NetworkConfigList {
    conflist_from_file(&fixtures().join("mynet.conflist")).unwrap()
}

#[test]
fn go_cache_file_decodes_and_reencodes_byte_for_byte() {
    let bytes = std::fs::read(fixtures().join(go_file_name())).unwrap();
    let entry: CacheEntry = serde_json::from_slice(&bytes).unwrap();
    assert!(entry.is_v1());
    assert_eq!(entry.container_id, CID);
    assert_eq!(entry.network_name, "mynet");
    assert_eq!(entry.ifname, "eth0");
    assert_eq!(entry.netns, NETNS);
    assert_eq!(
        entry.config,
        std::fs::read(fixtures().join("mynet.conflist")).unwrap()
    );
    assert_eq!(
        entry.cni_args,
        vec![
            ("IgnoreUnknown".to_string(), "1".to_string()),
            ("K8S_POD_NAMESPACE".to_string(), "default".to_string()),
            ("K8S_POD_NAME".to_string(), "web-0".to_string()),
        ]
    );
    assert_eq!(
        entry.capability_args["portMappings"][1]["hostIP"],
        "127.0.0.1"
    );
    assert_eq!(serde_json::to_vec(&entry).unwrap(), bytes);
}

#[test]
fn cached_result_and_config_from_a_go_file() {
    let dir = cache_dir();
    let exec = FakeExec::new(&["bridge", "portmap"]);
    let cni = cni(exec, &dir);
    let list = mynet();

    let result = cni
        .get_network_list_cached_result(&list, &rt(CID))
        .unwrap()
        .unwrap();
    assert_eq!(result.version(), SpecVersion::V1_0_0);
    let v = result.to_value();
    assert_eq!(v["interfaces"][2]["sandbox"], NETNS);
    assert_eq!(v["ips"][0]["address"], "10.22.0.5/16");
    assert_eq!(v["ips"][0]["interface"], 2);

    // Given in the list's version, whatever it was cached in.
    let mut older = list.clone();
    older.cni_version = "0.3.1".into();
    let converted = cni
        .get_network_list_cached_result(&older, &rt(CID))
        .unwrap()
        .unwrap();
    assert_eq!(converted.version(), SpecVersion::V0_3_1);
    assert_eq!(converted.to_value()["ips"][0]["version"], "4");

    let (config, cached_rt) = cni
        .get_network_list_cached_config(&list, &rt(CID))
        .unwrap()
        .unwrap();
    assert_eq!(config, list.bytes);
    assert_eq!(cached_rt.args.len(), 3);
    assert_eq!(cached_rt.container_id, CID);
    assert_eq!(
        cached_rt.capability_args["portMappings"][0],
        json!({"containerPort": 80, "hostPort": 8080, "protocol": "tcp"})
    );

    // Nothing cached for another container.
    assert!(cni
        .get_network_list_cached_result(&list, &rt("other"))
        .unwrap()
        .is_none());
    assert!(cni
        .get_network_list_cached_config(&list, &rt("other"))
        .unwrap()
        .is_none());
}

#[test]
fn legacy_bare_result_files_are_read() {
    let dir = cache_dir();
    let cache = ResultCache::new(dir.path());
    let r = cache
        .read_result("legacy-net", "oldctr", "eth0", "0.4.0")
        .unwrap()
        .unwrap();
    assert_eq!(r.version(), SpecVersion::V0_4_0);
    let r = cache
        .read_result("legacy-net", "oldctr", "eth0", "1.0.0")
        .unwrap()
        .unwrap();
    assert_eq!(r.version(), SpecVersion::V1_0_0);
    assert_eq!(r.to_value()["ips"][0]["address"], "10.22.0.9/16");

    // It is a result, not a record: no cached config, wrong kind.
    let err = cache
        .read_entry("legacy-net", "oldctr", "eth0")
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "read cached network \"legacy-net\" config has wrong kind: "
    );
    // Down to 0.2.0 works too, as the result has an address.
    assert!(cache
        .read_result("legacy-net", "oldctr", "eth0", "0.2.0")
        .unwrap()
        .is_some());
    let err = cache
        .read_result("legacy-net", "oldctr", "eth0", "9.9.9")
        .unwrap_err();
    assert!(err
        .to_string()
        .starts_with("failed to convert cached result to config version \"9.9.9\""));
}

#[test]
fn attachments_list_only_complete_v1_records() {
    let dir = cache_dir();
    let results = dir.path().join("results");
    // Same container in another network, and a record with no ifName.
    let mut other: Value =
        serde_json::from_slice(&std::fs::read(fixtures().join(go_file_name())).unwrap()).unwrap();
    other["networkName"] = json!("othernet");
    std::fs::write(
        results.join(format!("othernet-{CID}-eth0")),
        other.to_string(),
    )
    .unwrap();
    other["ifName"] = json!("");
    std::fs::write(
        results.join(format!("broken-{CID}-eth1")),
        other.to_string(),
    )
    .unwrap();
    std::fs::write(results.join(format!("junk-{CID}-eth2")), "{").unwrap();

    let cache = ResultCache::new(dir.path());
    let all = cache.attachments("").unwrap();
    let names: Vec<&str> = all.iter().map(|a| a.network.as_str()).collect();
    assert_eq!(names, vec!["mynet", "othernet"]);
    assert_eq!(cache.attachments(CID).unwrap().len(), 2);
    assert!(cache.attachments("oldctr").unwrap().is_empty());
    assert!(cache.attachments("3f1b8ce2").unwrap().is_empty());

    let missing = ResultCache::new(dir.path().join("nowhere"));
    assert!(missing.attachments("").unwrap().is_empty());
}

#[test]
fn del_without_capability_args_reuses_those_in_the_go_cache() {
    let dir = cache_dir();
    let exec = FakeExec::new(&["bridge", "portmap"]);
    let cni = cni(exec.clone(), &dir);
    let list = mynet();
    let cached = cni
        .get_network_list_cached_result(&list, &rt(CID))
        .unwrap()
        .unwrap();

    cni.del_network_list(&list, &rt(CID)).unwrap();
    let calls = exec.calls();
    assert_eq!(exec.log()[0], ("portmap".into(), "DEL".into()));
    assert_eq!(exec.log()[1], ("bridge".into(), "DEL".into()));
    let portmap = &calls[0].stdin;
    assert_eq!(
        portmap["runtimeConfig"]["portMappings"],
        json!([
            {"containerPort": 80, "hostPort": 8080, "protocol": "tcp"},
            {"containerPort": 53, "hostIP": "127.0.0.1", "hostPort": 5353, "protocol": "udp"}
        ])
    );
    assert_eq!(portmap["snat"], true);
    assert_eq!(portmap["prevResult"], cached.to_value());
    let bridge = &calls[1].stdin;
    assert!(bridge.get("runtimeConfig").is_none());
    assert_eq!(bridge["ipam"]["type"], "host-local");
    assert!(!dir.path().join("results").join(go_file_name()).exists());
}

#[test]
fn gc_deletes_a_go_cached_attachment_with_its_recorded_arguments() {
    let dir = cache_dir();
    let exec = FakeExec::new(&["bridge", "portmap"]);
    let cni = cni(exec.clone(), &dir);
    cni.gc_network_list(&mynet(), None).unwrap();
    // 1.0.0: DEL only, no GC command.
    assert_eq!(exec.log().len(), 2);
    for call in exec.calls() {
        assert_eq!(call.command(), "DEL");
        assert_eq!(call.var("CNI_CONTAINERID"), CID);
        assert_eq!(call.var("CNI_NETNS"), NETNS);
        assert_eq!(
            call.var("CNI_ARGS"),
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0"
        );
    }
    assert!(exec.calls()[0].stdin["runtimeConfig"]["portMappings"].is_array());
    assert!(cni.get_cached_attachments("").unwrap().is_empty());
}

#[test]
fn cache_keys_must_be_complete() {
    let cache = ResultCache::new("/nonexistent");
    assert_eq!(
        cache.file_path("", "c", "eth0").unwrap_err().to_string(),
        "cache file path requires network name (\"\"), container ID (\"c\"), and interface name (\"eth0\")"
    );
    assert!(cache.file_path("n", "", "eth0").is_err());
    assert!(cache.file_path("n", "c", "").is_err());
    assert_eq!(
        cache.file_path("n", "c", "eth0").unwrap(),
        PathBuf::from("/nonexistent/results/n-c-eth0")
    );
}

#[test]
fn unwritable_cache_fails_add_after_the_plugins_ran() {
    let dir = tempfile::tempdir().unwrap();
    // A file where the results directory should be.
    std::fs::write(dir.path().join("results"), "").unwrap();
    let exec = FakeExec::new(&["bridge", "portmap"]);
    let cni = cni(exec.clone(), &dir);
    let err = cni.add_network_list(&mynet(), &rt("c1")).unwrap_err();
    assert!(matches!(err, RuntimeError::CacheWrite { .. }));
    assert!(err
        .to_string()
        .starts_with("failed to set network \"mynet\" cached result: "));
    assert_eq!(exec.log().len(), 2);
}

#[test]
fn a_result_written_here_reads_back_in_every_version() {
    let dir = tempfile::tempdir().unwrap();
    let exec = FakeExec::new(&["bridge", "portmap"]);
    let cni = cni(exec, &dir);
    let list = mynet();
    let added: AnyResult = cni.add_network_list(&list, &rt("c1")).unwrap();
    for v in ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
        let mut l = list.clone();
        l.cni_version = v.into();
        let r = cni
            .get_network_list_cached_result(&l, &rt("c1"))
            .unwrap()
            .unwrap();
        assert_eq!(r.version().as_str(), v);
        assert_eq!(
            r.convert_to(SpecVersion::V1_0_0).unwrap(),
            added.clone().convert_to(SpecVersion::V1_0_0).unwrap()
        );
    }
}
