//! CHECK: the attachment is as ADD left it, down to the RDMA port state:
//! the PF-side settings are still in effect, the netdev is in the pod, up,
//! with the MAC and addresses ADD reported (the runtime's prevResult, else
//! the record), the RDMA device is in the pod (exclusive mode) with its
//! port ACTIVE through libibverbs, the device-info file ADD wrote still
//! names the VF, a rail's sysctls, rules and table are in place
//! ([`crate::rail::check`]), and IPAM CHECK passes.

use libcni::device_info;
use libcni::netlink::{format_mac, RouteSocket};
use libcni::netns::NetNs;
use libcni::skel::CmdArgs;
use libcni::types::v100;

use crate::config::Locations;
use crate::error::PluginError;
use crate::hwaddr::MacAddr;
use crate::plugin::{ipam_type, RdmaSriov};
use crate::rail;
use crate::verbs::PortState;

/// The RDMA port CHECK looks at: VFs have one.
const RDMA_PORT: u8 = 1;

pub(crate) fn check(plugin: &RdmaSriov, args: &CmdArgs) -> Result<(), PluginError> {
    let locations = Locations::from_conf(&args.conf);
    let ctx = plugin.context(locations.state_dir, locations.sysfs_root);
    let state = ctx
        .store
        .load(&args.conf.name, &args.container_id, &args.ifname)?
        .ok_or_else(|| {
            PluginError::Check(format!(
                "no state for {}/{} on network {:?}: was ADD run?",
                args.container_id, args.ifname, args.conf.name
            ))
        })?;
    if !state.complete {
        return Err(PluginError::Check(
            "the attachment's ADD did not complete".to_string(),
        ));
    }
    let pod = NetNs::open(&args.netns)?;

    // What ADD reported: the runtime's prevResult, else our record.
    let mut expected_mac = state.pod_mac;
    let mut expected_ips = state.addresses.clone();
    if let Some(prev) = args.conf.prev_result()? {
        let prev = v100::Result::try_from(prev)?;
        if let Some(index) = prev
            .interfaces
            .iter()
            .position(|i| i.name == args.ifname && i.sandbox == args.netns)
        {
            expected_mac = prev.interfaces.get(index).and_then(|i| i.mac.parse().ok());
            expected_ips = prev
                .ips
                .iter()
                .filter(|ip| ip.interface == Some(index))
                .map(|ip| ip.address)
                .collect();
        }
    }

    let current = plugin.backends.pf.vf_state(&state.pf, state.vf_index)?;
    for setting in &state.applied {
        if !setting.is_in_effect(&current) {
            return Err(PluginError::Check(format!(
                "{} vf {}: {setting} is no longer in effect",
                state.pf, state.vf_index
            )));
        }
    }

    if state.userspace_driver.is_none() {
        let mut socket = RouteSocket::open_in(&pod)?;
        let link = socket.link_by_name(&args.ifname)?.ok_or_else(|| {
            PluginError::Check(format!(
                "interface {} not found in netns {}",
                args.ifname, args.netns
            ))
        })?;
        if let Some(mac) = expected_mac {
            if MacAddr::from_slice(&link.mac) != Some(mac) {
                return Err(PluginError::Check(format!(
                    "interface {} has MAC {}, expected {mac}",
                    args.ifname,
                    format_mac(&link.mac)
                )));
            }
        }
        if !link.up {
            return Err(PluginError::Check(format!(
                "interface {} is down",
                args.ifname
            )));
        }
        let present: Vec<_> = socket
            .list_addresses(Some(link.index))?
            .into_iter()
            .map(|a| a.address)
            .collect();
        for ip in &expected_ips {
            if !present.contains(ip) {
                return Err(PluginError::Check(format!(
                    "interface {} lacks address {ip}",
                    args.ifname
                )));
            }
        }
        if let Some(record) = &state.rail {
            rail::check(&pod, &mut socket, &link, record)?;
        }
    }

    if let Some(rdma) = &state.rdma {
        if rdma.move_with_pod {
            let devices = plugin.backends.rdma.devices(&pod)?;
            if !devices.iter().any(|d| d.name == rdma.device) {
                return Err(PluginError::Check(format!(
                    "RDMA device {} is not in netns {}",
                    rdma.device, args.netns
                )));
            }
        }
        let port = plugin
            .backends
            .ports
            .port_state(&pod, &rdma.device, RDMA_PORT)?;
        if port != PortState::Active {
            return Err(PluginError::Check(format!(
                "RDMA device {} port {RDMA_PORT} is {port}, expected ACTIVE",
                rdma.device
            )));
        }
    }

    if let Some(path) = &state.device_info_file {
        let info = device_info::read(path)?;
        let named = info
            .as_ref()
            .and_then(|i| i["pci"]["pci-address"].as_str())
            .map(str::to_string);
        if named.as_deref() != Some(state.pci.as_str()) {
            return Err(PluginError::Check(format!(
                "device-info file {} {}, expected PCI address {}",
                path.display(),
                match (&info, &named) {
                    (None, _) => "is gone".to_string(),
                    (Some(_), None) => "names no PCI address".to_string(),
                    (Some(_), Some(other)) => format!("names {other}"),
                },
                state.pci
            )));
        }
    }

    if let Some(ipam) = ipam_type(&args.conf) {
        plugin
            .delegator(&plugin.env)
            .check(&ipam, args.conf.bytes())?;
    }
    Ok(())
}
