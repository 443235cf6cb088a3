//! The daemon's socket (issue 28): created 0600 whatever the umask the
//! daemon starts with, and only root is served, whatever the socket's mode.

mod common;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;

/// Stops the daemon however the test ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the daemon answers to a request that is no CONNECT (its HTTP
/// preamble refuses it with 405); empty when it closes without a word.
fn ask(socket: &Path) -> std::io::Result<String> {
    talk(UnixStream::connect(socket)?)
}

fn talk(mut stream: UnixStream) -> std::io::Result<String> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(b"GET / HTTP/1.0\r\n\r\n")?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    Ok(reply)
}

/// Starts the daemon on `socket` with `extra` arguments under umask 000
/// (the most careless parent: whatever the socket gets, it sets itself)
/// and waits until it answers.
fn daemon_under_umask_000(socket: &Path, state: &Path, extra: &[&str]) -> Running {
    let mut command = Command::new(ours());
    command
        .arg("daemon")
        .arg("-socketpath")
        .arg(socket)
        .args(extra)
        .arg("-statedir")
        .arg(state)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: umask is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            libc::umask(0);
            Ok(())
        });
    }
    let daemon = Running(command.spawn().expect("start the daemon"));
    assert!(
        wait_for(Duration::from_secs(10), || ask(socket).is_ok()),
        "the daemon listens"
    );
    daemon
}

#[test]
fn the_socket_is_0600_under_umask_000_and_only_root_is_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("sock/dhcp.sock");
    let _daemon = daemon_under_umask_000(&socket, &dir.path().join("state"), &[]);
    let mode = std::fs::metadata(&socket)
        .expect("socket")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    assert!(
        ask(&socket)
            .expect("root connects")
            .starts_with("HTTP/1.0 405"),
        "root is served"
    );

    // Opened up to everyone, as a careless administrator might: a user
    // other than root still gets nothing.
    for folder in [dir.path(), &dir.path().join("sock")] {
        std::fs::set_permissions(folder, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    // SAFETY: the child only switches user, talks to the socket and exits.
    match unsafe { nix::unistd::fork() }.expect("fork") {
        nix::unistd::ForkResult::Child => {
            let nobody = nix::unistd::Uid::from_raw(65534);
            let status = if nix::unistd::setgid(nix::unistd::Gid::from_raw(65534)).is_err()
                || nix::unistd::setuid(nobody).is_err()
            {
                3
            } else {
                match UnixStream::connect(&socket) {
                    Err(_) => 2,
                    // Closed unread: an empty read, or a reset.
                    Ok(stream) => match talk(stream) {
                        Ok(reply) if reply.is_empty() => 0,
                        Ok(_) => 1,
                        // A reset on the read, or a broken pipe on the
                        // write when the close came first.
                        Err(e)
                            if matches!(
                                e.kind(),
                                std::io::ErrorKind::ConnectionReset
                                    | std::io::ErrorKind::BrokenPipe
                            ) =>
                        {
                            0
                        }
                        Err(_) => 4,
                    },
                }
            };
            // SAFETY: ends the child without running the test harness's
            // exit handlers.
            unsafe { libc::_exit(status) }
        }
        nix::unistd::ForkResult::Parent { child } => {
            let status = nix::sys::wait::waitpid(child, None).expect("waitpid");
            assert_eq!(
                status,
                nix::sys::wait::WaitStatus::Exited(child, 0),
                "uid 65534 connected and got no reply (1: it was served, 2: it could not connect, 3: no setuid, 4: no answer nor close)"
            );
        }
    }
    assert!(
        ask(&socket)
            .expect("root still")
            .starts_with("HTTP/1.0 405"),
        "root is still served"
    );
}

/// In a forked child with group `gid` and uid 65534 (nobody): 0 when the
/// daemon served it (its 405 reply), 1 when the connection was closed
/// unserved, 2 when it could not connect (permission), 3 when the switch
/// failed, 4 for anything else.
fn as_nobody_in_group(gid: u32, socket: &Path) -> i32 {
    // SAFETY: the child only switches user, talks to the socket and exits.
    match unsafe { nix::unistd::fork() }.expect("fork") {
        nix::unistd::ForkResult::Child => {
            let status = if nix::unistd::setgroups(&[]).is_err()
                || nix::unistd::setgid(nix::unistd::Gid::from_raw(gid)).is_err()
                || nix::unistd::setuid(nix::unistd::Uid::from_raw(65534)).is_err()
            {
                3
            } else {
                match UnixStream::connect(socket) {
                    Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => 2,
                    Err(_) => 4,
                    Ok(stream) => match talk(stream) {
                        Ok(reply) if reply.starts_with("HTTP/1.0 405") => 0,
                        Ok(reply) if reply.is_empty() => 1,
                        Err(e)
                            if matches!(
                                e.kind(),
                                std::io::ErrorKind::ConnectionReset
                                    | std::io::ErrorKind::BrokenPipe
                            ) =>
                        {
                            1
                        }
                        _ => 4,
                    },
                }
            };
            // SAFETY: ends the child without running the test harness's
            // exit handlers.
            unsafe { libc::_exit(status) }
        }
        nix::unistd::ForkResult::Parent { child } => {
            match nix::sys::wait::waitpid(child, None).expect("waitpid") {
                nix::sys::wait::WaitStatus::Exited(_, code) => code,
                other => panic!("the child ended with {other:?}"),
            }
        }
    }
}

/// `-socketgroup`: the socket is root's and the group's, 0660 under umask
/// 000; a process whose effective group is it is served, another user
/// cannot even connect.
#[test]
fn with_a_socket_group_the_socket_is_0660_and_only_root_and_the_group_are_served() {
    use std::os::unix::fs::MetadataExt;
    const GROUP: u32 = 65533;
    let dir = tempfile::tempdir().expect("tempdir");
    let folder = dir.path().join("sock");
    std::fs::create_dir_all(&folder).expect("folder");
    // The administrator's folder: others may pass through it.
    for f in [dir.path(), &folder] {
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let socket = folder.join("dhcp.sock");
    let group = GROUP.to_string();
    let _daemon = daemon_under_umask_000(
        &socket,
        &dir.path().join("state"),
        &["-socketgroup", &group],
    );
    let meta = std::fs::metadata(&socket).expect("socket");
    assert_eq!(meta.mode() & 0o777, 0o660, "{:o}", meta.mode());
    assert_eq!((meta.uid(), meta.gid()), (0, GROUP));
    assert_eq!(as_nobody_in_group(GROUP, &socket), 0, "the group is served");
    assert_eq!(
        as_nobody_in_group(65534, &socket),
        2,
        "another user cannot connect"
    );
    assert!(
        ask(&socket).expect("root").starts_with("HTTP/1.0 405"),
        "root is served"
    );
}

#[test]
fn an_unknown_socket_group_stops_the_daemon_before_it_listens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("dhcp.sock");
    let out = Command::new(ours())
        .arg("daemon")
        .arg("-socketpath")
        .arg(&socket)
        .arg("-socketgroup")
        .arg("cni-rs-no-such-group")
        .arg("-statedir")
        .arg(dir.path().join("state"))
        .output()
        .expect("run the daemon");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("-socketgroup \"cni-rs-no-such-group\": no such group in /etc/group"),
        "{stderr}"
    );
    assert!(!socket.exists());
}
