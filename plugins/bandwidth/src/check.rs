//! CHECK: the shaping ADD set up is still there.
//!
//! As the reference: the previous result is required, the host veth is
//! found again the same way, and an entry with nothing to shape passes.
//! Then the tbf of each shaped direction (on the host veth; on the ifb,
//! which must exist) must have the configured rate, limit and buffer, in
//! the reference's words. Stricter than the reference, which stops
//! looking at the first qdisc that is no tbf and never looks at filters:
//! a tbf missing from its place fails (`Failed to find qdisc`), and so do
//! a changed redirect to the ifb and, with subnets, a changed HTB root or
//! subnet filters.

use libcni::netlink::sublink_plugin::open_container_netns;
use libcni::netlink::tc::{PschedClock, Tbf, U32Filter, INGRESS_HANDLE, TC_H_ROOT};
use libcni::netlink::RouteSocket;
use libcni::nftables::AddressField;
use libcni::skel::CmdArgs;
use libcni::types::AnyResult;
use libcni::SpecVersion;

use crate::config::{self, ShapedTraffic};
use crate::error::BandwidthError;
use crate::host;
use crate::shaping::{self, ROOT_HANDLE};
use crate::tbf;

pub fn check(args: &CmdArgs) -> Result<(), BandwidthError> {
    let bandwidth = config::parse(args)?;
    let prev = args
        .conf
        .prev_result()?
        .ok_or(BandwidthError::NotChainedCheck)?;
    let result = match prev.convert_to(SpecVersion::CURRENT) {
        Ok(AnyResult::V1(result)) => result,
        Ok(other) => {
            return Err(BandwidthError::PrevResult(
                libcni::types::ResultError::UnsupportedVersion(other.version().to_string()),
            ))
        }
        Err(e) => return Err(BandwidthError::PrevResult(e)),
    };
    let netns = open_container_netns(&args.netns)?;
    let mut socket = RouteSocket::open_current()?;
    let host_veth = host::host_veth(&mut socket, &netns, &args.ifname, &result.interfaces)?;
    let Some(bandwidth) = bandwidth.filter(|b| !b.is_zero()) else {
        return Ok(());
    };
    let clock = PschedClock::read().map_err(BandwidthError::Clock)?;

    if let Some(limit) = bandwidth.ingress {
        check_shaper(
            &mut socket,
            host_veth.index,
            &host_veth.name,
            tbf::tbf(limit, clock),
            &bandwidth.traffic,
            AddressField::Source,
        )?;
    }
    if let Some(limit) = bandwidth.egress {
        let name = config::ifb_name(&args.conf.name, &args.container_id);
        let ifb = socket
            .link_by_name(&name)?
            .ok_or_else(|| BandwidthError::IfbMissing("Link not found".to_string()))?;
        check_shaper(
            &mut socket,
            ifb.index,
            &name,
            tbf::tbf(limit, clock),
            &ShapedTraffic::All,
            AddressField::Destination,
        )?;
        let expected = shaping::redirect_filters(host_veth.index, ifb.index, &bandwidth.traffic);
        let found = socket.list_u32_filters(host_veth.index, INGRESS_HANDLE)?;
        compare_filters("redirect filters", &host_veth.name, expected, found)?;
    }
    Ok(())
}

/// The tbf that shapes a device's outgoing traffic, and with subnets the
/// HTB root and filters that pick what it shapes.
fn check_shaper(
    socket: &mut RouteSocket,
    ifindex: u32,
    device: &str,
    expected: Tbf,
    traffic: &ShapedTraffic,
    field: AddressField,
) -> Result<(), BandwidthError> {
    let qdiscs = socket.list_qdiscs(ifindex)?;
    let parent = shaping::tbf_parent(traffic);
    let found = qdiscs
        .iter()
        .find(|q| q.parent == parent && q.kind == "tbf")
        .and_then(|q| q.tbf)
        .ok_or(BandwidthError::QdiscMissing)?;
    if found.rate != expected.rate {
        return Err(BandwidthError::RateMismatch);
    }
    if found.limit != expected.limit {
        return Err(BandwidthError::LimitMismatch);
    }
    if found.buffer != expected.buffer {
        return Err(BandwidthError::BufferMismatch);
    }
    let Some((subnets, class)) = shaping::subnet_filters(traffic) else {
        return Ok(());
    };
    let default_class = if class == shaping::UNSHAPED_CLASS {
        shaping::SHAPED_CLASS
    } else {
        shaping::UNSHAPED_CLASS
    };
    let root = qdiscs.iter().find(|q| q.parent == TC_H_ROOT);
    let root_default = root.and_then(|q| q.htb).map(|h| u32::from(h.default_class));
    if root_default != Some(default_class & 0xffff) {
        return Err(BandwidthError::LayoutMismatch {
            what: "root qdisc",
            device: device.to_string(),
            expected: format!(
                "htb {} default {}",
                shaping::name(ROOT_HANDLE),
                shaping::name(default_class)
            ),
            found: root.map_or("none".to_string(), |q| {
                format!("{} {}", q.kind, shaping::name(q.handle))
            }),
        });
    }
    let expected = shaping::classifying_filters(ifindex, ROOT_HANDLE, subnets, field, class, None);
    let found = socket.list_u32_filters(ifindex, ROOT_HANDLE)?;
    compare_filters("subnet filters", device, expected, found)
}

fn compare_filters(
    what: &'static str,
    device: &str,
    expected: Vec<U32Filter>,
    found: Vec<U32Filter>,
) -> Result<(), BandwidthError> {
    let expected = shaping::sorted(expected);
    let found = shaping::sorted(found);
    if expected == found {
        return Ok(());
    }
    Err(BandwidthError::LayoutMismatch {
        what,
        device: device.to_string(),
        expected: describe(&expected),
        found: describe(&found),
    })
}

/// `prio 1 proto 0x0800 [16: 0a000000/ff000000] -> 1:1 redirect #5`, one
/// per filter.
fn describe(filters: &[U32Filter]) -> String {
    if filters.is_empty() {
        return "none".to_string();
    }
    let parts: Vec<String> = filters
        .iter()
        .map(|f| {
            let keys: Vec<String> = f
                .keys
                .iter()
                .map(|k| format!("{}: {:08x}/{:08x}", k.offset, k.value, k.mask))
                .collect();
            let redirect = f
                .redirect_to
                .map(|i| format!(" redirect to link #{i}"))
                .unwrap_or_default();
            format!(
                "prio {} proto {:#06x} [{}] -> {}{redirect}",
                f.priority,
                f.protocol,
                keys.join(", "),
                shaping::name(f.classid)
            )
        })
        .collect();
    parts.join("; ")
}
