//! The plugin skeleton: everything between the runtime's call and a
//! plugin's ADD/DEL/CHECK/GC/STATUS code.
//!
//! [`plugin_main`] reads the `CNI_*` variables, the configuration on stdin,
//! validates both, negotiates the spec version, calls the [`Plugin`] and
//! prints the result (converted to the configuration's version) or the
//! error JSON on stdout. The behaviour follows the Go library's skel so that
//! runtimes see the same answers, with two deliberate differences: an
//! unknown `CNI_COMMAND` is refused before stdin is looked at, and the
//! "CNI_NETNS is the plugin's own namespace" refusal happens before ADD/DEL
//! runs instead of after it has already touched that namespace.
//!
//! All I/O is injected ([`run_with`]) so the whole protocol is unit-tested
//! without touching the process environment.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::io::{self, Read, Write};
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::args::{ArgsError, CniArgs};
use crate::error::{CniError, ErrorCode, ToCniError};
use crate::logging::{self, LogContext, LogSettings};
use crate::netns::is_current_thread_netns;
use crate::plugin_conf::{is_valid_cni_name, ConfHead, PluginConf};
use crate::types::{AnyResult, ResultError};
use crate::version::{supported_strings, Semver, SpecVersion};

/// Larger configurations are refused rather than buffered: real ones are a
/// few kilobytes, and stdin is otherwise unbounded.
pub const MAX_CONFIG_BYTES: u64 = 16 * 1024 * 1024;

/// Linux's `IFNAMSIZ` minus the terminating NUL.
pub const MAX_IFNAME_BYTES: usize = crate::link_name::MAX_NAME_BYTES;

/// A `CNI_COMMAND` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Command {
    Add,
    Del,
    Check,
    Gc,
    Status,
    Version,
}

impl Command {
    pub const ALL: [Command; 6] = [
        Command::Add,
        Command::Del,
        Command::Check,
        Command::Gc,
        Command::Status,
        Command::Version,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Gc => "GC",
            Command::Status => "STATUS",
            Command::Version => "VERSION",
        }
    }

    /// Exact, upper-case names only, as in the Go library.
    pub fn parse(s: &str) -> Option<Command> {
        Command::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where the skeleton reads `CNI_*` variables from.
pub trait Env {
    fn var_os(&self, name: &str) -> Option<OsString>;
}

/// The process environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var_os(&self, name: &str) -> Option<OsString> {
        std::env::var_os(name)
    }
}

impl<K, V, S> Env for HashMap<K, V, S>
where
    K: Borrow<str> + Hash + Eq,
    V: AsRef<OsStr>,
    S: BuildHasher,
{
    fn var_os(&self, name: &str) -> Option<OsString> {
        self.get(name).map(|v| v.as_ref().to_os_string())
    }
}

impl<K, V> Env for BTreeMap<K, V>
where
    K: Borrow<str> + Ord,
    V: AsRef<OsStr>,
{
    fn var_os(&self, name: &str) -> Option<OsString> {
        self.get(name).map(|v| v.as_ref().to_os_string())
    }
}

impl<K: AsRef<str>, V: AsRef<OsStr>> Env for Vec<(K, V)> {
    fn var_os(&self, name: &str) -> Option<OsString> {
        last_in_list(self, name)
    }
}

impl<K: AsRef<str>, V: AsRef<OsStr>, const N: usize> Env for [(K, V); N] {
    fn var_os(&self, name: &str) -> Option<OsString> {
        last_in_list(self, name)
    }
}

/// The last entry wins, as with a process environment built from a list.
fn last_in_list<K: AsRef<str>, V: AsRef<OsStr>>(list: &[(K, V)], name: &str) -> Option<OsString> {
    list.iter()
        .rev()
        .find(|(k, _)| k.as_ref() == name)
        .map(|(_, v)| v.as_ref().to_os_string())
}

/// Everything a plugin gets for one call.
#[derive(Debug, Clone)]
pub struct CmdArgs {
    pub command: Command,
    /// Validated for ADD/CHECK/DEL; empty for GC and STATUS.
    pub container_id: String,
    /// `CNI_NETNS`; empty when not given (DEL, GC, STATUS).
    pub netns: String,
    /// Validated for ADD/CHECK/DEL; empty for GC and STATUS.
    pub ifname: String,
    /// `CNI_ARGS` as received; see [`CmdArgs::parse_args`].
    pub args: String,
    /// `CNI_PATH` split on `:`, empty entries dropped.
    pub path: Vec<PathBuf>,
    /// `CNI_NETNS_OVERRIDE` was `1` or `true`.
    pub netns_override: bool,
    /// The configuration bytes as received (also in `conf.bytes()`).
    pub stdin_data: Vec<u8>,
    pub conf: PluginConf,
}

impl CmdArgs {
    pub fn netns_path(&self) -> Option<&Path> {
        (!self.netns.is_empty()).then(|| Path::new(&self.netns))
    }

    /// The configuration's (negotiated) spec version.
    pub fn version(&self) -> SpecVersion {
        self.conf.cni_version
    }

    /// Parses `CNI_ARGS` accepting `known_keys`; see [`CniArgs::parse`].
    pub fn parse_args(&self, known_keys: &[&str]) -> Result<CniArgs, ArgsError> {
        CniArgs::parse(&self.args, known_keys)
    }
}

/// A CNI plugin. Errors are the plugin's own type, turned into the spec's
/// error JSON by [`ToCniError`] at the skeleton.
pub trait Plugin {
    type Error: ToCniError + fmt::Display;

    /// Printed on stderr when the binary runs without `CNI_COMMAND`; see
    /// [`about_string`]. Empty means no text (an error instead, as in Go).
    fn about(&self) -> String;

    /// Versions the plugin speaks; a configuration must name one exactly.
    fn supported_versions(&self) -> &[SpecVersion] {
        &SpecVersion::ALL
    }

    /// Returns the result in any version; the skeleton prints it converted
    /// to the configuration's version.
    fn add(&self, args: &CmdArgs) -> Result<AnyResult, Self::Error>;

    fn del(&self, args: &CmdArgs) -> Result<(), Self::Error>;

    /// As in the Go skeleton, a plugin without CHECK, GC or STATUS
    /// succeeds once the version checks pass.
    fn check(&self, _args: &CmdArgs) -> Result<(), Self::Error> {
        Ok(())
    }

    fn gc(&self, _args: &CmdArgs) -> Result<(), Self::Error> {
        Ok(())
    }

    fn status(&self, _args: &CmdArgs) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// `CNI <name> plugin v<version>`, as the Go plugins begin their about
/// text, followed by which implementation and build this is, so that on a
/// node where ours and the reference's are both installed a person can
/// tell which binary answered: `(cni-rs, Rust; release build for
/// x86_64-linux-musl, commit 1a2b3c4)`. The commit is the value of
/// `CNI_RS_COMMIT` when the plugin was built, left out when unset.
pub fn about_string(name: &str, version: &str) -> String {
    format!("CNI {name} plugin v{version} ({})", build_description())
}

/// This build of the suite: implementation, profile, target and, when the
/// build named it in `CNI_RS_COMMIT`, the commit.
pub fn build_description() -> String {
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    let libc = if cfg!(target_env = "musl") {
        "musl"
    } else {
        "gnu"
    };
    let commit = option_env!("CNI_RS_COMMIT")
        .filter(|c| !c.is_empty())
        .map(|c| format!(", commit {c}"))
        .unwrap_or_default();
    format!(
        "cni-rs, Rust; {profile} build for {}-linux-{libc}{commit}",
        std::env::consts::ARCH
    )
}

/// Runs the plugin for this process: real environment and standard streams,
/// then exits with the resulting status.
pub fn plugin_main<P: Plugin>(plugin: P) -> ! {
    // The streams are not locked for the whole run: the logger writes to
    // stderr from netns worker threads, which would wait forever on a lock
    // this thread holds.
    let status = run_with(
        &plugin,
        &ProcessEnv,
        &mut io::stdin(),
        &mut io::stdout(),
        &mut io::stderr(),
    );
    std::process::exit(status)
}

/// One plugin call over the given environment and streams; returns the exit
/// status (0 success, 1 error with the error JSON on `stdout`). Installs the
/// process logger once the configuration is known.
pub fn run_with<P: Plugin + ?Sized>(
    plugin: &P,
    env: &dyn Env,
    stdin: &mut dyn Read,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> i32 {
    run_dispatch(plugin, env, stdin, stdout, stderr, LoggerSetup::Install)
}

/// Whether a run installs the process-wide logger; unit tests run many
/// calls in one process and keep the global state out of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LoggerSetup {
    Install,
    #[cfg_attr(not(test), allow(dead_code))]
    Skip,
}

pub(crate) fn run_dispatch<P: Plugin + ?Sized>(
    plugin: &P,
    env: &dyn Env,
    stdin: &mut dyn Read,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
    logger: LoggerSetup,
) -> i32 {
    // The dispatcher is written not to panic on any input; this is a last
    // line for a plugin bug, and only works where panics unwind (release
    // builds abort).
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
        dispatch(plugin, env, stdin, stderr, logger)
    }))
    .unwrap_or_else(|payload| {
        Err(CniError::new(
            ErrorCode::Internal,
            format!("plugin panicked: {}", panic_text(payload.as_ref())),
        ))
    });
    // Sockets whose close would wait for other processes' kernel work are
    // closed by a detached child, not by this call or its exit.
    crate::detached::release_parked();
    match outcome {
        Ok(Reply::Nothing) => 0,
        Ok(Reply::Json(bytes)) => match stdout.write_all(&bytes).and_then(|()| stdout.flush()) {
            Ok(()) => 0,
            Err(e) => {
                let _ = writeln!(stderr, "cannot write result to stdout: {e}");
                1
            }
        },
        Err(error) => {
            let json = error.to_json();
            if let Err(e) = stdout
                .write_all(json.as_bytes())
                .and_then(|()| stdout.flush())
            {
                let _ = writeln!(stderr, "cannot write error to stdout: {e}: {error}");
            }
            1
        }
    }
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "unknown panic"
    }
}

/// What a successful run prints on stdout.
enum Reply {
    Nothing,
    Json(Vec<u8>),
}

/// How a command needs an environment variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    Required,
    Optional,
    /// Not read at all, so a stray value (Podman sends `dummy`s with
    /// VERSION) cannot cause an error.
    Ignored,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Var {
    ContainerId,
    Netns,
    Ifname,
    Args,
    Path,
    NetnsOverride,
}

impl Var {
    /// In the Go skeleton's order, which decides the order of names in the
    /// "missing" message.
    const ALL: [Var; 6] = [
        Var::ContainerId,
        Var::Netns,
        Var::Ifname,
        Var::Args,
        Var::Path,
        Var::NetnsOverride,
    ];

    fn name(self) -> &'static str {
        match self {
            Var::ContainerId => "CNI_CONTAINERID",
            Var::Netns => "CNI_NETNS",
            Var::Ifname => "CNI_IFNAME",
            Var::Args => "CNI_ARGS",
            Var::Path => "CNI_PATH",
            Var::NetnsOverride => "CNI_NETNS_OVERRIDE",
        }
    }

    fn need(self, command: Command) -> Need {
        use Command::*;
        match (self, command) {
            (_, Version) => Need::Ignored,
            (Var::ContainerId | Var::Ifname, Add | Check | Del) => Need::Required,
            (Var::Netns, Add | Check) => Need::Required,
            (Var::Netns, Del) => Need::Optional,
            (Var::Args | Var::NetnsOverride, Add | Check | Del) => Need::Optional,
            (Var::Path, _) => Need::Required,
            (_, Gc | Status) => Need::Ignored,
        }
    }

    fn validate(self, value: &str) -> Result<(), CniError> {
        match self {
            Var::ContainerId => validate_container_id(value),
            Var::Ifname => validate_interface_name(value),
            _ => Ok(()),
        }
    }
}

/// The environment values of one call.
#[derive(Debug, Default)]
struct EnvValues {
    container_id: String,
    netns: String,
    ifname: String,
    args: String,
    path: String,
    netns_override: String,
}

impl EnvValues {
    fn set(&mut self, var: Var, value: String) {
        match var {
            Var::ContainerId => self.container_id = value,
            Var::Netns => self.netns = value,
            Var::Ifname => self.ifname = value,
            Var::Args => self.args = value,
            Var::Path => self.path = value,
            Var::NetnsOverride => self.netns_override = value,
        }
    }
}

fn invalid_env(msg: impl Into<String>) -> CniError {
    CniError::new(ErrorCode::InvalidEnvironment, msg)
}

/// A variable's value; unset and empty are the same, as with Go's Getenv.
fn read_var(env: &dyn Env, name: &str) -> Result<String, CniError> {
    match env.var_os(name) {
        None => Ok(String::new()),
        Some(v) => v
            .into_string()
            .map_err(|_| invalid_env(format!("env variable {name} is not valid UTF-8"))),
    }
}

fn dispatch<P: Plugin + ?Sized>(
    plugin: &P,
    env: &dyn Env,
    stdin: &mut dyn Read,
    stderr: &mut dyn Write,
    logger: LoggerSetup,
) -> Result<Reply, CniError> {
    let supported = plugin.supported_versions();
    let raw_command = match env.var_os("CNI_COMMAND") {
        None => String::new(),
        Some(v) => v.to_string_lossy().into_owned(),
    };
    if raw_command.is_empty() {
        let about = plugin.about();
        if about.is_empty() {
            return Err(invalid_env("required env variables [CNI_COMMAND] missing"));
        }
        // stderr is informational here; a failed write changes nothing.
        let _ = writeln!(
            stderr,
            "{about}\nCNI protocol versions supported: {}",
            supported_strings(supported).join(", ")
        );
        return Ok(Reply::Nothing);
    }
    let command = Command::parse(&raw_command)
        .ok_or_else(|| invalid_env(format!("unknown CNI_COMMAND: {raw_command}")))?;

    let vars = read_env(env, command)?;
    if command == Command::Version {
        return Ok(Reply::Json(version_json(supported)));
    }

    let stdin_data = read_stdin(stdin)?;
    let head = ConfHead::from_slice(&stdin_data).map_err(|e| e.to_cni_error())?;
    let version = negotiate_version(command, &head.version, supported)?;
    let with_version = |e: CniError| e.with_version(version);
    let conf = PluginConf::from_head(head, version).map_err(|e| with_version(e.to_cni_error()))?;

    let env_text = |name| env.var_os(name).and_then(|v| v.into_string().ok());
    let delegated_by = env_text(logging::DELEGATED_BY_ENV).filter(|p| !p.is_empty());
    if logger == LoggerSetup::Install {
        let (settings, warnings) = LogSettings::resolve_with_warnings(
            env_text(logging::LEVEL_ENV).as_deref(),
            env_text(logging::FILE_ENV).as_deref(),
            conf.raw(),
        );
        let context = LogContext {
            plugin: LogContext::process_plugin_name(),
            command: command.as_str().to_string(),
            container_id: vars.container_id.clone(),
            ifname: vars.ifname.clone(),
            delegated_by: delegated_by.clone(),
        };
        logging::init_with_context(&settings, context);
        // A delegate reads the same settings; its caller has warned already.
        if delegated_by.is_none() {
            for warning in warnings {
                log::warn!("{warning}");
            }
        }
    }

    let netns_override = matches!(
        vars.netns_override.to_ascii_lowercase().as_str(),
        "1" | "true"
    );
    let args = CmdArgs {
        command,
        container_id: vars.container_id,
        netns: vars.netns,
        ifname: vars.ifname,
        args: vars.args,
        path: split_path(&vars.path),
        netns_override,
        stdin_data,
        conf,
    };
    log::debug!(
        "network {}, netns {}, CNI version {version}",
        args.conf.name,
        if args.netns.is_empty() {
            "(none)"
        } else {
            &args.netns
        },
    );

    if matches!(command, Command::Add | Command::Del)
        && !args.netns_override
        && !args.netns.is_empty()
        && is_current_thread_netns(&args.netns)
    {
        // Acting on the plugin's own namespace would reconfigure the host
        // (a reused PID-based path once took down the host's `lo`).
        return Err(with_version(CniError::new(
            ErrorCode::InvalidNetNs,
            "plugin's netns and netns from CNI_NETNS should not be the same",
        )));
    }

    let plugin_error = |e: P::Error| {
        log_failure(command, &e, delegated_by.as_deref());
        with_version(e.to_cni_error())
    };
    match command {
        Command::Add => {
            let result = plugin.add(&args).map_err(plugin_error)?;
            let printed = result
                .convert_to(version)
                .map_err(|e| with_version(conversion_error(&e, version)))?;
            Ok(Reply::Json(printed.to_pretty_json()))
        }
        Command::Del => plugin
            .del(&args)
            .map(|()| Reply::Nothing)
            .map_err(plugin_error),
        Command::Check => plugin
            .check(&args)
            .map(|()| Reply::Nothing)
            .map_err(plugin_error),
        Command::Gc => plugin
            .gc(&args)
            .map(|()| Reply::Nothing)
            .map_err(plugin_error),
        Command::Status => plugin
            .status(&args)
            .map(|()| Reply::Nothing)
            .map_err(plugin_error),
        // Answered above, before stdin is read.
        Command::Version => Ok(Reply::Json(version_json(supported))),
    }
}

/// A failure is logged once, as an error, by the plugin that reports it to
/// the runtime. A delegate's failure reaches the runtime through its caller
/// (whose message includes it), so the delegate only notes it at debug.
fn log_failure(command: Command, error: &dyn fmt::Display, delegated_by: Option<&str>) {
    match delegated_by {
        None => log::error!("{command} failed: {error}"),
        Some(caller) => log::debug!("{command} failed, reported by {caller}: {error}"),
    }
}

/// Reads and checks the variables `command` uses. Like the Go skeleton,
/// a present but invalid container ID or interface name is reported at
/// once; missing variables are reported together.
fn read_env(env: &dyn Env, command: Command) -> Result<EnvValues, CniError> {
    let mut values = EnvValues::default();
    let mut missing = Vec::new();
    for var in Var::ALL {
        let need = var.need(command);
        if need == Need::Ignored {
            continue;
        }
        let value = read_var(env, var.name())?;
        if value.is_empty() {
            if need == Need::Required {
                missing.push(var.name());
            }
        } else if need == Need::Required {
            var.validate(&value)?;
        }
        values.set(var, value);
    }
    if !missing.is_empty() {
        return Err(invalid_env(format!(
            "required env variables [{}] missing",
            missing.join(",")
        )));
    }
    Ok(values)
}

fn read_stdin(stdin: &mut dyn Read) -> Result<Vec<u8>, CniError> {
    let mut data = Vec::new();
    stdin
        .take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut data)
        .map_err(|e| CniError::new(ErrorCode::Io, format!("error reading from stdin: {e}")))?;
    if data.len() as u64 > MAX_CONFIG_BYTES {
        return Err(CniError::new(
            ErrorCode::Decode,
            format!("error unmarshall network config: larger than {MAX_CONFIG_BYTES} bytes"),
        ));
    }
    Ok(data)
}

/// Settles the version of this call: CHECK, GC and STATUS first need a
/// configuration recent enough to have them, then the configuration must
/// name a supported version exactly (as Go compares strings, "1.0" is not
/// "1.0.0").
fn negotiate_version(
    command: Command,
    written: &str,
    supported: &[SpecVersion],
) -> Result<SpecVersion, CniError> {
    let config_version = if written.is_empty() { "0.1.0" } else { written };
    let introduced_in = match command {
        Command::Check => Some(SpecVersion::V0_4_0),
        Command::Gc | Command::Status => Some(SpecVersion::V1_1_0),
        Command::Add | Command::Del | Command::Version => None,
    };
    if let Some(introduced_in) = introduced_in {
        let config_semver: Semver =
            config_version
                .parse()
                .map_err(|e: crate::version::VersionError| {
                    CniError::new(ErrorCode::Decode, e.to_string())
                })?;
        if config_semver < introduced_in.semver() {
            return Err(CniError::new(
                ErrorCode::IncompatibleVersion,
                format!("config version does not allow {command}"),
            ));
        }
        if !supported.iter().any(|v| v.semver() >= config_semver) {
            return Err(CniError::new(
                ErrorCode::IncompatibleVersion,
                format!("plugin version does not allow {command}"),
            ));
        }
    }
    supported
        .iter()
        .copied()
        .find(|v| v.as_str() == config_version)
        .ok_or_else(|| {
            let listed: Vec<String> = supported
                .iter()
                .map(|v| format!("{:?}", v.as_str()))
                .collect();
            CniError::new(ErrorCode::IncompatibleVersion, "incompatible CNI versions").with_details(
                format!(
                    "config is {config_version:?}, plugin supports [{}]",
                    listed.join(" ")
                ),
            )
        })
}

/// A result the configuration's version cannot express (an L2-only result
/// has no 0.1.0/0.2.0 form) is a version incompatibility between the
/// configuration and what the plugin did.
fn conversion_error(e: &ResultError, version: SpecVersion) -> CniError {
    let code = match e {
        ResultError::NoValidIps | ResultError::UnsupportedVersion(_) => {
            ErrorCode::IncompatibleVersion
        }
        ResultError::Decode(_) | ResultError::NotAnObject => ErrorCode::Internal,
    };
    CniError::new(code, e.to_string()).with_details(format!(
        "the result cannot be expressed in CNI version {version}"
    ))
}

#[derive(Serialize)]
struct VersionInfo<'a> {
    #[serde(rename = "cniVersion")]
    cni_version: &'static str,
    #[serde(rename = "supportedVersions")]
    supported_versions: Vec<&'a str>,
}

/// `{"cniVersion":"1.1.0","supportedVersions":[...]}`: the Go skeleton
/// answers with the library's version, not the one on stdin.
fn version_json(supported: &[SpecVersion]) -> Vec<u8> {
    let info = VersionInfo {
        cni_version: SpecVersion::CURRENT.as_str(),
        supported_versions: supported_strings(supported),
    };
    // A struct of strings always serialises; the fallback is unreachable.
    let mut out = serde_json::to_vec(&info).unwrap_or_default();
    out.push(b'\n');
    out
}

fn split_path(raw: &str) -> Vec<PathBuf> {
    raw.split(':')
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .collect()
}

/// Container IDs: non-empty (code 3) and `^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`
/// (code 4).
pub fn validate_container_id(id: &str) -> Result<(), CniError> {
    if id.is_empty() {
        return Err(CniError::new(
            ErrorCode::UnknownContainer,
            "missing containerID",
        ));
    }
    if !is_valid_cni_name(id) {
        return Err(invalid_env("invalid characters in containerID").with_details(id));
    }
    Ok(())
}

/// Interface names the kernel accepts ([`crate::link_name::check`]): 1 to
/// 15 bytes, not `.` or `..`, no `/`, `:`, whitespace or control characters
/// (code 4, the reference's messages and details).
pub fn validate_interface_name(name: &str) -> Result<(), CniError> {
    use crate::link_name::{check, NameRule};
    check(name).map_err(|rule| {
        let e = invalid_env(rule.to_string());
        match rule {
            NameRule::TooLong => e.with_details(format!(
                "interface name should be less than {} characters",
                MAX_IFNAME_BYTES + 1
            )),
            _ => e,
        }
    })
}

#[cfg(test)]
mod tests;
