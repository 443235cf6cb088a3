//! The skeleton driven through injected environment and streams, with a
//! fake plugin that records its calls.

use std::cell::RefCell;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use serde_json::{json, Value};

use super::*;
use crate::types::{v100, Dns};

const FULL_VERSION_LIST: &str = "0.1.0, 0.2.0, 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0";

#[derive(Debug, thiserror::Error)]
enum FakeError {
    #[error("fake plugin refused: {0}")]
    Refused(String),
    #[error("{0}")]
    Spec(CniError),
}

impl ToCniError for FakeError {
    fn to_cni_error(&self) -> CniError {
        match self {
            FakeError::Refused(why) => {
                CniError::new(ErrorCode::Other(120), self.to_string()).with_details(why.clone())
            }
            FakeError::Spec(e) => e.clone(),
        }
    }
}

/// What the fake plugin does when called.
#[derive(Clone)]
enum Behaviour {
    Succeed,
    Refuse,
    SpecError(CniError),
    Panic,
}

struct Fake {
    versions: Vec<SpecVersion>,
    about: String,
    result: AnyResult,
    behaviour: Behaviour,
    calls: RefCell<Vec<CmdArgs>>,
}

impl Fake {
    fn new() -> Fake {
        Fake {
            versions: SpecVersion::ALL.to_vec(),
            about: about_string("fake", "1.2.3"),
            result: AnyResult::V1(sample_result()),
            behaviour: Behaviour::Succeed,
            calls: RefCell::new(Vec::new()),
        }
    }

    fn with_result(result: v100::Result) -> Fake {
        Fake {
            result: AnyResult::V1(result),
            ..Fake::new()
        }
    }

    fn with_behaviour(behaviour: Behaviour) -> Fake {
        Fake {
            behaviour,
            ..Fake::new()
        }
    }

    fn with_versions(versions: &[SpecVersion]) -> Fake {
        Fake {
            versions: versions.to_vec(),
            ..Fake::new()
        }
    }

    fn commands_called(&self) -> Vec<Command> {
        self.calls.borrow().iter().map(|c| c.command).collect()
    }

    fn called(&self, args: &CmdArgs) -> Result<(), FakeError> {
        self.calls.borrow_mut().push(args.clone());
        match &self.behaviour {
            Behaviour::Succeed => Ok(()),
            Behaviour::Refuse => Err(FakeError::Refused("no reason".into())),
            Behaviour::SpecError(e) => Err(FakeError::Spec(e.clone())),
            Behaviour::Panic => panic!("fake plugin bug"),
        }
    }
}

impl Plugin for Fake {
    type Error = FakeError;

    fn about(&self) -> String {
        self.about.clone()
    }

    fn supported_versions(&self) -> &[SpecVersion] {
        &self.versions
    }

    fn add(&self, args: &CmdArgs) -> Result<AnyResult, FakeError> {
        self.called(args)?;
        Ok(self.result.clone())
    }

    fn del(&self, args: &CmdArgs) -> Result<(), FakeError> {
        self.called(args)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), FakeError> {
        self.called(args)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), FakeError> {
        self.called(args)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), FakeError> {
        self.called(args)
    }
}

/// A plugin relying on every default method.
struct Minimal;

impl Plugin for Minimal {
    type Error = CniError;

    fn about(&self) -> String {
        String::new()
    }

    fn add(&self, _args: &CmdArgs) -> Result<AnyResult, CniError> {
        Ok(AnyResult::V1(v100::Result::new()))
    }

    fn del(&self, _args: &CmdArgs) -> Result<(), CniError> {
        Ok(())
    }
}

fn sample_result() -> v100::Result {
    v100::Result {
        cni_version: SpecVersion::V1_1_0,
        interfaces: vec![v100::Interface {
            name: "eth0".into(),
            mac: "0a:58:0a:00:00:02".into(),
            mtu: 1500,
            sandbox: "/var/run/netns/test".into(),
            ..v100::Interface::default()
        }],
        ips: vec![
            v100::IpConfig {
                interface: Some(0),
                address: "10.0.0.2/24".parse().unwrap(),
                gateway: Some("10.0.0.1".parse().unwrap()),
            },
            v100::IpConfig {
                interface: Some(0),
                address: "fd00::2/64".parse().unwrap(),
                gateway: None,
            },
        ],
        routes: vec![crate::types::Route::new(
            "0.0.0.0/0".parse().unwrap(),
            Some("10.0.0.1".parse().unwrap()),
        )],
        dns: Dns::default(),
    }
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {:?}", self.stdout))
    }

    /// Asserts a spec error with `code` and `msg`; returns the error JSON.
    fn assert_error(&self, code: u32, msg: &str) -> Value {
        assert_eq!(self.code, 1, "exit status; stdout {:?}", self.stdout);
        let v = self.json();
        assert_eq!(v["code"], code, "{v}");
        assert_eq!(v["msg"], msg, "{v}");
        v
    }

    fn assert_silent_success(&self) {
        assert_eq!(self.code, 0, "stdout {:?}", self.stdout);
        assert_eq!(self.stdout, "", "nothing on stdout");
    }
}

fn run_env<P: Plugin>(plugin: &P, env: &dyn Env, stdin: &[u8]) -> Run {
    let mut stdin = stdin;
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let code = run_dispatch(
        plugin,
        env,
        &mut stdin,
        &mut stdout,
        &mut stderr,
        LoggerSetup::Skip,
    );
    Run {
        code,
        stdout: String::from_utf8(stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

fn run<P: Plugin>(plugin: &P, vars: &[(&str, &str)], stdin: &[u8]) -> Run {
    run_env(plugin, &vars.to_vec(), stdin)
}

/// Every variable any command uses, for `command`.
fn full_env(command: &str) -> Vec<(&str, &str)> {
    vec![
        ("CNI_COMMAND", command),
        ("CNI_CONTAINERID", "ctr-0123.a_b"),
        ("CNI_NETNS", "/var/run/netns/skel-test-absent"),
        ("CNI_IFNAME", "eth0"),
        ("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAME=web"),
        ("CNI_PATH", "/opt/cni/bin::/usr/lib/cni"),
    ]
}

fn without<'a>(env: &[(&'a str, &'a str)], name: &str) -> Vec<(&'a str, &'a str)> {
    env.iter().filter(|(k, _)| *k != name).copied().collect()
}

fn with<'a>(env: &[(&'a str, &'a str)], name: &'a str, value: &'a str) -> Vec<(&'a str, &'a str)> {
    let mut env = without(env, name);
    env.push((name, value));
    env
}

fn conf(version: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({"cniVersion": version, "name": "testnet", "type": "fake"})).unwrap()
}

const ALL_COMMANDS: [&str; 6] = ["ADD", "CHECK", "DEL", "GC", "STATUS", "VERSION"];
const OPTIONAL_OR_REQUIRED_VARS: [&str; 6] = [
    "CNI_CONTAINERID",
    "CNI_NETNS",
    "CNI_IFNAME",
    "CNI_ARGS",
    "CNI_PATH",
    "CNI_NETNS_OVERRIDE",
];

/// The Go skeleton's table (checklist 1.4), in its order.
fn required_vars(command: &str) -> Vec<&'static str> {
    match command {
        "ADD" | "CHECK" => vec!["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"],
        "DEL" => vec!["CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH"],
        "GC" | "STATUS" => vec!["CNI_PATH"],
        "VERSION" => vec![],
        other => panic!("no such command {other}"),
    }
}

#[test]
fn every_command_succeeds_with_full_environment() {
    for command in ALL_COMMANDS {
        let fake = Fake::new();
        let r = run(&fake, &full_env(command), &conf("1.1.0"));
        assert_eq!(r.code, 0, "{command}: {}", r.stdout);
        match command {
            "ADD" => assert_eq!(r.json()["cniVersion"], "1.1.0"),
            "VERSION" => assert_eq!(r.json()["cniVersion"], "1.1.0"),
            _ => assert_eq!(r.stdout, "", "{command} prints nothing on success"),
        }
        let expected: Vec<Command> = match command {
            "VERSION" => vec![],
            c => vec![Command::parse(c).unwrap()],
        };
        assert_eq!(fake.commands_called(), expected, "{command}");
        assert_eq!(r.stderr, "", "{command} is quiet on stderr");
    }
}

#[test]
fn each_missing_required_variable_is_named() {
    for command in ALL_COMMANDS {
        let required = required_vars(command);
        for var in OPTIONAL_OR_REQUIRED_VARS {
            for env in [
                without(&full_env(command), var),
                with(&full_env(command), var, ""),
            ] {
                let fake = Fake::new();
                let r = run(&fake, &env, &conf("1.1.0"));
                if required.contains(&var) {
                    let v = r.assert_error(4, &format!("required env variables [{var}] missing"));
                    assert!(v.get("cniVersion").is_none(), "version unknown yet: {v}");
                    assert!(fake.commands_called().is_empty());
                } else {
                    assert_eq!(r.code, 0, "{command} without {var}: {}", r.stdout);
                }
            }
        }
    }
}

#[test]
fn all_missing_variables_are_reported_together_in_order() {
    for command in ALL_COMMANDS {
        let r = run(&Fake::new(), &[("CNI_COMMAND", command)], &conf("1.1.0"));
        let required = required_vars(command);
        if required.is_empty() {
            assert_eq!(r.code, 0, "{command}");
        } else {
            r.assert_error(
                4,
                &format!("required env variables [{}] missing", required.join(",")),
            );
        }
    }
}

#[test]
fn command_specific_variables_reach_the_plugin() {
    let fake = Fake::new();
    let env = with(&full_env("ADD"), "CNI_NETNS_OVERRIDE", "TRUE");
    let r = run(&fake, &env, &conf("0.4.0"));
    assert_eq!(r.code, 0, "{}", r.stdout);
    let calls = fake.calls.borrow();
    let args = &calls[0];
    assert_eq!(args.command, Command::Add);
    assert_eq!(args.container_id, "ctr-0123.a_b");
    assert_eq!(args.netns, "/var/run/netns/skel-test-absent");
    assert_eq!(
        args.netns_path(),
        Some(Path::new("/var/run/netns/skel-test-absent"))
    );
    assert_eq!(args.ifname, "eth0");
    assert_eq!(args.args, "IgnoreUnknown=1;K8S_POD_NAME=web");
    assert_eq!(
        args.parse_args(&[]).unwrap().get("K8S_POD_NAME"),
        Some("web")
    );
    assert_eq!(
        args.path,
        vec![PathBuf::from("/opt/cni/bin"), PathBuf::from("/usr/lib/cni")]
    );
    assert!(args.netns_override);
    assert_eq!(args.stdin_data, conf("0.4.0"));
    assert_eq!(args.conf.bytes(), conf("0.4.0").as_slice());
    assert_eq!(args.version(), SpecVersion::V0_4_0);
    assert_eq!(args.conf.name, "testnet");
    assert_eq!(args.conf.plugin_type, "fake");
}

#[test]
fn gc_and_status_do_not_read_attachment_variables() {
    for command in ["GC", "STATUS"] {
        let fake = Fake::new();
        // Values that would be refused if they were looked at.
        let env = vec![
            ("CNI_COMMAND", command),
            ("CNI_CONTAINERID", "bad id!"),
            ("CNI_IFNAME", "way-too-long-interface"),
            ("CNI_NETNS", "/proc/self/ns/net"),
            ("CNI_PATH", "/opt/cni/bin"),
        ];
        let r = run(&fake, &env, &conf("1.1.0"));
        r.assert_silent_success();
        let calls = fake.calls.borrow();
        assert_eq!(calls[0].container_id, "");
        assert_eq!(calls[0].ifname, "");
        assert_eq!(calls[0].netns, "");
    }
}

#[test]
fn del_without_netns_succeeds() {
    let fake = Fake::new();
    let env = without(&full_env("DEL"), "CNI_NETNS");
    let r = run(&fake, &env, &conf("0.3.1"));
    r.assert_silent_success();
    assert_eq!(fake.calls.borrow()[0].netns_path(), None);
}

#[test]
fn unknown_commands_are_refused_before_anything_else() {
    for command in ["add", "Add", "FOO", "VERSION ", "del"] {
        let fake = Fake::new();
        // Even with a garbage stdin and no other variables.
        let r = run(&fake, &[("CNI_COMMAND", command)], b"\x00garbage");
        r.assert_error(4, &format!("unknown CNI_COMMAND: {command}"));
        assert!(fake.commands_called().is_empty());
    }
    let env: Vec<(&str, OsString)> = vec![("CNI_COMMAND", OsString::from_vec(b"AD\xffD".to_vec()))];
    let r = run_env(&Fake::new(), &env, b"");
    r.assert_error(4, "unknown CNI_COMMAND: AD\u{fffd}D");
}

#[test]
fn no_command_prints_about_on_stderr() {
    for env in [vec![], vec![("CNI_COMMAND", "")]] {
        let r = run(&Fake::new(), &env, b"");
        assert_eq!(r.code, 0);
        assert_eq!(r.stdout, "");
        assert_eq!(
            r.stderr,
            format!(
                "CNI fake plugin v1.2.3 ({})\nCNI protocol versions supported: {FULL_VERSION_LIST}\n",
                build_description()
            )
        );
    }
    let r = run(
        &Fake::with_versions(&[SpecVersion::V0_3_1, SpecVersion::V1_0_0]),
        &[],
        b"",
    );
    assert!(
        r.stderr
            .ends_with("CNI protocol versions supported: 0.3.1, 1.0.0\n"),
        "{}",
        r.stderr
    );
}

#[test]
fn no_command_without_about_is_an_error() {
    let r = run(&Minimal, &[], b"");
    r.assert_error(4, "required env variables [CNI_COMMAND] missing");
    assert_eq!(r.stderr, "");
}

#[test]
fn version_ignores_stdin_and_other_variables() {
    for stdin in [&b""[..], b"\xff\xfe not json", br#"{"cniVersion":"0.2.0"}"#] {
        let env = [
            ("CNI_COMMAND", "VERSION"),
            ("CNI_CONTAINERID", ""),
            ("CNI_NETNS", "dummy"),
            ("CNI_IFNAME", "dummy"),
            ("CNI_PATH", "dummy"),
        ];
        let r = run(&Fake::new(), &env, stdin);
        assert_eq!(r.code, 0);
        assert_eq!(
            r.stdout,
            "{\"cniVersion\":\"1.1.0\",\"supportedVersions\":[\"0.1.0\",\"0.2.0\",\"0.3.0\",\"0.3.1\",\"0.4.0\",\"1.0.0\",\"1.1.0\"]}\n"
        );
    }
    let env: Vec<(&str, OsString)> = vec![
        ("CNI_COMMAND", "VERSION".into()),
        ("CNI_IFNAME", OsString::from_vec(vec![0xff])),
    ];
    let r = run_env(&Fake::with_versions(&[SpecVersion::V0_4_0]), &env, b"");
    assert_eq!(r.code, 0);
    assert_eq!(
        r.json(),
        json!({"cniVersion":"1.1.0","supportedVersions":["0.4.0"]})
    );
}

#[test]
fn container_id_validation() {
    for bad in ["bad id!", "-leading-dash", ".dot", "a/b", "ä", "a\nb"] {
        let env = with(&full_env("ADD"), "CNI_CONTAINERID", bad);
        let v = run(&Fake::new(), &env, &conf("1.0.0"))
            .assert_error(4, "invalid characters in containerID");
        assert_eq!(v["details"], bad);
    }
    for good in ["a", "0", "abc-DEF_1.2", &"f".repeat(64)] {
        let env = with(&full_env("DEL"), "CNI_CONTAINERID", good);
        assert_eq!(run(&Fake::new(), &env, &conf("1.0.0")).code, 0, "{good}");
    }
    // An empty ID never gets this far from the environment (it is a missing
    // variable); the validator's own answer is code 3.
    let e = validate_container_id("").unwrap_err();
    assert_eq!(e.code, ErrorCode::UnknownContainer);
    assert_eq!(e.msg, "missing containerID");
}

#[test]
fn container_id_is_checked_before_missing_variables() {
    let env = [("CNI_COMMAND", "ADD"), ("CNI_CONTAINERID", "bad id")];
    run(&Fake::new(), &env, &conf("1.0.0")).assert_error(4, "invalid characters in containerID");
}

#[test]
fn interface_name_validation() {
    let cases = [
        ("abcdefghijklmnop", "interface name is too long"),
        ("ééééééééé", "interface name is too long"),
        (".", "interface name is . or .."),
        ("..", "interface name is . or .."),
        (
            "eth/0",
            "interface name contains / or : or whitespace characters",
        ),
        (
            "eth:0",
            "interface name contains / or : or whitespace characters",
        ),
        (
            "eth 0",
            "interface name contains / or : or whitespace characters",
        ),
        (
            "eth\t0",
            "interface name contains / or : or whitespace characters",
        ),
        (
            "eth\u{a0}0",
            "interface name contains / or : or whitespace characters",
        ),
        ("eth\u{1b}0", "interface name contains control characters"),
        ("eth\u{0}", "interface name contains control characters"),
    ];
    for command in ["ADD", "CHECK", "DEL"] {
        for (name, msg) in cases {
            let env = with(&full_env(command), "CNI_IFNAME", name);
            let v = run(&Fake::new(), &env, &conf("1.0.0")).assert_error(4, msg);
            if msg.ends_with("too long") {
                assert_eq!(
                    v["details"],
                    "interface name should be less than 16 characters"
                );
            }
        }
    }
    for good in ["abcdefghijklmno", "lo", "eth0.100", "net-1", "é"] {
        let env = with(&full_env("ADD"), "CNI_IFNAME", good);
        assert_eq!(run(&Fake::new(), &env, &conf("1.0.0")).code, 0, "{good}");
    }
    assert_eq!(
        validate_interface_name("").unwrap_err().msg,
        "interface name is empty"
    );
}

#[test]
fn non_utf8_variables_are_invalid_environment() {
    let mut env: Vec<(&str, OsString)> = full_env("ADD")
        .into_iter()
        .map(|(k, v)| (k, OsString::from(v)))
        .collect();
    env.push(("CNI_NETNS", OsString::from_vec(b"/run/netns/\xff".to_vec())));
    let r = run_env(&Fake::new(), &env, &conf("1.0.0"));
    r.assert_error(4, "env variable CNI_NETNS is not valid UTF-8");
}

#[test]
fn config_decode_failures_are_code_6() {
    for stdin in [
        &b""[..],
        b"   ",
        b"{",
        b"\xff\xfe\x00",
        b"[]",
        b"\"name\"",
        b"null",
        br#"{"name":"testnet"} trailing"#,
        br#"{"name":5}"#,
        br#"{"name":"testnet","cniVersion":1.0}"#,
    ] {
        let r = run(&Fake::new(), &full_env("ADD"), stdin);
        assert_eq!(r.code, 1);
        let v = r.json();
        assert_eq!(v["code"], 6, "{:?}: {v}", String::from_utf8_lossy(stdin));
        assert!(
            v["msg"]
                .as_str()
                .unwrap()
                .starts_with("error unmarshall network config"),
            "{v}"
        );
    }
}

#[test]
fn network_name_failures_are_code_7() {
    let r = run(&Fake::new(), &full_env("ADD"), b"{}");
    r.assert_error(7, "missing network name");
    let r = run(
        &Fake::new(),
        &full_env("DEL"),
        br#"{"name":"","cniVersion":"1.0.0"}"#,
    );
    r.assert_error(7, "missing network name");
    let r = run(&Fake::new(), &full_env("ADD"), br#"{"name":"bad name"}"#);
    let v = r.assert_error(7, "invalid characters found in network name");
    assert_eq!(v["details"], "bad name");
}

#[test]
fn invalid_shared_keys_are_code_7_with_version() {
    let stdin = br#"{"cniVersion":"0.4.0","name":"testnet","dns":"8.8.8.8"}"#;
    let fake = Fake::new();
    let r = run(&fake, &full_env("ADD"), stdin);
    assert_eq!(r.code, 1);
    let v = r.json();
    assert_eq!(v["code"], 7);
    assert_eq!(v["cniVersion"], "0.4.0");
    assert!(fake.commands_called().is_empty());
}

#[test]
fn unsupported_config_version_is_code_1_with_go_details() {
    let r = run(&Fake::new(), &full_env("ADD"), &conf("9.9.9"));
    let v = r.assert_error(1, "incompatible CNI versions");
    assert_eq!(
        v["details"],
        r#"config is "9.9.9", plugin supports ["0.1.0" "0.2.0" "0.3.0" "0.3.1" "0.4.0" "1.0.0" "1.1.0"]"#
    );
    // Go compares the strings: a short spelling is not a supported version.
    let r = run(&Fake::new(), &full_env("DEL"), &conf("1.0"));
    r.assert_error(1, "incompatible CNI versions");
    let fake = Fake::with_versions(&[SpecVersion::V0_3_1, SpecVersion::V0_4_0]);
    let r = run(&fake, &full_env("ADD"), &conf("1.0.0"));
    let v = r.assert_error(1, "incompatible CNI versions");
    assert_eq!(
        v["details"],
        r#"config is "1.0.0", plugin supports ["0.3.1" "0.4.0"]"#
    );
    assert!(fake.commands_called().is_empty());
}

#[test]
fn missing_config_version_means_0_1_0() {
    let fake = Fake::new();
    let r = run(&fake, &full_env("ADD"), br#"{"name":"testnet"}"#);
    assert_eq!(r.code, 0, "{}", r.stdout);
    let v = r.json();
    assert_eq!(v["cniVersion"], "0.1.0");
    assert_eq!(v["ip4"]["ip"], "10.0.0.2/24");
    let fake = Fake::with_versions(&[SpecVersion::V1_0_0]);
    let r = run(
        &fake,
        &full_env("ADD"),
        br#"{"name":"testnet","cniVersion":""}"#,
    );
    let v = r.assert_error(1, "incompatible CNI versions");
    assert!(v["details"]
        .as_str()
        .unwrap()
        .starts_with("config is \"0.1.0\""));
}

#[test]
fn check_needs_0_4_0() {
    for version in ["0.1.0", "0.2.0", "0.3.0", "0.3.1"] {
        let fake = Fake::new();
        let r = run(&fake, &full_env("CHECK"), &conf(version));
        r.assert_error(1, "config version does not allow CHECK");
        assert!(fake.commands_called().is_empty());
    }
    let r = run(&Fake::new(), &full_env("CHECK"), br#"{"name":"testnet"}"#);
    r.assert_error(1, "config version does not allow CHECK");
    for version in ["0.4.0", "1.0.0", "1.1.0"] {
        let fake = Fake::new();
        run(&fake, &full_env("CHECK"), &conf(version)).assert_silent_success();
        assert_eq!(fake.commands_called(), vec![Command::Check]);
    }
}

#[test]
fn gc_and_status_need_1_1_0() {
    for command in ["GC", "STATUS"] {
        for version in ["0.1.0", "0.3.1", "0.4.0", "1.0.0"] {
            let fake = Fake::new();
            let r = run(&fake, &full_env(command), &conf(version));
            r.assert_error(1, &format!("config version does not allow {command}"));
            assert!(fake.commands_called().is_empty());
        }
        run(&Fake::new(), &full_env(command), &conf("1.1.0")).assert_silent_success();
    }
}

#[test]
fn gated_commands_with_too_new_config_or_unparsable_version() {
    let fake = Fake::with_versions(&[SpecVersion::V0_3_1, SpecVersion::V0_4_0]);
    run(&fake, &full_env("CHECK"), &conf("1.0.0"))
        .assert_error(1, "plugin version does not allow CHECK");
    let fake = Fake::with_versions(&[SpecVersion::V1_0_0]);
    run(&fake, &full_env("STATUS"), &conf("1.2.0"))
        .assert_error(1, "plugin version does not allow STATUS");
    // A newer version exists but not this one: the exact match decides.
    let fake = Fake::with_versions(&[SpecVersion::V0_3_1, SpecVersion::V1_0_0]);
    run(&fake, &full_env("CHECK"), &conf("0.4.0")).assert_error(1, "incompatible CNI versions");
    // Go cannot compare a malformed version: a decode failure.
    let r = run(&Fake::new(), &full_env("CHECK"), &conf("1.x"));
    assert_eq!(r.json()["code"], 6);
    let r = run(&Fake::new(), &full_env("GC"), &conf("1.1.0.0"));
    assert_eq!(r.json()["code"], 6);
}

#[test]
fn missing_check_gc_status_succeed_after_version_checks() {
    let env = |c| full_env(c);
    run(&Minimal, &env("CHECK"), &conf("1.0.0")).assert_silent_success();
    run(&Minimal, &env("GC"), &conf("1.1.0")).assert_silent_success();
    run(&Minimal, &env("STATUS"), &conf("1.1.0")).assert_silent_success();
    run(&Minimal, &env("STATUS"), &conf("1.0.0"))
        .assert_error(1, "config version does not allow STATUS");
}

#[test]
fn result_is_printed_in_the_config_version() {
    let cases = [
        (
            "0.1.0",
            json!({
                "cniVersion": "0.1.0",
                "ip4": {"ip": "10.0.0.2/24", "gateway": "10.0.0.1", "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}]},
                "ip6": {"ip": "fd00::2/64"}
            }),
        ),
        (
            "0.3.1",
            json!({
                "cniVersion": "0.3.1",
                "interfaces": [{"name": "eth0", "mac": "0a:58:0a:00:00:02", "sandbox": "/var/run/netns/test"}],
                "ips": [
                    {"version": "4", "interface": 0, "address": "10.0.0.2/24", "gateway": "10.0.0.1"},
                    {"version": "6", "interface": 0, "address": "fd00::2/64"}
                ],
                "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}]
            }),
        ),
        (
            "1.0.0",
            json!({
                "cniVersion": "1.0.0",
                "interfaces": [{"name": "eth0", "mac": "0a:58:0a:00:00:02", "mtu": 1500, "sandbox": "/var/run/netns/test"}],
                "ips": [
                    {"interface": 0, "address": "10.0.0.2/24", "gateway": "10.0.0.1"},
                    {"interface": 0, "address": "fd00::2/64"}
                ],
                "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}]
            }),
        ),
    ];
    for (version, expected) in cases {
        let r = run(&Fake::new(), &full_env("ADD"), &conf(version));
        assert_eq!(r.code, 0, "{version}: {}", r.stdout);
        let printed = r.json();
        if printed["ip4"].is_object() {
            // 0.1.0's routes lists are per family; the v6 one is empty.
            assert_eq!(printed["ip4"], expected["ip4"], "{version}");
            assert_eq!(printed["ip6"]["ip"], expected["ip6"]["ip"], "{version}");
            assert_eq!(printed["cniVersion"], expected["cniVersion"]);
        } else {
            assert_eq!(printed, expected, "{version}");
        }
    }
    // Every version: labelled with the config's version, and the text is
    // indented by four spaces like the Go output.
    for version in SpecVersion::ALL {
        let r = run(&Fake::new(), &full_env("ADD"), &conf(version.as_str()));
        assert_eq!(r.json()["cniVersion"], version.as_str());
        assert!(
            r.stdout.starts_with("{\n    \"cniVersion\""),
            "{}",
            r.stdout
        );
        assert!(r.stdout.ends_with("}\n"));
    }
}

#[test]
fn l2_only_result_cannot_be_printed_as_0_2_0() {
    let l2_only = v100::Result {
        ips: vec![],
        routes: vec![],
        ..sample_result()
    };
    for version in ["0.1.0", "0.2.0"] {
        let fake = Fake::with_result(l2_only.clone());
        let r = run(&fake, &full_env("ADD"), &conf(version));
        let v = r.assert_error(1, "cannot convert: no valid IP addresses");
        assert_eq!(v["cniVersion"], version);
        assert_eq!(fake.commands_called(), vec![Command::Add], "ADD did run");
    }
    let r = run(
        &Fake::with_result(l2_only),
        &full_env("ADD"),
        &conf("0.3.0"),
    );
    assert_eq!(r.code, 0);
    assert_eq!(r.json()["interfaces"][0]["name"], "eth0");
}

#[test]
fn plugin_errors_pass_through_with_their_own_code() {
    let fake = Fake::with_behaviour(Behaviour::Refuse);
    for command in ["ADD", "DEL", "CHECK"] {
        let r = run(&fake, &full_env(command), &conf("1.0.0"));
        let v = r.assert_error(120, "fake plugin refused: no reason");
        assert_eq!(v["details"], "no reason");
        assert_eq!(v["cniVersion"], "1.0.0", "errors carry the config version");
    }
    for command in ["GC", "STATUS"] {
        let r = run(&fake, &full_env(command), &conf("1.1.0"));
        r.assert_error(120, "fake plugin refused: no reason");
    }
    let unavailable =
        CniError::new(ErrorCode::NotAvailable, "backend down").with_details("try later");
    let fake = Fake::with_behaviour(Behaviour::SpecError(unavailable));
    let r = run(&fake, &full_env("STATUS"), &conf("1.1.0"));
    let v = r.assert_error(50, "backend down");
    assert_eq!(v["details"], "try later");
    assert_eq!(v["cniVersion"], "1.1.0");
}

#[test]
fn own_netns_is_refused_for_add_and_del() {
    for command in ["ADD", "DEL"] {
        for own in ["/proc/self/ns/net", "/proc/thread-self/ns/net"] {
            let fake = Fake::new();
            let env = with(&full_env(command), "CNI_NETNS", own);
            let v = run(&fake, &env, &conf("1.0.0")).assert_error(
                8,
                "plugin's netns and netns from CNI_NETNS should not be the same",
            );
            assert_eq!(v["cniVersion"], "1.0.0");
            assert!(fake.commands_called().is_empty(), "refused before running");
        }
        for not_an_override in ["0", "false", "yes", ""] {
            let env = with(&full_env(command), "CNI_NETNS", "/proc/self/ns/net");
            let env = with(&env, "CNI_NETNS_OVERRIDE", not_an_override);
            assert_eq!(run(&Fake::new(), &env, &conf("1.0.0")).json()["code"], 8);
        }
        for override_value in ["1", "true", "TRUE", "True"] {
            let fake = Fake::new();
            let env = with(&full_env(command), "CNI_NETNS", "/proc/self/ns/net");
            let env = with(&env, "CNI_NETNS_OVERRIDE", override_value);
            let r = run(&fake, &env, &conf("1.0.0"));
            assert_eq!(
                r.code, 0,
                "{command} override {override_value}: {}",
                r.stdout
            );
            assert_eq!(fake.commands_called().len(), 1);
        }
    }
    // CHECK only reads, and a path that does not open is the plugin's to
    // report.
    let env = with(&full_env("CHECK"), "CNI_NETNS", "/proc/self/ns/net");
    run(&Fake::new(), &env, &conf("1.0.0")).assert_silent_success();
    let env = with(&full_env("ADD"), "CNI_NETNS", "/etc/hostname");
    assert_eq!(run(&Fake::new(), &env, &conf("1.0.0")).code, 0);
}

#[test]
fn stdin_read_failure_is_code_5() {
    struct Broken;
    impl Read for Broken {
        fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
            Err(io::Error::other("pipe exploded"))
        }
    }
    let env = full_env("ADD");
    let mut stdout = Vec::new();
    let code = run_dispatch(
        &Fake::new(),
        &env,
        &mut Broken,
        &mut stdout,
        &mut Vec::new(),
        LoggerSetup::Skip,
    );
    assert_eq!(code, 1);
    let v: Value = serde_json::from_slice(&stdout).unwrap();
    assert_eq!(v["code"], 5);
    assert_eq!(v["msg"], "error reading from stdin: pipe exploded");
}

#[test]
fn oversized_stdin_is_refused() {
    let env = full_env("ADD");
    let mut stdin = io::repeat(b' ').take(MAX_CONFIG_BYTES + 1);
    let mut stdout = Vec::new();
    let code = run_dispatch(
        &Fake::new(),
        &env,
        &mut stdin,
        &mut stdout,
        &mut Vec::new(),
        LoggerSetup::Skip,
    );
    assert_eq!(code, 1);
    let v: Value = serde_json::from_slice(&stdout).unwrap();
    assert_eq!(v["code"], 6);
}

#[test]
fn unwritable_stdout_fails_the_call() {
    struct Closed;
    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from(io::ErrorKind::BrokenPipe))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let env = full_env("ADD");
    let mut stderr = Vec::new();
    let code = run_dispatch(
        &Fake::new(),
        &env,
        &mut conf("1.0.0").as_slice(),
        &mut Closed,
        &mut stderr,
        LoggerSetup::Skip,
    );
    assert_eq!(code, 1);
    assert!(String::from_utf8_lossy(&stderr).contains("cannot write result to stdout"));
}

#[test]
fn plugin_panic_becomes_internal_error() {
    let fake = Fake::with_behaviour(Behaviour::Panic);
    let r = run(&fake, &full_env("ADD"), &conf("1.0.0"));
    r.assert_error(999, "plugin panicked: fake plugin bug");
}

#[test]
fn public_entry_point_runs_a_call() {
    // Installs the process logger, switched off by the config.
    let env = full_env("ADD");
    let stdin = br#"{"cniVersion":"1.0.0","name":"testnet","logLevel":"off"}"#;
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let code = run_with(
        &Fake::new(),
        &env,
        &mut &stdin[..],
        &mut stdout,
        &mut stderr,
    );
    assert_eq!(code, 0);
    let v: Value = serde_json::from_slice(&stdout).unwrap();
    assert_eq!(v["ips"][0]["address"], "10.0.0.2/24");
}

#[test]
fn env_sources() {
    let mut map = HashMap::new();
    map.insert("CNI_COMMAND".to_string(), "VERSION".to_string());
    assert_eq!(map.var_os("CNI_COMMAND"), Some(OsString::from("VERSION")));
    let mut tree = BTreeMap::new();
    tree.insert("CNI_COMMAND", "DEL");
    assert_eq!(tree.var_os("CNI_COMMAND"), Some(OsString::from("DEL")));
    assert_eq!(tree.var_os("CNI_PATH"), None);
    let list = [("A", "1"), ("A", "2")];
    assert_eq!(list.var_os("A"), Some(OsString::from("2")), "last wins");
    let r = run_env(&Fake::new(), &map, b"");
    assert_eq!(r.code, 0);
}

/// xorshift64*: deterministic, so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    fn bytes(&mut self, max_len: usize) -> Vec<u8> {
        let len = self.below(max_len + 1);
        (0..len).map(|_| self.next() as u8).collect()
    }
}

fn garbage_stdin(rng: &mut Rng) -> Vec<u8> {
    let versions = [
        "", "0.1.0", "0.2.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0", "9.9.9", "1.x", "01.0.0",
    ];
    let version = *rng.pick(&versions);
    let structured: Vec<Vec<u8>> = vec![
        conf(version),
        br#"{"name":"n","cniVersion":1e999999}"#.to_vec(),
        br#"{"name":"n","cniVersion":"1.0.0","ipMasq":123456789012345678901234567890}"#.to_vec(),
        br#"{"name":"n","cniVersion":"1.0.0","capabilities":{"x":-1e400}}"#.to_vec(),
        format!("{}{}", "[".repeat(5000), "]".repeat(5000)).into_bytes(),
        format!(
            r#"{{"name":"n","args":{}1{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        )
        .into_bytes(),
        serde_json::to_vec(&json!({"name": "n", "cniVersion": version,
            "prevResult": {"cniVersion": version, "ips": [{"address": "300.1.1.1/99"}]}}))
        .unwrap(),
        serde_json::to_vec(&json!({"name": "x".repeat(5000), "cniVersion": version,
            "dns": {"nameservers": [1, 2]}, "ipam": {"type": 7}}))
        .unwrap(),
        br#"{"name":"n\u0000","cniVersion":"1.0.0"}"#.to_vec(),
        br#"{"name":"n","name":"dup","cniVersion":"1.0.0"}"#.to_vec(),
        b"\xef\xbb\xbf{\"name\":\"bom\"}".to_vec(),
    ];
    match rng.below(4) {
        0 => rng.bytes(64),
        1 => {
            let mut v = rng.pick(&structured).clone();
            let cut = rng.below(v.len() + 1);
            v.truncate(cut);
            v
        }
        _ => rng.pick(&structured).clone(),
    }
}

fn garbage_value(rng: &mut Rng) -> OsString {
    let pool: [&[u8]; 14] = [
        b"",
        b"ADD",
        b"DEL",
        b"CHECK",
        b"GC",
        b"STATUS",
        b"VERSION",
        b"eth0",
        b"/proc/self/ns/net",
        b"/nonexistent",
        b"\xff\xfe",
        b"a=b;c",
        b"1",
        b"0123456789abcdef0123456789abcdef0123456789abcdef",
    ];
    match rng.below(5) {
        0 => OsString::from_vec(rng.bytes(24)),
        _ => OsString::from_vec(rng.pick(&pool).to_vec()),
    }
}

#[test]
fn garbage_input_always_gets_a_spec_answer() {
    let names = [
        "CNI_COMMAND",
        "CNI_CONTAINERID",
        "CNI_NETNS",
        "CNI_IFNAME",
        "CNI_ARGS",
        "CNI_PATH",
        "CNI_NETNS_OVERRIDE",
    ];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut exit_codes = [0usize; 2];
    for round in 0..3000 {
        let mut env: Vec<(&str, OsString)> = Vec::new();
        for name in names {
            if rng.below(4) != 0 {
                env.push((name, garbage_value(&mut rng)));
            }
        }
        // Bias toward real commands so the deep paths are reached.
        if rng.below(2) == 0 {
            let command = *rng.pick(&ALL_COMMANDS);
            env.push(("CNI_COMMAND", command.into()));
        }
        let stdin = garbage_stdin(&mut rng);
        let fake = Fake::new();
        let r = run_env(&fake, &env, &stdin);
        let context = format!(
            "round {round}: env {env:?} stdin {:?}",
            String::from_utf8_lossy(&stdin)
        );
        match r.code {
            0 => {
                if !r.stdout.is_empty() {
                    let v: Value = serde_json::from_str(&r.stdout).expect(&context);
                    assert!(v["cniVersion"].is_string(), "{context}");
                }
                exit_codes[0] += 1;
            }
            1 => {
                let v: Value = serde_json::from_str(&r.stdout).expect(&context);
                assert!(v["code"].is_u64(), "{context}: {v}");
                assert!(v["msg"].is_string(), "{context}: {v}");
                assert!(
                    !v["msg"].as_str().unwrap().contains("panicked"),
                    "{context}: {v}"
                );
                exit_codes[1] += 1;
            }
            other => panic!("exit status {other}: {context}"),
        }
    }
    assert!(
        exit_codes[0] > 50 && exit_codes[1] > 50,
        "both outcomes exercised: {exit_codes:?}"
    );
}

/// A plugin whose DEL leaves a parked socket behind, as the nfnetlink users
/// do when their socket drops.
struct ParksASocket {
    target: std::sync::Mutex<Option<String>>,
}

impl Plugin for ParksASocket {
    type Error = CniError;

    fn about(&self) -> String {
        String::new()
    }

    fn add(&self, _args: &CmdArgs) -> Result<AnyResult, CniError> {
        Ok(AnyResult::V1(v100::Result::new()))
    }

    fn del(&self, _args: &CmdArgs) -> Result<(), CniError> {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0")
            .map_err(|e| CniError::new(crate::error::ErrorCode::Internal, e.to_string()))?;
        let link = std::fs::read_link(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&socket)
        ))
        .map_err(|e| CniError::new(crate::error::ErrorCode::Internal, e.to_string()))?;
        *self.target.lock().unwrap() = Some(link.display().to_string());
        crate::detached::park(&socket);
        Ok(())
    }
}

/// The call ends by handing parked sockets to a detached child: none is
/// left open in the plugin's process when the dispatcher returns.
#[test]
fn the_call_releases_the_sockets_it_parked() {
    let plugin = ParksASocket {
        target: std::sync::Mutex::new(None),
    };
    let r = run(&plugin, &full_env("DEL"), &conf("1.0.0"));
    r.assert_silent_success();
    let target = plugin.target.lock().unwrap().clone().expect("DEL ran");
    let still_open = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .any(|l| l.display().to_string() == target);
    assert!(!still_open, "{target} is still open in the plugin process");
}
