//! A real kernel for tests: boots a Debian bookworm 6.1 kernel under qemu
//! and runs a guest test script in it, with the binaries the test names.
//!
//! This machine's kernel lacks 802.1Q VLAN links, ipvlan, dummy, vrf,
//! bridge VLAN filtering, netdevsim and RDMA; the guest kernel loads all of
//! them at boot (see README.md). A test is a bash script that prints one
//! `CHECK <name> PASS|FAIL <detail>` line per check and `ALL-DONE` at its
//! end, with the helpers of `scripts/guest-lib.sh`.
//!
//! ```no_run
//! # use std::path::Path;
//! let Some(guest) = qemu_guest::QemuGuest::prepare_if_enabled(&[]) else {
//!     return; // printed SKIPPED
//! };
//! let plugin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/vlan");
//! let run = guest.run(Path::new("qemu/guest-tests.sh"), &[plugin]).unwrap();
//! run.assert_passed(&["vlan-add", "vlan-del"]);
//! ```
//!
//! Guest runs are slow (tens of seconds, software emulation) and the first
//! preparation downloads about 224 MB, so they run only when asked:
//! [`ENABLE_VAR`]`=1` enables every crate's guest tests, a crate may name
//! its own variable too (rdma-sriov keeps `RDMA_SRIOV_QEMU=1`).

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use libcni::lock::{FileLock, LockError, LockWait};

/// Set to `1` to run the guest tests of every crate.
pub const ENABLE_VAR: &str = "CNI_QEMU";

/// Overrides the cache directory (default `<workspace>/target/qemu-guest`).
pub const CACHE_VAR: &str = "QEMU_GUEST_CACHE";

/// Seconds a preparation waits for another one to finish (default 1200:
/// a first preparation downloads and builds for a minute or more, and
/// may install host packages first).
pub const LOCK_TIMEOUT_VAR: &str = "QEMU_GUEST_LOCK_TIMEOUT";

const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(1200);

/// The lock file, in the cache directory, that prepare.sh takes too when
/// run by hand.
const LOCK_FILE: &str = "prepare.lock";

#[derive(Debug, thiserror::Error)]
pub enum GuestError {
    #[error("cannot create the cache directory {path}: {source}")]
    CacheDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("waiting for another crate's preparation of the guest: {0} (raise {LOCK_TIMEOUT_VAR}, in seconds, if a first preparation is that slow)")]
    Lock(#[from] LockError),
    #[error("{LOCK_TIMEOUT_VAR}={0:?} is not a number of seconds")]
    LockTimeout(String),
    #[error("cannot run {command}: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("{command} failed ({status}):\n{stderr}")]
    Failed {
        command: String,
        status: ExitStatus,
        stderr: String,
    },
    #[error("the guest test script {0} does not exist")]
    NoScript(PathBuf),
    #[error("{0} is not a file: build it first (`cargo build -p <crate>`)")]
    NoBinary(PathBuf),
    #[error("guest folder {0}: must be an absolute path without ..")]
    GuestDir(PathBuf),
}

/// Where [`QemuGuest::run`] puts the binaries of a run (also `CNI_PATH`
/// and the last folder of `PATH` in the guest).
pub const GUEST_BIN_DIR: &str = "/usr/local/bin";

/// Binaries for one folder of the guest, each under its file name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestFolder {
    /// An absolute path in the guest.
    pub dir: PathBuf,
    pub binaries: Vec<PathBuf>,
}

impl GuestFolder {
    pub fn new(
        dir: impl Into<PathBuf>,
        binaries: impl IntoIterator<Item = impl AsRef<Path>>,
    ) -> GuestFolder {
        GuestFolder {
            dir: dir.into(),
            binaries: binaries
                .into_iter()
                .map(|b| b.as_ref().to_path_buf())
                .collect(),
        }
    }

    /// run.sh's arguments for this folder: `--into DIR BINARY...`.
    fn run_args(&self) -> Result<Vec<&std::ffi::OsStr>, GuestError> {
        use std::path::Component;
        let plain = self.dir.is_absolute()
            && self.dir.components().all(|c| {
                matches!(
                    c,
                    Component::RootDir | Component::CurDir | Component::Normal(_)
                )
            });
        if !plain {
            return Err(GuestError::GuestDir(self.dir.clone()));
        }
        if let Some(missing) = self.binaries.iter().find(|binary| !binary.is_file()) {
            return Err(GuestError::NoBinary(missing.clone()));
        }
        let mut args = vec![std::ffi::OsStr::new("--into"), self.dir.as_os_str()];
        args.extend(self.binaries.iter().map(|b| b.as_os_str()));
        Ok(args)
    }
}

/// A prepared guest: kernel, modules and base initramfs in a cache
/// directory shared by every crate.
#[derive(Debug, Clone)]
pub struct QemuGuest {
    cache: PathBuf,
    /// How long one boot may take; `None`: run.sh's default (300 s).
    timeout: Option<Duration>,
}

/// run.sh's limit on one boot, in seconds.
const RUN_TIMEOUT_VAR: &str = "QEMU_TIMEOUT";

/// The limit run.sh gets for one boot, in seconds: the test's own
/// ([`QemuGuest::with_timeout`]) or the environment's [`RUN_TIMEOUT_VAR`],
/// whichever is longer, since a lane whose guests run slower (CI's, beside
/// release builds) can only give a boot more time, never less than the
/// test asks for. `None`: neither is set, run.sh's default applies.
fn boot_timeout(own: Option<Duration>, lane: Option<&str>) -> Option<u64> {
    let own = own.map(|timeout| timeout.as_secs().max(1));
    let lane = lane.and_then(|value| value.trim().parse::<u64>().ok());
    own.max(lane)
}

/// Whether guest tests run: [`ENABLE_VAR`]`=1` or one of `crate_vars` set
/// to `1`.
pub fn enabled(crate_vars: &[&str]) -> bool {
    enabled_by(crate_vars, |var| std::env::var(var).ok())
}

fn enabled_by(crate_vars: &[&str], lookup: impl Fn(&str) -> Option<String>) -> bool {
    std::iter::once(ENABLE_VAR)
        .chain(crate_vars.iter().copied())
        .any(|var| lookup(var).is_some_and(|value| value == "1"))
}

/// `<workspace>/target/qemu-guest`, or [`CACHE_VAR`].
pub fn default_cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(CACHE_VAR) {
        return PathBuf::from(dir);
    }
    workspace_root().join("target").join("qemu-guest")
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The directory of prepare.sh, run.sh, init and guest-lib.sh.
pub fn scripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts")
}

fn lock_timeout() -> Result<Duration, GuestError> {
    match std::env::var(LOCK_TIMEOUT_VAR) {
        Ok(value) => value
            .parse::<u64>()
            .map(Duration::from_secs)
            .map_err(|_| GuestError::LockTimeout(value)),
        Err(_) => Ok(DEFAULT_LOCK_TIMEOUT),
    }
}

/// Runs a command to its end; its stderr is shown by the test harness
/// when the test fails.
fn run_command(command: &mut Command) -> Result<std::process::Output, GuestError> {
    let output = command.output().map_err(|source| GuestError::Spawn {
        command: format!("{command:?}"),
        source,
    })?;
    eprintln!("$ {command:?}\n{}", String::from_utf8_lossy(&output.stderr));
    Ok(output)
}

/// Whether a test binary (cargo names it after its file, `qemu_suite-<hash>`)
/// is one `.ci/run` lists for its guest lane: tests/qemu*.rs of any crate,
/// and this crate's tests/guest.rs.
fn in_guest_lane(binary_name: &str) -> bool {
    binary_name.starts_with("qemu") || binary_name.starts_with("guest-")
}

impl QemuGuest {
    /// Prepares the guest when guest tests are [`enabled`]; otherwise
    /// prints `SKIPPED: ...` (the test then returns and passes) and gives
    /// `None`. Panics when the preparation fails.
    pub fn prepare_if_enabled(crate_vars: &[&str]) -> Option<QemuGuest> {
        if !enabled(crate_vars) {
            let vars: Vec<String> = std::iter::once(ENABLE_VAR)
                .chain(crate_vars.iter().copied())
                .map(|var| format!("{var}=1"))
                .collect();
            let why = format!(
                "set {} to boot the qemu guest (testing/qemu-guest/README.md)",
                vars.join(" or ")
            );
            // The host lane of `.ci/run` skips guest tests because its guest
            // lane runs them: but only binaries of tests/qemu*.rs (and this
            // crate's tests/guest.rs) are in that lane, so a guest test
            // elsewhere would skip in both. Under the no-skip rule such a
            // test fails here, naming where it must move.
            let binary = std::env::current_exe().ok();
            let binary_name = binary
                .as_deref()
                .and_then(Path::file_name)
                .and_then(|name| name.to_str())
                .unwrap_or("");
            if in_guest_lane(binary_name) {
                println!("SKIPPED: {why}");
            } else {
                libcni::test_skip::skip(
                    binary_name,
                    &format!(
                        "{why}; and this test binary is not one CI's guest lane runs \
                         (tests/qemu*.rs): move the guest test there"
                    ),
                );
            }
            return None;
        }
        match QemuGuest::prepare() {
            Ok(guest) => Some(guest),
            Err(e) => panic!("preparing the qemu guest failed: {e}"),
        }
    }

    /// Prepares the guest in [`default_cache_dir`].
    pub fn prepare() -> Result<QemuGuest, GuestError> {
        QemuGuest::prepare_in(&default_cache_dir())
    }

    /// Runs prepare.sh for `cache`, holding the cache's lock so that the
    /// tests of several crates can prepare at the same moment: the first
    /// does the work, the others wait for it (bounded) and find it done.
    pub fn prepare_in(cache: &Path) -> Result<QemuGuest, GuestError> {
        QemuGuest::prepare_with(&scripts_dir(), cache)
    }

    fn prepare_with(scripts: &Path, cache: &Path) -> Result<QemuGuest, GuestError> {
        std::fs::create_dir_all(cache).map_err(|source| GuestError::CacheDir {
            path: cache.to_path_buf(),
            source,
        })?;
        let cache = cache
            .canonicalize()
            .map_err(|source| GuestError::CacheDir {
                path: cache.to_path_buf(),
                source,
            })?;
        let wait = LockWait {
            timeout: lock_timeout()?,
            holder: "another process",
        };
        let _lock = FileLock::acquire(&cache.join(LOCK_FILE), wait)?;
        let mut command = Command::new(scripts.join("prepare.sh"));
        command.arg(&cache).env("QEMU_GUEST_LOCKED", "1");
        let output = run_command(&mut command)?;
        if !output.status.success() {
            return Err(GuestError::Failed {
                command: format!("{command:?}"),
                status: output.status,
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            });
        }
        Ok(QemuGuest {
            cache,
            timeout: None,
        })
    }

    /// Lets each boot take up to `timeout` instead of run.sh's 300 s (a
    /// script that runs for minutes under software emulation).
    pub fn with_timeout(mut self, timeout: Duration) -> QemuGuest {
        self.timeout = Some(timeout);
        self
    }

    pub fn cache_dir(&self) -> &Path {
        &self.cache
    }

    /// Boots the guest with `binaries` in [`GUEST_BIN_DIR`] (each with its
    /// shared libraries) and runs `script` in it. A guest that fails its
    /// checks is not an error here: see [`GuestRun::assert_passed`].
    pub fn run(
        &self,
        script: &Path,
        binaries: &[impl AsRef<Path>],
    ) -> Result<GuestRun, GuestError> {
        self.run_with_folders(script, &[GuestFolder::new(GUEST_BIN_DIR, binaries)])
    }

    /// [`QemuGuest::run`] with binaries in several guest folders, so that
    /// two binaries of one name (ours and the reference's plugin) can both
    /// be there, each in its own folder.
    pub fn run_with_folders(
        &self,
        script: &Path,
        folders: &[GuestFolder],
    ) -> Result<GuestRun, GuestError> {
        if !script.is_file() {
            return Err(GuestError::NoScript(script.to_path_buf()));
        }
        let mut command = Command::new(scripts_dir().join("run.sh"));
        command.arg(&self.cache).arg(script);
        let lane = std::env::var(RUN_TIMEOUT_VAR).ok();
        if let Some(secs) = boot_timeout(self.timeout, lane.as_deref()) {
            command.env(RUN_TIMEOUT_VAR, secs.to_string());
        }
        for folder in folders {
            command.args(folder.run_args()?);
        }
        let started = Instant::now();
        let output = run_command(&mut command)?;
        let console = String::from_utf8_lossy(&output.stdout).into_owned();
        Ok(GuestRun {
            checks: parse_checks(&console),
            finished: console.lines().any(|line| line == "ALL-DONE"),
            console,
            status: output.status,
            elapsed: started.elapsed(),
        })
    }
}

/// A crate's whole guest test: when guest tests are [`enabled`] (with
/// `crate_vars`), boots the guest with the binaries `binaries` gives (asked
/// only then, so a skipped test builds nothing), runs the crate's `script`
/// and asserts that it finished with every check of `required` passed;
/// otherwise prints why it skipped.
pub fn run_required_checks(
    crate_vars: &[&str],
    script: &Path,
    binaries: impl FnOnce() -> Vec<PathBuf>,
    required: &[&str],
) {
    let Some(guest) = QemuGuest::prepare_if_enabled(crate_vars) else {
        return;
    };
    let run = guest
        .run(script, &binaries())
        .unwrap_or_else(|e| panic!("cannot boot the guest: {e}"));
    run.assert_passed(required);
}

/// The spec versions `check_spec_versions` of guest-lib.sh runs a plugin
/// in: all but 1.0.0, which the crates' scripts use for everything else.
pub const OTHER_SPEC_VERSIONS: [&str; 6] = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.1.0"];

/// The checks a script's `check_spec_versions` call reports:
/// `versions-<version>-<step>` per version of [`OTHER_SPEC_VERSIONS`] and
/// step (add, layout, check, del).
pub fn spec_version_checks() -> &'static [String] {
    static NAMES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        OTHER_SPEC_VERSIONS
            .iter()
            .flat_map(|version| {
                ["add", "layout", "check", "del"].map(|step| format!("versions-{version}-{step}"))
            })
            .collect()
    })
}

/// A crate's `required` checks and those of its script's
/// `check_spec_versions` call.
pub fn with_spec_version_checks(required: &[&'static str]) -> Vec<&'static str> {
    let versions = spec_version_checks().iter().map(String::as_str);
    required.iter().copied().chain(versions).collect()
}

/// One `CHECK <name> PASS|FAIL <detail>` line of the guest console.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    pub passed: bool,
    pub detail: String,
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = if self.passed { "PASS" } else { "FAIL" };
        write!(f, "{} {status} {}", self.name, self.detail)
    }
}

/// The CHECK lines of a guest console, in order; a status other than PASS
/// counts as a failure.
pub fn parse_checks(console: &str) -> Vec<Check> {
    console
        .lines()
        .filter_map(|line| line.strip_prefix("CHECK "))
        .filter_map(|rest| {
            let mut fields = rest.splitn(3, ' ');
            let name = fields.next().filter(|name| !name.is_empty())?.to_owned();
            let passed = fields.next()? == "PASS";
            let detail = fields.next().unwrap_or("").to_owned();
            Some(Check {
                name,
                passed,
                detail,
            })
        })
        .collect()
}

/// What one boot printed.
#[derive(Debug, Clone)]
pub struct GuestRun {
    /// The whole console (kernel, init, script), also in the cache's logs/.
    pub console: String,
    pub checks: Vec<Check>,
    /// The script printed `ALL-DONE`.
    pub finished: bool,
    /// run.sh's exit status (non-zero also on a timeout).
    pub status: ExitStatus,
    /// Boot, script and power-off.
    pub elapsed: Duration,
}

impl GuestRun {
    pub fn failures(&self) -> Vec<&Check> {
        self.checks.iter().filter(|check| !check.passed).collect()
    }

    /// The names of `required` that no CHECK line reported.
    pub fn missing<'a>(&self, required: &[&'a str]) -> Vec<&'a str> {
        required
            .iter()
            .copied()
            .filter(|name| !self.checks.iter().any(|check| check.name == *name))
            .collect()
    }

    /// Panics, with the console, unless at least one check ran, none
    /// failed, every name in `required` was reported and the script
    /// reached `ALL-DONE`. `required` catches a check the script silently
    /// skipped.
    pub fn assert_passed(&self, required: &[&str]) {
        let failures: Vec<String> = self.failures().iter().map(|c| c.to_string()).collect();
        let missing = self.missing(required);
        assert!(
            !self.checks.is_empty() && failures.is_empty() && missing.is_empty() && self.finished,
            "guest run: {} checks, failed: {failures:#?}\nmissing: {missing:?}\nALL-DONE: {}\n\
             run.sh: {}\nconsole:\n{}",
            self.checks.len(),
            self.finished,
            self.status,
            self.console
        );
        assert!(
            self.status.success(),
            "run.sh failed ({}) although the checks passed:\n{}",
            self.status,
            self.console
        );
        eprintln!(
            "guest run: {} checks passed in {:.1} s",
            self.checks.len(),
            self.elapsed.as_secs_f64()
        );
    }
}

/// Panics unless every name in `required` is unique and appears in
/// `script` as a word (` name ` or ` name` at a line's end): a guard that
/// runs without qemu, so a renamed check is caught on every `cargo test`.
pub fn assert_checks_named_in_script(script: &Path, required: &[&str]) {
    let text = std::fs::read_to_string(script)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", script.display()));
    for (index, name) in required.iter().enumerate() {
        assert!(!required[..index].contains(name), "{name} listed twice");
        let named = text.contains(&format!(" {name} ")) || text.contains(&format!(" {name}\n"));
        assert!(named, "{name} not in {}", script.display());
    }
}

#[cfg(test)]
mod tests;
