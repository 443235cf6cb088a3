//! GC: forget the saved link settings of this network's attachments that
//! the runtime no longer lists. Their containers are gone, so there is
//! nothing to restore; only the files are left.
//!
//! A configuration with no list at all (neither `cni.dev/valid-attachments`
//! nor the older `cni.dev/attachments`) forgets nothing, as host-local and
//! host-device do: the Go `cnitool gc` sends none after deleting the stale
//! attachments itself, and the saved values of running pods must survive
//! such a call (DEL needs them).

use libcni::plugin_conf::{LEGACY_ATTACHMENTS_KEY, VALID_ATTACHMENTS_KEY};
use libcni::skel::CmdArgs;

use crate::config;
use crate::error::TuningError;
use crate::saved;

pub fn gc(args: &CmdArgs) -> Result<(), TuningError> {
    let raw = config::decode(&args.stdin_data)?;
    let listed = args.conf.raw();
    if listed.get(VALID_ATTACHMENTS_KEY).is_none() && listed.get(LEGACY_ATTACHMENTS_KEY).is_none() {
        log::warn!(
            "GC without {VALID_ATTACHMENTS_KEY} or {LEGACY_ATTACHMENTS_KEY}: nothing forgotten"
        );
        return Ok(());
    }
    let keep: Vec<(String, String)> = args
        .conf
        .valid_attachments
        .iter()
        .map(|a| (a.container_id.clone(), a.ifname.clone()))
        .collect();
    let data_dir = config::data_dir(&raw)?;
    saved::confine_folder(&data_dir, false)?;
    let stale = saved::stale_files(&data_dir, &args.conf.name, &keep)?;
    let mut errors = Vec::new();
    for path in stale {
        match saved::remove(&path) {
            Ok(()) => log::debug!("GC removed {}", path.display()),
            Err(e) => errors.push(TuningError::from(e)),
        }
    }
    match TuningError::from_many(errors) {
        None => Ok(()),
        Some(e) => Err(e),
    }
}
