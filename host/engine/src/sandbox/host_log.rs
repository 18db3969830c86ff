//! `cni:plugin/log`.

use super::bindings::cni::plugin::log::{Host, Level};
use super::state::Ctx;
use wasm_cni_base::log;

/// Longest message kept; a plugin cannot flood the runtime's logs with
/// megabyte lines.
const MAX_MESSAGE: usize = 4096;
/// What one call may log in all, whatever its budget: a runtime keeps
/// plugin stderr in its own logs, and 64 KiB is hundreds of useful lines.
pub(crate) const MAX_LOG_BYTES: usize = 64 << 10;

impl Host for Ctx {
    fn log(&mut self, level: Level, message: String) -> wasmtime::Result<()> {
        self.charge()?;
        if self.log_bytes >= MAX_LOG_BYTES {
            return Ok(());
        }
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
        // Control characters could forge extra log lines or drive the
        // terminal: counted as the escapes they are shown as.
        let msg = wasm_cni_base::text::printable(&msg);
        self.log_bytes += msg.len();
        log::log(level, &self.plugin, &msg);
        if self.log_bytes >= MAX_LOG_BYTES {
            log::log(
                log::Level::Warn,
                &self.plugin,
                format_args!(
                    "log limit of {MAX_LOG_BYTES} bytes for this call reached; dropping the rest"
                ),
            );
        }
        Ok(())
    }
}

impl super::bindings::types::Host for Ctx {}
