//! `macvtap`: a macvtap of a node uplink, created straight into the
//! container namespace, for a VM in the pod to open as a tap (kubevirt's
//! macvtap-cni use case, on the reference macvlan plugin's config model).

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod conf;
mod plugin;
#[cfg(test)]
mod tests;

pub use plugin::Macvtap;

wasm_cni_sdk::export_plugin!(Macvtap);
