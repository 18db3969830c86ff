//! `tap`: a persistent tap device as the container interface (the
//! reference `tap` plugin, §6.4), created by the host straight under
//! `CNI_IFNAME` inside the container namespace, optionally a port of a
//! bridge that already exists there.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod conf;
mod plugin;
#[cfg(test)]
mod tests;

pub use plugin::Tap;

wasm_cni_sdk::export_plugin!(Tap);
