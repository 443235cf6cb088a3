//! One GC pass: list the runtime's sandboxes, read what the node holds,
//! decide ([`crate::plan`]), then act per network through libcni's
//! runtime:
//!
//! 1. GC to every plugin of the network with the valid attachments (both
//!    key names). A plugin that fails GC leaves the whole network's cache
//!    entries in place (and no DEL is sent), so the next pass tries again.
//! 2. DEL of each released attachment that has a cache entry, with the
//!    namespace, CNI_ARGS and capability arguments cached at ADD; libcni
//!    removes the entry once the DEL succeeded. A failed DEL keeps it.
//!
//! One line per released attachment goes to `out`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use libcni::cache::{NetworkAttachment, ResultCache};
use libcni::conf::NetworkConfigList;
use libcni::runtime::{CniConfig, GcArgs, RuntimeConf};
use libcni::SpecVersion;

use crate::error::Error;
use crate::plan::{self, Decision, Refusal, Release};
use crate::scan::{self, Network};

/// Where a pass looks and what it may do.
#[derive(Debug, Clone)]
pub struct PassOptions {
    pub cri_socket: PathBuf,
    pub conf_dir: PathBuf,
    pub bin_dirs: Vec<PathBuf>,
    pub cache_dir: PathBuf,
    pub min_age: Duration,
    pub dry_run: bool,
}

/// An attachment a pass released (or, dry, would have).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    pub network: String,
    pub container_id: String,
    pub ifname: String,
    /// The plugin types of the network's chain, for the metrics.
    pub plugins: Vec<String>,
}

/// What happened to one network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Refused(Refusal),
    /// GC ran; `errors` are the DELs that failed (their entries stay).
    Collected {
        released: Vec<Released>,
        kept: usize,
        errors: Vec<String>,
    },
    /// The plugins' GC failed: nothing released, every entry kept.
    GcFailed(String),
}

/// What a pass did.
#[derive(Debug, Clone)]
pub struct PassReport {
    /// Set when the runtime's listing failed: the pass released nothing.
    pub runtime_error: Option<String>,
    pub networks: BTreeMap<String, Outcome>,
    /// The networks' configurations, for STATUS (those of the folder).
    pub configs: BTreeMap<String, NetworkConfigList>,
    pub started: SystemTime,
    pub duration: Duration,
}

impl PassReport {
    pub fn released(&self) -> impl Iterator<Item = &Released> {
        self.networks.values().flat_map(|o| match o {
            Outcome::Collected { released, .. } => released.as_slice(),
            _ => &[],
        })
    }

    /// Failures of networks (GC or DEL errors).
    pub fn error_count(&self) -> usize {
        self.networks
            .values()
            .map(|o| match o {
                Outcome::Collected { errors, .. } => errors.len(),
                Outcome::GcFailed(_) => 1,
                Outcome::Refused(_) => 0,
            })
            .sum()
    }
}

/// Runs one pass. An error means the pass could not look at the node at
/// all (its folders unreadable); a runtime that does not answer is in the
/// report (`runtime_error`), with every network refused.
pub fn run_pass(opts: &PassOptions, out: &mut dyn Write) -> Result<PassReport, Error> {
    let started = SystemTime::now();
    let clock = Instant::now();
    let sandboxes = crate::cri::list_sandboxes(&opts.cri_socket).map_err(|e| e.to_string());
    let cache = ResultCache::new(&opts.cache_dir);
    let found = scan::networks(&opts.conf_dir, &cache, SystemTime::now())?;
    let views = found
        .iter()
        .map(|(name, net)| (name.clone(), net.view()))
        .collect();
    let decisions = plan::decide(&sandboxes, &views, opts.min_age);
    if let Err(why) = &sandboxes {
        log::error!("releasing nothing this pass: {why}");
    }

    let cni = CniConfig::new(opts.bin_dirs.clone()).with_cache_dir(&opts.cache_dir);
    let mut networks = BTreeMap::new();
    for (name, decision) in decisions {
        let Some(net) = found.get(&name) else {
            continue;
        };
        let outcome = act(&cni, &name, net, decision, opts.dry_run, out)?;
        networks.insert(name, outcome);
    }
    let configs = found
        .into_iter()
        .filter(|(_, n)| n.from_folder)
        .filter_map(|(name, n)| Some((name, n.config?)))
        .collect();
    Ok(PassReport {
        runtime_error: sandboxes.err(),
        networks,
        configs,
        started,
        duration: clock.elapsed(),
    })
}

fn act(
    cni: &CniConfig,
    name: &str,
    net: &Network,
    decision: Decision,
    dry_run: bool,
    out: &mut dyn Write,
) -> Result<Outcome, Error> {
    let (valid, release) = match decision {
        Decision::Refuse(why) => {
            // The runtime's failure is logged once for the pass.
            if !matches!(why, Refusal::RuntimeUnknown(_)) {
                log::warn!("network {name}: releasing nothing: {why}");
            }
            return Ok(Outcome::Refused(why));
        }
        Decision::Collect { valid, release } => (valid, release),
    };
    // Decided only with a configuration (plan::Refusal::NoConfig).
    let Some(list) = &net.config else {
        return Ok(Outcome::Refused(Refusal::NoConfig));
    };
    let has_gc = has_gc(list);
    // Without GC (before 1.1.0) only DEL can release, so only what the
    // cache records.
    let release: Vec<Release> = release.into_iter().filter(|r| r.cached || has_gc).collect();
    let kept = valid.len();
    let plugins: Vec<String> = list
        .plugins
        .iter()
        .map(|p| p.plugin_type().to_string())
        .collect();
    let released_of = |r: &Release| Released {
        network: name.to_string(),
        container_id: r.container_id.clone(),
        ifname: r.ifname.clone(),
        plugins: plugins.clone(),
    };

    if dry_run {
        let mut released = Vec::new();
        for r in &release {
            let line = format!(
                "would release network={name} container={} ifname={}",
                r.container_id, r.ifname
            );
            writeln!(out, "{line}").map_err(Error::Output)?;
            released.push(released_of(r));
        }
        return Ok(Outcome::Collected {
            released,
            kept,
            errors: Vec::new(),
        });
    }

    let args = GcArgs {
        valid_attachments: valid,
    };
    if let Err(e) = cni.gc_plugins(list, Some(&args)) {
        let text = one_line(&e.to_string());
        log::warn!("network {name}: GC failed; no DEL sent, every cache entry kept: {text}");
        return Ok(Outcome::GcFailed(text));
    }
    let cached: BTreeMap<(&str, &str), &NetworkAttachment> = net
        .cached
        .iter()
        .map(|(a, _)| ((a.container_id.as_str(), a.ifname.as_str()), a))
        .collect();
    let mut released = Vec::new();
    let mut errors = Vec::new();
    for r in &release {
        if r.cached {
            let Some(att) = cached.get(&(r.container_id.as_str(), r.ifname.as_str())) else {
                continue;
            };
            if let Err(e) = cni.del_network_list(list, &runtime_conf(att)) {
                let text = one_line(&e.to_string());
                log::warn!(
                    "network {name}: DEL of container {} ifname {} failed, its cache entry kept: {text}",
                    r.container_id,
                    r.ifname
                );
                errors.push(text);
                continue;
            }
        }
        writeln!(
            out,
            "released network={name} container={} ifname={}",
            r.container_id, r.ifname
        )
        .map_err(Error::Output)?;
        released.push(released_of(r));
    }
    Ok(Outcome::Collected {
        released,
        kept,
        errors,
    })
}

/// The arguments the attachment was added with, as the cache recorded
/// them.
fn runtime_conf(att: &NetworkAttachment) -> RuntimeConf {
    RuntimeConf {
        container_id: att.container_id.clone(),
        netns: att.netns.clone(),
        ifname: att.ifname.clone(),
        args: att.cni_args.clone(),
        capability_args: att.capability_args.clone(),
    }
}

/// Whether the list's version has GC (1.1.0 on).
pub fn has_gc(list: &NetworkConfigList) -> bool {
    SpecVersion::parse_config(&list.cni_version).is_ok_and(SpecVersion::has_gc_and_status)
}

/// Plugin errors may span lines; the log keeps one line per event.
fn one_line(text: &str) -> String {
    text.lines().collect::<Vec<_>>().join("; ")
}
