//! The host-local store reader over any file contents: lease files (ours,
//! the reference's, old, damaged), index entries, the index stamp and the
//! round-robin file, then the operations of ADD, DEL and GC on that store.
//!
//! Input: up to five parts separated by NUL bytes: the lease of 10.0.0.2,
//! the lease of 10.0.0.3, the index entry of `c`/`eth0`, the index stamp,
//! `last_reserved_ip.0`. Nothing may panic, and the store must keep its
//! word: an address reported held by `c`/`eth0` has a lease naming it;
//! after a release `c`/`eth0` holds nothing; a fresh reservation is found
//! again; GC with nothing valid leaves no lease.

#![no_main]

use std::fs;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use host_local::index::INDEX_DIR;
use host_local::lease::{Attachment, LeaseOwner};
use host_local::store::Store;
use libfuzzer_sys::fuzz_target;

const NETWORK: &str = "fuzznet";

/// One data folder for the whole run, emptied before each input: in
/// memory when /dev/shm is there (several times faster), named after the
/// process so that `fuzz-smoke.sh` can remove it afterwards.
fn data_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("cni-fuzz-store-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("data dir");
        dir
    })
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("constant address")
}

fn lay_out(store_dir: &Path, parts: &[&[u8]]) {
    let _ = fs::remove_dir_all(store_dir);
    fs::create_dir_all(store_dir.join(INDEX_DIR)).expect("store dir");
    let files = [
        store_dir.join("10.0.0.2"),
        store_dir.join("10.0.0.3"),
        store_dir.join(INDEX_DIR).join("c:eth0"),
        store_dir.join(INDEX_DIR).join("stamp"),
        store_dir.join("last_reserved_ip.0"),
    ];
    for (path, content) in files.iter().zip(parts) {
        fs::write(path, content).expect("write store file");
    }
}

fuzz_target!(|data: &[u8]| {
    let parts: Vec<&[u8]> = data.splitn(5, |b| *b == 0).collect();
    let store_dir = data_dir().join(NETWORK);
    lay_out(&store_dir, &parts);
    // Owners as the leases name them, read the way the store reads them.
    let _ = parts.iter().map(|p| LeaseOwner::parse(p)).count();

    let store = Store::open(data_dir(), NETWORK, Duration::from_secs(5)).expect("open");
    let attachment = Attachment::new("c", "eth0").expect("valid attachment");
    let Ok(mut locked) = store.lock(1) else {
        return;
    };
    if let Ok(held) = locked.leases_of(&attachment) {
        for held_ip in held {
            let content = fs::read(store_dir.join(held_ip.to_string())).unwrap_or_default();
            let owner = LeaseOwner::parse(&content);
            assert!(
                owner
                    .as_ref()
                    .is_some_and(|o| o.is_exactly(&attachment) || o.is_legacy_of(&attachment)),
                "{held_ip} reported held by c/eth0, but its lease names {owner:?}"
            );
        }
    }
    let _ = locked.holds_any(&attachment);
    if locked.release(&attachment).is_ok() {
        let exact = LeaseOwner::for_attachment(&attachment);
        if let Ok(leases) = locked.scan() {
            assert!(
                !leases.iter().any(|l| l.owner.as_ref() == Some(&exact)),
                "c/eth0 still holds a lease after its release: {leases:?}"
            );
        }
    }
    let other = Attachment::new("other", "eth0").expect("valid attachment");
    if let Ok(true) = locked.reserve(&other, ip("10.0.0.4"), 0) {
        let held = locked.leases_of(&other).expect("lookup after reserve");
        assert!(
            held.contains(&ip("10.0.0.4")),
            "fresh lease not found: {held:?}"
        );
    }
    if locked.gc(|_| false).is_ok() {
        let left = locked.scan().unwrap_or_default();
        assert!(left.is_empty(), "GC with nothing valid left {left:?}");
    }
});
