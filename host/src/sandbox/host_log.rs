//! `cni:plugin/log`.

use super::bindings::cni::plugin::log::{Host, Level};
use super::state::Ctx;
use crate::log;

/// Longest message kept; a plugin cannot flood the runtime's logs with
/// megabyte lines.
const MAX_MESSAGE: usize = 4096;

impl Host for Ctx {
    fn log(&mut self, level: Level, message: String) -> wasmtime::Result<()> {
        self.charge()?;
        let level = match level {
            Level::Error => log::Level::Error,
            Level::Warn => log::Level::Warn,
            Level::Info => log::Level::Info,
            Level::Debug => log::Level::Debug,
        };
        let mut msg = message;
        if msg.len() > MAX_MESSAGE {
            let mut cut = MAX_MESSAGE;
            while !msg.is_char_boundary(cut) {
                cut -= 1;
            }
            msg.truncate(cut);
            msg.push('…');
        }
        // Control characters could forge extra log lines.
        let msg: String = msg
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        log::log(level, &self.plugin, msg);
        Ok(())
    }
}

impl super::bindings::types::Host for Ctx {}
