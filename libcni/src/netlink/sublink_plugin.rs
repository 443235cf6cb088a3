//! The steps that macvlan, ipvlan and vlan share: each puts one
//! sub-interface of a host link into the container and leaves addresses to
//! an IPAM plugin, so opening `CNI_NETNS`, finding the master and making
//! the link on its side ([`MasterSide`]), the IPAM calls (ADD's lease,
//! DEL, GC, STATUS) and DEL itself are the same in all three, an IPAM
//! failure is reported the same way, and CHECK starts and ends alike (the
//! prevResult's interface in this sandbox, the link read back as the
//! plugin's kind; its addresses and routes), and ADD's steps once the link
//! exists are one value that undoes them ([`NewSubLink`]). What differs
//! (config keys, which master, the link kind's mode or id, where the
//! addresses come from, the order of each plugin's own CHECK steps) stays
//! in the plugins. tap and dummy, which make their link in the container,
//! use the IPAM, CHECK and DEL steps too. The errors of all these steps
//! have their spec codes in one place, [`StepError`]; the keys the plugins
//! read alike are in [`conf`].

pub mod conf;

use std::os::fd::AsFd;

use crate::error::{CniError, ErrorCode, ToCniError};
use crate::iface::{
    check_interface_ips, check_routes, configure_iface, sandbox_interface, Announce, IfaceError,
};
use crate::invoke::{Delegator, Exec, InvokeError};
use crate::netlink::sublink::{
    create_in_container, default_route_link, delete_in_container, ContainerSubLink, Creator,
    DeleteError, SubLinkError, SubLinkInfo, SubLinkKind,
};
use crate::netlink::{LinkInfo, NetlinkError, RouteSocket};
use crate::netns::{NetNs, NetNsError};
use crate::plugin_conf::ConfError;
use crate::skel::CmdArgs;
use crate::types::{v100, Dns, ResultError};
use crate::version::SpecVersion;

/// The errors of the steps this module takes for a plugin, and of the
/// checks every plugin built on them makes, each with its spec code in one
/// place: a plugin's error enum holds them in one variant,
/// `#[error(transparent)] Step(#[from] Box<StepError>)` (boxed: the plugin's
/// `Result`s stay small), mapped by `e.to_cni_error()`, and
/// [`sublink_step_errors!`](crate::sublink_step_errors) lets `?` take a
/// `StepError` and each error it wraps there.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error(transparent)]
    NetNs(#[from] ContainerNetNsError),
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
    #[error(transparent)]
    Ipam(#[from] IpamCallError),
    #[error("IPAM plugin returned missing IP config")]
    IpamNoIps,
    /// The container interface's addresses and routes (ADD), and CHECK's
    /// findings about them and the MAC.
    #[error(transparent)]
    Iface(#[from] IfaceError),
    #[error("failed to convert prevResult: {0}")]
    PrevResult(#[source] ResultError),
    #[error(transparent)]
    Check(#[from] CheckError),
    #[error(transparent)]
    Delete(#[from] DeleteError),
}

impl ToCniError for StepError {
    fn to_cni_error(&self) -> CniError {
        match self {
            // Each keeps the code its own type gives it.
            StepError::NetNs(e) => e.to_cni_error(),
            StepError::Netlink(e) => e.to_cni_error(),
            StepError::Ipam(e) => e.to_cni_error(),
            StepError::Iface(e) => e.to_cni_error(),
            StepError::Check(e) => e.to_cni_error(),
            StepError::Delete(e) => e.to_cni_error(),
            StepError::PrevResult(_) => CniError::new(ErrorCode::Decode, self.to_string()),
            // An IPAM plugin in a state ADD cannot work with: 999, as the
            // reference reports it.
            StepError::IpamNoIps => CniError::new(ErrorCode::Internal, self.to_string()),
        }
    }
}

/// `From` into the plugin error enum `$plugin` for [`StepError`] and
/// every error type it wraps, through the enum's `From<Box<StepError>>`,
/// so `?` takes them there: `libcni::sublink_step_errors!(MacvlanError);`.
#[macro_export]
macro_rules! sublink_step_errors {
    ($plugin:ty) => {
        impl ::core::convert::From<$crate::netlink::sublink_plugin::StepError> for $plugin {
            fn from(e: $crate::netlink::sublink_plugin::StepError) -> Self {
                Self::from(::std::boxed::Box::new(e))
            }
        }
        $crate::sublink_step_errors!(@from $plugin;
            $crate::netlink::sublink_plugin::ContainerNetNsError,
            $crate::netlink::NetlinkError,
            $crate::netlink::sublink_plugin::IpamCallError,
            $crate::iface::IfaceError,
            $crate::netlink::sublink_plugin::CheckError,
            $crate::netlink::sublink::DeleteError
        );
    };
    (@from $plugin:ty; $($source:ty),+) => {
        $(
            impl ::core::convert::From<$source> for $plugin {
                fn from(e: $source) -> Self {
                    Self::from($crate::netlink::sublink_plugin::StepError::from(e))
                }
            }
        )+
    };
}

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
    conf::ipam_type(&args.conf)
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

/// IPAM DEL with `plugin`: DEL's, and ADD's rollback of the lease.
pub fn ipam_del<E: Exec>(
    args: &CmdArgs,
    ipam: &Delegator<E>,
    plugin: &str,
) -> Result<(), IpamCallError> {
    ipam.del(plugin, args.conf.bytes())
        .map_err(|source| IpamCallError::new("IPAM DEL with", plugin, source))
}

/// The master could not be found.
#[derive(Debug, thiserror::Error)]
pub enum MasterError {
    #[error("no default route interface found{}; set \"master\"", in_where(*.in_container))]
    NoDefaultRoute { in_container: bool },
    #[error("failed to lookup master {master:?}: no such link{}", in_where(*.in_container))]
    NotFound { master: String, in_container: bool },
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
}

/// Where [`MasterError`] looked, as its messages say it.
fn in_where(in_container: bool) -> &'static str {
    if in_container {
        " in the container"
    } else {
        ""
    }
}

impl ToCniError for MasterError {
    fn to_cni_error(&self) -> CniError {
        match self {
            // The configuration names a link the node does not have.
            MasterError::NoDefaultRoute { .. } | MasterError::NotFound { .. } => {
                CniError::new(ErrorCode::InvalidNetworkConfig, self.to_string())
            }
            MasterError::Netlink(e) => e.to_cni_error(),
        }
    }
}

/// The sockets ADD and CHECK need around the master: the container's, and
/// the host's unless the master is in the container (`linkInContainer`).
/// The master is looked up, and the sub-link made, on the master's side.
pub struct MasterSide {
    container: RouteSocket,
    host: Option<RouteSocket>,
}

impl MasterSide {
    pub fn open(netns: &NetNs, link_in_container: bool) -> Result<MasterSide, NetlinkError> {
        let container = RouteSocket::open_in(netns)?;
        let host = if link_in_container {
            None
        } else {
            Some(RouteSocket::open_current()?)
        };
        Ok(MasterSide { container, host })
    }

    /// The link `name`, else (`None`) the link of the default route.
    pub fn find_master(&mut self, name: Option<&str>) -> Result<LinkInfo, MasterError> {
        let in_container = self.host.is_none();
        let socket = self.host.as_mut().unwrap_or(&mut self.container);
        match name {
            Some(name) => socket
                .link_by_name(name)?
                .ok_or_else(|| MasterError::NotFound {
                    master: name.to_string(),
                    in_container,
                }),
            None => default_route_link(socket)?.ok_or(MasterError::NoDefaultRoute { in_container }),
        }
    }

    /// Makes the sub-link in the container under `CNI_IFNAME`
    /// ([`create_in_container`]), from the master's side.
    pub fn create(
        &mut self,
        netns: &NetNs,
        spec: &ContainerSubLink<'_>,
    ) -> Result<LinkInfo, SubLinkError> {
        let creator = match self.host.as_mut() {
            Some(socket) => Creator::Outside {
                socket,
                container_netns: netns.as_fd(),
            },
            None => Creator::Inside,
        };
        create_in_container(creator, &mut self.container, spec)
    }

    /// The container's socket, for what follows in the container.
    pub fn into_container(self) -> RouteSocket {
        self.container
    }
}

/// `link`, the container's `CNI_IFNAME`, as the result's interface.
pub fn container_interface(args: &CmdArgs, link: &LinkInfo) -> v100::Interface {
    v100::Interface {
        name: args.ifname.clone(),
        mac: link.mac_string(),
        // `interfaces[].mtu` is new in spec 1.1.0.
        mtu: if args.version() >= SpecVersion::V1_1_0 {
            link.mtu
        } else {
            0
        },
        sandbox: args.netns.clone(),
        ..v100::Interface::default()
    }
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
        result.interfaces = vec![container_interface(self.args, &self.link)];
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
        if let Err(e) = ipam_del(args, ipam, plugin) {
            errors.push(Err::from(e));
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
        // The spec has no code for "not as the prevResult says": 999, as
        // the reference, with a message that says what differs. Without a
        // prevResult there is nothing to compare: the configuration CHECK
        // was given is wrong (7), as in the suite's other plugins.
        match self {
            CheckError::PrevResultMissing => {
                CniError::new(ErrorCode::InvalidNetworkConfig, self.to_string())
            }
            CheckError::SandboxMismatch { .. }
            | CheckError::LinkMissing(_)
            | CheckError::WrongKind { .. } => CniError::new(ErrorCode::Internal, self.to_string()),
        }
    }
}

/// The prevResult in the 1.x layout, if the configuration has one.
pub fn prev_result<Err>(args: &CmdArgs) -> Result<Option<v100::Result>, Err>
where
    Err: From<StepError> + From<ConfError>,
{
    match args.conf.prev_result()? {
        Some(prev) => Ok(Some(
            v100::Result::try_from(prev).map_err(StepError::PrevResult)?,
        )),
        None => Ok(None),
    }
}

/// CHECK's start: IPAM CHECK with `plugin` (`None`: layer 2, nothing to
/// ask), then the prevResult, which CHECK requires.
pub fn check_start<E: Exec, Err>(
    args: &CmdArgs,
    ipam: &Delegator<E>,
    plugin: Option<&str>,
) -> Result<v100::Result, Err>
where
    Err: From<StepError> + From<ConfError>,
{
    if let Some(plugin) = plugin {
        ipam.check(plugin, args.conf.bytes()).map_err(|source| {
            StepError::from(IpamCallError::new("IPAM CHECK with", plugin, source))
        })?;
    }
    prev_result::<Err>(args)?.ok_or_else(|| StepError::from(CheckError::PrevResultMissing).into())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn reported(error: &impl ToCniError) -> (ErrorCode, String) {
        let e = error.to_cni_error();
        (e.code, e.msg)
    }

    #[test]
    fn step_errors_keep_their_messages_and_codes() {
        assert_eq!(
            reported(&StepError::IpamNoIps),
            (
                ErrorCode::Internal,
                "IPAM plugin returned missing IP config".into()
            )
        );
        assert_eq!(
            reported(&StepError::PrevResult(ResultError::NotAnObject)),
            (
                ErrorCode::Decode,
                "failed to convert prevResult: result is not a JSON object".into()
            )
        );
        assert_eq!(
            reported(&CheckError::PrevResultMissing),
            (
                ErrorCode::InvalidNetworkConfig,
                "Required prevResult missing".into()
            )
        );
        assert_eq!(
            reported(&CheckError::LinkMissing("net1".into())).0,
            ErrorCode::Internal
        );
        // A wrapped error keeps its own message and code.
        assert_eq!(
            reported(&StepError::from(CheckError::PrevResultMissing)),
            reported(&CheckError::PrevResultMissing)
        );
        let ipam = || IpamCallError::new("IPAM DEL with", "host-local", InvokeError::NoPaths);
        assert_eq!(reported(&StepError::from(ipam())), reported(&ipam()));
    }

    #[test]
    fn master_errors_say_where_they_looked() {
        let not_found = |in_container| MasterError::NotFound {
            master: "eth9".into(),
            in_container,
        };
        assert_eq!(
            reported(&not_found(true)),
            (
                ErrorCode::InvalidNetworkConfig,
                "failed to lookup master \"eth9\": no such link in the container".into()
            )
        );
        assert_eq!(
            not_found(false).to_string(),
            "failed to lookup master \"eth9\": no such link"
        );
        assert_eq!(
            reported(&MasterError::NoDefaultRoute {
                in_container: false
            }),
            (
                ErrorCode::InvalidNetworkConfig,
                "no default route interface found; set \"master\"".into()
            )
        );
    }
}
