//! ADD: write the sysctls, save the link settings about to change, change
//! them, and pass the previous result on (with the new MAC).
//!
//! Everything that can be checked is checked before the first write: the
//! configuration, the allowlist, the previous result, that every sysctl
//! exists in the container's namespace and that the interface is there.
//! A kernel refusal after that (a value out of range) undoes what this ADD
//! wrote, last first: link settings, the saved file, sysctls.

use std::path::{Path, PathBuf};

use libcni::netlink::{LinkAttrs, RouteSocket};
use libcni::netns::NetNs;
use libcni::skel::CmdArgs;
use libcni::sysctl;
use libcni::types::{v100, AnyResult};

use crate::allowlist::{Allowlist, ALLOWLIST_PATH};
use crate::config::{self, Mac, TuningConf};
use crate::error::TuningError;
use crate::link::{self, LinkSetting};
use crate::saved::{self, Loaded};

pub fn add(args: &CmdArgs) -> Result<AnyResult, TuningError> {
    let conf = config::parse(args)?;
    if let Some(allowlist) = Allowlist::load(Path::new(ALLOWLIST_PATH))? {
        allowlist.check(conf.sysctls.iter().map(|s| s.key.as_str()))?;
    }
    let prev = args
        .conf
        .prev_result()?
        .ok_or(TuningError::PrevResultMissing)?;
    // Converted before any change, so a result that cannot be converted
    // fails the call with nothing to undo.
    let result = with_mac(prev, &args.ifname, conf.mac.as_ref())?;
    let netns = NetNs::open(&args.netns).map_err(|e| TuningError::netns(&args.netns, e))?;
    // This thread moves into the namespace and back rather than a thread
    // being started for the work (`NetNs::run`): `apply` is a few sysctl and
    // netlink calls that start no thread or process, and starting and
    // scheduling a thread was a large part of a call on a busy node. A
    // failed move back ends the call with that error.
    netns
        .enter_briefly(|| apply(args, &conf))
        .map_err(|e| TuningError::netns(&args.netns, e))??;
    Ok(result)
}

/// The previous result, with the MAC of `CNI_IFNAME` replaced when ADD
/// sets one (in the kernel's spelling, which CHECKs of later plugins
/// compare against).
fn with_mac(prev: AnyResult, ifname: &str, mac: Option<&Mac>) -> Result<AnyResult, TuningError> {
    let Some(mac) = mac else {
        return Ok(prev);
    };
    let mut current = v100::Result::try_from(prev).map_err(TuningError::PrevResult)?;
    for interface in current.interfaces.iter_mut().filter(|i| i.name == ifname) {
        interface.mac = mac.text();
    }
    Ok(AnyResult::V1(current))
}

/// One change to take back if a later step fails.
#[derive(Debug)]
enum Undo {
    Sysctl {
        path: String,
        value: String,
    },
    /// Puts the file back as it was, or removes it.
    SavedFile {
        path: PathBuf,
        previous: Option<Vec<u8>>,
    },
    Link(LinkSetting),
}

/// The container interface, when link settings are requested.
struct Interface {
    socket: RouteSocket,
    /// As found before any change.
    attrs: LinkAttrs,
    requested: Vec<LinkSetting>,
}

/// Runs inside the container's namespace.
fn apply(args: &CmdArgs, conf: &TuningConf) -> Result<(), TuningError> {
    let mut old_values = Vec::with_capacity(conf.sysctls.len());
    for setting in &conf.sysctls {
        match sysctl::get(&setting.path) {
            Ok(value) => old_values.push(value),
            Err(e) if e.is_not_found() => {
                return Err(TuningError::SysctlMissing {
                    key: setting.key.clone(),
                    path: setting.path.clone(),
                })
            }
            Err(e) => return Err(e.into()),
        }
    }
    let requested = link::requested(conf);
    let mut interface = if requested.is_empty() {
        None
    } else {
        let mut socket = RouteSocket::open_current()?;
        let attrs = socket
            .link_attrs(args.ifname.as_str())?
            .ok_or_else(|| TuningError::LinkMissing(args.ifname.clone()))?;
        Some(Interface {
            socket,
            attrs,
            requested,
        })
    };

    let mut undo = Vec::new();
    let changed = change(args, conf, &old_values, interface.as_mut(), &mut undo);
    if let Err(e) = changed {
        roll_back(undo, interface.as_mut());
        return Err(e);
    }
    Ok(())
}

fn change(
    args: &CmdArgs,
    conf: &TuningConf,
    old_values: &[String],
    interface: Option<&mut Interface>,
    undo: &mut Vec<Undo>,
) -> Result<(), TuningError> {
    let mut changed = Vec::new();
    for (setting, old) in conf.sysctls.iter().zip(old_values) {
        // Recorded before the write: a write that fails may have changed
        // the value already (a short write: the kernel took `1` of
        // `1\n...`), and the roll-back must restore it. Restoring one
        // that did not change writes the same value.
        undo.push(Undo::Sysctl {
            path: setting.path.clone(),
            value: old.clone(),
        });
        if sysctl::set(&setting.path, &setting.value)? {
            changed.push(format!("{} {} (was {old})", setting.path, setting.value));
        }
    }
    let Some(interface) = interface else {
        log_changes(&changed);
        return Ok(());
    };

    saved::confine_folder(&conf.data_dir, true)?;
    let path = saved::path_of(&conf.data_dir, &args.container_id, &args.ifname);
    let originals = link::originals(&interface.requested, &interface.attrs, &args.conf.name);
    let (previous, to_save) = match saved::load(&path)? {
        Loaded::Missing => (None, originals),
        // An earlier ADD of this attachment saved the true originals.
        Loaded::Present {
            bytes,
            link: Some(older),
        } => (Some(bytes), older.keep_older(originals)),
        Loaded::Present { bytes, link: None } => {
            log::warn!("replacing unreadable saved settings {}", path.display());
            (Some(bytes), originals)
        }
    };
    saved::store(&path, &to_save.to_json())?;
    undo.push(Undo::SavedFile { path, previous });

    let index = interface.attrs.index;
    for setting in &interface.requested {
        let current = setting.current(&interface.attrs);
        undo.push(Undo::Link(current.clone()));
        setting.apply(&mut interface.socket, index)?;
        changed.push(format!("{} {setting} (was {current})", args.ifname));
    }
    log_changes(&changed);
    Ok(())
}

/// One line for everything ADD changed.
fn log_changes(changed: &[String]) {
    if changed.is_empty() {
        log::info!("nothing to change");
    } else {
        log::info!("changed {}", changed.join(", "));
    }
}

/// Undoes the steps last first, going on after failures, which are logged:
/// the caller reports the error that caused the rollback.
fn roll_back(undo: Vec<Undo>, mut interface: Option<&mut Interface>) {
    for step in undo.into_iter().rev() {
        let outcome = match &step {
            Undo::Sysctl { path, value } => {
                sysctl::set(path, value).map(|_| ()).map_err(Into::into)
            }
            Undo::SavedFile {
                path,
                previous: None,
            } => saved::remove(path).map_err(Into::into),
            Undo::SavedFile {
                path,
                previous: Some(bytes),
            } => saved::store(path, bytes).map_err(Into::into),
            Undo::Link(setting) => match interface.as_deref_mut() {
                Some(i) => setting
                    .apply(&mut i.socket, i.attrs.index)
                    .map_err(TuningError::from),
                None => Ok(()),
            },
        };
        if let Err(e) = outcome {
            let what = match &step {
                Undo::Sysctl { path, value } => format!("sysctl {path} back to {value}"),
                Undo::SavedFile { path, .. } => format!("saved settings {}", path.display()),
                Undo::Link(setting) => format!("link setting {setting}"),
            };
            log::error!("ADD rollback: cannot restore {what}: {e}");
        }
    }
}
