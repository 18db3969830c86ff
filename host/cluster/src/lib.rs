//! Cluster mode: what a node needs so that its pods reach the pods of every
//! other node. [`node`] reads Node objects (untrusted input: whoever can
//! write a Node is not thereby root on every node); [`plan`] turns them
//! into the [`Layout`](wasm_cni_model::fabric::Layout) they justify on
//! this node, refusing, with a reason, every Node that would reach beyond
//! its own pod CIDR.
//!
//! The computation runs in the host, not in a sandboxed component: its
//! only input is the API's objects, its only output routes the host must
//! check against the same scope anyway, so a component would add a world
//! and a copy of every Node without taking any trust away from the host.

pub mod api;
pub mod node;
pub mod plan;
pub mod run;
