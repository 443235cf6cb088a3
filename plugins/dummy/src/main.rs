//! `dummy`: gives a container a dummy interface (a link that goes
//! nowhere) named `CNI_IFNAME`, with addresses from IPAM. Useful as a
//! stable address holder inside a pod.
//!
//! - ADD: the dummy is created under its final name straight in the
//!   container (nothing crosses namespaces, so no temporary name; a link
//!   already called so is an error), IPAM ADD, then the addresses, the
//!   link up and the routes. The result is IPAM's (its routes and DNS
//!   kept) with the dummy as interface 0. Any failure after the link
//!   exists deletes it and releases the lease. A kernel without dummy
//!   links fails with code 50 naming the `dummy` module, before IPAM is
//!   asked for anything.
//! - DEL: the link goes (namespace or link gone: fine), and IPAM DEL runs
//!   whatever happened to the link.
//! - CHECK: IPAM CHECK, then the prevResult's interface is this sandbox's,
//!   the link is a dummy with the prevResult's MAC, up, with the
//!   prevResult's addresses and routes (the reference skips the routes).
//! - GC and STATUS: the IPAM plugin's.
//!
//! `ipam` is required by every verb that reads it (the reference's exact
//! message); the plugin has no keys of its own, and `dns` is not read.

use libcni::error::{CniError, ErrorCode, ErrorList, ToCniError};
use libcni::iface::{check_interface_ips, check_mac, check_routes, configure_iface, Announce};
use libcni::invoke::{Delegator, Exec, RawExec};
use libcni::netlink::standalone_link::{StandaloneKind, StandaloneLink, StandaloneLinkError};
use libcni::netlink::sublink_plugin::{self, CheckError, StepError};
use libcni::netlink::{LinkInfo, RouteSocket};
use libcni::netns::NetNs;
use libcni::plugin_conf::ConfError;
use libcni::skel::{self, CmdArgs, Plugin};
use libcni::types::{v100, AnyResult};

const KIND: StandaloneKind = StandaloneKind::Dummy;

#[derive(Debug, thiserror::Error)]
enum DummyError {
    #[error("dummy interface requires an IPAM configuration")]
    IpamMissing,
    #[error(transparent)]
    Conf(#[from] ConfError),
    #[error(transparent)]
    Create(#[from] StandaloneLinkError),
    #[error("dummy {0:?} is not in the container right after its creation")]
    Vanished(String),
    #[error("Interface {0} is down")]
    Down(String),
    /// What the shared steps report ([`StepError`]).
    #[error(transparent)]
    Step(#[from] Box<StepError>),
    #[error(transparent)]
    Several(ErrorList),
}

libcni::sublink_step_errors!(DummyError);

impl ToCniError for DummyError {
    fn to_cni_error(&self) -> CniError {
        match self {
            DummyError::IpamMissing => {
                CniError::new(ErrorCode::InvalidNetworkConfig, self.to_string())
            }
            DummyError::Conf(e) => e.to_cni_error(),
            DummyError::Create(e) => e.to_cni_error(),
            DummyError::Step(e) => e.to_cni_error(),
            // The first failure decides the code; the message lists all.
            DummyError::Several(list) => list.to_cni_error(),
            DummyError::Vanished(_) | DummyError::Down(_) => {
                CniError::new(ErrorCode::Internal, self.to_string())
            }
        }
    }
}

struct Dummy<E: Exec = RawExec> {
    ipam: Delegator<E>,
}

/// The IPAM plugin, which every verb but DEL insists on.
fn required_ipam(args: &CmdArgs) -> Result<&str, DummyError> {
    sublink_plugin::ipam_type(args).ok_or(DummyError::IpamMissing)
}

impl<E: Exec> Plugin for Dummy<E> {
    type Error = DummyError;

    fn about(&self) -> String {
        skel::about_string("dummy", env!("CARGO_PKG_VERSION"))
    }

    fn add(&self, args: &CmdArgs) -> Result<AnyResult, DummyError> {
        let plugin = required_ipam(args)?;
        let netns = sublink_plugin::open_container_netns(&args.netns)?;
        let mut container = RouteSocket::open_in(&netns)?;
        container.create_standalone_link(&StandaloneLink {
            name: &args.ifname,
            kind: KIND,
            mtu: None,
            mac: None,
        })?;
        log::info!("created dummy {} in the container", args.ifname);
        let mut attach = Attach {
            args,
            plugin,
            ipam: &self.ipam,
            netns: &netns,
            container,
            lease_taken: false,
        };
        attach
            .run()
            .inspect_err(|_| attach.undo())
            .map(AnyResult::V1)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), DummyError> {
        // No IPAM in the configuration: there is only the link to delete.
        DummyError::from_many(sublink_plugin::del(args, &self.ipam)).map_or(Ok(()), Err)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), DummyError> {
        let plugin = required_ipam(args)?;
        let netns = sublink_plugin::open_container_netns(&args.netns)?;
        let prev = sublink_plugin::check_start::<_, DummyError>(args, &self.ipam, Some(plugin))?;
        let expected = sublink_plugin::expected_interface(&prev, args)?;

        let mut container = RouteSocket::open_in(&netns)?;
        let link = container
            .link_by_name(&args.ifname)?
            .ok_or_else(|| CheckError::LinkMissing(args.ifname.clone()))?;
        if link.kind.as_deref() != Some(KIND.kind_name()) {
            return Err(CheckError::WrongKind {
                ifname: args.ifname.clone(),
                wanted: KIND.kind_name(),
                kind: link.kind.unwrap_or_else(|| "none".into()),
            }
            .into());
        }
        check_mac(expected, &link)?;
        if !link.up {
            return Err(DummyError::Down(args.ifname.clone()));
        }
        check_interface_ips(&mut container, &link, &prev)?;
        check_routes(&mut container, &prev.routes)?;
        Ok(())
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), DummyError> {
        Ok(sublink_plugin::ipam_gc(args, &self.ipam)?)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), DummyError> {
        // IPAM is required: STATUS says what is wrong, as ADD would.
        required_ipam(args)?;
        Ok(sublink_plugin::ipam_status(args, &self.ipam)?)
    }
}

impl DummyError {
    /// One error from many (DEL goes on after a failure); `None` when
    /// there were none.
    fn from_many(errors: Vec<DummyError>) -> Option<DummyError> {
        ErrorList::combine(errors, DummyError::Several)
    }
}

/// ADD once the dummy exists: everything it does is undone on failure.
struct Attach<'a, E: Exec> {
    args: &'a CmdArgs,
    plugin: &'a str,
    ipam: &'a Delegator<E>,
    netns: &'a NetNs,
    container: RouteSocket,
    /// IPAM ADD was called: DEL releases whatever it reserved.
    lease_taken: bool,
}

impl<E: Exec> Attach<'_, E> {
    fn run(&mut self) -> Result<v100::Result, DummyError> {
        let ifname = &self.args.ifname;
        let link: LinkInfo = self
            .container
            .link_by_name(ifname)?
            .ok_or_else(|| DummyError::Vanished(ifname.clone()))?;
        self.lease_taken = true;
        let allocated =
            sublink_plugin::ipam_add(self.args, self.ipam, self.plugin, "IPAM ADD with")?;
        if allocated.ips.is_empty() {
            return Err(StepError::IpamNoIps.into());
        }
        let mut result = allocated;
        result.interfaces = vec![sublink_plugin::container_interface(self.args, &link)];
        for ip in &mut result.ips {
            ip.interface = Some(0);
        }
        configure_iface(
            self.netns,
            &mut self.container,
            ifname,
            &result,
            Announce::default(),
        )?;
        Ok(result)
    }

    /// Deletes the link and releases the lease; failures are logged, the
    /// error that caused the undo is what ADD reports.
    fn undo(&mut self) {
        if let Err(e) = self.container.delete_link(self.args.ifname.as_str()) {
            if !e.is_not_found() {
                log::warn!("rollback: delete {}: {e}", self.args.ifname);
            }
        }
        if self.lease_taken {
            if let Err(e) = self.ipam.del(self.plugin, self.args.conf.bytes()) {
                log::warn!("rollback: IPAM DEL with {}: {e}", self.plugin);
            }
        }
    }
}

fn main() {
    skel::plugin_main(Dummy {
        ipam: Delegator::from_process_env(),
    })
}
