//! Unit tests without root: a test process that is not root enters a user,
//! network and mount namespace of its own before its first test runs, as
//! `unshare -rn` would, so `cargo test --lib` needs no privileges.
//!
//! Inside, the process is root of its own user namespace: it may make
//! network namespaces, links, addresses, routes, rules and nftables tables,
//! all in namespaces that go away with it, and `ip netns add` works because
//! `/run` is a tmpfs of that mount namespace. Run as root (CI), nothing
//! changes: tests make their namespaces in the machine's, as always.
//!
//! Why at process start (an `.init_array` entry, [`crate::unit_tests_without_root`]):
//! `unshare(CLONE_NEWUSER)` is refused to a process with more than one
//! thread, and the test harness starts its threads before any test. The
//! entry is compiled only into a crate's unit-test binary (`#[cfg(test)]`);
//! plugins never run it.

use std::fs;

use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::unistd::{getgid, getuid, Uid};

/// Whether this process is in the machine's own user namespace (real
/// root can do there what no user namespace allows: mount procfs, say).
pub fn in_initial_user_namespace() -> bool {
    fs::read_to_string("/proc/self/uid_map").is_ok_and(|map| is_identity_map(&map))
}

/// The initial namespace maps every id to itself: `0 0 4294967295`.
fn is_identity_map(map: &str) -> bool {
    map.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"]
}

/// Enters a user + network + mount namespace of the process's own unless it
/// runs as root. Called once, before `main`, by the entry that
/// [`crate::unit_tests_without_root`] makes; it prints why when it cannot
/// (user namespaces disabled), and the tests that need them fail with EPERM.
pub fn enter_private_namespaces_unless_root() {
    if Uid::effective().is_root() {
        return;
    }
    if let Err(why) = enter_private_namespaces() {
        eprintln!(
            "unit tests as a user: no namespace of their own ({why}); tests that need one fail"
        );
    }
}

fn enter_private_namespaces() -> Result<(), String> {
    let (uid, gid) = (getuid(), getgid());
    unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNET | CloneFlags::CLONE_NEWNS)
        .map_err(|e| format!("unshare: {e}"))?;
    // The kernel wants setgroups denied before an unprivileged gid_map.
    for (file, text) in [
        ("/proc/self/setgroups", "deny".to_string()),
        ("/proc/self/uid_map", format!("0 {uid} 1")),
        ("/proc/self/gid_map", format!("0 {gid} 1")),
    ] {
        fs::write(file, text).map_err(|e| format!("{file}: {e}"))?;
    }
    // Nothing mounted here reaches the machine's mount namespace, and
    // `ip netns add` gets a /run/netns of its own.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| format!("making / private: {e}"))?;
    mount(
        Some("tmpfs"),
        "/run",
        Some("tmpfs"),
        MsFlags::empty(),
        Some("mode=0755"),
    )
    .map_err(|e| format!("tmpfs on /run: {e}"))?;
    Ok(())
}

/// Makes the calling crate's unit-test binary enter namespaces of its own
/// when it does not run as root ([`enter_private_namespaces_unless_root`]).
/// Use once, in the crate root: `#[cfg(test)] libcni::unit_tests_without_root!();`
#[macro_export]
macro_rules! unit_tests_without_root {
    () => {
        #[used]
        #[link_section = ".init_array"]
        static ENTER_PRIVATE_NAMESPACES_UNLESS_ROOT: extern "C" fn() = {
            extern "C" fn enter() {
                $crate::test_userns::enter_private_namespaces_unless_root();
            }
            enter
        };
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_initial_namespace_is_told_by_its_identity_map() {
        assert!(is_identity_map("         0          0 4294967295\n"));
        assert!(!is_identity_map("         0       1000          1\n"));
        assert!(!is_identity_map(""));
    }

    /// Whoever runs the tests, they can make a network namespace: root in
    /// the machine's user namespace, anyone else in the one entered at
    /// start.
    #[test]
    fn a_test_process_can_make_a_network_namespace() {
        let made = crate::netlink::test_support::in_private_netns(|| {
            fs::read_link("/proc/thread-self/ns/net").map(|link| link.display().to_string())
        });
        let outer = fs::read_link("/proc/self/ns/net").unwrap();
        assert_ne!(made.unwrap(), outer.display().to_string());
    }
}
