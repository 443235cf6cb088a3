//! The harness against the real guest: every link type the guest is there
//! for can be made in it, and a binary handed to `run` runs there. Boots
//! qemu, so only with CNI_QEMU=1 (see README.md).

use std::path::{Path, PathBuf};

const REQUIRED_CHECKS: &[&str] = &[
    "kernel-release",
    "link-vlan",
    "link-ipvlan",
    "link-macvlan",
    "link-dummy",
    "link-vrf",
    "bridge-vlan-filtering",
    "bridge-vlan-entry",
    "netdevsim-port",
    "rdma-rxe",
    "binary-runs",
    "cni-path",
];

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/guest-smoke.sh")
}

#[test]
fn guest_kernel_has_every_link_type() {
    let Some(guest) = qemu_guest::QemuGuest::prepare_if_enabled(&[]) else {
        return;
    };
    // A dynamically linked host binary, to see its libraries come along.
    let run = guest
        .run(&script(), &[Path::new("/usr/bin/flock")])
        .expect("run.sh starts");
    run.assert_passed(REQUIRED_CHECKS);
}

#[test]
fn required_checks_are_in_the_guest_script() {
    qemu_guest::assert_checks_named_in_script(&script(), REQUIRED_CHECKS);
}
