//! Timing and peak memory of one process run, and the statistics over many.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What one run of a program cost.
#[derive(Debug, Clone, Copy)]
pub struct RunCost {
    pub wall: Duration,
    /// Peak resident set of the process (and its waited-for children), KiB.
    pub max_rss_kib: u64,
    pub exit_code: i32,
}

#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    #[error("failed to start {path}: {source}")]
    Spawn {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} exited with status {code}")]
    Failed { path: String, code: i32 },
    #[error("failed to wait for {path}: {source}")]
    Wait {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot create a state directory under {path}: {source}")]
    StateDir {
        path: String,
        source: std::io::Error,
    },
}

/// Runs `program` once with `env` (added to a cleared environment) and
/// `stdin`, and measures it. `wait4` is used instead of `Child::wait` because
/// it also returns the child's resource usage, which is where peak RSS comes
/// from without polling /proc.
pub fn run_once(
    program: &Path,
    env: &[(&str, &str)],
    stdin: &[u8],
) -> Result<RunCost, MeasureError> {
    run(program, env, stdin, Start::Fork)
}

/// How [`run`] starts the child.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Start {
    /// A copy of this process that then execs: peak RSS is the child's own.
    Fork,
    /// std's default (posix_spawn, which shares this process's memory until
    /// exec), as runtimes start plugins (Go's os/exec does the same).
    Spawn,
}

/// Like [`run_ok`] but timing only, with the plugin started as a runtime
/// starts it ([`Start::Spawn`]). Why: forking this process (copying its
/// page tables, which the exec then tears down) cost 0.2-0.5 ms per call
/// here, the same for both sides, which no runtime pays and which pulled
/// every ratio towards 1. Peak RSS still needs [`run_once`].
pub fn run_ok_timed(
    program: &Path,
    env: &[(&str, &str)],
    stdin: &[u8],
) -> Result<Duration, MeasureError> {
    let cost = run(program, env, stdin, Start::Spawn)?;
    if cost.exit_code != 0 {
        return Err(MeasureError::Failed {
            path: program.display().to_string(),
            code: cost.exit_code,
        });
    }
    Ok(cost.wall)
}

fn run(
    program: &Path,
    env: &[(&str, &str)],
    stdin: &[u8],
    start_as: Start,
) -> Result<RunCost, MeasureError> {
    let path = program.display().to_string();
    let mut cmd = Command::new(program);
    cmd.env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // Fork, not vfork: std spawns with posix_spawn, whose child shares the
    // parent's memory until exec, and the kernel then records the parent's
    // high-water mark as the child's `ru_maxrss` (every one of our plugins
    // read as the bench's own 2.8 MiB). A pre_exec hook makes std fork; the
    // child's figure then includes only the parent pages the fork copied
    // (well under 1 MiB), for both sides alike. Costs 0.2-0.5 ms per call
    // on a busy machine, also alike; `run_ok_timed` avoids it where only
    // time is measured.
    if start_as == Start::Fork {
        // SAFETY: the hook does nothing, so it is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| Ok(()));
        }
    }
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(|source| MeasureError::Spawn {
        path: path.clone(),
        source,
    })?;
    if let Some(mut input) = child.stdin.take() {
        // A program that exits without reading stdin (like /bin/true) closes
        // the pipe early; that is not a measurement error.
        let _ = input.write_all(stdin);
    }
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: pid is our own unreaped child; status and usage are valid
        // pointers for the duration of the call.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            break;
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(MeasureError::Wait { path, source: err });
        }
    }
    let wall = start.elapsed();
    let exit_code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    Ok(RunCost {
        wall,
        max_rss_kib: u64::try_from(usage.ru_maxrss).unwrap_or(0),
        exit_code,
    })
}

/// Like [`run_once`], but a non-zero exit is an error: a benchmark of a
/// call that fails measures nothing useful.
pub fn run_ok(program: &Path, env: &[(&str, &str)], stdin: &[u8]) -> Result<RunCost, MeasureError> {
    let cost = run_once(program, env, stdin)?;
    if cost.exit_code != 0 {
        return Err(MeasureError::Failed {
            path: program.display().to_string(),
            code: cost.exit_code,
        });
    }
    Ok(cost)
}

/// Median, 90th percentile and mean of a sample, in milliseconds.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Summary {
    pub median_ms: f64,
    pub p90_ms: f64,
    pub mean_ms: f64,
    pub runs: usize,
}

pub fn summarize(samples: &[Duration]) -> Summary {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(|a, b| a.total_cmp(b));
    let pick = |q: f64| -> f64 {
        if ms.is_empty() {
            return f64::NAN;
        }
        let idx = ((ms.len() - 1) as f64 * q).round() as usize;
        ms[idx.min(ms.len() - 1)]
    };
    let mean = if ms.is_empty() {
        f64::NAN
    } else {
        ms.iter().sum::<f64>() / ms.len() as f64
    };
    Summary {
        median_ms: pick(0.5),
        p90_ms: pick(0.9),
        mean_ms: mean,
        runs: ms.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_known_sample() {
        let s: Vec<Duration> = (1..=10).map(Duration::from_millis).collect();
        let sum = summarize(&s);
        assert_eq!(sum.runs, 10);
        assert!((sum.median_ms - 6.0).abs() < 1e-9 || (sum.median_ms - 5.0).abs() < 1e-9);
        assert!((sum.mean_ms - 5.5).abs() < 1e-9);
        assert!(sum.p90_ms >= 9.0);
    }

    #[test]
    fn run_once_reports_exit_code_and_rss() {
        let c = run_once(Path::new("/bin/sh"), &[], b"exit 3\n").unwrap();
        assert_eq!(c.exit_code, 3);
        assert!(c.max_rss_kib > 0);
        let c = run_once(Path::new("/bin/true"), &[], b"").unwrap();
        assert_eq!(c.exit_code, 0);
    }

    #[test]
    fn run_ok_timed_fails_on_a_non_zero_exit() {
        let e = run_ok_timed(Path::new("/bin/sh"), &[], b"exit 3\n").unwrap_err();
        assert!(matches!(e, MeasureError::Failed { code: 3, .. }), "{e}");
        assert!(run_ok_timed(Path::new("/bin/true"), &[], b"").is_ok());
    }

    #[test]
    fn missing_program_is_an_error() {
        assert!(run_once(Path::new("/nonexistent/prog"), &[], b"").is_err());
    }
}
