//! The node's sysctl allowlist, `/etc/cni/tuning/allowlist.conf`: when the
//! file exists, ADD sets only sysctls whose key matches one of its lines.
//!
//! As in the reference: each non-empty line (trimmed) is a regular
//! expression matched anywhere in the key as configured (so an administrator
//! anchors with `^...$`), and CHECK and DEL do not consult it. The patterns
//! are compiled without Unicode classes so that `\d`, `\w` and `\s` are
//! ASCII, as in Go's RE2.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use libcni::error::{CniError, ErrorCode, ToCniError};
use regex::bytes::{Regex, RegexBuilder};

pub const ALLOWLIST_PATH: &str = "/etc/cni/tuning/allowlist.conf";

#[derive(Debug, thiserror::Error)]
pub enum AllowlistError {
    #[error("failed to read sysctl allowlist {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("invalid pattern {pattern:?} in sysctl allowlist {path}: {source}")]
    Pattern {
        path: PathBuf,
        pattern: String,
        source: Box<regex::Error>,
    },
    /// The reference's wording, the list printed as Go prints a slice.
    #[error("Sysctl {key} is not allowed. Only the following sysctls are allowed: [{}]", .patterns.join(" "))]
    NotAllowed { key: String, patterns: Vec<String> },
}

impl ToCniError for AllowlistError {
    fn to_cni_error(&self) -> CniError {
        let code = match self {
            AllowlistError::Read { .. } => ErrorCode::Io,
            // The node's file is broken: not something the network's
            // configuration can fix.
            AllowlistError::Pattern { .. } => ErrorCode::Internal,
            AllowlistError::NotAllowed { .. } => ErrorCode::InvalidNetworkConfig,
        };
        CniError::new(code, self.to_string())
    }
}

/// The patterns of an allowlist file.
#[derive(Debug)]
pub struct Allowlist {
    patterns: Vec<(String, Regex)>,
}

impl Allowlist {
    /// Reads `path`; `None` when there is no such file (everything allowed).
    pub fn load(path: &Path) -> Result<Option<Allowlist>, AllowlistError> {
        let text = match fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(AllowlistError::Read {
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        Allowlist::parse(&text, path).map(Some)
    }

    fn parse(text: &str, path: &Path) -> Result<Allowlist, AllowlistError> {
        let patterns = text
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty())
            .map(|line| {
                RegexBuilder::new(line)
                    .unicode(false)
                    .build()
                    .map(|regex| (line.to_string(), regex))
                    .map_err(|source| AllowlistError::Pattern {
                        path: path.to_path_buf(),
                        pattern: line.to_string(),
                        source: Box::new(source),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Allowlist { patterns })
    }

    /// Refuses the first key that no pattern matches.
    pub fn check<'a>(&self, keys: impl IntoIterator<Item = &'a str>) -> Result<(), AllowlistError> {
        for key in keys {
            if !self
                .patterns
                .iter()
                .any(|(_, regex)| regex.is_match(key.as_bytes()))
            {
                return Err(AllowlistError::NotAllowed {
                    key: key.to_string(),
                    patterns: self.patterns.iter().map(|(p, _)| p.clone()).collect(),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(text: &str) -> Allowlist {
        Allowlist::parse(text, Path::new("/test/allowlist.conf")).unwrap()
    }

    #[test]
    fn keys_must_match_a_line() {
        // The reference test's two lists.
        let other = list("^net\\.ipv4\\.conf\\.other\\.[a-z_]*$\n");
        let e = other.check(["net.ipv4.conf.all.log_martians"]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Sysctl net.ipv4.conf.all.log_martians is not allowed. Only the following \
             sysctls are allowed: [^net\\.ipv4\\.conf\\.other\\.[a-z_]*$]"
        );
        assert_eq!(e.to_cni_error().code.as_u32(), 7);
        let all = list("\n  ^net\\.ipv4\\.conf\\.all\\.[a-z_]*$  \n\n^net\\.core\\.\n");
        all.check(["net.ipv4.conf.all.log_martians", "net.core.somaxconn"])
            .unwrap();
        assert!(all.check(["net.ipv4.ip_forward"]).is_err());
        // Unanchored, as in Go: a pattern may match inside the key.
        list("conf").check(["net.ipv4.conf.all.x"]).unwrap();
        // ASCII classes, as in Go.
        list("^net\\.ipv4\\.conf\\.eth\\d\\.")
            .check(["net.ipv4.conf.eth0.x"])
            .unwrap();
        // An empty file allows nothing.
        assert!(list("\n \n").check(["net.core.somaxconn"]).is_err());
        list("").check([]).unwrap();
    }

    #[test]
    fn files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("allowlist.conf");
        assert!(Allowlist::load(&path).unwrap().is_none());
        fs::write(&path, "^net\\.core\\.somaxconn$\n").unwrap();
        let loaded = Allowlist::load(&path).unwrap().unwrap();
        loaded.check(["net.core.somaxconn"]).unwrap();
        fs::write(&path, "^net\\.(core\n").unwrap();
        let e = Allowlist::load(&path).unwrap_err();
        assert!(matches!(e, AllowlistError::Pattern { .. }), "{e}");
        assert_eq!(e.to_cni_error().code.as_u32(), 999);
        let e = Allowlist::load(dir.path()).unwrap_err();
        assert!(matches!(e, AllowlistError::Read { .. }), "{e}");
        assert_eq!(e.to_cni_error().code.as_u32(), 5);
    }
}
