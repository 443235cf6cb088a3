//! The real executor against small shell-script plugins, and delegation.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use libcni::conf::conflist_from_bytes;
use libcni::error::ToCniError;
use libcni::invoke::{
    exec_plugin_with_result, get_version_info, Delegator, Exec, InvokeError, PluginEnv, RawExec,
};
use libcni::runtime::{CniConfig, RuntimeConf};
use libcni::{ErrorCode, SpecVersion};
use serde_json::{json, Value};
use tempfile::TempDir;

struct Plugins {
    dir: TempDir,
    log: TempDir,
}

impl Plugins {
    fn new() -> Self {
        Plugins {
            dir: tempfile::tempdir().unwrap(),
            log: tempfile::tempdir().unwrap(),
        }
    }

    fn script(&self, name: &str, body: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// What every script runs with: a PATH for its tools and where to log.
    fn env(&self) -> PluginEnv {
        PluginEnv::new()
            .with("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .with("LOG_DIR", self.log.path())
    }

    fn logged(&self, name: &str) -> String {
        fs::read_to_string(self.log.path().join(name)).unwrap()
    }
}

fn quiet() -> RawExec {
    RawExec::new().with_forward_stderr(false)
}

/// Records its environment and stdin, logs to stderr, prints a result.
const RECORDING_PLUGIN: &str = r#"
env > "$LOG_DIR/env"
cat > "$LOG_DIR/stdin"
echo "plugin log line" >&2
printf '{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24"}]}'
"#;

#[test]
fn plugin_gets_exactly_the_given_environment_and_stdin() {
    let p = Plugins::new();
    let plugin = p.script("recorder", RECORDING_PLUGIN);
    let env = p
        .env()
        .with("CNI_COMMAND", "ADD")
        .with("CNI_IFNAME", "eth0");
    let conf = br#"{"cniVersion":"1.0.0","name":"n","type":"recorder"}"#;
    let result = exec_plugin_with_result(&quiet(), &plugin, conf, &env).unwrap();
    assert_eq!(result.version(), SpecVersion::V1_0_0);
    assert_eq!(result.to_value()["ips"][0]["address"], "10.0.0.2/24");

    assert_eq!(p.logged("stdin").as_bytes(), conf);
    let seen = p.logged("env");
    assert!(seen.lines().any(|l| l == "CNI_COMMAND=ADD"));
    assert!(seen.lines().any(|l| l == "CNI_IFNAME=eth0"));
    // Nothing of the test process leaks in.
    assert!(!seen.lines().any(|l| l.starts_with("HOME=")));
    assert!(!seen.lines().any(|l| l.starts_with("CARGO")));
}

#[test]
fn plugin_error_object_keeps_its_code() {
    let p = Plugins::new();
    let plugin = p.script(
        "busy",
        r#"echo "debug output" >&2
printf '{"code":11,"msg":"try again later","details":"store locked"}'
exit 1"#,
    );
    let err = quiet().exec_plugin(&plugin, b"{}", &p.env()).unwrap_err();
    let cni = err.plugin_error().expect("plugin error object");
    assert_eq!(cni.code, ErrorCode::TryAgainLater);
    assert_eq!(cni.msg, "try again later");
    assert_eq!(err.to_string(), "try again later; store locked");
}

#[test]
fn failures_without_an_error_object() {
    let p = Plugins::new();
    let stderr_only = p.script("stderr-only", "echo 'something broke' >&2\nexit 3");
    let err = quiet()
        .exec_plugin(&stderr_only, b"{}", &p.env())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "netplugin failed: \"something broke\\n\": exit status 3"
    );

    let silent = p.script("silent", "exit 2");
    let err = quiet().exec_plugin(&silent, b"{}", &p.env()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "netplugin failed with no error message: exit status 2"
    );

    let garbage = p.script("garbage", "echo 'not json'\nexit 1");
    let err = quiet().exec_plugin(&garbage, b"{}", &p.env()).unwrap_err();
    assert!(
        err.to_string().starts_with(
            "netplugin failed but error parsing its diagnostic message \"not json\\n\": "
        ),
        "{err}"
    );

    // Pipes closed well before the exit (as a plugin whose last act is
    // closing a netlink socket): its exit status still decides.
    let late = p.script("late-exit", "exec >&- 2>&- <&-\nsleep 0.3\nexit 4");
    let err = quiet().exec_plugin(&late, b"{}", &p.env()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "netplugin failed with no error message: exit status 4"
    );

    let killed = p.script("killed", "kill -9 $$");
    let err = quiet().exec_plugin(&killed, b"{}", &p.env()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "netplugin failed with no error message: signal: 9"
    );
}

#[test]
fn result_without_version_or_null_is_fixed_up() {
    let p = Plugins::new();
    let conf = br#"{"cniVersion":"0.4.0","name":"n","type":"t"}"#;
    let no_version = p.script(
        "no-version",
        r#"printf '{"ips":[{"version":"4","address":"10.0.0.2/24"}]}'"#,
    );
    let r = exec_plugin_with_result(&quiet(), &no_version, conf, &p.env()).unwrap();
    assert_eq!(r.version(), SpecVersion::V0_4_0);
    assert_eq!(r.to_value()["ips"][0]["version"], "4");

    let null = p.script("null", "echo null");
    let r = exec_plugin_with_result(&quiet(), &null, conf, &p.env()).unwrap();
    assert_eq!(r.to_value(), json!({"cniVersion": "0.4.0"}));

    let nothing = p.script("nothing", "true");
    assert!(matches!(
        exec_plugin_with_result(&quiet(), &nothing, conf, &p.env()),
        Err(InvokeError::ResultJson(_))
    ));
}

fn is_dead(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // A zombie is dead; it waits for a parent that may not reap it.
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .map(|rest| rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
    }
}

#[test]
fn a_plugin_past_its_timeout_is_killed_with_its_children() {
    let p = Plugins::new();
    let plugin = p.script(
        "hang",
        r#"sleep 300 &
echo $! > "$LOG_DIR/child"
echo $$ > "$LOG_DIR/self"
sleep 300"#,
    );
    let exec = quiet().with_timeout(Duration::from_millis(500));
    let err = exec.exec_plugin(&plugin, b"{}", &p.env()).unwrap_err();
    assert!(matches!(err, InvokeError::Timeout { .. }), "{err}");
    assert!(err.to_string().contains("did not finish within 500ms"));

    let pid = |name: &str| p.logged(name).trim().parse::<u32>().unwrap();
    let (plugin_pid, child_pid) = (pid("self"), pid("child"));
    // The plugin is reaped before the call returns; its background child
    // got the same SIGKILL and dies as soon as the kernel delivers it.
    assert!(is_dead(plugin_pid));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !is_dead(child_pid) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(is_dead(child_pid), "background child {child_pid} survived");
}

#[test]
fn text_file_busy_is_retried() {
    let p = Plugins::new();
    let plugin = p.script("busy-binary", "echo '{}'");
    // Holding the file open for writing makes exec fail with ETXTBSY, as
    // during a package upgrade; it is released while the runtime retries.
    let writer = fs::OpenOptions::new().write(true).open(&plugin).unwrap();
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        drop(writer);
    });
    let out = quiet().exec_plugin(&plugin, b"{}", &p.env()).unwrap();
    assert_eq!(out, b"{}\n");
    releaser.join().unwrap();

    // Never released: the error says why.
    let _writer = fs::OpenOptions::new().write(true).open(&plugin).unwrap();
    let err = quiet().exec_plugin(&plugin, b"{}", &p.env()).unwrap_err();
    match err {
        InvokeError::Spawn { source, .. } => {
            assert_eq!(source.raw_os_error(), Some(libc::ETXTBSY))
        }
        other => panic!("unexpected {other}"),
    }
}

#[test]
fn a_non_executable_plugin_is_a_spawn_error() {
    let p = Plugins::new();
    let plugin = p.dir.path().join("not-exec");
    fs::write(&plugin, "#!/bin/sh\necho hi\n").unwrap();
    let err = quiet().exec_plugin(&plugin, b"{}", &p.env()).unwrap_err();
    assert!(matches!(err, InvokeError::Spawn { .. }));
    assert!(err.to_string().starts_with("failed to execute plugin "));
}

#[test]
fn large_input_and_output_do_not_deadlock() {
    let p = Plugins::new();
    let big = vec![b'x'; 4 << 20];
    let echo = p.script("echo", "cat");
    assert_eq!(quiet().exec_plugin(&echo, &big, &p.env()).unwrap(), big);
    // A plugin that never reads its stdin.
    let deaf = p.script("deaf", "echo done");
    assert_eq!(
        quiet().exec_plugin(&deaf, &big, &p.env()).unwrap(),
        b"done\n"
    );
}

#[test]
fn version_probe_against_real_scripts() {
    let p = Plugins::new();
    let modern = p.script(
        "modern",
        r#"[ "$CNI_COMMAND" = VERSION ] || exit 9
[ "$CNI_NETNS" = dummy ] && [ "$CNI_IFNAME" = dummy ] && [ "$CNI_PATH" = dummy ] || exit 8
cat > "$LOG_DIR/version-stdin"
printf '{"cniVersion":"1.1.0","supportedVersions":["0.4.0","1.0.0","1.1.0"]}'"#,
    );
    let info = get_version_info(&quiet(), &modern, &p.env()).unwrap();
    assert_eq!(info.supported_versions, vec!["0.4.0", "1.0.0", "1.1.0"]);
    assert_eq!(p.logged("version-stdin"), r#"{"cniVersion":"1.1.0"}"#);

    let ancient = p.script(
        "ancient",
        r#"printf '{"code":4,"msg":"unknown CNI_COMMAND: VERSION"}'
exit 1"#,
    );
    let info = get_version_info(&quiet(), &ancient, &p.env()).unwrap();
    assert_eq!(info.supported_versions, vec!["0.1.0"]);
}

/// A fake IPAM plugin: records what it got and answers ADD.
const FAKE_IPAM: &str = r#"
env > "$LOG_DIR/ipam-env-$CNI_COMMAND"
cat > "$LOG_DIR/ipam-stdin-$CNI_COMMAND"
case "$CNI_COMMAND" in
ADD) printf '{"ips":[{"address":"10.9.0.7/24","gateway":"10.9.0.1"}]}' ;;
CHECK) printf '{"code":117,"msg":"lease lost"}'; exit 1 ;;
esac
"#;

#[test]
fn delegation_passes_the_callers_environment_and_whole_config() {
    let p = Plugins::new();
    p.script("fake-ipam", FAKE_IPAM);
    let caller_env = p
        .env()
        .with("CNI_COMMAND", "ADD")
        .with("CNI_CONTAINERID", "ctr1")
        .with("CNI_NETNS", "/run/netns/ctr1")
        .with("CNI_IFNAME", "eth0")
        .with("CNI_ARGS", "IgnoreUnknown=1")
        .with(
            "CNI_PATH",
            format!("/nonexistent:{}", p.dir.path().display()),
        )
        .with("SOMETHING_ELSE", "kept");
    let delegator = Delegator::new(quiet(), caller_env.clone());
    let conf = json!({
        "cniVersion": "1.0.0",
        "name": "net",
        "type": "bridge",
        "bridge": "cni0",
        "ipam": {"type": "fake-ipam", "subnet": "10.9.0.0/24"}
    })
    .to_string();

    let result = delegator.add("fake-ipam", conf.as_bytes()).unwrap();
    assert_eq!(result.version(), SpecVersion::V1_0_0);
    assert_eq!(result.to_value()["ips"][0]["address"], "10.9.0.7/24");
    assert_eq!(p.logged("ipam-stdin-ADD"), conf);

    delegator.del("fake-ipam", conf.as_bytes()).unwrap();
    delegator.gc("fake-ipam", conf.as_bytes()).unwrap();
    delegator.status("fake-ipam", conf.as_bytes()).unwrap();
    for command in ["ADD", "DEL", "GC", "STATUS"] {
        let env: Vec<String> = p
            .logged(&format!("ipam-env-{command}"))
            .lines()
            .map(str::to_string)
            .collect();
        // Only CNI_COMMAND differs from the caller's environment, and the
        // delegate is told who called it (CNI_RS_DELEGATED_BY, the calling
        // program's name, for its log lines).
        let caller = std::env::current_exe()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_default();
        let mut expected: Vec<String> = caller_env
            .clone()
            .with("CNI_COMMAND", command)
            .with("CNI_RS_DELEGATED_BY", &caller)
            .iter()
            .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
            .collect();
        let mut seen: Vec<String> = env
            .into_iter()
            // The shell adds its own few variables.
            .filter(|l| !l.starts_with("PWD=") && !l.starts_with("SHLVL=") && !l.starts_with("_="))
            .collect();
        expected.sort();
        seen.sort();
        assert_eq!(seen, expected, "{command}");
        assert_eq!(p.logged(&format!("ipam-stdin-{command}")), conf);
    }

    // The delegate's error reaches the caller with its code.
    let err = delegator.check("fake-ipam", conf.as_bytes()).unwrap_err();
    assert_eq!(err.to_cni_error().code, ErrorCode::Other(117));
    assert_eq!(err.to_string(), "lease lost");

    let err = delegator.add("absent-ipam", conf.as_bytes()).unwrap_err();
    assert!(matches!(err, InvokeError::PluginNotFound { .. }));

    // No CNI_PATH, no delegate.
    let lost = Delegator::new(quiet(), p.env());
    assert!(matches!(
        lost.add("fake-ipam", conf.as_bytes()),
        Err(InvokeError::NoPaths)
    ));
}

#[test]
fn a_network_list_end_to_end_with_real_processes() {
    let p = Plugins::new();
    let cache = tempfile::tempdir().unwrap();
    p.script(
        "main-plugin",
        r#"cat > "$LOG_DIR/main-$CNI_COMMAND"
[ "$CNI_COMMAND" = ADD ] && printf '{"cniVersion":"1.1.0","interfaces":[{"name":"eth0","sandbox":"%s"}],"ips":[{"address":"10.0.0.2/24","interface":0}]}' "$CNI_NETNS"
exit 0"#,
    );
    p.script(
        "chained",
        r#"cat > "$LOG_DIR/chained-$CNI_COMMAND"
[ "$CNI_COMMAND" = ADD ] && sed -n 's/.*"prevResult":\({.*}\),"runtimeConfig".*/\1/p' "$LOG_DIR/chained-ADD"
exit 0"#,
    );
    let list = conflist_from_bytes(
        json!({
            "cniVersion": "1.1.0",
            "name": "e2e",
            "plugins": [
                {"type": "main-plugin"},
                {"type": "chained", "capabilities": {"portMappings": true}}
            ]
        })
        .to_string()
        .as_bytes(),
    )
    .unwrap();
    let cni = CniConfig::with_exec(vec![p.dir.path().to_path_buf()], quiet())
        .with_cache_dir(cache.path())
        .with_base_env(p.env());
    let mut rt = RuntimeConf {
        container_id: "e2e-ctr".into(),
        netns: "/run/netns/e2e".into(),
        ifname: "eth0".into(),
        ..RuntimeConf::default()
    };
    rt.capability_args.insert(
        "portMappings".into(),
        json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]),
    );

    let result = cni.add_network_list(&list, &rt).unwrap();
    let v = result.to_value();
    assert_eq!(v["interfaces"][0]["sandbox"], "/run/netns/e2e");
    let chained_in: Value = serde_json::from_str(&p.logged("chained-ADD")).unwrap();
    assert_eq!(chained_in["prevResult"], v);
    assert_eq!(
        chained_in["runtimeConfig"]["portMappings"][0]["hostPort"],
        8080
    );
    assert!(cache.path().join("results/e2e-e2e-ctr-eth0").exists());

    cni.check_network_list(&list, &rt).unwrap();
    cni.get_status_network_list(&list).unwrap();
    assert_eq!(
        cni.validate_network_list(&list)
            .unwrap_err()
            .to_string()
            .lines()
            .count(),
        2
    );

    rt.capability_args.clear();
    cni.del_network_list(&list, &rt).unwrap();
    let chained_del: Value = serde_json::from_str(&p.logged("chained-DEL")).unwrap();
    assert_eq!(chained_del["prevResult"], v);
    assert_eq!(
        chained_del["runtimeConfig"]["portMappings"][0]["containerPort"],
        80
    );
    assert!(!cache.path().join("results/e2e-e2e-ctr-eth0").exists());
}
