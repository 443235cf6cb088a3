//! Running a plugin binary as a child process.

use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde::Deserialize;

use super::{Exec, ExitStatus, InvokeError, PluginEnv};
use crate::error::{CniError, ErrorCode};

/// How long a plugin may run by default. It matches the kubelet's default
/// runtime request timeout: past it the caller has given up on the
/// operation, and a plugin still running is stuck rather than slow.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// After the plugin exits, how long to keep reading output from its pipes.
/// EOF is immediate unless a process the plugin left behind still holds
/// them, and such a process must not hold the runtime up.
const OUTPUT_GRACE: Duration = Duration::from_secs(1);

/// Output beyond this is dropped: no plugin prints anywhere near it, and a
/// runaway one must not exhaust the runtime's memory.
const MAX_OUTPUT: usize = 16 << 20;

/// The real [`Exec`]: runs plugin binaries with `std::process`.
#[derive(Debug, Clone)]
pub struct RawExec {
    timeout: Duration,
    forward_stderr: bool,
}

impl Default for RawExec {
    fn default() -> Self {
        RawExec {
            timeout: DEFAULT_TIMEOUT,
            forward_stderr: true,
        }
    }
}

impl RawExec {
    pub fn new() -> Self {
        RawExec::default()
    }

    /// A plugin still running after `timeout` is killed, along with any
    /// process it started, and the call fails.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Whether the plugin's stderr (its log output) is copied to ours.
    pub fn with_forward_stderr(mut self, forward: bool) -> Self {
        self.forward_stderr = forward;
        self
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    fn spawn(&self, path: &Path, env: &PluginEnv) -> Result<Child, InvokeError> {
        // A bare name would be looked up in PATH by the OS; the plugin is
        // the file we found, relative to the current directory.
        let program = if path.components().count() == 1 && path.is_relative() {
            Path::new(".").join(path)
        } else {
            path.to_path_buf()
        };
        let mut cmd = std::process::Command::new(&program);
        cmd.env_clear()
            .envs(env.iter())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, so that a timeout kills whatever the
            // plugin started too (iptables, a shell's children).
            .process_group(0);
        crate::spawn::spawn_waiting_for_busy_text(&mut cmd).map_err(|source| InvokeError::Spawn {
            path: path.to_path_buf(),
            source,
        })
    }

    fn run(&self, path: &Path, stdin: &[u8], env: &PluginEnv) -> Result<Output, InvokeError> {
        let mut child = self.spawn(path, env)?;
        let io_err = |source| InvokeError::Io {
            path: path.to_path_buf(),
            source,
        };
        let deadline = Instant::now() + self.timeout;
        let mut pipes = match ChildPipes::take(&mut child, stdin) {
            Ok(pipes) => pipes,
            Err(e) => {
                kill_process_group(&mut child);
                return Err(io_err(e));
            }
        };
        let status = match pipes.until_exit(&mut child, deadline) {
            Ok(Some(status)) => status,
            Ok(None) => {
                kill_process_group(&mut child);
                return Err(InvokeError::Timeout {
                    path: path.to_path_buf(),
                    timeout: self.timeout,
                });
            }
            Err(e) => {
                kill_process_group(&mut child);
                return Err(io_err(e));
            }
        };
        let status = match (status.code(), status.signal()) {
            (Some(code), _) => ExitStatus::Code(code),
            (None, Some(sig)) => ExitStatus::Signal(sig),
            (None, None) => ExitStatus::Code(-1),
        };
        pipes.drain(Instant::now() + OUTPUT_GRACE);
        Ok(Output {
            status,
            stdout: pipes.stdout.collected,
            stderr: pipes.stderr.collected,
        })
    }
}

struct Output {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// The plugin's three pipes, served from the calling thread with `poll`:
/// stdin is fed as the plugin reads it and stdout and stderr are collected
/// as it writes them, so a plugin that writes a lot before reading (or
/// never reads) cannot deadlock against us, and no thread is started.
struct ChildPipes {
    stdin: Option<ChildStdin>,
    input: Vec<u8>,
    fed: usize,
    stdout: OutputPipe<ChildStdout>,
    stderr: OutputPipe<ChildStderr>,
}

/// An output pipe until it closes, and what came through it.
struct OutputPipe<R> {
    pipe: Option<R>,
    collected: Vec<u8>,
}

impl<R: Read + AsFd> OutputPipe<R> {
    /// Reads what is there; EOF or an error closes the pipe. Output beyond
    /// [`MAX_OUTPUT`] is read and dropped.
    fn read_available(&mut self, buf: &mut [u8]) {
        let Some(pipe) = self.pipe.as_mut() else {
            return;
        };
        match pipe.read(buf) {
            Ok(0) => self.pipe = None,
            Ok(n) => {
                let room = MAX_OUTPUT.saturating_sub(self.collected.len());
                let chunk = buf.get(..n.min(room)).unwrap_or_default();
                self.collected.extend_from_slice(chunk);
            }
            Err(e) if e.kind() == ErrorKind::Interrupted || e.kind() == ErrorKind::WouldBlock => {}
            Err(_) => self.pipe = None,
        }
    }
}

/// How long one `poll` waits at most while the plugin runs: the plugin's
/// exit is noticed by its pipes closing, or at the latest after this when
/// a process it left behind keeps them open.
const EXIT_CHECK_INTERVAL: Duration = Duration::from_millis(10);
/// Once the pipes are closed the plugin is exiting. Its exit is waited for
/// on a pidfd, which wakes us the moment it happens (a plugin's exit can
/// take milliseconds after its pipes close: closing an nf_tables socket
/// waits for an RCU grace period). Without pidfds (kernels before 5.3) the
/// status is looked for after pauses starting here and doubling up to
/// [`EXIT_CHECK_INTERVAL`].
const FIRST_EXIT_PAUSE: Duration = Duration::from_micros(20);

/// A pidfd of `child`: readable once it has exited. `None` where the kernel
/// has none.
fn pidfd_of(child: &Child) -> Option<OwnedFd> {
    let pid = libc::pid_t::try_from(child.id()).ok()?;
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1;
    // the pid is our own unreaped child, so it cannot name another process.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: the fd was just returned to us by the kernel and is owned
    // by nothing else.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl ChildPipes {
    fn take(child: &mut Child, input: &[u8]) -> std::io::Result<ChildPipes> {
        let stdin = child.stdin.take();
        if let Some(pipe) = &stdin {
            // Writes must never block: the plugin may not read at all.
            let flags = fcntl(pipe, FcntlArg::F_GETFL).map_err(std::io::Error::from)?;
            let flags = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
            fcntl(pipe, FcntlArg::F_SETFL(flags)).map_err(std::io::Error::from)?;
        }
        Ok(ChildPipes {
            stdin,
            input: input.to_vec(),
            fed: 0,
            stdout: OutputPipe {
                pipe: child.stdout.take(),
                collected: Vec::new(),
            },
            stderr: OutputPipe {
                pipe: child.stderr.take(),
                collected: Vec::new(),
            },
        })
    }

    fn outputs_closed(&self) -> bool {
        self.stdout.pipe.is_none() && self.stderr.pipe.is_none()
    }

    /// Serves the pipes until the plugin exits (its status) or `deadline`
    /// passes (`None`). Only an exited plugin is reaped, so one past its
    /// deadline still owns its pid and process group when it is killed:
    /// the kill cannot hit an unrelated process.
    fn until_exit(
        &mut self,
        child: &mut Child,
        deadline: Instant,
    ) -> std::io::Result<Option<std::process::ExitStatus>> {
        let mut pause = FIRST_EXIT_PAUSE;
        let pidfd = pidfd_of(child);
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(Some(status));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            if self.outputs_closed() && self.stdin.is_none() {
                match &pidfd {
                    Some(fd) => {
                        let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
                        match poll(&mut fds, poll_timeout(left)) {
                            Ok(_) | Err(Errno::EINTR) => {}
                            Err(e) => return Err(e.into()),
                        }
                    }
                    None => {
                        thread::sleep(pause.min(left));
                        pause = (pause * 2).min(EXIT_CHECK_INTERVAL);
                    }
                }
            } else {
                self.serve(EXIT_CHECK_INTERVAL.min(left))?;
            }
        }
    }

    /// After the exit: stdin is closed, and output is read until both pipes
    /// close or `deadline`.
    fn drain(&mut self, deadline: Instant) {
        self.stdin = None;
        while !self.outputs_closed() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.serve(left).is_err() {
                return;
            }
        }
    }

    /// One `poll` of the open pipes (at most `timeout`), then the reads and
    /// writes it allows.
    fn serve(&mut self, timeout: Duration) -> std::io::Result<()> {
        let wait = poll_timeout(timeout);
        let events = {
            let mut fds = Vec::with_capacity(3);
            if let Some(pipe) = &self.stdin {
                fds.push(PollFd::new(pipe.as_fd(), PollFlags::POLLOUT));
            }
            if let Some(pipe) = &self.stdout.pipe {
                fds.push(PollFd::new(pipe.as_fd(), PollFlags::POLLIN));
            }
            if let Some(pipe) = &self.stderr.pipe {
                fds.push(PollFd::new(pipe.as_fd(), PollFlags::POLLIN));
            }
            match poll(&mut fds, wait) {
                Ok(_) => {}
                Err(Errno::EINTR) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
            fds.iter()
                .map(|fd| fd.revents().unwrap_or(PollFlags::empty()))
                .collect::<Vec<_>>()
        };
        let mut events = events.into_iter();
        if self.stdin.is_some() && events.next().is_some_and(|e| !e.is_empty()) {
            self.feed();
        }
        let mut buf = [0u8; 64 * 1024];
        if self.stdout.pipe.is_some() && events.next().is_some_and(|e| !e.is_empty()) {
            self.stdout.read_available(&mut buf);
        }
        if self.stderr.pipe.is_some() && events.next().is_some_and(|e| !e.is_empty()) {
            self.stderr.read_available(&mut buf);
        }
        Ok(())
    }

    /// Writes what the pipe takes; closes stdin when all is written or the
    /// plugin will not read any more (it may exit without reading, as for
    /// VERSION).
    fn feed(&mut self) {
        let Some(pipe) = self.stdin.as_mut() else {
            return;
        };
        let rest = self.input.get(self.fed..).unwrap_or_default();
        match pipe.write(rest) {
            Ok(n) => self.fed += n,
            Err(e) if e.kind() == ErrorKind::Interrupted || e.kind() == ErrorKind::WouldBlock => {}
            Err(_) => self.fed = self.input.len(),
        }
        if self.fed >= self.input.len() {
            self.stdin = None;
        }
    }
}

/// `timeout` for `poll`, in whole milliseconds rounded up (rounding down
/// would turn a short wait into a busy loop).
fn poll_timeout(timeout: Duration) -> PollTimeout {
    let millis = timeout.as_micros().div_ceil(1000);
    PollTimeout::try_from(millis).unwrap_or(PollTimeout::MAX)
}

fn kill_process_group(child: &mut Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        // The group id is the plugin's pid (process_group(0)); the plugin is
        // not reaped yet, so the id still names its group.
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Go's `types.Error` decodes with every field optional; so does this.
#[derive(Deserialize)]
struct PrintedError {
    #[serde(rename = "cniVersion", default)]
    cni_version: Option<String>,
    #[serde(default)]
    code: u32,
    #[serde(default)]
    msg: String,
    #[serde(default)]
    details: String,
}

/// What a failed plugin means: the error object it printed on stdout, or,
/// failing that, a message built from its stderr and exit status.
fn plugin_failure(status: ExitStatus, stdout: &[u8], stderr: &[u8]) -> InvokeError {
    if stdout.iter().all(u8::is_ascii_whitespace) {
        if stderr.is_empty() {
            return InvokeError::NoErrorMessage { status };
        }
        return InvokeError::FailedWithStderr {
            stderr: String::from_utf8_lossy(stderr).into_owned(),
            status,
        };
    }
    match serde_json::from_slice::<PrintedError>(stdout) {
        Ok(e) => InvokeError::Plugin(CniError {
            cni_version: e.cni_version,
            code: ErrorCode::from(e.code),
            msg: e.msg,
            details: e.details,
        }),
        Err(e) => InvokeError::UnparsableDiagnostic {
            stdout: String::from_utf8_lossy(stdout).into_owned(),
            status,
            reason: e.to_string(),
        },
    }
}

fn forward_stderr(plugin: &Path, stderr: &[u8]) {
    if stderr.is_empty() {
        return;
    }
    let mut out = std::io::stderr().lock();
    // Plugin logs are informational; losing them is no reason to fail.
    if out.write_all(stderr).is_err() {
        log::debug!("could not forward stderr of {}", plugin.display());
    }
}

impl Exec for RawExec {
    fn exec_plugin(
        &self,
        plugin_path: &Path,
        stdin: &[u8],
        env: &PluginEnv,
    ) -> Result<Vec<u8>, InvokeError> {
        let out = self.run(plugin_path, stdin, env)?;
        if out.status == ExitStatus::Code(0) {
            if self.forward_stderr {
                forward_stderr(plugin_path, &out.stderr);
            }
            return Ok(out.stdout);
        }
        let err = plugin_failure(out.status, &out.stdout, &out.stderr);
        if self.forward_stderr && !matches!(err, InvokeError::FailedWithStderr { .. }) {
            forward_stderr(plugin_path, &out.stderr);
        }
        Err(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A shell script plugin in `dir`.
    fn script(dir: &Path, body: &str) -> std::path::PathBuf {
        let path = dir.join("plugin");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn quiet() -> RawExec {
        RawExec::new().with_forward_stderr(false)
    }

    #[test]
    fn stdin_is_fed_and_stdout_and_stderr_are_kept_apart() {
        let dir = tempfile::tempdir().unwrap();
        let echo = script(dir.path(), "cat; echo note >&2");
        let out = quiet()
            .exec_plugin(&echo, b"{\"a\":1}", &PluginEnv::new())
            .unwrap();
        assert_eq!(out, b"{\"a\":1}");

        let failing = script(dir.path(), "cat >/dev/null; echo oops >&2; exit 3");
        match quiet().exec_plugin(&failing, b"x", &PluginEnv::new()) {
            Err(InvokeError::FailedWithStderr { stderr, status }) => {
                assert_eq!(stderr, "oops\n");
                assert_eq!(status, ExitStatus::Code(3));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn output_of_a_child_left_behind_is_kept_for_a_while() {
        let dir = tempfile::tempdir().unwrap();
        // The plugin exits at once; its child writes a little later.
        let plugin = script(dir.path(), "echo first; (sleep 0.2; echo second) &");
        let out = quiet()
            .exec_plugin(&plugin, b"", &PluginEnv::new())
            .unwrap();
        assert_eq!(out, b"first\nsecond\n");
    }

    #[test]
    fn a_child_left_behind_holding_the_pipes_does_not_hold_the_call() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("child");
        let plugin = script(
            dir.path(),
            &format!("sleep 60 & echo $! > {}; echo done", pid_file.display()),
        );
        let started = Instant::now();
        let out = quiet()
            .exec_plugin(&plugin, b"", &PluginEnv::new())
            .unwrap();
        assert_eq!(out, b"done\n");
        // Back after the grace period, long before the child ends.
        assert!(started.elapsed() < Duration::from_secs(30));
        let child: i32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let _ = nix::sys::signal::kill(Pid::from_raw(child), Signal::SIGKILL);
    }

    #[test]
    fn failure_mapping() {
        let status = ExitStatus::Code(1);
        let e = plugin_failure(
            status,
            br#"{"code":11,"msg":"try later","details":"lock"}"#,
            b"log line",
        );
        let cni = e.plugin_error().unwrap();
        assert_eq!(cni.code, ErrorCode::TryAgainLater);
        assert_eq!(e.to_string(), "try later; lock");

        // Go's types.Error decodes without a code; so does ours (code 0).
        let e = plugin_failure(status, br#"{"msg":"no code"}"#, b"");
        assert_eq!(e.plugin_error().unwrap().code, ErrorCode::Other(0));

        let e = plugin_failure(status, b"", b"");
        assert_eq!(
            e.to_string(),
            "netplugin failed with no error message: exit status 1"
        );
        let e = plugin_failure(ExitStatus::Signal(9), b"\n", b"oops\n");
        assert_eq!(e.to_string(), "netplugin failed: \"oops\\n\": signal: 9");
        let e = plugin_failure(status, b"not json", b"");
        assert!(e.to_string().starts_with(
            "netplugin failed but error parsing its diagnostic message \"not json\": "
        ));
    }
}
