//! The vlan plugin against a kernel with 802.1Q links, which this
//! machine's kernel lacks: the shared qemu guest (testing/qemu-guest) runs
//! qemu/guest-tests.sh with the vlan binary and our host-local and
//! static. It checks the link (kind, VLAN id, protocol, MTU, no temporary
//! names left), the result, traffic to a peer on the same VLAN and none
//! from another VLAN id, one VLAN id per parent, the master's MTU taken
//! without `mtu`, no ARP/ND notify, linkInContainer, CHECK (and what it
//! finds: another VLAN id, MAC or MTU), the rollback of a failed ADD (IPAM
//! missing, a route refused, `static` answering without addresses) and
//! DEL (twice, without the netns). Boots qemu (about 45 s), so it runs
//! only with CNI_QEMU=1.

use std::path::{Path, PathBuf};

use conformance::testnet::workspace_plugin;

/// Checks guest-tests.sh must report as PASS; a check the script silently
/// skipped fails the test.
const REQUIRED_CHECKS: &[&str] = &[
    "setup-binaries",
    "add-status",
    "add-link-kind",
    "add-link-id",
    "add-link-protocol",
    "add-link-up",
    "add-result-mac",
    "add-result-sandbox",
    "add-result-ip",
    "add-address-on-link",
    "add-default-route",
    "add-no-temp-links",
    "add-no-arp-notify",
    "traffic-tagged",
    "check-ok",
    "check-wrong-vlan-id",
    "check-wrong-mac-code",
    "check-wrong-mac",
    "isolation-add",
    "isolation-vlan-300",
    "vlan-id-in-use-code",
    "vlan-id-in-use-msg",
    "vlan-id-in-use-nothing-left",
    "vlan-id-in-use-no-lease",
    "mtu-add",
    "mtu-on-link",
    "mtu-check",
    "check-wrong-mtu",
    "mtu-inherited-add",
    "mtu-inherited",
    "mtu-inherited-del",
    "mtu-too-big-code",
    "mtu-too-big-msg",
    "mtu-too-big-nothing-left",
    "mtu-too-big-no-lease",
    "no-ips-code",
    "no-ips-msg",
    "no-ips-nothing-left",
    "ipam-add-failed-msg",
    "ipam-add-failed-nothing-left",
    "lic-add",
    "lic-link-parent",
    "lic-traffic",
    "lic-check",
    "rollback-error",
    "rollback-no-link",
    "rollback-no-lease",
    "del-status",
    "del-link-gone",
    "del-lease-gone",
    "del-master-stays",
    "del-twice",
    "del-netns-gone",
    "del-netns-gone-link-in-container",
    "del-all-leases-released",
];

fn guest_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("qemu/guest-tests.sh")
}

#[test]
fn vlan_links_on_a_kernel_with_8021q() {
    qemu_guest::run_required_checks(
        &[],
        &guest_script(),
        || {
            vec![
                PathBuf::from(env!("CARGO_BIN_EXE_vlan")),
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
