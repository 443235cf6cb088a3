//! `CNI_ARGS`: extra `KEY=VALUE` pairs separated by `;`.
//!
//! Parsed the way the Go library's `LoadArgs` parses them, so a runtime that
//! works with the reference plugins gets the same acceptance and the same
//! messages: every pair needs exactly one `=`, and a key the plugin does not
//! know is an error unless the string also carries `IgnoreUnknown=1`.

use crate::error::{CniError, ErrorCode, ToCniError};

/// The key that makes unknown keys acceptable.
pub const IGNORE_UNKNOWN: &str = "IgnoreUnknown";

/// Keys every plugin accepts whatever it declares: `IgnoreUnknown` itself,
/// and what containerd's CRI sends on every call.
pub const ALWAYS_KNOWN: [&str; 5] = [
    IGNORE_UNKNOWN,
    "K8S_POD_NAMESPACE",
    "K8S_POD_NAME",
    "K8S_POD_INFRA_CONTAINER_ID",
    "K8S_POD_UID",
];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgsError {
    #[error("ARGS: invalid pair {0:?}")]
    InvalidPair(String),
    /// The offending pairs, listed as the Go library lists them.
    #[error("ARGS: unknown args {}", go_quoted_list(.0))]
    Unknown(Vec<String>),
    #[error("ARGS: error parsing value of pair {pair:?}: boolean unmarshal error: invalid input {value}")]
    InvalidBool { pair: String, value: String },
}

impl ToCniError for ArgsError {
    /// `CNI_ARGS` is an environment variable the runtime got wrong: code 4
    /// (the Go plugins return these as 999).
    fn to_cni_error(&self) -> CniError {
        CniError::new(ErrorCode::InvalidEnvironment, self.to_string())
    }
}

/// The parsed pairs, in the order given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CniArgs {
    pairs: Vec<(String, String)>,
}

impl CniArgs {
    /// Parses `raw`, accepting `known_keys` plus [`ALWAYS_KNOWN`]. An empty
    /// string carries no arguments.
    pub fn parse(raw: &str, known_keys: &[&str]) -> Result<CniArgs, ArgsError> {
        if raw.is_empty() {
            return Ok(CniArgs::default());
        }
        let mut pairs = Vec::new();
        let mut unknown = Vec::new();
        for pair in raw.split(';') {
            let mut parts = pair.split('=');
            let (Some(key), Some(value), None) = (parts.next(), parts.next(), parts.next()) else {
                return Err(ArgsError::InvalidPair(pair.to_string()));
            };
            let is_known = known_keys.contains(&key) || ALWAYS_KNOWN.contains(&key);
            if !is_known {
                unknown.push(pair.to_string());
            }
            pairs.push((key.to_string(), value.to_string()));
        }
        let args = CniArgs { pairs };
        // Known keys are checked while parsing in Go, so IgnoreUnknown's
        // value is validated even when nothing unknown was given.
        let ignore_unknown = args.get_bool(IGNORE_UNKNOWN)?.unwrap_or(false);
        if !unknown.is_empty() && !ignore_unknown {
            return Err(ArgsError::Unknown(unknown));
        }
        Ok(args)
    }

    /// The value of `key`; the last one wins when a key repeats.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// A boolean value: `1`/`true`/`0`/`false` in any case.
    pub fn get_bool(&self, key: &str) -> Result<Option<bool>, ArgsError> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        match value.to_ascii_lowercase().as_str() {
            "1" | "true" => Ok(Some(true)),
            "0" | "false" => Ok(Some(false)),
            _ => Err(ArgsError::InvalidBool {
                pair: format!("{key}={value}"),
                value: value.to_ascii_lowercase(),
            }),
        }
    }

    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }
}

/// `["a" "b"]`: how Go's `%q` prints a list of strings.
fn go_quoted_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_string_has_no_args() {
        let args = CniArgs::parse("", &[]).unwrap();
        assert!(args.is_empty());
        assert_eq!(args.get("IP"), None);
    }

    #[test]
    fn known_keys_are_returned() {
        let args = CniArgs::parse("IP=10.0.0.5;MAC=aa:bb:cc:dd:ee:ff", &["IP", "MAC"]).unwrap();
        assert_eq!(args.get("IP"), Some("10.0.0.5"));
        assert_eq!(args.get("MAC"), Some("aa:bb:cc:dd:ee:ff"));
        assert_eq!(args.get("ip"), None, "keys are case-sensitive");
        assert_eq!(args.pairs().count(), 2);
    }

    #[test]
    fn repeated_key_last_wins() {
        let args = CniArgs::parse("IP=1.1.1.1;IP=2.2.2.2", &["IP"]).unwrap();
        assert_eq!(args.get("IP"), Some("2.2.2.2"));
    }

    #[test]
    fn empty_value_is_a_valid_pair() {
        let args = CniArgs::parse("IP=", &["IP"]).unwrap();
        assert_eq!(args.get("IP"), Some(""));
    }

    #[test]
    fn pair_without_exactly_one_equals_sign_is_invalid() {
        for (raw, bad) in [
            ("IP", "IP"),
            ("IP=1=2", "IP=1=2"),
            ("IP=1;", ""),
            (";IP=1", ""),
            ("IP=1;;MAC=x", ""),
        ] {
            let e = CniArgs::parse(raw, &["IP", "MAC"]).unwrap_err();
            assert_eq!(e, ArgsError::InvalidPair(bad.to_string()), "{raw}");
        }
        assert_eq!(
            ArgsError::InvalidPair("IP=1=2".into()).to_string(),
            "ARGS: invalid pair \"IP=1=2\""
        );
    }

    #[test]
    fn unknown_keys_are_an_error_listing_the_pairs() {
        let e = CniArgs::parse("FOO=1;IP=1.2.3.4;BAR=x", &["IP"]).unwrap_err();
        assert_eq!(e, ArgsError::Unknown(vec!["FOO=1".into(), "BAR=x".into()]));
        assert_eq!(e.to_string(), r#"ARGS: unknown args ["FOO=1" "BAR=x"]"#);
        let cni = e.to_cni_error();
        assert_eq!(cni.code, ErrorCode::InvalidEnvironment);
        assert_eq!(cni.msg, e.to_string());
    }

    #[test]
    fn ignore_unknown_tolerates_unknown_keys_wherever_it_appears() {
        for raw in [
            "IgnoreUnknown=1;FOO=bar",
            "FOO=bar;IgnoreUnknown=true",
            "FOO=bar;IgnoreUnknown=TRUE",
            "IgnoreUnknown=True;FOO=bar",
        ] {
            let args = CniArgs::parse(raw, &[]).unwrap();
            assert_eq!(args.get("FOO"), Some("bar"), "{raw}");
        }
        for raw in ["IgnoreUnknown=0;FOO=bar", "IgnoreUnknown=false;FOO=bar"] {
            assert!(matches!(
                CniArgs::parse(raw, &[]),
                Err(ArgsError::Unknown(_))
            ));
        }
        // The key itself is case-sensitive, like a Go struct field name.
        assert!(matches!(
            CniArgs::parse("ignoreunknown=1;FOO=bar", &[]),
            Err(ArgsError::Unknown(u)) if u.len() == 2
        ));
    }

    #[test]
    fn invalid_ignore_unknown_value_is_an_error() {
        let e = CniArgs::parse("IgnoreUnknown=yes", &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"ARGS: error parsing value of pair "IgnoreUnknown=yes": boolean unmarshal error: invalid input yes"#
        );
    }

    #[test]
    fn containerd_keys_are_always_accepted() {
        let raw = "K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;\
                   K8S_POD_INFRA_CONTAINER_ID=0123abc;K8S_POD_UID=7e0f-11";
        let args = CniArgs::parse(raw, &[]).unwrap();
        assert_eq!(args.get("K8S_POD_NAME"), Some("web-0"));
        assert_eq!(args.get("K8S_POD_UID"), Some("7e0f-11"));
        // What Podman sends.
        let args = CniArgs::parse("IgnoreUnknown=1;K8S_POD_NAME=web", &[]).unwrap();
        assert_eq!(args.get("K8S_POD_NAME"), Some("web"));
    }

    #[test]
    fn booleans_follow_go_rules() {
        let args = CniArgs::parse("A=1;B=FALSE;C=True;D=no", &["A", "B", "C", "D"]).unwrap();
        assert_eq!(args.get_bool("A"), Ok(Some(true)));
        assert_eq!(args.get_bool("B"), Ok(Some(false)));
        assert_eq!(args.get_bool("C"), Ok(Some(true)));
        assert_eq!(args.get_bool("Z"), Ok(None));
        assert!(matches!(
            args.get_bool("D"),
            Err(ArgsError::InvalidBool { .. })
        ));
    }

    #[test]
    fn non_ascii_input_does_not_panic() {
        for raw in ["é=ü", "=", "==", ";", "\u{0}=\u{0}", "K=\u{202e}"] {
            let _ = CniArgs::parse(raw, &["é"]);
        }
    }
}
