//! Traffic control over rtnetlink: the qdiscs, classifier and action that
//! shaping needs, and the `ifb` device traffic is redirected to.
//!
//! - qdiscs ([`QdiscOptions`]): `tbf` (token bucket), `htb` (a class tree;
//!   classes [`HtbClass`] picked by filters, else a default one) and
//!   `ingress`;
//! - filters ([`U32Filter`]): `u32` matches on words of the network header
//!   (all traffic, or an address prefix: [`U32Key::address`]), a class id,
//!   and optionally a `mirred` egress redirect to another device;
//! - the `ifb` link ([`RouteSocket::create_ifb`]) that a redirect feeds;
//! - the kernel's tick clock ([`PschedClock`]), which tbf buffers count in.
//!
//! `netlink-packet-route` types the u32 selector, its keys and the mirred
//! action, and those are used as they are. It has no types for the options
//! of `tbf` and `htb`: those are encoded here from `linux/pkt_sched.h`
//! (`struct tc_tbf_qopt`, `struct tc_ratespec`, `TCA_TBF_*`,
//! `struct tc_htb_glob`, `struct tc_htb_opt`, `TCA_HTB_*`). Dumps are read with [`super::attributes`],
//! not the crate's decoder: one qdisc whose options the crate misreads
//! (another program's) would otherwise fail the whole listing.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use netlink_packet_core::{DefaultNla, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL};
use netlink_packet_route::link::{InfoKind, LinkAttribute, LinkFlags, LinkInfo, LinkMessage};
use netlink_packet_route::tc::{
    TcAction, TcActionAttribute, TcActionMirrorOption, TcActionOption, TcActionType, TcAttribute,
    TcFilterU32Option, TcHandle, TcMessage, TcMirror, TcMirrorActionType, TcOption, TcU32Key,
    TcU32Selector, TcU32SelectorFlags,
};
use netlink_packet_route::RouteNetlinkMessage;

use super::attributes;
use super::route::RouteSocket;
use super::socket::NetlinkError;
use crate::nftables::AddressField;
use crate::IpFamily;

/// `TC_H_ROOT`: the parent of a device's root qdisc.
pub const TC_H_ROOT: u32 = 0xFFFF_FFFF;
/// `TC_H_INGRESS`: the parent of a device's ingress qdisc.
pub const TC_H_INGRESS: u32 = 0xFFFF_FFF1;
/// `ffff:`, the handle every ingress qdisc has.
pub const INGRESS_HANDLE: u32 = handle(0xffff, 0);

/// `ETH_P_ALL`: a filter for every protocol.
pub const ETH_P_ALL: u16 = 0x0003;
pub const ETH_P_IP: u16 = 0x0800;
pub const ETH_P_IPV6: u16 = 0x86DD;

/// `major:minor` as one tc handle.
pub const fn handle(major: u16, minor: u16) -> u32 {
    ((major as u32) << 16) | minor as u32
}

/// A handle as `tc` prints it (`1:`, `1:2`, `ffff:`).
pub fn format_handle(handle: u32) -> String {
    match (handle >> 16, handle & 0xffff) {
        (major, 0) => format!("{major:x}:"),
        (major, minor) => format!("{major:x}:{minor:x}"),
    }
}

// linux/pkt_sched.h
const TCA_KIND: u16 = 1;
const TCA_OPTIONS: u16 = 2;
const TCA_TBF_PARMS: u16 = 1;
const TCA_TBF_RATE64: u16 = 4;
/// `struct tc_ratespec`: cell_log, linklayer, overhead, cell_align, mpu,
/// rate.
const RATESPEC_LEN: usize = 12;
/// `struct tc_tbf_qopt`: rate, peakrate, limit, buffer, mtu.
const TBF_QOPT_LEN: usize = 2 * RATESPEC_LEN + 12;
const TCA_HTB_PARMS: u16 = 1;
const TCA_HTB_INIT: u16 = 2;
const TCA_HTB_RATE64: u16 = 6;
const TCA_HTB_CEIL64: u16 = 7;
/// `struct tc_htb_glob`: version, rate2quantum, defcls, debug,
/// direct_pkts.
const HTB_GLOB_LEN: usize = 20;
/// `struct tc_htb_opt`: rate, ceil, buffer, cbuffer, quantum, level, prio.
const HTB_OPT_LEN: usize = 2 * RATESPEC_LEN + 20;
/// `struct tcmsg`: family, padding, ifindex, handle, parent, info.
const TCMSG_LEN: usize = 20;
const NETLINK_HEADER_LEN: usize = 16;
// linux/pkt_cls.h and tc_act/tc_mirred.h
const TCA_U32_CLASSID: u16 = 1;
const TCA_U32_SEL: u16 = 5;
const TCA_U32_ACT: u16 = 7;
const TCA_ACT_KIND: u16 = 1;
const TCA_ACT_OPTIONS: u16 = 2;
const TCA_MIRRED_PARMS: u16 = 2;
/// `struct tc_mirred`: the generic action fields (index, capab, action,
/// refcnt, bindcnt), eaction, ifindex.
const MIRRED_PARMS_LEN: usize = 28;
const TCA_EGRESS_REDIR: i32 = 1;

/// A token bucket: what `tc qdisc add ... tbf` sets, in the kernel's
/// units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tbf {
    /// Bytes per second.
    pub rate: u64,
    /// Bytes that may wait in the queue.
    pub limit: u32,
    /// The bucket's size as the time it takes to fill at `rate`, in
    /// [`PschedClock`] ticks.
    pub buffer: u32,
}

impl Tbf {
    /// The nested `TCA_OPTIONS` attributes: `TCA_TBF_PARMS` (`struct
    /// tc_tbf_qopt`: rate, no peak rate, limit, buffer, no MTU), and the
    /// 64-bit rate when it does not fit the rate spec.
    fn encode(&self) -> Vec<u8> {
        let mut qopt = Vec::with_capacity(TBF_QOPT_LEN);
        qopt.extend(ratespec(self.rate));
        qopt.extend([0; RATESPEC_LEN]);
        for word in [self.limit, self.buffer, 0] {
            qopt.extend(word.to_ne_bytes());
        }
        let mut options = nla(TCA_TBF_PARMS, &qopt);
        options.extend(rate64(TCA_TBF_RATE64, self.rate));
        options
    }

    fn decode(options: &[u8]) -> Option<Tbf> {
        let qopt = attributes::find(options, TCA_TBF_PARMS)?;
        let tail = 2 * RATESPEC_LEN;
        Some(Tbf {
            rate: decode_rate(qopt, options, TCA_TBF_RATE64)?,
            limit: ne_u32_at(qopt, tail)?,
            buffer: ne_u32_at(qopt, tail + 4)?,
        })
    }
}

/// The root of an HTB tree: classes under it are picked by filters, else
/// the `default_class` (a minor number under the qdisc's handle) takes
/// the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Htb {
    pub default_class: u16,
}

impl Htb {
    /// `TCA_HTB_INIT`: `struct tc_htb_glob` as `tc` fills it (version 3,
    /// rate-to-quantum 10).
    fn encode(&self) -> Vec<u8> {
        let mut glob = Vec::with_capacity(HTB_GLOB_LEN);
        for word in [3u32, 10, u32::from(self.default_class), 0, 0] {
            glob.extend_from_slice(&word.to_ne_bytes());
        }
        nla(TCA_HTB_INIT, &glob)
    }

    fn decode(options: &[u8]) -> Option<Htb> {
        let glob = attributes::find(options, TCA_HTB_INIT)?;
        let default_class = ne_u32_at(glob, 8)?;
        Some(Htb {
            default_class: u16::try_from(default_class).ok()?,
        })
    }
}

/// An HTB class: guaranteed `rate` and borrowing `ceil` (bytes per
/// second), each with the burst it may send at once as a time in
/// [`PschedClock`] ticks, and the bytes it sends per round when it
/// borrows (`quantum`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HtbClass {
    pub rate: u64,
    pub ceil: u64,
    pub buffer: u32,
    pub cbuffer: u32,
    pub quantum: u32,
}

impl HtbClass {
    /// `TCA_HTB_PARMS` (`struct tc_htb_opt`: rate, ceil, buffer, cbuffer,
    /// quantum, level 0, priority 0), and the 64-bit rates that do not fit
    /// their rate specs.
    fn encode(&self) -> Vec<u8> {
        let mut opt = Vec::with_capacity(HTB_OPT_LEN);
        opt.extend(ratespec(self.rate));
        opt.extend(ratespec(self.ceil));
        for word in [self.buffer, self.cbuffer, self.quantum, 0, 0] {
            opt.extend(word.to_ne_bytes());
        }
        let mut options = nla(TCA_HTB_PARMS, &opt);
        options.extend(rate64(TCA_HTB_RATE64, self.rate));
        options.extend(rate64(TCA_HTB_CEIL64, self.ceil));
        options
    }
}

/// A qdisc to add, with the options of its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QdiscOptions {
    Tbf(Tbf),
    Htb(Htb),
    Ingress,
}

impl QdiscOptions {
    pub fn kind(&self) -> &'static str {
        match self {
            QdiscOptions::Tbf(_) => "tbf",
            QdiscOptions::Htb(_) => "htb",
            QdiscOptions::Ingress => "ingress",
        }
    }
}

/// A qdisc as the kernel lists it; the options of the kinds above are
/// decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Qdisc {
    pub ifindex: u32,
    pub handle: u32,
    pub parent: u32,
    pub kind: String,
    pub tbf: Option<Tbf>,
    pub htb: Option<Htb>,
}

/// One 32-bit comparison of a u32 filter: the word at `offset` bytes into
/// the network header, masked, equals `value`. Values and masks are
/// written as the word reads in the packet (big-endian).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct U32Key {
    pub offset: i32,
    pub value: u32,
    pub mask: u32,
}

impl U32Key {
    /// The keys that match `network` in the source or destination address
    /// of its family's header: one per 32-bit word the prefix reaches
    /// into, none for a /0 (which then matches every packet of the
    /// family).
    pub fn address(field: AddressField, network: IpNetwork) -> Vec<U32Key> {
        let family = IpFamily::of_network(&network);
        let (address, mask): (Vec<u8>, Vec<u8>) = match (network.network(), network.mask()) {
            (IpAddr::V4(a), IpAddr::V4(m)) => (a.octets().to_vec(), m.octets().to_vec()),
            (IpAddr::V6(a), IpAddr::V6(m)) => (a.octets().to_vec(), m.octets().to_vec()),
            _ => return Vec::new(),
        };
        let start = i32::try_from(field.offset(family)).unwrap_or(i32::MAX);
        address
            .chunks_exact(4)
            .zip(mask.chunks_exact(4))
            .zip((0..).step_by(4))
            .filter_map(|((word, mask), delta)| {
                let mask = u32::from_be_bytes(mask.try_into().ok()?);
                let value = u32::from_be_bytes(word.try_into().ok()?);
                (mask != 0).then_some(U32Key {
                    offset: start + delta,
                    value,
                    mask,
                })
            })
            .collect()
    }
}

/// A u32 filter to add, or as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct U32Filter {
    pub ifindex: u32,
    /// The qdisc it hangs on.
    pub parent: u32,
    /// Filters run in ascending priority; all of one priority must share
    /// a protocol.
    pub priority: u16,
    /// `ETH_P_*`, host order.
    pub protocol: u16,
    /// The class a match selects (a flowid).
    pub classid: u32,
    /// All must match; none matches every packet.
    pub keys: Vec<U32Key>,
    /// A `mirred` egress redirect to this ifindex on a match.
    pub redirect_to: Option<u32>,
}

impl U32Filter {
    fn message(&self) -> TcMessage {
        let mut msg = tc_message(self.ifindex, 0, self.parent);
        msg.header.info = (u32::from(self.priority) << 16)
            | u32::from(u16::from_ne_bytes(self.protocol.to_be_bytes()));
        let mut keys: Vec<TcU32Key> = self
            .keys
            .iter()
            .map(|k| {
                let mut key = TcU32Key::default();
                key.off = k.offset;
                key.val = k.value;
                key.mask = k.mask;
                key
            })
            .collect();
        if keys.is_empty() {
            // `match u32 0 0`: one key that every packet passes.
            keys.push(TcU32Key::default());
        }
        let mut selector = TcU32Selector::default();
        selector.flags = TcU32SelectorFlags::Terminal;
        selector.nkeys = u8::try_from(keys.len()).unwrap_or(u8::MAX);
        selector.keys = keys;
        let mut options = vec![
            TcOption::U32(TcFilterU32Option::ClassId(TcHandle::from(self.classid))),
            TcOption::U32(TcFilterU32Option::Selector(selector)),
        ];
        if let Some(target) = self.redirect_to {
            let mut mirror = TcMirror::default();
            // Stolen: the packet leaves this device's path for the target's.
            mirror.generic.action = TcActionType::Stolen;
            mirror.eaction = TcMirrorActionType::EgressRedir;
            mirror.ifindex = target;
            let mut action = TcAction::default();
            action.tab = 1;
            action.attributes = vec![
                TcActionAttribute::Kind("mirred".to_string()),
                TcActionAttribute::Options(vec![TcActionOption::Mirror(
                    TcActionMirrorOption::Parms(mirror),
                )]),
            ];
            options.push(TcOption::U32(TcFilterU32Option::Action(vec![action])));
        }
        msg.attributes.push(TcAttribute::Kind("u32".to_string()));
        msg.attributes.push(TcAttribute::Options(options));
        msg
    }
}

/// The kernel's tc clock, from `/proc/net/psched`: how many ticks a
/// microsecond has (iproute2's and the Go netlink library's
/// `tick_in_usec`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PschedClock {
    pub ticks_per_usec: f64,
}

impl PschedClock {
    pub const PATH: &'static str = "/proc/net/psched";

    pub fn read() -> std::io::Result<PschedClock> {
        let text = std::fs::read_to_string(Self::PATH)?;
        Self::parse(&text).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{}: unexpected content {text:?}", Self::PATH),
            )
        })
    }

    /// Four hex words: ns per µs, ns per tick, clock resolution, hrtimer
    /// resolution. A resolution of 1 GHz in the third word is the old
    /// kernels' way of saying the first two are equal.
    pub fn parse(text: &str) -> Option<PschedClock> {
        let words: Vec<u64> = text
            .split_whitespace()
            .take(3)
            .map(|w| u64::from_str_radix(w, 16).ok())
            .collect::<Option<_>>()?;
        let [mut t2us, us2t, resolution] = <[u64; 3]>::try_from(words).ok()?;
        if us2t == 0 {
            return None;
        }
        if resolution == 1_000_000_000 {
            t2us = us2t;
        }
        let clock_factor = resolution as f64 / 1_000_000.0;
        Some(PschedClock {
            ticks_per_usec: t2us as f64 / us2t as f64 * clock_factor,
        })
    }
}

impl RouteSocket {
    /// Adds a qdisc; one already at that place fails with `EEXIST`.
    pub fn add_qdisc(
        &mut self,
        ifindex: u32,
        handle: u32,
        parent: u32,
        options: &QdiscOptions,
    ) -> Result<(), NetlinkError> {
        let mut msg = tc_message(ifindex, handle, parent);
        msg.attributes
            .push(TcAttribute::Kind(options.kind().to_string()));
        match options {
            QdiscOptions::Tbf(tbf) => msg.attributes.push(raw_options(tbf.encode())),
            QdiscOptions::Htb(htb) => msg.attributes.push(raw_options(htb.encode())),
            QdiscOptions::Ingress => {}
        }
        self.request_ack(
            RouteNetlinkMessage::NewQueueDiscipline(msg),
            NLM_F_CREATE | NLM_F_EXCL,
        )
        .map_err(|e| {
            e.context(format!(
                "add {} qdisc {} to link #{ifindex}",
                options.kind(),
                format_handle(handle)
            ))
        })
    }

    /// Deletes the qdisc under `parent` ([`TC_H_ROOT`], [`TC_H_INGRESS`] or
    /// a class), with its children and filters.
    pub fn delete_qdisc(&mut self, ifindex: u32, parent: u32) -> Result<(), NetlinkError> {
        let msg = tc_message(ifindex, 0, parent);
        self.request_ack(RouteNetlinkMessage::DelQueueDiscipline(msg), 0)
            .map_err(|e| {
                e.context(format!(
                    "delete qdisc under {} of link #{ifindex}",
                    format_handle(parent)
                ))
            })
    }

    /// Adds an HTB class `classid` under `parent` (the qdisc's handle or
    /// another class).
    pub fn add_htb_class(
        &mut self,
        ifindex: u32,
        classid: u32,
        parent: u32,
        class: &HtbClass,
    ) -> Result<(), NetlinkError> {
        let mut msg = tc_message(ifindex, classid, parent);
        msg.attributes.push(TcAttribute::Kind("htb".to_string()));
        msg.attributes.push(raw_options(class.encode()));
        self.request_ack(
            RouteNetlinkMessage::NewTrafficClass(msg),
            NLM_F_CREATE | NLM_F_EXCL,
        )
        .map_err(|e| {
            e.context(format!(
                "add htb class {} to link #{ifindex}",
                format_handle(classid)
            ))
        })
    }

    /// The qdiscs of one link, the kernel's defaults included.
    pub fn list_qdiscs(&mut self, ifindex: u32) -> Result<Vec<Qdisc>, NetlinkError> {
        let msg = tc_message(ifindex, 0, 0);
        self.dump_tc(RouteNetlinkMessage::GetQueueDiscipline(msg), |raw| {
            decode_qdisc(raw).filter(|q| q.ifindex == ifindex)
        })
        .map_err(|e| e.context(format!("list qdiscs of link #{ifindex}")))
    }

    pub fn add_u32_filter(&mut self, filter: &U32Filter) -> Result<(), NetlinkError> {
        self.request_ack(
            RouteNetlinkMessage::NewTrafficFilter(filter.message()),
            NLM_F_CREATE | NLM_F_EXCL,
        )
        .map_err(|e| {
            e.context(format!(
                "add u32 filter (priority {}) under {} of link #{}",
                filter.priority,
                format_handle(filter.parent),
                filter.ifindex
            ))
        })
    }

    /// The u32 filters under `parent` of a link that match packets (the
    /// hash tables the kernel lists beside them are left out).
    pub fn list_u32_filters(
        &mut self,
        ifindex: u32,
        parent: u32,
    ) -> Result<Vec<U32Filter>, NetlinkError> {
        let msg = tc_message(ifindex, 0, parent);
        self.dump_tc(
            RouteNetlinkMessage::GetTrafficFilter(msg),
            decode_u32_filter,
        )
        .map_err(|e| {
            e.context(format!(
                "list filters under {} of link #{ifindex}",
                format_handle(parent)
            ))
        })
    }

    /// Creates an `ifb` device, up, with no transmit queue of its own (a
    /// qdisc on it does the queueing), and `mtu`.
    pub fn create_ifb(&mut self, name: &str, mtu: u32) -> Result<(), NetlinkError> {
        let mut msg = LinkMessage::default();
        msg.header.flags = LinkFlags::Up;
        msg.header.change_mask = LinkFlags::Up;
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
        msg.attributes.push(LinkAttribute::Mtu(mtu));
        msg.attributes.push(LinkAttribute::TxQueueLen(0));
        msg.attributes
            .push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Ifb)]));
        self.request_ack(RouteNetlinkMessage::NewLink(msg), NLM_F_CREATE | NLM_F_EXCL)
            .map_err(|e| e.context(format!("create ifb {name:?}")))
    }

    /// A dump of qdiscs or filters: what `decode` reads from each reply,
    /// the replies it leaves out (other kinds, other links, malformed)
    /// skipped.
    fn dump_tc<T>(
        &mut self,
        request: RouteNetlinkMessage,
        decode: impl Fn(&[u8]) -> Option<T>,
    ) -> Result<Vec<T>, NetlinkError> {
        self.request_fold(request, NLM_F_DUMP, Vec::new, |found, raw| {
            found.extend(decode(raw));
            Ok(())
        })
    }
}

fn tc_message(ifindex: u32, handle: u32, parent: u32) -> TcMessage {
    // Interface indexes are positive ints in the kernel.
    let mut msg = TcMessage::with_index(i32::try_from(ifindex).unwrap_or(i32::MAX));
    msg.header.handle = TcHandle::from(handle);
    msg.header.parent = TcHandle::from(parent);
    msg
}

/// `TCA_OPTIONS` with content the crate does not type.
fn raw_options(value: Vec<u8>) -> TcAttribute {
    TcAttribute::Other(DefaultNla::new(TCA_OPTIONS, value))
}

/// One attribute (header, value, padding to 4 bytes).
fn nla(kind: u16, value: &[u8]) -> Vec<u8> {
    let length = u16::try_from(4 + value.len()).unwrap_or(u16::MAX);
    let mut out = Vec::with_capacity(value.len() + 8);
    out.extend_from_slice(&length.to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(value);
    out.resize(out.len().next_multiple_of(4), 0);
    out
}

fn ne_u32(bytes: &[u8]) -> Option<u32> {
    <[u8; 4]>::try_from(bytes).ok().map(u32::from_ne_bytes)
}

/// The native-endian word at `offset` of a kernel struct.
fn ne_u32_at(bytes: &[u8], offset: usize) -> Option<u32> {
    ne_u32(bytes.get(offset..offset + 4)?)
}

/// `struct tc_ratespec` with only the rate set (the 32-bit field says `~0`
/// when the rate does not fit, as `tc` sends it) and no rate table: the
/// kernel computes its own since 3.8.
fn ratespec(rate: u64) -> [u8; RATESPEC_LEN] {
    let mut spec = [0u8; RATESPEC_LEN];
    let rate32 = u32::try_from(rate).unwrap_or(u32::MAX);
    spec[8..].copy_from_slice(&rate32.to_ne_bytes());
    spec
}

/// The 64-bit rate attribute `kind` that carries a rate too wide for its
/// rate spec; nothing for one that fits.
fn rate64(kind: u16, rate: u64) -> Vec<u8> {
    if rate > u64::from(u32::MAX) {
        nla(kind, &rate.to_ne_bytes())
    } else {
        Vec::new()
    }
}

/// The rate of the rate spec that `parms` starts with, or of the 64-bit
/// attribute `kind64` of `options` when there is one.
fn decode_rate(parms: &[u8], options: &[u8], kind64: u16) -> Option<u64> {
    let rate32 = ne_u32_at(parms, 8)?;
    Some(
        attributes::find(options, kind64)
            .and_then(|v| <[u8; 8]>::try_from(v).ok())
            .map_or(u64::from(rate32), u64::from_ne_bytes),
    )
}

/// The tcmsg header and attributes of one raw reply.
struct RawTc<'a> {
    ifindex: u32,
    handle: u32,
    parent: u32,
    info: u32,
    attributes: &'a [u8],
}

fn split_tc(raw: &[u8]) -> Option<RawTc<'_>> {
    let tcmsg = raw.get(NETLINK_HEADER_LEN..NETLINK_HEADER_LEN + TCMSG_LEN)?;
    Some(RawTc {
        ifindex: u32::try_from(i32::from_ne_bytes(tcmsg.get(4..8)?.try_into().ok()?)).ok()?,
        handle: ne_u32_at(tcmsg, 8)?,
        parent: ne_u32_at(tcmsg, 12)?,
        info: ne_u32_at(tcmsg, 16)?,
        attributes: raw.get(NETLINK_HEADER_LEN + TCMSG_LEN..)?,
    })
}

fn decode_qdisc(raw: &[u8]) -> Option<Qdisc> {
    let tc = split_tc(raw)?;
    let kind = attributes::string(attributes::find(tc.attributes, TCA_KIND)?);
    let options = attributes::find(tc.attributes, TCA_OPTIONS).unwrap_or_default();
    Some(Qdisc {
        ifindex: tc.ifindex,
        handle: tc.handle,
        parent: tc.parent,
        tbf: (kind == "tbf").then(|| Tbf::decode(options)).flatten(),
        htb: (kind == "htb").then(|| Htb::decode(options)).flatten(),
        kind,
    })
}

fn decode_u32_filter(raw: &[u8]) -> Option<U32Filter> {
    let tc = split_tc(raw)?;
    if attributes::string(attributes::find(tc.attributes, TCA_KIND)?) != "u32" {
        return None;
    }
    let options = attributes::find(tc.attributes, TCA_OPTIONS)?;
    let selector = TcU32Selector::parse(attributes::find(options, TCA_U32_SEL)?).ok()?;
    let classid = attributes::find(options, TCA_U32_CLASSID)
        .and_then(ne_u32)
        .unwrap_or(0);
    let redirect_to = attributes::find(options, TCA_U32_ACT)
        .into_iter()
        .flat_map(attributes::attributes)
        .find_map(|(_, action)| mirred_redirect(action));
    let keys = selector
        .keys
        .iter()
        .filter(|k| k.mask != 0)
        .map(|k| U32Key {
            offset: k.off,
            value: k.val,
            mask: k.mask,
        })
        .collect();
    let protocol_wire = u16::try_from(tc.info & 0xffff).unwrap_or_default();
    Some(U32Filter {
        ifindex: tc.ifindex,
        parent: tc.parent,
        priority: u16::try_from(tc.info >> 16).unwrap_or_default(),
        protocol: u16::from_be_bytes(protocol_wire.to_ne_bytes()),
        classid,
        keys,
        redirect_to,
    })
}

/// The target of a `mirred` egress redirect action, read from its
/// attributes.
fn mirred_redirect(action: &[u8]) -> Option<u32> {
    if attributes::string(attributes::find(action, TCA_ACT_KIND)?) != "mirred" {
        return None;
    }
    let options = attributes::find(action, TCA_ACT_OPTIONS)?;
    let parms = attributes::find(options, TCA_MIRRED_PARMS)?;
    if parms.len() < MIRRED_PARMS_LEN {
        return None;
    }
    let eaction = i32::from_ne_bytes(parms.get(20..24)?.try_into().ok()?);
    (eaction == TCA_EGRESS_REDIR)
        .then(|| ne_u32_at(parms, 24))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tbf_options_round_trip_with_and_without_rate64() {
        for tbf in [
            Tbf {
                rate: 1000,
                limit: 35,
                buffer: 156_250,
            },
            Tbf {
                rate: 5_000_000_000,
                limit: 7,
                buffer: 9,
            },
        ] {
            let bytes = tbf.encode();
            assert_eq!(Tbf::decode(&bytes), Some(tbf));
            let qopt = attributes::find(&bytes, TCA_TBF_PARMS).unwrap();
            assert_eq!(qopt.len(), TBF_QOPT_LEN);
            // PARMS alone, or PARMS and RATE64.
            let kinds: Vec<u16> = attributes::attributes(&bytes).map(|(k, _)| k).collect();
            let expected: &[u16] = if tbf.rate > u64::from(u32::MAX) {
                &[TCA_TBF_PARMS, TCA_TBF_RATE64]
            } else {
                &[TCA_TBF_PARMS]
            };
            assert_eq!(kinds, expected);
        }
        assert_eq!(Tbf::decode(&nla(TCA_TBF_PARMS, &[0; 10])), None);
    }

    #[test]
    fn htb_options_round_trip_and_wide_rates_use_64_bit_attributes() {
        let htb = Htb { default_class: 2 };
        assert_eq!(Htb::decode(&htb.encode()), Some(htb));
        let class = HtbClass {
            rate: 12_500_000_000,
            ceil: 1000,
            buffer: 1,
            cbuffer: 2,
            quantum: 3,
        };
        let bytes = class.encode();
        let kinds: Vec<u16> = attributes::attributes(&bytes).map(|(k, _)| k).collect();
        assert_eq!(kinds, [TCA_HTB_PARMS, TCA_HTB_RATE64]);
        let opt = attributes::find(&bytes, TCA_HTB_PARMS).unwrap();
        assert_eq!(opt.len(), HTB_OPT_LEN);
        // rate ~0 (carried by RATE64), ceil, then buffer, cbuffer, quantum.
        let words: Vec<u32> = [8, RATESPEC_LEN + 8, 24, 28, 32]
            .into_iter()
            .map(|at| ne_u32_at(opt, at).unwrap())
            .collect();
        assert_eq!(words, [u32::MAX, 1000, 1, 2, 3]);
    }

    #[test]
    fn address_keys_cover_the_prefix_words_only() {
        let v4 = U32Key::address(AddressField::Destination, "10.1.2.3/16".parse().unwrap());
        assert_eq!(
            v4,
            [U32Key {
                offset: 16,
                value: 0x0a01_0000,
                mask: 0xffff_0000
            }]
        );
        let v6 = U32Key::address(AddressField::Source, "fd00:1::/40".parse().unwrap());
        assert_eq!(
            v6,
            [
                U32Key {
                    offset: 8,
                    value: 0xfd00_0001,
                    mask: 0xffff_ffff
                },
                U32Key {
                    offset: 12,
                    value: 0,
                    mask: 0xff00_0000
                }
            ]
        );
        assert!(U32Key::address(AddressField::Source, "0.0.0.0/0".parse().unwrap()).is_empty());
    }

    #[test]
    fn psched_clock_as_iproute_reads_it() {
        let clock = PschedClock::parse("000003e8 00000040 000f4240 3b9aca00\n").unwrap();
        assert_eq!(clock.ticks_per_usec, 15.625);
        let old = PschedClock::parse("000003e8 00000040 3b9aca00 3b9aca00").unwrap();
        assert_eq!(old.ticks_per_usec, 1000.0);
        assert_eq!(PschedClock::parse("garbage"), None);
        assert_eq!(PschedClock::parse("1 0 1"), None);
    }

    /// Replies cut short or filled with garbage give nothing, never a
    /// panic.
    #[test]
    fn malformed_replies_are_skipped() {
        let mut raw = vec![0u8; NETLINK_HEADER_LEN + TCMSG_LEN];
        raw.extend(nla(TCA_KIND, b"u32\0"));
        raw.extend(nla(TCA_OPTIONS, &nla(TCA_U32_SEL, &[3; 7])));
        for end in 0..=raw.len() {
            assert_eq!(decode_u32_filter(&raw[..end]), None);
            let _ = decode_qdisc(&raw[..end]);
        }
        let mut tbf = vec![0u8; NETLINK_HEADER_LEN + TCMSG_LEN];
        tbf.extend(nla(TCA_KIND, b"tbf\0"));
        tbf.extend(nla(TCA_OPTIONS, &nla(TCA_TBF_PARMS, &[0xff; 5])));
        let qdisc = decode_qdisc(&tbf).unwrap();
        assert_eq!((qdisc.kind.as_str(), qdisc.tbf), ("tbf", None));
        assert_eq!(mirred_redirect(&[0xff; 40]), None);
    }

    #[test]
    fn handles_print_as_tc_prints_them() {
        assert_eq!(format_handle(INGRESS_HANDLE), "ffff:");
        assert_eq!(format_handle(handle(1, 2)), "1:2");
        assert_eq!(format_handle(handle(0x10, 0)), "10:");
    }

    /// The kernel takes what is encoded here and lists it back the same:
    /// an htb root with a tbf leaf, an ingress qdisc, address filters and
    /// a redirect to an ifb.
    #[test]
    fn qdiscs_and_filters_round_trip_through_the_kernel() {
        crate::netlink::test_support::in_private_netns(|| {
            let mut socket = RouteSocket::open_current().unwrap();
            socket
                .create_veth_pair(&crate::netlink::VethPair {
                    name: "tc-a",
                    peer_name: "tc-b",
                    ..Default::default()
                })
                .unwrap();
            socket.create_ifb("tc-ifb", 1400).unwrap();
            let ifb = socket.link_by_name("tc-ifb").unwrap().unwrap();
            assert!(ifb.up);
            assert_eq!(ifb.mtu, 1400);
            assert_eq!(ifb.kind.as_deref(), Some("ifb"));
            let veth = socket.link_by_name("tc-a").unwrap().unwrap().index;
            let htb = Htb { default_class: 2 };
            let uncapped = HtbClass {
                rate: 12_500_000_000,
                ceil: 12_500_000_000,
                buffer: 15_625,
                cbuffer: 15_625,
                quantum: 200_000,
            };
            let tbf = Tbf {
                rate: 125_000,
                limit: 6_000,
                buffer: 1_000_000,
            };
            socket
                .add_qdisc(veth, handle(1, 0), TC_H_ROOT, &QdiscOptions::Htb(htb))
                .unwrap();
            for minor in [1, 2] {
                socket
                    .add_htb_class(veth, handle(1, minor), handle(1, 0), &uncapped)
                    .unwrap();
            }
            socket
                .add_qdisc(veth, handle(2, 0), handle(1, 2), &QdiscOptions::Tbf(tbf))
                .unwrap();
            socket
                .add_qdisc(veth, INGRESS_HANDLE, TC_H_INGRESS, &QdiscOptions::Ingress)
                .unwrap();
            let qdiscs = socket.list_qdiscs(veth).unwrap();
            let find = |kind: &str| qdiscs.iter().find(|q| q.kind == kind).cloned().unwrap();
            assert_eq!(find("htb").htb, Some(htb));
            assert_eq!(find("htb").parent, TC_H_ROOT);
            assert_eq!(find("tbf").tbf, Some(tbf));
            assert_eq!(find("tbf").parent, handle(1, 2));
            assert_eq!(find("ingress").handle, INGRESS_HANDLE);

            let filter = U32Filter {
                ifindex: veth,
                parent: handle(1, 0),
                priority: 1,
                protocol: ETH_P_IPV6,
                classid: handle(1, 1),
                keys: U32Key::address(AddressField::Source, "fd00::/64".parse().unwrap()),
                redirect_to: None,
            };
            socket.add_u32_filter(&filter).unwrap();
            let redirect = U32Filter {
                ifindex: veth,
                parent: INGRESS_HANDLE,
                priority: 1,
                protocol: ETH_P_ALL,
                classid: handle(1, 1),
                keys: Vec::new(),
                redirect_to: Some(ifb.index),
            };
            socket.add_u32_filter(&redirect).unwrap();
            assert_eq!(
                socket.list_u32_filters(veth, handle(1, 0)).unwrap(),
                [filter]
            );
            assert_eq!(
                socket.list_u32_filters(veth, INGRESS_HANDLE).unwrap(),
                [redirect]
            );

            socket.delete_qdisc(veth, TC_H_ROOT).unwrap();
            socket.delete_qdisc(veth, TC_H_INGRESS).unwrap();
            let left: Vec<String> = socket
                .list_qdiscs(veth)
                .unwrap()
                .into_iter()
                .map(|q| q.kind)
                .collect();
            assert!(
                !left.iter().any(|k| k == "htb" || k == "ingress"),
                "{left:?}"
            );
            let e = socket.delete_qdisc(veth, TC_H_INGRESS).unwrap_err();
            assert!(e.errno().is_some(), "{e}");
        });
    }
}
