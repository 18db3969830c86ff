//! `ipvlan`: an ipvlan of a node link, created straight into the container
//! namespace (the reference `ipvlan` plugin; lyft's cni-ipvlan-vpc-k8s runs
//! on it).

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod plugin;
#[cfg(test)]
mod tests;

pub use plugin::Ipvlan;

wasm_cni_sdk::export_plugin!(Ipvlan);
