//! CHECK: what ADD made is still there, as the prevResult describes it.
//!
//! The configuration is checked as ADD checks it, the IPAM plugin checks
//! its lease, then: the prevResult names `CNI_IFNAME` in this sandbox; the
//! master exists; the container interface is a VLAN link with the
//! configured id, the prevResult's MAC and, when `mtu` is set, that MTU;
//! its addresses and routes are there ([`check_interface_ips`],
//! [`check_routes`]).

use libcni::iface::{check_interface_ips, check_mac, check_routes, sandbox_interface};
use libcni::invoke::{Delegator, Exec};
use libcni::netlink::sublink::SubLinkKind;
use libcni::netlink::sublink_plugin::IpamCallError;
use libcni::netlink::RouteSocket;
use libcni::skel::CmdArgs;
use libcni::types::v100;

use crate::add::find_master;
use crate::config::VlanConf;
use crate::error::{open_netns, VlanError};

pub fn check<E: Exec>(args: &CmdArgs, ipam: &Delegator<E>) -> Result<(), VlanError> {
    let conf = VlanConf::from_conf(&args.conf)?;
    let netns = open_netns(&args.netns)?;
    ipam.check(&conf.ipam_type, args.conf.bytes())
        .map_err(|source| IpamCallError::new("IPAM CHECK with", &conf.ipam_type, source))?;
    let prev = args
        .conf
        .prev_result()?
        .ok_or(VlanError::PrevResultMissing)?;
    let prev = v100::Result::try_from(prev).map_err(VlanError::PrevResult)?;
    let (_, expected) = sandbox_interface(&prev, &args.ifname, &args.netns).ok_or_else(|| {
        VlanError::SandboxMismatch {
            found: prev
                .interfaces
                .iter()
                .find(|i| i.name == args.ifname)
                .map_or_else(|| "<none>".to_string(), |i| i.sandbox.clone()),
            expected: args.netns.clone(),
        }
    })?;

    let mut container = RouteSocket::open_in(&netns)?;
    if conf.link_in_container {
        find_master(&conf, &mut container)?;
    } else {
        find_master(&conf, &mut RouteSocket::open_current()?)?;
    }
    let found = container
        .sublink(args.ifname.as_str())?
        .ok_or_else(|| VlanError::LinkMissing(args.ifname.clone()))?;
    let id = match found.kind {
        Some(SubLinkKind::Vlan { id }) => id,
        _ => {
            return Err(VlanError::NotVlan {
                ifname: args.ifname.clone(),
                kind: found.link.kind.clone().unwrap_or_else(|| "none".into()),
            })
        }
    };
    check_mac(expected, &found.link)?;
    if id != conf.vlan_id {
        return Err(VlanError::VlanIdMismatch {
            ifname: args.ifname.clone(),
            found: id,
            expected: conf.vlan_id,
        });
    }
    if conf.mtu != 0 && i64::from(found.link.mtu) != conf.mtu {
        return Err(VlanError::MtuMismatch {
            ifname: args.ifname.clone(),
            found: found.link.mtu,
            expected: conf.mtu,
        });
    }
    check_interface_ips(&mut container, &found.link, &prev)?;
    check_routes(&mut container, &prev.routes)?;
    Ok(())
}
