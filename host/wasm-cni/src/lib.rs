//! The `wasm-cni` program: a CNI plugin when the runtime sets CNI_COMMAND,
//! the operator's CLI and the daemon otherwise ([`cli`]).
//!
//! The layers it is built from are crates of their own (the workspace's
//! `Cargo.toml` lists them and the rule between them); whatever uses a
//! layer names that crate.
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod cli;
