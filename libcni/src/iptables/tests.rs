//! The programs against the running kernel, each test in a private network
//! namespace; legacy iptables with its lock file in a temporary directory,
//! so the machine's `/run/xtables.lock` is never taken.

use std::path::Path;

use nix::fcntl::{Flock, FlockArg};

use super::*;
use crate::netlink::test_support::in_private_netns;

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// Legacy iptables of `family` with its lock file at `lock`.
fn legacy(family: IpFamily, lock: &Path) -> Programs {
    let prefix = match family {
        IpFamily::V4 => "iptables",
        IpFamily::V6 => "ip6tables",
    };
    Programs::of(family)
        .with_names(
            &format!("{prefix}-legacy-save"),
            &format!("{prefix}-legacy-restore"),
        )
        .with_env("XTABLES_LOCKFILE", &lock.display().to_string())
}

/// A chain with a quoted comment and a jump to it, read back, then deleted
/// by the saved text, with the family's default programs (iptables-nft on
/// Debian) and with legacy iptables.
#[test]
fn restore_then_read_then_delete_by_saved_text() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("xtables.lock");
    for family in IpFamily::ALL {
        for programs in [Programs::of(family), legacy(family, &lock)] {
            let (source, multicast) = match family {
                IpFamily::V4 => ("10.9.0.2/32", "224.0.0.0/4"),
                IpFamily::V6 => ("fd00:9::2/128", "ff00::/8"),
            };
            let comment = r#"name: "net" id: "ctr \"one\"""#;
            in_private_netns(|| {
                let mut add = RestoreScript::new("nat");
                add.declare_chain("CNI-TEST");
                add.append(
                    "CNI-TEST",
                    &args(&[
                        "!",
                        "-d",
                        multicast,
                        "-m",
                        "comment",
                        "--comment",
                        comment,
                        "-j",
                        "MASQUERADE",
                    ]),
                );
                add.append(
                    "POSTROUTING",
                    &args(&[
                        "-s",
                        source,
                        "-m",
                        "comment",
                        "--comment",
                        comment,
                        "-j",
                        "CNI-TEST",
                    ]),
                );
                add.insert("POSTROUTING", 1, &args(&["-j", "RETURN"]));
                programs.restore(&add).unwrap();

                let table = programs.read("nat").unwrap();
                assert!(table.has_chain("CNI-TEST"), "{programs:?}: {table:?}");
                let post: Vec<&SavedRule> = table.rules_in("POSTROUTING").collect();
                assert_eq!(post.len(), 2, "{table:?}");
                assert_eq!(post[0].args, args(&["-j", "RETURN"]));
                let jump = table.references_to("CNI-TEST").next().unwrap();
                assert_eq!(jump.option("--comment"), Some(comment));
                assert_eq!(jump.option("-s"), Some(source));
                let masq = table.rules_in("CNI-TEST").next().unwrap();
                assert_eq!(masq.args[..3], args(&["!", "-d", multicast]));
                assert_eq!(masq.target(), Some("MASQUERADE"));

                let mut del = RestoreScript::new("nat");
                for rule in table.rules_in("POSTROUTING") {
                    del.delete(rule);
                }
                del.flush_chain("CNI-TEST");
                del.delete_chain("CNI-TEST");
                programs.restore(&del).unwrap();
                let table = programs.read("nat").unwrap();
                assert!(!table.has_chain("CNI-TEST"), "{table:?}");
                assert!(table.rules.is_empty(), "{table:?}");
            });
        }
    }
}

/// A held xtables lock: the restore gives up after the wait, as "try again
/// later"; released, the same restore goes through.
#[test]
fn a_held_xtables_lock_is_try_again_later() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("xtables.lock");
    let file = std::fs::File::create(&lock).unwrap();
    let programs = legacy(IpFamily::V4, &lock).with_lock_wait_seconds(1);
    let mut script = RestoreScript::new("nat");
    script.declare_chain("CNI-TEST");
    in_private_netns(|| {
        let held = Flock::lock(file, FlockArg::LockExclusiveNonblock).unwrap();
        let err = programs.restore(&script).unwrap_err();
        assert!(
            matches!(err, CommandError::XtablesLock { seconds: 1, .. }),
            "{err}"
        );
        assert_eq!(err.to_cni_error().code, ErrorCode::TryAgainLater);
        assert_eq!(err.program(), "iptables-legacy-restore");
        drop(held);
        programs.restore(&script).unwrap();
        assert!(programs.read("nat").unwrap().has_chain("CNI-TEST"));
    });
}

#[test]
fn failures_name_the_program_and_keep_its_stderr() {
    in_private_netns(|| {
        let programs = Programs::of(IpFamily::V4);
        let mut script = RestoreScript::new("nat");
        script.append("CNI-NO-SUCH-CHAIN", &args(&["-j", "ACCEPT"]));
        let err = programs.restore(&script).unwrap_err();
        let CommandError::Failed {
            program, stderr, ..
        } = &err
        else {
            panic!("{err:?}")
        };
        assert_eq!(program, "iptables-restore");
        assert!(!stderr.is_empty(), "{err}");
        assert_eq!(err.to_cni_error().code, ErrorCode::Internal);
    });
    let missing = Programs::of(IpFamily::V4).with_names("no-such-iptables-save", "x");
    let err = missing.read("nat").unwrap_err();
    assert!(matches!(err, CommandError::NotFound { .. }), "{err}");
    assert_eq!(err.program(), "no-such-iptables-save");
}

/// A save program that prints something else than the table, and one that
/// hangs: unreadable, and killed at the deadline as "try again later".
#[test]
fn unreadable_and_hung_programs() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let script = |name: &str, body: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path.display().to_string()
    };
    let filter_only = script("filter-only", "echo '*filter'; echo COMMIT");
    let programs = Programs::of(IpFamily::V4).with_names(&filter_only, "x");
    let err = programs.read("nat").unwrap_err();
    assert!(
        matches!(
            &err,
            CommandError::Unreadable {
                source: SaveParseError::NoTable(_),
                ..
            }
        ),
        "{err}"
    );
    let hung = script("hung", "exec sleep 30");
    let programs = Programs::of(IpFamily::V4)
        .with_names(&hung, &hung)
        .with_deadline(Duration::from_millis(200));
    let start = std::time::Instant::now();
    let err = programs.read("nat").unwrap_err();
    assert!(matches!(err, CommandError::Deadline { .. }), "{err}");
    assert_eq!(err.error_code(), ErrorCode::TryAgainLater);
    assert!(start.elapsed() < Duration::from_secs(10));
}
