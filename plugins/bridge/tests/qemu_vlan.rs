//! bridge's `vlan`, `vlanTrunk` and `preserveDefaultVlan` against a kernel
//! with bridge VLAN filtering, which this machine's kernel lacks: the
//! shared qemu guest (testing/qemu-guest) runs qemu/guest-vlan.sh with the
//! bridge binary and our host-local. It checks the VLAN table of each port
//! (`bridge -j vlan show`), the 4-interface result of a VLAN network with
//! isGateway (`<bridge>.<vlan>`), and traffic: pods of one VLAN reach each
//! other and the VLAN's gateway, pods of another VLAN in the same subnet do
//! not, a trunk port carries its tagged VLANs and no others; a dual-stack
//! VLAN network with both gateways on `<bridge>.<vlan>`. Boots qemu (about
//! 45 s), so it runs only with CNI_QEMU=1.

use std::path::{Path, PathBuf};

use conformance::testnet::workspace_plugin;

/// Checks guest-vlan.sh must report as PASS; a check the script silently
/// skipped fails the test.
const REQUIRED_CHECKS: &[&str] = &[
    "setup-binaries",
    // vlan 100 with isGateway
    "vlan-gw-add",
    "bridge-vlan-filtering",
    "vlan-gw-result-interfaces",
    "vlan-gw-result-sandbox",
    "vlan-gw-result-ip",
    "vlan-gw-result-macs",
    "vlan-gw-address-on-vlan-iface",
    "vlan-gw-no-address-on-bridge",
    "vlan-access-port",
    "vlan-gw-port",
    "vlan-gw-forwarding",
    "vlan-gw-check",
    "vlan-gw-add-040",
    "vlan-gw-result-040",
    "vlan-gw-reused",
    "traffic-same-vlan",
    "traffic-to-vlan-gateway",
    // vlan 200, same subnet
    "vlan200-add",
    "vlan200-result-interfaces",
    "vlan200-access-port",
    "traffic-vlan200-pods",
    "traffic-across-vlans-blocked",
    "traffic-other-vlan-gateway-blocked",
    // trunk
    "trunk-add",
    "trunk-port",
    "traffic-trunk-tagged-100",
    "traffic-trunk-tagged-200-blocked",
    "trunk-check",
    // vlan and vlanTrunk
    "mixed-add",
    "mixed-port",
    "traffic-mixed-untagged-is-100",
    // preserveDefaultVlan
    "preserve-add",
    "preserve-port",
    "no-preserve-port",
    // dual stack, isDefaultGateway
    "dual-add",
    "dual-result-interfaces",
    "dual-gateway-addresses",
    "dual-default-routes",
    "dual-port",
    "traffic-dual-gateway-v4",
    "traffic-dual-gateway-v6",
    "traffic-dual-pods-v6",
    "dual-check",
    // DEL
    "vlan-gw-del",
    "vlan-gw-del-host-veth-gone",
    "vlan-gw-del-lease-released",
    "vlan-gw-del-gateway-stays",
    "traffic-gateway-after-del",
    "vlan-gw-del-again",
    // A gateway interface that outlived its bridge
    "rebuilt-bridge-gateway-detached",
    "rebuilt-bridge-add",
    "rebuilt-bridge-gateway-port",
    "rebuilt-bridge-traffic-gateway",
];

fn guest_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("qemu/guest-vlan.sh")
}

#[test]
fn vlans_against_a_kernel_with_vlan_filtering() {
    qemu_guest::run_required_checks(
        &[],
        &guest_script(),
        || {
            vec![
                PathBuf::from(env!("CARGO_BIN_EXE_bridge")),
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
