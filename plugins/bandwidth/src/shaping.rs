//! The traffic control layout of one attachment: what ADD builds, CHECK
//! expects and DEL (through the ifb) takes away. See the crate docs for
//! the picture; here the handles, priorities and classes.

use ipnetwork::IpNetwork;

use libcni::netlink::tc::{
    self, handle, Htb, HtbClass, PschedClock, QdiscOptions, Tbf, U32Filter, U32Key, ETH_P_ALL,
    ETH_P_IP, ETH_P_IPV6, INGRESS_HANDLE, TC_H_INGRESS, TC_H_ROOT,
};
use libcni::netlink::{NetlinkError, RouteSocket};
use libcni::nftables::AddressField;
use libcni::IpFamily;

use crate::config::ShapedTraffic;

/// The root qdisc of the host veth and of the ifb: `1:`.
pub const ROOT_HANDLE: u32 = handle(1, 0);
/// With subnets: the class of traffic that passes unshaped, and the
/// class-id every filter of the reference's layout names.
pub const UNSHAPED_CLASS: u32 = handle(1, 1);
/// With subnets: the class whose tbf leaf shapes.
pub const SHAPED_CLASS: u32 = handle(1, 2);
/// The tbf under [`SHAPED_CLASS`].
pub const SHAPED_LEAF_HANDLE: u32 = handle(2, 0);
/// What the two HTB classes may send: far above any veth, so that only
/// the tbf leaf limits. 100 Gbit/s.
const UNCAPPED_BYTES_PER_SEC: u64 = 12_500_000_000;
/// The burst of the HTB classes, as time at their rate.
const UNCAPPED_BURST_USEC: f64 = 10_000.0;
/// The largest quantum HTB takes without a warning in the kernel log.
const UNCAPPED_QUANTUM: u32 = 200_000;
/// Subnet filters: IPv4 ones at this priority, IPv6 ones at the next (a
/// priority holds filters of one protocol).
const SUBNET_PRIORITY_V4: u16 = 1;
const SUBNET_PRIORITY_V6: u16 = 2;
/// The catch-all redirect after `unshapedSubnets` exceptions.
const REDIRECT_ALL_PRIORITY: u16 = 3;

/// One thing ADD made, undone in reverse order when a later step fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Made {
    RootQdisc(u32),
    IngressQdisc(u32),
    Ifb(String),
}

impl Made {
    pub fn undo(&self, host: &mut RouteSocket) -> Result<(), NetlinkError> {
        let result = match self {
            Made::RootQdisc(ifindex) => host.delete_qdisc(*ifindex, TC_H_ROOT),
            Made::IngressQdisc(ifindex) => host.delete_qdisc(*ifindex, TC_H_INGRESS),
            Made::Ifb(name) => host.delete_link(name.as_str()),
        };
        match result {
            Err(e) if !e.is_not_found() => Err(e),
            _ => Ok(()),
        }
    }
}

/// Shapes traffic leaving `ifindex` (towards the container, on the host
/// veth; from it, on the ifb) with `tbf`. The subnets of `traffic` are
/// matched on `field`: the remote side of that direction.
pub fn add_root_shaper(
    socket: &mut RouteSocket,
    ifindex: u32,
    tbf: Tbf,
    traffic: &ShapedTraffic,
    field: AddressField,
    clock: PschedClock,
    made: &mut Vec<Made>,
) -> Result<(), NetlinkError> {
    let Some((subnets, class)) = subnet_filters(traffic) else {
        socket.add_qdisc(ifindex, ROOT_HANDLE, TC_H_ROOT, &QdiscOptions::Tbf(tbf))?;
        made.push(Made::RootQdisc(ifindex));
        return Ok(());
    };
    let default_class = if class == UNSHAPED_CLASS {
        SHAPED_CLASS
    } else {
        UNSHAPED_CLASS
    };
    let htb = Htb {
        default_class: minor(default_class),
    };
    socket.add_qdisc(ifindex, ROOT_HANDLE, TC_H_ROOT, &QdiscOptions::Htb(htb))?;
    made.push(Made::RootQdisc(ifindex));
    let uncapped = uncapped_class(clock);
    for class in [UNSHAPED_CLASS, SHAPED_CLASS] {
        socket.add_htb_class(ifindex, class, ROOT_HANDLE, &uncapped)?;
    }
    socket.add_qdisc(
        ifindex,
        SHAPED_LEAF_HANDLE,
        SHAPED_CLASS,
        &QdiscOptions::Tbf(tbf),
    )?;
    for filter in classifying_filters(ifindex, ROOT_HANDLE, subnets, field, class, None) {
        socket.add_u32_filter(&filter)?;
    }
    Ok(())
}

/// The HTB classes' parameters: uncapped, with a burst of
/// [`UNCAPPED_BURST_USEC`].
pub fn uncapped_class(clock: PschedClock) -> HtbClass {
    let burst = crate::tbf::go_uint32(UNCAPPED_BURST_USEC * clock.ticks_per_usec);
    HtbClass {
        rate: UNCAPPED_BYTES_PER_SEC,
        ceil: UNCAPPED_BYTES_PER_SEC,
        buffer: burst,
        cbuffer: burst,
        quantum: UNCAPPED_QUANTUM,
    }
}

/// The filters on the host veth's ingress qdisc that send the container's
/// traffic to the ifb: all of it (the reference's one filter), all but
/// the unshaped subnets' (exceptions first, which end classification
/// without an action, so the packet goes on unshaped), or only the shaped
/// subnets'.
pub fn redirect_filters(
    host_index: u32,
    ifb_index: u32,
    traffic: &ShapedTraffic,
) -> Vec<U32Filter> {
    let redirect_all = |priority| U32Filter {
        ifindex: host_index,
        parent: INGRESS_HANDLE,
        priority,
        protocol: ETH_P_ALL,
        classid: UNSHAPED_CLASS,
        keys: Vec::new(),
        redirect_to: Some(ifb_index),
    };
    match traffic {
        ShapedTraffic::All => vec![redirect_all(1)],
        ShapedTraffic::AllBut(subnets) => {
            let mut filters = classifying_filters(
                host_index,
                INGRESS_HANDLE,
                subnets,
                AddressField::Destination,
                UNSHAPED_CLASS,
                None,
            );
            filters.push(redirect_all(REDIRECT_ALL_PRIORITY));
            filters
        }
        ShapedTraffic::Only(subnets) => classifying_filters(
            host_index,
            INGRESS_HANDLE,
            subnets,
            AddressField::Destination,
            UNSHAPED_CLASS,
            Some(ifb_index),
        ),
    }
}

/// The subnets of `traffic` and the class their filters pick on a root
/// HTB; `None` without subnets.
pub fn subnet_filters(traffic: &ShapedTraffic) -> Option<(&[IpNetwork], u32)> {
    match traffic {
        ShapedTraffic::All => None,
        ShapedTraffic::AllBut(subnets) => Some((subnets, UNSHAPED_CLASS)),
        ShapedTraffic::Only(subnets) => Some((subnets, SHAPED_CLASS)),
    }
}

/// One u32 filter per subnet, matching `field`, in the priority of its
/// family.
pub fn classifying_filters(
    ifindex: u32,
    parent: u32,
    subnets: &[IpNetwork],
    field: AddressField,
    classid: u32,
    redirect_to: Option<u32>,
) -> Vec<U32Filter> {
    subnets
        .iter()
        .map(|subnet| {
            let (priority, protocol) = match IpFamily::of_network(subnet) {
                IpFamily::V4 => (SUBNET_PRIORITY_V4, ETH_P_IP),
                IpFamily::V6 => (SUBNET_PRIORITY_V6, ETH_P_IPV6),
            };
            U32Filter {
                ifindex,
                parent,
                priority,
                protocol,
                classid,
                keys: U32Key::address(field, *subnet),
                redirect_to,
            }
        })
        .collect()
}

fn minor(handle: u32) -> u16 {
    u16::try_from(handle & 0xffff).unwrap_or_default()
}

/// Where the shaping tbf of a device is: the root, or the leaf of the
/// shaped class when subnets are configured.
pub fn tbf_parent(traffic: &ShapedTraffic) -> u32 {
    match traffic {
        ShapedTraffic::All => TC_H_ROOT,
        ShapedTraffic::AllBut(_) | ShapedTraffic::Only(_) => SHAPED_CLASS,
    }
}

/// Sorted, for comparing a listing with what the layout asks for.
pub fn sorted(mut filters: Vec<U32Filter>) -> Vec<U32Filter> {
    filters.sort_by_key(|f| {
        (
            f.priority,
            f.protocol,
            f.classid,
            f.redirect_to,
            f.keys
                .iter()
                .map(|k| (k.offset, k.value, k.mask))
                .collect::<Vec<_>>(),
        )
    });
    filters
}

/// `1:` as `tc` writes it, for messages.
pub fn name(handle: u32) -> String {
    tc::format_handle(handle)
}
