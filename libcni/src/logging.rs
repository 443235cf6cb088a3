//! Plugin logging: the `log` facade, written to stderr and optionally to a
//! file.
//!
//! stdout belongs to the result JSON, so logs never go there. Runtimes often
//! drop a plugin's stderr (kubelet, CRI-O), hence the optional file, opened
//! in append mode because many plugin runs share it.
//!
//! Settings come from the environment first (`CNI_LOG_LEVEL`, `CNI_LOG_FILE`,
//! an operator's override for every network) and then from the plugin
//! configuration (`logLevel`, `logFile`). The default level is `warn`. A
//! level that is not understood is skipped with a warning, never an error:
//! a bad log setting must not fail a network.
//!
//! Every line names the plugin and the call it belongs to ([`LogContext`]),
//! because many plugins and containers share one file:
//! `2024-05-01T12:00:00.123Z INFO  bridge[4242] ADD container=abc ifname=eth0: ...`.
//! A delegated plugin (IPAM) reads the same configuration, so it writes to
//! the same file; [`DELEGATED_BY_ENV`] tells it who called it, its lines say
//! so, and it leaves logging its failure as an error to the caller, which
//! reports it to the runtime (each failure appears once).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use log::LevelFilter;
use rustix::fs::OFlags;
use serde_json::Value;

use crate::confine::{ConfineError, Confined, Place, Places};

pub const LEVEL_ENV: &str = "CNI_LOG_LEVEL";
pub const FILE_ENV: &str = "CNI_LOG_FILE";
pub const LEVEL_KEY: &str = "logLevel";
pub const FILE_KEY: &str = "logFile";

pub const DEFAULT_LEVEL: LevelFilter = LevelFilter::Warn;

/// Set by [`crate::invoke::Delegator`] for the plugins it runs: the name of
/// the calling plugin.
pub const DELEGATED_BY_ENV: &str = "CNI_RS_DELEGATED_BY";

/// The level names [`parse_level`] knows, for messages.
pub const KNOWN_LEVELS: &str = "off, error, warn, info, debug, trace";

/// Which plugin call a line belongs to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogContext {
    /// The plugin's name, as its binary is called (`bridge`, `host-local`).
    pub plugin: String,
    /// `ADD`, `DEL`, ...; empty before the command is known.
    pub command: String,
    /// Empty for GC and STATUS, which are not about one container.
    pub container_id: String,
    pub ifname: String,
    /// The plugin that ran this one as a delegate (`bridge` for its IPAM).
    pub delegated_by: Option<String>,
}

impl LogContext {
    /// The name this process was started under (`argv[0]`'s file name).
    pub fn process_plugin_name() -> String {
        std::env::args_os()
            .next()
            .as_deref()
            .map(Path::new)
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "cni-plugin".to_string())
    }

    /// `bridge[4242] ADD container=abc ifname=eth0`, or
    /// `host-local[4243] (IPAM of bridge) ADD container=abc ifname=eth0`.
    /// Every part is escaped: the container ID and interface name come from
    /// the runtime's caller (a pod picks its interface name through Multus).
    fn write_prefix(&self, out: &mut impl Write, pid: u32) -> io::Result<()> {
        write!(out, "{}[{pid}]", escape_control(&self.plugin))?;
        if let Some(parent) = &self.delegated_by {
            write!(out, " (delegate of {})", escape_control(parent))?;
        }
        if !self.command.is_empty() {
            write!(out, " {}", escape_control(&self.command))?;
        }
        if !self.container_id.is_empty() {
            write!(out, " container={}", escape_control(&self.container_id))?;
        }
        if !self.ifname.is_empty() {
            write!(out, " ifname={}", escape_control(&self.ifname))?;
        }
        Ok(())
    }
}

/// Where and how much to log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    pub level: LevelFilter,
    pub file: Option<PathBuf>,
    /// Set when the file came from the configuration's `logFile`: it is
    /// then opened only inside the log folders ([`Place::Logs`]), without
    /// following links. `CNI_LOG_FILE` is the administrator's and is
    /// opened as it is.
    pub confined: Option<Confined>,
}

impl Default for LogSettings {
    fn default() -> Self {
        LogSettings {
            level: DEFAULT_LEVEL,
            file: None,
            confined: None,
        }
    }
}

impl LogSettings {
    /// Environment values win over configuration keys; an empty or unknown
    /// value counts as unset, since a bad log setting must never fail a
    /// plugin.
    pub fn resolve(env_level: Option<&str>, env_file: Option<&str>, conf: &Value) -> LogSettings {
        Self::resolve_with_warnings(env_level, env_file, conf).0
    }

    /// As [`LogSettings::resolve`], also returning a warning for each level
    /// value that was skipped, to be logged once the logger is up.
    pub fn resolve_with_warnings(
        env_level: Option<&str>,
        env_file: Option<&str>,
        conf: &Value,
    ) -> (LogSettings, Vec<String>) {
        Self::resolve_in(env_level, env_file, conf, Places::node)
    }

    /// As [`LogSettings::resolve_with_warnings`], with the node's places
    /// given (read only when a `logFile` needs them). A `logFile` outside
    /// them is dropped with a warning: a bad log setting never fails a
    /// network, and the refusal is on stderr.
    pub fn resolve_in(
        env_level: Option<&str>,
        env_file: Option<&str>,
        conf: &Value,
        places: impl FnOnce() -> Result<Places, ConfineError>,
    ) -> (LogSettings, Vec<String>) {
        let conf_str = |key: &str| conf.get(key).and_then(Value::as_str);
        let mut warnings = Vec::new();
        let mut level = None;
        let candidates = [(LEVEL_ENV, env_level), (LEVEL_KEY, conf_str(LEVEL_KEY))];
        for (source, value) in candidates {
            let Some(value) = value.filter(|v| !v.trim().is_empty()) else {
                continue;
            };
            match parse_level(value) {
                Some(parsed) if level.is_none() => level = Some((parsed, source)),
                Some(_) => {}
                None => warnings.push(format!(
                    "unknown log level {value:?} in {source} (known: {KNOWN_LEVELS}); ignored"
                )),
            }
        }
        if let Some(other) = conf.get(LEVEL_KEY).filter(|v| !v.is_string()) {
            warnings.push(format!(
                "{LEVEL_KEY} must be a string such as \"info\", not {other}; ignored"
            ));
        }
        if !warnings.is_empty() {
            let effective = match level {
                Some((parsed, source)) => format!("{} from {source}", level_name(parsed)),
                None => format!("the default, {}", level_name(DEFAULT_LEVEL)),
            };
            for w in &mut warnings {
                w.push_str(&format!("; logging at {effective}"));
            }
        }
        let level = level.map_or(DEFAULT_LEVEL, |(parsed, _)| parsed);
        let mut settings = LogSettings {
            level,
            ..LogSettings::default()
        };
        if let Some(file) = env_file.filter(|f| !f.is_empty()) {
            settings.file = Some(PathBuf::from(file));
        } else if let Some(file) = conf_str(FILE_KEY).filter(|f| !f.is_empty()) {
            let path = PathBuf::from(file);
            match places().and_then(|p| p.confine(FILE_KEY, Place::Logs, &path)) {
                Ok(confined) => {
                    settings.file = Some(path);
                    settings.confined = Some(confined);
                }
                Err(e) => warnings.push(format!("{e}; logging to stderr only")),
            }
        }
        (settings, warnings)
    }
}

/// One line of a plugin log read back (by tests and tools): the parts of
/// [`LogContext::write_prefix`]'s format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// `2024-05-01T12:00:00.123Z`.
    pub time: String,
    /// `INFO`, `WARN`, ...
    pub level: String,
    pub plugin: String,
    pub pid: u32,
    pub delegated_by: Option<String>,
    /// `ADD container=abc ifname=eth0`, or just `GC`; empty before the
    /// command is known.
    pub call: String,
    pub message: String,
}

impl LogLine {
    /// `None` for text not in the format.
    pub fn parse(text: &str) -> Option<LogLine> {
        let (time, rest) = text.split_once(' ')?;
        let (level, rest) = rest.split_once(' ')?;
        let (prefix, message) = rest.trim_start().split_once(": ")?;
        let (plugin, rest) = prefix.split_once('[')?;
        let (pid, rest) = rest.split_once(']')?;
        let rest = rest.trim_start();
        let (delegated_by, call) = match rest.strip_prefix("(delegate of ") {
            Some(delegated) => {
                let (caller, call) = delegated.split_once(')')?;
                (Some(caller.to_string()), call.trim_start())
            }
            None => (None, rest),
        };
        Some(LogLine {
            time: time.to_string(),
            level: level.to_string(),
            plugin: plugin.to_string(),
            pid: pid.parse().ok()?,
            delegated_by,
            call: call.to_string(),
            message: message.to_string(),
        })
    }
}

/// `10.0.0.2/24, fd00::2/64`: a list for a log line, each item in its
/// human (Display) form; `none` when empty.
pub fn joined<T: std::fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    let text = items
        .into_iter()
        .map(|item| item.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    if text.is_empty() {
        "none".to_string()
    } else {
        text
    }
}

/// A route for a log line: `0.0.0.0/0 via 10.0.0.1`, with the table
/// when it is not the main one.
pub struct RouteText<'a>(pub &'a crate::types::Route);

impl std::fmt::Display for RouteText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let route = self.0;
        write!(f, "{}", route.dst)?;
        if let Some(gw) = route.gw {
            write!(f, " via {gw}")?;
        }
        if let Some(table) = route.table {
            write!(f, " table {table}")?;
        }
        Ok(())
    }
}

/// The name operators write for a level (`warn`, not `WARN`).
fn level_name(level: LevelFilter) -> String {
    level.as_str().to_ascii_lowercase()
}

/// Level names as the Go plugins that log (sriov, rdma) spell them, plus the
/// Rust ones. `panic` and `fatal` map to `error`, the closest level.
pub fn parse_level(s: &str) -> Option<LevelFilter> {
    Some(match s.trim().to_ascii_lowercase().as_str() {
        "off" | "none" => LevelFilter::Off,
        "panic" | "fatal" | "error" => LevelFilter::Error,
        "warn" | "warning" => LevelFilter::Warn,
        "info" => LevelFilter::Info,
        "debug" => LevelFilter::Debug,
        "trace" => LevelFilter::Trace,
        _ => return None,
    })
}

/// Installs the process logger. Only the first call in a process takes
/// effect; later ones return `false`. Never fails: a log file that cannot be
/// opened is reported on stderr and logging goes on there alone.
pub fn init(settings: &LogSettings) -> bool {
    let context = LogContext {
        plugin: LogContext::process_plugin_name(),
        ..LogContext::default()
    };
    init_with_context(settings, context)
}

/// As [`init`], with every line naming `context`'s plugin and call.
pub fn init_with_context(settings: &LogSettings, context: LogContext) -> bool {
    let logger = build_logger_with_context(settings, context, Box::new(io::stderr()));
    let level = logger.filter();
    if log::set_boxed_logger(Box::new(logger)).is_err() {
        return false;
    }
    log::set_max_level(level);
    true
}

/// The logger [`init`] installs, writing to `stderr` and the settings' file.
pub fn build_logger(settings: &LogSettings, stderr: Box<dyn Write + Send>) -> env_logger::Logger {
    let context = LogContext {
        plugin: LogContext::process_plugin_name(),
        ..LogContext::default()
    };
    build_logger_with_context(settings, context, stderr)
}

/// The logger [`init_with_context`] installs.
pub fn build_logger_with_context(
    settings: &LogSettings,
    context: LogContext,
    mut stderr: Box<dyn Write + Send>,
) -> env_logger::Logger {
    let file = settings.file.as_deref().and_then(|path| {
        match open_log_file(path, settings.confined.as_ref()) {
            Ok(f) => Some(f),
            Err(e) => {
                // Best effort: the message may be lost too, but nothing else can
                // report it.
                let _ = writeln!(stderr, "cannot open log file {}: {e}", path.display());
                None
            }
        }
    });
    let tee = TeeWriter { stderr, file };
    env_logger::Builder::new()
        .filter_level(settings.level)
        .format(move |buf, record| format_record(buf, record, &context))
        .target(env_logger::Target::Pipe(Box::new(tee)))
        .build()
}

fn open_log_file(path: &Path, confined: Option<&Confined>) -> io::Result<File> {
    if let Some(confined) = confined {
        // O_NONBLOCK: a FIFO put in the log folder must not hang the plugin.
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::APPEND | OFlags::NOCTTY | OFlags::NONBLOCK;
        let file = confined
            .open(flags, 0o600, Some(0o700))
            .map_err(io::Error::other)?;
        if !file.metadata()?.is_file() {
            return Err(io::Error::other("not a regular file"));
        }
        return Ok(file);
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// `2024-05-01T12:00:00.123Z INFO  bridge[4242] ADD container=abc ifname=eth0: message`.
/// env_logger hands the whole line to the writer at once, so lines of
/// processes sharing the file (O_APPEND) do not interleave.
fn format_record(
    buf: &mut env_logger::fmt::Formatter,
    record: &log::Record<'_>,
    context: &LogContext,
) -> io::Result<()> {
    write!(
        buf,
        "{} {:<5} ",
        utc_timestamp(SystemTime::now()),
        record.level()
    )?;
    context.write_prefix(buf, std::process::id())?;
    let message = record.args().to_string();
    writeln!(buf, ": {}", escape_control(&message))
}

/// `text` with every control character written as an escape (`\n`, `\r`,
/// `\t`, `\\`, `\u{1b}`), so that no value logged, whoever chose it, can
/// end a line and start one of its own in a shared log file (a line that
/// reads as a log entry, or as a line of a file the log is not meant to be).
/// Backslashes are left as they are: messages quote values with `{:?}`,
/// whose escapes would double; a reader can tell an escape from the value
/// only there, which is enough to keep lines whole.
pub fn escape_control(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Writes every line to stderr and to the file; a failing side does not
/// stop the other.
struct TeeWriter {
    stderr: Box<dyn Write + Send>,
    file: Option<File>,
}

impl Write for TeeWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let _ = self.stderr.write_all(buf);
        if let Some(f) = &mut self.file {
            let _ = f.write_all(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let _ = self.stderr.flush();
        if let Some(f) = &mut self.file {
            let _ = f.flush();
        }
        Ok(())
    }
}

/// RFC 3339 UTC with milliseconds, without a date library.
fn utc_timestamp(t: SystemTime) -> String {
    let since_epoch = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since_epoch.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        since_epoch.subsec_millis()
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian
/// (Howard Hinnant's `civil_from_days`, restricted to dates after 1970).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use log::Log;
    use serde_json::json;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    #[derive(Clone, Default)]
    struct SharedBuf(Arc<Mutex<Vec<u8>>>);

    impl Write for SharedBuf {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl SharedBuf {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    fn log_at(logger: &env_logger::Logger, level: log::Level, msg: &str) {
        logger.log(
            &log::Record::builder()
                .level(level)
                .target("loopback")
                .args(format_args!("{msg}"))
                .build(),
        );
    }

    fn add_context() -> LogContext {
        LogContext {
            plugin: "loopback".into(),
            command: "ADD".into(),
            container_id: "abc123".into(),
            ifname: "eth0".into(),
            delegated_by: None,
        }
    }

    /// The text after the timestamp: `INFO  plugin[pid] ...: message`.
    fn line_without_time(logger: &env_logger::Logger, stderr: &SharedBuf) -> String {
        log_at(logger, log::Level::Info, "10.0.0.2/24 on eth0");
        let text = stderr.text();
        let line = text.lines().last().unwrap_or_default();
        let (time, rest) = line.split_once(' ').unwrap();
        assert!(time.ends_with('Z') && time.len() == 24, "{line}");
        rest.replace(&format!("[{}]", std::process::id()), "[PID]")
    }

    #[test]
    fn lines_name_the_plugin_and_the_call() {
        let settings = LogSettings {
            level: LevelFilter::Info,
            file: None,
            confined: None,
        };
        let stderr = SharedBuf::default();
        let logger = build_logger_with_context(&settings, add_context(), Box::new(stderr.clone()));
        assert_eq!(
            line_without_time(&logger, &stderr),
            "INFO  loopback[PID] ADD container=abc123 ifname=eth0: 10.0.0.2/24 on eth0"
        );

        let delegate = LogContext {
            plugin: "host-local".into(),
            delegated_by: Some("bridge".into()),
            ..add_context()
        };
        let stderr = SharedBuf::default();
        let logger = build_logger_with_context(&settings, delegate, Box::new(stderr.clone()));
        assert_eq!(
            line_without_time(&logger, &stderr),
            "INFO  host-local[PID] (delegate of bridge) ADD container=abc123 ifname=eth0: \
             10.0.0.2/24 on eth0"
        );

        // GC and STATUS are about no container.
        let gc = LogContext {
            plugin: "bridge".into(),
            command: "GC".into(),
            ..LogContext::default()
        };
        let stderr = SharedBuf::default();
        let logger = build_logger_with_context(&settings, gc, Box::new(stderr.clone()));
        assert_eq!(
            line_without_time(&logger, &stderr),
            "INFO  bridge[PID] GC: 10.0.0.2/24 on eth0"
        );
    }

    #[test]
    fn control_characters_cannot_start_a_line() {
        assert_eq!(escape_control("plain text"), "plain text");
        assert_eq!(
            escape_control("1\nssh-ed25519 AAAA x\r\t\u{1b}[2J\0"),
            "1\\nssh-ed25519 AAAA x\\r\\t\\u{1b}[2J\\u{0}"
        );
        let settings = LogSettings {
            level: LevelFilter::Info,
            file: None,
            confined: None,
        };
        let context = LogContext {
            ifname: "eth0\nroot".into(),
            container_id: "c\r1".into(),
            ..add_context()
        };
        let stderr = SharedBuf::default();
        let logger = build_logger_with_context(&settings, context, Box::new(stderr.clone()));
        log_at(
            &logger,
            log::Level::Info,
            "sysctl set to 1\nssh-ed25519 AAAA x",
        );
        let text = stderr.text();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(
            text.ends_with(
                "ADD container=c\\r1 ifname=eth0\\nroot: sysctl set to 1\\nssh-ed25519 AAAA x\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn lines_parse_back() {
        let settings = LogSettings {
            level: LevelFilter::Info,
            file: None,
            confined: None,
        };
        let delegate = LogContext {
            plugin: "host-local".into(),
            delegated_by: Some("bridge".into()),
            ..add_context()
        };
        let stderr = SharedBuf::default();
        let logger = build_logger_with_context(&settings, delegate, Box::new(stderr.clone()));
        log_at(&logger, log::Level::Warn, "a: b");
        let text = stderr.text();
        let line = LogLine::parse(text.trim_end()).unwrap();
        assert_eq!(line.level, "WARN");
        assert_eq!(line.plugin, "host-local");
        assert_eq!(line.pid, std::process::id());
        assert_eq!(line.delegated_by.as_deref(), Some("bridge"));
        assert_eq!(line.call, "ADD container=abc123 ifname=eth0");
        assert_eq!(line.message, "a: b");
        assert_eq!(line.time.len(), 24);

        let gc = LogLine::parse("2024-05-01T12:00:00.123Z ERROR bridge[7] GC: x").unwrap();
        assert_eq!(
            (gc.plugin.as_str(), gc.call.as_str(), gc.delegated_by),
            ("bridge", "GC", None)
        );
        assert_eq!(LogLine::parse("cannot open log file /x: denied"), None);
    }

    #[test]
    fn unknown_levels_are_warned_about() {
        let conf = json!({"logLevel":"info"});
        let (s, warnings) = LogSettings::resolve_with_warnings(Some("verbose"), None, &conf);
        assert_eq!(s.level, LevelFilter::Info);
        assert_eq!(
            warnings,
            vec![
                "unknown log level \"verbose\" in CNI_LOG_LEVEL (known: off, error, warn, \
                 info, debug, trace); ignored; logging at info from logLevel"
            ]
        );

        let (s, warnings) =
            LogSettings::resolve_with_warnings(None, None, &json!({"logLevel":"loud"}));
        assert_eq!(s.level, DEFAULT_LEVEL);
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].starts_with("unknown log level \"loud\" in logLevel"),
            "{warnings:?}"
        );
        assert!(
            warnings[0].ends_with("logging at the default, warn"),
            "{warnings:?}"
        );

        let (_, warnings) = LogSettings::resolve_with_warnings(None, None, &json!({"logLevel":3}));
        assert_eq!(
            warnings,
            vec![
                "logLevel must be a string such as \"info\", not 3; ignored; \
                  logging at the default, warn"
            ]
        );

        // Known, empty and absent values warn about nothing; a valid
        // environment value beside a bad configured one still warns about
        // the configuration, which is wrong for every other reader.
        for (env, conf) in [
            (Some("debug"), json!({})),
            (Some(""), json!({"logLevel":"error"})),
            (None, json!({"logLevel":""})),
        ] {
            let (_, warnings) = LogSettings::resolve_with_warnings(env, None, &conf);
            assert!(warnings.is_empty(), "{env:?} {conf}: {warnings:?}");
        }
        let (s, warnings) =
            LogSettings::resolve_with_warnings(Some("debug"), None, &json!({"logLevel":"loud"}));
        assert_eq!(s.level, LevelFilter::Debug);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
    }

    #[test]
    fn lists_are_joined_in_display_form() {
        let nets: Vec<ipnetwork::IpNetwork> = vec![
            "10.0.0.2/24".parse().unwrap(),
            "fd00::2/64".parse().unwrap(),
        ];
        assert_eq!(joined(&nets), "10.0.0.2/24, fd00::2/64");
        assert_eq!(joined(Vec::<String>::new()), "none");
        let routes: Vec<crate::types::Route> = serde_json::from_value(json!([
            {"dst":"0.0.0.0/0","gw":"10.0.0.1"},
            {"dst":"10.1.0.0/16","table":100}
        ]))
        .unwrap();
        assert_eq!(
            joined(routes.iter().map(RouteText)),
            "0.0.0.0/0 via 10.0.0.1, 10.1.0.0/16 table 100"
        );
    }

    #[test]
    fn level_names() {
        assert_eq!(parse_level("debug"), Some(LevelFilter::Debug));
        assert_eq!(parse_level("WARNING"), Some(LevelFilter::Warn));
        assert_eq!(parse_level(" Info "), Some(LevelFilter::Info));
        assert_eq!(parse_level("panic"), Some(LevelFilter::Error));
        assert_eq!(parse_level("off"), Some(LevelFilter::Off));
        assert_eq!(parse_level("verbose"), None);
        assert_eq!(parse_level(""), None);
    }

    #[test]
    fn env_wins_over_config_and_bad_values_are_skipped() {
        let conf = json!({"logLevel":"info","logFile":"/tmp/conf.log"});
        let s = LogSettings::resolve(Some("debug"), Some("/tmp/env.log"), &conf);
        assert_eq!(s.level, LevelFilter::Debug);
        assert_eq!(s.file, Some(PathBuf::from("/tmp/env.log")));
        let s = LogSettings::resolve(Some("bogus"), Some(""), &conf);
        assert_eq!(s.level, LevelFilter::Info);
        // /tmp is no log folder of the node's.
        assert_eq!(s.file, None);
        let s = LogSettings::resolve(None, None, &json!({"logLevel":7,"logFile":false}));
        assert_eq!(s, LogSettings::default());
        assert_eq!(LogSettings::default().level, LevelFilter::Warn);
    }

    /// `logFile` from the configuration (a namespace user's, with Multus)
    /// is opened only inside the log folders and never through a link;
    /// `CNI_LOG_FILE` is the administrator's.
    #[test]
    fn a_configured_log_file_is_confined_to_the_log_folders() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        let policy = crate::confine::Policy {
            allow: crate::confine::Allow {
                logs: vec![logs.clone()],
                ..Default::default()
            },
            ..Default::default()
        };
        let places = || {
            Ok(Places::with_policy(
                policy.clone(),
                "/etc/cni/cni-rs-policy.json",
            ))
        };
        let victim = dir.path().join("authorized_keys");
        std::fs::write(&victim, b"keep\n").unwrap();
        let conf = json!({"logLevel":"info","logFile": victim});
        let (s, warnings) = LogSettings::resolve_in(None, None, &conf, places);
        assert_eq!(s.file, None);
        assert_eq!(
            warnings,
            vec![format!(
                "logFile {victim:?} is outside the folders allowed for logs \
                 (/var/log/cni-rs, {}); the node's administrator can allow a folder with \
                 \"allow\": {{\"logs\": [\"/folder\"]}} in /etc/cni/cni-rs-policy.json; \
                 logging to stderr only",
                logs.display()
            )]
        );
        let (s, warnings) =
            LogSettings::resolve_in(None, Some(victim.to_str().unwrap()), &conf, places);
        assert_eq!(
            (s.file.as_deref(), s.confined, warnings.len()),
            (Some(victim.as_path()), None, 0)
        );

        // Inside: created with its folder; a link inside pointing out is
        // not followed.
        let inside = logs.join("net/plugin.log");
        let conf = json!({"logLevel":"info","logFile": inside});
        let (s, warnings) = LogSettings::resolve_in(None, None, &conf, places);
        assert!(warnings.is_empty(), "{warnings:?}");
        let stderr = SharedBuf::default();
        let logger = build_logger_with_context(&s, add_context(), Box::new(stderr.clone()));
        log_at(&logger, log::Level::Info, "in the folder");
        assert!(std::fs::read_to_string(&inside)
            .unwrap()
            .contains("in the folder"));
        let link = logs.join("link.log");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let conf = json!({"logLevel":"info","logFile": link});
        let (s, _) = LogSettings::resolve_in(None, None, &conf, places);
        let stderr = SharedBuf::default();
        let logger = build_logger_with_context(&s, add_context(), Box::new(stderr.clone()));
        log_at(&logger, log::Level::Info, "1\nssh-ed25519 AAAA x");
        assert!(
            stderr.text().contains("cannot open log file"),
            "{}",
            stderr.text()
        );
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep\n");
    }

    #[test]
    fn logs_go_to_stderr_and_file_filtered_by_level() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plugin.log");
        let settings = LogSettings {
            level: LevelFilter::Info,
            file: Some(path.clone()),
            confined: None,
        };
        let stderr = SharedBuf::default();
        let logger = build_logger_with_context(&settings, add_context(), Box::new(stderr.clone()));
        log_at(&logger, log::Level::Info, "lo is up");
        log_at(&logger, log::Level::Debug, "hidden detail");
        let err_text = stderr.text();
        assert!(err_text.contains("INFO "), "{err_text}");
        assert!(
            err_text.contains("ADD container=abc123 ifname=eth0: lo is up"),
            "{err_text}"
        );
        assert!(!err_text.contains("hidden detail"));
        let file_text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(file_text, err_text, "the file gets the same lines");
        // Append, not truncate, across loggers (one per plugin run).
        let logger = build_logger(&settings, Box::new(SharedBuf::default()));
        log_at(&logger, log::Level::Warn, "second run");
        let file_text = std::fs::read_to_string(&path).unwrap();
        assert!(file_text.contains("lo is up") && file_text.contains("second run"));
    }

    #[test]
    fn unopenable_file_is_reported_and_stderr_still_works() {
        let settings = LogSettings {
            level: LevelFilter::Warn,
            file: Some(PathBuf::from("/nonexistent-dir/x/plugin.log")),
            confined: None,
        };
        let stderr = SharedBuf::default();
        let logger = build_logger(&settings, Box::new(stderr.clone()));
        log_at(&logger, log::Level::Warn, "still logged");
        let text = stderr.text();
        assert!(
            text.contains("cannot open log file /nonexistent-dir/x/plugin.log"),
            "{text}"
        );
        assert!(text.contains("still logged"), "{text}");
    }

    #[test]
    fn timestamps() {
        assert_eq!(utc_timestamp(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(951_827_696_789);
        assert_eq!(utc_timestamp(t), "2000-02-29T12:34:56.789Z");
        let t = UNIX_EPOCH + Duration::from_secs(4_102_444_799);
        assert_eq!(utc_timestamp(t), "2099-12-31T23:59:59.000Z");
    }
}
