//! The kernel backends of the host's semantic capabilities: [`net`] (links,
//! addresses, routes, sysctls, traffic control over rtnetlink), [`filter`]
//! (nf_tables) and [`fabric`] (routes to other nodes, VXLAN tunnels). The
//! traits and the in-memory models they are tested against live in
//! `wasm-cni-model`; this is the one crate that speaks netlink.
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod fabric;
pub mod filter;
pub mod net;
