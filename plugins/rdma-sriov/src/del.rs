//! DEL: idempotent and best effort, also with the pod's netns gone.
//!
//! The attachment's record drives the teardown ([`crate::teardown`]); what
//! could not be undone stays recorded for the next DEL, and the error lists
//! every failure with its own code. Without a record nothing of ours is
//! left, but the address may be (an ADD that died before its record was
//! written, or a second DEL), so IPAM DEL still runs. The device-info file
//! the runtime names (`runtimeConfig.CNIDeviceInfoFile`) goes in any case:
//! its name is unique to the attachment.

use libcni::device_info;
use libcni::skel::CmdArgs;

use crate::config::Locations;
use crate::error::PluginError;
use crate::plugin::{ipam_type, RdmaSriov};
use crate::teardown::{teardown, IpamRelease};

pub(crate) fn del(plugin: &RdmaSriov, args: &CmdArgs) -> Result<(), PluginError> {
    let locations = Locations::from_conf(&args.conf);
    // Removed first and reported last: the attachment's own failure, if
    // any, says more (and its record keeps the file for the next DEL).
    let device_info = match &locations.device_info_file {
        Some(path) => device_info::remove(path),
        None => Ok(()),
    };
    del_attachment(plugin, args, locations)?;
    Ok(device_info?)
}

fn del_attachment(
    plugin: &RdmaSriov,
    args: &CmdArgs,
    locations: Locations,
) -> Result<(), PluginError> {
    let ctx = plugin.context(locations.state_dir, locations.sysfs_root);
    let Some((mut state, _lock)) =
        plugin.load_and_lock(&ctx, &args.conf.name, &args.container_id, &args.ifname)?
    else {
        if let Some(ipam) = ipam_type(&args.conf) {
            plugin
                .delegator(&plugin.env)
                .del(&ipam, args.conf.bytes())?;
        }
        return Ok(());
    };
    // The runtime's configuration first; the recorded one when it has no
    // IPAM (any more).
    let release = match ipam_type(&args.conf) {
        Some(ipam) => Some(IpamRelease {
            plugin: ipam,
            netconf: args.conf.bytes().to_vec(),
            env: &plugin.env,
        }),
        None => IpamRelease::recorded(&state, &plugin.env),
    };
    let problems = teardown(plugin, &ctx, &mut state, release);
    if problems.is_empty() {
        ctx.store
            .remove(&state.network, &state.container_id, &state.ifname)?;
        Ok(())
    } else {
        ctx.store.save(&state)?;
        Err(PluginError::Teardown(problems))
    }
}
