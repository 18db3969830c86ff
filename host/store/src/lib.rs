//! The plugin state store behind the `cni:plugin/store` import.
//!
//! State is scoped to (network name, plugin type): a plugin sees only its
//! own scope, for the network it was configured in. Each plugin call that
//! touches the store runs in one exclusive transaction on its scope: the
//! scope is locked against other processes at the first store call, read
//! once, changed in memory, and written back only if the call returns `Ok`.
//! A trap, a deadline or an error return leaves the stored state exactly as
//! it was, which is what makes a half-done allocation impossible.
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod admin;
mod disk;
pub mod etcd;
pub mod file;
#[cfg(any(test, feature = "memory"))]
mod memory;
pub mod state;

use std::collections::BTreeMap;
use std::io;
use std::time::Instant;

use serde::{Deserialize, Serialize};

pub use disk::{DiskStore, ScopeCache};
pub use etcd::{EtcdConfig, EtcdStore};
#[cfg(any(test, feature = "memory"))]
pub use memory::MemoryStore;

/// Who owns an entry: one attachment.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Owner {
    pub container_id: String,
    pub ifname: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub owner: Owner,
    /// Milliseconds since the Unix epoch.
    pub allocated_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released_at: Option<u64>,
    /// The node that allocated it, in a cluster store (none locally).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

impl Entry {
    pub fn is_live(&self) -> bool {
        self.released_at.is_none()
    }
}

/// Everything stored in one scope.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopeData {
    #[serde(default)]
    pub entries: BTreeMap<String, Entry>,
    #[serde(default)]
    pub values: BTreeMap<String, String>,
}

/// A store scope: one network, one plugin type.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Scope {
    pub network: String,
    pub plugin: String,
    /// Where the config asks this plugin's state to live (`dataDir`), in
    /// place of the store's own root. The config is trusted; the plugin
    /// cannot choose it.
    pub data_dir: Option<std::path::PathBuf>,
}

/// Why a store operation failed. Each kind asks something different of the
/// caller, so it is a variant, never a string or a wrapped error to look
/// inside.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The scope stayed locked by another call until the deadline. Nothing
    /// was read; the runtime may try again later (CNI code 11).
    #[error("{0}")]
    Busy(String),
    /// A cluster store out of reach or too slow. Nothing was written; the
    /// runtime may try again later (code 11).
    #[error("{0}")]
    Unavailable(String),
    /// Another node changed a key this transaction read and wrote. Nothing
    /// was written; the call may run again on a fresh snapshot.
    #[error("{0}")]
    Conflict(String),
    /// The scope would outgrow what the store keeps for one. Refused for
    /// good: retrying cannot mend it.
    #[error("{0}")]
    Quota(String),
    /// Anything else: the file system, a corrupt record, credentials.
    #[error(transparent)]
    Io(#[from] io::Error),
}

pub type StoreResult<T> = Result<T, StoreError>;

/// A lock wait that ended at the deadline is [`StoreError::Busy`], naming
/// the scope; any other failure to lock is I/O.
fn lock_failed(scope: &Scope, e: io::Error) -> StoreError {
    if e.kind() == io::ErrorKind::TimedOut {
        StoreError::Busy(format!("{}/{}: {e}", scope.network, scope.plugin))
    } else {
        StoreError::Io(e)
    }
}

/// An open, locked transaction on one scope. Dropping it without `commit`
/// discards every change and releases the lock.
pub trait Txn: Send {
    fn data(&mut self) -> &mut ScopeData;
    fn commit(self: Box<Self>) -> StoreResult<()>;
    /// The scope's size as stored, in bytes, if the backend knows it
    /// without a pass over the data (a file's length): where the quota on
    /// what a scope may hold starts counting. None: count the data.
    fn stored_bytes(&self) -> Option<u64> {
        None
    }
    /// In a store several nodes share: the address blocks (CIDRs) other
    /// nodes claimed, which this node's allocator should take from last.
    /// A fact the plugin may use, never a limit: every address stays in
    /// the data. Empty for a store of one node.
    fn others_blocks(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Where scopes live.
pub trait StateStore: Send + Sync {
    /// Lock `scope` and read it, waiting for other holders until `deadline`
    /// (without one, as long as they hold it); [`StoreError::Busy`] past it.
    fn begin_by(&self, scope: &Scope, deadline: Option<Instant>) -> StoreResult<Box<dyn Txn>>;
    /// [`StateStore::begin_by`] without a deadline (operator commands).
    fn begin(&self, scope: &Scope) -> StoreResult<Box<dyn Txn>> {
        self.begin_by(scope, None)
    }
    /// The scopes of a network (plugin types), for the operator view.
    fn scopes(&self, network: &str) -> StoreResult<Vec<String>>;
    /// Networks with any state.
    fn networks(&self) -> StoreResult<Vec<String>>;
    /// Whether a transaction could commit now, answered within `deadline`
    /// (STATUS): the local store's directory is writable, a cluster store
    /// answers.
    fn ready(&self, _deadline: Option<Instant>) -> StoreResult<()> {
        Ok(())
    }
}

/// A key or value name a plugin may use: it becomes part of a file's
/// contents only, but keep it printable and bounded.
pub fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 256
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '_' | '-' | '/' | '@'))
}

#[cfg(test)]
pub(crate) mod contract {
    //! Behaviour every backend must show.
    use super::*;

    fn owner(c: &str) -> Owner {
        Owner {
            container_id: c.into(),
            ifname: "eth0".into(),
        }
    }

    pub fn exercise(store: &dyn StateStore) {
        let scope = Scope {
            network: "net1".into(),
            plugin: "host-local".into(),
            data_dir: None,
        };
        // Uncommitted changes vanish.
        {
            let mut t = store.begin(&scope).unwrap();
            t.data().values.insert("k".into(), "v".into());
        }
        assert_eq!(store.begin(&scope).unwrap().data().values.get("k"), None);
        // Committed changes persist.
        let mut t = store.begin(&scope).unwrap();
        t.data().entries.insert(
            "10.0.0.2".into(),
            Entry {
                owner: owner("a"),
                allocated_at: 5,
                released_at: None,
                node: None,
            },
        );
        t.data().values.insert("last".into(), "10.0.0.2".into());
        t.commit().unwrap();
        let mut t = store.begin(&scope).unwrap();
        assert_eq!(t.data().entries["10.0.0.2"].owner, owner("a"));
        assert_eq!(t.data().values["last"], "10.0.0.2");
        drop(t);
        // Scopes are separate.
        let other = Scope {
            network: "net1".into(),
            plugin: "tuning".into(),
            data_dir: None,
        };
        assert!(store.begin(&other).unwrap().data().entries.is_empty());
        // A scope another transaction holds is busy at the deadline, and
        // says which scope.
        let held = store.begin(&scope).unwrap();
        let soon = Instant::now() + std::time::Duration::from_millis(20);
        match store.begin_by(&scope, Some(soon)) {
            Err(StoreError::Busy(m)) => assert!(m.starts_with("net1/host-local: "), "{m}"),
            Err(e) => panic!("not busy: {e:?}"),
            Ok(_) => panic!("two transactions held net1/host-local at once"),
        }
        drop(held);
        assert_eq!(store.networks().unwrap(), vec!["net1".to_string()]);
        assert_eq!(
            store.scopes("net1").unwrap(),
            vec!["host-local".to_string()]
        );
    }
}
