//! What the plugin does when the store is locked, read-only or full.
//!
//! Read-only and full stores are made with mounts inside a private mount
//! namespace (`unshare -m`) that only the plugin run sees, so nothing is
//! mounted on the machine itself and nothing needs unmounting afterwards.

mod common;

use std::fs::{self, File};
use std::path::Path;
use std::process::Command;

use common::*;
use nix::fcntl::{Flock, FlockArg};
use serde_json::{json, Value};

#[test]
fn a_lock_held_elsewhere_times_out_with_code_11() {
    let netns = TestNetns::new("f");
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path();
    let mut c = conf(
        "1.1.0",
        "locked",
        data,
        json!([[{"subnet": "10.50.0.0/24"}]]),
    );
    c["ipam"]["lockTimeoutMs"] = json!(300);
    Call::new(OURS, "ADD", "a", &netns.path()).run(&c).ok();

    // Another process's lock: a separate open file description.
    let file = File::open(store_dir(data, "locked").join("lock")).unwrap();
    let held = Flock::lock(file, FlockArg::LockExclusiveNonblock)
        .map_err(|(_, e)| e)
        .unwrap();
    for command in ["ADD", "DEL", "CHECK"] {
        let (code, msg) = Call::new(OURS, command, "b", &netns.path()).run(&c).err();
        assert_eq!(code, 11, "{command}: {msg}");
        assert!(msg.contains("waiting for the lock"), "{msg}");
    }
    let (code, _) = Call::new(OURS, "GC", "", "")
        .run(&{
            let mut gc = c.clone();
            gc["cni.dev/valid-attachments"] = json!([]);
            gc
        })
        .err();
    assert_eq!(code, 11);
    assert_eq!(
        leases(data, "locked").len(),
        1,
        "nothing changed while locked"
    );

    drop(held);
    Call::new(OURS, "ADD", "b", &netns.path()).run(&c).ok();
    assert_eq!(leases(data, "locked").len(), 2);
}

/// A lock wait beyond its range (2^63 waited on a stuck holder for ever)
/// is refused with code 7 by every verb, before the store is touched.
#[test]
fn a_lock_timeout_outside_its_range_is_code_7() {
    let netns = TestNetns::new("flt");
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path();
    let mut c = conf(
        "1.1.0",
        "lockrange",
        data,
        json!([[{"subnet": "10.51.0.0/24"}]]),
    );
    c["ipam"]["lockTimeoutMs"] = json!(9_223_372_036_854_775_808u64);
    for command in ["ADD", "DEL", "CHECK"] {
        let (code, msg) = Call::new(OURS, command, "a", &netns.path()).run(&c).err();
        assert_eq!(code, 7, "{command}: {msg}");
        assert_eq!(
            msg,
            "invalid ipam.lockTimeoutMs 9223372036854775808: must be an integer from 1 to 300000 (milliseconds)",
            "{command}"
        );
    }
    assert!(!store_dir(data, "lockrange").exists());
}

/// Runs `script` with `sh` in a private mount namespace; `$1` is `dir`,
/// `$2` our binary, `$3` a file holding the configuration; the CNI
/// variables are in the environment.
fn in_mount_namespace(script: &str, dir: &Path, conf: &Value, env: &[(&str, &str)]) -> Outcome {
    let conf_file = tempfile::NamedTempFile::new().unwrap();
    fs::write(conf_file.path(), serde_json::to_vec(conf).unwrap()).unwrap();
    let policy = ScratchPolicy::new();
    let mut cmd = Command::new("unshare");
    cmd.args([
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        script,
        "sh",
    ])
    .arg(dir)
    .arg(OURS)
    .arg(conf_file.path())
    .env("CNI_PATH", "/usr/lib/cni")
    .env(libcni::confine::POLICY_ENV, policy.path());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    Outcome {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

const READ_ONLY: &str =
    r#"mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && exec "$2" < "$3""#;

#[test]
fn a_read_only_data_dir_is_a_clear_io_error() {
    let netns = TestNetns::new("f");
    let path = netns.path();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path();
    let c = conf("1.1.0", "ro", data, json!([[{"subnet": "10.60.0.0/24"}]]));
    let env = |command: &'static str, cid: &'static str| {
        [
            ("CNI_COMMAND", command),
            ("CNI_CONTAINERID", cid),
            ("CNI_IFNAME", "eth0"),
            ("CNI_NETNS", path.as_str()),
        ]
    };

    // No store yet: it cannot be created.
    let out = in_mount_namespace(READ_ONLY, data, &c, &env("ADD", "a"));
    let (code, msg) = out.err();
    assert_eq!(code, 5, "{msg}");
    assert!(msg.contains("Read-only file system"), "{msg}");

    // A store with a lease, then read-only.
    Call::new(OURS, "ADD", "a", &netns.path()).run(&c).ok();
    let before = leases(data, "ro");
    let (code, msg) = in_mount_namespace(READ_ONLY, data, &c, &env("ADD", "b")).err();
    assert_eq!(code, 5, "{msg}");
    assert!(msg.contains("Read-only file system"), "{msg}");
    let (code, msg) = in_mount_namespace(READ_ONLY, data, &c, &env("DEL", "a")).err();
    assert_eq!(code, 5, "{msg}");
    // Lookups still work.
    in_mount_namespace(READ_ONLY, data, &c, &env("CHECK", "a")).ok();
    in_mount_namespace(READ_ONLY, data, &c, &env("STATUS", "")).ok();
    assert_eq!(leases(data, "ro"), before);
    Call::new(OURS, "DEL", "a", &netns.path()).run(&c).ok();
    assert!(leases(data, "ro").is_empty());
}

/// Fills a small tmpfs, then tries ADDs with and without our index (the
/// first fails writing the index, the second writing the lease itself);
/// reports their outcomes and what the store holds afterwards.
const FULL_DISK: &str = r#"
set -u
mount -t tmpfs -o size=64k tmpfs "$1" || exit 90
CNI_CONTAINERID=p1 "$2" < "$3" > /dev/null || exit 91
dd if=/dev/zero of="$1/fill" bs=4096 2>/dev/null
out=$(CNI_CONTAINERID=p2 "$2" < "$3"); echo "$out rc=$?"
rm -r "$1/full/.host-local-index"
: > "$1/full/.host-local-index"
dd if=/dev/zero of="$1/fill2" bs=4096 2>/dev/null
out=$(CNI_CONTAINERID=p3 "$2" < "$3"); echo "$out rc=$?"
echo "files: $(ls -A "$1/full" | tr '\n' ' ')"
echo "p1: $(tr '\r\n' 'RN' < "$1/full/10.70.0.2")"
rm "$1/fill" "$1/fill2"
CNI_CONTAINERID=p4 "$2" < "$3" > /dev/null; echo "after freeing: rc=$?"
echo "files: $(ls -A "$1/full" | tr '\n' ' ')"
"#;

#[test]
fn a_full_disk_is_a_clear_error_and_leaves_no_partial_lease() {
    let netns = TestNetns::new("f");
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path();
    let c = conf("1.1.0", "full", data, json!([[{"subnet": "10.70.0.0/24"}]]));
    let path = netns.path();
    let out = in_mount_namespace(
        FULL_DISK,
        data,
        &c,
        &[
            ("CNI_COMMAND", "ADD"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_NETNS", path.as_str()),
        ],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 6, "{out:?}");
    for failed in &lines[0..2] {
        let (json_text, rc) = failed.rsplit_once(' ').unwrap();
        assert_eq!(rc, "rc=1", "{out:?}");
        let error: Value = serde_json::from_str(json_text).unwrap();
        assert_eq!(error["code"], 5, "{error}");
        assert!(
            error["msg"]
                .as_str()
                .unwrap()
                .contains("No space left on device"),
            "{error}"
        );
    }
    // Only p1's lease: the failed lease writes left no empty file behind.
    assert_eq!(
        lines[2],
        "files: .host-local-index 10.70.0.2 last_reserved_ip.0 lock "
    );
    assert_eq!(
        lines[3], "p1: p1RNeth0",
        "lease content is \\r\\n-separated"
    );
    assert_eq!(lines[4], "after freeing: rc=0");
    assert_eq!(
        lines[5],
        "files: .host-local-index 10.70.0.2 10.70.0.3 last_reserved_ip.0 lock "
    );
}
