//! STATUS (CNI 1.1): ready when the RDMA subsystem can give pods their
//! devices (exclusive namespace mode, or shared mode opted into), in pf
//! mode when the PF has a free VF, and when the IPAM plugin is ready.

use libcni::netlink::rdma::RdmaNetnsMode;
use libcni::skel::CmdArgs;

use crate::alloc::netns_alive;
use crate::config::Locations;
use crate::error::PluginError;
use crate::plugin::{ipam_type, RdmaSriov};
use crate::vf::vfs_of_pf;

pub(crate) fn status(plugin: &RdmaSriov, args: &CmdArgs) -> Result<(), PluginError> {
    let locations = Locations::from_conf(&args.conf);
    match plugin.backends.rdma.netns_mode() {
        Ok(RdmaNetnsMode::Shared) if !locations.allow_shared_rdma_netns => {
            return Err(PluginError::SharedMode)
        }
        Ok(_) => {}
        Err(e) => return Err(PluginError::Unavailable(e.to_string())),
    }
    let has_device_id = args
        .conf
        .raw()
        .get("deviceID")
        .and_then(|v| v.as_str())
        .is_some_and(|s| !s.is_empty());
    if let (Some(pf), false) = (&locations.pf, has_device_id) {
        let ctx = plugin.context(locations.state_dir.clone(), locations.sysfs_root.clone());
        let vfs = vfs_of_pf(&ctx.sysfs, pf).map_err(|e| PluginError::Unavailable(e.to_string()))?;
        let free = vfs.iter().any(|(_, pci)| {
            ctx.allocs
                .read(pci)
                .map(|record| record.is_none_or(|r| !netns_alive(&r.netns)))
                .unwrap_or(false)
        });
        if !free {
            return Err(PluginError::Unavailable(format!(
                "no free VF on PF {pf:?} ({} VFs, all allocated)",
                vfs.len()
            )));
        }
    }
    if let Some(ipam) = ipam_type(&args.conf) {
        plugin
            .delegator(&plugin.env)
            .status(&ipam, args.conf.bytes())?;
    }
    Ok(())
}
