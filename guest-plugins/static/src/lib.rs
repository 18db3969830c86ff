//! `static`: the reference static IPAM plugin. Stateless: ADD reports the
//! configured addresses, routes and DNS; DEL has nothing to release.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod plugin;
#[cfg(test)]
mod tests;

pub use plugin::Static;

wasm_cni_sdk::export_plugin!(Static);
