use super::*;

use std::os::unix::fs::PermissionsExt;

use crate::index::INDEX_DIR;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn att(id: &str, ifname: &str) -> Attachment {
    Attachment::new(id, ifname).unwrap()
}

fn open(data_dir: &Path) -> Store {
    Store::open(data_dir, "mynet", Duration::from_secs(5)).unwrap()
}

/// Writes a lease the way the reference does (no index update), including
/// its `last_reserved_ip` rewrite.
fn foreign_reserve(store: &Store, addr: &str, content: &str) {
    fs::write(store.dir().join(addr), content).unwrap();
    fs::write(store.dir().join("last_reserved_ip.0"), addr).unwrap();
}

fn lease_names(store: &Store) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(store.dir())
        .unwrap()
        .map(|d| d.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.parse::<IpAddr>().is_ok())
        .collect();
    names.sort();
    names
}

#[test]
fn reserve_writes_the_reference_layout() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    assert_eq!(store.dir(), dir.path().join("mynet"));
    let mut locked = store.lock(2).unwrap();
    assert!(locked
        .reserve(&att("dummy", "eth0"), ip("10.1.2.2"), 0)
        .unwrap());
    assert!(locked
        .reserve(&att("dummy", "eth0"), ip("2001:db8:1::2"), 1)
        .unwrap());
    assert!(!locked
        .reserve(&att("other", "eth0"), ip("10.1.2.2"), 0)
        .unwrap());
    drop(locked);

    let lease = store.dir().join("10.1.2.2");
    assert_eq!(fs::read_to_string(&lease).unwrap(), "dummy\r\neth0");
    assert_eq!(
        fs::metadata(&lease).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        fs::read_to_string(store.dir().join("2001:db8:1::2")).unwrap(),
        "dummy\r\neth0"
    );
    assert_eq!(
        fs::read_to_string(store.dir().join("last_reserved_ip.0")).unwrap(),
        "10.1.2.2"
    );
    assert_eq!(
        fs::read_to_string(store.dir().join("last_reserved_ip.1")).unwrap(),
        "2001:db8:1::2"
    );
    assert!(store.dir().join("lock").is_file());
    assert_eq!(
        fs::metadata(store.dir()).unwrap().permissions().mode() & 0o777,
        0o755
    );
    assert_eq!(store.last_reserved_ip(0), Some(ip("10.1.2.2")));
    assert_eq!(store.last_reserved_ip(7), None);
}

#[test]
fn release_removes_only_the_attachment_s_leases() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut locked = store.lock(1).unwrap();
    locked
        .reserve(&att("dummy", "eth0"), ip("10.1.2.2"), 0)
        .unwrap();
    locked
        .reserve(&att("dummy", "eth1"), ip("10.1.2.3"), 0)
        .unwrap();
    locked
        .reserve(&att("other", "eth0"), ip("10.1.2.4"), 0)
        .unwrap();
    assert_eq!(
        locked.release(&att("dummy", "eth0")).unwrap(),
        [ip("10.1.2.2")]
    );
    assert_eq!(lease_names(&store), ["10.1.2.3", "10.1.2.4"]);
    // Unknown attachments and repeated releases are no error.
    assert!(locked.release(&att("dummy", "eth0")).unwrap().is_empty());
    assert!(locked.release(&att("nobody", "eth0")).unwrap().is_empty());
    assert!(locked.holds_any(&att("dummy", "eth1")).unwrap());
    assert!(!locked.holds_any(&att("dummy", "eth0")).unwrap());
}

#[test]
fn reads_newline_and_legacy_leases() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    foreign_reserve(&store, "10.1.2.5", "lf\neth0");
    foreign_reserve(&store, "10.1.2.6", "legacy");
    foreign_reserve(&store, "10.1.2.7", "  spaced\r\neth0\n ");
    let mut locked = store.lock(1).unwrap();
    assert_eq!(
        locked.leases_of(&att("lf", "eth0")).unwrap(),
        [ip("10.1.2.5")]
    );
    assert!(locked.holds_any(&att("legacy", "eth3")).unwrap());
    assert_eq!(
        locked.leases_of(&att("legacy", "eth0")).unwrap(),
        [ip("10.1.2.6")]
    );
    assert!(locked.holds_any(&att("spaced", "eth0")).unwrap());
    assert_eq!(
        locked.release(&att("lf", "eth0")).unwrap(),
        [ip("10.1.2.5")]
    );
    assert_eq!(
        locked.release(&att("legacy", "eth0")).unwrap(),
        [ip("10.1.2.6")]
    );
    assert_eq!(
        locked.release(&att("spaced", "eth0")).unwrap(),
        [ip("10.1.2.7")]
    );
    assert!(lease_names(&store).is_empty());
}

#[test]
fn legacy_leases_go_only_when_the_attachment_holds_nothing_itself() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    foreign_reserve(&store, "10.1.2.6", "dummy");
    let mut locked = store.lock(1).unwrap();
    locked
        .reserve(&att("dummy", "eth0"), ip("10.1.2.2"), 0)
        .unwrap();
    assert_eq!(
        locked.release(&att("dummy", "eth0")).unwrap(),
        [ip("10.1.2.2")]
    );
    assert_eq!(lease_names(&store), ["10.1.2.6"]);
    assert_eq!(
        locked.release(&att("dummy", "eth0")).unwrap(),
        [ip("10.1.2.6")]
    );
    assert!(lease_names(&store).is_empty());
}

#[test]
fn lookups_and_releases_stay_off_the_directory_scan() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    {
        let mut locked = store.lock(1).unwrap();
        for i in 0..2000u32 {
            let addr = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            assert!(locked
                .reserve(&att(&format!("c{i}"), "eth0"), addr, 0)
                .unwrap());
        }
        assert_eq!(locked.stats().directory_scans, 1, "only the first rebuild");
    }
    for round in 0..3 {
        let mut locked = store.lock(1).unwrap();
        let id = format!("c{}", round * 7);
        assert!(locked.holds_any(&att(&id, "eth0")).unwrap());
        assert_eq!(locked.leases_of(&att(&id, "eth0")).unwrap().len(), 1);
        assert_eq!(locked.release(&att(&id, "eth0")).unwrap().len(), 1);
        assert!(locked.release(&att("unknown", "eth0")).unwrap().is_empty());
        assert!(locked
            .reserve(
                &att(&format!("new{round}"), "eth0"),
                ip(&format!("10.9.0.{round}")),
                0
            )
            .unwrap());
        assert_eq!(
            locked.stats(),
            StoreStats::default(),
            "round {round}: no directory read"
        );
    }
}

#[test]
fn a_foreign_allocation_is_found_after_one_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .lock(1)
        .unwrap()
        .reserve(&att("ours", "eth0"), ip("10.1.2.2"), 0)
        .unwrap();
    // The reference plugin allocates without knowing about the index.
    foreign_reserve(&store, "10.1.2.3", "theirs\r\neth0");
    let mut locked = store.lock(1).unwrap();
    assert_eq!(locked.stats().index_rebuilds, 1);
    assert_eq!(
        locked.release(&att("theirs", "eth0")).unwrap(),
        [ip("10.1.2.3")]
    );
    drop(locked);
    let locked = store.lock(1).unwrap();
    assert_eq!(locked.stats().index_rebuilds, 0, "trusted again");
}

#[test]
fn a_foreign_rewrite_of_last_reserved_alone_is_noticed() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .lock(1)
        .unwrap()
        .reserve(&att("ours", "eth0"), ip("10.1.2.2"), 0)
        .unwrap();
    fs::write(store.dir().join("last_reserved_ip.0"), "10.1.2.9").unwrap();
    assert_eq!(store.lock(1).unwrap().stats().index_rebuilds, 1);
}

#[test]
fn stale_hints_never_release_someone_else_s_address() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .lock(1)
        .unwrap()
        .reserve(&att("a", "eth0"), ip("10.1.2.2"), 0)
        .unwrap();
    // Released elsewhere, then taken by another holder.
    fs::remove_file(store.dir().join("10.1.2.2")).unwrap();
    fs::write(store.dir().join("10.1.2.2"), "b\r\neth0").unwrap();
    let mut locked = store.lock(1).unwrap();
    assert!(!locked.holds_any(&att("a", "eth0")).unwrap());
    assert!(locked.release(&att("a", "eth0")).unwrap().is_empty());
    assert_eq!(lease_names(&store), ["10.1.2.2"]);
    assert!(locked.holds_any(&att("b", "eth0")).unwrap());
}

#[test]
fn a_hint_without_a_lease_is_harmless() {
    // What a crash between the index update and the lease creation leaves.
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut locked = store.lock(1).unwrap();
    let owner = LeaseOwner::for_attachment(&att("a", "eth0"));
    locked
        .index
        .as_ref()
        .unwrap()
        .set_entry(&owner, &[ip("10.1.2.9")])
        .unwrap();
    assert!(!locked.holds_any(&att("a", "eth0")).unwrap());
    assert!(locked.release(&att("a", "eth0")).unwrap().is_empty());
    assert!(locked
        .reserve(&att("b", "eth0"), ip("10.1.2.9"), 0)
        .unwrap());
    assert!(locked.holds_any(&att("b", "eth0")).unwrap());
    assert!(!locked.holds_any(&att("a", "eth0")).unwrap());
}

#[test]
fn a_damaged_or_deleted_index_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .lock(1)
        .unwrap()
        .reserve(&att("a", "eth0"), ip("10.1.2.2"), 0)
        .unwrap();
    fs::write(store.dir().join(INDEX_DIR).join("a:eth0"), "junk").unwrap();
    let mut locked = store.lock(1).unwrap();
    assert_eq!(locked.release(&att("a", "eth0")).unwrap(), [ip("10.1.2.2")]);
    locked
        .reserve(&att("b", "eth0"), ip("10.1.2.3"), 0)
        .unwrap();
    drop(locked);

    fs::remove_dir_all(store.dir().join(INDEX_DIR)).unwrap();
    let mut locked = store.lock(1).unwrap();
    assert_eq!(locked.stats().index_rebuilds, 1);
    assert_eq!(locked.release(&att("b", "eth0")).unwrap(), [ip("10.1.2.3")]);
}

#[test]
fn without_a_usable_index_every_lookup_reads_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    // A file where the index directory should be: the index cannot open.
    fs::write(store.dir().join(INDEX_DIR), "not a directory").unwrap();
    foreign_reserve(&store, "10.1.2.3", "theirs\r\neth0");
    let mut locked = store.lock(1).unwrap();
    assert!(!locked.uses_index());
    assert!(locked
        .reserve(&att("ours", "eth0"), ip("10.1.2.2"), 0)
        .unwrap());
    assert_eq!(
        locked.leases_of(&att("ours", "eth0")).unwrap(),
        [ip("10.1.2.2")]
    );
    assert_eq!(
        locked.release(&att("theirs", "eth0")).unwrap(),
        [ip("10.1.2.3")]
    );
    assert!(locked.stats().directory_scans >= 2);
    drop(locked);
    // Once it can be created again it is rebuilt and holds what is there.
    fs::remove_file(store.dir().join(INDEX_DIR)).unwrap();
    let mut locked = store.lock(1).unwrap();
    assert!(locked.uses_index());
    assert_eq!(locked.stats().index_rebuilds, 1);
    assert_eq!(
        locked.release(&att("ours", "eth0")).unwrap(),
        [ip("10.1.2.2")]
    );
}

#[test]
fn release_ips_leaves_other_holders_and_earlier_leases_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut locked = store.lock(1).unwrap();
    locked
        .reserve(&att("a", "eth0"), ip("10.1.2.2"), 0)
        .unwrap();
    locked
        .reserve(&att("a", "eth0"), ip("10.1.3.2"), 0)
        .unwrap();
    locked
        .reserve(&att("b", "eth0"), ip("10.1.4.2"), 0)
        .unwrap();
    let released = locked
        .release_ips(
            &att("a", "eth0"),
            &[ip("10.1.3.2"), ip("10.1.4.2"), ip("10.1.5.2")],
        )
        .unwrap();
    assert_eq!(released, [ip("10.1.3.2")]);
    assert_eq!(lease_names(&store), ["10.1.2.2", "10.1.4.2"]);
    assert_eq!(
        locked.leases_of(&att("a", "eth0")).unwrap(),
        [ip("10.1.2.2")]
    );
}

#[test]
fn gc_keeps_valid_attachments_and_their_legacy_leases_only() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    {
        let mut locked = store.lock(1).unwrap();
        locked
            .reserve(&att("keep", "eth0"), ip("10.1.2.2"), 0)
            .unwrap();
        locked
            .reserve(&att("keep", "eth1"), ip("10.1.2.3"), 0)
            .unwrap();
        locked
            .reserve(&att("gone", "eth0"), ip("10.1.2.4"), 0)
            .unwrap();
    }
    foreign_reserve(&store, "10.1.2.5", "keep");
    foreign_reserve(&store, "10.1.2.6", "gone");
    foreign_reserve(&store, "10.1.2.7", "lf\neth0");
    foreign_reserve(&store, "10.1.2.8", "");
    fs::write(store.dir().join("notes.txt"), "gone\r\neth0").unwrap();
    fs::create_dir(store.dir().join("10.1.2.9")).unwrap();

    let mut locked = store.lock(1).unwrap();
    let report = locked
        .gc(|owner| match owner {
            LeaseOwner::Attachment {
                container_id,
                ifname,
            } => ifname == "eth0" && (container_id == "keep" || container_id == "lf"),
            LeaseOwner::Container(id) => id == "keep",
        })
        .unwrap();
    assert!(report.errors.is_empty());
    let mut released: Vec<String> = report.released.iter().map(|l| l.ip.to_string()).collect();
    released.sort();
    assert_eq!(released, ["10.1.2.3", "10.1.2.4", "10.1.2.6", "10.1.2.8"]);
    assert_eq!(report.kept, 3);
    assert_eq!(
        lease_names(&store),
        ["10.1.2.2", "10.1.2.5", "10.1.2.7", "10.1.2.9"]
    );
    for kept in ["lock", "last_reserved_ip.0", "notes.txt"] {
        assert!(store.dir().join(kept).exists(), "{kept}");
    }
    // The index agrees with what is left.
    assert!(!locked.holds_any(&att("gone", "eth0")).unwrap());
    // keep/eth1 lost its own lease; the container's legacy lease remains.
    assert_eq!(
        locked.leases_of(&att("keep", "eth1")).unwrap(),
        [ip("10.1.2.5")]
    );
    assert_eq!(
        locked.leases_of(&att("keep", "eth0")).unwrap(),
        [ip("10.1.2.2"), ip("10.1.2.5")]
    );
    drop(locked);
    assert_eq!(store.lock(1).unwrap().stats().index_rebuilds, 0);
}

#[test]
fn gc_with_nothing_valid_empties_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut locked = store.lock(1).unwrap();
    locked
        .reserve(&att("a", "eth0"), ip("10.1.2.2"), 0)
        .unwrap();
    let report = locked.gc(|_| false).unwrap();
    assert_eq!(report.released.len(), 1);
    assert!(lease_names(&store).is_empty());
}

#[test]
fn network_names_cannot_leave_the_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    for name in ["..", ".", "../escape", "a/b", "/abs", "", ".hidden"] {
        let e = Store::open(&data_dir, name, Duration::from_secs(1)).unwrap_err();
        assert!(matches!(e, StoreError::InvalidNetworkName(_)), "{name:?}");
        assert!(matches!(
            Store::open_existing(&data_dir, name, Duration::from_secs(1)),
            Err(StoreError::InvalidNetworkName(_))
        ));
    }
    assert!(!data_dir.exists(), "nothing was created");
    assert!(!dir.path().join("escape").exists());
}

#[test]
fn open_existing_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    assert!(
        Store::open_existing(dir.path(), "mynet", Duration::from_secs(1))
            .unwrap()
            .is_none()
    );
    assert!(!dir.path().join("mynet").exists());
    open(dir.path());
    assert!(
        Store::open_existing(dir.path(), "mynet", Duration::from_secs(1))
            .unwrap()
            .is_some()
    );
}

#[test]
fn a_held_lock_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), "mynet", Duration::from_millis(100)).unwrap();
    let held = store.lock(1).unwrap();
    let e = store.lock(1).unwrap_err();
    assert!(
        matches!(e, StoreError::Lock(LockError::Timeout { .. })),
        "{e}"
    );
    drop(held);
    store.lock(1).unwrap();
}

#[test]
fn free_addresses_for_status() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    assert!(store.is_free(ip("10.1.2.2")).unwrap());
    store
        .lock(1)
        .unwrap()
        .reserve(&att("a", "eth0"), ip("10.1.2.2"), 0)
        .unwrap();
    assert!(!store.is_free(ip("10.1.2.2")).unwrap());
}

#[test]
fn reference_style_reader_sees_no_lease_in_index_files() {
    // What the reference compares: trimmed file content against
    // "<id>\r\n<ifname>" and "<id>", for every regular file under the
    // network directory, index files included.
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .lock(1)
        .unwrap()
        .reserve(&att("dummy", "eth0"), ip("10.1.2.2"), 0)
        .unwrap();
    let mut matches = Vec::new();
    let mut pending = vec![store.dir().to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                pending.push(entry.path());
                continue;
            }
            let content = fs::read_to_string(entry.path()).unwrap_or_default();
            let trimmed = content.trim();
            if trimmed == "dummy\r\neth0" || trimmed == "dummy" {
                matches.push(entry.path());
            }
        }
    }
    assert_eq!(matches, [store.dir().join("10.1.2.2")]);
}

#[test]
fn a_damaged_entry_is_not_overwritten_on_reserve() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .lock(2)
        .unwrap()
        .reserve(&att("a", "eth0"), ip("10.1.2.2"), 0)
        .unwrap();
    fs::write(store.dir().join(INDEX_DIR).join("a:eth0"), "junk").unwrap();
    let mut locked = store.lock(2).unwrap();
    // Rewritten in place, which no stamp records: the reservation (a
    // requested address, with no lookup before it) is what finds it.
    assert!(locked
        .reserve(&att("a", "eth0"), ip("2001:db8::2"), 1)
        .unwrap());
    assert_eq!(
        locked.release(&att("a", "eth0")).unwrap(),
        [ip("10.1.2.2"), ip("2001:db8::2")]
    );
    assert!(lease_names(&store).is_empty());
}

#[test]
fn a_damaged_entry_found_while_the_stamp_is_current_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    {
        let mut locked = store.lock(2).unwrap();
        locked
            .reserve(&att("a", "eth0"), ip("10.1.2.2"), 0)
            .unwrap();
        // Damaged in place while we hold the lock, so no stamp can tell.
        fs::write(store.dir().join(INDEX_DIR).join("a:eth0"), "junk").unwrap();
        assert!(locked
            .reserve(&att("a", "eth0"), ip("2001:db8::2"), 1)
            .unwrap());
        assert_eq!(
            locked.stats().index_rebuilds,
            2,
            "first use, then the damage"
        );
    }
    let mut locked = store.lock(2).unwrap();
    assert_eq!(
        locked.release(&att("a", "eth0")).unwrap(),
        [ip("10.1.2.2"), ip("2001:db8::2")]
    );
}

/// Regression (resilience tests, SIGKILL during ADD): the lease file used
/// to be created empty and written after, so a kill in between left an
/// empty lease that DEL could not find. Both ways of creating it now
/// publish the file whole, refuse a taken address without touching it, and
/// leave nothing else in the directory.
#[test]
fn leases_are_created_whole_or_not_at_all() {
    type Create = fn(&Path, &Path, &[u8]) -> io::Result<bool>;
    let ways: [(&str, Create); 3] = [
        ("chosen", create_lease),
        ("unnamed file", create_lease_from_tmpfile),
        ("named file", create_lease_from_named_tmp),
    ];
    for (way, create) in ways {
        let dir = tempfile::tempdir().unwrap();
        let lease = dir.path().join("10.1.2.3");
        assert!(create(dir.path(), &lease, b"a\r\neth0").unwrap(), "{way}");
        assert_eq!(fs::read_to_string(&lease).unwrap(), "a\r\neth0", "{way}");
        assert_eq!(
            fs::metadata(&lease).unwrap().permissions().mode() & 0o777,
            0o600,
            "{way}"
        );
        assert!(!create(dir.path(), &lease, b"b\r\neth0").unwrap(), "{way}");
        assert_eq!(fs::read_to_string(&lease).unwrap(), "a\r\neth0", "{way}");
        let names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|d| d.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["10.1.2.3"], "{way}");
    }
}

#[test]
fn the_named_file_way_replaces_a_temporary_file_left_by_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join(LEASE_TMP),
        "stale content, longer than a lease",
    )
    .unwrap();
    let lease = dir.path().join("10.1.2.3");
    assert!(create_lease_from_named_tmp(dir.path(), &lease, b"a\r\neth0").unwrap());
    assert_eq!(fs::read_to_string(&lease).unwrap(), "a\r\neth0");
    assert!(!dir.path().join(LEASE_TMP).exists());
}
