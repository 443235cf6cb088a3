//! host-device against a kernel with devices this machine's lacks: the
//! shared qemu guest (testing/qemu-guest) runs qemu/guest-tests.sh with the
//! host-device binary and our static and host-local. There, netdevsim ports
//! stand for physical NICs (the kernel returns them to the initial
//! namespace when a pod's namespace dies, where a veth is destroyed) and
//! soft-RoCE gives a real RDMA device for the lookup (it cannot change
//! namespace: only hardware RDMA devices can). Boots qemu (about a
//! minute), so it runs only with CNI_QEMU=1 (or HOST_DEVICE_QEMU=1).

use std::path::{Path, PathBuf};

use conformance::testnet::workspace_plugin;

/// Checks guest-tests.sh must report as PASS; a check the script silently
/// skipped fails the test.
const REQUIRED_CHECKS: &[&str] = &[
    "setup-binaries",
    // R: RDMA lookup with soft-RoCE in exclusive mode
    "setup-rxe",
    "setup-rdma-exclusive",
    "rdma-soft-device-found-and-left",
    "rdma-netdev-moved",
    "fact-rxe-gone-with-its-netdev",
    "rdma-del",
    // netdevsim ports
    "setup-netdevsim-ports",
    "fact-nsim-has-no-link-kind",
    // A: by name, static IPAM, CHECK, DEL restores MAC and MTU
    "name-add",
    "name-in-pod",
    "name-gone-from-host",
    "name-result-mac",
    "name-address",
    "name-state-returns-to-host",
    "name-check",
    "name-del",
    "name-del-restored",
    "name-del-state-gone",
    "name-del-twice",
    // B: the pod's namespace destroyed, the device returned by the kernel
    "refund-add",
    "refund-lease-taken",
    "fact-nsim-returns-under-pod-name",
    "fact-returned-with-alias",
    "refund-del",
    "refund-restored",
    "refund-lease-released",
    "refund-state-gone",
    // C: DEL right after the namespace is deleted
    "race-del",
    "race-restored",
    "race-lease-released",
    // D, E: kernelpath and hwaddr
    "kernelpath-add",
    "kernelpath-first-port",
    "kernelpath-del",
    "hwaddr-add",
    "hwaddr-port",
    "hwaddr-del",
    // F: the host name taken while the device is in the pod
    "taken-del-fails",
    "taken-stays-in-pod",
    "taken-del-after",
    "taken-restored",
    // G: GC
    "gc",
    "gc-restored",
    "gc-keeps-listed",
    "gc-state-left",
    "gc-del-listed",
];

fn guest_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("qemu/guest-tests.sh")
}

#[test]
fn host_device_on_a_kernel_with_netdevsim_and_rxe() {
    qemu_guest::run_required_checks(
        &["HOST_DEVICE_QEMU"],
        &guest_script(),
        || {
            vec![
                PathBuf::from(env!("CARGO_BIN_EXE_host-device")),
                workspace_plugin("static"),
                workspace_plugin("host-local"),
            ]
        },
        REQUIRED_CHECKS,
    );
}

#[test]
fn required_checks_are_unique_and_in_the_guest_script() {
    qemu_guest::assert_checks_named_in_script(&guest_script(), REQUIRED_CHECKS);
}
