//! The steps that macvlan, ipvlan and vlan share: each puts one
//! sub-interface of a host link into the container and leaves addresses to
//! an IPAM plugin, so opening `CNI_NETNS`, the IPAM calls (ADD's lease,
//! DEL, GC, STATUS) and DEL itself are the same in all three, an IPAM
//! failure is reported the same way, and CHECK starts and ends alike (the
//! prevResult's interface in this sandbox, the link read back as the
//! plugin's kind; its addresses and routes), and ADD's steps once the link
//! exists are one value that undoes them ([`NewSubLink`]). What differs
//! (config keys, the master lookup, the link kind's mode or id, where the
//! addresses come from, the order of each plugin's own CHECK steps) stays
//! in the plugins.

use crate::error::{CniError, ErrorCode, ToCniError};
use crate::iface::{
    check_interface_ips, check_routes, configure_iface, sandbox_interface, Announce, IfaceError,
};
use crate::invoke::{Delegator, Exec, InvokeError};
use crate::netlink::sublink::{delete_in_container, DeleteError, SubLinkInfo, SubLinkKind};
use crate::netlink::{LinkInfo, NetlinkError, RouteSocket};
use crate::netns::{NetNs, NetNsError};
use crate::skel::CmdArgs;
use crate::types::{v100, Dns};
use crate::version::SpecVersion;

/// `CNI_NETNS` could not be opened for ADD or CHECK (DEL has its own, as
/// a namespace gone is success there).
#[derive(Debug, thiserror::Error)]
#[error("failed to open netns {path:?}: {source}")]
pub struct ContainerNetNsError {
    pub path: String,
    #[source]
    pub source: NetNsError,
}

impl ToCniError for ContainerNetNsError {
    fn to_cni_error(&self) -> CniError {
        // Gone (3) or not a namespace (4): the code netns gives every plugin.
        CniError::new(self.source.error_code(), self.to_string())
    }
}

/// Open the container namespace, with the error that names it.
pub fn open_container_netns(path: &str) -> Result<NetNs, ContainerNetNsError> {
    NetNs::open(path).map_err(|source| ContainerNetNsError {
        path: path.to_string(),
        source,
    })
}

/// The IPAM plugin failed (or printed a result we cannot read) for one
/// verb; `action` says which, in the words of the plugin's messages.
#[derive(Debug, thiserror::Error)]
#[error("{action} {plugin:?}: {source}")]
pub struct IpamCallError {
    pub action: &'static str,
    pub plugin: String,
    #[source]
    pub source: InvokeError,
}

impl IpamCallError {
    pub fn new(action: &'static str, plugin: &str, source: InvokeError) -> IpamCallError {
        IpamCallError {
            action,
            plugin: plugin.to_string(),
            source,
        }
    }
}

impl ToCniError for IpamCallError {
    fn to_cni_error(&self) -> CniError {
        // The delegate's own error object, code and all, when it printed
        // one: the runtime should see what the IPAM plugin said.
        match self.source.plugin_error() {
            Some(e) => e.clone(),
            None => CniError::new(self.source.to_cni_error().code, self.to_string()),
        }
    }
}

/// The IPAM plugin of the configuration; `None` for layer 2 (no `ipam` or
/// an empty `type`).
pub fn ipam_type(args: &CmdArgs) -> Option<&str> {
    args.conf
        .ipam
        .as_ref()
        .map(|ipam| ipam.ipam_type.as_str())
        .filter(|t| !t.is_empty())
}

/// ADD's IPAM step: the lease as a 1.0 result, which the plugin builds its
/// own on. `action` names the call in the error as each plugin words it
/// (vlan keeps the reference's "failed to execute IPAM delegate").
pub fn ipam_add<E: Exec>(
    args: &CmdArgs,
    ipam: &Delegator<E>,
    plugin: &str,
    action: &'static str,
) -> Result<v100::Result, IpamCallError> {
    let allocated = ipam
        .add(plugin, args.conf.bytes())
        .map_err(|source| IpamCallError::new(action, plugin, source))?;
    v100::Result::try_from(allocated).map_err(|e| {
        IpamCallError::new(
            "cannot convert the result of",
            plugin,
            InvokeError::Result(e),
        )
    })
}

/// ADD once the sub-link is in the container under `CNI_IFNAME`: the
/// steps after it (the IPAM lease, addresses and routes, the result), and
/// [`undo`](NewSubLink::undo) for all of them when a later step fails.
pub struct NewSubLink<'a, E: Exec> {
    args: &'a CmdArgs,
    ipam: &'a Delegator<E>,
    netns: &'a NetNs,
    container: RouteSocket,
    link: LinkInfo,
    /// The IPAM plugin ADD called: undo releases what it reserved, even if
    /// the call failed half-way.
    leased_from: Option<String>,
}

impl<'a, E: Exec> NewSubLink<'a, E> {
    pub fn new(
        args: &'a CmdArgs,
        ipam: &'a Delegator<E>,
        netns: &'a NetNs,
        container: RouteSocket,
        link: LinkInfo,
    ) -> NewSubLink<'a, E> {
        NewSubLink {
            args,
            ipam,
            netns,
            container,
            link,
            leased_from: None,
        }
    }

    /// IPAM ADD with `plugin` ([`ipam_add`], `action` as there).
    pub fn lease(
        &mut self,
        plugin: &str,
        action: &'static str,
    ) -> Result<v100::Result, IpamCallError> {
        self.leased_from = Some(plugin.to_string());
        ipam_add(self.args, self.ipam, plugin, action)
    }

    /// The result for `addresses` (IPAM's lease or a chained prevResult):
    /// the link as interface 0 with every address on it, configured in the
    /// container; then the configuration's DNS replaces the addresses'
    /// when it says anything (the reference replaces it even with nothing).
    pub fn configure(
        &mut self,
        addresses: v100::Result,
        announce: Announce,
        dns: &Dns,
    ) -> Result<v100::Result, IfaceError> {
        let mut result = self.layer2_result(&addresses.dns);
        result.ips = addresses
            .ips
            .into_iter()
            .map(|ip| v100::IpConfig {
                interface: Some(0),
                ..ip
            })
            .collect();
        result.routes = addresses.routes;
        configure_iface(
            self.netns,
            &mut self.container,
            &self.args.ifname,
            &result,
            announce,
        )?;
        if !dns.is_empty() {
            result.dns = dns.clone();
        }
        Ok(result)
    }

    /// Layer 2 only: the link set up, and a result with just the interface.
    pub fn configure_layer2(&mut self, dns: &Dns) -> Result<v100::Result, NetlinkError> {
        let ifname = &self.args.ifname;
        self.container
            .set_link_up(self.link.index)
            .map_err(|e| e.context(format!("failed to set {ifname:?} up")))?;
        log::info!("{ifname} is up without addresses (no IPAM)");
        Ok(self.layer2_result(dns))
    }

    fn layer2_result(&self, dns: &Dns) -> v100::Result {
        let mut result = v100::Result::new();
        result.interfaces = vec![v100::Interface {
            name: self.args.ifname.clone(),
            mac: self.link.mac_string(),
            // `interfaces[].mtu` is new in spec 1.1.0.
            mtu: if self.args.version() >= SpecVersion::V1_1_0 {
                self.link.mtu
            } else {
                0
            },
            sandbox: self.args.netns.clone(),
            ..v100::Interface::default()
        }];
        result.dns = dns.clone();
        result
    }

    /// Deletes the link and releases the lease; failures are logged, the
    /// error that caused the undo is what ADD reports.
    pub fn undo(&mut self) {
        if let Err(e) = self.container.delete_link(self.link.index) {
            if !e.is_not_found() {
                log::warn!("rollback: delete {}: {e}", self.args.ifname);
            }
        }
        if let Some(plugin) = &self.leased_from {
            if let Err(e) = self.ipam.del(plugin, self.args.conf.bytes()) {
                log::warn!("rollback: IPAM DEL with {plugin}: {e}");
            }
        }
    }
}

/// DEL, best effort: the container interface goes (a namespace or link
/// already gone is success), then the IPAM plugin releases the lease. Each
/// runs whatever the other did; the failures come back in order for the
/// plugin to combine into its own error. No plugin key is read beyond
/// `ipam.type`, so a configuration ADD refused can still be deleted.
/// Without `CNI_NETNS` (containerd's second DEL) only IPAM DEL runs.
pub fn del<E, Err>(args: &CmdArgs, ipam: &Delegator<E>) -> Vec<Err>
where
    E: Exec,
    Err: From<DeleteError> + From<IpamCallError>,
{
    let mut errors = Vec::new();
    if !args.netns.is_empty() {
        // Before the lease goes, so the address is not handed out again
        // while this link still answers for it.
        match delete_in_container(&args.netns, &args.ifname) {
            Ok(true) => log::info!("deleted {}", args.ifname),
            Ok(false) => log::debug!("{} was already gone", args.ifname),
            Err(e) => errors.push(Err::from(e)),
        }
    }
    if let Some(plugin) = ipam_type(args) {
        if let Err(source) = ipam.del(plugin, args.conf.bytes()) {
            errors.push(Err::from(IpamCallError::new(
                "IPAM DEL with",
                plugin,
                source,
            )));
        }
    }
    errors
}

/// GC: the plugins keep no state of their own, so only the IPAM plugin
/// has leases to collect; nothing to do without one.
pub fn ipam_gc<E: Exec>(args: &CmdArgs, ipam: &Delegator<E>) -> Result<(), IpamCallError> {
    match ipam_type(args) {
        Some(plugin) => ipam
            .gc(plugin, args.conf.bytes())
            .map_err(|source| IpamCallError::new("IPAM GC with", plugin, source)),
        None => Ok(()),
    }
}

/// STATUS: the plugins can always create links, so readiness is the IPAM
/// plugin's; without one this says ready (a plugin that requires IPAM
/// checks for it first).
pub fn ipam_status<E: Exec>(args: &CmdArgs, ipam: &Delegator<E>) -> Result<(), IpamCallError> {
    match ipam_type(args) {
        Some(plugin) => ipam
            .status(plugin, args.conf.bytes())
            .map_err(|source| IpamCallError::new("IPAM STATUS with", plugin, source)),
        None => Ok(()),
    }
}

/// What CHECK finds missing or different before the plugin's own checks.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("Required prevResult missing")]
    PrevResultMissing,
    #[error("Sandbox in prevResult {found} doesn't match configured netns: {expected}")]
    SandboxMismatch { found: String, expected: String },
    #[error("Container interface {0} not found")]
    LinkMissing(String),
    #[error("Container interface {ifname} not of type {wanted} (it is {kind})")]
    WrongKind {
        ifname: String,
        wanted: &'static str,
        kind: String,
    },
}

impl ToCniError for CheckError {
    fn to_cni_error(&self) -> CniError {
        // The spec has no code for "not as the prevResult says"; the
        // message says what differs.
        match self {
            CheckError::PrevResultMissing
            | CheckError::SandboxMismatch { .. }
            | CheckError::LinkMissing(_)
            | CheckError::WrongKind { .. } => CniError::new(ErrorCode::Internal, self.to_string()),
        }
    }
}

/// The prevResult's `CNI_IFNAME` in this sandbox: the interface ADD
/// reported, whose MAC the link must still have.
pub fn expected_interface<'r>(
    prev: &'r v100::Result,
    args: &CmdArgs,
) -> Result<&'r v100::Interface, CheckError> {
    match sandbox_interface(prev, &args.ifname, &args.netns) {
        Some((_, expected)) => Ok(expected),
        None => Err(CheckError::SandboxMismatch {
            found: prev
                .interfaces
                .iter()
                .find(|i| i.name == args.ifname)
                .map_or_else(|| "<none>".to_string(), |i| i.sandbox.clone()),
            expected: args.netns.clone(),
        }),
    }
}

/// `ifname` read back in the container, with what `pick` takes from its
/// kind (the mode or the VLAN id); a link of another kind is named
/// `wanted` in the error.
pub fn read_back<T, Err>(
    container: &mut RouteSocket,
    ifname: &str,
    wanted: &'static str,
    pick: impl FnOnce(&SubLinkKind) -> Option<T>,
) -> Result<(SubLinkInfo, T), Err>
where
    Err: From<NetlinkError> + From<CheckError>,
{
    let found = container
        .sublink(ifname)?
        .ok_or_else(|| CheckError::LinkMissing(ifname.to_string()))?;
    match found.kind.as_ref().and_then(pick) {
        Some(picked) => Ok((found, picked)),
        None => Err(CheckError::WrongKind {
            ifname: ifname.to_string(),
            wanted,
            kind: found.link.kind.clone().unwrap_or_else(|| "none".into()),
        }
        .into()),
    }
}

/// CHECK's last step in all three: the prevResult's addresses on the link
/// and its routes in the container.
pub fn check_addresses_and_routes(
    container: &mut RouteSocket,
    found: &SubLinkInfo,
    prev: &v100::Result,
) -> Result<(), IfaceError> {
    check_interface_ips(container, &found.link, prev)?;
    check_routes(container, &prev.routes)
}
