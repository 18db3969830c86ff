//! Diagnostics on stderr, which runtimes forward to their logs. stdout is
//! reserved for the CNI result or error.
//!
//! The level comes from `WASM_CNI_LOG` (`error`, `warn`, `info`, `debug`;
//! default `warn`).

use std::fmt::Display;
use std::io::Write;
use std::sync::OnceLock;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error,
    Warn,
    Info,
    Debug,
}

impl Level {
    fn as_str(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
        }
    }

    fn parse(s: &str) -> Option<Level> {
        match s.trim().to_ascii_lowercase().as_str() {
            "error" => Some(Level::Error),
            "warn" | "warning" => Some(Level::Warn),
            "info" => Some(Level::Info),
            "debug" | "trace" => Some(Level::Debug),
            _ => None,
        }
    }
}

fn max_level() -> Level {
    static LEVEL: OnceLock<Level> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        std::env::var("WASM_CNI_LOG")
            .ok()
            .and_then(|v| Level::parse(&v))
            .unwrap_or(Level::Warn)
    })
}

pub fn enabled(level: Level) -> bool {
    level <= max_level()
}

/// Log one line, `wasm-cni[<source>] <level>: <message>`. `source` names the
/// plugin for messages a plugin sent, or is empty for the host's own.
pub fn log(level: Level, source: &str, message: impl Display) {
    if !enabled(level) {
        return;
    }
    let mut err = std::io::stderr().lock();
    // A closed stderr must not fail the CNI operation.
    let _ = if source.is_empty() {
        writeln!(err, "wasm-cni {}: {message}", level.as_str())
    } else {
        writeln!(err, "wasm-cni[{source}] {}: {message}", level.as_str())
    };
}

pub fn error(message: impl Display) {
    log(Level::Error, "", message)
}
pub fn warn(message: impl Display) {
    log(Level::Warn, "", message)
}
pub fn info(message: impl Display) {
    log(Level::Info, "", message)
}
pub fn debug(message: impl Display) {
    log(Level::Debug, "", message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_and_order() {
        assert_eq!(Level::parse("DEBUG"), Some(Level::Debug));
        assert_eq!(Level::parse("warning"), Some(Level::Warn));
        assert_eq!(Level::parse("loud"), None);
        assert!(Level::Error < Level::Debug);
    }
}
