//! Running a plugin binary as a child process.

use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitid, Id, WaitPidFlag};
use nix::unistd::Pid;
use serde::Deserialize;

use super::{Exec, ExitStatus, InvokeError, PluginEnv};
use crate::error::{CniError, ErrorCode};

/// How long a plugin may run by default. It matches the kubelet's default
/// runtime request timeout: past it the caller has given up on the
/// operation, and a plugin still running is stuck rather than slow.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Spawning fails with ETXTBSY while a binary is being replaced (package
/// upgrades) or while another thread of this process briefly holds it open
/// for writing across a fork; both clear up quickly.
const TEXT_FILE_BUSY_RETRIES: u32 = 5;
const TEXT_FILE_BUSY_FIRST_DELAY: Duration = Duration::from_millis(50);

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
        let mut delay = TEXT_FILE_BUSY_FIRST_DELAY;
        let mut attempt = 0;
        loop {
            let mut cmd = std::process::Command::new(&program);
            cmd.env_clear()
                .envs(env.iter())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                // Its own process group, so that a timeout kills whatever the
                // plugin started too (iptables, a shell's children).
                .process_group(0);
            match cmd.spawn() {
                Ok(child) => return Ok(child),
                Err(e)
                    if e.raw_os_error() == Some(libc::ETXTBSY)
                        && attempt < TEXT_FILE_BUSY_RETRIES =>
                {
                    log::debug!("{}: text file busy, retrying", path.display());
                    thread::sleep(delay);
                    delay *= 2;
                    attempt += 1;
                }
                Err(source) => {
                    return Err(InvokeError::Spawn {
                        path: path.to_path_buf(),
                        source,
                    })
                }
            }
        }
    }

    fn run(&self, path: &Path, stdin: &[u8], env: &PluginEnv) -> Result<Output, InvokeError> {
        let mut child = self.spawn(path, env)?;
        let io_err = |source| InvokeError::Io {
            path: path.to_path_buf(),
            source,
        };
        let pipes = start_pipe_threads(&mut child, stdin.to_vec());
        let exited = pipes.and_then(|pipes| Ok((pipes, start_exit_watch(&child)?)));
        let (pipes, exited) = match exited {
            Ok(v) => v,
            Err(e) => {
                kill_process_group(&mut child);
                return Err(io_err(e));
            }
        };

        match exited.recv_timeout(self.timeout) {
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => {}
            Err(mpsc::RecvTimeoutError::Timeout) => {
                kill_process_group(&mut child);
                return Err(InvokeError::Timeout {
                    path: path.to_path_buf(),
                    timeout: self.timeout,
                });
            }
        }
        let status = child.wait().map_err(io_err)?;
        let status = match (status.code(), status.signal()) {
            (Some(code), _) => ExitStatus::Code(code),
            (None, Some(sig)) => ExitStatus::Signal(sig),
            (None, None) => ExitStatus::Code(-1),
        };
        let deadline = Instant::now() + OUTPUT_GRACE;
        Ok(Output {
            status,
            stdout: drain(&pipes.stdout, deadline),
            stderr: drain(&pipes.stderr, deadline),
        })
    }
}

struct Output {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

struct PipeReaders {
    stdout: mpsc::Receiver<Vec<u8>>,
    stderr: mpsc::Receiver<Vec<u8>>,
}

/// Feeds stdin and collects stdout and stderr on their own threads, so a
/// plugin that writes a lot before reading (or never reads) cannot
/// deadlock against us.
fn start_pipe_threads(child: &mut Child, stdin: Vec<u8>) -> std::io::Result<PipeReaders> {
    if let Some(mut pipe) = child.stdin.take() {
        thread::Builder::new()
            .name("cni-plugin-stdin".into())
            .spawn(move || {
                // A plugin may exit without reading its input (VERSION).
                let _ = pipe.write_all(&stdin);
            })?;
    }
    Ok(PipeReaders {
        stdout: start_reader(child.stdout.take(), "cni-plugin-stdout")?,
        stderr: start_reader(child.stderr.take(), "cni-plugin-stderr")?,
    })
}

fn start_reader<R: Read + Send + 'static>(
    pipe: Option<R>,
    name: &str,
) -> std::io::Result<mpsc::Receiver<Vec<u8>>> {
    let (tx, rx) = mpsc::channel();
    if let Some(mut pipe) = pipe {
        thread::Builder::new().name(name.into()).spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match pipe.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        if tx.send(buf[..n].to_vec()).is_err() {
                            break;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
        })?;
    }
    Ok(rx)
}

/// Collects what a reader thread sent until its pipe closes or `deadline`.
fn drain(rx: &mpsc::Receiver<Vec<u8>>, deadline: Instant) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(chunk) => {
                let room = MAX_OUTPUT.saturating_sub(out.len());
                out.extend_from_slice(chunk.get(..room.min(chunk.len())).unwrap_or_default());
            }
            Err(_) => return out,
        }
    }
}

/// Signals on the returned channel once the child has exited, without
/// reaping it: until we reap it its pid cannot be reused, so a kill on
/// timeout can never hit an unrelated process.
fn start_exit_watch(child: &Child) -> std::io::Result<mpsc::Receiver<()>> {
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
    let (tx, rx) = mpsc::channel();
    thread::Builder::new()
        .name("cni-plugin-wait".into())
        .spawn(move || loop {
            match waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {
                Err(Errno::EINTR) => continue,
                _ => {
                    let _ = tx.send(());
                    return;
                }
            }
        })?;
    Ok(rx)
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
