//! Running `iptables-save` and `iptables-restore` (or their ip6tables
//! twins) with bounded time.
//!
//! The xtables lock is waited for by `iptables-restore --wait=<seconds>`
//! itself; on top of that every process has a hard deadline, after which
//! it is killed, so a wedged iptables can never hang a runtime's call.

use std::io::{self, Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::Duration;

use libcni::IpFamily;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// How long `iptables-restore` waits for the xtables lock (legacy
/// iptables only; iptables-nft has no such lock).
pub const XTABLES_WAIT_SECONDS: u32 = 10;

/// The hard limit on any iptables process.
const PROCESS_DEADLINE: Duration = Duration::from_secs(XTABLES_WAIT_SECONDS as u64 + 20);

/// Where to look when `PATH` lacks the tools: runtimes do not always pass
/// a `PATH` with the sbin directories to plugins.
use libcni::nftables::iptables_nft::{find_program, FALLBACK_DIRS};

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("{program} not found in PATH or {}", FALLBACK_DIRS.join(":"))]
    NotFound { program: &'static str },
    #[error("cannot run {program}: {source}")]
    Spawn {
        program: &'static str,
        source: io::Error,
    },
    #[error("{program} did not finish within {}s and was killed", .deadline.as_secs())]
    Deadline {
        program: &'static str,
        deadline: Duration,
    },
    #[error("{program} failed ({status}): {stderr}")]
    Failed {
        program: &'static str,
        status: ExitStatus,
        stderr: String,
    },
}

impl ExecError {
    /// Another program held the xtables lock for the whole wait: the call
    /// may succeed if tried again.
    pub fn is_lock_timeout(&self) -> bool {
        match self {
            ExecError::Failed { stderr, .. } => mentions_xtables_lock(stderr),
            ExecError::Deadline { .. } => true,
            _ => false,
        }
    }
}

/// The texts legacy iptables prints when it gave up waiting for the lock.
pub fn mentions_xtables_lock(stderr: &str) -> bool {
    stderr.contains("xtables lock")
}

/// The save/restore programs of one family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tools {
    pub save: &'static str,
    pub restore: &'static str,
}

impl Tools {
    pub fn of(family: IpFamily) -> Tools {
        match family {
            IpFamily::V4 => Tools {
                save: "iptables-save",
                restore: "iptables-restore",
            },
            IpFamily::V6 => Tools {
                save: "ip6tables-save",
                restore: "ip6tables-restore",
            },
        }
    }

    /// `<save> -t nat`: the table's text.
    pub fn save_nat(&self) -> Result<String, ExecError> {
        run(self.save, &["-t", "nat"], None)
    }

    /// Applies `input` without flushing what it does not name, in one
    /// transaction.
    pub fn restore(&self, input: &str) -> Result<(), ExecError> {
        let wait = format!("--wait={XTABLES_WAIT_SECONDS}");
        run(self.restore, &["--noflush", &wait], Some(input)).map(|_| ())
    }
}

/// Runs `program` with `args`, feeding `stdin`, and returns its stdout.
/// Fails on a non-zero exit, with stderr in the error.
fn run(program: &'static str, args: &[&str], stdin: Option<&str>) -> Result<String, ExecError> {
    let path = find_program(program).ok_or(ExecError::NotFound { program })?;
    log::debug!("running {} {}", path.display(), args.join(" "));
    let mut child = Command::new(&path)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| ExecError::Spawn { program, source })?;

    // Pipes are drained on their own threads: a large save output or
    // restore input must not block the child while we wait for it.
    let threads = spawn_pipe_threads(&mut child, stdin);
    let (writer, stdout_reader, stderr_reader) = match threads {
        Ok(threads) => threads,
        Err(source) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(ExecError::Spawn { program, source });
        }
    };

    let status = wait_until(child, PROCESS_DEADLINE)
        .map_err(|source| ExecError::Spawn { program, source })?;
    if let Some(writer) = writer {
        let _ = writer.join();
    }
    let stdout = stdout_reader.join().unwrap_or_default();
    let stderr = stderr_reader.join().unwrap_or_default();
    match status {
        None => Err(ExecError::Deadline {
            program,
            deadline: PROCESS_DEADLINE,
        }),
        Some(status) if status.success() => Ok(stdout),
        Some(status) => Err(ExecError::Failed {
            program,
            status,
            stderr: stderr.trim().to_string(),
        }),
    }
}

type PipeThreads = (
    Option<thread::JoinHandle<()>>,
    thread::JoinHandle<String>,
    thread::JoinHandle<String>,
);

fn spawn_pipe_threads(child: &mut Child, stdin: Option<&str>) -> io::Result<PipeThreads> {
    let writer = match stdin {
        None => None,
        Some(input) => {
            let pipe = child.stdin.take();
            let input = input.to_string();
            Some(thread::Builder::new().spawn(move || {
                if let Some(mut pipe) = pipe {
                    // A child that exits early closes the pipe; its exit
                    // status then tells what went wrong.
                    let _ = pipe.write_all(input.as_bytes());
                }
            })?)
        }
    };
    let stdout_reader = spawn_reader(child.stdout.take())?;
    let stderr_reader = spawn_reader(child.stderr.take())?;
    Ok((writer, stdout_reader, stderr_reader))
}

fn spawn_reader<R: Read + Send + 'static>(
    pipe: Option<R>,
) -> io::Result<thread::JoinHandle<String>> {
    thread::Builder::new().spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// Waits for the child until `deadline`; kills it and returns `None` when
/// the deadline passes. The wait happens on a thread so that the exit is
/// seen at once (no polling delay on every iptables call).
fn wait_until(mut child: Child, deadline: Duration) -> io::Result<Option<ExitStatus>> {
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
    let (sender, receiver) = mpsc::channel();
    thread::Builder::new().spawn(move || {
        let _ = sender.send(child.wait());
    })?;
    match receiver.recv_timeout(deadline) {
        Ok(status) => status.map(Some),
        Err(RecvTimeoutError::Timeout) => {
            // Not reaped yet (the waiter is still in wait), so the pid
            // cannot have been reused.
            let _ = kill(pid, Signal::SIGKILL);
            let _ = receiver.recv();
            Ok(None)
        }
        Err(RecvTimeoutError::Disconnected) => {
            Err(io::Error::other("the process waiter thread ended"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_messages_are_recognised() {
        assert!(mentions_xtables_lock(
            "Another app is currently holding the xtables lock. Stopped waiting after 10s."
        ));
        assert!(!mentions_xtables_lock("iptables-restore: line 3 failed"));
    }

    #[test]
    fn runs_a_program_and_reports_failure_with_stderr() {
        assert_eq!(run("cat", &[], Some("hello")).unwrap(), "hello");
        let e = run("sh", &["-c", "echo oops >&2; exit 3"], None).unwrap_err();
        match e {
            ExecError::Failed { stderr, status, .. } => {
                assert_eq!(stderr, "oops");
                assert_eq!(status.code(), Some(3));
            }
            other => panic!("unexpected {other}"),
        }
    }

    #[test]
    fn missing_program_is_not_found() {
        let e = run("no-such-program-portmap-test", &[], None).unwrap_err();
        assert!(matches!(e, ExecError::NotFound { .. }), "{e}");
    }

    #[test]
    fn a_hung_process_is_killed_at_the_deadline() {
        let child = Command::new("sleep").arg("30").spawn().unwrap();
        let start = std::time::Instant::now();
        assert_eq!(wait_until(child, Duration::from_millis(100)).unwrap(), None);
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn big_output_does_not_block() {
        let out = run("sh", &["-c", "head -c 300000 /dev/zero | tr '\\0' a"], None).unwrap();
        assert_eq!(out.len(), 300_000);
    }
}
