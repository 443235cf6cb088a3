//! Plugin logging: the `log` facade, written to stderr and optionally to a
//! file.
//!
//! stdout belongs to the result JSON, so logs never go there. Runtimes often
//! drop a plugin's stderr (kubelet, CRI-O), hence the optional file, opened
//! in append mode because many plugin runs share it.
//!
//! Settings come from the environment first (`CNI_LOG_LEVEL`, `CNI_LOG_FILE`,
//! an operator's override for every network) and then from the plugin
//! configuration (`logLevel`, `logFile`). The default level is `warn`.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use log::LevelFilter;
use serde_json::Value;

pub const LEVEL_ENV: &str = "CNI_LOG_LEVEL";
pub const FILE_ENV: &str = "CNI_LOG_FILE";
pub const LEVEL_KEY: &str = "logLevel";
pub const FILE_KEY: &str = "logFile";

pub const DEFAULT_LEVEL: LevelFilter = LevelFilter::Warn;

/// Where and how much to log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    pub level: LevelFilter,
    pub file: Option<PathBuf>,
}

impl Default for LogSettings {
    fn default() -> Self {
        LogSettings {
            level: DEFAULT_LEVEL,
            file: None,
        }
    }
}

impl LogSettings {
    /// Environment values win over configuration keys; an empty or unknown
    /// value counts as unset, since a bad log setting must never fail a
    /// plugin.
    pub fn resolve(env_level: Option<&str>, env_file: Option<&str>, conf: &Value) -> LogSettings {
        let conf_str = |key: &str| conf.get(key).and_then(Value::as_str);
        let level = [env_level, conf_str(LEVEL_KEY)]
            .into_iter()
            .flatten()
            .find_map(parse_level)
            .unwrap_or(DEFAULT_LEVEL);
        let file = [env_file, conf_str(FILE_KEY)]
            .into_iter()
            .flatten()
            .find(|f| !f.is_empty())
            .map(PathBuf::from);
        LogSettings { level, file }
    }
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
    let logger = build_logger(settings, Box::new(io::stderr()));
    let level = logger.filter();
    if log::set_boxed_logger(Box::new(logger)).is_err() {
        return false;
    }
    log::set_max_level(level);
    true
}

/// The logger [`init`] installs, writing to `stderr` and the settings' file.
pub fn build_logger(
    settings: &LogSettings,
    mut stderr: Box<dyn Write + Send>,
) -> env_logger::Logger {
    let file = settings
        .file
        .as_deref()
        .and_then(|path| match open_log_file(path) {
            Ok(f) => Some(f),
            Err(e) => {
                // Best effort: the message may be lost too, but nothing else can
                // report it.
                let _ = writeln!(stderr, "cannot open log file {}: {e}", path.display());
                None
            }
        });
    let tee = TeeWriter { stderr, file };
    env_logger::Builder::new()
        .filter_level(settings.level)
        .format(format_record)
        .target(env_logger::Target::Pipe(Box::new(tee)))
        .build()
}

fn open_log_file(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// `2024-05-01T12:00:00.123Z DEBUG [4242] loopback: message`
fn format_record(buf: &mut env_logger::fmt::Formatter, record: &log::Record<'_>) -> io::Result<()> {
    writeln!(
        buf,
        "{} {:<5} [{}] {}: {}",
        utc_timestamp(SystemTime::now()),
        record.level(),
        std::process::id(),
        record.target(),
        record.args()
    )
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
        assert_eq!(s.file, Some(PathBuf::from("/tmp/conf.log")));
        let s = LogSettings::resolve(None, None, &json!({"logLevel":7,"logFile":false}));
        assert_eq!(s, LogSettings::default());
        assert_eq!(LogSettings::default().level, LevelFilter::Warn);
    }

    #[test]
    fn logs_go_to_stderr_and_file_filtered_by_level() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plugin.log");
        let settings = LogSettings {
            level: LevelFilter::Info,
            file: Some(path.clone()),
        };
        let stderr = SharedBuf::default();
        let logger = build_logger(&settings, Box::new(stderr.clone()));
        log_at(&logger, log::Level::Info, "lo is up");
        log_at(&logger, log::Level::Debug, "hidden detail");
        let err_text = stderr.text();
        assert!(err_text.contains("INFO "), "{err_text}");
        assert!(err_text.contains("loopback: lo is up"), "{err_text}");
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
