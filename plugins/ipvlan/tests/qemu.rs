//! The ipvlan plugin against a kernel with ipvlan, which this machine's
//! kernel lacks: the shared qemu guest (testing/qemu-guest) runs
//! qemu/guest-tests.sh with the ipvlan binary and our host-local and
//! static. It checks the link (kind, mode, the parent's MAC, MTU, no
//! temporary names left) and the result in each mode, traffic (l2 to a
//! peer beyond the parent and between pods, l3 and l3s between pods),
//! chained use (master and addresses from the prevResult), the default
//! route's parent, linkInContainer, CHECK (and a MAC or mode it finds
//! different), the rollback of a failed ADD (a route refused, `static`
//! answering without addresses), and DEL (twice, without the netns,
//! without a master to find). Boots qemu (about 50 s), so it runs only
//! with CNI_QEMU=1.

use std::path::{Path, PathBuf};

use conformance::testnet::workspace_plugin;

/// Checks guest-tests.sh must report as PASS; a check the script silently
/// skipped fails the test.
const REQUIRED_CHECKS: &[&str] = &[
    "setup-binaries",
    "l2-add",
    "l2-link-kind",
    "l2-link-mode",
    "l2-link-shares-master-mac",
    "l2-result-mac",
    "l2-result-sandbox",
    "l2-result-ip",
    "l2-no-temp-links",
    "l2-traffic-peer",
    "l2-add-second",
    "l2-traffic-pods",
    "l2-check",
    "l2-check-wrong-mode",
    "l2-check-wrong-mac-code",
    "l2-check-wrong-mac",
    "l3-add",
    "l3-link-mode",
    "l3-traffic-pods",
    "l3-check",
    "l3s-add",
    "l3s-link-mode",
    "l3s-traffic-pods",
    "l3s-check",
    "chained-add",
    "chained-address",
    "chained-result-interfaces",
    "chained-default-route",
    "chained-traffic",
    "chained-check",
    "chained-del",
    "chained-del-link-gone",
    "default-master-add",
    "default-master-parent",
    "lic-add",
    "lic-link-parent",
    "lic-traffic",
    "lic-check",
    "mtu-add",
    "mtu-on-link",
    "mtu-too-big-code",
    "mtu-too-big-nothing-left",
    "mtu-too-big-no-lease",
    "mtu-inherited-add",
    "mtu-inherited",
    "mtu-inherited-del",
    "mtu-inherited-link-gone",
    "rollback-error",
    "rollback-no-link",
    "rollback-no-lease",
    "no-ips-code",
    "no-ips-msg",
    "no-ips-nothing-left",
    "del-status",
    "del-link-gone",
    "del-lease-gone",
    "del-master-stays",
    "del-twice",
    "del-netns-gone",
    "del-netns-gone-link-in-container",
    "del-without-master",
    "del-without-master-link-gone",
];

fn guest_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("qemu/guest-tests.sh")
}

#[test]
fn ipvlan_links_on_a_kernel_with_ipvlan() {
    qemu_guest::run_required_checks(
        &[],
        &guest_script(),
        || {
            vec![
                PathBuf::from(env!("CARGO_BIN_EXE_ipvlan")),
                workspace_plugin("host-local"),
                workspace_plugin("static"),
            ]
        },
        &qemu_guest::with_spec_version_checks(REQUIRED_CHECKS),
    );
}

#[test]
fn required_checks_are_unique_and_in_the_guest_script() {
    qemu_guest::assert_checks_named_in_script(&guest_script(), REQUIRED_CHECKS);
    let script = std::fs::read_to_string(guest_script()).unwrap();
    assert!(
        script.contains("\ncheck_spec_versions "),
        "the script runs check_spec_versions"
    );
}
