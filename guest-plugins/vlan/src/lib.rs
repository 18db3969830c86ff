//! `vlan`: an 802.1Q vlan sub-interface of a node link, created straight
//! into the container namespace (the reference `vlan` plugin).

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod plugin;
#[cfg(test)]
mod tests;

pub use plugin::Vlan;

wasm_cni_sdk::export_plugin!(Vlan);
