//! The vrf plugin against a kernel with VRF devices, which this machine's
//! kernel lacks: the shared qemu guest (testing/qemu-guest) runs
//! qemu/guest-tests.sh with our binary in /opt/cni/ours and the Debian
//! reference's (1.1.1, /usr/lib/cni/vrf) in /opt/cni/reference, and runs
//! the reference's vrf_test scenarios with each: the prevResult passed
//! through, enslaving, IPv4 and IPv6 addresses kept, routes moved to the
//! VRF table (only the interface's own; 1.1.1 predates the move and drops
//! them, and its CHECK does not look at membership: both pinned as the
//! reference's own checks), an interface with a master
//! refused, two interfaces in the same or in different VRFs (also with
//! the same IP), table conflicts, the VRF removed with its last member,
//! DEL twice and with the netns gone. Where ours differs on purpose (DEL
//! with the interface gone), each side has its own check. Ours alone: the
//! undo of a failed ADD, onlink routes, 0.4.0 and 1.1.0, CHECK of the
//! table. Boots qemu, so it runs only with CNI_QEMU=1.

use std::path::{Path, PathBuf};

use qemu_guest::{GuestFolder, QemuGuest};

/// The reference's scenarios, run by both (`<impl>-<check>` in the guest,
/// `"$i-<check>"` in the script).
const SCENARIO_CHECKS: &[&str] = &[
    "add",
    "prevresult-through",
    "enslaved",
    "vrf-up",
    "first-table",
    "v4-kept",
    "v6-kept",
    "other-route-stays",
    "local6-in-vrf",
    "check",
    "second-vrf",
    "first-route-untouched",
    "has-master",
    "same-vrf",
    "same-vrf-addresses",
    "different-vrfs",
    "different-tables",
    "same-ip-kept",
    "same-ip6-kept",
    "same-ip6-both",
    "explicit-table",
    "same-vrf-same-table",
    "different-vrf-same-table",
    "table-conflict",
    "table-conflict-unchanged",
    "del-first",
    "vrf-kept-with-member",
    "del-last",
    "del-twice",
    "del-netns-gone",
];

/// Checks that run once.
const REQUIRED_CHECKS: &[&str] = &[
    "setup-binaries",
    "ours-del-missing-interface",
    "ours-del-missing-interface-vrf-gone",
    "reference-del-missing-interface",
    "reference-del-missing-interface-vrf-kept",
    "undo-error",
    "undo-not-enslaved",
    "undo-vrf-deleted",
    "undo-route-back",
    "undo-address-kept",
    "onlink-add",
    "onlink-route-moved",
    "ours-check-table",
    "ours-routes-moved",
    "ours-check-not-member",
    "ours-second-routes-moved",
    "reference-routes-dropped",
    "reference-check-not-member-passes",
];

const REFERENCE: &str = "/usr/lib/cni/vrf";

fn guest_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("qemu/guest-tests.sh")
}

#[test]
fn vrf_scenarios_beside_the_reference_on_a_kernel_with_vrf() {
    let Some(guest) = QemuGuest::prepare_if_enabled(&[]) else {
        return;
    };
    assert!(
        Path::new(REFERENCE).is_file(),
        "{REFERENCE} missing: install Debian's containernetworking-plugins"
    );
    let ours = PathBuf::from(env!("CARGO_BIN_EXE_vrf"));
    let run = guest
        .run_with_folders(
            &guest_script(),
            &[
                GuestFolder::new("/opt/cni/ours", [ours]),
                GuestFolder::new("/opt/cni/reference", [REFERENCE]),
            ],
        )
        .unwrap_or_else(|e| panic!("cannot boot the guest: {e}"));
    let mut required: Vec<String> = REQUIRED_CHECKS.iter().map(|s| s.to_string()).collect();
    for implementation in ["ours", "reference"] {
        required.extend(
            SCENARIO_CHECKS
                .iter()
                .map(|c| format!("{implementation}-{c}")),
        );
    }
    for version in ["0.4.0", "1.1.0"] {
        for verb in ["add", "check", "del"] {
            required.push(format!("ours-{verb}-{version}"));
        }
    }
    let required: Vec<&str> = required.iter().map(String::as_str).collect();
    run.assert_passed(&required);
}

#[test]
fn required_checks_are_unique_and_in_the_guest_script() {
    qemu_guest::assert_checks_named_in_script(&guest_script(), REQUIRED_CHECKS);
    let text = std::fs::read_to_string(guest_script()).unwrap();
    for (index, check) in SCENARIO_CHECKS.iter().enumerate() {
        assert!(!SCENARIO_CHECKS[..index].contains(check), "{check} twice");
        assert!(
            text.contains(&format!("\"$i-{check}\"")),
            "$i-{check} not in the guest script"
        );
    }
}
