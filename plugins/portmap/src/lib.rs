//! `portmap`: a chained CNI plugin that publishes container ports on the
//! host (`runtimeConfig.portMappings`), a drop-in replacement for the
//! reference plugin with the same configuration, chain and table names,
//! rule layout and comments, so that either plugin can remove the other's
//! rules.
//!
//! Two backends ([`config::BackendKind`]):
//! - nftables, in-process over netlink: one transaction per ADD, DEL or
//!   GC, listing only the plugin's own table ([`nftables`]);
//! - iptables: one `iptables-save -t nat` and at most one
//!   `iptables-restore --noflush` per family, under a host-wide lock with
//!   bounded waits ([`iptables`]).
//!
//! With no `backend` key and no backend-specific option, iptables is used
//! when it works and nftables otherwise (the reference's rule), so hosts
//! with only nftables work. A call without port mappings does nothing:
//! no backend is probed, nothing is listed, no process is started.

pub mod config;
pub mod iptables;
pub mod localnet;
pub mod nftables;

use std::collections::BTreeSet;
use std::net::IpAddr;

use libcni::error::{CniError, ErrorCode, ToCniError};
use libcni::netlink::conntrack;
use libcni::plugin_conf::ConfError;
use libcni::skel::{about_string, CmdArgs, Plugin};
use libcni::types::{v100, AnyResult, ResultError};
use libcni::IpFamily;

use config::{BackendChoice, BackendKind, ConfigError, ContainerIps, PortMapConf, Protocol};
use iptables::{IptablesError, IptablesMapper};
use localnet::LocalnetError;
use nftables::{NftError, NftMapper};

#[derive(Debug, thiserror::Error)]
pub enum PortmapError {
    #[error(transparent)]
    Conf(#[from] ConfError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("must be called as chained plugin")]
    NotChained,
    #[error("Required prevResult missing")]
    PrevResultMissing,
    #[error("could not convert prevResult to the current version: {0}")]
    PrevResult(#[source] ResultError),
    #[error(transparent)]
    Iptables(#[from] IptablesError),
    #[error(transparent)]
    Nftables(#[from] NftError),
    #[error(
        "neither iptables nor nftables is usable: (iptables) {iptables}, (nftables) {nftables}"
    )]
    NoBackend {
        iptables: Box<IptablesError>,
        nftables: Box<NftError>,
    },
    #[error("unable to enable route_localnet: {0}")]
    Localnet(#[from] LocalnetError),
    /// STATUS: the backend cannot be used.
    #[error("{0}")]
    Unavailable(String),
}

impl ToCniError for PortmapError {
    fn to_cni_error(&self) -> CniError {
        let code = match self {
            PortmapError::Conf(e) => return e.to_cni_error(),
            PortmapError::Config(_)
            | PortmapError::NotChained
            | PortmapError::PrevResultMissing => ErrorCode::InvalidNetworkConfig,
            PortmapError::PrevResult(_) => ErrorCode::Decode,
            PortmapError::Iptables(e) => e.error_code(),
            PortmapError::Nftables(e) => e.error_code(),
            PortmapError::Unavailable(_) => ErrorCode::NotAvailable,
            PortmapError::NoBackend { .. } | PortmapError::Localnet(_) => ErrorCode::Internal,
        };
        CniError::new(code, self.to_string())
    }
}

/// The plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct PortmapPlugin;

/// The backend chosen for one call.
enum Mapper {
    Iptables(IptablesMapper),
    Nftables(NftMapper),
}

impl Mapper {
    /// The configured backend, or for `Auto` iptables when it works and
    /// else nftables. The iptables probe runs under the host lock and its
    /// reading of the table is reused, so detection costs no extra work.
    fn open(choice: BackendChoice) -> Result<Mapper, PortmapError> {
        match choice {
            BackendChoice::Configured(BackendKind::Iptables) => {
                Ok(Mapper::Iptables(IptablesMapper::open()?))
            }
            BackendChoice::Configured(BackendKind::Nftables) => {
                Ok(Mapper::Nftables(NftMapper::open()?))
            }
            BackendChoice::Auto => {
                let probed = IptablesMapper::open().and_then(|mut iptables| {
                    iptables.probe()?;
                    Ok(iptables)
                });
                let iptables_error = match probed {
                    Ok(iptables) => return Ok(Mapper::Iptables(iptables)),
                    Err(e) if e.is_try_again() => return Err(e.into()),
                    Err(e) => e,
                };
                log::debug!("iptables not usable ({iptables_error}), trying nftables");
                let nftables = NftMapper::open().and_then(|mut n| n.probe().map(|()| n));
                match nftables {
                    Ok(n) => Ok(Mapper::Nftables(n)),
                    Err(nftables) => Err(PortmapError::NoBackend {
                        iptables: Box::new(iptables_error),
                        nftables: Box::new(nftables),
                    }),
                }
            }
        }
    }

    fn forward(
        &mut self,
        conf: &PortMapConf,
        container_id: &str,
        ips: &ContainerIps,
    ) -> Result<(), PortmapError> {
        let backend = match self {
            Mapper::Iptables(m) => {
                m.forward(conf, container_id, ips)?;
                "iptables"
            }
            Mapper::Nftables(m) => {
                m.forward(conf, container_id, ips)?;
                "nftables"
            }
        };
        for (family, container) in ips.iter() {
            let rules = conf
                .mappings
                .iter()
                .filter(|m| m.applies_to(family))
                .map(|m| {
                    let host = m
                        .host_ip
                        .map_or_else(|| "*".to_string(), |ip| ip.to_string());
                    format!(
                        "{host}:{}/{} -> {}:{}",
                        m.host_port,
                        m.protocol,
                        container.ip(),
                        m.container_port
                    )
                });
            log::info!(
                "DNAT {} ({backend} backend)",
                libcni::logging::joined(rules)
            );
        }
        Ok(())
    }

    /// DEL's removal, ending the mapper.
    fn unforward(self, network: &str, container_id: &str) -> Result<(), PortmapError> {
        match self {
            Mapper::Iptables(mut m) => m.unforward(network, container_id)?,
            Mapper::Nftables(mut m) => m.unforward(network, container_id)?,
        }
        Ok(())
    }

    fn check(
        &mut self,
        conf: &PortMapConf,
        container_id: &str,
        ips: &ContainerIps,
    ) -> Result<(), PortmapError> {
        match self {
            Mapper::Iptables(m) => m.check(conf, container_id, ips)?,
            Mapper::Nftables(m) => m.check(conf, container_id, ips)?,
        }
        Ok(())
    }

    fn gc(self, network: &str, valid: &BTreeSet<String>) -> Result<(), PortmapError> {
        match self {
            Mapper::Iptables(mut m) => m.gc(network, valid)?,
            Mapper::Nftables(mut m) => m.gc(network, valid)?,
        }
        Ok(())
    }
}

/// The previous result in the current layout, if the configuration has
/// one.
fn prev_result(args: &CmdArgs) -> Result<Option<(AnyResult, v100::Result)>, PortmapError> {
    let Some(prev) = args.conf.prev_result()? else {
        return Ok(None);
    };
    let current = v100::Result::try_from(prev.clone()).map_err(PortmapError::PrevResult)?;
    Ok(Some((prev, current)))
}

/// After the rules are in place, UDP conntrack entries that still point
/// to another container are removed. Failures are logged only: the rules
/// are right, and the entries expire on their own.
fn flush_udp_conntrack(conf: &PortMapConf, family: IpFamily) {
    let ports: BTreeSet<u16> = conf
        .mappings
        .iter()
        .filter(|m| m.protocol == Protocol::Udp)
        .map(|m| m.host_port)
        .collect();
    for port in ports {
        match conntrack::delete_udp_entries(family, port) {
            Ok(0) => {}
            Ok(n) => log::debug!("deleted {n} {family} UDP conntrack entries for port {port}"),
            Err(e) => log::warn!(
                "failed to delete stale {family} UDP conntrack entries for port {port}: {e}"
            ),
        }
    }
}

impl Plugin for PortmapPlugin {
    type Error = PortmapError;

    fn about(&self) -> String {
        about_string("portmap", env!("CARGO_PKG_VERSION"))
    }

    fn add(&self, args: &CmdArgs) -> Result<AnyResult, PortmapError> {
        let conf = PortMapConf::from_plugin_conf(&args.conf)?;
        let (prev, current) = prev_result(args)?.ok_or(PortmapError::NotChained)?;
        if conf.mappings.is_empty() {
            return Ok(prev);
        }
        let ips = ContainerIps::from_result(&current, &args.ifname);
        if ips.is_empty() {
            log::debug!("no container address in prevResult; nothing to publish");
            return Ok(prev);
        }
        Mapper::open(conf.backend)?.forward(&conf, &args.container_id, &ips)?;
        for (family, _) in ips.iter() {
            flush_udp_conntrack(&conf, family);
        }
        if conf.snat {
            if let Some(IpAddr::V4(container)) = ips.v4.map(|n| n.ip()) {
                // 127/8 may then cross to the container's interface.
                localnet::enable_route_localnet(container)?;
            }
        }
        Ok(prev)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), PortmapError> {
        let conf = PortMapConf::from_plugin_conf(&args.conf)?;
        if conf.mappings.is_empty() {
            return Ok(());
        }
        // The addresses are not needed: rules are found by container ID
        // (and network), never by address.
        Mapper::open(conf.backend)?.unforward(&conf.network, &args.container_id)?;
        log::info!("removed the port mappings of this container, if any");
        Ok(())
    }

    fn check(&self, args: &CmdArgs) -> Result<(), PortmapError> {
        let conf = PortMapConf::from_plugin_conf(&args.conf)?;
        let (_, current) = prev_result(args)?.ok_or(PortmapError::PrevResultMissing)?;
        if conf.mappings.is_empty() {
            return Ok(());
        }
        let ips = ContainerIps::from_result(&current, &args.ifname);
        if ips.is_empty() {
            return Ok(());
        }
        Mapper::open(conf.backend)?.check(&conf, &args.container_id, &ips)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), PortmapError> {
        let conf = PortMapConf::from_plugin_conf(&args.conf)?;
        let valid: BTreeSet<String> = args
            .conf
            .valid_attachments
            .iter()
            .map(|a| a.container_id.clone())
            .collect();
        Mapper::open(conf.backend)?.gc(&conf.network, &valid)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), PortmapError> {
        let conf = PortMapConf::from_plugin_conf(&args.conf)?;
        let unavailable = |backend: &str, reason: String| {
            PortmapError::Unavailable(format!("{backend} backend is not usable: {reason}"))
        };
        let iptables = || iptables::probe_host().map_err(|e| e.to_string());
        let nftables = || {
            NftMapper::open()
                .and_then(|mut m| m.probe())
                .map_err(|e| e.to_string())
        };
        match conf.backend {
            BackendChoice::Configured(BackendKind::Iptables) => {
                iptables().map_err(|reason| unavailable("iptables", reason))
            }
            BackendChoice::Configured(BackendKind::Nftables) => {
                nftables().map_err(|reason| unavailable("nftables", reason))
            }
            BackendChoice::Auto => match iptables() {
                Ok(()) => Ok(()),
                Err(iptables_reason) => nftables().map_err(|nftables_reason| {
                    PortmapError::Unavailable(format!(
                        "neither iptables nor nftables is usable: (iptables) {iptables_reason}, (nftables) {nftables_reason}"
                    ))
                }),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libcni::lock::LockError;
    use std::path::PathBuf;
    use std::time::Duration;

    #[test]
    fn error_codes() {
        let code = |e: PortmapError| e.to_cni_error().code.as_u32();
        assert_eq!(code(ConfigError::MarkBitRange.into()), 7);
        assert_eq!(code(PortmapError::NotChained), 7);
        assert_eq!(code(PortmapError::PrevResultMissing), 7);
        assert_eq!(
            code(PortmapError::Iptables(IptablesError::Lock(
                LockError::Timeout {
                    path: PathBuf::from("/run/cni-portmap.lock"),
                    holder: "another portmap",
                    waited: Duration::from_secs(30),
                }
            ))),
            11
        );
        assert_eq!(
            code(PortmapError::Iptables(IptablesError::Check("x".into()))),
            999
        );
        // Neither family usable: a lock on either is worth a retry;
        // otherwise the IPv4 failure decides.
        let locked = || {
            Box::new(IptablesError::Lock(LockError::Timeout {
                path: PathBuf::from("/run/xtables.lock"),
                holder: "another iptables",
                waited: Duration::from_secs(30),
            }))
        };
        let refused = || Box::new(IptablesError::Check("refused".into()));
        let invalid = || {
            Box::new(IptablesError::InvalidCondition {
                key: "conditionsV4",
                reason: "x".into(),
            })
        };
        let neither = |v4, v6| PortmapError::Iptables(IptablesError::NeitherUsable { v4, v6 });
        assert_eq!(code(neither(refused(), locked())), 11);
        assert_eq!(code(neither(locked(), refused())), 11);
        assert_eq!(code(neither(refused(), refused())), 999);
        assert_eq!(code(neither(invalid(), refused())), 7);
        assert_eq!(code(PortmapError::Unavailable("gone".into())), 50);
        assert_eq!(
            code(PortmapError::Nftables(NftError::MissingRules("hostports"))),
            999
        );
        let e = PortmapError::from(NftError::MissingRules("hostports"));
        assert_eq!(
            e.to_string(),
            "missing hostport rules in \"hostports\" chain"
        );
    }
}

// Unit tests run without root in namespaces of their own (libcni::test_userns).
#[cfg(test)]
libcni::unit_tests_without_root!();
