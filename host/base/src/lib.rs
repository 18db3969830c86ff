//! What every layer of the host uses and none of them owns: text that others
//! wrote made safe to show ([`text`]), the diagnostics on stderr ([`log`])
//! and the file helpers behind every lock and record ([`fsutil`]).
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod fsutil;
pub mod log;
pub mod text;
