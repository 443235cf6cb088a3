use std::os::unix::process::ExitStatusExt;

use super::*;

#[test]
fn a_boot_gets_the_longer_of_the_tests_limit_and_the_lanes() {
    let own = Some(Duration::from_secs(900));
    assert_eq!(boot_timeout(own, Some("1800")), Some(1800));
    assert_eq!(boot_timeout(own, Some("300")), Some(900));
    assert_eq!(boot_timeout(own, None), Some(900));
    assert_eq!(boot_timeout(own, Some("soon")), Some(900));
    assert_eq!(boot_timeout(None, Some("1800")), Some(1800));
    assert_eq!(boot_timeout(None, None), None);
    assert_eq!(boot_timeout(Some(Duration::from_millis(10)), None), Some(1));
}

#[test]
fn check_lines_parse() {
    let console = "noise\nCHECK a-b PASS some detail here\nCHECK c FAIL\nCHECKX d PASS\n\
                   CHECK e\nCHECK  PASS nameless\nCHECK f SKIP why\n";
    assert_eq!(
        parse_checks(console),
        vec![
            Check {
                name: "a-b".to_owned(),
                passed: true,
                detail: "some detail here".to_owned(),
            },
            Check {
                name: "c".to_owned(),
                passed: false,
                detail: String::new(),
            },
            Check {
                name: "f".to_owned(),
                passed: false,
                detail: "why".to_owned(),
            },
        ]
    );
}

fn guest_run(console: &str, status: i32) -> GuestRun {
    GuestRun {
        checks: parse_checks(console),
        finished: console.lines().any(|line| line == "ALL-DONE"),
        console: console.to_owned(),
        status: ExitStatus::from_raw(status << 8),
        elapsed: Duration::from_secs(1),
    }
}

fn panics(run: &GuestRun, required: &[&str]) -> bool {
    std::panic::catch_unwind(|| run.assert_passed(required)).is_err()
}

#[test]
fn a_run_passes_only_with_checks_no_failure_and_all_done() {
    let good = guest_run("CHECK a PASS x\nCHECK b PASS y\nALL-DONE\n", 0);
    assert!(!panics(&good, &["a", "b"]));
    // No check at all.
    assert!(panics(&guest_run("GUEST-BOOT\nALL-DONE\n", 0), &[]));
    // A failure, even with run.sh content.
    assert!(panics(
        &guest_run("CHECK a PASS\nCHECK b FAIL z\nALL-DONE\n", 0),
        &[]
    ));
    // The script stopped early.
    assert!(panics(&guest_run("CHECK a PASS x\n", 0), &[]));
    // A required check never reported.
    assert!(panics(&good, &["a", "c"]));
    // run.sh failed (a timeout after ALL-DONE, for one).
    assert!(panics(&guest_run("CHECK a PASS x\nALL-DONE\n", 1), &[]));
    assert_eq!(good.missing(&["a", "c", "d"]), vec!["c", "d"]);
}

#[test]
fn enabled_by_the_general_or_a_crate_variable() {
    // A map instead of the process environment, which other tests' threads
    // read while they start processes.
    let env = |pairs: &[(&str, &str)]| {
        let map: std::collections::HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |var: &str| map.get(var).cloned()
    };
    assert!(!enabled_by(&["CRATE_QEMU"], env(&[])));
    assert!(enabled_by(&["CRATE_QEMU"], env(&[(ENABLE_VAR, "1")])));
    assert!(enabled_by(&["CRATE_QEMU"], env(&[("CRATE_QEMU", "1")])));
    assert!(!enabled_by(&["CRATE_QEMU"], env(&[("CRATE_QEMU", "yes")])));
    assert!(!enabled_by(&[], env(&[("CRATE_QEMU", "1")])));
    assert!(!enabled_by(&["CRATE_QEMU"], env(&[(ENABLE_VAR, "0")])));
}

#[test]
fn checks_named_in_script() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("guest-tests.sh");
    std::fs::write(&script, "pass one-check ok\ncheck_eq two 1 1\nfail three\n").unwrap();
    assert_checks_named_in_script(&script, &["one-check", "two", "three"]);
    let missing = std::panic::catch_unwind(|| assert_checks_named_in_script(&script, &["four"]));
    assert!(missing.is_err());
    let twice =
        std::panic::catch_unwind(|| assert_checks_named_in_script(&script, &["two", "two"]));
    assert!(twice.is_err());
}

/// A stand-in prepare.sh that records when it starts and ends, sleeping
/// in between, and fails when it finds another one inside.
fn fake_scripts(dir: &Path) -> PathBuf {
    let scripts = dir.join("scripts");
    std::fs::create_dir_all(&scripts).unwrap();
    let prepare = scripts.join("prepare.sh");
    std::fs::write(
        &prepare,
        "#!/bin/sh\nset -e\n[ \"$QEMU_GUEST_LOCKED\" = 1 ]\n\
         if [ -e \"$1/inside\" ]; then echo overlap >>\"$1/events\"; exit 1; fi\n\
         touch \"$1/inside\"\necho start >>\"$1/events\"\nsleep 0.3\n\
         echo end >>\"$1/events\"\nrm \"$1/inside\"\n",
    )
    .unwrap();
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&prepare)
        .status()
        .unwrap();
    scripts
}

#[test]
fn concurrent_preparations_take_turns() {
    let dir = tempfile::tempdir().unwrap();
    let scripts = fake_scripts(dir.path());
    let cache = dir.path().join("cache");
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let (scripts, cache) = (scripts.clone(), cache.clone());
            std::thread::spawn(move || QemuGuest::prepare_with(&scripts, &cache).map(|_| ()))
        })
        .collect();
    for worker in workers {
        worker.join().unwrap().unwrap();
    }
    let events = std::fs::read_to_string(cache.join("events")).unwrap();
    assert_eq!(events, "start\nend\n".repeat(3), "{events}");
}

#[test]
fn a_failed_preparation_reports_its_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let scripts = dir.path().join("scripts");
    std::fs::create_dir_all(&scripts).unwrap();
    let prepare = scripts.join("prepare.sh");
    std::fs::write(
        &prepare,
        "#!/bin/sh\necho 'prepare: error: no kernel' >&2\nexit 3\n",
    )
    .unwrap();
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&prepare)
        .status()
        .unwrap();
    let e = QemuGuest::prepare_with(&scripts, &dir.path().join("cache")).unwrap_err();
    assert!(
        matches!(&e, GuestError::Failed { stderr, .. } if stderr.contains("no kernel")),
        "{e}"
    );
}

#[test]
fn run_refuses_a_missing_script_or_binary() {
    let dir = tempfile::tempdir().unwrap();
    let guest = QemuGuest {
        cache: dir.path().to_path_buf(),
        timeout: None,
    };
    let script = dir.path().join("guest-tests.sh");
    let e = guest.run(&script, &[] as &[PathBuf]).unwrap_err();
    assert!(matches!(e, GuestError::NoScript(_)), "{e}");
    std::fs::write(&script, "finish\n").unwrap();
    let e = guest
        .run(&script, &[dir.path().join("no-such-plugin")])
        .unwrap_err();
    assert!(matches!(e, GuestError::NoBinary(_)), "{e}");
}

#[test]
fn guest_folders_are_absolute_and_plain() {
    let binary = PathBuf::from("/bin/sh");
    let folder = GuestFolder::new("/opt/cni/reference", [&binary]);
    let args = folder.run_args().expect("a plain absolute folder");
    assert_eq!(args, ["--into", "/opt/cni/reference", "/bin/sh"]);
    for dir in ["opt/cni", "/opt/../etc", "/opt/cni/.."] {
        assert!(
            matches!(
                GuestFolder::new(dir, [&binary]).run_args(),
                Err(GuestError::GuestDir(_))
            ),
            "{dir} accepted"
        );
    }
    assert!(matches!(
        GuestFolder::new("/opt", ["/no/such/binary"]).run_args(),
        Err(GuestError::NoBinary(_))
    ));
}

/// guest-lib.sh loops over the versions the host expects checks for.
#[test]
fn spec_version_checks_match_guest_lib() {
    let lib = std::fs::read_to_string(scripts_dir().join("guest-lib.sh")).unwrap();
    let line = format!("for version in {}; do", OTHER_SPEC_VERSIONS.join(" "));
    assert!(lib.contains(&line), "guest-lib.sh lacks `{line}`");
    let checks = spec_version_checks();
    assert_eq!(checks.len(), 24);
    assert!(checks.contains(&"versions-0.2.0-layout".to_string()));
}

/// The binaries .ci/run's guest lane lists (its jq filter: tests/qemu*.rs,
/// testing/qemu-guest/tests/guest.rs) are the ones whose skip in the host
/// lane is allowed.
#[test]
fn guest_lane_binaries_by_cargo_name() {
    for name in [
        "qemu-0a1b2c3d4e5f6a7b",
        "qemu_suite-0a1b2c3d",
        "guest-0a1b2c3d",
    ] {
        assert!(in_guest_lane(name), "{name}");
    }
    for name in ["vlan-0a1b2c3d", "guest_tests-0a1b", "macvlan_qemu-0a1b", ""] {
        assert!(!in_guest_lane(name), "{name}");
    }
}
