//! Running one iptables program with a hard deadline.
//!
//! The xtables lock is waited for by the programs themselves (`--wait`);
//! on top of that every process is killed at a deadline, so a wedged
//! iptables can never hang a runtime's call.

use std::io::{self, Write};
use std::path::Path;
use std::process::{Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// How long the output of a killed program is waited for: a process it
/// started (a `modprobe`) may keep the pipes open; the output is then
/// given up on.
const AFTER_KILL: Duration = Duration::from_secs(1);

/// How one run ended.
#[derive(Debug)]
pub(crate) enum Ended {
    /// The program exited (successfully or not) before the deadline.
    Exited(Output),
    /// The deadline passed; the program was killed.
    Killed,
}

/// Runs `path` with `args` and `env`, feeding `stdin`, until it exits or
/// `deadline` passes. The child inherits the calling thread's network
/// namespace.
pub(crate) fn run(
    path: &Path,
    args: &[&str],
    env: &[(String, String)],
    stdin: Option<&str>,
    deadline: Duration,
) -> io::Result<Ended> {
    let mut cmd = Command::new(path);
    cmd.args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = crate::spawn::spawn_waiting_for_busy_text(&mut cmd)?;
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));

    // Input is written on its own thread and output read on another, so
    // that neither a large input nor a large output blocks the child while
    // this thread watches the clock.
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        let input = input.to_string();
        let spawned = thread::Builder::new().spawn(move || {
            // A child that exits early closes the pipe; its exit status
            // then tells what went wrong.
            let _ = pipe.write_all(input.as_bytes());
        });
        if let Err(e) = spawned {
            let _ = kill(pid, Signal::SIGKILL);
            let _ = child.wait();
            return Err(e);
        }
    }
    let (sender, receiver) = mpsc::channel();
    // The waiter owns the child: it reads both pipes to their end, then
    // reaps the child.
    thread::Builder::new().spawn(move || {
        let _ = sender.send(child.wait_with_output());
    })?;
    match receiver.recv_timeout(deadline) {
        Ok(output) => output.map(Ended::Exited),
        Err(RecvTimeoutError::Timeout) => {
            // Not reaped yet (the waiter would have sent), so the id
            // is still the child's.
            let _ = kill(pid, Signal::SIGKILL);
            let _ = receiver.recv_timeout(AFTER_KILL);
            Ok(Ended::Killed)
        }
        Err(RecvTimeoutError::Disconnected) => {
            Err(io::Error::other("the process waiter thread ended"))
        }
    }
}

/// `RESOURCE_PROBLEM`: the exit status of the iptables programs when they
/// gave up waiting for the xtables lock.
const RESOURCE_PROBLEM: i32 = 4;

/// Whether a failed run of an iptables program was its giving up on the
/// xtables lock: legacy iptables exits with `RESOURCE_PROBLEM` and says
/// "Another app is currently holding the xtables lock" (iptables-nft has
/// no such lock).
pub fn is_xtables_lock_timeout(status: ExitStatus, stderr: &str) -> bool {
    status.code() == Some(RESOURCE_PROBLEM) && stderr.contains("xtables lock")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::time::Instant;

    fn sh(script: &str, stdin: Option<&str>, deadline: Duration) -> Ended {
        run(Path::new("/bin/sh"), &["-c", script], &[], stdin, deadline).unwrap()
    }

    #[test]
    fn output_status_and_environment_come_back() {
        let env = [("GREETING".to_string(), "hello".to_string())];
        let ended = run(
            Path::new("/bin/sh"),
            &["-c", "cat; echo \" $GREETING\"; echo oops >&2; exit 3"],
            &env,
            Some("input"),
            Duration::from_secs(20),
        )
        .unwrap();
        let Ended::Exited(out) = ended else {
            panic!("{ended:?}")
        };
        assert_eq!(String::from_utf8_lossy(&out.stdout), "input hello\n");
        assert_eq!(String::from_utf8_lossy(&out.stderr), "oops\n");
        assert_eq!(out.status.code(), Some(3));
    }

    #[test]
    fn a_hung_process_is_killed_at_the_deadline() {
        let start = Instant::now();
        let ended = sh("exec sleep 30", None, Duration::from_millis(200));
        assert!(matches!(ended, Ended::Killed), "{ended:?}");
        assert!(start.elapsed() < Duration::from_secs(10));
        // A process the program started keeps the output pipes open after
        // the kill: the output is given up on, the call still returns.
        let start = Instant::now();
        let ended = sh("sleep 5 & exec sleep 30", None, Duration::from_millis(200));
        assert!(matches!(ended, Ended::Killed), "{ended:?}");
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn big_input_and_output_do_not_block() {
        let input = "a".repeat(300_000);
        let Ended::Exited(out) = sh("cat", Some(&input), Duration::from_secs(20)) else {
            panic!()
        };
        assert_eq!(out.stdout.len(), 300_000);
        // A child that reads nothing while its input is bigger than a pipe.
        let Ended::Exited(out) = sh("exit 0", Some(&input), Duration::from_secs(20)) else {
            panic!()
        };
        assert!(out.status.success());
    }

    #[test]
    fn lock_timeouts_are_recognised() {
        let lock = "Another app is currently holding the xtables lock. Stopped waiting after 1s.";
        let code = |c: i32| ExitStatus::from_raw(c << 8);
        assert!(is_xtables_lock_timeout(code(4), lock));
        assert!(!is_xtables_lock_timeout(code(1), lock));
        assert!(!is_xtables_lock_timeout(
            code(4),
            "iptables-restore: line 3 failed"
        ));
    }
}
