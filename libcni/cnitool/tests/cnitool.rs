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
        &["add", "-i", "lo", "cni-loopback", &pod_path],
    );
    let result: Value = serde_json::from_str(&assert_success(&out, "add")).unwrap();
    assert_eq!(result["cniVersion"], "0.3.1");
    assert_eq!(result["interfaces"][0]["name"], "lo");
    assert!(pod.ping("127.0.0.1"));
    assert_success(
        &setup.cnitool(
            None,
            &bin_dir(),
            &["del", "-i", "lo", "cni-loopback", &pod_path],
        ),
        "del",
    );
}

#[test]
fn version_names_the_file_it_ran_and_what_it_is() {
    let setup = Setup::new();
    let out = setup.cnitool(None, &bin_dir(), &["version", "loopback"]);
    let ours = bin_dir().join("loopback");
    assert_eq!(
        assert_success(&out, "version"),
        format!(
            "plugin: {}\nabout: CNI loopback plugin v{} ({})\nsupported spec versions: 0.1.0, 0.2.0, 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0\n",
            ours.display(),
            env!("CARGO_PKG_VERSION"),
            libcni::skel::build_description()
        )
    );
    // The reference's about text does not claim to be ours.
    let out = setup.cnitool(None, Path::new(REFERENCE_DIR), &["version", "bridge"]);
    let text = assert_success(&out, "version");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "plugin: /usr/lib/cni/bridge", "{text}");
    assert!(lines[1].starts_with("about: CNI bridge plugin "), "{text}");
    assert!(!lines[1].contains("cni-rs"), "{text}");
    assert!(lines[2].contains("1.0.0"), "{text}");
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
    assert!(
        text.contains(
            "plugin \"bridge\" does not support version 1.1.0 (it supports 0.1.0, 0.2.0, 0.3.0, 0.3.1, 0.4.0, 1.0.0)\n  fix: set \"cniVersion\" to 1.0.0: 1.0.0 is the highest version every plugin here supports; or install plugins that support 1.1.0\n"
        ),
        "{text}"
    );
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
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "no net configuration with name \"nonet\" in {} (the networks there are cni-loopback)\n",
            setup.netconf().display()
        )
    );
}

/// What `cnitool validate` printed and its exit status; it writes nothing
/// to stderr.
fn validate(setup: &Setup, plugin_dir: &Path, network: Option<&str>) -> (i32, String) {
    let mut args = vec!["validate"];
    args.extend(network);
    let out = setup.cnitool(None, plugin_dir, &args);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "",
        "validate wrote to stderr"
    );
    (
        out.status.code().expect("exited"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// A plugin directory holding only `plugins`, linked from our build.
fn plugin_dir_with(setup: &Setup, plugins: &[&str]) -> PathBuf {
    let dir = setup.dir.path().join("bin");
    std::fs::create_dir_all(&dir).unwrap();
    for plugin in plugins {
        let built = bin_dir().join(plugin);
        assert!(
            built.is_file(),
            "{} is missing: run `cargo build -p {plugin}`",
            built.display()
        );
        std::os::unix::fs::symlink(&built, dir.join(plugin)).unwrap();
    }
    dir
}

#[test]
fn validate_checks_the_ipam_plugin_too() {
    let setup = Setup::new();
    setup.write(
        "10-pods.conflist",
        &json!({"cniVersion": "1.0.0", "name": "pods", "plugins": [{
            "type": "bridge", "bridge": "cnitestbr9",
            "ipam": {"type": "host-local", "subnet": "10.77.9.0/24"}
        }]}),
    );
    let file = setup.netconf().join("10-pods.conflist");
    let plugins = plugin_dir_with(&setup, &["bridge"]);
    let (code, text) = validate(&setup, &plugins, None);
    assert_eq!(code, 1, "{text}");
    assert_eq!(
        text,
        format!(
            "PROBLEM: network \"pods\" ({}): IPAM plugin \"host-local\" (ipam.type of bridge) not found in CNI_PATH ({})\n  fix: install the host-local binary into one of those directories (e.g. /opt/cni/bin)\n1 problem, 0 warnings found\n",
            file.display(),
            plugins.display()
        )
    );
    plugin_dir_with(&setup, &["host-local"]);
    let (code, text) = validate(&setup, &plugins, Some("pods"));
    assert_eq!(code, 0, "{text}");
    assert_eq!(
        text,
        "ok: network \"pods\": version 1.0.0, plugins bridge, host-local\nno problems found\n"
    );
}

#[test]
fn validate_warns_when_cni_version_is_missing() {
    let setup = Setup::new();
    setup.write("99-lo.conf", &json!({"name": "lo", "type": "loopback"}));
    let file = setup.netconf().join("99-lo.conf");
    let (code, text) = validate(&setup, &bin_dir(), None);
    assert_eq!(code, 0, "a warning alone does not fail: {text}");
    assert_eq!(
        text,
        format!(
            "warning: network \"lo\" ({0}): no \"cniVersion\", so its plugins run at 0.1.0, the spec's version for a config without one (0.1.0 results have no interfaces, no CHECK, GC or STATUS)\n  fix: add \"cniVersion\": \"1.0.0\" (or the highest version all its plugins support; `cnitool version PLUGIN` lists them)\nok: network \"lo\" ({0}): version 0.1.0, plugins loopback\n0 problems, 1 warning found\n",
            file.display()
        )
    );
}

/// The first example's old versions: a runtime takes the highest listed
/// version it speaks (1.1.0), which the reference plugins refuse.
#[test]
fn validate_explains_how_cni_versions_chose_the_version() {
    let setup = Setup::new();
    setup.write(
        "10-k8s.conflist",
        &json!({
            "cniVersion": "1.0.0",
            "cniVersions": ["0.4.0", "1.0.0", "1.1.0"],
            "name": "k8s",
            "plugins": [
                {"type": "bridge", "ipam": {"type": "host-local", "subnet": "10.77.8.0/24"}},
                {"type": "portmap", "capabilities": {"portMappings": true}}
            ]
        }),
    );
    let note = "note: network \"k8s\": runs at 1.1.0: the highest of \"cniVersion\" (1.0.0) and \"cniVersions\" (0.4.0, 1.0.0, 1.1.0) that this runtime speaks (cnitool: up to 1.1.0); runtimes choose by what they speak, not by what the plugins support\n";
    let (code, text) = validate(&setup, Path::new(REFERENCE_DIR), Some("k8s"));
    assert_eq!(code, 1, "{text}");
    assert_eq!(
        text,
        format!(
            "{note}PROBLEM: network \"k8s\": version 1.1.0 is not supported by plugin \"bridge\" (up to 1.0.0), IPAM plugin \"host-local\" (ipam.type of bridge) (up to 1.0.0), plugin \"portmap\" (up to 1.0.0)\n  fix: remove 1.1.0 from \"cniVersions\" (a runtime takes the highest listed version it speaks, whatever the plugins support): 1.0.0 is the highest version every plugin here supports; or install plugins that support 1.1.0\n1 problem, 0 warnings found\n"
        )
    );
    // Both keys offer 1.1.0: the fix changes both.
    setup.write(
        "20-both.conflist",
        &json!({
            "cniVersion": "1.1.0",
            "cniVersions": ["1.0.0", "1.1.0"],
            "name": "both",
            "plugins": [{"type": "loopback"}]
        }),
    );
    let (code, text) = validate(&setup, Path::new(REFERENCE_DIR), Some("both"));
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("  fix: set \"cniVersion\" to 1.0.0 and remove 1.1.0 from \"cniVersions\" (a runtime takes the highest listed version it speaks, whatever the plugins support): 1.0.0 is the highest version every plugin here supports; or install plugins that support 1.1.0\n"),
        "{text}"
    );
    let (code, text) = validate(&setup, &bin_dir(), Some("k8s"));
    assert_eq!(code, 0, "{text}");
    assert_eq!(
        text,
        format!("{note}ok: network \"k8s\": version 1.1.0, plugins bridge, host-local, portmap\nno problems found\n")
    );
}

#[test]
fn validate_lists_the_networks_there_are_for_an_unknown_name() {
    let setup = Setup::new();
    setup.write(
        "99-loopback.conf",
        &json!({"cniVersion": "1.0.0", "name": "cni-loopback", "type": "loopback"}),
    );
    let (code, text) = validate(&setup, &bin_dir(), Some("mynet"));
    assert_eq!(code, 1);
    assert_eq!(
        text,
        format!(
            "PROBLEM: network \"mynet\": no net configuration with name \"mynet\" in {0}\n  fix: the networks there are cni-loopback; use one of those names, or put a file whose \"name\" is \"mynet\" in {0} (see conflist-examples/)\n1 problem, 0 warnings found\n",
            setup.netconf().display()
        )
    );
}

/// A runtime stops at the first file it cannot parse: `add` of a good
/// network behind it names that file and points to `validate`.
#[test]
fn add_behind_a_broken_file_names_it() {
    let setup = Setup::new();
    std::fs::write(
        setup.netconf().join("05-broken.conflist"),
        "{\n  \"name\": \"broken\"\n  \"plugins\": []\n}\n",
    )
    .unwrap();
    setup.write(
        "99-loopback.conf",
        &json!({"cniVersion": "1.0.0", "name": "cni-loopback", "type": "loopback"}),
    );
    let out = setup.cnitool(
        None,
        &bin_dir(),
        &["add", "cni-loopback", "/run/netns/whatever"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "cannot load network \"cni-loopback\": {}: error parsing configuration list: expected `,` or `}}` at line 3 column 3 (runtimes stop at the first configuration file they cannot parse, so this one breaks every network after it; run `cnitool validate` to see every problem)\n",
            setup.netconf().join("05-broken.conflist").display()
        )
    );
}

#[test]
fn commands_that_run_plugins_need_cni_path() {
    let setup = Setup::new();
    setup.write(
        "99-loopback.conf",
        &json!({"cniVersion": "1.0.0", "name": "cni-loopback", "type": "loopback"}),
    );
    for args in [
        vec!["add", "cni-loopback", "/run/netns/whatever"],
        vec!["status", "cni-loopback"],
        vec!["version", "loopback"],
    ] {
        let out = Command::new(CNITOOL)
            .args(&args)
            .env_clear()
            .env("NETCONFPATH", setup.netconf())
            .env("CNI_CACHE_DIR", setup.cache())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            "CNI_PATH is not set, so no plugin can be found: set it to the plugin directory, e.g. CNI_PATH=/opt/cni/bin\n",
            "{args:?}"
        );
    }
}

fn help(args: &[&str], cache_dir: Option<&str>) -> String {
    let mut cmd = Command::new(CNITOOL);
    cmd.args(args).arg("--help").env_clear();
    if let Some(dir) = cache_dir {
        cmd.env("CNI_CACHE_DIR", dir);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{args:?} --help");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn help_describes_arguments_and_shows_options_only_where_they_apply() {
    let top = help(&[], None);
    for line in [
        "  CNI_PATH       plugin directories, ':'-separated (required; e.g. /opt/cni/bin)",
        "Exit status: 0 on success, 1 when the operation failed or `validate` found a",
    ] {
        assert!(top.contains(line), "{top}");
    }
    for verb in ["add", "check", "del"] {
        for cache_dir in [None, Some("/tmp/elsewhere")] {
            let text = help(&[verb], cache_dir);
            assert!(
                text.contains("  <NETWORK>  The network's name: the \"name\" of a configuration file in NETCONFPATH"),
                "{text}"
            );
            assert!(
                text.contains(
                    "  <NETNS>    The pod's network namespace: a path such as /var/run/netns/pod1"
                ),
                "{text}"
            );
            assert!(text.contains("-i, --ifname <IFNAME>"), "{text}");
            // The variable is named, never its value (empty or not).
            assert!(
                text.contains("[env: CNI_CACHE_DIR] [default: /var/lib/cni]"),
                "{text}"
            );
            assert!(!text.contains("CNI_CACHE_DIR="), "{text}");
        }
    }
    let gc = help(&["gc"], None);
    assert!(gc.contains("--cache-dir"), "{gc}");
    assert!(!gc.contains("--ifname"), "{gc}");
    for verb in ["status", "version", "validate"] {
        let text = help(&[verb], None);
        assert!(!text.contains("--ifname"), "{verb}: {text}");
        assert!(!text.contains("--cache-dir"), "{verb}: {text}");
    }
    let validate = help(&["validate"], None);
    assert!(
        validate.contains("The exit status is 0 when no problem was found (warnings alone do not fail) and 1 when one was."),
        "{validate}"
    );
}

/// A config value of the wrong type: the error names its key path, as the
/// reference names the field, and ADD changes nothing in the pod.
#[test]
fn type_errors_name_the_key_path() {
    // The plugins run in a "host" namespace of the test's: bridge makes its
    // bridge before host-local reads the bad range, and in the machine's
    // own namespace that left `cnitestbr7` behind after every run.
    let host = TestNetns::new("ct-type-h");
    let pod = TestNetns::new("ct-type");
    let pod_path = pod.path().display().to_string();
    let cases = [
        (
            json!({"type": "bridge", "bridge": "cnitestbr7", "ipMasq": "yes"}),
            "plugin type=\"bridge\" name=\"typed\" failed (add): invalid network config: ipMasq: invalid type: string \"yes\", expected a boolean (CNI error code 7)",
        ),
        (
            json!({"type": "bridge", "bridge": "cnitestbr7",
                   "ipam": {"type": "host-local", "ranges": [[{"subnet": 5}]]}}),
            "plugin type=\"bridge\" name=\"typed\" failed (add): invalid network config: ipam.ranges[0][0].subnet: invalid type: integer `5`, expected a string (CNI error code 7)",
        ),
        (
            json!({"type": "macvlan", "master": "lo", "mtu": "9000"}),
            "plugin type=\"macvlan\" name=\"typed\" failed (add): failed to load netconf: mtu: invalid type: string \"9000\", expected i64 (CNI error code 7)",
        ),
        (
            json!({"type": "ipvlan", "master": "lo", "mtu": "9000"}),
            "plugin type=\"ipvlan\" name=\"typed\" failed (add): failed to load netconf: mtu: invalid type: string \"9000\", expected i64 (CNI error code 7)",
        ),
        (
            json!({"type": "vlan", "master": "lo", "vlanId": "100"}),
            "plugin type=\"vlan\" name=\"typed\" failed (add): failed to load netconf: vlanId: invalid type: string \"100\", expected i64 (CNI error code 7)",
        ),
        (
            json!({"type": "host-device", "device": 5}),
            "plugin type=\"host-device\" name=\"typed\" failed (add): failed to load netconf: device: invalid type: integer `5`, expected a string (CNI error code 7)",
        ),
    ];
    for (plugin, expected) in cases {
        let setup = Setup::new();
        setup.write(
            "10-typed.conflist",
            &json!({"cniVersion": "1.0.0", "name": "typed", "plugins": [plugin]}),
        );
        let out = setup.cnitool(Some(&host), &bin_dir(), &["add", "typed", &pod_path]);
        assert_eq!(out.status.code(), Some(1), "{plugin}");
        // cnitool's own message is the last line; plugins' log lines,
        // which also go to stderr, come before it.
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().last(), Some(expected), "{plugin}");
        assert_eq!(pod.links(), vec!["lo".to_string()], "{plugin}");
    }
}

/// Two networks on one bridge, or with overlapping ranges, break each
/// other on one node: validate of the folder says which.
#[test]
fn validate_warns_about_networks_sharing_a_bridge_or_range() {
    let setup = Setup::new();
    setup.write(
        "10-a.conflist",
        &json!({"cniVersion": "1.0.0", "name": "a", "plugins": [
            {"type": "bridge", "ipam": {"type": "host-local", "subnet": "10.77.0.0/16"}}
        ]}),
    );
    setup.write(
        "50-b.conf",
        &json!({"cniVersion": "1.0.0", "name": "b", "type": "bridge",
                "ipam": {"type": "host-local", "subnet": "10.77.5.0/24"}}),
    );
    let a = setup.netconf().join("10-a.conflist");
    let b = setup.netconf().join("50-b.conf");
    let (code, text) = validate(&setup, &bin_dir(), None);
    assert_eq!(code, 0, "warnings alone do not fail: {text}");
    let fix = "  fix: give each network a bridge and an address range of its own: on one node, a bridge shared with another subnet fails the second network's ADD (\"already has an IP address different from\"), and overlapping ranges hand out one address twice\n";
    assert_eq!(
        text,
        format!(
            "ok: network \"a\" ({a}): version 1.0.0, plugins bridge, host-local\n\
             ok: network \"b\" ({b}): version 1.0.0, plugins bridge, host-local\n\
             warning: network \"a\" ({a}) and network \"b\" ({b}) both use bridge cni0\n{fix}\
             warning: network \"a\" ({a}) (10.77.0.0/16) and network \"b\" ({b}) (10.77.5.0/24) overlap\n{fix}\
             0 problems, 2 warnings found\n",
            a = a.display(),
            b = b.display()
        )
    );
}
