//! Kernel networking effects, as semantic verbs: the types, the [`Net`]
//! trait and the in-memory model live in `wasm-cni-model` (shared with the
//! SDK's fake host and the fuzz harness); the kernel backend lives here.
//!
//! [`KernelNet`] speaks rtnetlink over a synchronous socket per namespace.
//! One behavioural suite (`net::tests`) runs against it and `MemoryNet`.

pub(crate) mod kernel;
#[cfg(test)]
pub(crate) mod tests;

pub use kernel::KernelNet;
/// For the filter's backend, which speaks netfilter netlink from the same
/// namespaces.
pub(crate) use kernel::{ext_ack_text, in_netns};
pub use wasm_cni_model::net::*;
