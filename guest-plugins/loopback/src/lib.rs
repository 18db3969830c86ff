//! `loopback`: sets `lo` up in the container namespace (the reference
//! `loopback` plugin, §6.5). `CNI_IFNAME` is ignored.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod plugin;
#[cfg(test)]
mod tests;

pub use plugin::Loopback;

wasm_cni_sdk::export_plugin!(Loopback);
