//! The qemu layer: boots a Debian 6.1 kernel under qemu and runs the plugin
//! binary against real kernel state in the guest (netdevsim VFs, an rdma_rxe
//! device). See qemu/README.md. Takes about a minute the first time (kernel
//! download, netdevsim build) and about 40 s afterwards (software emulation),
//! so it runs only with RDMA_SRIOV_QEMU=1; it needs root (apt-get) on Debian
//! bookworm.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Checks guest-tests.sh must report as PASS. Listed here so that a check the
/// guest silently skipped fails the test instead of going unnoticed.
const REQUIRED_CHECKS: &[&str] = &[
    // setup
    "setup-modules",
    "setup-netdevsim-vfs",
    "setup-rxe-link",
    "plugin-binary",
    // A: PF-side VF settings applied, checked and restored (netdevsim)
    "pf-add",
    "pf-add-result-mac",
    "pf-add-result-pci",
    "pf-add-mac",
    "pf-add-vlan-qos",
    "pf-add-vlan-proto",
    "pf-add-rate",
    "pf-add-spoofchk",
    "pf-add-trust",
    "pf-add-link-state",
    "pf-check",
    "pf-check-detects-drift",
    "pf-add-busy-vf-refused",
    "pf-del",
    "pf-del-restores",
    "pf-other-vfs-untouched",
    "pf-del-state-removed",
    "pf-del-again",
    // B: a setting the kernel refuses rolls the others back
    "pf-add-refused-by-kernel",
    "pf-rollback-restores",
    "pf-rollback-state-removed",
    "pf-add-after-rollback",
    "pf-del-after-rollback",
    // C: RDMA in shared mode: mode query, port query, netdev to device mapping
    "rdma-mode-initially-shared",
    "rdma-status-refuses-shared",
    "rdma-status-shared-allowed",
    "rdma-add-refuses-shared",
    "rdma-shared-add",
    "rdma-shared-add-netdev-in-pod",
    "rdma-shared-add-pf-vlan",
    "rdma-shared-add-device-stays",
    "rdma-check-port-active",
    "rdma-check-detects-port-down",
    "rdma-shared-del",
    "rdma-shared-del-netdev-back",
    "rdma-shared-del-pf-restored",
    "rdma-shared-del-state-removed",
    "rdma-netdev-to-device-mapping",
    "fact-rxe-dies-with-netdev-move",
    "rdma-check-missing-device",
    "rdma-mapped-del",
    // D: RDMA in exclusive mode: the move and its EOPNOTSUPP
    "setup-rdma-exclusive",
    "rdma-status-exclusive",
    "rdma-move-eopnotsupp",
    "rdma-move-rollback-netdev",
    "rdma-move-rollback-pf",
    "rdma-move-rollback-state",
    "rdma-move-device-stays",
    "rdma-exclusive-mapped-add-fails",
    "rdma-exclusive-mapped-rollback",
    "rdma-exclusive-mapped-rollback-state",
];

fn enabled() -> bool {
    std::env::var("RDMA_SRIOV_QEMU").is_ok_and(|value| value == "1")
}

fn qemu_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("qemu")
}

/// `<target>/qemu-rdma`, next to the profile directory holding the binary.
fn cache_dir(binary: &Path) -> PathBuf {
    if let Some(dir) = std::env::var_os("RDMA_SRIOV_QEMU_CACHE") {
        return PathBuf::from(dir);
    }
    let target = binary
        .parent()
        .and_then(Path::parent)
        .expect("the binary lives in <target>/<profile>/");
    target.join("qemu-rdma")
}

fn run(command: &mut Command) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|err| panic!("cannot run {command:?}: {err}"));
    // Shown by the test harness when the test fails.
    eprintln!("$ {command:?}\n{}", String::from_utf8_lossy(&output.stderr));
    output
}

/// One `CHECK <name> PASS|FAIL <detail>` line of the guest console.
#[derive(Debug, PartialEq, Eq)]
struct CheckLine {
    name: String,
    passed: bool,
    detail: String,
}

/// The CHECK lines of the guest console, in order; a status other than PASS
/// counts as a failure.
fn parse_checks(console: &str) -> Vec<CheckLine> {
    console
        .lines()
        .filter_map(|line| line.strip_prefix("CHECK "))
        .filter_map(|rest| {
            let mut fields = rest.splitn(3, ' ');
            let name = fields.next()?.to_owned();
            let passed = fields.next()? == "PASS";
            let detail = fields.next().unwrap_or("").to_owned();
            Some(CheckLine {
                name,
                passed,
                detail,
            })
        })
        .collect()
}

#[test]
fn plugin_against_real_kernel_in_qemu() {
    if !enabled() {
        println!("SKIPPED: set RDMA_SRIOV_QEMU=1 to boot the qemu guest (qemu/README.md)");
        return;
    }
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_rdma-sriov"));
    let cache = cache_dir(&binary);
    let qemu = qemu_dir();

    let prepare = run(Command::new(qemu.join("prepare.sh"))
        .arg(&cache)
        .arg(&binary));
    assert!(prepare.status.success(), "prepare.sh failed");

    let boot = run(Command::new(qemu.join("run.sh"))
        .arg(&cache)
        .arg(qemu.join("guest-tests.sh")));
    let console = String::from_utf8_lossy(&boot.stdout);
    let checks = parse_checks(&console);

    let failed: Vec<_> = checks
        .iter()
        .filter(|check| !check.passed)
        .map(|check| format!("{} {}", check.name, check.detail))
        .collect();
    let missing: Vec<_> = REQUIRED_CHECKS
        .iter()
        .filter(|name| !checks.iter().any(|check| check.name == **name))
        .collect();
    assert!(
        failed.is_empty() && missing.is_empty(),
        "failed checks: {failed:#?}\nmissing checks: {missing:?}\nconsole:\n{console}"
    );
    assert!(
        console.lines().any(|line| line == "ALL-DONE"),
        "the guest script did not finish:\n{console}"
    );
    assert!(boot.status.success(), "run.sh failed:\n{console}");
}

#[test]
fn check_lines_parse() {
    let console = "noise\nCHECK a-b PASS some detail here\nCHECK c FAIL\nCHECKX d PASS\nCHECK e\n";
    let checks = parse_checks(console);
    assert_eq!(
        checks,
        vec![
            CheckLine {
                name: "a-b".to_owned(),
                passed: true,
                detail: "some detail here".to_owned(),
            },
            CheckLine {
                name: "c".to_owned(),
                passed: false,
                detail: String::new(),
            },
        ]
    );
}

#[test]
fn required_checks_are_unique_and_in_the_guest_script() {
    let script = std::fs::read_to_string(qemu_dir().join("guest-tests.sh")).unwrap();
    for (index, name) in REQUIRED_CHECKS.iter().enumerate() {
        assert!(
            !REQUIRED_CHECKS[..index].contains(name),
            "{name} listed twice"
        );
        let named = script.contains(&format!(" {name} ")) || script.contains(&format!(" {name}\n"));
        assert!(named, "{name} not in guest-tests.sh");
    }
}
