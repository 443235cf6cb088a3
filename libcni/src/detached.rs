//! Kernel work whose effect is already in place but whose cleanup makes the
//! calling task wait, finished by a forked child after the caller returns.
//!
//! Two such waits dominate a plugin's DEL on the test VM:
//! - a veth's unregistration: the link is gone from every listing at once,
//!   but `RTM_DELLINK` returns only after two expedited RCU grace periods
//!   and an `rcu_barrier` (10-25 ms);
//! - the close of an nfnetlink socket that deleted rules: they are gone
//!   from the ruleset at commit, the close waits for their freeing after an
//!   RCU grace period (10-16 ms).
//!
//! A third wait needs no request of its own: closing *any* nfnetlink
//! socket (nf_tables, conntrack), even one that only read, makes the kernel
//! finish every nf_tables free pending in that network namespace first. On
//! a node where other pods are being deleted, some are nearly always
//! pending: with a loop of table deletions in the same namespace, 10% of
//! plain closes here took 15-35 ms (the rest 5-15 µs). So such sockets are
//! parked when dropped ([`park`]), and the plugin call ends with
//! [`release_parked`]: one child holds them all while the plugin exits.
//!
//! The child keeps only the descriptors the work needs and closes every
//! other one before anything else, so it never holds the runtime's stdout
//! and stderr pipes (a runtime reads a plugin's output until EOF) nor the
//! plugin's locks. Between fork and exit it makes only async-signal-safe
//! calls, which is what makes forking a process with other threads sound.
//! The child is not waited for: the plugin exits right after, and the child
//! is reaped by whoever inherits it.

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

/// How many descriptors a detached child may keep; a call asking for more
/// gets no child and does its work in the foreground.
pub const MAX_KEPT: usize = 4;

/// How many sockets wait in [`park`] at most: one kept descriptor of the
/// releasing child is its pipe.
pub const MAX_PARKED: usize = MAX_KEPT - 1;

/// Sockets whose close is left to [`release_parked`].
static PARKED: Mutex<Vec<OwnedFd>> = Mutex::new(Vec::new());

/// Keeps a duplicate of `socket` open until [`release_parked`], so that the
/// caller's close of the original releases nothing. When the duplicate
/// cannot be made, nothing is kept: the caller's close is then a plain one.
/// A set that this fills is released at once. The plugin skeleton releases
/// the rest at the end of each call; a long-running user of this library
/// that never calls [`release_parked`] keeps at most [`MAX_PARKED`] - 1
/// sockets open until the next park fills the set.
pub fn park(socket: &impl AsFd) {
    let duplicate = match socket.as_fd().try_clone_to_owned() {
        Ok(fd) => fd,
        Err(e) => {
            log::debug!("cannot park a socket ({e}); it closes in the foreground");
            return;
        }
    };
    let full = {
        let mut parked = PARKED.lock().unwrap_or_else(|poison| poison.into_inner());
        parked.push(duplicate);
        parked.len() >= MAX_PARKED
    };
    if full {
        release_parked();
    }
}

/// Hands every parked socket to one detached child, which closes them once
/// this process has closed its copies, so that whatever their release
/// waits for, this process does not. Where no child can be made, they
/// close here.
pub fn release_parked() {
    let sockets = std::mem::take(&mut *PARKED.lock().unwrap_or_else(|poison| poison.into_inner()));
    if sockets.is_empty() {
        return;
    }
    let Ok((read_end, write_end)) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) else {
        return;
    };
    let keep: Vec<RawFd> = sockets
        .iter()
        .map(AsRawFd::as_raw_fd)
        .chain([read_end.as_raw_fd()])
        .collect();
    let pipe_fd = read_end.as_raw_fd();
    // SAFETY: the child makes only read calls before its exit.
    if let Some(Side::Child) = unsafe { fork_keeping(&keep) } {
        let mut byte = 0u8;
        // Returns at EOF: the parent has closed its copies. The exit then
        // closes the sockets, and waits for what they wait for.
        // SAFETY: plain syscalls on a kept descriptor, and the thread's
        // errno.
        while unsafe { libc::read(pipe_fd, (&mut byte as *mut u8).cast(), 1) } < 0
            && unsafe { *libc::__errno_location() } == libc::EINTR
        {}
        exit_child();
    }
    // With the child holding them, these closes release nothing.
    drop(sockets);
    drop(read_end);
    drop(write_end);
}

/// Which side of [`fork_keeping`] the caller is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Parent,
    Child,
}

/// Forks; in the child, closes every descriptor but `keep`. `None` when
/// fork fails (the caller then does the work itself).
///
/// # Safety
///
/// On [`Side::Child`] the caller may make only async-signal-safe calls
/// (plain syscalls on descriptors and memory prepared before the fork) and
/// must end with [`exit_child`]: no allocation, no locks, no Rust code that
/// could unwind or run destructors.
pub unsafe fn fork_keeping(keep: &[RawFd]) -> Option<Side> {
    if keep.len() > MAX_KEPT {
        log::debug!("cannot keep {} descriptors in a detached child", keep.len());
        return None;
    }
    // Read before the fork: the child's fallback close loop needs a bound.
    let limit = open_files_limit();
    // SAFETY: the caller upholds the child's restrictions.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        log::debug!("fork failed; doing the work in the foreground");
        return None;
    }
    if pid > 0 {
        return Some(Side::Parent);
    }
    // A fixed array keeps the child free of allocation.
    let mut sorted = [libc::c_uint::MAX; MAX_KEPT];
    let kept = keep.len();
    for (slot, fd) in sorted.iter_mut().zip(keep) {
        *slot = libc::c_uint::try_from(*fd).unwrap_or(libc::c_uint::MAX);
    }
    sorted[..kept].sort_unstable();
    let mut from: libc::c_uint = 0;
    for &fd in &sorted[..kept] {
        if fd == libc::c_uint::MAX {
            continue;
        }
        if fd > from {
            close_range(from, fd - 1, limit);
        }
        from = fd.saturating_add(1);
    }
    close_range(from, libc::c_uint::MAX, limit);
    Some(Side::Child)
}

/// Closes descriptors `first..=last`: with `close_range`, or, where it
/// fails (kernels before 5.9 have none: ENOSYS), one `close` per number
/// below `limit`. Without the fallback the child would keep the runtime's
/// stdout pipe and the plugin's lock files, and the runtime's call would
/// hang until the child ended. Async-signal-safe: syscalls only.
fn close_range(first: libc::c_uint, last: libc::c_uint, limit: libc::c_uint) {
    if !close_range_fails() {
        // SAFETY: close_range on descriptor numbers only.
        let done = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
        if done == 0 {
            return;
        }
    }
    let end = last.min(limit.saturating_sub(1));
    let mut fd = first;
    while fd <= end {
        // SAFETY: close on a descriptor number; EBADF for unused ones.
        unsafe { libc::close(fd as libc::c_int) };
        fd += 1;
    }
}

/// One past the highest descriptor number this process may have: the
/// soft RLIMIT_NOFILE (descriptors are numbered below it unless the limit
/// was lowered after they were opened, which the plugins never do).
fn open_files_limit() -> libc::c_uint {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0
        || limit.rlim_cur == libc::RLIM_INFINITY
    {
        // The kernel's own ceiling (fs.nr_open's default).
        return 1 << 20;
    }
    libc::c_uint::try_from(limit.rlim_cur).unwrap_or(libc::c_uint::MAX)
}

/// Tests force the fallback, as on a kernel before 5.9.
#[cfg(test)]
static FORCE_CLOSE_RANGE_FAILURE: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

fn close_range_fails() -> bool {
    #[cfg(test)]
    if FORCE_CLOSE_RANGE_FAILURE.load(std::sync::atomic::Ordering::Relaxed) {
        return true;
    }
    false
}

/// Ends the child of [`fork_keeping`] without running anything of the
/// parent's (destructors, atexit handlers, stdio flushes).
pub fn exit_child() -> ! {
    // SAFETY: _exit is async-signal-safe and does not return.
    unsafe { libc::_exit(0) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// The child sees only the kept descriptor: it reports through the
    /// kept pipe whether another open descriptor survived the fork.
    #[test]
    fn the_child_keeps_only_what_it_is_told() {
        let (read_end, write_end) = nix::unistd::pipe().unwrap();
        let other = std::fs::File::open("/dev/null").unwrap();
        let other_fd = other.as_raw_fd();
        let write_fd = write_end.as_raw_fd();
        // SAFETY: the child only calls fcntl, write and _exit.
        match unsafe { fork_keeping(&[write_fd]) }.unwrap() {
            Side::Child => {
                let survived = unsafe { libc::fcntl(other_fd, libc::F_GETFD) } >= 0;
                let byte = [if survived { b'y' } else { b'n' }];
                unsafe { libc::write(write_fd, byte.as_ptr().cast(), 1) };
                exit_child();
            }
            Side::Parent => {}
        }
        drop(write_end);
        let mut answer = Vec::new();
        std::io::Read::read_to_end(&mut std::fs::File::from(read_end), &mut answer).unwrap();
        assert_eq!(answer, b"n", "the child must close every other descriptor");
    }

    /// Where close_range fails (kernels before 5.9), the child closes the
    /// descriptors one by one: a descriptor below and one above the kept
    /// one are both gone, the kept one stays. Other tests' forks meanwhile
    /// take the fallback too, which is as correct, only slower.
    #[test]
    fn without_close_range_the_child_closes_one_by_one() {
        let (read_end, write_end) = nix::unistd::pipe().unwrap();
        let low = std::fs::File::open("/dev/null").unwrap();
        let high = nix::fcntl::fcntl(
            &low,
            nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(write_end.as_raw_fd() + 100),
        )
        .unwrap();
        let (low_fd, write_fd) = (low.as_raw_fd(), write_end.as_raw_fd());
        FORCE_CLOSE_RANGE_FAILURE.store(true, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: the child only calls fcntl, write and _exit.
        let side = unsafe { fork_keeping(&[write_fd]) };
        FORCE_CLOSE_RANGE_FAILURE.store(false, std::sync::atomic::Ordering::Relaxed);
        match side.unwrap() {
            Side::Child => {
                let open = |fd| unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0;
                let answer = [
                    if open(low_fd) { b'y' } else { b'n' },
                    if open(high) { b'y' } else { b'n' },
                ];
                unsafe { libc::write(write_fd, answer.as_ptr().cast(), 2) };
                exit_child();
            }
            Side::Parent => {}
        }
        drop(write_end);
        nix::unistd::close(high).unwrap();
        let mut answer = Vec::new();
        std::io::Read::read_to_end(&mut std::fs::File::from(read_end), &mut answer).unwrap();
        assert_eq!(answer, b"nn", "both closed by the fallback, the pipe kept");
        assert!(open_files_limit() > 3);
    }

    /// More descriptors than a child can keep: no fork at all, rather than
    /// a child that silently lost some of them.
    #[test]
    fn too_many_kept_descriptors_means_no_child() {
        // SAFETY: no child is made.
        assert_eq!(unsafe { fork_keeping(&[0; MAX_KEPT + 1]) }, None);
    }

    fn open_fds() -> Vec<(i32, String)> {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| {
                let e = e.ok()?;
                let fd = e.file_name().to_str()?.parse().ok()?;
                Some((fd, std::fs::read_link(e.path()).ok()?.display().to_string()))
            })
            .collect()
    }

    /// A parked socket stays open (as a duplicate) after its owner's close,
    /// and release leaves this process without it. PARKED is process-wide,
    /// so the checks are on this socket's inode, not on counts.
    #[test]
    fn a_parked_socket_outlives_its_close_until_release() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let fd = socket.as_raw_fd();
        let target = open_fds().into_iter().find(|(f, _)| *f == fd).unwrap().1;
        park(&socket);
        drop(socket);
        let holders = |t: &str| open_fds().into_iter().filter(|(_, l)| l == t).count();
        // Another test may release the set meanwhile; it then holds none.
        let after_close = holders(&target);
        assert!(after_close <= 1, "{after_close}");
        release_parked();
        assert_eq!(
            holders(&target),
            0,
            "released sockets must leave this process"
        );
    }
}
