//! `wasm-cni`: a CNI plugin when the runtime sets CNI_COMMAND, an operator
//! CLI (and the daemon) otherwise.
//!
//! The C runtime calls `main` directly: std's own start (`lang_start`)
//! places a guard for its stack-overflow message by asking glibc for the
//! main thread's stack, and glibc finds it by reading `/proc/self/maps`, 2 %
//! of a per-invocation call. What else that start does for this program,
//! `cli::process_start` does (arguments and the environment std reads
//! through glibc's `.init_array` either way).
// The test harness brings its own `main`.
#![cfg_attr(not(test), no_main)]

#[cfg(not(test))]
use std::ffi::{c_char, c_int};

#[cfg(not(test))]
#[no_mangle]
pub extern "C" fn main(_argc: c_int, _argv: *const *const c_char) -> c_int {
    wasm_cni::cli::process_start();
    // A panic ends the process as std's start ended it: code 101, not an
    // abort for unwinding out of this function.
    let _ = std::panic::catch_unwind(|| wasm_cni::cli::process_main());
    101
}
