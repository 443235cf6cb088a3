//! The installer as the DaemonSet runs it: the built binary over real
//! folders, a plugin set with its list written by `sha256sum` itself.

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use sha2::{Digest, Sha256};
use tempfile::TempDir;

const INSTALLER: &str = env!("CARGO_BIN_EXE_cni-installer");

/// A folder of plugins and its SHA256SUMS, as the image holds them.
struct PluginSet {
    dir: TempDir,
}

impl PluginSet {
    fn new(files: &[(&str, &[u8])]) -> PluginSet {
        let dir = TempDir::new().unwrap();
        for (name, bytes) in files {
            fs::write(dir.path().join(name), bytes).unwrap();
        }
        let names: Vec<&str> = files.iter().map(|(name, _)| *name).collect();
        let sums = Command::new("sha256sum")
            .args(&names)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(sums.status.success(), "sha256sum: {sums:?}");
        fs::write(dir.path().join("SHA256SUMS"), sums.stdout).unwrap();
        PluginSet { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

fn run(set: &PluginSet, to: &Path, extra: &[&str]) -> Output {
    Command::new(INSTALLER)
        .arg("install")
        .arg("--from")
        .arg(set.path())
        .arg("--to")
        .arg(to)
        .args(extra)
        .output()
        .unwrap()
}

fn stdout_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn sha256(bytes: &[u8]) -> Vec<u8> {
    Sha256::digest(bytes).to_vec()
}

/// Every entry of `dir` with its contents.
fn contents(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().into_string().unwrap(),
                fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

/// A program that keeps running: a copy of the system's `sleep`, and the
/// same with bytes appended (still a valid ELF file, different sum).
fn sleep_binary(version: u8) -> Vec<u8> {
    let mut bytes = fs::read("/bin/sleep").unwrap();
    if version > 1 {
        bytes.extend_from_slice(format!("cni-installer test v{version}").as_bytes());
    }
    bytes
}

#[test]
fn fresh_install_copies_every_listed_file_executable() {
    let set = PluginSet::new(&[
        ("bridge", b"bridge v1"),
        ("host-local", b"host-local v1"),
        ("loopback", b"loopback v1"),
    ]);
    let node = TempDir::new().unwrap();
    // The folder does not exist yet on a fresh node.
    let bin = node.path().join("opt/cni/bin");
    let out = run(&set, &bin, &[]);
    assert!(out.status.success(), "{out:?}");
    let lines = stdout_lines(&out);
    assert_eq!(
        lines,
        vec![
            format!("installed {}", bin.join("bridge").display()),
            format!("installed {}", bin.join("host-local").display()),
            format!("installed {}", bin.join("loopback").display()),
            "done: 3 installed, 0 replaced, 0 unchanged, 0 kept".to_string(),
        ]
    );
    let installed = contents(&bin);
    assert_eq!(
        installed.keys().collect::<Vec<_>>(),
        ["bridge", "host-local", "loopback"],
        "exactly the listed files, no list, no temporary file"
    );
    assert_eq!(installed["host-local"], b"host-local v1");
    for name in installed.keys() {
        let mode = fs::metadata(bin.join(name)).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o755, "{name}");
    }
}

#[test]
fn upgrade_replaces_a_plugin_while_its_old_binary_runs() {
    let old = PluginSet::new(&[
        ("bridge", b"bridge v1"),
        ("long-running", &sleep_binary(1)),
        ("loopback", b"loopback v1"),
    ]);
    let node = TempDir::new().unwrap();
    let bin = node.path().join("bin");
    assert!(run(&old, &bin, &[]).status.success());

    // A plugin call in progress: the installed old binary executing.
    let mut running: Child = Command::new(bin.join("long-running"))
        .arg("600")
        .spawn()
        .unwrap();
    // What writing in place would meet: the kernel refuses to open an
    // executing file for writing.
    let in_place = fs::OpenOptions::new()
        .write(true)
        .open(bin.join("long-running"));
    assert_eq!(
        in_place.map(drop).unwrap_err().raw_os_error(),
        Some(nix::libc::ETXTBSY),
        "the old binary is executing"
    );

    let new = PluginSet::new(&[
        ("bridge", b"bridge v2"),
        ("long-running", &sleep_binary(2)),
        ("loopback", b"loopback v1"),
        ("portmap", b"portmap v2"),
    ]);
    let out = run(&new, &bin, &[]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        stdout_lines(&out),
        vec![
            format!("replaced {}", bin.join("bridge").display()),
            format!("replaced {}", bin.join("long-running").display()),
            format!("unchanged {}", bin.join("loopback").display()),
            format!("installed {}", bin.join("portmap").display()),
            "done: 1 installed, 2 replaced, 1 unchanged, 0 kept".to_string(),
        ]
    );

    // The running call kept its own, whole old binary.
    assert!(
        running.try_wait().unwrap().is_none(),
        "old plugin still runs"
    );
    let exe = fs::read(format!("/proc/{}/exe", running.id())).unwrap();
    assert_eq!(sha256(&exe), sha256(&sleep_binary(1)));
    // The next exec gets the new one, whole and executable.
    let installed = contents(&bin);
    assert_eq!(installed["long-running"], sleep_binary(2));
    assert_eq!(installed["bridge"], b"bridge v2");
    assert_eq!(installed["portmap"], b"portmap v2");
    let status = Command::new(bin.join("long-running"))
        .arg("0")
        .status()
        .unwrap();
    assert!(status.success(), "new binary runs: {status}");
    assert_eq!(installed.len(), 4, "no temporary file left: {installed:?}");

    running.kill().unwrap();
    running.wait().unwrap();
}

#[test]
fn checksum_mismatch_is_refused_with_nothing_replaced() {
    let old = PluginSet::new(&[("bridge", b"bridge v1"), ("loopback", b"loopback v1")]);
    let node = TempDir::new().unwrap();
    let bin = node.path().join("bin");
    let conf_dir = node.path().join("net.d");
    assert!(run(&old, &bin, &[]).status.success());
    let before = contents(&bin);

    let new = PluginSet::new(&[
        ("bridge", b"bridge v2"),
        ("loopback", b"loopback v2"),
        ("portmap", b"portmap v2"),
    ]);
    // Damaged after the list was made (a bad layer, a truncated copy).
    fs::write(new.path().join("loopback"), b"loopback v2, damaged").unwrap();
    let conf_src = TempDir::new().unwrap();
    fs::write(conf_src.path().join("10-net.conflist"), CONFLIST).unwrap();

    let out = run(
        &new,
        &bin,
        &[
            "--conflist",
            conf_src.path().join("10-net.conflist").to_str().unwrap(),
            "--conf-dir",
            conf_dir.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(out.stdout.is_empty(), "says nothing was done: {out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nothing installed"), "{err}");
    assert!(
        err.contains(&format!("{:?}", new.path().join("loopback"))),
        "{err}"
    );
    assert!(err.contains("the list says"), "{err}");
    // bridge matched its sum but was not installed either.
    assert_eq!(contents(&bin), before);
    assert!(!conf_dir.exists(), "no configuration written");
}

#[test]
fn missing_or_unlisted_files_are_refused() {
    let node = TempDir::new().unwrap();
    let bin = node.path().join("bin");

    let missing = PluginSet::new(&[("bridge", b"bridge"), ("loopback", b"loopback")]);
    fs::remove_file(missing.path().join("loopback")).unwrap();
    let out = run(&missing, &bin, &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("is listed but missing"));

    let unlisted = PluginSet::new(&[("bridge", b"bridge")]);
    fs::write(unlisted.path().join("extra"), b"no sum for me").unwrap();
    let out = run(&unlisted, &bin, &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not in the checksum list"), "{err}");

    let traversal = PluginSet::new(&[("bridge", b"bridge")]);
    let sums = fs::read_to_string(traversal.path().join("SHA256SUMS")).unwrap();
    fs::write(
        traversal.path().join("SHA256SUMS"),
        sums.replace("bridge", "../bridge"),
    )
    .unwrap();
    let out = run(&traversal, &bin, &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a plain file name"));

    assert!(!bin.exists(), "nothing was written by any of the three");
}

#[test]
fn an_unpacked_release_archive_installs_its_plugins_only() {
    // Laid out as .ci/release packs an archive: plugins, tools and text
    // files side by side, and PLUGINS.SHA256SUMS naming the plugins.
    let archive = TempDir::new().unwrap();
    let files: [(&str, &[u8]); 6] = [
        ("bridge", b"bridge v1"),
        ("loopback", b"loopback v1"),
        ("cnitool", b"cnitool v1"),
        ("cni-installer", b"cni-installer v1"),
        ("LICENSE", b"license text"),
        ("README.md", b"readme text"),
    ];
    for (name, bytes) in files {
        fs::write(archive.path().join(name), bytes).unwrap();
    }
    let sums = Command::new("sha256sum")
        .args(["bridge", "loopback"])
        .current_dir(archive.path())
        .output()
        .unwrap();
    assert!(sums.status.success(), "sha256sum: {sums:?}");
    let list = archive.path().join("PLUGINS.SHA256SUMS");
    fs::write(&list, sums.stdout).unwrap();
    let node = TempDir::new().unwrap();
    let bin = node.path().join("opt/cni/bin");
    let install = |extra: &[&str]| {
        Command::new(INSTALLER)
            .arg("install")
            .arg("--from")
            .arg(archive.path())
            .arg("--sums")
            .arg(&list)
            .arg("--to")
            .arg(&bin)
            .args(extra)
            .output()
            .unwrap()
    };

    // As for an image, a file the list does not name refuses the run.
    let out = install(&[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    for name in ["cnitool", "cni-installer", "LICENSE", "README.md"] {
        assert!(
            err.contains(&format!("{:?}", archive.path().join(name))),
            "{name}: {err}"
        );
    }
    assert!(!bin.exists());

    // Told that the folder holds more than plugins: the listed ones only.
    let out = install(&["--ignore-unlisted"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        stdout_lines(&out),
        vec![
            format!("installed {}", bin.join("bridge").display()),
            format!("installed {}", bin.join("loopback").display()),
            "done: 2 installed, 0 replaced, 0 unchanged, 0 kept".to_string(),
        ]
    );
    assert_eq!(
        contents(&bin).keys().collect::<Vec<_>>(),
        ["bridge", "loopback"]
    );

    // Every listed plugin is still checked.
    fs::write(archive.path().join("loopback"), b"loopback v1, damaged").unwrap();
    fs::write(archive.path().join("bridge"), b"bridge v1, damaged").unwrap();
    let out = install(&["--ignore-unlisted"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("the list says"), "{err}");
    assert_eq!(contents(&bin)["bridge"], b"bridge v1", "nothing replaced");
}

const CONFLIST: &str = r#"{
  "cniVersion": "1.0.0",
  "name": "net",
  "plugins": [
    { "type": "bridge", "bridge": "cni0", "ipam": { "type": "host-local", "subnet": "10.22.0.0/16" } },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
"#;

#[test]
fn conflist_is_written_once_and_kept_unless_forced() {
    let set = PluginSet::new(&[("bridge", b"bridge")]);
    let node = TempDir::new().unwrap();
    let bin = node.path().join("bin");
    let conf_dir = node.path().join("net.d");
    let src = TempDir::new().unwrap();
    let conf = src.path().join("10-net.conflist");
    fs::write(&conf, CONFLIST).unwrap();
    let target = conf_dir.join("10-net.conflist");
    let args = [
        "--conflist",
        conf.to_str().unwrap(),
        "--conf-dir",
        conf_dir.to_str().unwrap(),
    ];

    let out = run(&set, &bin, &args);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout_lines(&out).contains(&format!("installed {}", target.display())));
    assert_eq!(fs::read_to_string(&target).unwrap(), CONFLIST);
    assert_eq!(
        fs::metadata(&target).unwrap().permissions().mode() & 0o777,
        0o644
    );

    // The node's operator edited it: kept.
    let edited = CONFLIST.replace("cni0", "cni1");
    fs::write(&target, &edited).unwrap();
    let out = run(&set, &bin, &args);
    assert!(out.status.success(), "{out:?}");
    let kept = stdout_lines(&out);
    assert!(
        kept.iter().any(|l| l.starts_with(&format!(
            "kept {} (differs from {}; --force-conflist replaces it)",
            target.display(),
            conf.display()
        ))),
        "{kept:?}"
    );
    assert_eq!(fs::read_to_string(&target).unwrap(), edited);

    // Told to: replaced.
    let forced: Vec<&str> = args.iter().copied().chain(["--force-conflist"]).collect();
    let out = run(&set, &bin, &forced);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout_lines(&out).contains(&format!("replaced {}", target.display())));
    assert_eq!(fs::read_to_string(&target).unwrap(), CONFLIST);
    assert_eq!(
        contents(&conf_dir).len(),
        1,
        "no temporary file in the folder runtimes watch"
    );
}

#[test]
fn broken_conflist_refuses_the_whole_run() {
    let set = PluginSet::new(&[("bridge", b"bridge")]);
    let node = TempDir::new().unwrap();
    let bin = node.path().join("bin");
    let src = TempDir::new().unwrap();
    let conf = src.path().join("10-net.conflist");
    fs::write(&conf, r#"{"cniVersion": "1.0.0", "plugins": []"#).unwrap();
    let conf_dir = node.path().join("net.d");
    let out = run(
        &set,
        &bin,
        &[
            "--conflist",
            conf.to_str().unwrap(),
            "--conf-dir",
            conf_dir.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is not a valid network configuration"),
        "{err}"
    );
    assert!(!bin.exists() && !conf_dir.exists());
}

#[test]
fn conflists_from_a_mounted_configmap_folder() {
    // A ConfigMap volume: keys are symlinks into a hidden, timestamped
    // folder reached through `..data`.
    let set = PluginSet::new(&[("bridge", b"bridge")]);
    let node = TempDir::new().unwrap();
    let map = TempDir::new().unwrap();
    let stamp = map.path().join("..2026_01_01_00_00_00.000000001");
    fs::create_dir(&stamp).unwrap();
    fs::write(stamp.join("10-net.conflist"), CONFLIST).unwrap();
    fs::write(
        stamp.join("99-loopback.conf"),
        r#"{"cniVersion": "1.0.0", "name": "lo", "type": "loopback"}"#,
    )
    .unwrap();
    std::os::unix::fs::symlink(stamp.file_name().unwrap(), map.path().join("..data")).unwrap();
    for name in ["10-net.conflist", "99-loopback.conf"] {
        std::os::unix::fs::symlink(format!("..data/{name}"), map.path().join(name)).unwrap();
    }
    let conf_dir = node.path().join("net.d");
    let out = run(
        &set,
        &node.path().join("bin"),
        &[
            "--conflist",
            map.path().to_str().unwrap(),
            "--conf-dir",
            conf_dir.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let placed = contents(&conf_dir);
    assert_eq!(
        placed.keys().collect::<Vec<_>>(),
        ["10-net.conflist", "99-loopback.conf"]
    );
    assert_eq!(placed["10-net.conflist"], CONFLIST.as_bytes());
    // Plain files, not links into the pod's volume.
    assert!(fs::symlink_metadata(conf_dir.join("10-net.conflist"))
        .unwrap()
        .file_type()
        .is_file());
}

#[test]
fn second_run_changes_nothing() {
    let set = PluginSet::new(&[("bridge", b"bridge"), ("loopback", b"loopback")]);
    let node = TempDir::new().unwrap();
    let bin = node.path().join("bin");
    let conf_dir = node.path().join("net.d");
    let src = TempDir::new().unwrap();
    let conf = src.path().join("10-net.conflist");
    fs::write(&conf, CONFLIST).unwrap();
    let args = [
        "--conflist",
        conf.to_str().unwrap(),
        "--conf-dir",
        conf_dir.to_str().unwrap(),
    ];
    assert!(run(&set, &bin, &args).status.success());
    let inodes = |dir: &Path| -> Vec<(PathBuf, u64, i64)> {
        let mut all: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let meta = e.metadata().unwrap();
                (e.path(), meta.ino(), meta.mtime_nsec())
            })
            .collect();
        all.sort();
        all
    };
    let before = (inodes(&bin), inodes(&conf_dir));

    let out = run(&set, &bin, &args);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        stdout_lines(&out),
        vec![
            format!("unchanged {}", bin.join("bridge").display()),
            format!("unchanged {}", bin.join("loopback").display()),
            format!("unchanged {}", conf_dir.join("10-net.conflist").display()),
            "done: 0 installed, 0 replaced, 3 unchanged, 0 kept".to_string(),
        ]
    );
    assert_eq!(
        (inodes(&bin), inodes(&conf_dir)),
        before,
        "no file rewritten"
    );
}

#[test]
fn copies_left_by_a_killed_run_are_removed() {
    let set = PluginSet::new(&[("bridge", b"bridge")]);
    let node = TempDir::new().unwrap();
    let bin = node.path().join("bin");
    fs::create_dir_all(&bin).unwrap();
    fs::write(bin.join(".bridge.cni-installer-4242"), b"half a brid").unwrap();
    // Not ours: kept.
    fs::write(bin.join(".keep.cni-installer-notes"), b"x").unwrap();
    let out = run(&set, &bin, &[]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        contents(&bin).keys().collect::<Vec<_>>(),
        [".keep.cni-installer-notes", "bridge"]
    );
}

#[test]
fn a_changed_mode_is_put_right() {
    let set = PluginSet::new(&[("bridge", b"bridge")]);
    let node = TempDir::new().unwrap();
    let bin = node.path().join("bin");
    assert!(run(&set, &bin, &[]).status.success());
    fs::set_permissions(bin.join("bridge"), fs::Permissions::from_mode(0o644)).unwrap();
    let out = run(&set, &bin, &[]);
    assert!(stdout_lines(&out).contains(&format!("replaced {}", bin.join("bridge").display())));
    let mode = fs::metadata(bin.join("bridge"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755);
}

#[test]
fn sleep_ends_on_sigterm() {
    let mut child = Command::new(INSTALLER)
        .arg("sleep")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "plugins installed; waiting for SIGTERM");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
}
