//! The node's part of the cluster network on the kernel: the
//! [`Fabric`] trait and its model are `wasm_cni_model::fabric`'s; this is
//! its rtnetlink backend, and the suite both must pass.

pub use crate::net::kernel::KernelFabric;
pub use wasm_cni_model::fabric::*;

#[cfg(test)]
mod tests;
