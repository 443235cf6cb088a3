//! The dummy plugin against a kernel with dummy links, which this
//! machine's kernel lacks: the shared qemu guest (testing/qemu-guest) runs
//! qemu/guest-tests.sh with the dummy binary and our host-local. It checks,
//! at every spec version, ADD (link kind, up, address, IPAM's routes and
//! DNS kept, the result in the version's form), CHECK (refused below
//! 0.4.0), DEL and a second DEL; then CHECK's findings (MAC, link down,
//! address gone, no prevResult, another kind under the name), a taken
//! name and a failed route undone (no link, no lease), DEL with the netns
//! gone, GC and STATUS through host-local. Debian's reference plugins
//! (1.1.1) have no dummy, so there is nothing to run beside it. Boots qemu,
//! so it runs only with CNI_QEMU=1.

use std::path::{Path, PathBuf};

/// Checks run once per spec version, named `v<digits>-<check>` in the
/// guest (`"$tag-<check>"` in the script).
const PER_VERSION: &[&str] = &[
    "add",
    "kind",
    "up",
    "address",
    "result-ip",
    "result-dns",
    "route",
    "del",
    "del-link-gone",
    "del-lease-gone",
    "del-twice",
];
const VERSIONS: [&str; 7] = ["010", "020", "030", "031", "040", "100", "110"];

/// Checks that run once.
const REQUIRED_CHECKS: &[&str] = &[
    "setup-binaries",
    "v010-result-no-ip6",
    "v031-check-refused",
    "v040-check",
    "v100-check",
    "v110-check",
    "v110-result-mac",
    "v110-result-sandbox",
    "host-dummy0-untouched",
    "check-setup",
    "check-wrong-mac",
    "check-down",
    "check-address-missing",
    "check-no-prev",
    "check-wrong-kind",
    "check-cleanup",
    "taken-name-msg",
    "taken-name-kept",
    "taken-name-no-lease",
    "rollback-error",
    "rollback-no-link",
    "rollback-no-lease",
    "gone-setup",
    "del-netns-gone",
    "del-netns-gone-lease",
    "gc-setup",
    "gc-keeps-valid",
    "gc-collects-stale",
    "status-ok",
];

fn guest_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("qemu/guest-tests.sh")
}

fn all_required() -> Vec<String> {
    let mut names: Vec<String> = REQUIRED_CHECKS.iter().map(|s| s.to_string()).collect();
    for version in VERSIONS {
        names.extend(
            PER_VERSION
                .iter()
                .map(|check| format!("v{version}-{check}")),
        );
    }
    names
}

#[test]
fn dummy_links_on_a_kernel_with_the_dummy_module() {
    let Some(guest) = qemu_guest::QemuGuest::prepare_if_enabled(&[]) else {
        return;
    };
    let host_local = conformance::testnet::workspace_plugin("host-local");
    let plugin = PathBuf::from(env!("CARGO_BIN_EXE_dummy"));
    let run = guest
        .run(&guest_script(), &[plugin, host_local])
        .unwrap_or_else(|e| panic!("cannot boot the guest: {e}"));
    let required = all_required();
    let required: Vec<&str> = required.iter().map(String::as_str).collect();
    run.assert_passed(&required);
}

#[test]
fn required_checks_are_unique_and_in_the_guest_script() {
    let fixed: Vec<&str> = REQUIRED_CHECKS
        .iter()
        .copied()
        .filter(|name| !name.starts_with('v'))
        .collect();
    qemu_guest::assert_checks_named_in_script(&guest_script(), &fixed);
    let text = std::fs::read_to_string(guest_script()).unwrap();
    for check in PER_VERSION.iter().chain(
        [
            "result-no-ip6",
            "check-refused",
            "check",
            "result-mac",
            "result-sandbox",
        ]
        .iter(),
    ) {
        assert!(
            text.contains(&format!("\"$tag-{check}\"")),
            "$tag-{check} not in the guest script"
        );
    }
}
