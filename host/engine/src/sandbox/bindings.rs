//! The only place the host's bindings are generated from `wit/`.
//!
//! Every import is `trappable`: a host function returns
//! `wasmtime::Result<T>`, where `Ok` carries the WIT value and `Err` traps
//! the plugin — reserved for host bugs and exhausted budgets, never for
//! ordinary failures like "link not found". A function whose WIT result has
//! an error variant returns `Result<T, Fail<E>>` instead (`fail.rs`), which
//! carries either.
//!
//! The contract versions served (`wit/README.md`): the current one,
//! `cni:plugin@0.2.2`, from `wit/`, which also serves 0.2.0 and 0.2.1 (a
//! patch version only adds: wasmtime links `0.2.x` names semver-compatibly), and
//! 0.1.0 from `wit/released/0.1.0/`, whose imports forward to the current
//! ones (`compat.rs`). The WIT types of both derive serde so that a value of one
//! version becomes the other's by name, field by field: a field a version
//! lacks is dropped going down and `none` coming up.

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "plugin-host",
    imports: { default: trappable },
    // An import body returns `Result<T, Fail<E>>` (`fail.rs`): `?` carries
    // both the plugin's error and a trap.
    trappable_error_type: {
        "cni:plugin/network.net-error" => crate::sandbox::fail::NetFail,
        "cni:plugin/filter.filter-error" => crate::sandbox::fail::FilterFail,
        "cni:plugin/store.store-error" => crate::sandbox::fail::StoreFail,
        "cni:plugin/files.file-error" => crate::sandbox::fail::FileFail,
    },
    additional_derives: [serde::Serialize, serde::Deserialize],
    with: {
        // Namespace handles are host objects in the store's ResourceTable;
        // a plugin only ever holds an opaque index to one.
        "cni:plugin/network.netns": crate::sandbox::host_network::NetnsHandle,
    },
});

pub use cni::plugin::types;

/// `cni:plugin@0.1.0` as released (commit 63aab4e, 2026-12-01).
pub mod v0_1_0 {
    wasmtime::component::bindgen!({
        path: "../../wit/released/0.1.0",
        world: "plugin-host",
        imports: { default: trappable },
        additional_derives: [serde::Serialize, serde::Deserialize],
        with: {
            "cni:plugin/network.netns": crate::sandbox::host_network::NetnsHandle,
        },
    });
}
