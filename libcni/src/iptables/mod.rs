//! iptables through its programs, for every plugin that writes iptables
//! rules: a table read with one `iptables-save -t <table>` ([`save`]), a
//! change written with one `iptables-restore --noflush` ([`restore`]),
//! atomic in the kernel, and every process run with a bounded wait for the
//! xtables lock and a hard deadline ([`Programs`]).
//!
//! Where `iptables` is iptables-nft, the plugins write the same rules
//! in-process instead ([`crate::nftables::iptables_nft`]); the programs
//! remain for legacy iptables and for rules that module does not write.
//!
//! Everything works in the network namespace of the calling thread: the
//! programs inherit it.

pub mod nft_save;
pub mod nft_write;
pub mod restore;
mod run;
pub mod save;

use std::io;
use std::process::ExitStatus;
use std::time::Duration;

use crate::error::{CniError, ErrorCode, ToCniError};
use crate::nftables::iptables_nft::{self, FALLBACK_DIRS};
use crate::IpFamily;

pub use restore::{checked_join, join_args, quote_arg, RestoreScript, UnsafeArg};
pub use run::is_xtables_lock_timeout;
pub use save::{option_value, split_args, SaveParseError, SavedRule, SavedTable};

/// How long `iptables-restore` waits for the xtables lock (legacy iptables
/// only) before giving up; the reference plugins wait forever.
pub const XTABLES_LOCK_WAIT_SECONDS: u32 = 10;

/// How much longer than its lock wait any process may take before it is
/// killed.
const DEADLINE_OVER_LOCK_WAIT: Duration = Duration::from_secs(20);

#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("{program} not found in PATH or {}", FALLBACK_DIRS.join(":"))]
    NotFound { program: String },
    #[error("cannot run {program}: {source}")]
    Spawn { program: String, source: io::Error },
    #[error("{program} did not finish within {}s and was killed", .deadline.as_secs())]
    Deadline { program: String, deadline: Duration },
    #[error("{program}: the xtables lock is still held by another program after {seconds}s")]
    XtablesLock { program: String, seconds: u32 },
    #[error("{program} failed ({status}): {stderr}")]
    Failed {
        program: String,
        status: ExitStatus,
        stderr: String,
    },
    #[error("cannot read {program} output: {source}")]
    Unreadable {
        program: String,
        source: SaveParseError,
    },
    #[error("{program}: {source}")]
    UnsafeInput { program: String, source: UnsafeArg },
}

impl CommandError {
    /// The program that failed, as it was named.
    pub fn program(&self) -> &str {
        match self {
            CommandError::NotFound { program }
            | CommandError::Spawn { program, .. }
            | CommandError::Deadline { program, .. }
            | CommandError::XtablesLock { program, .. }
            | CommandError::Failed { program, .. }
            | CommandError::Unreadable { program, .. }
            | CommandError::UnsafeInput { program, .. } => program,
        }
    }

    /// Another program held the xtables lock for the whole wait, or the
    /// program hung: the call may succeed if tried again (11). Anything
    /// else the host refused (999).
    pub fn error_code(&self) -> ErrorCode {
        match self {
            CommandError::XtablesLock { .. } | CommandError::Deadline { .. } => {
                ErrorCode::TryAgainLater
            }
            CommandError::NotFound { .. }
            | CommandError::Spawn { .. }
            | CommandError::Failed { .. }
            | CommandError::Unreadable { .. } => ErrorCode::Internal,
            // A value of the configuration that reached a rule unchecked.
            CommandError::UnsafeInput { .. } => ErrorCode::InvalidNetworkConfig,
        }
    }
}

impl ToCniError for CommandError {
    fn to_cni_error(&self) -> CniError {
        CniError::new(self.error_code(), self.to_string())
    }
}

fn deadline_for(lock_wait_seconds: u32) -> Duration {
    Duration::from_secs(u64::from(lock_wait_seconds)) + DEADLINE_OVER_LOCK_WAIT
}

/// The save and restore programs of one family (`iptables-save`,
/// `ip6tables-restore`, ...), found on PATH or in the usual sbin
/// directories (runtimes may run plugins with a short PATH).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Programs {
    save: String,
    restore: String,
    /// Extra environment for both (tests point the xtables lock file
    /// elsewhere with `XTABLES_LOCKFILE`).
    env: Vec<(String, String)>,
    lock_wait_seconds: u32,
    /// The longest any one process may take.
    deadline: Duration,
}

impl Programs {
    pub fn of(family: IpFamily) -> Programs {
        let (save, restore) = match family {
            IpFamily::V4 => ("iptables-save", "iptables-restore"),
            IpFamily::V6 => ("ip6tables-save", "ip6tables-restore"),
        };
        Programs {
            save: save.to_string(),
            restore: restore.to_string(),
            env: Vec::new(),
            lock_wait_seconds: XTABLES_LOCK_WAIT_SECONDS,
            deadline: deadline_for(XTABLES_LOCK_WAIT_SECONDS),
        }
    }

    /// Other programs in their place (a name on PATH, or a path), for
    /// instance `iptables-legacy-save`.
    pub fn with_names(mut self, save: &str, restore: &str) -> Programs {
        self.save = save.to_string();
        self.restore = restore.to_string();
        self
    }

    /// One more environment variable for both programs.
    pub fn with_env(mut self, name: &str, value: &str) -> Programs {
        self.env.push((name.to_string(), value.to_string()));
        self
    }

    /// Another wait for the xtables lock.
    pub fn with_lock_wait_seconds(mut self, seconds: u32) -> Programs {
        self.lock_wait_seconds = seconds;
        self.deadline = deadline_for(seconds);
        self
    }

    /// A shorter deadline than the lock wait implies (tests of the kill).
    #[cfg(test)]
    fn with_deadline(mut self, deadline: Duration) -> Programs {
        self.deadline = deadline;
        self
    }

    pub fn save_name(&self) -> &str {
        &self.save
    }

    pub fn restore_name(&self) -> &str {
        &self.restore
    }

    /// Whether the save program is iptables-nft's (whose rules the plugins
    /// may write in-process).
    pub fn is_iptables_nft(&self) -> bool {
        iptables_nft::is_iptables_nft(&self.save)
    }

    /// `<save> -t <table>`: the table as printed.
    pub fn save(&self, table: &str) -> Result<String, CommandError> {
        self.run(&self.save, &["-t", table], None)
    }

    /// `<save> -t <table>`, parsed.
    pub fn read(&self, table: &str) -> Result<SavedTable, CommandError> {
        let text = self.save(table)?;
        SavedTable::parse(&text, table).map_err(|source| CommandError::Unreadable {
            program: self.save.clone(),
            source,
        })
    }

    /// Applies `script` with `<restore> --noflush`, which changes nothing
    /// the script does not name, all at once.
    pub fn restore(&self, script: &RestoreScript) -> Result<(), CommandError> {
        let input = script
            .render()
            .map_err(|source| CommandError::UnsafeInput {
                program: self.restore.clone(),
                source,
            })?;
        log::debug!("{} --noflush:\n{input}", self.restore);
        let wait = format!("--wait={}", self.lock_wait_seconds);
        self.run(&self.restore, &["--noflush", &wait], Some(&input))
            .map(|_| ())
    }

    /// Runs `program` and returns its output; a non-zero exit is an error
    /// with the program's stderr.
    fn run(
        &self,
        program: &str,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<String, CommandError> {
        let path = iptables_nft::find_program(program).ok_or_else(|| CommandError::NotFound {
            program: program.to_string(),
        })?;
        log::debug!("running {} {}", path.display(), args.join(" "));
        let deadline = self.deadline;
        let ended = run::run(&path, args, &self.env, stdin, deadline).map_err(|source| {
            CommandError::Spawn {
                program: program.to_string(),
                source,
            }
        })?;
        let output = match ended {
            run::Ended::Exited(output) => output,
            run::Ended::Killed => {
                return Err(CommandError::Deadline {
                    program: program.to_string(),
                    deadline,
                })
            }
        };
        if output.status.success() {
            return Ok(String::from_utf8_lossy(&output.stdout).into_owned());
        }
        let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
        if is_xtables_lock_timeout(output.status, &stderr) {
            return Err(CommandError::XtablesLock {
                program: program.to_string(),
                seconds: self.lock_wait_seconds,
            });
        }
        Err(CommandError::Failed {
            program: program.to_string(),
            status: output.status,
            stderr,
        })
    }
}

#[cfg(test)]
mod tests;
