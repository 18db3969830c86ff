//! The engine: what one CNI call runs, in a per-invocation process or in the
//! daemon.
//!
//! Flow of one invocation: the runtime's environment and stdin are parsed at
//! the [`edge`] into a CNI request; the [`chain`] executor runs each plugin
//! of the network's chain through the [`sandbox`], which gives the plugin a
//! fresh instance, limits, and capability-scoped host imports; the host
//! keeps its own record of each attachment (`wasm-cni-store`'s `state`);
//! the final result (or the first error, mapped to a CNI code in [`error`])
//! is printed at the edge. [`trace`] records each call's steps.
//!
//! This is the only crate of the host that runs wasmtime.
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod chain;
pub mod edge;
pub mod error;
pub mod sandbox;
pub mod trace;
