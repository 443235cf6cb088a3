//! DEL: idempotent and best effort, also with the pod's netns gone.
//!
//! The attachment's record drives the teardown ([`crate::teardown`]); what
//! could not be undone stays recorded for the next DEL, and the error lists
//! every failure with its own code. Without a record nothing of ours is
//! left, but the address may be (an ADD that died before its record was
//! written, or a second DEL), so IPAM DEL still runs. The device-info file
//! goes only when the record says our ADD created it ([`crate::teardown`]):
//! the path in the configuration (`runtimeConfig.CNIDeviceInfoFile`) is a
//! namespace user's to choose, and DEL deletes nothing it did not make.

use libcni::skel::CmdArgs;

use crate::config::Locations;
use crate::error::PluginError;
use crate::plugin::{ipam_type, RdmaSriov};
use crate::teardown::{teardown, IpamRelease};

pub(crate) fn del(plugin: &RdmaSriov, args: &CmdArgs) -> Result<(), PluginError> {
    let locations = Locations::from_conf(&args.conf);
    del_attachment(plugin, args, locations)
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
