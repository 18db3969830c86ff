//! `tuning`: a chained plugin that sets sysctls and link attributes (MAC,
//! MTU, promisc, allmulti, txqueuelen) of the container interface, saving
//! the original link attributes in the host's store so DEL restores them
//! (the reference `tuning` plugin, §6.6).

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod conf;
mod plugin;
#[cfg(test)]
mod tests;

pub use plugin::Tuning;

wasm_cni_sdk::export_plugin!(Tuning);
