//! GC (CNI 1.1): every attachment of the network that the runtime no
//! longer lists as valid is torn down as DEL would, allocation records
//! left without an attachment are dropped, and the IPAM plugin collects
//! its own. Each step runs whatever the others did; the error lists every
//! failure with its own code.

use std::collections::HashSet;

use libcni::error::ErrorList;
use libcni::skel::CmdArgs;

use crate::config::Locations;
use crate::error::PluginError;
use crate::plugin::{ipam_type, RdmaSriov};
use crate::teardown::{teardown, IpamRelease};

pub(crate) fn gc(plugin: &RdmaSriov, args: &CmdArgs) -> Result<(), PluginError> {
    let locations = Locations::from_conf(&args.conf);
    let ctx = plugin.context(locations.state_dir, locations.sysfs_root);
    let network = &args.conf.name;
    let valid: HashSet<(&str, &str)> = args
        .conf
        .valid_attachments
        .iter()
        .map(|a| (a.container_id.as_str(), a.ifname.as_str()))
        .collect();
    let mut problems = ErrorList::new();
    for entry in ctx.store.list(network) {
        let state = match entry {
            Ok(state) => state,
            Err(e) => {
                problems.push(&PluginError::State(e));
                continue;
            }
        };
        if valid.contains(&(state.container_id.as_str(), state.ifname.as_str())) {
            continue;
        }
        let (mut state, _lock) =
            match plugin.load_and_lock(&ctx, network, &state.container_id, &state.ifname) {
                Ok(Some(found)) => found,
                Ok(None) => continue,
                Err(e) => {
                    problems.push(&e);
                    continue;
                }
            };
        log::info!(
            "GC: releasing {}/{} (VF {})",
            state.container_id,
            state.ifname,
            state.pci
        );
        let env = plugin.attachment_env(&state);
        let release = IpamRelease::recorded(&state, &env);
        let mut failed = teardown(plugin, &ctx, &mut state, release);
        if failed.is_empty() {
            if let Err(e) = ctx
                .store
                .remove(&state.network, &state.container_id, &state.ifname)
            {
                failed.push(&PluginError::State(e));
            }
        } else if let Err(e) = ctx.store.save(&state) {
            failed.push(&PluginError::State(e));
        }
        problems.append_in(format!("{}/{}", state.container_id, state.ifname), failed);
    }

    // Records of this network whose attachment has no state and is not
    // valid any more (left by a run that died after writing them).
    for pci in ctx.allocs.list() {
        let Ok(Some(record)) = ctx.allocs.read(&pci) else {
            continue;
        };
        let orphan = record.network == *network
            && !valid.contains(&(record.container_id.as_str(), record.ifname.as_str()))
            && matches!(
                ctx.store
                    .load(network, &record.container_id, &record.ifname),
                Ok(None)
            );
        if orphan {
            if let Err(e) = ctx.allocs.remove(&pci) {
                problems.push(&PluginError::Alloc(e));
            }
        }
    }

    if let Some(ipam) = ipam_type(&args.conf) {
        if let Err(e) = plugin.delegator(&plugin.env).gc(&ipam, args.conf.bytes()) {
            problems.push_in("IPAM GC", &PluginError::Ipam(e));
        }
    }
    problems.into_result().map_err(PluginError::Teardown)
}
