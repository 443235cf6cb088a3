use super::*;

use std::fs;
use std::path::Path;
use std::time::Duration;

use crate::range::RangeSpec;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn att(id: &str) -> Attachment {
    Attachment::new(id, "eth0").unwrap()
}

fn set(subnets: &[&str]) -> RangeSet {
    let specs: Vec<RangeSpec> = subnets.iter().map(|s| RangeSpec::new(s)).collect();
    RangeSet::from_specs(&specs).unwrap()
}

/// A store whose leases and last reservation are written the way the
/// reference writes them.
fn store_with(data_dir: &Path, leases: &[&str], last: Option<&str>) -> Store {
    let store = Store::open(data_dir, "net", Duration::from_secs(5)).unwrap();
    for lease in leases {
        fs::write(store.dir().join(lease), "id\r\neth0").unwrap();
    }
    if let Some(last) = last {
        fs::write(store.dir().join("last_reserved_ip.0"), last).unwrap();
    }
    store
}

fn get(store: &Store, s: &RangeSet, id: &str) -> Result<Allocation, AllocError> {
    allocate(&mut store.lock(1).unwrap(), s, 0, &att(id), None)
}

/// Subnets, addresses taken, last reserved address, expected address.
type RoundRobinCase<'a> = (&'a [&'a str], &'a [&'a str], Option<&'a str>, &'a str);

#[test]
fn round_robin_table() {
    let cases: &[RoundRobinCase] = &[
        // fresh start
        (&["10.0.0.0/29"], &[], None, "10.0.0.2"),
        (&["2001:db8:1::0/64"], &[], None, "2001:db8:1::2"),
        (&["10.0.0.0/30"], &[], None, "10.0.0.2"),
        (&["10.0.0.0/29"], &["10.0.0.2"], None, "10.0.0.3"),
        // next address after the last reserved one
        (&["10.0.0.0/29"], &[], Some("10.0.0.5"), "10.0.0.6"),
        (
            &["10.0.0.0/29"],
            &["10.0.0.4", "10.0.0.5"],
            Some("10.0.0.3"),
            "10.0.0.6",
        ),
        // round robin to the beginning
        (
            &["10.0.0.0/29"],
            &["10.0.0.6"],
            Some("10.0.0.5"),
            "10.0.0.2",
        ),
        // last reserved out of range
        (
            &["10.0.0.0/29"],
            &["10.0.0.2"],
            Some("10.0.0.128"),
            "10.0.0.3",
        ),
        // full except the last reserved one: wrap around to it
        (
            &["10.0.0.0/29"],
            &["10.0.0.2", "10.0.0.4", "10.0.0.5", "10.0.0.6"],
            Some("10.0.0.3"),
            "10.0.0.3",
        ),
        // several subnets
        (&["10.0.0.0/30", "10.0.1.0/30"], &[], None, "10.0.0.2"),
        (
            &["10.0.0.0/30", "10.0.1.0/30"],
            &[],
            Some("10.0.0.2"),
            "10.0.1.2",
        ),
        (
            &["10.0.0.0/30", "10.0.1.0/30", "10.0.2.0/30"],
            &[],
            Some("10.0.2.2"),
            "10.0.0.2",
        ),
    ];
    for (idx, (subnets, taken, last, expected)) in cases.iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_with(dir.path(), taken, *last);
        let got = get(&store, &set(subnets), "ID").unwrap_or_else(|e| panic!("case {idx}: {e}"));
        assert_eq!(got.address.ip().to_string(), *expected, "case {idx}");
        // The reservation is recorded where the reference records it.
        assert_eq!(
            fs::read_to_string(store.dir().join(expected)).unwrap(),
            "ID\r\neth0",
            "case {idx}"
        );
        assert_eq!(
            fs::read_to_string(store.dir().join("last_reserved_ip.0")).unwrap(),
            *expected,
            "case {idx}"
        );
    }
}

#[test]
fn never_hands_out_the_broadcast_address() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(dir.path(), &[], None);
    let s = set(&["192.168.1.0/29"]);
    for i in 2..7 {
        let got = get(&store, &s, &format!("ID{i}")).unwrap();
        assert_eq!(got.address.to_string(), format!("192.168.1.{i}/29"));
        assert_eq!(got.gateway, ip("192.168.1.1"));
    }
    let e = get(&store, &s, "ID8").unwrap_err();
    assert!(matches!(e, AllocError::Exhausted(_)), "{e}");
}

#[test]
fn allocates_round_robin_after_release() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(dir.path(), &[], None);
    let s = set(&["192.168.1.0/29"]);
    assert_eq!(
        get(&store, &s, "ID").unwrap().address.to_string(),
        "192.168.1.2/29"
    );
    store.lock(1).unwrap().release(&att("ID")).unwrap();
    assert_eq!(
        get(&store, &s, "ID").unwrap().address.to_string(),
        "192.168.1.3/29"
    );
}

#[test]
fn requested_address_is_reserved() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(dir.path(), &[], None);
    let s = set(&["192.168.1.0/29"]);
    let got = allocate(
        &mut store.lock(1).unwrap(),
        &s,
        0,
        &att("ID"),
        Some(ip("192.168.1.5")),
    )
    .unwrap();
    assert_eq!(got.address.to_string(), "192.168.1.5/29");
    assert_eq!(got.gateway, ip("192.168.1.1"));
}

#[test]
fn requested_address_already_taken() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(dir.path(), &[], None);
    let s = set(&["192.168.1.0/29"]);
    allocate(
        &mut store.lock(1).unwrap(),
        &s,
        0,
        &att("ID"),
        Some(ip("192.168.1.5")),
    )
    .unwrap();
    let e = allocate(
        &mut store.lock(1).unwrap(),
        &s,
        0,
        &att("ID"),
        Some(ip("192.168.1.5")),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "requested IP address 192.168.1.5 is not available in range set 192.168.1.1-192.168.1.6"
    );
}

#[test]
fn requested_address_outside_the_span() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(dir.path(), &[], None);
    let after_end = RangeSet::from_specs(&[RangeSpec {
        range_end: Some("192.168.1.4".into()),
        ..RangeSpec::new("192.168.1.0/29")
    }])
    .unwrap();
    let e = allocate(
        &mut store.lock(1).unwrap(),
        &after_end,
        0,
        &att("ID"),
        Some(ip("192.168.1.5")),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "192.168.1.5 not in range set 192.168.1.1-192.168.1.4"
    );
    let before_start = RangeSet::from_specs(&[RangeSpec {
        range_start: Some("192.168.1.3".into()),
        ..RangeSpec::new("192.168.1.0/29")
    }])
    .unwrap();
    let e = allocate(
        &mut store.lock(1).unwrap(),
        &before_start,
        0,
        &att("ID"),
        Some(ip("192.168.1.2")),
    )
    .unwrap_err();
    assert!(matches!(e, AllocError::NotInRangeSet { .. }), "{e}");
    assert!(!store.dir().join("192.168.1.2").exists());
}

#[test]
fn requested_gateway_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(dir.path(), &[], None);
    let e = allocate(
        &mut store.lock(1).unwrap(),
        &set(&["192.168.1.0/29"]),
        0,
        &att("ID"),
        Some(ip("192.168.1.1")),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "requested ip 192.168.1.1 is subnet's gateway"
    );
}

#[test]
fn out_of_addresses_gives_a_meaningful_error() {
    let cases: &[(&[&str], &[&str])] = &[
        (&["10.0.0.0/30"], &["10.0.0.2"]),
        (
            &["10.0.0.0/29"],
            &["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"],
        ),
        (&["10.0.0.0/30", "10.0.1.0/30"], &["10.0.0.2", "10.0.1.2"]),
    ];
    for (subnets, taken) in cases {
        let dir = tempfile::tempdir().unwrap();
        let store = store_with(dir.path(), taken, None);
        let s = set(subnets);
        let e = get(&store, &s, "ID").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("no IP addresses available in range set"),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            format!("no IP addresses available in range set: {s}")
        );
        assert_eq!(next_free(&store, &s, 0).unwrap(), None);
    }
}

#[test]
fn duplicate_allocation_is_refused_per_range_set() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(dir.path(), &[], None);
    let v4 = set(&["10.1.2.0/24"]);
    let v6 = set(&["2001:db8::/64"]);
    get(&store, &v4, "dummy").unwrap();
    let e = get(&store, &v4, "dummy").unwrap_err();
    assert_eq!(
        e.to_string(),
        "10.1.2.2 has been allocated to dummy, duplicate allocation is not allowed"
    );
    // Another set, another interface or another container is fine.
    allocate(&mut store.lock(2).unwrap(), &v6, 1, &att("dummy"), None).unwrap();
    allocate(
        &mut store.lock(1).unwrap(),
        &v4,
        0,
        &Attachment::new("dummy", "eth1").unwrap(),
        None,
    )
    .unwrap();
    assert_eq!(
        get(&store, &v4, "dummy1").unwrap().address.ip(),
        ip("10.1.2.4")
    );
}

#[test]
fn legacy_lease_of_the_container_counts_as_a_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(dir.path(), &[], None);
    fs::write(store.dir().join("10.1.2.7"), "dummy").unwrap();
    let e = get(&store, &set(&["10.1.2.0/24"]), "dummy").unwrap_err();
    assert!(
        matches!(e, AllocError::Duplicate { ip: found, .. } if found == ip("10.1.2.7")),
        "{e}"
    );
}

#[test]
fn next_free_follows_the_allocation_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(dir.path(), &["10.0.0.2", "10.0.0.3"], Some("10.0.0.2"));
    let s = set(&["10.0.0.0/29"]);
    assert_eq!(next_free(&store, &s, 0).unwrap(), Some(ip("10.0.0.4")));
    assert_eq!(get(&store, &s, "x").unwrap().address.ip(), ip("10.0.0.4"));
}
