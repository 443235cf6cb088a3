//! `firewall`: a chained plugin that admits a container's traffic through
//! the host's firewall, a drop-in for the reference `firewall`.
//!
//! It never enters the container's namespace: every rule goes into the
//! namespace the plugin runs in (the host's). Chained after an interface
//! plugin, it reads the addresses from the prevResult and
//!
//! - ADD admits them: per-address accept rules in iptables
//!   ([`iptables`]) or nftables ([`nftables`]), or the addresses as
//!   sources of a firewalld zone ([`firewalld`]); with an `ingressPolicy`
//!   it also cuts the bridge (prevResult's first interface) off from other
//!   bridges, or off from itself too (`isolated`). The prevResult passes
//!   through. A failing step takes back what the call added.
//! - DEL takes the admission back (the isolation rules stay: the bridge
//!   may be shared); idempotent, and works without a prevResult.
//! - CHECK verifies the backend's rules or zone sources.
//! - GC removes the rules of this network's attachments that are not
//!   valid any more, found by the tag each attachment's rules carry
//!   ([`config::attachment_tag`]).
//! - STATUS tells whether the backend works here.
//!
//! The backend is chosen per call ([`backend`]). Calls that change rules
//! are serialised on a host lock: a rule set is read, then written, and two
//! calls in between each other would write from stale readings.

mod backend;
mod config;
mod error;
mod firewalld;
mod iptables;
mod nftables;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use ipnetwork::IpNetwork;
use libcni::lock::{FileLock, LockWait};
use libcni::skel::{self, CmdArgs, Plugin};
use libcni::types::{v100, AnyResult};
use libcni::version::SpecVersion;

use crate::backend::Backend;
use crate::config::{attachment_tag, FirewallConf, IngressPolicy};
use crate::error::FirewallError;

const LOCK_PATH: &str = "/run/cni-firewall.lock";
const LOCK_WAIT: LockWait = LockWait {
    timeout: Duration::from_secs(30),
    holder: "another firewall plugin call",
};
/// The reference speaks 0.4.0 and later only.
const VERSIONS: [SpecVersion; 3] = [
    SpecVersion::V0_4_0,
    SpecVersion::V1_0_0,
    SpecVersion::V1_1_0,
];

fn lock() -> Result<FileLock, FirewallError> {
    Ok(FileLock::acquire(Path::new(LOCK_PATH), LOCK_WAIT)?)
}

/// The prevResult as received and as a 1.x result.
fn prev_result(args: &CmdArgs) -> Result<Option<(AnyResult, v100::Result)>, FirewallError> {
    let Some(prev) = args.conf.prev_result()? else {
        return Ok(None);
    };
    let current = v100::Result::try_from(prev.clone()).map_err(FirewallError::PrevResult)?;
    Ok(Some((prev, current)))
}

fn addresses(result: &v100::Result) -> Vec<IpNetwork> {
    result.ips.iter().map(|ip| ip.address).collect()
}

/// The bridge an ingress policy applies to: the prevResult's first
/// interface, as the reference takes it.
fn policy_bridge(
    result: &v100::Result,
    policy: IngressPolicy,
) -> Result<Option<String>, FirewallError> {
    if policy == IngressPolicy::Open {
        return Ok(None);
    }
    let interface = result.interfaces.first().ok_or(FirewallError::NoBridge {
        policy: policy.name(),
    })?;
    if interface.name.is_empty() {
        return Err(FirewallError::EmptyBridgeName);
    }
    // Checked here, before any change: iptables and nftables would refuse
    // or cut a longer name only once the admission rules are written.
    libcni::link_name::check_key("prevResult.interfaces[0].name", &interface.name)?;
    Ok(Some(interface.name.clone()))
}

/// What an ADD added, to take back when a later step fails.
enum Undo<'a> {
    Iptables(iptables::Added),
    /// Whether the ADD added address rules (then the tag's rules go).
    Nftables {
        added: bool,
        tag: String,
    },
    Firewalld {
        firewalld: &'a firewalld::Firewalld,
        zone: String,
        added: Vec<IpNetwork>,
    },
}

impl Undo<'_> {
    /// Takes the additions back; returns what failed.
    fn run(self) -> Vec<String> {
        match self {
            Undo::Iptables(added) => added.undo(),
            Undo::Nftables { added: false, .. } => Vec::new(),
            Undo::Nftables { added: true, tag } => match nftables::del(&tag) {
                Ok(()) => Vec::new(),
                Err(e) => vec![e.to_string()],
            },
            Undo::Firewalld {
                firewalld,
                zone,
                added,
            } => {
                firewalld.del(&zone, &added);
                Vec::new()
            }
        }
    }
}

struct FirewallPlugin;

impl Plugin for FirewallPlugin {
    type Error = FirewallError;

    fn about(&self) -> String {
        skel::about_string("firewall", env!("CARGO_PKG_VERSION"))
    }

    fn supported_versions(&self) -> &[SpecVersion] {
        &VERSIONS
    }

    fn add(&self, args: &CmdArgs) -> Result<AnyResult, FirewallError> {
        let conf = FirewallConf::from_conf(&args.conf)?;
        let (original, prev) = prev_result(args)?.ok_or(FirewallError::MissingPrevResult)?;
        let ips = addresses(&prev);
        let bridge = policy_bridge(&prev, conf.ingress_policy)?;
        let tag = attachment_tag(&args.conf.name, &args.container_id, &args.ifname);
        let _lock = lock()?;
        let backend = backend::choose(conf.backend)?;
        let undo = match &backend {
            Backend::Iptables => Undo::Iptables(iptables::add(&ips, &conf.admin_chain, &tag)?),
            Backend::Nftables => Undo::Nftables {
                added: nftables::add(&ips, &conf.admin_chain, &tag)?,
                tag: tag.clone(),
            },
            Backend::Firewalld(firewalld) => Undo::Firewalld {
                added: firewalld.add(&conf.zone, &ips)?,
                zone: conf.zone.clone(),
                firewalld,
            },
        };
        if let Some(bridge) = bridge {
            // With firewalld the isolation goes to iptables, as the
            // reference does it.
            let isolation = match &backend {
                Backend::Nftables => nftables::setup_isolation(&bridge, conf.ingress_policy),
                Backend::Iptables | Backend::Firewalld(_) => {
                    iptables::setup_isolation(&ips, &bridge, conf.ingress_policy)
                }
            };
            if let Err(e) = isolation {
                let failures = undo.run();
                return Err(FirewallError::undo_failed(e, failures));
            }
            log::info!(
                "ingress policy {} on bridge {bridge}",
                match conf.ingress_policy {
                    IngressPolicy::Open => "open",
                    IngressPolicy::SameBridge => "same-bridge",
                    IngressPolicy::Isolated => "isolated",
                }
            );
        }
        let place = match &backend {
            Backend::Firewalld(_) => format!("zone {}", conf.zone),
            Backend::Iptables | Backend::Nftables => format!("chain {}", conf.admin_chain),
        };
        log::info!(
            "traffic to and from {} accepted ({} backend, {place})",
            libcni::logging::joined(&ips),
            backend.name()
        );
        Ok(original)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), FirewallError> {
        let conf = FirewallConf::from_conf(&args.conf)?;
        let ips = prev_result(args)?
            .map(|(_, prev)| addresses(&prev))
            .unwrap_or_default();
        let tag = attachment_tag(&args.conf.name, &args.container_id, &args.ifname);
        let _lock = lock()?;
        let backend = backend::choose(conf.backend)?;
        let removed = match &backend {
            Backend::Iptables => iptables::del(&ips, &tag),
            Backend::Nftables => nftables::del(&tag),
            Backend::Firewalld(firewalld) => {
                firewalld.del(&conf.zone, &ips);
                Ok(())
            }
        };
        if removed.is_ok() {
            log::info!(
                "removed this container's rules ({} backend)",
                backend.name()
            );
        }
        removed
    }

    fn check(&self, args: &CmdArgs) -> Result<(), FirewallError> {
        let conf = FirewallConf::from_conf(&args.conf)?;
        let (_, prev) = prev_result(args)?.ok_or(FirewallError::MissingPrevResult)?;
        let ips = addresses(&prev);
        let tag = attachment_tag(&args.conf.name, &args.container_id, &args.ifname);
        match backend::choose(conf.backend)? {
            Backend::Iptables => iptables::check(&ips, &conf.admin_chain),
            Backend::Nftables => nftables::check(&ips, &conf.admin_chain, &tag),
            Backend::Firewalld(firewalld) => Ok(firewalld.check(&conf.zone, &ips)?),
        }
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), FirewallError> {
        let conf = FirewallConf::from_conf(&args.conf)?;
        let network = &args.conf.name;
        let keep: BTreeSet<String> = args
            .conf
            .valid_attachments
            .iter()
            .map(|a| attachment_tag(network, &a.container_id, &a.ifname))
            .collect();
        let _lock = lock()?;
        match backend::choose(conf.backend)? {
            Backend::Iptables => iptables::gc(network, &keep),
            Backend::Nftables => nftables::gc(network, &keep),
            // Zone sources carry no owner: see the firewalld module.
            Backend::Firewalld(_) => Ok(()),
        }
    }

    fn status(&self, args: &CmdArgs) -> Result<(), FirewallError> {
        let conf = FirewallConf::from_conf(&args.conf)?;
        match backend::choose(conf.backend)? {
            Backend::Iptables => iptables::status(),
            Backend::Nftables => nftables::status(),
            Backend::Firewalld(firewalld) => {
                if firewalld.is_running() {
                    Ok(())
                } else {
                    Err(firewalld::FirewalldError::NotRunning.into())
                }
            }
        }
    }
}

fn main() {
    skel::plugin_main(FirewallPlugin)
}

#[cfg(test)]
mod tests {
    use super::*;
    use libcni::error::{ErrorCode, ToCniError};

    fn with_first_interface(name: &str) -> v100::Result {
        let mut result = v100::Result::new();
        result.interfaces.push(v100::Interface {
            name: name.to_string(),
            ..Default::default()
        });
        result
    }

    /// The bridge a policy's rules name is checked as a link name, with
    /// the key it came from, before any rule is written.
    #[test]
    fn the_policy_bridge_is_a_link_name() {
        let policy = IngressPolicy::SameBridge;
        assert_eq!(
            policy_bridge(&with_first_interface("cni0"), policy).unwrap(),
            Some("cni0".to_string())
        );
        let e = policy_bridge(&with_first_interface("br\u{1b}[0m"), policy).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"invalid prevResult.interfaces[0].name "br\u{1b}[0m": interface name contains control characters"#
        );
        assert_eq!(e.to_cni_error().code, ErrorCode::InvalidNetworkConfig);
        let e = policy_bridge(&with_first_interface(&"b".repeat(70_000)), policy).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid prevResult.interfaces[0].name of 70000 bytes: interface name is too long (at most 15 bytes)"
        );
        assert_eq!(
            policy_bridge(&with_first_interface("x"), IngressPolicy::Open).unwrap(),
            None
        );
    }
}
