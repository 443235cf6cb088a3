//! The built `cnitool` driving real plugins in network namespaces made here:
//! the Debian reference plugins (bridge + host-local) and our own.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use conformance::testnet::{bin_dir, TestNetns, REFERENCE_DIR};
use serde_json::{json, Value};

const CNITOOL: &str = env!("CARGO_BIN_EXE_cnitool");

/// A private NETCONFPATH, cache dir and lease dir.
struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("net.d")).unwrap();
        Setup { dir }
    }

    fn netconf(&self) -> PathBuf {
        self.dir.path().join("net.d")
    }

    fn cache(&self) -> PathBuf {
        self.dir.path().join("cache")
    }

    fn leases(&self) -> PathBuf {
        self.dir.path().join("leases")
    }

    fn write(&self, file: &str, conf: &Value) {
        std::fs::write(
            self.netconf().join(file),
            serde_json::to_vec_pretty(conf).unwrap(),
        )
        .unwrap();
    }

    /// Runs cnitool in `host` (or here) with this setup's folders.
    fn cnitool(&self, host: Option<&TestNetns>, plugin_dir: &Path, args: &[&str]) -> Output {
        let mut cmd = match host {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns.name(), CNITOOL]);
                c
            }
            None => Command::new(CNITOOL),
        };
        cmd.args(args)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("NETCONFPATH", self.netconf())
            .env("CNI_PATH", plugin_dir)
            .env("CNI_CACHE_DIR", self.cache());
        cmd.output().unwrap()
    }
}

fn assert_success(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed: stdout {} stderr {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn bridge_conflist(version: &str, leases: &Path) -> Value {
    json!({
        "cniVersion": version,
        "name": "refnet",
        "plugins": [{
            "type": "bridge",
            "bridge": "cnitestbr0",
            "isGateway": true,
            "ipam": {
                "type": "host-local",
                "subnet": "10.77.0.0/24",
                "dataDir": leases
            }
        }]
    })
}

fn lease_files(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir.join("refnet")) else {
        return Vec::new();
    };
    let mut v: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "lock" && !n.starts_with("last_reserved_ip"))
        .collect();
    v.sort();
    v
}

#[test]
fn drives_reference_bridge_and_host_local_through_add_check_del_with_ping() {
    let host = TestNetns::new("ct-host");
    let pod = TestNetns::new("ct-pod");
    let setup = Setup::new();
    setup.write(
        "10-refnet.conflist",
        &bridge_conflist("1.0.0", &setup.leases()),
    );
    let pod_path = pod.path().display().to_string();
    let reference = Path::new(REFERENCE_DIR);

    let out = setup.cnitool(Some(&host), reference, &["add", "refnet", &pod_path]);
    let result: Value = serde_json::from_str(&assert_success(&out, "add")).unwrap();
    assert_eq!(result["cniVersion"], "1.0.0");
    assert_eq!(result["interfaces"][0]["name"], "cnitestbr0");
    assert_eq!(result["interfaces"][2]["name"], "eth0");
    assert_eq!(result["interfaces"][2]["sandbox"], pod_path);
    let address = result["ips"][0]["address"].as_str().unwrap();
    assert_eq!(address, "10.77.0.2/24");
    assert_eq!(lease_files(&setup.leases()), vec!["10.77.0.2".to_string()]);

    // The pod is reachable from the fake host across the bridge.
    assert!(host.ping("10.77.0.2"), "host cannot ping the pod");
    assert!(pod.ping("10.77.0.1"), "pod cannot ping its gateway");

    // The cache is in Go libcni's format, keyed by the Go tool's container ID.
    let cache_files: Vec<_> = std::fs::read_dir(setup.cache().join("results"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(cache_files.len(), 1, "{cache_files:?}");
    assert!(
        cache_files[0].starts_with("refnet-cnitool-"),
        "{cache_files:?}"
    );
    assert!(cache_files[0].ends_with("-eth0"));
    let cached: Value = serde_json::from_slice(
        &std::fs::read(setup.cache().join("results").join(&cache_files[0])).unwrap(),
    )
    .unwrap();
    assert_eq!(cached["kind"], "cniCacheV1");
    assert_eq!(cached["result"]["ips"][0]["address"], "10.77.0.2/24");

    let out = setup.cnitool(Some(&host), reference, &["check", "refnet", &pod_path]);
    assert_success(&out, "check");

    let out = setup.cnitool(Some(&host), reference, &["del", "refnet", &pod_path]);
    assert_success(&out, "del");
    assert!(
        lease_files(&setup.leases()).is_empty(),
        "lease left after DEL"
    );
    assert!(
        !pod.links().contains(&"eth0".to_string()),
        "eth0 left in pod"
    );
    assert!(
        std::fs::read_dir(setup.cache().join("results"))
            .map(|d| d.count() == 0)
            .unwrap_or(true),
        "cache file left after DEL"
    );
    // DEL again is fine.
    let out = setup.cnitool(Some(&host), reference, &["del", "refnet", &pod_path]);
    assert_success(&out, "second del");
}

#[test]
fn check_failure_reports_the_plugin_and_code() {
    let host = TestNetns::new("ct-chk-h");
    let pod = TestNetns::new("ct-chk-p");
    let setup = Setup::new();
    setup.write(
        "10-refnet.conflist",
        &bridge_conflist("0.4.0", &setup.leases()),
    );
    let pod_path = pod.path().display().to_string();
    let reference = Path::new(REFERENCE_DIR);
    assert_success(
        &setup.cnitool(Some(&host), reference, &["add", "refnet", &pod_path]),
        "add",
    );
    // Break what ADD made: CHECK must fail and say which plugin failed.
    pod.ip(&["link", "del", "eth0"]);
    let out = setup.cnitool(Some(&host), reference, &["check", "refnet", &pod_path]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bridge"), "{err}");
    assert_success(
        &setup.cnitool(Some(&host), reference, &["del", "refnet", &pod_path]),
        "del",
    );
    assert!(lease_files(&setup.leases()).is_empty());
}

#[test]
fn our_loopback_through_cnitool() {
    let pod = TestNetns::new("ct-lo");
    pod.ip(&["link", "set", "lo", "down"]);
    let setup = Setup::new();
    setup.write(
        "99-loopback.conf",
        &json!({"cniVersion": "0.3.1", "name": "cni-loopback", "type": "loopback"}),
    );
    let pod_path = pod.path().display().to_string();
    let out = setup.cnitool(
        None,
        &bin_dir(),
        &["-i", "lo", "add", "cni-loopback", &pod_path],
    );
    let result: Value = serde_json::from_str(&assert_success(&out, "add")).unwrap();
    assert_eq!(result["cniVersion"], "0.3.1");
    assert_eq!(result["interfaces"][0]["name"], "lo");
    assert!(pod.ping("127.0.0.1"));
    assert_success(
        &setup.cnitool(
            None,
            &bin_dir(),
            &["-i", "lo", "del", "cni-loopback", &pod_path],
        ),
        "del",
    );
}

#[test]
fn version_lists_what_a_plugin_supports() {
    let setup = Setup::new();
    let out = setup.cnitool(None, &bin_dir(), &["version", "loopback"]);
    assert_eq!(
        assert_success(&out, "version").trim(),
        "0.1.0, 0.2.0, 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"
    );
    let out = setup.cnitool(None, Path::new(REFERENCE_DIR), &["version", "bridge"]);
    assert!(assert_success(&out, "version").contains("1.0.0"));
    let out = setup.cnitool(None, &bin_dir(), &["version", "no-such-plugin"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no-such-plugin"));
}

#[test]
fn validate_explains_an_empty_folder() {
    let setup = Setup::new();
    std::fs::write(setup.netconf().join("README"), "notes").unwrap();
    let out = setup.cnitool(None, &bin_dir(), &["validate"]);
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("no network configuration in"), "{text}");
    assert!(text.contains("it holds only README"), "{text}");
    assert!(text.contains(".conflist, .conf or .json"), "{text}");
}

#[test]
fn validate_explains_a_missing_folder_and_unset_cni_path() {
    let setup = Setup::new();
    let missing = setup.dir.path().join("nope");
    let out = Command::new(CNITOOL)
        .arg("validate")
        .env_clear()
        .env("NETCONFPATH", &missing)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("does not exist"), "{text}");
    assert!(text.contains("CNI_PATH is not set"), "{text}");
}

#[test]
fn validate_finds_broken_json_missing_plugins_and_bad_versions() {
    let setup = Setup::new();
    std::fs::write(setup.netconf().join("05-broken.conflist"), "{ not json").unwrap();
    setup.write(
        "10-missing.conflist",
        &json!({"cniVersion": "1.0.0", "name": "missing", "plugins": [{"type": "no-such-plugin"}]}),
    );
    setup.write(
        "20-newer.conflist",
        &json!({"cniVersion": "1.1.0", "name": "newer", "plugins": [{"type": "bridge"}]}),
    );
    setup.write(
        "30-good.conflist",
        &json!({"cniVersion": "1.0.0", "name": "good", "plugins": [{"type": "bridge"}]}),
    );
    let out = setup.cnitool(None, Path::new(REFERENCE_DIR), &["validate"]);
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("05-broken.conflist"), "{text}");
    assert!(
        text.contains("plugin \"no-such-plugin\" not found"),
        "{text}"
    );
    // The Debian reference plugins stop at 1.0.0.
    assert!(text.contains("does not support cniVersion 1.1.0"), "{text}");
    assert!(text.contains("ok: network \"good\""), "{text}");

    // A broken .conflist stops runtimes before they reach "good": say so.
    let out = setup.cnitool(None, Path::new(REFERENCE_DIR), &["validate", "good"]);
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("05-broken.conflist"), "{text}");
    assert!(text.contains("hides network \"good\""), "{text}");

    // Without it, the good network validates cleanly on its own.
    std::fs::remove_file(setup.netconf().join("05-broken.conflist")).unwrap();
    let out = setup.cnitool(None, Path::new(REFERENCE_DIR), &["validate", "good"]);
    assert_success(&out, "validate good");
}

#[test]
fn unknown_network_is_a_clear_error() {
    let setup = Setup::new();
    setup.write(
        "99-loopback.conf",
        &json!({"cniVersion": "0.3.1", "name": "cni-loopback", "type": "loopback"}),
    );
    let out = setup.cnitool(None, &bin_dir(), &["add", "nonet", "/run/netns/whatever"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no net configuration with name \"nonet\""),
        "{err}"
    );
}
