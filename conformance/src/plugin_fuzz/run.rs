//! One plugin call as a runtime makes it, bounded in time, and its verdict.

use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long a call may take before it counts as a hang and is killed.
pub const CALL_LIMIT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("starting {0}: {1}")]
    Spawn(String, std::io::Error),
    #[error("waiting for the plugin: {0}")]
    Wait(std::io::Error),
}

pub struct Outcome {
    /// None when the call was killed for running past [`CALL_LIMIT`].
    pub status: Option<ExitStatus>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub elapsed: Duration,
}

/// Why a call failed; `None` from [`judge`] is a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Failure {
    Signal,
    Panic,
    Hang,
    NoErrorJson,
    BadResult,
    /// A case of [`super::regressions`] did not get its pinned answer.
    Regressed,
}

impl Failure {
    pub fn name(self) -> &'static str {
        match self {
            Failure::Signal => "signal",
            Failure::Panic => "panic",
            Failure::Hang => "hang",
            Failure::NoErrorJson => "no-error-json",
            Failure::BadResult => "bad-result",
            Failure::Regressed => "regressed",
        }
    }

    pub const ALL: [Failure; 6] = [
        Failure::Signal,
        Failure::Panic,
        Failure::Hang,
        Failure::NoErrorJson,
        Failure::BadResult,
        Failure::Regressed,
    ];
}

/// Runs `plugin` with exactly `env` (plus PATH, which a runtime passes on
/// and plugins need to find iptables), `stdin` on its standard input.
/// The plugin leads its own process group so that a hang's children die
/// with it and nothing keeps the pipes open.
pub fn call(
    plugin: &Path,
    env: &[(&str, Option<String>)],
    stdin: &[u8],
) -> Result<Outcome, RunError> {
    let mut cmd = Command::new(plugin);
    cmd.env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        // A relative path in a config resolves here, inside the sandbox's
        // tmpfs, not in the folder the fuzzer was started from.
        .current_dir("/tmp");
    for (k, v) in env {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| RunError::Spawn(plugin.display().to_string(), e))?;
    let pgid = child.id() as i32;
    // A plugin may exit without reading its input: the writer must not
    // block the harness, so it is a thread of its own (EPIPE is ignored).
    let input = stdin.to_vec();
    let mut pipe_in = child.stdin.take();
    let writer = std::thread::spawn(move || {
        if let Some(p) = pipe_in.as_mut() {
            let _ = p.write_all(&input);
        }
    });
    let out = reader(child.stdout.take());
    let err = reader(child.stderr.take());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let status = match rx.recv_timeout(CALL_LIMIT) {
        Ok(s) => Some(s.map_err(RunError::Wait)?),
        Err(_) => None,
    };
    // Also after a normal exit: a child it left behind would hold the pipes.
    // SAFETY: kill(2) of our own child's process group; no memory involved.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    if status.is_none() {
        let _ = rx.recv();
    }
    let elapsed = start.elapsed();
    let _ = writer.join();
    Ok(Outcome {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
        elapsed,
    })
}

fn reader<R: Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut buf);
        }
        buf
    })
}

/// The verdict on a call of `verb`: exit 0 with a result (an object; DEL,
/// CHECK, GC and STATUS may print nothing), or non-zero with an error
/// object having a numeric `code` and a string `msg`, in time.
pub fn judge(verb: &str, o: &Outcome) -> Option<Failure> {
    let Some(status) = o.status else {
        return Some(Failure::Hang);
    };
    // Rust's panic message, and Go's (the reference plugins).
    let stderr = String::from_utf8_lossy(&o.stderr);
    if stderr.contains("panicked at")
        || (stderr.contains("panic: ") && stderr.contains("goroutine "))
    {
        return Some(Failure::Panic);
    }
    if status.signal().is_some() {
        return Some(Failure::Signal);
    }
    let parsed: Option<Value> = serde_json::from_slice(&o.stdout).ok();
    if status.success() {
        let quiet_ok =
            !matches!(verb, "ADD" | "VERSION") && o.stdout.iter().all(u8::is_ascii_whitespace);
        return match parsed {
            Some(Value::Object(_)) => None,
            _ if quiet_ok => None,
            _ => Some(Failure::BadResult),
        };
    }
    let is_error = parsed.as_ref().is_some_and(|v| {
        v.get("code").is_some_and(Value::is_number) && v.get("msg").is_some_and(Value::is_string)
    });
    if is_error {
        None
    } else {
        Some(Failure::NoErrorJson)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(code: i32, stdout: &str, stderr: &str) -> Outcome {
        Outcome {
            status: Some(ExitStatus::from_raw(code)),
            stdout: stdout.as_bytes().to_vec(),
            stderr: stderr.as_bytes().to_vec(),
            elapsed: Duration::ZERO,
        }
    }

    #[test]
    fn verdicts() {
        // from_raw takes a wait status: exit code << 8, or the signal.
        assert_eq!(judge("ADD", &outcome(0, "{}", "")), None);
        assert_eq!(judge("ADD", &outcome(0, "", "")), Some(Failure::BadResult));
        assert_eq!(judge("DEL", &outcome(0, "", "")), None);
        assert_eq!(
            judge("DEL", &outcome(1 << 8, r#"{"code":7,"msg":"x"}"#, "")),
            None
        );
        assert_eq!(
            judge("DEL", &outcome(1 << 8, r#"{"code":"7","msg":"x"}"#, "")),
            Some(Failure::NoErrorJson)
        );
        assert_eq!(
            judge("DEL", &outcome(1 << 8, "", "")),
            Some(Failure::NoErrorJson)
        );
        assert_eq!(judge("ADD", &outcome(6, "", "")), Some(Failure::Signal));
        assert_eq!(
            judge("ADD", &outcome(101 << 8, "", "thread 'main' panicked at x")),
            Some(Failure::Panic)
        );
    }

    #[test]
    fn a_hang_is_killed() {
        let env = [("CNI_COMMAND", Some("ADD".to_string()))];
        let o = call(Path::new("/bin/sleep"), &env, b"").unwrap();
        // /bin/sleep with no operand exits at once with an error.
        assert!(o.status.is_some());
    }
}
