use std::os::unix::fs::symlink;
use std::sync::Mutex;

use super::*;

#[test]
fn find_in_path_rules() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let paths = vec![a.path().to_path_buf(), b.path().to_path_buf()];

    assert_eq!(
        find_in_path("", &paths).unwrap_err().to_string(),
        "no plugin name provided"
    );
    assert_eq!(
        find_in_path("../bridge", &paths).unwrap_err().to_string(),
        "invalid plugin name: ../bridge"
    );
    assert_eq!(
        find_in_path("bridge", &[]).unwrap_err().to_string(),
        "no paths provided"
    );
    let err = find_in_path("bridge", &paths).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "failed to find plugin \"bridge\" in path [{} {}]",
            a.path().display(),
            b.path().display()
        )
    );

    // A directory of that name is not a plugin; a later regular file is.
    std::fs::create_dir(a.path().join("bridge")).unwrap();
    std::fs::write(b.path().join("bridge"), "").unwrap();
    assert_eq!(
        find_in_path("bridge", &paths).unwrap(),
        b.path().join("bridge")
    );

    // The first directory wins, and symlinks are followed.
    std::fs::write(b.path().join("real"), "").unwrap();
    symlink(b.path().join("real"), a.path().join("linked")).unwrap();
    std::fs::write(b.path().join("linked"), "").unwrap();
    assert_eq!(
        find_in_path("linked", &paths).unwrap(),
        a.path().join("linked")
    );

    // A dangling symlink is not a plugin.
    symlink(a.path().join("nowhere"), a.path().join("dangling")).unwrap();
    assert!(matches!(
        find_in_path("dangling", &paths),
        Err(InvokeError::PluginNotFound { .. })
    ));
}

#[test]
fn env_later_values_win_and_order_is_kept() {
    let base: PluginEnv = [
        ("PATH", "/bin"),
        ("CNI_COMMAND", "DEL"),
        ("HOME", "/root"),
        ("HOME", "/home"),
    ]
    .into_iter()
    .collect();
    assert_eq!(base.len(), 3);
    assert_eq!(base.get_str("HOME"), Some("/home"));

    let env = CniArgs {
        command: Command::Add,
        container_id: "c1".into(),
        netns: "/run/netns/x".into(),
        plugin_args: vec![
            ("K8S_POD_NAME".into(), "p".into()),
            ("A".into(), "b".into()),
        ],
        ifname: "eth0".into(),
        path: join_path(&["/opt/cni/bin".into(), "/usr/lib/cni".into()]),
    }
    .to_env(&base);
    let pairs: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .collect();
    let expect = |k: &str, v: &str| (k.to_string(), v.to_string());
    assert_eq!(
        pairs,
        vec![
            expect("PATH", "/bin"),
            expect("CNI_COMMAND", "ADD"),
            expect("HOME", "/home"),
            expect("CNI_CONTAINERID", "c1"),
            expect("CNI_NETNS", "/run/netns/x"),
            expect("CNI_ARGS", "K8S_POD_NAME=p;A=b"),
            expect("CNI_IFNAME", "eth0"),
            expect("CNI_PATH", "/opt/cni/bin:/usr/lib/cni"),
        ]
    );
    assert_eq!(
        env.cni_path(),
        vec![PathBuf::from("/opt/cni/bin"), PathBuf::from("/usr/lib/cni")]
    );
}

#[test]
fn result_without_version_takes_the_config_version() {
    let conf = br#"{"cniVersion":"0.4.0","name":"n","type":"t"}"#;
    let r = decode_result(
        conf,
        br#"{"ips":[{"version":"4","address":"10.0.0.2/24"}]}"#,
    )
    .unwrap();
    assert_eq!(r.version(), SpecVersion::V0_4_0);
    let r = decode_result(conf, br#"{"cniVersion":"","ips":[]}"#).unwrap();
    assert_eq!(r.version(), SpecVersion::V0_4_0);
    // An explicit version is the plugin's word, even if it differs.
    let r = decode_result(conf, br#"{"cniVersion":"1.0.0"}"#).unwrap();
    assert_eq!(r.version(), SpecVersion::V1_0_0);
    // `null` is an empty result.
    let r = decode_result(conf, b"null").unwrap();
    assert_eq!(r.version(), SpecVersion::V0_4_0);
    assert_eq!(r.to_value(), serde_json::json!({"cniVersion":"0.4.0"}));
    // A configuration without a version is 0.1.0.
    let r = decode_result(br#"{"name":"n"}"#, br#"{"ip4":{"ip":"10.0.0.2/24"}}"#).unwrap();
    assert_eq!(r.version(), SpecVersion::V0_1_0);
}

#[test]
fn result_of_0_3_or_0_4_without_ip_versions_gets_them_from_the_address() {
    // What Debian's loopback 1.1.1 prints for a 0.3.1 configuration.
    let conf = br#"{"cniVersion":"0.3.1","name":"cni-loopback","type":"loopback"}"#;
    let stdout = br#"{"cniVersion":"0.3.1","interfaces":[{"name":"lo","mac":"00:00:00:00:00:00","sandbox":"/run/netns/p"}],
        "ips":[{"interface":0,"address":"127.0.0.1/8"},{"interface":0,"address":"::1/128"}],"dns":{}}"#;
    let r = decode_result(conf, stdout).unwrap();
    assert_eq!(r.version(), SpecVersion::V0_3_1);
    let v = r.to_value();
    assert_eq!(v["ips"][0]["version"], "4");
    assert_eq!(v["ips"][1]["version"], "6");
    // A result without cniVersion is in the config's (0.4.0) layout too.
    let r = decode_result(
        br#"{"cniVersion":"0.4.0","name":"n"}"#,
        br#"{"ips":[{"address":"fd00::2/64"}]}"#,
    )
    .unwrap();
    assert_eq!(r.to_value()["ips"][0]["version"], "6");
    // A version the plugin did give is kept, even a wrong one.
    let r = decode_result(
        conf,
        br#"{"cniVersion":"0.3.1","ips":[{"version":"6","address":"10.0.0.2/24"}]}"#,
    )
    .unwrap();
    assert_eq!(r.to_value()["ips"][0]["version"], "6");
    // An address that does not parse is left for the decoder to refuse.
    assert!(decode_result(
        conf,
        br#"{"cniVersion":"0.3.1","ips":[{"address":"nonsense"}]}"#
    )
    .is_err());
}

#[test]
fn result_decode_errors() {
    let conf = br#"{"cniVersion":"1.0.0"}"#;
    assert!(matches!(
        decode_result(conf, b""),
        Err(InvokeError::ResultJson(_))
    ));
    assert!(matches!(
        decode_result(conf, br#"{"cniVersion":"7.0.0"}"#),
        Err(InvokeError::Result(ResultError::UnsupportedVersion(_)))
    ));
    assert!(matches!(
        decode_result(br#"{"cniVersion":"x"}"#, b"{}"),
        Err(InvokeError::ConfigVersion(_))
    ));
}

#[test]
fn version_info_decoding() {
    let info = decode_version_info(
        br#"{"cniVersion":"1.1.0","supportedVersions":["0.4.0","1.0.0","1.1.0"]}"#,
    )
    .unwrap();
    assert!(info.supports("1.0.0"));
    assert!(!info.supports("0.3.1"));

    let info = decode_version_info(br#"{"cniVersion":"0.2.0"}"#).unwrap();
    assert_eq!(info.supported_versions, vec!["0.1.0", "0.2.0"]);

    assert_eq!(
        decode_version_info(br#"{"cniVersion":"0.3.0"}"#)
            .unwrap_err()
            .to_string(),
        "decoding version info: missing field supportedVersions"
    );
    assert_eq!(
        decode_version_info(br#"{"supportedVersions":["0.1.0"]}"#)
            .unwrap_err()
            .to_string(),
        "decoding version info: missing field cniVersion"
    );
    assert!(decode_version_info(b"garbage").is_err());
}

/// Answers every call with a fixed outcome and records the environment.
struct Canned {
    outcome: fn() -> Result<Vec<u8>, InvokeError>,
    seen: Mutex<Vec<(PluginEnv, Vec<u8>)>>,
}

impl Exec for Canned {
    fn exec_plugin(
        &self,
        _plugin_path: &Path,
        stdin: &[u8],
        env: &PluginEnv,
    ) -> Result<Vec<u8>, InvokeError> {
        self.seen
            .lock()
            .unwrap()
            .push((env.clone(), stdin.to_vec()));
        (self.outcome)()
    }
}

#[test]
fn version_probe_sends_placeholders() {
    let exec = Canned {
        outcome: || Ok(br#"{"cniVersion":"1.1.0","supportedVersions":["1.1.0"]}"#.to_vec()),
        seen: Mutex::new(Vec::new()),
    };
    let base = PluginEnv::new()
        .with("CNI_NETNS", "/inherited")
        .with("KEEP", "1");
    let info = get_version_info(&exec, Path::new("/x/p"), &base).unwrap();
    assert_eq!(info.supported_versions, vec!["1.1.0"]);
    let seen = exec.seen.lock().unwrap();
    let (env, stdin) = &seen[0];
    assert_eq!(stdin.as_slice(), br#"{"cniVersion":"1.1.0"}"#);
    assert_eq!(env.get_str("CNI_COMMAND"), Some("VERSION"));
    assert_eq!(env.get_str("CNI_NETNS"), Some("dummy"));
    assert_eq!(env.get_str("CNI_IFNAME"), Some("dummy"));
    assert_eq!(env.get_str("CNI_PATH"), Some("dummy"));
    assert_eq!(env.get_str("CNI_CONTAINERID"), Some(""));
    assert_eq!(env.get_str("KEEP"), Some("1"));
}

#[test]
fn plugins_older_than_version_speak_0_1_0() {
    let exec = Canned {
        outcome: || {
            Err(InvokeError::Plugin(CniError::new(
                ErrorCode::InvalidEnvironment,
                "unknown CNI_COMMAND: VERSION",
            )))
        },
        seen: Mutex::new(Vec::new()),
    };
    let info = get_version_info(&exec, Path::new("/x/p"), &PluginEnv::new()).unwrap();
    assert_eq!(info.supported_versions, vec!["0.1.0"]);

    let exec = Canned {
        outcome: || {
            Err(InvokeError::Plugin(CniError::new(
                ErrorCode::Internal,
                "boom",
            )))
        },
        seen: Mutex::new(Vec::new()),
    };
    let err = get_version_info(&exec, Path::new("/x/p"), &PluginEnv::new()).unwrap_err();
    assert_eq!(
        err.plugin_error().map(|e| e.code),
        Some(ErrorCode::Internal)
    );
}

#[test]
fn delegate_errors_keep_the_plugin_code() {
    let e = InvokeError::Plugin(CniError::new(ErrorCode::TryAgainLater, "busy"));
    assert_eq!(e.to_cni_error().code, ErrorCode::TryAgainLater);
    let e = InvokeError::NoErrorMessage {
        status: ExitStatus::Code(2),
    };
    assert_eq!(e.to_cni_error().code, ErrorCode::Internal);
    assert_eq!(
        e.to_string(),
        "netplugin failed with no error message: exit status 2"
    );
}
