//! CNI errors with the spec's codes.

use std::fmt;

/// The spec's well-known error codes.
pub mod code {
    pub const INCOMPATIBLE_VERSION: u32 = 1;
    pub const UNSUPPORTED_FIELD: u32 = 2;
    pub const UNKNOWN_CONTAINER: u32 = 3;
    pub const INVALID_ENVIRONMENT: u32 = 4;
    pub const IO_FAILURE: u32 = 5;
    pub const DECODING_FAILURE: u32 = 6;
    pub const INVALID_CONFIG: u32 = 7;
    pub const TRY_AGAIN_LATER: u32 = 11;
    pub const NOT_AVAILABLE: u32 = 50;
    pub const LIMITED_CONNECTIVITY: u32 = 51;
    pub const INTERNAL: u32 = 999;
}

/// A CNI error: what a verb returns on failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CniError {
    pub code: u32,
    pub msg: String,
    pub details: String,
}

impl CniError {
    pub fn new(code: u32, msg: impl Into<String>) -> Self {
        Self {
            code,
            msg: msg.into(),
            details: String::new(),
        }
    }

    /// Code 7: the network configuration failed validation.
    pub fn invalid_config(msg: impl Into<String>) -> Self {
        Self::new(code::INVALID_CONFIG, msg)
    }

    /// Code 2: a config key this plugin does not implement. The message
    /// names the key and the value, as the spec asks.
    pub fn unsupported_field(key: &str, value: impl fmt::Display) -> Self {
        Self::new(
            code::UNSUPPORTED_FIELD,
            format!("unsupported field {key}: {value}"),
        )
        .with_details(format!(
            "this wasm-cni plugin does not implement `{key}`; remove it from the configuration or set it to its default"
        ))
    }

    /// Code 6: the configuration is not valid JSON.
    pub fn decoding(msg: impl Into<String>) -> Self {
        Self::new(code::DECODING_FAILURE, msg)
    }

    /// Code 4: an invalid environment (CNI_ARGS, ifname, ...).
    pub fn invalid_environment(msg: impl Into<String>) -> Self {
        Self::new(code::INVALID_ENVIRONMENT, msg)
    }

    /// Code 999: any other failure (the Go plugins' `ErrInternal`).
    pub fn internal(msg: impl Into<String>) -> Self {
        Self::new(code::INTERNAL, msg)
    }

    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = details.into();
        self
    }

    /// Prefixes `msg` with `context: `.
    pub fn context(mut self, context: impl fmt::Display) -> Self {
        self.msg = format!("{context}: {}", self.msg);
        self
    }
}

impl fmt::Display for CniError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.code, self.msg)?;
        if !self.details.is_empty() {
            write!(f, " ({})", self.details)?;
        }
        Ok(())
    }
}

impl std::error::Error for CniError {}
