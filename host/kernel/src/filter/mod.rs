//! Packet filtering on the plugins' behalf, as semantic rules: the rules,
//! the [`Filter`] trait and the in-memory model live in `wasm-cni-model`;
//! the nf_tables backend lives here. One behavioural suite (`tests`) runs
//! against it and `MemoryFilter`.

pub(crate) mod kernel;
#[cfg(test)]
mod tests;

pub use kernel::{KernelFilter, SocketPool};
pub use wasm_cni_model::filter::*;
