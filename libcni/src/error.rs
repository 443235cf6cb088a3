//! The error a plugin reports to its runtime, with the spec's codes.
//!
//! Each crate keeps its own `thiserror` enum for what can go wrong inside it;
//! those are turned into a [`CniError`] (code, message, details) only at the
//! skeleton boundary, where the JSON is printed.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::version::SpecVersion;

/// The spec's error codes. 0-99 are reserved by the spec; plugins use 100+.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// 1: incompatible CNI version.
    IncompatibleVersion,
    /// 2: unsupported field in the network configuration.
    UnsupportedField,
    /// 3: container unknown or does not exist.
    UnknownContainer,
    /// 4: invalid necessary environment variables.
    InvalidEnvironment,
    /// 5: I/O failure.
    Io,
    /// 6: failed to decode content.
    Decode,
    /// 7: invalid network config.
    InvalidNetworkConfig,
    /// 8: CNI_NETNS is the plugin's own namespace (Go library extension).
    InvalidNetNs,
    /// 11: try again later.
    TryAgainLater,
    /// 50: the plugin is not available.
    NotAvailable,
    /// 51: not available, and existing containers may have limited connectivity.
    NotAvailableLimitedConnectivity,
    /// 999: an internal error with no better code (Go library extension).
    Internal,
    /// Any other code: 100 and above are the plugin's own.
    Other(u32),
}

impl ErrorCode {
    pub fn as_u32(self) -> u32 {
        match self {
            ErrorCode::IncompatibleVersion => 1,
            ErrorCode::UnsupportedField => 2,
            ErrorCode::UnknownContainer => 3,
            ErrorCode::InvalidEnvironment => 4,
            ErrorCode::Io => 5,
            ErrorCode::Decode => 6,
            ErrorCode::InvalidNetworkConfig => 7,
            ErrorCode::InvalidNetNs => 8,
            ErrorCode::TryAgainLater => 11,
            ErrorCode::NotAvailable => 50,
            ErrorCode::NotAvailableLimitedConnectivity => 51,
            ErrorCode::Internal => 999,
            ErrorCode::Other(n) => n,
        }
    }
}

impl From<u32> for ErrorCode {
    fn from(n: u32) -> Self {
        match n {
            1 => ErrorCode::IncompatibleVersion,
            2 => ErrorCode::UnsupportedField,
            3 => ErrorCode::UnknownContainer,
            4 => ErrorCode::InvalidEnvironment,
            5 => ErrorCode::Io,
            6 => ErrorCode::Decode,
            7 => ErrorCode::InvalidNetworkConfig,
            8 => ErrorCode::InvalidNetNs,
            11 => ErrorCode::TryAgainLater,
            50 => ErrorCode::NotAvailable,
            51 => ErrorCode::NotAvailableLimitedConnectivity,
            999 => ErrorCode::Internal,
            n => ErrorCode::Other(n),
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.as_u32())
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(self.as_u32())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(ErrorCode::from(u32::deserialize(d)?))
    }
}

/// The error object of the spec: printed on stdout with exit status 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub struct CniError {
    /// The version the error is reported in; the skeleton fills it in.
    #[serde(
        rename = "cniVersion",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cni_version: Option<String>,
    pub code: ErrorCode,
    #[serde(default)]
    pub msg: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub details: String,
}

impl CniError {
    pub fn new(code: ErrorCode, msg: impl Into<String>) -> Self {
        CniError {
            cni_version: None,
            code,
            msg: msg.into(),
            details: String::new(),
        }
    }

    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = details.into();
        self
    }

    pub fn with_version(mut self, v: SpecVersion) -> Self {
        self.cni_version = Some(v.as_str().to_string());
        self
    }

    /// The JSON the spec wants on stdout, newline-terminated.
    pub fn to_json(&self) -> String {
        // A struct of strings and an integer always serialises.
        let mut s = serde_json::to_string(self).unwrap_or_else(|_| {
            format!(
                "{{\"code\":{},\"msg\":\"internal error\"}}",
                self.code.as_u32()
            )
        });
        s.push('\n');
        s
    }
}

impl fmt::Display for CniError {
    /// `msg` or `msg; details`, as the Go library prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.details.is_empty() {
            f.write_str(&self.msg)
        } else {
            write!(f, "{}; {}", self.msg, self.details)
        }
    }
}

/// How a crate's own error enum becomes a spec error at the skeleton.
pub trait ToCniError {
    fn to_cni_error(&self) -> CniError;
}

impl ToCniError for CniError {
    fn to_cni_error(&self) -> CniError {
        self.clone()
    }
}

/// Several failures of one operation that goes on after a step fails (a
/// DEL, a GC, the undoing of a partial ADD), each kept as the spec error
/// it would have been alone, so that the code is not lost on the way.
///
/// Reported as one error: the code of the first failure (the steps run in
/// order, and the first one to fail usually explains the rest) and every
/// message, joined with `"; "`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorList {
    errors: Vec<CniError>,
}

impl ErrorList {
    pub fn new() -> ErrorList {
        ErrorList::default()
    }

    /// Adds `error` as it is.
    pub fn push(&mut self, error: &dyn ToCniError) {
        self.errors.push(error.to_cni_error());
    }

    /// Adds `error` with its message prefixed by what was being done:
    /// `"<context>: <message>"`.
    pub fn push_in(&mut self, context: impl fmt::Display, error: &dyn ToCniError) {
        let mut error = error.to_cni_error();
        error.msg = format!("{context}: {}", error.msg);
        self.errors.push(error);
    }

    /// Adds every error of `other`, each prefixed with `context`.
    pub fn append_in(&mut self, context: impl fmt::Display, other: ErrorList) {
        for mut error in other.errors {
            error.msg = format!("{context}: {}", error.msg);
            self.errors.push(error);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    pub fn len(&self) -> usize {
        self.errors.len()
    }

    pub fn errors(&self) -> &[CniError] {
        &self.errors
    }

    /// `Ok` when nothing failed.
    pub fn into_result(self) -> Result<(), ErrorList> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(self)
        }
    }

    /// The code reported for the whole list: the first failure's, or 999
    /// for an empty list (which no one should report).
    pub fn code(&self) -> ErrorCode {
        self.errors
            .first()
            .map(|e| e.code)
            .unwrap_or(ErrorCode::Internal)
    }
}

impl fmt::Display for ErrorList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ErrorList {}

impl ToCniError for ErrorList {
    fn to_cni_error(&self) -> CniError {
        CniError::new(self.code(), self.to_string())
    }
}

/// For a crate's own error enum, whose `Several` variant holds an
/// [`ErrorList`].
impl ErrorList {
    /// Adds `error` with the code of its spec error and its own text as the
    /// message. An error wrapping a delegate's keeps its context this way
    /// ("IPAM DEL with \"host-local\": ..."), where [`ErrorList::push`]
    /// would keep the delegate's error object as it printed it.
    pub fn push_shown<E: ToCniError + fmt::Display + ?Sized>(&mut self, error: &E) {
        self.errors
            .push(CniError::new(error.to_cni_error().code, error.to_string()));
    }

    /// One error for the failures of an operation that went on after each
    /// (a DEL, a GC): `None` when there were none, the only one as it is,
    /// or `several` of the list of all (each added by
    /// [`ErrorList::push_shown`]).
    pub fn combine<E: ToCniError + fmt::Display>(
        mut errors: Vec<E>,
        several: impl FnOnce(ErrorList) -> E,
    ) -> Option<E> {
        if errors.len() <= 1 {
            return errors.pop();
        }
        let mut list = ErrorList::new();
        for error in &errors {
            list.push_shown(error);
        }
        Some(several(list))
    }
}

#[cfg(test)]
mod error_list_tests {
    use super::*;

    #[test]
    fn keeps_each_code_and_reports_the_first() {
        let mut list = ErrorList::new();
        assert!(list.is_empty());
        assert_eq!(list.clone().into_result(), Ok(()));
        list.push_in(
            "IPAM DEL",
            &CniError::new(ErrorCode::TryAgainLater, "store locked"),
        );
        list.push(&CniError::new(ErrorCode::Internal, "EBUSY"));
        let mut inner = ErrorList::new();
        inner.push(&CniError::new(ErrorCode::Io, "disk full"));
        list.append_in("c1/net1", inner);
        assert_eq!(list.len(), 3);
        let codes: Vec<u32> = list.errors().iter().map(|e| e.code.as_u32()).collect();
        assert_eq!(codes, vec![11, 999, 5]);
        let e = list.to_cni_error();
        assert_eq!(e.code, ErrorCode::TryAgainLater);
        assert_eq!(e.msg, "IPAM DEL: store locked; EBUSY; c1/net1: disk full");
        assert!(list.into_result().is_err());
        assert_eq!(ErrorList::new().code(), ErrorCode::Internal);
    }

    /// A crate's error whose spec error is not its own text, as one that
    /// wraps a delegate's error object.
    #[derive(Debug)]
    struct Wrapped(CniError);

    impl fmt::Display for Wrapped {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "IPAM DEL with \"host-local\": {}", self.0.msg)
        }
    }

    impl ToCniError for Wrapped {
        fn to_cni_error(&self) -> CniError {
            self.0.clone()
        }
    }

    #[test]
    fn combine_keeps_one_error_as_it_is_and_lists_several_with_their_own_text() {
        let locked = || Wrapped(CniError::new(ErrorCode::TryAgainLater, "store locked"));
        let several = |list: ErrorList| Wrapped(list.to_cni_error());
        assert!(ErrorList::combine(Vec::<Wrapped>::new(), several).is_none());
        let one = ErrorList::combine(vec![locked()], several).unwrap();
        assert_eq!(one.to_cni_error().msg, "store locked");
        let io = Wrapped(CniError::new(ErrorCode::Io, "disk full"));
        let both = ErrorList::combine(vec![locked(), io], |list| {
            assert_eq!(list.len(), 2);
            let e = list.to_cni_error();
            assert_eq!(e.code, ErrorCode::TryAgainLater);
            assert_eq!(
                e.msg,
                "IPAM DEL with \"host-local\": store locked; \
                 IPAM DEL with \"host-local\": disk full"
            );
            Wrapped(e)
        });
        assert!(both.is_some());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for n in [1, 2, 3, 4, 5, 6, 7, 8, 11, 50, 51, 999, 100, 120] {
            assert_eq!(ErrorCode::from(n).as_u32(), n);
        }
        assert_eq!(ErrorCode::from(100), ErrorCode::Other(100));
    }

    #[test]
    fn json_shape() {
        let e = CniError::new(
            ErrorCode::InvalidEnvironment,
            "required env variables [CNI_NETNS] missing",
        )
        .with_version(SpecVersion::V1_0_0);
        assert_eq!(
            e.to_json(),
            "{\"cniVersion\":\"1.0.0\",\"code\":4,\"msg\":\"required env variables [CNI_NETNS] missing\"}\n"
        );
        let e = CniError::new(ErrorCode::IncompatibleVersion, "incompatible CNI versions")
            .with_details("config is \"9.9.9\"");
        let v: serde_json::Value = serde_json::from_str(&e.to_json()).unwrap();
        assert_eq!(v["code"], 1);
        assert_eq!(v["details"], "config is \"9.9.9\"");
        assert!(v.get("cniVersion").is_none());
    }

    #[test]
    fn display_joins_details() {
        let e = CniError::new(ErrorCode::Decode, "bad").with_details("why");
        assert_eq!(e.to_string(), "bad; why");
    }

    #[test]
    fn parses_go_error_without_version() {
        let e: CniError =
            serde_json::from_str(r#"{"code":7,"msg":"missing network name"}"#).unwrap();
        assert_eq!(e.code, ErrorCode::InvalidNetworkConfig);
        assert_eq!(e.cni_version, None);
    }
}
