//! The block grid: which blocks a range set is cut into, which blocks a
//! node may claim next, and which addresses of a block it hands out.
//!
//! Blocks are aligned to their own size (a /26 starts at a multiple of
//! 64), so the grid depends only on the block prefix length: two ranges of
//! one network never cut one address into two different blocks. A block
//! hands out the addresses it shares with its range (`rangeStart` to
//! `rangeEnd`), minus the gateway, `exclude`, and the addresses reserved
//! cluster-wide (keys under `ips/`) when it was claimed. Those addresses
//! become host-local ranges ([`pieces`]), so allocation inside a node's
//! blocks is host-local's own walk over its own store.

use std::collections::HashSet;
use std::net::IpAddr;

use host_local::addr;
use host_local::range::Range;
use host_local::range_set::RangeSet;
use ipnetwork::IpNetwork;
use libcni::IpFamily;

/// An inclusive address span as integers of its family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    lo: u128,
    hi: u128,
}

fn net_span(net: IpNetwork) -> Span {
    let family = IpFamily::of(net.ip());
    let lo = addr::to_u128(net.network());
    let host = !addr::mask(family, net.prefix()) & addr::mask(family, family.bits());
    Span { lo, hi: lo | host }
}

fn block_at(family: IpFamily, lo: u128, prefix: u8) -> IpNetwork {
    let ip = addr::from_u128(family, lo);
    // `lo` is aligned and `prefix` validated for the family.
    IpNetwork::new(ip, prefix).unwrap_or_else(|_| IpNetwork::from(ip))
}

/// `spans` minus `cut`, in order.
fn subtract(spans: Vec<Span>, cut: Span) -> Vec<Span> {
    let mut out = Vec::with_capacity(spans.len() + 1);
    for s in spans {
        if cut.hi < s.lo || cut.lo > s.hi {
            out.push(s);
            continue;
        }
        if cut.lo > s.lo {
            out.push(Span {
                lo: s.lo,
                hi: cut.lo - 1,
            });
        }
        if cut.hi < s.hi {
            out.push(Span {
                lo: cut.hi + 1,
                hi: s.hi,
            });
        }
    }
    out
}

/// The addresses `block` hands out for range set `set`, as host-local
/// ranges (each keeps its range's subnet and gateway, so results carry the
/// subnet's prefix length and gateway). Empty when the block hands out
/// nothing.
pub fn pieces(
    set: &RangeSet,
    block: IpNetwork,
    exclude: &[IpNetwork],
    reserved: &[IpAddr],
) -> Vec<Range> {
    let family = set.family();
    if IpFamily::of(block.ip()) != family {
        return Vec::new();
    }
    let block_span = net_span(block);
    let mut out = Vec::new();
    for range in set.ranges() {
        let lo = addr::to_u128(range.range_start).max(block_span.lo);
        let hi = addr::to_u128(range.range_end).min(block_span.hi);
        if lo > hi {
            continue;
        }
        let mut spans = vec![Span { lo, hi }];
        for net in exclude.iter().filter(|n| IpFamily::of(n.ip()) == family) {
            spans = subtract(spans, net_span(*net));
        }
        for ip in reserved.iter().filter(|ip| IpFamily::of(**ip) == family) {
            let n = addr::to_u128(*ip);
            spans = subtract(spans, Span { lo: n, hi: n });
        }
        let gateway = addr::to_u128(range.gateway);
        for s in spans {
            if s.lo == s.hi && s.lo == gateway {
                continue;
            }
            out.push(Range {
                subnet: range.subnet,
                range_start: addr::from_u128(family, s.lo),
                range_end: addr::from_u128(family, s.hi),
                gateway: range.gateway,
            });
        }
    }
    out
}

/// How many addresses `pieces` hands out (the gateway not counted).
pub fn capacity(pieces: &[Range]) -> u128 {
    pieces
        .iter()
        .map(|r| {
            let gateway_inside = r.contains(r.gateway);
            r.span_len().saturating_sub(u128::from(gateway_inside))
        })
        .sum()
}

/// The range set of a node's blocks of one configured set, for host-local's
/// allocator; `None` when they hand out nothing.
pub fn node_range_set(pieces: Vec<Range>) -> Option<RangeSet> {
    if pieces.is_empty() {
        return None;
    }
    // Pieces are disjoint by construction; a failure here would be a bug in
    // this module, and it then leaves the set without room (a new block is
    // claimed) rather than failing the ADD.
    RangeSet::from_ranges(pieces).ok()
}

/// The block of `prefix` holding `ip`.
pub fn block_of(ip: IpAddr, prefix: u8) -> IpNetwork {
    let family = IpFamily::of(ip);
    let lo = addr::to_u128(ip) & addr::mask(family, prefix);
    block_at(family, lo, prefix)
}

/// FNV-1a: a stable spread of node names over the grid, so nodes that
/// start together try different blocks first.
fn spread(node: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in node.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// The first block of range set `set` that nobody holds and that hands out
/// at least one address, searching from a place that depends on `node`.
/// `taken` holds every claimed block of the network, `reserved` every
/// address reserved cluster-wide.
pub fn free_block(
    set: &RangeSet,
    prefix: u8,
    node: &str,
    taken: &HashSet<IpNetwork>,
    exclude: &[IpNetwork],
    reserved: &[IpAddr],
) -> Option<IpNetwork> {
    let family = set.family();
    let size = net_span(block_at(family, 0, prefix)).hi + 1;
    // Block-aligned spans of each range, the ranges' earlier blocks first.
    let spans: Vec<Span> = set
        .ranges()
        .iter()
        .map(|r| Span {
            lo: addr::to_u128(r.range_start) & !(size - 1),
            hi: addr::to_u128(r.range_end) & !(size - 1),
        })
        .collect();
    let counts: Vec<u128> = spans.iter().map(|s| (s.hi - s.lo) / size + 1).collect();
    let total = counts.iter().fold(0u128, |a, c| a.saturating_add(*c));
    if total == 0 {
        return None;
    }
    let start = u128::from(spread(node)) % total;
    // Visit blocks by their index over all ranges, from `start`, wrapping.
    let mut visited: u128 = 0;
    let mut index = start;
    while visited < total {
        let (range_idx, offset) = locate(&counts, index);
        let lo = spans[range_idx].lo + offset * size;
        let block = block_at(family, lo, prefix);
        // A block inside an exclude entry: skip the whole entry at once
        // (an IPv6 exclude may hold billions of blocks).
        let excluded_by = exclude
            .iter()
            .filter(|n| IpFamily::of(n.ip()) == family)
            .map(|n| net_span(*n))
            .find(|s| s.lo <= lo && s.hi >= lo + (size - 1));
        let step = match excluded_by {
            Some(s) => ((s.hi - lo) / size + 1).min(counts[range_idx] - offset),
            None => 1,
        };
        let earlier_range = set.ranges()[..range_idx]
            .iter()
            .any(|r| r.subnet.contains(block.ip()) && spans_overlap(r, lo, lo + size - 1));
        if excluded_by.is_none()
            && !earlier_range
            && !taken.contains(&block)
            && capacity(&pieces(set, block, exclude, reserved)) > 0
        {
            return Some(block);
        }
        visited = visited.saturating_add(step);
        index = (index + step) % total;
    }
    None
}

fn spans_overlap(range: &Range, lo: u128, hi: u128) -> bool {
    addr::to_u128(range.range_start) <= hi && addr::to_u128(range.range_end) >= lo
}

/// Which range, and which block of it, has overall index `index`.
fn locate(counts: &[u128], mut index: u128) -> (usize, u128) {
    for (i, c) in counts.iter().enumerate() {
        if index < *c {
            return (i, index);
        }
        index -= c;
    }
    (counts.len().saturating_sub(1), 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use host_local::range::RangeSpec;

    fn set(specs: &[(&str, Option<&str>, Option<&str>)]) -> RangeSet {
        let specs: Vec<RangeSpec> = specs
            .iter()
            .map(|(subnet, start, end)| RangeSpec {
                subnet: Some(subnet.to_string()),
                range_start: start.map(str::to_string),
                range_end: end.map(str::to_string),
                gateway: None,
            })
            .collect();
        RangeSet::from_specs(&specs).unwrap()
    }

    fn net(s: &str) -> IpNetwork {
        s.parse().unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_block_hands_out_its_share_of_the_range_minus_gateway_and_exclusions() {
        let s = set(&[("10.0.0.0/24", None, Some("10.0.0.100"))]);
        let first = pieces(&s, net("10.0.0.0/26"), &[], &[]);
        // .1 is the gateway, .0 the network address.
        assert_eq!(capacity(&first), 62);
        let last = pieces(&s, net("10.0.0.64/26"), &[], &[]);
        assert_eq!(capacity(&last), 37, "64..=100");
        assert!(pieces(&s, net("10.0.0.128/26"), &[], &[]).is_empty());

        let cut = pieces(
            &s,
            net("10.0.0.0/26"),
            &[net("10.0.0.8/29"), net("10.0.0.20/32")],
            &[ip("10.0.0.30")],
        );
        assert_eq!(capacity(&cut), 62 - 8 - 1 - 1);
        let set = node_range_set(cut).unwrap();
        let handed: Vec<IpAddr> = set.iter_from(None).map(|(ip, _)| ip).collect();
        assert_eq!(handed.len(), 52);
        for bad in [
            "10.0.0.1",
            "10.0.0.8",
            "10.0.0.15",
            "10.0.0.20",
            "10.0.0.30",
        ] {
            assert!(!handed.contains(&ip(bad)), "{bad}");
        }
        assert_eq!(
            set.range_for(ip("10.0.0.2")).unwrap().subnet,
            net("10.0.0.0/24")
        );
    }

    #[test]
    fn free_blocks_skip_taken_excluded_and_empty_ones_and_run_out() {
        let s = set(&[("10.0.0.0/24", None, None)]);
        let mut taken = HashSet::new();
        let mut seen = Vec::new();
        while let Some(b) = free_block(&s, 26, "node-a", &taken, &[net("10.0.0.128/26")], &[]) {
            assert!(!seen.contains(&b));
            seen.push(b);
            taken.insert(b);
        }
        seen.sort_by_key(|b| b.ip());
        assert_eq!(
            seen,
            vec![
                net("10.0.0.0/26"),
                net("10.0.0.64/26"),
                net("10.0.0.192/26")
            ]
        );

        // A block whose every address is reserved hands out nothing.
        let s = set(&[("10.0.0.0/29", None, None)]);
        let reserved: Vec<IpAddr> = (2..=6).map(|i| ip(&format!("10.0.0.{i}"))).collect();
        assert_eq!(
            free_block(&s, 29, "n", &HashSet::new(), &[], &reserved),
            None
        );
        assert_eq!(
            free_block(&s, 29, "n", &HashSet::new(), &[], &reserved[1..]),
            Some(net("10.0.0.0/29"))
        );
    }

    #[test]
    fn nodes_start_at_different_blocks_and_huge_exclusions_are_skipped_at_once() {
        let s = set(&[("10.0.0.0/16", None, None)]);
        let starts: HashSet<IpNetwork> = (0..20)
            .filter_map(|i| free_block(&s, 26, &format!("node-{i}"), &HashSet::new(), &[], &[]))
            .collect();
        assert!(starts.len() >= 15, "{starts:?}");

        let v6 = set(&[("fd00::/48", None, None)]);
        let huge = [net("fd00::/49")];
        let b = free_block(&v6, 122, "n", &HashSet::new(), &huge, &[]).unwrap();
        assert!(!huge[0].contains(b.ip()));
        assert_eq!(b.prefix(), 122);
    }

    #[test]
    fn block_of_aligns() {
        assert_eq!(block_of(ip("10.0.0.77"), 26), net("10.0.0.64/26"));
        assert_eq!(block_of(ip("fd00::1:85"), 122), net("fd00::1:80/122"));
    }
}
