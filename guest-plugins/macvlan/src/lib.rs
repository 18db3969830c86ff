//! `macvlan`: a macvlan sub-interface of a node uplink, created straight
//! into the container namespace (the reference `macvlan` plugin, §6.3).

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod plugin;
#[cfg(test)]
mod tests;

pub use plugin::Macvlan;

wasm_cni_sdk::export_plugin!(Macvlan);
