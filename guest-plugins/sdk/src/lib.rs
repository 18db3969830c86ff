//! `wasm-cni-sdk`: what every wasm-cni guest plugin shares.
//!
//! * [`guest`]: the one `wit_bindgen::generate!` (world `interface-plugin`),
//!   conversions to plain types, the [`Host`]/[`Ops`] implementations over
//!   the WIT imports and [`export_plugin!`];
//! * [`host`]: the [`Host`] and [`Plugin`] traits that plugin logic is
//!   written against; [`net`]: the [`Ops`] trait (one network namespace);
//! * [`types`], [`error`]: plain CNI types and errors with the spec codes;
//! * [`config`], [`args`], [`mac`]: config, CNI_ARGS and MAC handling;
//! * [`ip`], [`naming`]: CIDR math and deterministic veth names;
//! * [`iface`], [`veth`], [`check`]: the reference `ConfigureIface` (and
//!   the IPAM step of ADD built on it), `SetupVeth` and CHECK validation;
//! * [`plugin`]: verb-level steps (opening namespaces, rollback, DEL of a
//!   container link, STATUS/GC forwarded to IPAM); [`stacked`]: what the
//!   plugins whose link sits on a master share (macvlan, macvtap, ipvlan,
//!   vlan);
//! * [`arena`]: the guest's allocator (feature `arena`, on by default);
//! * [`fake`] (tests or feature `fake`): an in-memory host for native unit
//!   tests, and [`fake::suite`], assertions the plugins' tests share.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

extern crate self as wasm_cni_sdk;

pub mod arena;
pub mod args;
pub mod check;
pub mod config;
pub mod error;
#[cfg(any(test, feature = "fake"))]
pub mod fake;
pub mod filter;
pub mod guest;
pub mod host;
pub mod iface;
pub mod ip;
pub mod mac;
pub mod naming;
pub mod net;
pub mod plugin;
pub mod stacked;
pub mod types;
pub mod veth;
pub mod vm;

pub use error::CniError;
pub use host::{Host, Level, Plugin};
pub use net::Ops;
pub use types::{Attachment, CniResult, Dns, Interface, IpConfig, Request, Route};

#[doc(hidden)]
pub mod __private {
    pub use wit_bindgen;
}
