//! tuning in a list, as a runtime runs it: our `cnitool` in a fake host
//! namespace drives our bridge + host-local, then tuning, with the MAC
//! given as a capability argument (`CAP_ARGS`, injected as
//! `runtimeConfig.mac` because the list declares the `mac` capability).

use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Output};

use conformance::testnet::{workspace_plugin, TestNetns};
use serde_json::{json, Value};

const TUNING: &str = env!("CARGO_BIN_EXE_tuning");
const POD_MAC: &str = "02:42:0a:58:00:99";

fn cnitool(
    host: &TestNetns,
    setup: &Path,
    plugins: &Path,
    args: &[&str],
    cap_args: &str,
) -> Output {
    Command::new("ip")
        .args(["netns", "exec", host.name()])
        .arg(workspace_plugin("cnitool"))
        .args(args)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        // The node's policy allows the test's scratch dataDir.
        .env(
            libcni::confine::POLICY_ENV,
            conformance::testnet::scratch_policy(),
        )
        .env("NETCONFPATH", setup.join("net.d"))
        .env("CNI_PATH", plugins)
        .env("CNI_CACHE_DIR", setup.join("cache"))
        .env("CAP_ARGS", cap_args)
        .output()
        .unwrap()
}

fn stdout_of(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed: stdout {} stderr {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn bridge_then_tuning_through_cnitool() {
    let host = TestNetns::new("tunch-h");
    let pod = TestNetns::new("tunch-p");
    let setup = tempfile::tempdir().unwrap();
    let plugins = setup.path().join("bin");
    std::fs::create_dir_all(setup.path().join("net.d")).unwrap();
    std::fs::create_dir_all(&plugins).unwrap();
    symlink(TUNING, plugins.join("tuning")).unwrap();
    for name in ["bridge", "host-local"] {
        symlink(workspace_plugin(name), plugins.join(name)).unwrap();
    }
    let list = json!({
        "cniVersion": "1.1.0",
        "name": "tunechain",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cnitunbr0",
                "isGateway": true,
                "ipam": {
                    "type": "host-local",
                    "subnet": "10.78.0.0/24",
                    "dataDir": setup.path().join("leases")
                }
            },
            {
                "type": "tuning",
                "capabilities": {"mac": true},
                "dataDir": setup.path().join("tuning"),
                "mtu": 1400,
                "sysctl": {"net.ipv4.conf.IFNAME.arp_notify": "1"}
            }
        ]
    });
    std::fs::write(
        setup.path().join("net.d/10-tunechain.conflist"),
        serde_json::to_vec_pretty(&list).unwrap(),
    )
    .unwrap();
    let pod_path = pod.path().display().to_string();
    let cap_args = json!({"mac": POD_MAC}).to_string();
    let run = |args: &[&str]| cnitool(&host, setup.path(), &plugins, args, &cap_args);

    let result: Value =
        serde_json::from_str(&stdout_of(&run(&["add", "tunechain", &pod_path]), "add")).unwrap();
    let eth0 = result["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "eth0" && i["sandbox"] == pod_path.as_str())
        .unwrap_or_else(|| panic!("no eth0 in {result}"));
    assert_eq!(eth0["mac"], POD_MAC);
    let link = &pod.ip_json(&["link", "show", "eth0"])[0];
    assert_eq!(link["address"], POD_MAC);
    assert_eq!(link["mtu"], 1400);
    let arp_notify = pod.exec("cat", &["/proc/sys/net/ipv4/conf/eth0/arp_notify"]);
    assert_eq!(String::from_utf8_lossy(&arp_notify.stdout).trim(), "1");
    // The pod still talks through the bridge with its new MAC.
    assert!(host.ping("10.78.0.2"), "host cannot ping the pod");

    stdout_of(&run(&["check", "tunechain", &pod_path]), "check");
    pod.ip(&["link", "set", "eth0", "mtu", "1500"]);
    let out = run(&["check", "tunechain", &pod_path]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("MTU of eth0 is 1400"),
        "{out:?}"
    );

    stdout_of(&run(&["del", "tunechain", &pod_path]), "del");
    assert!(!pod.links().contains(&"eth0".to_string()));
    let saved: Vec<_> = std::fs::read_dir(setup.path().join("tuning"))
        .map(|d| d.flatten().collect())
        .unwrap_or_default();
    assert!(saved.is_empty(), "{saved:?}");
    stdout_of(&run(&["del", "tunechain", &pod_path]), "second del");
}
