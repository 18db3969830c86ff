//! The CNI error object (spec "Error" section) and its well-known codes.

use serde_json::{Map, Value};

/// Error codes reserved by the spec (0–99), plus Go's catch-all 999.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ErrorCode {
    IncompatibleVersion = 1,
    UnsupportedField = 2,
    UnknownContainer = 3,
    InvalidEnvironment = 4,
    Io = 5,
    Decoding = 6,
    InvalidConfig = 7,
    TryAgainLater = 11,
    StatusUnavailable = 50,
    StatusLimited = 51,
    /// What Go's skel reports for any plain (untyped) plugin failure.
    Internal = 999,
}

impl ErrorCode {
    pub fn code(self) -> u32 {
        self as u32
    }
}

impl From<ErrorCode> for u32 {
    fn from(code: ErrorCode) -> u32 {
        code.code()
    }
}

/// A CNI error as printed on stdout. `code` is a plain number so that plugin-defined
/// codes (100+) coming back from a chain survive untouched.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{msg}{}", details_suffix(.details))]
pub struct CniError {
    pub code: u32,
    pub msg: String,
    pub details: String,
}

fn details_suffix(details: &str) -> String {
    if details.is_empty() {
        String::new()
    } else {
        format!(": {details}")
    }
}

impl CniError {
    pub fn new(code: ErrorCode, msg: impl Into<String>) -> Self {
        Self {
            code: code.code(),
            msg: msg.into(),
            details: String::new(),
        }
    }

    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = details.into();
        self
    }

    /// The error object for stdout. Go's skel prints no `cniVersion` and omits empty
    /// `details`; the spec shows `cniVersion`, so the caller decides whether to add it.
    pub fn to_json(&self, cni_version: Option<&str>) -> String {
        let mut obj = Map::new();
        if let Some(v) = cni_version {
            obj.insert("cniVersion".into(), Value::from(v));
        }
        obj.insert("code".into(), Value::from(self.code));
        obj.insert("msg".into(), Value::from(self.msg.as_str()));
        if !self.details.is_empty() {
            obj.insert("details".into(), Value::from(self.details.as_str()));
        }
        super::result::to_string_pretty(&Value::Object(obj))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_spec_numbers() {
        let all = [
            (ErrorCode::IncompatibleVersion, 1),
            (ErrorCode::UnsupportedField, 2),
            (ErrorCode::UnknownContainer, 3),
            (ErrorCode::InvalidEnvironment, 4),
            (ErrorCode::Io, 5),
            (ErrorCode::Decoding, 6),
            (ErrorCode::InvalidConfig, 7),
            (ErrorCode::TryAgainLater, 11),
            (ErrorCode::StatusUnavailable, 50),
            (ErrorCode::StatusLimited, 51),
            (ErrorCode::Internal, 999),
        ];
        for (code, n) in all {
            assert_eq!(code.code(), n, "{code:?}");
            assert_eq!(u32::from(code), n);
        }
    }

    #[test]
    fn display_appends_details_only_when_present() {
        let e = CniError::new(ErrorCode::Io, "read failed");
        assert_eq!(e.to_string(), "read failed");
        let e = e.with_details("EOF");
        assert_eq!(e.to_string(), "read failed: EOF");
    }

    #[test]
    fn json_matches_go_skel_layout() {
        let e = CniError::new(ErrorCode::InvalidEnvironment, "missing");
        assert_eq!(
            e.to_json(None),
            "{\n    \"code\": 4,\n    \"msg\": \"missing\"\n}"
        );
        let e = CniError::new(ErrorCode::IncompatibleVersion, "incompatible CNI versions")
            .with_details(r#"config is "9.9.9""#);
        assert_eq!(
            e.to_json(Some("1.1.0")),
            "{\n    \"cniVersion\": \"1.1.0\",\n    \"code\": 1,\n    \"msg\": \"incompatible CNI versions\",\n    \"details\": \"config is \\\"9.9.9\\\"\"\n}"
        );
    }

    #[test]
    fn json_keeps_plugin_defined_codes() {
        let e = CniError {
            code: 123,
            msg: "custom".into(),
            details: String::new(),
        };
        let v: Value = serde_json::from_str(&e.to_json(None)).unwrap();
        assert_eq!(v["code"], 123);
    }
}
