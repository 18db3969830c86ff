//! wasm-cni runs a CNI network's whole plugin chain inside one process, each
//! plugin a sandboxed WebAssembly component.
//!
//! Flow of one invocation: the runtime's environment and stdin are parsed at
//! the [`edge`] into a [`cni`] request; the [`chain`] executor runs each
//! plugin of the network's chain through the [`sandbox`], which gives the
//! plugin a fresh instance, limits, and capability-scoped host imports; the
//! host keeps its own [`state`] of each attachment; the final result (or the
//! first error, mapped to a CNI code in [`error`]) is printed at the edge.
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod chain;
pub mod cli;
pub mod daemon;
pub mod edge;
pub mod error;
#[cfg(feature = "fake")]
pub mod plugin_test;
pub mod sandbox;
pub mod trace;

// The layers below, under the names this crate has always used for them.
use wasm_cni_base::fsutil;
pub use wasm_cni_base::{log, text};
pub use wasm_cni_image as image;
pub use wasm_cni_kernel::{filter, net};
pub use wasm_cni_protocol as cni;
pub use wasm_cni_store as store;
pub use wasm_cni_store::state;
