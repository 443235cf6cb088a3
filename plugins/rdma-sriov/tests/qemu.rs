//! The qemu layer: boots the shared test guest (testing/qemu-guest, a
//! Debian 6.1 kernel under qemu) and runs the plugin binary against real
//! kernel state in it (netdevsim VFs, an rdma_rxe device), with the checks
//! of qemu/guest-tests.sh. See qemu/README.md. Takes about a minute the
//! first time (kernel download, netdevsim build) and about 40 s afterwards
//! (software emulation), so it runs only with RDMA_SRIOV_QEMU=1 (or
//! CNI_QEMU=1, which runs every crate's guest tests); it needs root
//! (apt-get) on Debian bookworm.

use std::path::{Path, PathBuf};

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

fn guest_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("qemu/guest-tests.sh")
}

#[test]
fn plugin_against_real_kernel_in_qemu() {
    qemu_guest::run_required_checks(
        &["RDMA_SRIOV_QEMU"],
        &guest_script(),
        || vec![PathBuf::from(env!("CARGO_BIN_EXE_rdma-sriov"))],
        REQUIRED_CHECKS,
    );
}

#[test]
fn required_checks_are_unique_and_in_the_guest_script() {
    qemu_guest::assert_checks_named_in_script(&guest_script(), REQUIRED_CHECKS);
}
