//! DEL: put back the link settings ADD saved, then forget them.
//!
//! Sysctls are not put back, as in the reference: they live in the
//! container's namespace, which goes away with the container, and the
//! reference saves no old values for them.
//!
//! Best effort and idempotent. No saved file: nothing to do. The
//! namespace or the interface gone (or no `CNI_NETNS`, as in containerd's
//! second DEL): nothing can be restored, so the file is removed (the
//! reference keeps it forever then). An unreadable file is removed with a
//! warning (the reference keeps that too). If the kernel refuses a restore,
//! the others are still tried, the file is kept so that a retried DEL can
//! finish, and the errors are reported (the reference swallows them).
//!
//! Only `dataDir` is read from the configuration: `CNI_ARGS` and the
//! values are not validated again, so a DEL after a refused ADD, or with
//! arguments another plugin of the list needs, still cleans up (unknown
//! `CNI_ARGS` break the reference's DEL).

use nix::errno::Errno;

use libcni::netlink::RouteSocket;
use libcni::netns::{NetNs, NetNsError};
use libcni::skel::CmdArgs;

use crate::config;
use crate::error::TuningError;
use crate::link;
use crate::saved::{self, Loaded, SavedLink};

pub fn del(args: &CmdArgs) -> Result<(), TuningError> {
    let raw = config::decode(&args.stdin_data)?;
    let data_dir = config::data_dir(&raw)?;
    saved::confine_folder(&data_dir, false)?;
    let path = saved::path_of(&data_dir, &args.container_id, &args.ifname);
    let saved = match saved::load(&path)? {
        Loaded::Missing => return Ok(()),
        Loaded::Present {
            link: Some(link), ..
        } => link,
        Loaded::Present { link: None, .. } => {
            log::warn!(
                "saved link settings {} are unreadable; removing them",
                path.display()
            );
            return Ok(saved::remove(&path)?);
        }
    };
    let Some(netns_path) = args.netns_path() else {
        log::debug!("no CNI_NETNS: nothing to restore");
        return Ok(saved::remove(&path)?);
    };
    let netns = match NetNs::open(netns_path) {
        Ok(netns) => netns,
        Err(e @ (NetNsError::NotExist { .. } | NetNsError::NotNetNs { .. })) => {
            log::debug!("nothing to restore: {e}");
            return Ok(saved::remove(&path)?);
        }
        Err(e) => return Err(TuningError::netns(&args.netns, e)),
    };
    // On this thread, moved there and back: see `add`.
    netns
        .enter_briefly(|| restore(&args.ifname, &saved))
        .map_err(|e| TuningError::netns(&args.netns, e))??;
    Ok(saved::remove(&path)?)
}

/// Runs inside the container's namespace.
fn restore(ifname: &str, saved: &SavedLink) -> Result<(), TuningError> {
    let mut socket = RouteSocket::open_current()?;
    let Some(attrs) = socket.link_attrs(ifname)? else {
        log::debug!("{ifname} is gone: nothing to restore");
        return Ok(());
    };
    let (settings, bad_mac) = link::restores(saved);
    if let Some(mac) = bad_mac {
        log::warn!("saved MAC {mac} of {ifname} is not a MAC address; not restored");
    }
    let mut errors = Vec::new();
    for setting in settings {
        match setting.apply(&mut socket, attrs.index) {
            Ok(()) => log::info!("restored {setting} on {ifname}"),
            // The interface went away meanwhile.
            Err(e) if e.errno() == Some(Errno::ENODEV) => return Ok(()),
            Err(e) => errors.push(TuningError::from(e)),
        }
    }
    match TuningError::from_many(errors) {
        None => Ok(()),
        Some(e) => Err(e),
    }
}
