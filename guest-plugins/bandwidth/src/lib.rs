//! `bandwidth`: a chained plugin that limits the pod's traffic, as the
//! reference `bandwidth` plugin: what the pod receives with a tbf on its
//! host-side veth, what it sends with a tbf on an ifb its host veth's
//! ingress is redirected to. Rates and bursts in bits, from the config or
//! the `bandwidth` capability (`runtimeConfig.bandwidth`).

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod plugin;
#[cfg(test)]
mod tests;

pub use plugin::Bandwidth;

wasm_cni_sdk::export_plugin!(Bandwidth);
