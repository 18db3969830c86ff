//! Tests of `net`: unit tests of the shared helpers, the behavioural suite
//! every backend must pass (`shared`, run against `MemoryNet` and, as root,
//! against `KernelNet` in throwaway namespaces), and checks only the kernel
//! backend can answer, verified with iproute2.

mod kernel_only;
mod memory_only;
mod shared;
pub(crate) mod support;
mod unit;
