//! `firewall`: a chained plugin that lets the pod's traffic be forwarded
//! and, with `ingressPolicy: same-bridge`, isolates its bridge from other
//! isolated bridges: the reference `firewall` plugin's iptables backend, as
//! host packet-filter rules.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod plugin;
#[cfg(test)]
mod tests;

pub use plugin::Firewall;

wasm_cni_sdk::export_plugin!(Firewall);
