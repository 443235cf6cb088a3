//! CHECK: IPAM CHECK, then the prevResult against the container: its
//! interface in this sandbox, present with the result's MAC, its
//! addresses and routes, and (exclusive RDMA mode) the RDMA devices ADD
//! moved. In DPDK mode nothing was moved, so only IPAM is checked.

use libcni::iface::{check_interface_ips, check_routes, sandbox_interface};
use libcni::netlink::RouteSocket;
use libcni::skel::CmdArgs;
use libcni::types::v100;

use crate::config::NetConf;
use crate::error::HostDeviceError;
use crate::plugin::{open_netns, store, HostDevice};
use crate::rdma;

pub fn check(plugin: &HostDevice, args: &CmdArgs) -> Result<(), HostDeviceError> {
    let conf = NetConf::load_lenient(&args.conf)?;
    let pod_ns = open_netns(&args.netns)?;
    if let Some(ipam) = &conf.ipam_type {
        plugin
            .delegator(args)
            .check(ipam, args.conf.bytes())
            .map_err(|source| HostDeviceError::Ipam {
                action: "IPAM CHECK",
                plugin: ipam.clone(),
                source,
            })?;
    }
    let prev = args
        .conf
        .prev_result()?
        .ok_or(HostDeviceError::PrevResultMissing)?;
    let result = v100::Result::try_from(prev).map_err(HostDeviceError::PrevResult)?;
    let state = store(&conf, args).load(&args.container_id, &args.ifname);
    let dpdk = state
        .as_ref()
        .map_or_else(|| plugin.dpdk_mode(&conf), |s| s.dpdk);
    if dpdk {
        return Ok(());
    }
    let Some((_, interface)) = sandbox_interface(&result, &args.ifname, &args.netns) else {
        return Err(HostDeviceError::SandboxMismatch {
            found: String::new(),
            netns: args.netns.clone(),
        });
    };
    let mut pod = RouteSocket::open_in(&pod_ns)?;
    let link = pod
        .link_by_name(&interface.name)?
        .ok_or_else(|| HostDeviceError::InterfaceMissing(interface.name.clone()))?;
    if !interface.mac.is_empty() && !interface.mac.eq_ignore_ascii_case(&link.mac_string()) {
        return Err(HostDeviceError::MacMismatch {
            ifname: interface.name.clone(),
            expected: interface.mac.clone(),
            found: link.mac_string(),
        });
    }
    check_interface_ips(&mut pod, &link, &result)?;
    check_routes(&mut pod, &result.routes)?;
    let recorded = state.map(|s| s.rdma_devices).unwrap_or_default();
    rdma::check_in_pod(plugin.rdma.as_ref(), &pod_ns, &args.ifname, &recorded)
}
