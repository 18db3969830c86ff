//! The `wasm-cni` program: a CNI plugin when the runtime sets CNI_COMMAND,
//! the operator's CLI and the daemon otherwise ([`cli`]).
//!
//! The layers it is built from are crates of their own (the workspace's
//! `Cargo.toml` lists them and the rule between them); they are re-exported
//! here under the names the tests, the bench and the fuzz targets use.
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod cli;

pub use wasm_cni_base::{log, text};
pub use wasm_cni_daemon as daemon;
pub use wasm_cni_engine::{chain, edge, error, sandbox, trace};
pub use wasm_cni_image as image;
pub use wasm_cni_kernel::{filter, net};
pub use wasm_cni_protocol as cni;
pub use wasm_cni_store as store;
pub use wasm_cni_store::state;
#[cfg(feature = "fake")]
pub use wasm_cni_testing as plugin_test;
