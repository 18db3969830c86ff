//! The only place the host's bindings are generated from `wit/`.
//!
//! Every import is `trappable`: a host function returns
//! `wasmtime::Result<T>`, where `Ok` carries the WIT value (including WIT
//! `result` errors the plugin is expected to handle) and `Err` traps the
//! plugin — reserved for host bugs and exhausted budgets, never for ordinary
//! failures like "link not found".

wasmtime::component::bindgen!({
    path: "../wit",
    world: "plugin-host",
    imports: { default: trappable },
    with: {
        // Namespace handles are host objects in the store's ResourceTable;
        // a plugin only ever holds an opaque index to one.
        "cni:plugin/network.netns": crate::sandbox::host_network::NetnsHandle,
    },
});

pub use cni::plugin::types;
