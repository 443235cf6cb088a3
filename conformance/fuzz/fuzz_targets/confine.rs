//! The node policy file's parser and the path confinement
//! (`libcni::confine`) over any input: a policy file's bytes, a NUL, then
//! a path as a network configuration would name it. Nothing may panic, and
//! a path accepted for a place must lie strictly inside one of that
//! place's folders, spelled without `.` or `..`, so that it cannot name a
//! file outside them before the links-refusing open even starts.

#![no_main]

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use libcni::confine::{Place, Places, Policy};
use libfuzzer_sys::fuzz_target;

const PLACES: [Place; 4] = [
    Place::Logs,
    Place::DeviceInfo,
    Place::State,
    Place::Credentials,
];

fuzz_target!(|data: &[u8]| {
    let (policy, path) = match data.iter().position(|b| *b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &b"/var/lib/cni/x"[..]),
    };
    let policy = Policy::parse(policy).unwrap_or_default();
    let places = Places::with_policy(policy, "/etc/cni/cni-rs-policy.json");
    let path = Path::new(OsStr::from_bytes(path));
    for place in PLACES {
        let Ok(confined) = places.confine("key", place, path) else {
            continue;
        };
        assert_eq!(confined.path(), path.components().collect::<std::path::PathBuf>());
        assert!(path.is_absolute(), "{path:?}");
        assert!(
            path.components()
                .skip(1)
                .all(|c| matches!(c, Component::Normal(_))),
            "{path:?}"
        );
        assert!(!confined.relative().as_os_str().is_empty(), "{path:?}");
        assert!(
            places.allowed(place).iter().any(|base| base == confined.base()),
            "{path:?} in {:?}",
            confined.base()
        );
    }
});
