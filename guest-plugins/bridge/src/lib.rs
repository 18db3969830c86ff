//! `bridge`: connects the container to a bridge in the node namespace with a
//! veth pair (the reference `bridge` plugin, §6.1), all kernel work done by
//! the host through the `network` import.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod conf;
mod plugin;
#[cfg(test)]
mod tests;

pub use plugin::Bridge;

wasm_cni_sdk::export_plugin!(Bridge);
