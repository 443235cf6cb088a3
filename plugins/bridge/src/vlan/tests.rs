//! VLAN decisions against the recording fake (see `fake.rs` for why a fake:
//! this machine's kernel has no `CONFIG_BRIDGE_VLAN_FILTERING`).

use std::collections::BTreeMap;

use super::fake::{Entry, RecordingVlans, VlanCall};
use super::*;

const PORT: u32 = 7;

fn trunk_101_200_210() -> Vec<u16> {
    let mut vids = vec![101];
    vids.extend(200..=210);
    vids
}

fn apply(plan: &PortVlans) -> RecordingVlans {
    let mut fake = RecordingVlans::default().with_new_port(PORT);
    apply_port_vlans(&mut fake, PORT, "veth0", plan).unwrap();
    fake
}

#[test]
fn no_vlan_settings_leave_the_port_alone() {
    let plan = PortVlans::plan(None, &[], false);
    assert!(plan.is_empty());
    let fake = apply(&plan);
    assert!(fake.calls.is_empty());
    assert_eq!(fake.tables[&PORT], BTreeMap::from([(1, Entry::ACCESS)]));
}

/// Reference: "l2 bridge with vlan id 100" (default VLAN removed, since
/// preserveDefaultVlan defaults to false).
#[test]
fn access_vlan_replaces_the_default_vlan() {
    let plan = PortVlans::plan(Some(100), &[], false);
    let fake = apply(&plan);
    assert_eq!(
        fake.calls,
        vec![
            VlanCall::List(PORT),
            VlanCall::Del { port: PORT, vid: 1 },
            VlanCall::Add {
                port: PORT,
                vid: 100,
                pvid_untagged: true
            },
        ]
    );
    assert_eq!(fake.tables[&PORT], BTreeMap::from([(100, Entry::ACCESS)]));
}

/// Reference: "vlan id 100" with the default VLAN preserved.
#[test]
fn preserved_default_vlan_stays_tagged_beside_the_access_vlan() {
    let fake = apply(&PortVlans::plan(Some(100), &[], true));
    assert!(!fake.calls.contains(&VlanCall::List(PORT)));
    assert_eq!(
        fake.tables[&PORT],
        BTreeMap::from([
            (
                1,
                Entry {
                    pvid: false,
                    untagged: true
                }
            ),
            (100, Entry::ACCESS)
        ])
    );
}

/// Reference: "l2 bridge with vlanTrunk 101,200~210": tagged trunk VLANs
/// and VLAN 1 as the native (PVID, untagged) VLAN.
#[test]
fn trunk_gets_tagged_vlans_and_native_vlan_1() {
    let trunk = trunk_101_200_210();
    let fake = apply(&PortVlans::plan(None, &trunk, false));
    let mut expected: BTreeMap<u16, Entry> = trunk.iter().map(|v| (*v, Entry::TAGGED)).collect();
    expected.insert(1, Entry::ACCESS);
    assert_eq!(fake.tables[&PORT], expected);
    // Native VLAN 1 is added last, after the tagged ones.
    assert_eq!(
        fake.calls.last(),
        Some(&VlanCall::Add {
            port: PORT,
            vid: 1,
            pvid_untagged: true
        })
    );
}

/// A tagged 1 in the trunk list is still native in the end, as in the
/// reference (which adds the native VLAN last).
#[test]
fn native_vlan_wins_over_a_tagged_1() {
    let fake = apply(&PortVlans::plan(None, &[1, 5], false));
    assert_eq!(fake.tables[&PORT][&1], Entry::ACCESS);
    assert_eq!(fake.tables[&PORT][&5], Entry::TAGGED);
}

/// Reference: "l2 bridge with vlan 100, and vlanTrunk 101,200~210".
#[test]
fn access_vlan_and_trunk_together() {
    let trunk = trunk_101_200_210();
    let fake = apply(&PortVlans::plan(Some(100), &trunk, false));
    let mut expected: BTreeMap<u16, Entry> = trunk.iter().map(|v| (*v, Entry::TAGGED)).collect();
    expected.insert(100, Entry::ACCESS);
    assert_eq!(fake.tables[&PORT], expected);
    assert!(!fake.tables[&PORT].contains_key(&1));
}

#[test]
fn a_kernel_without_vlan_filtering_is_named_in_the_error() {
    let mut fake = RecordingVlans {
        unsupported: true,
        ..RecordingVlans::default()
    };
    let e = apply_port_vlans(
        &mut fake,
        PORT,
        "veth0",
        &PortVlans::plan(Some(100), &[], true),
    )
    .unwrap_err();
    assert!(matches!(e, VlanError::Unsupported { .. }), "{e}");
    let text = e.to_string();
    assert!(text.contains(VLAN_FILTERING_OPTION), "{text}");
    assert!(
        text.contains("add untagged VLAN 100 to bridge port \"veth0\""),
        "{text}"
    );
    assert_eq!(e.to_cni_error().code, ErrorCode::Internal);
    // Other kernel errors keep their errno.
    let e = VlanError::from_netlink(
        "x",
        NetlinkError::Kernel {
            errno: Errno::EINVAL,
            message: None,
        },
    );
    assert!(matches!(e, VlanError::Kernel { .. }));
}

#[test]
fn vlan_messages_address_the_bridge_table_of_the_port() {
    let msg = vlan_message(
        PORT,
        100,
        BridgeVlanInfoFlags::Pvid | BridgeVlanInfoFlags::Untagged,
    );
    assert_eq!(msg.header.interface_family, AddressFamily::Bridge);
    assert_eq!(msg.header.index, PORT);
    assert_eq!(
        msg.attributes,
        vec![LinkAttribute::AfSpecBridge(vec![
            AfSpecBridge::Flags(BridgeFlag::Controller),
            AfSpecBridge::VlanInfo(BridgeVlanInfo {
                flags: BridgeVlanInfoFlags::Pvid | BridgeVlanInfoFlags::Untagged,
                vid: 100
            }),
        ])]
    );
}
