//! The built `rdma-sriov` binary on a fake machine (see `support`): real
//! netns moves, renames, MAC/MTU, host-local IPAM, state, locks and
//! allocation records; the PF-side VF settings and RDMA netlink go to the
//! simulated layer, which records them, standing in for SR-IOV and RDMA
//! hardware this machine does not have.

mod support;

use std::thread;
use std::time::Duration;

use conformance::testnet::TestNetns;
use rdma_sriov::alloc::VfLock;
use rdma_sriov::fake::{FakeRdmaDevice, FakeRdmaMode};
use rdma_sriov::pf::{VfLinkState, VfState, VlanProto};
use rdma_sriov::verbs::PortState;
use serde_json::{json, Value};

use support::*;

/// A VF whose PF-side state is not the default, so that restoring
/// "the original" is visible.
fn original_vf() -> VfState {
    VfState {
        admin_mac: "02:aa:00:00:00:01".parse().unwrap(),
        vlan: 5,
        qos: 0,
        vlan_proto: VlanProto::Dot1Q,
        spoofchk: true,
        trust: false,
        link_state: VfLinkState::Auto,
        min_tx_rate: 0,
        max_tx_rate: 0,
        node_guid: None,
        port_guid: None,
    }
}

fn all_settings() -> Value {
    json!({
        "deviceID": vf_pci(0),
        "mac": "02:00:00:00:77:01",
        "vlan": 100, "vlanQoS": 3,
        "spoofchk": "off", "trust": "on", "link_state": "enable",
        "min_tx_rate": 10, "max_tx_rate": 100,
        "mtu": 1400,
    })
}

const APPLY_CALLS: [&str; 6] = [
    "pf0 vf 0 vlan 100 qos 3 proto 802.1Q",
    "pf0 vf 0 mac 02:00:00:00:77:01",
    "pf0 vf 0 min_tx_rate 10 max_tx_rate 100",
    "pf0 vf 0 spoofchk off",
    "pf0 vf 0 trust on",
    "pf0 vf 0 state enable",
];

/// Restores in the reverse order, each to the original value.
const RESTORE_CALLS: [&str; 6] = [
    "pf0 vf 0 state auto",
    "pf0 vf 0 trust off",
    "pf0 vf 0 spoofchk on",
    "pf0 vf 0 min_tx_rate 0 max_tx_rate 0",
    "pf0 vf 0 mac 02:aa:00:00:00:01",
    "pf0 vf 0 vlan 5 qos 0 proto 802.1Q",
];

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// A rig with VF 0 (`vf0`, `mlx5_0`) whose host-side peer has the
/// gateway address.
fn rig_with_vf0(tag: &str) -> Rig {
    let rig = Rig::new(tag);
    rig.standard_vf(0, Some(&format!("{GATEWAY}/24")));
    rig.write_world(&world_with(2, original_vf(), mlx_devices(1)));
    rig
}

#[test]
fn add_moves_vf_into_pod_and_del_restores_everything() {
    let rig = rig_with_vf0("rs-add");
    let pod = TestNetns::new("rs-add-pod");
    let before = link(&rig.host, "vf0").unwrap();
    let conf = rig.conf(all_settings());

    let out = rig.add("c1", &pod, "net1", &conf);
    out.assert_ok();
    let result = out.json();
    assert_eq!(result["cniVersion"], "1.1.0");
    let iface = &result["interfaces"][0];
    assert_eq!(iface["name"], "net1");
    assert_eq!(iface["mac"], "02:00:00:00:77:01");
    assert_eq!(iface["mtu"], 1400);
    assert_eq!(iface["sandbox"], ns_path(&pod));
    assert_eq!(iface["pciID"], vf_pci(0));
    assert_eq!(result["ips"][0]["address"], "10.77.0.2/24");
    assert_eq!(result["ips"][0]["interface"], 0);
    assert_eq!(result["ips"][0]["gateway"], GATEWAY);
    assert_eq!(result["routes"][0]["dst"], "0.0.0.0/0");

    // The netdev really is in the pod, configured, and reachable.
    assert!(link(&rig.host, "vf0").is_none(), "VF left the host");
    let net1 = link(&pod, "net1").expect("net1 in the pod");
    assert_eq!(net1["address"], "02:00:00:00:77:01");
    assert_eq!(net1["mtu"], 1400);
    assert!(net1["flags"].as_array().unwrap().iter().any(|f| f == "UP"));
    assert_eq!(ipv4_addresses(&pod, "net1"), vec!["10.77.0.2/24"]);
    let default = pod.ip_json(&["route", "show", "default"]);
    assert_eq!(default[0]["gateway"], GATEWAY, "{default}");
    assert_eq!(default[0]["dev"], "net1");
    assert!(
        rig.host.ping("10.77.0.2"),
        "host reaches the pod through the VF"
    );

    // PF side and RDMA, as recorded by the simulated hardware.
    let mut expected = strings(&APPLY_CALLS);
    expected.push(format!("rdma dev set mlx5_0 netns {}", ns_path(&pod)));
    assert_eq!(rig.calls(), expected);
    let vf = &rig.read_world().pfs["pf0"].vfs[0];
    assert_eq!(vf.vlan, 100);
    assert!(vf.trust);

    // State and allocation record.
    let state = rig.state_of("c1", "net1").expect("state written");
    assert_eq!(state["pciAddress"], vf_pci(0));
    assert_eq!(state["complete"], true);
    assert_eq!(state["hostNetdev"]["name"], "vf0");
    let record = rig.allocation_of(&vf_pci(0)).expect("allocation record");
    assert_eq!(record["netns"], ns_path(&pod));
    assert!(rig.lease_exists("10.77.0.2"));

    // CHECK, with the result as prevResult.
    let mut check_conf = conf.clone();
    check_conf["prevResult"] = result.clone();
    rig.run("CHECK", "c1", &ns_path(&pod), "net1", &check_conf)
        .assert_ok();

    rig.clear_calls();
    let out = rig.del("c1", &ns_path(&pod), "net1", &conf);
    out.assert_ok();
    assert_eq!(out.stdout, "");
    let mut expected = vec!["rdma dev set mlx5_0 netns host".to_string()];
    expected.extend(strings(&RESTORE_CALLS));
    assert_eq!(rig.calls(), expected);
    assert_eq!(rig.read_world().pfs["pf0"].vfs[0], original_vf());
    assert!(link(&pod, "net1").is_none());
    let after = link(&rig.host, "vf0").expect("vf0 back in the host");
    assert_eq!(after["address"], before["address"]);
    assert_eq!(after["mtu"], before["mtu"]);
    assert!(rig.state_of("c1", "net1").is_none());
    assert!(rig.allocation_of(&vf_pci(0)).is_none());
    assert!(!rig.lease_exists("10.77.0.2"), "address released");
    assert_eq!(
        rig.read_world().rdma.devices[0].netns,
        None,
        "RDMA device back in the host"
    );

    // DEL again: nothing to do, nothing printed, nothing touched.
    rig.clear_calls();
    let out = rig.del("c1", &ns_path(&pod), "net1", &conf);
    out.assert_ok();
    assert_eq!(out.stdout, "");
    // And without a netns, as containerd's second DEL.
    rig.del("c1", "", "net1", &conf).assert_ok();
    assert!(rig.calls().is_empty());
    assert!(link(&rig.host, "vf0").is_some());
}

#[test]
fn older_spec_versions_get_converted_results() {
    let rig = rig_with_vf0("rs-ver");
    for version in ["0.3.1", "0.4.0", "1.0.0"] {
        let pod = TestNetns::new("rs-ver-pod");
        let conf = rig.conf(json!({"cniVersion": version, "deviceID": vf_pci(0)}));
        let out = rig.add("c1", &pod, "net1", &conf);
        out.assert_ok();
        let result = out.json();
        assert_eq!(result["cniVersion"], version);
        assert_eq!(result["interfaces"][0]["name"], "net1");
        let address = result["ips"][0]["address"].as_str().unwrap().to_string();
        assert!(address.starts_with("10.77.0."), "{address}");
        if version != "0.3.1" {
            let mut check = conf.clone();
            check["prevResult"] = result.clone();
            rig.run("CHECK", "c1", &ns_path(&pod), "net1", &check)
                .assert_ok();
        }
        rig.del("c1", &ns_path(&pod), "net1", &conf).assert_ok();
        assert!(link(&rig.host, "vf0").is_some(), "{version}");
        let ip = address.split('/').next().unwrap();
        assert!(!rig.lease_exists(ip), "{version}: lease released");
    }
}

#[test]
fn vf_name_taken_in_pod_does_not_block_the_move() {
    let rig = rig_with_vf0("rs-clash");
    let pod = TestNetns::new("rs-clash-pod");
    // The pod already has a link named like the VF in the host.
    pod.ip(&[
        "link", "add", "vf0", "type", "veth", "peer", "name", "other",
    ]);
    let conf = rig.conf(json!({"deviceID": vf_pci(0)}));
    rig.add("c1", &pod, "net1", &conf).assert_ok();
    assert!(link(&pod, "net1").is_some());
    assert!(
        link(&pod, "vf0").is_some(),
        "the pod's own vf0 is untouched"
    );
    // And back: the host got a new link named net1 meanwhile.
    rig.host.ip(&[
        "link", "add", "net1", "type", "veth", "peer", "name", "net1p",
    ]);
    rig.del("c1", &ns_path(&pod), "net1", &conf).assert_ok();
    assert!(link(&rig.host, "vf0").is_some());
    assert!(link(&rig.host, "net1").is_some());
    assert!(link(&pod, "vf0").is_some());
}

#[test]
fn ifname_taken_in_pod_fails_cleanly() {
    let rig = rig_with_vf0("rs-taken");
    let pod = TestNetns::new("rs-taken-pod");
    pod.ip(&["link", "add", "net1", "type", "veth", "peer", "name", "x"]);
    let before = link(&rig.host, "vf0").unwrap();
    let conf = rig.conf(all_settings());
    let out = rig.add("c1", &pod, "net1", &conf);
    assert_eq!(out.error_code(), 999);
    let msg = out.json()["msg"].as_str().unwrap().to_string();
    assert!(
        msg.contains("cannot name the VF \"net1\" in the pod"),
        "{msg}"
    );
    // Everything is back as it was.
    let after = link(&rig.host, "vf0").expect("VF back in the host under its name");
    assert_eq!(after["address"], before["address"]);
    assert_eq!(after["mtu"], before["mtu"]);
    let mut expected = strings(&APPLY_CALLS);
    expected.push(format!("rdma dev set mlx5_0 netns {}", ns_path(&pod)));
    expected.push("rdma dev set mlx5_0 netns host".to_string());
    expected.extend(strings(&RESTORE_CALLS));
    assert_eq!(rig.calls(), expected);
    assert_eq!(rig.read_world().rdma.devices[0].netns, None);
    assert_eq!(rig.read_world().pfs["pf0"].vfs[0], original_vf());
    assert!(rig.state_of("c1", "net1").is_none());
    assert!(rig.allocation_of(&vf_pci(0)).is_none());
    assert_eq!(
        pod.links().iter().filter(|l| l.starts_with("rsv")).count(),
        0
    );
}

#[test]
fn failed_ipam_rolls_back_pf_settings_netdev_and_rdma() {
    let rig = rig_with_vf0("rs-ipamfail");
    let pod = TestNetns::new("rs-ipamfail-pod");
    let before = link(&rig.host, "vf0").unwrap();
    let mut extra = all_settings();
    extra["ipam"] = json!({"type": "no-such-ipam-plugin"});
    let conf = rig.conf(extra);
    let out = rig.add("c1", &pod, "net1", &conf);
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(out.stdout.contains("no-such-ipam-plugin"), "{}", out.stdout);

    let mut expected = strings(&APPLY_CALLS);
    expected.push(format!("rdma dev set mlx5_0 netns {}", ns_path(&pod)));
    expected.push("rdma dev set mlx5_0 netns host".to_string());
    expected.extend(strings(&RESTORE_CALLS));
    assert_eq!(rig.calls(), expected);
    assert_eq!(rig.read_world().pfs["pf0"].vfs[0], original_vf());
    assert_eq!(rig.read_world().rdma.devices[0].netns, None);
    let after = link(&rig.host, "vf0").expect("VF back in the host");
    assert_eq!(after["address"], before["address"]);
    assert_eq!(after["mtu"], before["mtu"]);
    assert!(link(&pod, "net1").is_none());
    assert!(rig.state_of("c1", "net1").is_none());
    assert!(rig.allocation_of(&vf_pci(0)).is_none());
}

#[test]
fn failed_pf_setting_restores_the_ones_before_it() {
    let rig = rig_with_vf0("rs-pffail");
    let pod = TestNetns::new("rs-pffail-pod");
    let mut world = rig.read_world();
    world.pfs.get_mut("pf0").unwrap().fail_settings = vec!["trust".into()];
    rig.write_world(&world);
    let out = rig.add("c1", &pod, "net1", &rig.conf(all_settings()));
    assert_eq!(out.code, 1);
    assert!(out.stdout.contains("trust on"), "{}", out.stdout);
    let calls = rig.calls();
    assert_eq!(
        calls,
        strings(&[
            "pf0 vf 0 vlan 100 qos 3 proto 802.1Q",
            "pf0 vf 0 mac 02:00:00:00:77:01",
            "pf0 vf 0 min_tx_rate 10 max_tx_rate 100",
            "pf0 vf 0 spoofchk off",
            "pf0 vf 0 trust on (failed)",
            // The failed one is restored too: a PF may have half-applied it.
            "pf0 vf 0 trust off (failed)",
            "pf0 vf 0 spoofchk on",
            "pf0 vf 0 min_tx_rate 0 max_tx_rate 0",
            "pf0 vf 0 mac 02:aa:00:00:00:01",
            "pf0 vf 0 vlan 5 qos 0 proto 802.1Q",
        ])
    );
    // The trust restore could not be made: the record stays for a DEL.
    assert!(
        out.stdout.contains("undoing the partial ADD also failed"),
        "{}",
        out.stdout
    );
    let state = rig.state_of("c1", "net1").expect("state kept");
    assert_eq!(state["applied"].as_array().unwrap().len(), 5);
    assert!(link(&rig.host, "vf0").is_some(), "netdev never left");
    // Once the PF behaves, DEL finishes the job.
    let mut world = rig.read_world();
    world.pfs.get_mut("pf0").unwrap().fail_settings.clear();
    world.calls.clear();
    rig.write_world(&world);
    rig.del("c1", &ns_path(&pod), "net1", &rig.conf(all_settings()))
        .assert_ok();
    assert_eq!(rig.read_world().pfs["pf0"].vfs[0], original_vf());
    assert!(rig.state_of("c1", "net1").is_none());
}

#[test]
fn del_after_the_netns_is_gone_restores_the_returned_netdev() {
    let rig = rig_with_vf0("rs-gone");
    let pod = TestNetns::new("rs-gone-pod");
    let before = link(&rig.host, "vf0").unwrap();
    let conf = rig.conf(all_settings());
    rig.add("c1", &pod, "net1", &conf).assert_ok();
    let pod_path = ns_path(&pod);
    rig.return_like_kernel(&pod, "net1", 0);
    drop(pod);
    assert!(
        link(&rig.host, "net1").is_some(),
        "VF returned under the pod's name"
    );

    rig.clear_calls();
    rig.del("c1", &pod_path, "net1", &conf).assert_ok();
    // No RDMA call: a dead namespace hands its RDMA devices back itself.
    assert_eq!(rig.calls(), strings(&RESTORE_CALLS));
    assert!(link(&rig.host, "net1").is_none());
    let after = link(&rig.host, "vf0").expect("renamed back");
    assert_eq!(after["address"], before["address"]);
    assert_eq!(after["mtu"], before["mtu"]);
    assert!(rig.state_of("c1", "net1").is_none());
    assert!(rig.allocation_of(&vf_pci(0)).is_none());
    assert!(!rig.lease_exists("10.77.0.2"));
    // Idempotent here too.
    rig.del("c1", &pod_path, "net1", &conf).assert_ok();
}

#[test]
fn allocation_refuses_a_live_holder_and_reclaims_a_dead_one() {
    let rig = rig_with_vf0("rs-alloc");
    let pod1 = TestNetns::new("rs-alloc-p1");
    let pod2 = TestNetns::new("rs-alloc-p2");
    let conf = rig.conf(json!({"deviceID": vf_pci(0), "mac": "02:00:00:00:77:01"}));
    rig.add("c1", &pod1, "net1", &conf).assert_ok();

    let out = rig.add("c2", &pod2, "net1", &conf);
    assert_eq!(out.code, 1);
    let msg = out.json()["msg"].as_str().unwrap().to_string();
    assert!(
        msg.starts_with(&format!(
            "pci address {} is already allocated to container c1",
            vf_pci(0)
        )),
        "{msg}"
    );
    assert!(link(&pod1, "net1").is_some(), "the holder is untouched");

    // The first pod dies without a DEL.
    rig.return_like_kernel(&pod1, "net1", 0);
    drop(pod1);
    rig.clear_calls();
    let out = rig.add("c2", &pod2, "net1", &conf);
    out.assert_ok();
    // c1's attachment was undone first: PF settings, lease, record.
    assert_eq!(
        rig.calls(),
        strings(&[
            "pf0 vf 0 mac 02:aa:00:00:00:01",
            "pf0 vf 0 mac 02:00:00:00:77:01",
            &format!("rdma dev set mlx5_0 netns {}", ns_path(&pod2)),
        ])
    );
    assert!(rig.state_of("c1", "net1").is_none());
    assert!(!rig.lease_exists("10.77.0.2"), "c1's address was released");
    assert_eq!(out.json()["ips"][0]["address"], "10.77.0.3/24");
    assert_eq!(rig.allocation_of(&vf_pci(0)).unwrap()["containerID"], "c2");
    assert_eq!(
        rig.state_of("c2", "net1").unwrap()["hostNetdev"]["name"],
        "vf0",
        "the VF's own name is what DEL will restore"
    );
    rig.del("c2", &ns_path(&pod2), "net1", &conf).assert_ok();
    assert!(link(&rig.host, "vf0").is_some());
}

#[test]
fn gc_releases_attachments_that_are_not_valid() {
    let rig = Rig::new("rs-gc");
    rig.standard_vf(0, None);
    rig.standard_vf(1, None);
    rig.write_world(&world_with(2, original_vf(), mlx_devices(2)));
    let pod1 = TestNetns::new("rs-gc-p1");
    let pod2 = TestNetns::new("rs-gc-p2");
    rig.add(
        "c1",
        &pod1,
        "net1",
        &rig.conf(json!({"deviceID": vf_pci(0), "trust": "on"})),
    )
    .assert_ok();
    rig.add(
        "c2",
        &pod2,
        "net1",
        &rig.conf(json!({"deviceID": vf_pci(1)})),
    )
    .assert_ok();
    assert!(rig.lease_exists("10.77.0.2") && rig.lease_exists("10.77.0.3"));

    rig.clear_calls();
    let mut gc = rig.conf(json!({}));
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "c2", "ifname": "net1"}]);
    rig.run("GC", "", "", "", &gc).assert_ok();

    assert_eq!(
        rig.calls(),
        strings(&["rdma dev set mlx5_0 netns host", "pf0 vf 0 trust off"])
    );
    assert!(link(&pod1, "net1").is_none());
    assert!(link(&rig.host, "vf0").is_some(), "c1's VF is back");
    assert!(rig.state_of("c1", "net1").is_none());
    assert!(rig.allocation_of(&vf_pci(0)).is_none());
    assert!(!rig.lease_exists("10.77.0.2"));
    // c2 is untouched.
    assert!(link(&pod2, "net1").is_some());
    assert!(rig.state_of("c2", "net1").is_some());
    assert!(rig.lease_exists("10.77.0.3"));
    rig.del(
        "c2",
        &ns_path(&pod2),
        "net1",
        &rig.conf(json!({"deviceID": vf_pci(1)})),
    )
    .assert_ok();
}

/// GC goes on past an attachment it cannot lock, and the error keeps the
/// code of that failure (try again later), not a catch-all 999.
#[test]
fn gc_past_a_busy_vf_reports_try_again_later() {
    let rig = rig_with_vf0("rs-gcbusy");
    let pod = TestNetns::new("rs-gcbusy-pod");
    let conf = rig.conf(json!({"deviceID": vf_pci(0)}));
    rig.add("c1", &pod, "net1", &conf).assert_ok();
    let held = VfLock::acquire(&rig.state, &vf_pci(0), Duration::from_secs(1)).unwrap();
    let mut gc = rig.conf(json!({}));
    gc["cni.dev/valid-attachments"] = json!([]);
    let out = rig.run("GC", "", "", "", &gc);
    assert_eq!(out.error_code(), 11, "{}", out.stdout);
    let msg = out.json()["msg"].as_str().unwrap().to_string();
    assert!(
        msg.starts_with("cleanup incomplete: time out while waiting to acquire exclusive lock"),
        "{msg}"
    );
    // Nothing of c1 was touched while another run held its VF.
    assert!(link(&pod, "net1").is_some());
    assert!(rig.state_of("c1", "net1").is_some());
    drop(held);
    rig.run("GC", "", "", "", &gc).assert_ok();
    assert!(link(&rig.host, "vf0").is_some());
    assert!(rig.state_of("c1", "net1").is_none());
}

#[test]
fn status_reports_an_unusable_rdma_subsystem_as_50() {
    let rig = rig_with_vf0("rs-status");
    let conf = rig.conf(json!({"deviceID": vf_pci(0)}));

    // This machine's own kernel has no RDMA subsystem: the real netlink
    // code says so.
    let out = rig.run_real("STATUS", &conf);
    assert_eq!(out.error_code(), 50, "{}", out.stdout);
    assert!(
        out.stdout.contains("RDMA subsystem not available"),
        "{}",
        out.stdout
    );

    // The simulated machine: exclusive mode is fine.
    rig.run("STATUS", "", "", "", &conf).assert_ok();

    let mut world = rig.read_world();
    world.rdma.mode = FakeRdmaMode::Missing;
    rig.write_world(&world);
    assert_eq!(rig.run("STATUS", "", "", "", &conf).error_code(), 50);

    world.rdma.mode = FakeRdmaMode::Shared;
    rig.write_world(&world);
    let out = rig.run("STATUS", "", "", "", &conf);
    assert_eq!(out.error_code(), 50);
    let msg = out.json()["msg"].as_str().unwrap().to_string();
    assert!(msg.contains("rdma system set netns exclusive"), "{msg}");
    assert!(msg.contains("netns_mode=0"), "{msg}");
    let opted_in = rig.conf(json!({"deviceID": vf_pci(0), "allowSharedRdmaNetns": true}));
    rig.run("STATUS", "", "", "", &opted_in).assert_ok();
}

#[test]
fn status_in_pf_mode_needs_a_free_vf() {
    let rig = rig_with_vf0("rs-status-pf");
    let conf = rig.conf(json!({"pf": PF}));
    rig.run("STATUS", "", "", "", &conf).assert_ok();
    let pod = TestNetns::new("rs-status-pf-pod");
    rig.add("c1", &pod, "net1", &conf).assert_ok();
    let out = rig.run("STATUS", "", "", "", &conf);
    assert_eq!(out.error_code(), 50);
    assert!(
        out.stdout.contains("no free VF on PF \\\"pf0\\\""),
        "{}",
        out.stdout
    );
    let missing = rig.conf(json!({"pf": "nope0"}));
    assert_eq!(rig.run("STATUS", "", "", "", &missing).error_code(), 50);
    rig.del("c1", &ns_path(&pod), "net1", &conf).assert_ok();
    rig.run("STATUS", "", "", "", &conf).assert_ok();
}

/// `pf` is checked as a link name before anything is asked of the
/// (fake) hardware: code 7 naming the key and the rule.
#[test]
fn pf_names_are_checked_before_the_hardware() {
    let rig = rig_with_vf0("rs-pfname");
    let pod = TestNetns::new("rs-pfname-pod");
    for (pf, message) in conformance::testnet::refused_link_names("pf") {
        let out = rig.add("c1", &pod, "net1", &rig.conf(json!({"pf": pf})));
        assert_eq!(out.error_code(), 7, "{}", out.stderr);
        assert_eq!(out.msg(), message);
    }
    assert!(rig.calls().is_empty(), "refused before any change");
    assert!(link(&rig.host, "vf0").is_some());
    assert!(rig.state_of("c1", "net1").is_none());
}

#[test]
fn shared_mode_needs_opt_in_and_then_leaves_rdma_alone() {
    let rig = rig_with_vf0("rs-shared");
    let mut world = rig.read_world();
    world.rdma.mode = FakeRdmaMode::Shared;
    rig.write_world(&world);
    let pod = TestNetns::new("rs-shared-pod");

    let out = rig.add("c1", &pod, "net1", &rig.conf(all_settings()));
    assert_eq!(out.error_code(), 50);
    assert!(
        out.stdout.contains("rdma system set netns exclusive"),
        "{}",
        out.stdout
    );
    assert!(rig.calls().is_empty(), "refused before any change");
    assert!(link(&rig.host, "vf0").is_some());
    assert!(rig.state_of("c1", "net1").is_none());

    let mut extra = all_settings();
    extra["allowSharedRdmaNetns"] = json!(true);
    let conf = rig.conf(extra);
    rig.add("c1", &pod, "net1", &conf).assert_ok();
    assert_eq!(
        rig.calls(),
        strings(&APPLY_CALLS),
        "no RDMA move in shared mode"
    );
    rig.run("CHECK", "c1", &ns_path(&pod), "net1", &conf)
        .assert_ok();
    rig.del("c1", &ns_path(&pod), "net1", &conf).assert_ok();
}

#[test]
fn rdma_device_found_over_netlink_when_sysfs_lists_none() {
    let rig = Rig::new("rs-aux");
    rig.vf_netdev("vf0", None);
    // An auxiliary-bus (SF) style device: not under the PCI device.
    rig.sysfs_vf(
        0,
        &VfSpec {
            netdev: Some("vf0".into()),
            rdma: None,
            driver: Some("mlx5_core".into()),
        },
    );
    rig.write_world(&world_with(
        1,
        VfState::default(),
        vec![FakeRdmaDevice {
            name: "mlx5_sf4".into(),
            index: 7,
            netdev: Some("vf0".into()),
            ..FakeRdmaDevice::default()
        }],
    ));
    let pod = TestNetns::new("rs-aux-pod");
    let conf = rig.conf(json!({"deviceID": vf_pci(0)}));
    rig.add("c1", &pod, "net1", &conf).assert_ok();
    assert_eq!(
        rig.calls(),
        vec![format!("rdma dev set mlx5_sf4 netns {}", ns_path(&pod))]
    );
    rig.del("c1", &ns_path(&pod), "net1", &conf).assert_ok();

    // No RDMA device at all for the netdev: refused before any change.
    let mut world = rig.read_world();
    world.rdma.devices.clear();
    world.calls.clear();
    rig.write_world(&world);
    let out = rig.add("c1", &pod, "net1", &conf);
    assert_eq!(out.code, 1);
    assert!(
        out.stdout.contains("no RDMA device found for VF"),
        "{}",
        out.stdout
    );
    assert!(link(&rig.host, "vf0").is_some());
}

#[test]
fn soft_roce_move_fails_with_a_message_naming_the_driver() {
    let rig = Rig::new("rs-rxe");
    rig.vf_netdev("vf0", None);
    rig.sysfs_vf(
        0,
        &VfSpec {
            netdev: Some("vf0".into()),
            rdma: None,
            driver: Some("mlx5_core".into()),
        },
    );
    rig.sysfs_rdma_class("rxe0", "rxe");
    rig.write_world(&world_with(
        1,
        VfState::default(),
        vec![FakeRdmaDevice {
            name: "rxe0".into(),
            index: 1,
            netdev: Some("vf0".into()),
            move_error: Some("EOPNOTSUPP".into()),
            ..FakeRdmaDevice::default()
        }],
    ));
    let pod = TestNetns::new("rs-rxe-pod");
    let conf = rig.conf(json!({"deviceID": vf_pci(0), "trust": "on"}));
    let out = rig.add("c1", &pod, "net1", &conf);
    assert_eq!(out.error_code(), 999);
    let msg = out.json()["msg"].as_str().unwrap().to_string();
    assert!(
        msg.starts_with("cannot move RDMA device rxe0 into the pod netns: its driver rdma_rxe cannot change network namespace"),
        "{msg}"
    );
    assert!(msg.contains("allowSharedRdmaNetns"), "{msg}");
    // Rolled back.
    assert!(link(&rig.host, "vf0").is_some());
    assert!(link(&pod, "net1").is_none());
    assert_eq!(rig.read_world().pfs["pf0"].vfs[0], VfState::default());
    assert!(rig.state_of("c1", "net1").is_none());
}

#[test]
fn userspace_bound_vf_gets_pf_settings_but_no_netdev() {
    let rig = Rig::new("rs-vfio");
    rig.sysfs_vf(
        1,
        &VfSpec {
            netdev: None,
            rdma: None,
            driver: Some("vfio-pci".into()),
        },
    );
    rig.write_world(&world_with(2, original_vf(), Vec::new()));
    let pod = TestNetns::new("rs-vfio-pod");
    let device_info = rig.dir.path().join("devinfo-vfio.json");
    let conf = rig.conf(
        json!({"deviceID": vf_pci(1), "mac": "02:00:00:00:77:09", "vlan": 200,
        "runtimeConfig": {"CNIDeviceInfoFile": device_info}}),
    );
    let out = rig.add("c1", &pod, "net1", &conf);
    out.assert_ok();
    let written: Value = serde_json::from_slice(&std::fs::read(&device_info).unwrap()).unwrap();
    assert_eq!(
        written["pci"],
        json!({"pci-address": vf_pci(1), "pf-pci-address": PF_PCI}),
        "a VF bound to vfio-pci has no RDMA device"
    );
    let result = out.json();
    let iface = &result["interfaces"][0];
    assert_eq!(iface["name"], "net1");
    assert_eq!(iface["pciID"], vf_pci(1));
    assert_eq!(iface["mac"], "02:00:00:00:77:09");
    assert!(iface.get("mtu").is_none());
    assert_eq!(result["ips"][0]["address"], "10.77.0.2/24");
    assert_eq!(pod.links(), vec!["lo"], "no netdev in the pod");
    assert_eq!(
        rig.calls(),
        strings(&[
            "pf0 vf 1 vlan 200 qos 0 proto 802.1Q",
            "pf0 vf 1 mac 02:00:00:00:77:09"
        ])
    );
    rig.run("CHECK", "c1", &ns_path(&pod), "net1", &conf)
        .assert_ok();
    rig.clear_calls();
    rig.del("c1", &ns_path(&pod), "net1", &conf).assert_ok();
    assert_eq!(
        rig.calls(),
        strings(&[
            "pf0 vf 1 mac 02:aa:00:00:00:01",
            "pf0 vf 1 vlan 5 qos 0 proto 802.1Q"
        ])
    );
    assert!(!rig.lease_exists("10.77.0.2"));
    assert!(!device_info.exists());
}

#[test]
fn pf_mode_picks_the_first_free_vf_under_a_lock() {
    let rig = Rig::new("rs-pf");
    for i in 0..3 {
        rig.standard_vf(i, None);
    }
    rig.write_world(&world_with(3, VfState::default(), mlx_devices(3)));
    let conf = rig.conf(json!({"pf": PF}));
    let pods: Vec<TestNetns> = (0..3).map(|_| TestNetns::new("rs-pf-pod")).collect();

    let first = rig.add("c0", &pods[0], "net1", &conf);
    first.assert_ok();
    assert_eq!(first.json()["interfaces"][0]["pciID"], vf_pci(0));

    // Two at once take the two remaining VFs, one each.
    let picked: Vec<String> = thread::scope(|s| {
        let handles: Vec<_> = (1..3)
            .map(|i| {
                let (rig, conf, pod) = (&rig, &conf, &pods[i]);
                s.spawn(move || rig.add(&format!("c{i}"), pod, "net1", conf))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                let out = h.join().unwrap();
                out.assert_ok();
                out.json()["interfaces"][0]["pciID"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect()
    });
    let mut sorted = picked.clone();
    sorted.sort();
    assert_eq!(sorted, vec![vf_pci(1), vf_pci(2)], "{picked:?}");

    let extra = TestNetns::new("rs-pf-pod");
    let out = rig.add("c3", &extra, "net1", &conf);
    assert_eq!(out.error_code(), 50);
    assert!(out.stdout.contains("no free VF on PF"), "{}", out.stdout);

    // A freed VF is picked again.
    rig.del("c0", &ns_path(&pods[0]), "net1", &conf).assert_ok();
    let out = rig.add("c3", &extra, "net1", &conf);
    out.assert_ok();
    assert_eq!(out.json()["interfaces"][0]["pciID"], vf_pci(0));
}

#[test]
fn check_notices_what_changed() {
    let rig = rig_with_vf0("rs-check");
    let pod = TestNetns::new("rs-check-pod");
    let conf = rig.conf(all_settings());
    let out = rig.add("c1", &pod, "net1", &conf);
    out.assert_ok();
    let mut check = conf.clone();
    check["prevResult"] = out.json();
    let run_check = || rig.run("CHECK", "c1", &ns_path(&pod), "net1", &check);
    run_check().assert_ok();

    // The RDMA port goes down.
    let mut world = rig.read_world();
    world.rdma.devices[0].port_state = PortState::Down;
    rig.write_world(&world);
    let out = run_check();
    assert_eq!(out.code, 1);
    assert!(
        out.stdout
            .contains("mlx5_0 port 1 is DOWN, expected ACTIVE"),
        "{}",
        out.stdout
    );
    world.rdma.devices[0].port_state = PortState::Active;

    // Someone changes the VLAN on the PF.
    world.pfs.get_mut("pf0").unwrap().vfs[0].vlan = 7;
    rig.write_world(&world);
    let out = run_check();
    assert_eq!(out.code, 1);
    assert!(
        out.stdout
            .contains("vlan 100 qos 3 proto 802.1Q is no longer in effect"),
        "{}",
        out.stdout
    );
    world.pfs.get_mut("pf0").unwrap().vfs[0].vlan = 100;
    rig.write_world(&world);
    run_check().assert_ok();

    // The RDMA device leaves the pod.
    let mut moved = rig.read_world();
    moved.rdma.devices[0].netns = None;
    rig.write_world(&moved);
    let out = run_check();
    assert!(
        out.stdout.contains("RDMA device mlx5_0 is not in netns"),
        "{}",
        out.stdout
    );
    moved.rdma.devices[0].netns = Some(ns_path(&pod));
    rig.write_world(&moved);

    // The address goes away.
    pod.ip(&["addr", "flush", "dev", "net1"]);
    let out = run_check();
    assert!(
        out.stdout.contains("lacks address 10.77.0.2/24"),
        "{}",
        out.stdout
    );

    // The MAC changes.
    pod.ip(&["link", "set", "net1", "address", "02:00:00:00:00:42"]);
    let out = run_check();
    assert!(
        out.stdout.contains("has MAC 02:00:00:00:00:42"),
        "{}",
        out.stdout
    );
    rig.del("c1", &ns_path(&pod), "net1", &conf).assert_ok();
}

#[test]
fn busy_vf_lock_is_try_again_later() {
    let rig = rig_with_vf0("rs-lock");
    let pod = TestNetns::new("rs-lock-pod");
    let conf = rig.conf(json!({"deviceID": vf_pci(0)}));
    let held = VfLock::acquire(&rig.state, &vf_pci(0), Duration::from_secs(1)).unwrap();
    let out = rig.add("c1", &pod, "net1", &conf);
    assert_eq!(out.error_code(), 11);
    assert!(
        out.stdout
            .contains("time out while waiting to acquire exclusive lock"),
        "{}",
        out.stdout
    );
    assert!(link(&rig.host, "vf0").is_some());
    drop(held);
    rig.add("c1", &pod, "net1", &conf).assert_ok();
    rig.del("c1", &ns_path(&pod), "net1", &conf).assert_ok();
}

#[test]
fn bad_configurations_are_code_7_and_change_nothing() {
    let rig = rig_with_vf0("rs-conf");
    let pod = TestNetns::new("rs-conf-pod");
    let cases = [
        (json!({}), "VF pci addr is required"),
        (json!({"deviceID": "0000:af:00.9"}), "invalid deviceID"),
        (
            json!({"deviceID": vf_pci(0), "vlan": 5000}),
            "vlan id 5000 invalid: value must be in the range 0-4094",
        ),
        (
            json!({"deviceID": vf_pci(0), "vlanQoS": 2}),
            "vlan id must be configured to set vlan QoS to a non-nil value",
        ),
        (
            json!({"deviceID": vf_pci(0), "link_state": "on"}),
            "invalid link_state value: on",
        ),
    ];
    for (extra, text) in cases {
        let out = rig.add("c1", &pod, "net1", &rig.conf(extra.clone()));
        assert_eq!(out.error_code(), 7, "{extra}");
        assert!(out.stdout.contains(text), "{extra}: {}", out.stdout);
    }
    // The runtime's deviceID capability works on its own.
    let conf = rig.conf(json!({"runtimeConfig": {"deviceID": vf_pci(0)}}));
    rig.add("c1", &pod, "net1", &conf).assert_ok();
    rig.del("c1", &ns_path(&pod), "net1", &conf).assert_ok();
    // A VF of another PF than the configured one.
    let out = rig.add(
        "c1",
        &pod,
        "net1",
        &rig.conf(json!({"deviceID": vf_pci(0), "pf": "pf9"})),
    );
    assert_eq!(out.error_code(), 7);
    assert!(rig.calls().iter().all(|c| !c.contains("(failed)")));
    assert!(link(&rig.host, "vf0").is_some());
}

/// `runtimeConfig.CNIDeviceInfoFile` (NPWG device-info spec 1.1.0): ADD
/// writes the VF's PCI address, its PF's and its RDMA device, creating the
/// directory; CHECK sees it; DEL removes it, and so does a failed ADD.
#[test]
fn device_info_file_is_written_checked_and_removed() {
    let rig = rig_with_vf0("rs-devinfo");
    let pod = TestNetns::new("rs-devinfo-pod");
    let path = rig
        .dir
        .path()
        .join("devinfo/cni/rdma-net-c1-net1-device.json");
    let conf = rig.conf(json!({
        "deviceID": vf_pci(0),
        "runtimeConfig": {"CNIDeviceInfoFile": path},
    }));
    let out = rig.add("c1", &pod, "net1", &conf);
    out.assert_ok();
    let result = out.json();
    assert_eq!(result["interfaces"][0]["pciID"], vf_pci(0));
    let written: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(
        written,
        json!({"type": "pci", "version": "1.1.0", "pci": {
            "pci-address": vf_pci(0),
            "pf-pci-address": PF_PCI,
            "rdma-device": "mlx5_0",
        }})
    );
    assert_eq!(
        rig.state_of("c1", "net1").unwrap()["deviceInfoFile"],
        json!(path)
    );

    let mut check = conf.clone();
    check["prevResult"] = result;
    rig.run("CHECK", "c1", &ns_path(&pod), "net1", &check)
        .assert_ok();
    let mut other = written.clone();
    other["pci"]["pci-address"] = json!("0000:af:00.3");
    std::fs::write(&path, other.to_string()).unwrap();
    let out = rig.run("CHECK", "c1", &ns_path(&pod), "net1", &check);
    assert!(
        out.stdout
            .contains("names 0000:af:00.3, expected PCI address 0000:af:00.2"),
        "{}",
        out.stdout
    );
    std::fs::remove_file(&path).unwrap();
    let out = rig.run("CHECK", "c1", &ns_path(&pod), "net1", &check);
    assert!(out.stdout.contains("is gone"), "{}", out.stdout);

    rig.del("c1", &ns_path(&pod), "net1", &conf).assert_ok();
    assert!(!path.exists());
    // A file the runtime pre-filled from the device plugin's is updated,
    // keeping what the plugin does not know; it is the runtime's, so DEL
    // leaves it, as DEL without a record (a second DEL) leaves any file
    // (issue 28: a DEL deleted whatever path the configuration named).
    std::fs::write(
        &path,
        json!({"type": "pci", "version": "1.1.0",
               "pci": {"pci-address": vf_pci(0), "vhost-net": "/dev/vhost-net"}})
        .to_string(),
    )
    .unwrap();
    rig.add("c1", &pod, "net1", &conf).assert_ok();
    let written: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(written["pci"]["vhost-net"], "/dev/vhost-net");
    assert_eq!(written["pci"]["rdma-device"], "mlx5_0");
    rig.del("c1", &ns_path(&pod), "net1", &conf).assert_ok();
    let kept: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(kept, written, "the runtime's file stays as ADD left it");
    std::fs::write(&path, "{}").unwrap();
    rig.del("c1", "", "net1", &conf).assert_ok();
    assert_eq!(std::fs::read(&path).unwrap(), b"{}");
    std::fs::remove_file(&path).unwrap();

    // A failed ADD takes it back with everything else: IPAM fails after
    // the file is written.
    let mut failing = conf.clone();
    failing["ipam"] = json!({"type": "no-such-ipam-plugin"});
    let out = rig.add("c1", &pod, "net1", &failing);
    assert_eq!(out.code, 1);
    assert!(out.stdout.contains("no-such-ipam-plugin"), "{}", out.stdout);
    assert!(
        !path.exists(),
        "the device-info file of a failed ADD is gone"
    );
    assert!(rig.state_of("c1", "net1").is_none());
    assert!(link(&rig.host, "vf0").is_some());

    // A relative path is a configuration error, and nothing happens.
    rig.clear_calls();
    let relative = rig.conf(json!({
        "deviceID": vf_pci(0),
        "runtimeConfig": {"CNIDeviceInfoFile": "devinfo.json"},
    }));
    let out = rig.add("c2", &pod, "net2", &relative);
    assert_eq!(out.error_code(), 7);
    assert!(
        out.stdout.contains("must be an absolute path"),
        "{}",
        out.stdout
    );
    assert!(rig.calls().is_empty());
}

/// A well-formed deviceID this node does not have (the device plugin's
/// list is stale, or the configuration names another node's VF).
#[test]
fn device_id_missing_on_the_node_is_code_7_naming_the_address() {
    let rig = rig_with_vf0("rs-nodev");
    let pod = TestNetns::new("rs-nodev-pod");
    for conf in [
        rig.conf(json!({"deviceID": "0000:af:00.7", "trust": "on"})),
        rig.conf(json!({"runtimeConfig": {"deviceID": "0000:af:00.7"}, "trust": "on"})),
    ] {
        let out = rig.add("c1", &pod, "net1", &conf);
        assert_eq!(out.error_code(), 7, "{}", out.stdout);
        let msg = out.json()["msg"].as_str().unwrap().to_string();
        assert!(
            msg.starts_with("PCI device 0000:af:00.7 does not exist on this node"),
            "{msg}"
        );
        assert!(msg.contains("check deviceID"), "{msg}");
    }
    // Nothing was touched: no PF call, no state, no lease, VF 0 at home.
    assert!(rig.calls().is_empty(), "{:?}", rig.calls());
    assert!(rig.state_of("c1", "net1").is_none());
    assert!(rig.allocation_of("0000:af:00.7").is_none());
    assert!(!rig.lease_exists("10.77.0.2"));
    assert!(link(&rig.host, "vf0").is_some());
    assert_eq!(pod.links(), vec!["lo"]);
}

/// The shipped example, run the way a runtime runs it: through libcni,
/// with the VF handed over by the `deviceID` capability.
#[test]
fn example_conflist_runs_through_libcni_with_the_device_id_capability() {
    use libcni::conf::conflist_from_bytes;
    use libcni::invoke::PluginEnv;
    use libcni::netns::NetNs;
    use libcni::runtime::{CniConfig, RuntimeConf};
    use std::path::{Path, PathBuf};

    let rig = rig_with_vf0("rs-example");
    let pod = TestNetns::new("rs-example-pod");
    let example = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../conflist-examples/60-rdma-sriov.conflist");
    let mut list: Value = serde_json::from_slice(&std::fs::read(&example).unwrap()).unwrap();
    // Keep state and leases in the test's directory.
    let plugin = &mut list["plugins"][0];
    plugin["stateDir"] = json!(rig.state);
    plugin["sysfsRoot"] = json!(rig.sysfs);
    plugin["ipam"]["dataDir"] = json!(rig.ipam_dir);
    let network = list["name"].as_str().unwrap().to_string();
    let list = conflist_from_bytes(&serde_json::to_vec(&list).unwrap()).unwrap();

    let cache = tempfile::tempdir().unwrap();
    let plugin_dir = Path::new(PLUGIN).parent().unwrap().to_path_buf();
    let env: PluginEnv = [
        ("PATH", "/usr/sbin:/usr/bin:/sbin:/bin".to_string()),
        ("RDMA_SRIOV_FAKE_PF_OPS", rig.world.display().to_string()),
        // The node's policy allows the scratch folder for device-info.
        (
            libcni::confine::POLICY_ENV,
            conformance::testnet::scratch_policy().display().to_string(),
        ),
    ]
    .into_iter()
    .collect();
    let cni = CniConfig::new(vec![plugin_dir, PathBuf::from(cni_path())])
        .with_cache_dir(cache.path())
        .with_base_env(env);
    let mut capability_args = serde_json::Map::new();
    capability_args.insert("deviceID".into(), json!(vf_pci(0)));
    // Multus names the file after the network, the pod and the interface.
    let device_info = rig
        .dir
        .path()
        .join("devinfo/cni")
        .join(format!("{network}-c1-net1"));
    capability_args.insert("CNIDeviceInfoFile".into(), json!(device_info));
    let rt = RuntimeConf {
        container_id: "c1".into(),
        netns: ns_path(&pod),
        ifname: "net1".into(),
        args: Vec::new(),
        capability_args,
    };

    // Plugins inherit the namespace of the thread that starts them: the
    // fake host's.
    let host = NetNs::open(rig.host.path()).unwrap();
    let result = host
        .run(|| cni.add_network_list(&list, &rt))
        .unwrap()
        .unwrap();
    let result = result.to_value();
    assert_eq!(result["interfaces"][0]["pciID"], vf_pci(0));
    assert_eq!(result["interfaces"][0]["mtu"], 9000);
    let written: Value = serde_json::from_slice(&std::fs::read(&device_info).unwrap()).unwrap();
    assert_eq!(written["type"], "pci");
    assert_eq!(written["pci"]["pci-address"], vf_pci(0));
    assert_eq!(written["pci"]["rdma-device"], "mlx5_0");
    assert_eq!(result["ips"][0]["address"], "192.168.100.2/24");
    assert_eq!(
        &rig.calls()[..4],
        strings(&[
            "pf0 vf 0 vlan 100 qos 0 proto 802.1Q",
            "pf0 vf 0 spoofchk on",
            "pf0 vf 0 trust off",
            "pf0 vf 0 state enable",
        ])
    );
    assert_eq!(link(&pod, "net1").unwrap()["mtu"], 9000);
    let routes = pod.ip_json(&["route", "show", "192.168.0.0/16"]);
    assert_eq!(routes[0]["gateway"], "192.168.100.1", "{routes}");

    host.run(|| cni.check_network_list(&list, &rt))
        .unwrap()
        .unwrap();
    host.run(|| cni.get_status_network_list(&list))
        .unwrap()
        .unwrap();
    host.run(|| cni.del_network_list(&list, &rt))
        .unwrap()
        .unwrap();
    assert!(!device_info.exists(), "DEL removed the device-info file");
    assert!(link(&rig.host, "vf0").is_some());
    assert_eq!(rig.read_world().pfs["pf0"].vfs[0], original_vf());
    assert!(rig
        .state
        .join("attachments")
        .join(&network)
        .read_dir()
        .map(|mut d| d.next().is_none())
        .unwrap_or(true));
}

/// The real PF-side netlink code against this kernel. A veth has no VFs,
/// so the kernel answers "not supported" to every VF setting, but only
/// after parsing the request against its attribute policy: a malformed
/// attribute would be EINVAL instead. Reads find no VF list.
#[test]
fn real_pf_netlink_requests_pass_the_kernel_policy() {
    use libcni::netns::NetNs;
    use rdma_sriov::hwaddr::Guid;
    use rdma_sriov::pf::{NetlinkPfOps, PfError, PfLinkOps, VfSetting};

    let ns = TestNetns::new("rs-pfnl");
    ns.ip(&["link", "add", "pf0", "type", "veth", "peer", "name", "pf0p"]);
    let settings = [
        VfSetting::Mac {
            mac: "02:00:00:00:00:01".parse().unwrap(),
        },
        VfSetting::Vlan {
            vlan: 100,
            qos: 3,
            proto: VlanProto::Dot1Q,
        },
        VfSetting::Vlan {
            vlan: 100,
            qos: 0,
            proto: VlanProto::Dot1Ad,
        },
        VfSetting::SpoofChk { on: true },
        VfSetting::Trust { on: true },
        VfSetting::LinkState {
            state: VfLinkState::Enable,
        },
        VfSetting::Rate { min: 10, max: 100 },
        VfSetting::NodeGuid { guid: Guid(1) },
        VfSetting::PortGuid { guid: Guid(1) },
    ];
    let netns = NetNs::open(ns.path()).unwrap();
    netns
        .run(|| {
            let ops = NetlinkPfOps::new();
            for setting in &settings {
                let e = ops.set_vf("pf0", 0, setting).unwrap_err();
                let PfError::Set { source, .. } = &e else {
                    panic!("{setting}: {e}");
                };
                assert_eq!(
                    source.errno(),
                    Some(nix::errno::Errno::EOPNOTSUPP),
                    "{setting}: {e}"
                );
            }
            assert!(matches!(
                ops.vf_state("pf0", 0),
                Err(PfError::VfNotFound { vf: 0, .. })
            ));
            assert!(matches!(
                ops.vf_state("nope0", 0),
                Err(PfError::PfNotFound { .. })
            ));
            assert!(matches!(
                ops.set_vf("nope0", 0, &VfSetting::Trust { on: true }),
                Err(PfError::PfNotFound { .. })
            ));
        })
        .unwrap();
}
