//! The built `loopback` binary against network namespaces created here.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{json, Value};

const PLUGIN: &str = env!("CARGO_BIN_EXE_loopback");
const REFERENCE_PLUGIN: &str = "/usr/lib/cni/loopback";
const ALL_VERSIONS: [&str; 7] = [
    "0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0",
];

/// A named network namespace, deleted on drop.
struct TestNetns {
    name: String,
}

impl TestNetns {
    fn new(tag: &str) -> TestNetns {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "lo-{tag}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        ip(&["netns", "add", &name]);
        TestNetns { name }
    }

    fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }

    fn lo(&self) -> Value {
        let out = ip(&["-n", &self.name, "-j", "addr", "show", "dev", "lo"]);
        let v: Value = serde_json::from_str(&out).unwrap();
        v[0].clone()
    }

    fn lo_is_up(&self) -> bool {
        self.lo()["flags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "UP")
    }

    fn ip_link_lo_down(&self) {
        ip(&["-n", &self.name, "link", "set", "lo", "down"]);
    }

    fn set_lo_up(&self) {
        ip(&["-n", &self.name, "link", "set", "lo", "up"]);
    }
}

impl Drop for TestNetns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.name])
            .status();
    }
}

fn ip(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

struct Outcome {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Outcome {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}): {:?} / stderr {:?}",
                self.stdout, self.stderr
            )
        })
    }

    fn assert_ok_silent(&self) {
        assert_eq!(
            self.code, 0,
            "stdout {:?} stderr {:?}",
            self.stdout, self.stderr
        );
        assert_eq!(self.stdout, "");
    }

    fn assert_error(&self, code: u32) -> Value {
        assert_eq!(
            self.code, 1,
            "stdout {:?} stderr {:?}",
            self.stdout, self.stderr
        );
        let v = self.json();
        assert_eq!(v["code"], code, "{v}");
        v
    }
}

/// Runs `program` with exactly `env` (nothing inherited but PATH), the
/// argument list `args` and `stdin`.
fn run(program: &str, args: &[&str], env: &[(&str, &str)], stdin: &[u8]) -> Outcome {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(std::env::var_os("PATH").map(|p| ("PATH", p)))
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    // VERSION never reads stdin: a plugin that exits first closes the pipe.
    let _ = child.stdin.take().unwrap().write_all(stdin);
    let out = child.wait_with_output().unwrap();
    Outcome {
        code: out.status.code().expect("exited, not killed"),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn cni_env<'a>(command: &'a str, netns: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("CNI_COMMAND", command),
        ("CNI_CONTAINERID", "0123456789abcdef"),
        ("CNI_NETNS", netns),
        ("CNI_IFNAME", "lo"),
        ("CNI_PATH", "/opt/cni/bin"),
    ]
}

fn conf(version: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({"cniVersion": version, "name": "cni-loopback", "type": "loopback"}))
        .unwrap()
}

fn plugin(command: &str, netns: &str, stdin: &[u8]) -> Outcome {
    run(PLUGIN, &[], &cni_env(command, netns), stdin)
}

/// What the reference plugin reports, in each version's layout.
fn expected_add_result(version: &str, sandbox: &str) -> Value {
    match version {
        "0.1.0" | "0.2.0" => json!({
            "cniVersion": version,
            "ip4": {"ip": "127.0.0.1/8"},
            "ip6": {"ip": "::1/128"}
        }),
        "0.3.0" | "0.3.1" | "0.4.0" => json!({
            "cniVersion": version,
            "interfaces": [{"name": "lo", "mac": "00:00:00:00:00:00", "sandbox": sandbox}],
            "ips": [
                {"version": "4", "interface": 0, "address": "127.0.0.1/8"},
                {"version": "6", "interface": 0, "address": "::1/128"}
            ]
        }),
        _ => json!({
            "cniVersion": version,
            "interfaces": [{"name": "lo", "mac": "00:00:00:00:00:00", "sandbox": sandbox}],
            "ips": [
                {"interface": 0, "address": "127.0.0.1/8"},
                {"interface": 0, "address": "::1/128"}
            ]
        }),
    }
}

#[test]
fn add_brings_lo_up_and_reports_it_in_every_version() {
    for version in ALL_VERSIONS {
        let ns = TestNetns::new("add");
        assert!(!ns.lo_is_up(), "a new namespace starts with lo down");
        let out = plugin("ADD", &ns.path(), &conf(version));
        assert_eq!(out.code, 0, "{version}: {} {}", out.stdout, out.stderr);
        assert_eq!(
            out.json(),
            expected_add_result(version, &ns.path()),
            "{version}"
        );
        assert!(out.stdout.ends_with("}\n"));
        assert!(ns.lo_is_up(), "{version}: lo is up after ADD");
        // ADD again (a runtime retrying) changes nothing.
        let again = plugin("ADD", &ns.path(), &conf(version));
        assert_eq!(again.json(), out.json(), "{version}");
    }
}

#[test]
fn same_result_as_the_reference_plugin() {
    if !Path::new(REFERENCE_PLUGIN).exists() {
        libcni::test_skip::skip(
            "same_result_as_the_reference_plugin",
            &format!("{REFERENCE_PLUGIN} is not installed (containernetworking-plugins)"),
        );
        return;
    }
    // The Debian reference (1.1.1) speaks up to 1.0.0, and mislabels older
    // layouts, so 1.0.0 is the version both must print identically.
    let ns = TestNetns::new("ref");
    let path = ns.path();
    let env = cni_env("ADD", &path);
    let reference = run(REFERENCE_PLUGIN, &[], &env, &conf("1.0.0"));
    assert_eq!(reference.code, 0, "{}", reference.stdout);
    let ours = plugin("ADD", &ns.path(), &conf("1.0.0"));
    let mut expected = reference.json();
    // The reference prints an empty DNS object; the spec omits it.
    if expected["dns"] == json!({}) {
        expected.as_object_mut().unwrap().remove("dns");
    }
    assert_eq!(ours.json(), expected);
}

#[test]
fn containerd_call_succeeds() {
    let ns = TestNetns::new("ctrd");
    let path = ns.path();
    let mut env = cni_env("ADD", &path);
    let pod_args = "K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;\
                    K8S_POD_INFRA_CONTAINER_ID=0123456789abcdef;K8S_POD_UID=1d3c-42";
    env.push(("CNI_ARGS", pod_args));
    let out = run(
        PLUGIN,
        &[],
        &env,
        br#"{"cniVersion":"0.3.1","name":"cni-loopback","type":"loopback"}"#,
    );
    assert_eq!(out.json(), expected_add_result("0.3.1", &ns.path()));
    assert!(ns.lo_is_up());
}

#[test]
fn ifname_is_ignored_only_lo_is_touched() {
    let ns = TestNetns::new("ifn");
    let path = ns.path();
    let mut env = cni_env("ADD", &path);
    env.retain(|(k, _)| *k != "CNI_IFNAME");
    env.push(("CNI_IFNAME", "eth0"));
    let out = run(PLUGIN, &[], &env, &conf("1.1.0"));
    assert_eq!(out.json()["interfaces"][0]["name"], "lo");
    assert!(ns.lo_is_up());
}

#[test]
fn prev_result_is_passed_through() {
    let ns = TestNetns::new("prev");
    let prev = json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "mac": "0a:58:0a:01:02:03", "sandbox": ns.path()}],
        "ips": [{"interface": 0, "address": "10.1.2.3/24", "gateway": "10.1.2.1"}]
    });
    let config =
        json!({"cniVersion": "1.0.0", "name": "chain", "type": "loopback", "prevResult": prev});
    let out = plugin("ADD", &ns.path(), &serde_json::to_vec(&config).unwrap());
    assert_eq!(out.json(), prev);
    assert!(ns.lo_is_up(), "lo is still brought up");
    // Without its own version, the prevResult is in the config's version,
    // and the output is too.
    let config = json!({"cniVersion": "0.3.1", "name": "chain", "type": "loopback", "prevResult": {
        "ips": [{"version": "4", "address": "10.1.2.3/24"}]}});
    let out = plugin("ADD", &ns.path(), &serde_json::to_vec(&config).unwrap());
    assert_eq!(
        out.json(),
        json!({"cniVersion": "0.3.1", "ips": [{"version": "4", "address": "10.1.2.3/24"}]})
    );
    let config = json!({"cniVersion": "1.0.0", "name": "chain", "prevResult": {"ips": "x"}});
    plugin("ADD", &ns.path(), &serde_json::to_vec(&config).unwrap()).assert_error(6);
}

#[test]
fn del_sets_lo_down_and_can_repeat() {
    let ns = TestNetns::new("del");
    assert_eq!(plugin("ADD", &ns.path(), &conf("0.4.0")).code, 0);
    assert!(ns.lo_is_up());
    plugin("DEL", &ns.path(), &conf("0.4.0")).assert_ok_silent();
    assert!(!ns.lo_is_up());
    plugin("DEL", &ns.path(), &conf("0.4.0")).assert_ok_silent();
    assert!(!ns.lo_is_up());
}

#[test]
fn del_succeeds_when_the_namespace_is_gone() {
    let gone = TestNetns::new("gone");
    let path = gone.path();
    drop(gone);
    assert!(!Path::new(&path).exists());
    for version in ALL_VERSIONS {
        plugin("DEL", &path, &conf(version)).assert_ok_silent();
    }
    // containerd's second DEL has an empty CNI_NETNS.
    let mut env = cni_env("DEL", "");
    env.retain(|(k, _)| *k != "CNI_NETNS");
    run(PLUGIN, &[], &env, &conf("0.3.1")).assert_ok_silent();
    plugin("DEL", "", &conf("0.3.1")).assert_ok_silent();
    // An unmounted namespace leaves a plain file behind.
    let leftover = tempfile::NamedTempFile::new().unwrap();
    plugin("DEL", leftover.path().to_str().unwrap(), &conf("1.0.0")).assert_ok_silent();
}

#[test]
fn add_into_a_missing_or_bogus_namespace_fails() {
    let v = plugin("ADD", "/run/netns/lo-test-does-not-exist", &conf("0.3.1")).assert_error(3);
    assert_eq!(v["cniVersion"], "0.3.1");
    assert!(v["msg"].as_str().unwrap().contains("does not exist"), "{v}");
    plugin("ADD", "/etc/hostname", &conf("1.0.0")).assert_error(4);
}

#[test]
fn check_reports_lo_state() {
    let ns = TestNetns::new("chk");
    let v = plugin("CHECK", &ns.path(), &conf("1.0.0")).assert_error(999);
    assert_eq!(v["msg"], "loopback interface is down");
    assert_eq!(plugin("ADD", &ns.path(), &conf("1.0.0")).code, 0);
    plugin("CHECK", &ns.path(), &conf("1.0.0")).assert_ok_silent();
    plugin("CHECK", &ns.path(), &conf("0.4.0")).assert_ok_silent();
    plugin("CHECK", &ns.path(), &conf("0.3.1")).assert_error(1);
    plugin("DEL", &ns.path(), &conf("1.0.0")).assert_ok_silent();
    plugin("CHECK", &ns.path(), &conf("1.0.0")).assert_error(999);
}

#[test]
fn status_and_gc_succeed() {
    let env = [("CNI_COMMAND", "STATUS"), ("CNI_PATH", "/opt/cni/bin")];
    run(PLUGIN, &[], &env, &conf("1.1.0")).assert_ok_silent();
    let env = [("CNI_COMMAND", "GC"), ("CNI_PATH", "/opt/cni/bin")];
    let gc_conf = br#"{"cniVersion":"1.1.0","name":"cni-loopback","type":"loopback",
        "cni.dev/valid-attachments":[{"containerID":"x","ifname":"lo"}]}"#;
    run(PLUGIN, &[], &env, gc_conf).assert_ok_silent();
    run(PLUGIN, &[], &env, &conf("1.0.0")).assert_error(1);
}

#[test]
fn own_namespace_is_refused_unless_overridden() {
    let ns = TestNetns::new("own");
    let path = ns.path();
    let in_ns = ["netns", "exec", ns.name.as_str(), PLUGIN];
    // The plugin runs inside the namespace CNI_NETNS names.
    let out = run("ip", &in_ns, &cni_env("ADD", &path), &conf("1.0.0"));
    let v = out.assert_error(8);
    assert_eq!(
        v["msg"],
        "plugin's netns and netns from CNI_NETNS should not be the same"
    );
    assert!(!ns.lo_is_up(), "refused before touching lo");

    ns.set_lo_up();
    run("ip", &in_ns, &cni_env("DEL", &path), &conf("1.0.0")).assert_error(8);
    assert!(ns.lo_is_up(), "refused before touching lo");

    let mut env = cni_env("DEL", &path);
    env.push(("CNI_NETNS_OVERRIDE", "1"));
    run("ip", &in_ns, &env, &conf("1.0.0")).assert_ok_silent();
    assert!(!ns.lo_is_up());
    let mut env = cni_env("ADD", &path);
    env.push(("CNI_NETNS_OVERRIDE", "true"));
    let out = run("ip", &in_ns, &env, &conf("1.0.0"));
    assert_eq!(out.json(), expected_add_result("1.0.0", &path));
    assert!(ns.lo_is_up());

    // From the host, naming the host's own namespace (ADD only: a DEL that
    // slipped through would take the host's lo down).
    plugin("ADD", "/proc/self/ns/net", &conf("0.3.1")).assert_error(8);
}

#[test]
fn version_and_about() {
    let out = run(PLUGIN, &[], &[("CNI_COMMAND", "VERSION")], b"ignored");
    assert_eq!(out.code, 0);
    assert_eq!(
        out.stdout,
        "{\"cniVersion\":\"1.1.0\",\"supportedVersions\":[\"0.1.0\",\"0.2.0\",\"0.3.0\",\"0.3.1\",\"0.4.0\",\"1.0.0\",\"1.1.0\"]}\n"
    );
    let out = run(PLUGIN, &[], &[], b"");
    assert_eq!(out.code, 0);
    assert_eq!(out.stdout, "");
    assert_eq!(
        out.stderr,
        format!(
            "CNI loopback plugin v{} ({})\nCNI protocol versions supported: 0.1.0, 0.2.0, 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0\n",
            env!("CARGO_PKG_VERSION"),
            libcni::skel::build_description()
        )
    );
}

#[test]
fn logs_go_to_stderr_and_the_log_file_never_to_stdout() {
    let ns = TestNetns::new("log");
    let dir = tempfile::tempdir().unwrap();
    let log_file = dir.path().join("loopback.log");
    let path = ns.path();
    let mut env = cni_env("ADD", &path);
    env.push(("CNI_LOG_LEVEL", "debug"));
    let log_path = log_file.to_str().unwrap();
    env.push(("CNI_LOG_FILE", log_path));
    let out = run(PLUGIN, &[], &env, &conf("1.0.0"));
    assert_eq!(
        out.json(),
        expected_add_result("1.0.0", &path),
        "stdout holds only the result"
    );
    assert!(out.stderr.contains("set lo up in"), "{}", out.stderr);
    let logged = std::fs::read_to_string(&log_file).unwrap();
    assert!(logged.contains("DEBUG"), "{logged}");
    assert!(logged.contains("set lo up in"), "{logged}");
    // The file can come from the config instead; the default level is warn.
    let config = json!({"cniVersion":"1.0.0","name":"n","type":"loopback","logFile": log_path, "logLevel": "info"});
    // A configured file is opened only in an allowed log folder: a node
    // policy of the test's allows its folder.
    let policy = dir.path().join("policy.json");
    let allow = json!({"allow": {"logs": [dir.path()]}});
    std::fs::write(&policy, serde_json::to_vec(&allow).unwrap()).unwrap();
    // Not writable by others whatever the umask, or it is refused.
    std::fs::set_permissions(&policy, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let policy = policy.display().to_string();
    let mut env = cni_env("CHECK", "/run/netns/lo-test-does-not-exist");
    env.push((libcni::confine::POLICY_ENV, &policy));
    let out = run(PLUGIN, &[], &env, &serde_json::to_vec(&config).unwrap());
    assert_eq!(out.code, 1);
    let logged = std::fs::read_to_string(&log_file).unwrap();
    assert!(
        logged.contains("ERROR") && logged.contains("CHECK failed"),
        "{logged}"
    );
    let out = plugin("DEL", &path, &conf("1.0.0"));
    out.assert_ok_silent();
    assert_eq!(out.stderr, "", "quiet at the default level");
}

/// Without a capability the plugin needs, its error names that capability
/// (the kernel only says EPERM). Root with the capability dropped from its
/// bounding set, as `setpriv` runs it: entering the pod's namespace needs
/// CAP_SYS_ADMIN, bringing `lo` up there needs CAP_NET_ADMIN.
#[test]
fn missing_capabilities_are_named() {
    let ns = TestNetns::new("caps");
    ns.ip_link_lo_down();
    let netns = ns.path();
    for (capability, message) in [
        (
            "sys_admin",
            format!(
                "failed to switch to netns {netns:?}: EPERM: Operation not permitted (entering a \
                 network namespace needs CAP_SYS_ADMIN: run the plugin as root, as container \
                 runtimes do)"
            ),
        ),
        (
            "net_admin",
            "set link #1 up: EPERM: Operation not permitted (changing the network needs \
             CAP_NET_ADMIN: run the plugin as root, as container runtimes do)"
                .to_string(),
        ),
    ] {
        let drop = format!("-{capability}");
        let out = run(
            "setpriv",
            &["--bounding-set", &drop, "--inh-caps", &drop, PLUGIN],
            &cni_env("ADD", &netns),
            &conf("1.0.0"),
        );
        let error = out.assert_error(999);
        assert_eq!(error["msg"], message.as_str(), "without {capability}");
        assert!(!ns.lo_is_up(), "lo was brought up without {capability}");
    }
}
