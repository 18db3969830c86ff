//! The CNI wire protocol: environment, stdin config, results, versions and errors.
//! Pure data handling; nothing here touches the kernel or runs plugins.
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub use wasm_cni_model::cidr;
pub mod config;
pub mod env;
pub mod error;
pub mod result;
pub mod version;

pub use env::{Command, Invocation};
pub use error::{CniError, ErrorCode};
pub use result::CniResult;
