//! Real runtimes against our plugins: the Go `cnitool` (Go libcni, built
//! from Debian's source package) next to our `cnitool`, Podman with its
//! CNI backend, and the calls containerd's CRI plugin makes.
//!
//! Prerequisites are installed by conformance/scripts/ (CI runs those
//! too); a test skips, saying SKIPPED and why, only when they cannot be
//! had on this machine.

use std::path::{Path, PathBuf};
use std::process::Command;

use conformance::suite::cross_runtime::KNOWN;
use conformance::testnet::{bin_dir, REFERENCE_DIR};

const SUITE: &str = env!("CARGO_BIN_EXE_conformance");

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scripts")
        .join(name)
}

struct Run {
    code: i32,
    stdout: String,
}

impl Run {
    fn lines_starting(&self, prefix: &str) -> Vec<&str> {
        self.stdout
            .lines()
            .filter(|l| l.starts_with(prefix))
            .collect()
    }

    fn closing_line(&self) -> &str {
        self.stdout.lines().last().unwrap_or_default()
    }
}

fn conformance(args: &[&str]) -> Run {
    let out = Command::new(SUITE).args(args).output().unwrap();
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
    };
    eprintln!("{}", run.stdout);
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    run
}

/// Runs one of the scripts; its last stdout line, or why it failed.
fn run_script(name: &str) -> Result<String, String> {
    let out = Command::new("bash")
        .arg(script(name))
        .output()
        .map_err(|e| format!("cannot run {name}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{name} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string())
}

fn our_dir() -> PathBuf {
    let dir = bin_dir();
    for binary in ["loopback", "host-local", "bridge", "portmap", "cnitool"] {
        assert!(
            dir.join(binary).is_file(),
            "{binary} is not built in {}: run `cargo build --workspace` first",
            dir.display()
        );
    }
    dir
}

#[test]
fn go_cnitool_and_our_cnitool_agree_over_both_plugin_sets() {
    let ours = our_dir();
    if !Path::new(REFERENCE_DIR).join("bridge").is_file() {
        libcni::test_skip::skip(
            "go_cnitool_and_our_cnitool_agree_over_both_plugin_sets",
            &format!("the reference plugins are not installed in {REFERENCE_DIR}"),
        );
        return;
    }
    let go_cnitool = match run_script("build-go-cnitool.sh") {
        Ok(path) => path,
        Err(e) => {
            libcni::test_skip::skip(
                "go_cnitool_and_our_cnitool_agree_over_both_plugin_sets",
                &format!("the Go cnitool cannot be built here: {e}"),
            );
            return;
        }
    };
    let cnitool = ours.join("cnitool");
    let run = conformance(&[
        "cross-runtime",
        "--ours",
        ours.to_str().unwrap(),
        "--reference",
        REFERENCE_DIR,
        "--cnitool",
        cnitool.to_str().unwrap(),
        "--go-cnitool",
        &go_cnitool,
    ]);
    assert_eq!(run.lines_starting("FAIL"), Vec::<&str>::new());
    assert_eq!(run.code, 0);
    for side in ["our plugins", "reference plugins"] {
        let line = format!("ok    {side}: Go cnitool and our cnitool get the same ADD result");
        assert!(run.stdout.contains(&line), "missing: {line}");
        for tool in ["Go cnitool", "our cnitool"] {
            let line = format!("ok    {side} via {tool}: the published port reaches the pod");
            assert!(run.stdout.contains(&line), "missing: {line}");
        }
    }
    // Our plugins pass every CHECK; only the reference's known portmap
    // CHECK bug is excused.
    let mut known: Vec<&str> = run
        .lines_starting("known ")
        .iter()
        .map(|l| l.trim_start_matches("known ").split(" -- ").next().unwrap())
        .collect();
    known.sort();
    let mut listed: Vec<&str> = KNOWN.iter().map(|k| k.check_id).collect();
    listed.sort();
    assert_eq!(known, listed);
    let passed = run.lines_starting("ok").len();
    assert_eq!(run.closing_line(), format!("{passed} passed, 0 failed"));
}

#[test]
fn podman_runs_a_container_on_a_bridge_network_of_our_plugins() {
    let ours = our_dir();
    if !conformance::suite::podman::missing_prerequisites().is_empty() {
        if let Err(e) = run_script("install-runtime-deps.sh") {
            libcni::test_skip::skip(
                "podman_runs_a_container_on_a_bridge_network_of_our_plugins",
                &format!("Podman's prerequisites cannot be installed here: {e}"),
            );
            return;
        }
    }
    let missing = conformance::suite::podman::missing_prerequisites();
    if !missing.is_empty() {
        libcni::test_skip::skip(
            "podman_runs_a_container_on_a_bridge_network_of_our_plugins",
            &format!("still missing after installing: {}", missing.join(", ")),
        );
        return;
    }
    let run = conformance(&["podman", ours.to_str().unwrap()]);
    assert_eq!(run.lines_starting("FAIL"), Vec::<&str>::new());
    assert_eq!(run.code, 0);
    for line in [
        "ok    podman: the container answers on its IP from the host",
        "ok    podman: the published port answers from the host (bridge gateway address)",
        "ok    podman: the published port answers from 127.0.0.1",
        "ok    podman: the container reaches a client behind the host (FORWARD policy DROP: firewall's rules)",
        "ok    podman: no IP lease, veth or firewall rule is left after rm",
    ] {
        assert!(run.stdout.contains(line), "missing: {line}");
    }
    assert_eq!(run.closing_line(), "9 passed, 0 failed");
}

#[test]
fn what_containerd_sends_is_handled() {
    let ours = our_dir();
    let run = conformance(&[
        "suite",
        ours.to_str().unwrap(),
        "--only",
        "containerd,chain",
    ]);
    assert_eq!(run.lines_starting("FAIL"), Vec::<&str>::new());
    assert_eq!(run.code, 0);
    for line in [
        // loopback first, as its own network
        "ok    containerd (1.1.0): loopback first, as its own network `cni-loopback` (0.3.1, ifname lo)",
        // K8S_POD_* values in CNI_ARGS
        "ok    containerd (1.1.0): pod network ADD with K8S_POD_* and IgnoreUnknown=1 in CNI_ARGS",
        // capitalised port-mapping keys
        "ok    containerd (1.1.0): capitalised portMappings keys publish the port",
        "ok    chain bridge+portmap 1.1.0, keys HostPort/ContainerPort/Protocol/HostIP (containerd): the published port reaches the pod from the host",
        // DEL twice, the second with CNI_NETNS empty and no prevResult
        "ok    containerd (1.1.0): DEL at StopPodSandbox (netns and prevResult) succeeds",
        "ok    containerd (1.1.0): second DEL at RemovePodSandbox (CNI_NETNS empty, no prevResult) succeeds",
        "ok    containerd (1.1.0): nothing is left: no lease, no veth, no cached result",
    ] {
        assert!(run.stdout.contains(line), "missing: {line}");
    }
}
