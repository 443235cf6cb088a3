//! The macvlan modes a host test cannot show well, on the stock kernel of
//! the shared qemu guest (testing/qemu-guest): qemu/guest-tests.sh runs
//! with macvlan, vlan, ipvlan, tuning, sbr and our host-local. It shows
//! each mode by its traffic: bridge-mode siblings on a dummy parent reach
//! each other with no wire; private siblings do not, even through a switch
//! that reflects frames (hairpin); vepa siblings do only through that
//! switch (its port counts their packets) and not once hairpin is off;
//! passthru takes a netdevsim port whole (its MAC, a promiscuous parent, no
//! second macvlan, all put back on DEL) and carries traffic on a veth
//! parent; source mode receives nothing until the peer's MAC is listed.
//! Then tuning and sbr chained behind a vlan and an ipvlan rail, as on
//! every RDMA rail: MTU, MAC, promisc and ARP sysctls, the rail's table
//! used for traffic from its address, CHECK of each plugin, DEL in the
//! runtime's order putting everything back. Boots qemu (about 70 s), so it
//! runs only with CNI_QEMU=1.

use std::path::{Path, PathBuf};

use conformance::testnet::workspace_plugin;

/// Checks guest-tests.sh must report as PASS; a check the script silently
/// skipped fails the test.
const REQUIRED_CHECKS: &[&str] = &[
    "setup-binaries",
    "bridge-add-1",
    "bridge-add-2",
    "bridge-link-mode",
    "bridge-pods-reach",
    "private-add-1",
    "private-add-2",
    "private-link-mode",
    "private-pods-isolated",
    "vepa-add-1",
    "vepa-add-2",
    "vepa-link-mode",
    "vepa-pods-reach-via-switch",
    "vepa-traffic-crossed-switch",
    "vepa-isolated-without-hairpin",
    "vepa-check",
    "passthru-setup-port",
    "passthru-add",
    "passthru-link-mode",
    "passthru-takes-port-mac",
    "passthru-result-mac",
    "passthru-port-promiscuous",
    "passthru-port-taken",
    "passthru-check",
    "passthru-del",
    "passthru-del-port-stays",
    "passthru-del-promiscuity-restored",
    "passthru-wire-add",
    "passthru-traffic",
    "source-add",
    "source-link-mode",
    "source-unlisted-no-traffic",
    "source-listed-traffic",
    "source-check",
    "modes-del-links-gone",
    "modes-del-leases-gone",
    "modes-del-parents-stay",
    "tv-vlan-add",
    "tv-tuning-add",
    "tv-tuning-mtu",
    "tv-tuning-mac",
    "tv-tuning-result-mac",
    "tv-tuning-promisc",
    "tv-tuning-sysctls",
    "tv-sbr-add",
    "tv-sbr-rule",
    "tv-sbr-table-default",
    "tv-sbr-main-no-default",
    "tv-rail-traffic",
    "tv-vlan-check",
    "tv-tuning-check",
    "tv-sbr-check",
    "tv-sbr-del",
    "tv-sbr-del-rule-gone",
    "tv-tuning-del",
    "tv-tuning-del-restored",
    "tv-vlan-del",
    "tv-vlan-del-link-gone",
    "ti-ipvlan-add",
    "ti-tuning-add",
    "ti-tuning-sysctls",
    "ti-sbr-add",
    "ti-sbr-rule",
    "ti-rail-traffic",
    "ti-ipvlan-check",
    "ti-tuning-check",
    "ti-sbr-check",
    "ti-sbr-del",
    "ti-sbr-del-rule-gone",
    "ti-tuning-del",
    "ti-ipvlan-del",
    "ti-ipvlan-del-link-gone",
    "rails-del-leases-gone",
];

fn guest_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("qemu/guest-tests.sh")
}

#[test]
fn macvlan_modes_and_rail_chains_on_a_stock_kernel() {
    qemu_guest::run_required_checks(
        &[],
        &guest_script(),
        || {
            let mut binaries = vec![PathBuf::from(env!("CARGO_BIN_EXE_macvlan"))];
            binaries
                .extend(["vlan", "ipvlan", "tuning", "sbr", "host-local"].map(workspace_plugin));
            binaries
        },
        REQUIRED_CHECKS,
    );
}

#[test]
fn required_checks_are_unique_and_in_the_guest_script() {
    qemu_guest::assert_checks_named_in_script(&guest_script(), REQUIRED_CHECKS);
}
