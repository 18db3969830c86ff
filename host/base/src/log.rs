//! Diagnostics on stderr, which runtimes forward to their logs. stdout is
//! reserved for the CNI result or error.
//!
//! The level comes from `WASM_CNI_LOG` (`error`, `warn`, `info`, `debug`;
//! default `warn`). A daemon serving a request [`capture`]s what the request
//! logs, at the level its client asked for, and hands it back to the client,
//! so a runtime sees on the client's stderr exactly what a per-invocation
//! process would have printed.

use std::cell::RefCell;
use std::fmt::Display;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
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

    pub fn parse(s: &str) -> Option<Level> {
        match s.trim().to_ascii_lowercase().as_str() {
            "error" => Some(Level::Error),
            "warn" | "warning" => Some(Level::Warn),
            "info" => Some(Level::Info),
            "debug" | "trace" => Some(Level::Debug),
            _ => None,
        }
    }
}

/// The level `WASM_CNI_LOG` names, if it names one.
pub fn level_from_env() -> Option<Level> {
    static LEVEL: OnceLock<Option<Level>> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        std::env::var("WASM_CNI_LOG")
            .ok()
            .and_then(|v| Level::parse(&v))
    })
}

fn max_level() -> Level {
    level_from_env().unwrap_or(DEFAULT_LEVEL)
}

/// Set once the daemon's `tracing` subscriber is in place: lines no request
/// captures become its events.
static TRACING: AtomicBool = AtomicBool::new(false);

/// From now on, send what no request captures to `tracing` (the daemon's
/// own log) instead of writing stderr lines.
pub fn route_to_tracing() {
    TRACING.store(true, Ordering::Relaxed);
}

fn event(level: Level, source: &str, message: &dyn Display) {
    match level {
        Level::Error => tracing::error!(source, "{message}"),
        Level::Warn => tracing::warn!(source, "{message}"),
        Level::Info => tracing::info!(source, "{message}"),
        Level::Debug => tracing::debug!(source, "{message}"),
    }
}

/// The default level when `WASM_CNI_LOG` says nothing usable.
pub const DEFAULT_LEVEL: Level = Level::Warn;

struct Capture {
    level: Level,
    text: String,
}

thread_local! {
    static CAPTURE: RefCell<Option<Capture>> = const { RefCell::new(None) };
}

/// Run `f`, collecting what it logs on this thread at `level` or above
/// instead of writing it to stderr; returns its value and the lines.
pub fn capture<T>(level: Level, f: impl FnOnce() -> T) -> (T, String) {
    let outer = CAPTURE.with(|c| {
        c.borrow_mut().replace(Capture {
            level,
            text: String::new(),
        })
    });
    let value = f();
    let text = CAPTURE.with(|c| {
        let mut slot = c.borrow_mut();
        let mine = slot.take().map(|c| c.text).unwrap_or_default();
        *slot = outer;
        mine
    });
    (value, text)
}

pub fn enabled(level: Level) -> bool {
    CAPTURE
        .with(|c| c.borrow().as_ref().map(|c| level <= c.level))
        .unwrap_or_else(|| level <= max_level())
}

/// Log one line, `wasm-cni[<source>] <level>: <message>`. `source` names the
/// plugin for messages a plugin sent, or is empty for the host's own.
///
/// Messages carry others' text (a plugin's error, a config's names, a
/// server's reply) to a terminal or a log viewer: control characters in
/// them are escaped here, once for every line ([`crate::text`]), so one
/// message is one line and moves no cursor.
pub fn log(level: Level, source: &str, message: impl Display) {
    if !enabled(level) {
        return;
    }
    let message = crate::text::shown(message);
    let source = crate::text::printable(source);
    let capturing = CAPTURE.with(|c| c.borrow().is_some());
    if !capturing && TRACING.load(Ordering::Relaxed) {
        let source = if source.is_empty() {
            "wasm-cni"
        } else {
            &source
        };
        return event(level, source, &message);
    }
    let line = if source.is_empty() {
        format!("wasm-cni {}: {message}\n", level.as_str())
    } else {
        format!("wasm-cni[{source}] {}: {message}\n", level.as_str())
    };
    let captured = CAPTURE.with(|c| match c.borrow_mut().as_mut() {
        Some(c) => {
            c.text.push_str(&line);
            true
        }
        None => false,
    });
    if !captured {
        // A closed stderr must not fail the CNI operation.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }
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
    fn a_capture_collects_this_threads_lines_at_its_level() {
        let ((), text) = capture(Level::Info, || {
            info("kept");
            debug("dropped");
            log(Level::Warn, "bridge", "from a plugin");
            let ((), inner) = capture(Level::Debug, || debug("inner"));
            assert_eq!(inner, "wasm-cni debug: inner\n");
        });
        assert_eq!(
            text,
            "wasm-cni info: kept\nwasm-cni[bridge] warn: from a plugin\n"
        );
        // Another thread's lines are its own.
        let ((), text) = capture(Level::Debug, || {
            std::thread::spawn(|| debug("elsewhere")).join().unwrap();
        });
        assert_eq!(text, "");
    }

    #[test]
    fn levels_parse_and_order() {
        assert_eq!(Level::parse("DEBUG"), Some(Level::Debug));
        assert_eq!(Level::parse("warning"), Some(Level::Warn));
        assert_eq!(Level::parse("loud"), None);
        assert!(Level::Error < Level::Debug);
    }

    #[test]
    fn a_line_is_one_line_whatever_its_text_holds() {
        let ((), text) = capture(Level::Info, || {
            error("plugin said: \u{1b}[2K\rNETWORK n  ready\nforged");
            log(Level::Warn, "bad\u{1b}]0;title\u{7}", "x");
        });
        assert_eq!(
            text,
            "wasm-cni error: plugin said: \\u{1b}[2K\\rNETWORK n  ready\\nforged\n\
             wasm-cni[bad\\u{1b}]0;title\\u{7}] warn: x\n"
        );
    }
}
