//! Helpers for tests that need the running kernel: a private network
//! namespace per test, and `nft` inside it.

use std::io::Write as _;
use std::process::{Command, Stdio};

/// Runs `f` on a fresh thread in a new, empty network namespace (which
/// goes away with the thread), so nothing of the machine is touched and
/// nothing is left behind. Programs it starts inherit the namespace.
pub(crate) fn in_private_netns<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
                f()
            })
            .join()
            .unwrap()
    })
}

/// `nft <args>` (with `script` on stdin) in the calling thread's namespace.
pub(crate) fn nft(args: &[&str], script: Option<&str>) -> String {
    let mut child = Command::new("nft")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(script.unwrap_or("").as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "nft {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
