//! `ptp`: a point-to-point veth between the container and the node, routed
//! at L3 (the reference `ptp` plugin, §6.2).

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod plugin;
#[cfg(test)]
mod tests;

pub use plugin::Ptp;

wasm_cni_sdk::export_plugin!(Ptp);
