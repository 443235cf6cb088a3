//! A range set: the ranges one address of a result may come from, all of
//! one family and disjoint, and the round-robin walk over them.

use std::fmt;
use std::net::IpAddr;

use libcni::IpFamily;

use crate::addr;
use crate::range::{Range, RangeError, RangeSpec};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeSetError {
    #[error("empty range set")]
    Empty,
    #[error("mixed address families")]
    MixedFamilies,
    #[error("subnets {0} and {1} overlap")]
    Overlap(String, String),
    #[error(transparent)]
    Range(#[from] RangeError),
}

/// A validated, non-empty range set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeSet {
    ranges: Vec<Range>,
}

impl RangeSet {
    pub fn from_specs(specs: &[RangeSpec]) -> Result<RangeSet, RangeSetError> {
        if specs.is_empty() {
            return Err(RangeSetError::Empty);
        }
        let ranges = specs
            .iter()
            .map(Range::from_spec)
            .collect::<Result<Vec<_>, _>>()?;
        RangeSet::from_ranges(ranges)
    }

    pub fn from_ranges(ranges: Vec<Range>) -> Result<RangeSet, RangeSetError> {
        let Some(first) = ranges.first() else {
            return Err(RangeSetError::Empty);
        };
        let family = first.family();
        if ranges.iter().any(|r| r.family() != family) {
            return Err(RangeSetError::MixedFamilies);
        }
        for (i, a) in ranges.iter().enumerate() {
            for b in ranges.iter().skip(i + 1) {
                if a.overlaps(b) {
                    return Err(RangeSetError::Overlap(a.to_string(), b.to_string()));
                }
            }
        }
        Ok(RangeSet { ranges })
    }

    pub fn ranges(&self) -> &[Range] {
        &self.ranges
    }

    pub fn family(&self) -> IpFamily {
        // Construction guarantees at least one range.
        self.ranges.first().map_or(IpFamily::V4, Range::family)
    }

    /// The range handing out `ip`, if any.
    pub fn range_for(&self, ip: IpAddr) -> Option<&Range> {
        self.ranges.iter().find(|r| r.contains(ip))
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        self.range_for(ip).is_some()
    }

    pub fn overlaps(&self, other: &RangeSet) -> bool {
        self.ranges
            .iter()
            .any(|a| other.ranges.iter().any(|b| a.overlaps(b)))
    }

    /// The round-robin walk: starts just after `last_reserved` when that
    /// address is in the set, otherwise at the first range's start.
    pub fn iter_from(&self, last_reserved: Option<IpAddr>) -> RangeIter<'_> {
        RangeIter::new(self, last_reserved)
    }
}

impl fmt::Display for RangeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

/// Walks every address of a set once, in order, ranges one after the other
/// and back to the first, skipping each range's gateway.
///
/// Starting after the last reserved address makes allocation round-robin:
/// an address released a moment ago is handed out again only once the whole
/// set has been gone through, so a crash-looping container does not get the
/// address its previous instance may still be known by. The last reserved
/// address itself comes last.
#[derive(Debug, Clone)]
pub struct RangeIter<'a> {
    set: &'a RangeSet,
    range_idx: usize,
    /// The position last returned (or the starting point before any).
    cur: Option<IpAddr>,
    /// The first position of the walk; reaching it again ends it.
    first: Option<IpAddr>,
    done: bool,
}

impl<'a> RangeIter<'a> {
    fn new(set: &'a RangeSet, last_reserved: Option<IpAddr>) -> RangeIter<'a> {
        let start = last_reserved.map(addr::canonical).and_then(|last| {
            set.ranges
                .iter()
                .position(|r| r.contains(last))
                .map(|idx| (idx, last))
        });
        match start {
            Some((range_idx, last)) => RangeIter {
                set,
                range_idx,
                cur: Some(last),
                first: None,
                done: false,
            },
            None => RangeIter {
                set,
                range_idx: 0,
                cur: None,
                first: None,
                done: false,
            },
        }
    }

    /// The first address the walk returned or will return first.
    pub fn first(&self) -> Option<IpAddr> {
        self.first
    }
}

impl<'a> Iterator for RangeIter<'a> {
    /// An address and the range it belongs to.
    type Item = (IpAddr, &'a Range);

    fn next(&mut self) -> Option<Self::Item> {
        let ranges = &self.set.ranges;
        let len = ranges.len();
        while !self.done {
            let range = ranges.get(self.range_idx)?;
            let position = match self.cur {
                None => range.range_start,
                Some(cur) if cur == range.range_end => {
                    self.range_idx = (self.range_idx + 1) % len;
                    ranges.get(self.range_idx)?.range_start
                }
                Some(cur) => addr::next(cur),
            };
            self.cur = Some(position);
            match self.first {
                None => self.first = Some(position),
                Some(first) if first == position => {
                    self.done = true;
                    return None;
                }
                Some(_) => {}
            }
            let range = ranges.get(self.range_idx)?;
            if position != range.gateway {
                return Some((position, range));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn set(subnets: &[&str]) -> RangeSet {
        let specs: Vec<RangeSpec> = subnets.iter().map(|s| RangeSpec::new(s)).collect();
        RangeSet::from_specs(&specs).unwrap()
    }

    fn walk(s: &RangeSet, last: Option<&str>) -> Vec<String> {
        s.iter_from(last.map(ip))
            .map(|(a, _)| a.to_string())
            .collect()
    }

    #[test]
    fn membership_and_range_for() {
        let s = set(&["192.168.0.0/24", "172.16.1.0/24"]);
        assert!(s.contains(ip("192.168.0.55")));
        assert_eq!(s.range_for(ip("192.168.0.55")), s.ranges().first());
        assert_eq!(s.range_for(ip("172.16.1.9")), s.ranges().get(1));
        assert_eq!(s.range_for(ip("192.168.99.99")), None);
        assert_eq!(
            s.to_string(),
            "192.168.0.1-192.168.0.254,172.16.1.1-172.16.1.254"
        );
    }

    #[test]
    fn overlaps_inside_a_set_are_refused() {
        let specs = [
            RangeSpec::new("192.168.0.0/20"),
            RangeSpec::new("192.168.2.0/24"),
        ];
        assert_eq!(
            RangeSet::from_specs(&specs).unwrap_err().to_string(),
            "subnets 192.168.0.1-192.168.15.254 and 192.168.2.1-192.168.2.254 overlap"
        );
    }

    #[test]
    fn overlaps_between_sets_are_seen_both_ways() {
        let a = set(&["192.168.0.0/20"]);
        let b = set(&["192.168.2.0/24"]);
        assert!(a.overlaps(&b));
        assert!(b.overlaps(&a));
        assert!(!a.overlaps(&set(&["10.0.0.0/8"])));
    }

    #[test]
    fn empty_and_mixed_sets_are_refused() {
        assert_eq!(RangeSet::from_specs(&[]), Err(RangeSetError::Empty));
        let specs = [
            RangeSpec::new("10.1.0.0/22"),
            RangeSpec::new("2001:db8:5::/64"),
        ];
        assert_eq!(
            RangeSet::from_specs(&specs),
            Err(RangeSetError::MixedFamilies)
        );
    }

    #[test]
    fn walk_from_the_beginning_skips_gateway_and_broadcast() {
        let s = set(&["192.168.1.0/29"]);
        assert_eq!(
            walk(&s, None),
            [
                "192.168.1.2",
                "192.168.1.3",
                "192.168.1.4",
                "192.168.1.5",
                "192.168.1.6"
            ]
        );
    }

    #[test]
    fn walk_after_the_last_address_wraps_to_the_start() {
        let s = set(&["192.168.1.0/29"]);
        assert_eq!(
            walk(&s, Some("192.168.1.6")),
            [
                "192.168.1.2",
                "192.168.1.3",
                "192.168.1.4",
                "192.168.1.5",
                "192.168.1.6"
            ]
        );
    }

    #[test]
    fn walk_from_the_middle_ends_with_the_last_reserved() {
        let s = set(&["192.168.1.0/29"]);
        assert_eq!(
            walk(&s, Some("192.168.1.3")),
            [
                "192.168.1.4",
                "192.168.1.5",
                "192.168.1.6",
                "192.168.1.2",
                "192.168.1.3"
            ]
        );
    }

    #[test]
    fn last_reserved_outside_the_set_starts_at_the_beginning() {
        let s = set(&["10.0.0.0/29"]);
        assert_eq!(
            walk(&s, Some("10.0.0.128")).first().map(String::as_str),
            Some("10.0.0.2")
        );
        assert_eq!(
            walk(&s, Some("2001:db8::1")).first().map(String::as_str),
            Some("10.0.0.2")
        );
    }

    #[test]
    fn walk_crosses_ranges_and_rolls_over() {
        let s = set(&["10.0.0.0/30", "10.0.1.0/30"]);
        assert_eq!(walk(&s, None), ["10.0.0.2", "10.0.1.2"]);
        assert_eq!(walk(&s, Some("10.0.0.2")), ["10.0.1.2", "10.0.0.2"]);
        let s = set(&["10.0.0.0/30", "10.0.1.0/30", "10.0.2.0/30"]);
        assert_eq!(
            walk(&s, Some("10.0.2.2")).first().map(String::as_str),
            Some("10.0.0.2")
        );
    }

    #[test]
    fn after_the_end_of_one_range_the_next_range_start_comes_first() {
        let specs = [
            RangeSpec {
                range_start: Some("192.168.1.0".into()),
                range_end: Some("192.168.1.3".into()),
                ..RangeSpec::new("192.168.1.0/30")
            },
            RangeSpec {
                range_start: Some("192.168.2.0".into()),
                range_end: Some("192.168.2.3".into()),
                ..RangeSpec::new("192.168.2.0/30")
            },
        ];
        let s = RangeSet::from_specs(&specs).unwrap();
        let mut it = s.iter_from(Some(ip("192.168.1.3")));
        assert_eq!(it.next().map(|(a, _)| a), Some(ip("192.168.2.0")));
        assert_eq!(it.first(), Some(ip("192.168.2.0")));
        // Without a last reserved address the walk starts at the first range.
        let mut it = s.iter_from(None);
        assert_eq!(it.next().map(|(a, _)| a), Some(ip("192.168.1.0")));
        assert_eq!(it.first(), Some(ip("192.168.1.0")));
        // Every address except the two gateways (.1), once.
        assert_eq!(s.iter_from(None).count(), 6);
    }

    #[test]
    fn walk_returns_the_range_of_each_address() {
        let s = set(&["10.0.0.0/30", "10.0.1.0/30"]);
        let gateways: Vec<String> = s
            .iter_from(None)
            .map(|(_, r)| r.gateway.to_string())
            .collect();
        assert_eq!(gateways, ["10.0.0.1", "10.0.1.1"]);
    }

    #[test]
    fn single_address_range_that_is_the_gateway_yields_nothing() {
        let specs = [RangeSpec {
            range_start: Some("10.0.0.1".into()),
            range_end: Some("10.0.0.1".into()),
            ..RangeSpec::new("10.0.0.0/24")
        }];
        let s = RangeSet::from_specs(&specs).unwrap();
        assert_eq!(s.iter_from(None).count(), 0);
        assert_eq!(s.iter_from(Some(ip("10.0.0.1"))).count(), 0);
    }

    #[test]
    fn ipv6_walk_reaches_the_all_ones_address() {
        let specs = [RangeSpec {
            range_start: Some("2001:db8::fffe".into()),
            ..RangeSpec::new("2001:db8::/112")
        }];
        let s = RangeSet::from_specs(&specs).unwrap();
        assert_eq!(walk(&s, None), ["2001:db8::fffe", "2001:db8::ffff"]);
    }
}
