//! The steps that macvlan, ipvlan and vlan share: each puts one
//! sub-interface of a host link into the container and leaves addresses to
//! an IPAM plugin, so opening `CNI_NETNS`, the IPAM calls (ADD's lease,
//! DEL, GC, STATUS) and DEL itself are the same in all three, an IPAM
//! failure is reported the same way, and CHECK starts and ends alike (the
//! prevResult's interface in this sandbox, the link read back as the
//! plugin's kind; its addresses and routes). What differs (config keys,
//! the master lookup, the link kind's mode or id, the order of each
//! plugin's own CHECK steps) stays in the plugins.

use crate::error::{CniError, ErrorCode, ToCniError};
use crate::iface::{check_interface_ips, check_routes, sandbox_interface, IfaceError};
use crate::invoke::{Delegator, Exec, InvokeError};
use crate::netlink::sublink::{delete_in_container, DeleteError, SubLinkInfo, SubLinkKind};
use crate::netlink::{NetlinkError, RouteSocket};
use crate::netns::{NetNs, NetNsError};
use crate::skel::CmdArgs;
use crate::types::v100;

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
            Ok(true) => {}
            Ok(false) => log::debug!("{:?} was already gone", args.ifname),
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
