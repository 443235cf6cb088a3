//! CHECK: verifies, from the previous result, that the container end of
//! the pair is still as ADD left it: a veth in the sandbox with the MAC of
//! the result, holding every address of the result, with a route to each
//! address's subnet and every route of the result. As in the reference,
//! the IPAM plugin is checked first and the host end is not checked.
//!
//! Addresses, routes and MACs are compared by [`libcni::iface`]'s CHECK
//! helpers; the messages of the container interface's checks are the
//! reference's.

use libcni::iface;
use libcni::invoke::{Delegator, Exec};
use libcni::netlink::sublink_plugin::{self, open_container_netns, IpamCallError, StepError};
use libcni::netlink::RouteSocket;
use libcni::skel::CmdArgs;
use libcni::types::v100;

use crate::config::PtpConf;
use crate::error::PtpError;

const VETH_KIND: &str = "veth";

fn failed(message: String) -> PtpError {
    PtpError::Check(message)
}

pub fn check<E: Exec>(args: &CmdArgs, ipam: &Delegator<E>) -> Result<(), PtpError> {
    let conf = PtpConf::from_conf(&args.conf)?;
    let netns = open_container_netns(&args.netns)?;
    ipam.check(&conf.ipam_type, args.conf.bytes())
        .map_err(|source| IpamCallError::new("IPAM CHECK with", &conf.ipam_type, source))?;
    let prev = args
        .conf
        .prev_result()?
        .ok_or(PtpError::PrevResultMissing)?;
    let prev = v100::Result::try_from(prev).map_err(StepError::PrevResult)?;

    let expected = sublink_plugin::expected_interface(&prev, args)?;
    let mut container = RouteSocket::open_in(&netns)?;
    let link = container.link_by_name(&expected.name)?.ok_or_else(|| {
        failed(format!(
            "ptp: Container Interface name in prevResult: {} not found",
            expected.name
        ))
    })?;
    if link.kind.as_deref() != Some(VETH_KIND) {
        return Err(failed(format!(
            "Error: Container interface {} not of type veth/p2p",
            link.name
        )));
    }
    let found = link.mac_string();
    if !expected.mac.is_empty() && !expected.mac.eq_ignore_ascii_case(&found) {
        return Err(failed(format!(
            "ptp: Interface {} Mac {} doesn't match container Mac: {}",
            expected.name, expected.mac, found
        )));
    }
    // Every IP of the result, as the reference checks them: ptp's own
    // results put all on the container interface.
    let ips: Vec<&v100::IpConfig> = prev.ips.iter().collect();
    iface::check_addresses(&mut container, &link, &ips)?;
    Ok(iface::check_routes(&mut container, &prev.routes)?)
}
