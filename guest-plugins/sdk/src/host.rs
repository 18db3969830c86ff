//! What a plugin can ask of its host ([`Host`]) and what a plugin implements
//! ([`Plugin`]): both in plain Rust types, so plugin logic is generic over
//! the real WIT host ([`crate::guest::WitHost`]) and the fake
//! ([`crate::fake::FakeHost`]).

use std::fmt;

use crate::error::CniError;
use crate::filter::{FilterError, Rule};
use crate::net::{NetError, Ops};
use crate::types::{Attachment, CniResult, Request};

/// Log levels (WIT `log.level`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Error,
    Warn,
    Info,
    Debug,
}

/// A `store` failure (WIT `store-error`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreError {
    /// Not allowed for this verb or owner.
    Refused(String),
    /// The host could not read or write its state.
    Io(String),
}

impl StoreError {
    /// Code 5 for I/O, 999 for a refusal.
    pub fn into_cni(self, context: impl fmt::Display) -> CniError {
        match self {
            Self::Io(m) => CniError::new(crate::error::code::IO_FAILURE, format!("{context}: {m}")),
            Self::Refused(m) => CniError::internal(format!("{context}: refused: {m}")),
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Refused(m) => write!(f, "refused: {m}"),
            Self::Io(m) => write!(f, "I/O error: {m}"),
        }
    }
}

/// One record of the store (WIT `store.entry`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreEntry {
    pub key: String,
    pub owner: Attachment,
    pub allocated_at: u64,
    pub released_at: Option<u64>,
}

/// The imports of the `interface-plugin` world.
pub trait Host {
    type Ns: Ops;

    /// The attachment's container namespace; `NotFound` when there is none
    /// (normal on DEL).
    fn container_netns(&self) -> Result<Self::Ns, NetError>;
    /// The node namespace.
    fn node_netns(&self) -> Result<Self::Ns, NetError>;

    /// Delegated IPAM (`ipam.type`), run by the host with the same request.
    fn ipam_add(&self) -> Result<CniResult, CniError>;
    fn ipam_del(&self) -> Result<(), CniError>;
    fn ipam_check(&self) -> Result<(), CniError>;
    fn ipam_status(&self) -> Result<(), CniError>;
    fn ipam_gc(&self) -> Result<(), CniError>;

    fn store_reserve(&self, key: &str) -> Result<bool, StoreError>;
    fn store_release_by_owner(&self) -> Result<Vec<String>, StoreError>;
    fn store_release(&self, key: &str) -> Result<bool, StoreError>;
    fn store_get_by_owner(&self) -> Result<Vec<String>, StoreError>;
    fn store_list(&self) -> Result<Vec<StoreEntry>, StoreError>;
    /// The host's wall clock, ms since the Unix epoch (same scale as
    /// `StoreEntry::allocated_at`).
    fn store_now(&self) -> u64;
    fn store_get_value(&self, name: &str) -> Result<Option<String>, StoreError>;
    fn store_set_value(&self, name: &str, value: Option<&str>) -> Result<(), StoreError>;

    /// Install packet-filter rules for the attachment, all or none (WIT
    /// `filter.add`; ADD only).
    fn filter_add(&self, rules: &[Rule]) -> Result<(), FilterError>;
    /// `Missing` naming the first of `rules` the attachment does not have.
    fn filter_check(&self, rules: &[Rule]) -> Result<(), FilterError>;
    /// Remove those of `rules` the attachment has (ADD and DEL).
    fn filter_remove(&self, rules: &[Rule]) -> Result<(), FilterError>;

    fn log(&self, level: Level, message: &str);
}

/// A CNI plugin's verbs, over any [`Host`].
pub trait Plugin {
    fn add<H: Host>(host: &H, req: &Request) -> Result<CniResult, CniError>;
    fn del<H: Host>(host: &H, req: &Request) -> Result<(), CniError>;
    fn check<H: Host>(host: &H, req: &Request) -> Result<(), CniError>;

    /// STATUS; the default reports ready.
    fn status<H: Host>(host: &H, config: &str) -> Result<(), CniError> {
        let _ = (host, config);
        Ok(())
    }

    /// GC; the default has nothing to collect.
    fn gc<H: Host>(host: &H, config: &str, valid: &[Attachment]) -> Result<(), CniError> {
        let _ = (host, config, valid);
        Ok(())
    }
}
