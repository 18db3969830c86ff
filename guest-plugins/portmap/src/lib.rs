//! `portmap`: a chained plugin that maps host ports to the pod
//! (`runtimeConfig.portMappings`, the `portMappings` capability), as the
//! reference `portmap` does, through the host's packet-filter rules.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod plugin;
#[cfg(test)]
mod tests;

pub use plugin::Portmap;

wasm_cni_sdk::export_plugin!(Portmap);
