//! In-memory scopes for tests and the rootless harness.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use super::{Scope, ScopeData, StateStore, StoreError, StoreResult, Txn};

type Key = (String, String);

#[derive(Default)]
struct Inner {
    data: BTreeMap<Key, ScopeData>,
    locked: BTreeSet<Key>,
}

#[derive(Default)]
pub struct MemoryStore {
    inner: Arc<(Mutex<Inner>, Condvar)>,
}

struct MemoryTxn {
    key: Key,
    data: ScopeData,
    inner: Arc<(Mutex<Inner>, Condvar)>,
}

fn poisoned() -> io::Error {
    io::Error::other("memory store poisoned")
}

impl Txn for MemoryTxn {
    fn data(&mut self) -> &mut ScopeData {
        &mut self.data
    }

    fn commit(mut self: Box<Self>) -> StoreResult<()> {
        let data = std::mem::take(&mut self.data);
        let mut inner = self.inner.0.lock().map_err(|_| poisoned())?;
        inner.data.insert(self.key.clone(), data);
        Ok(())
    }
}

impl Drop for MemoryTxn {
    fn drop(&mut self) {
        if let Ok(mut inner) = self.inner.0.lock() {
            inner.locked.remove(&self.key);
        }
        self.inner.1.notify_all();
    }
}

impl StateStore for MemoryStore {
    fn begin_by(&self, scope: &Scope, deadline: Option<Instant>) -> StoreResult<Box<dyn Txn>> {
        let key = (scope.network.clone(), scope.plugin.clone());
        let (lock, cond) = &*self.inner;
        let mut inner = lock.lock().map_err(|_| poisoned())?;
        while inner.locked.contains(&key) {
            inner = match deadline {
                None => cond.wait(inner).map_err(|_| poisoned())?,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(StoreError::Busy(format!(
                            "{}/{}: still locked by another call at the deadline",
                            scope.network, scope.plugin
                        )));
                    }
                    cond.wait_timeout(inner, left).map_err(|_| poisoned())?.0
                }
            };
        }
        inner.locked.insert(key.clone());
        let data = inner.data.get(&key).cloned().unwrap_or_default();
        Ok(Box::new(MemoryTxn {
            key,
            data,
            inner: self.inner.clone(),
        }))
    }

    fn scopes(&self, network: &str) -> StoreResult<Vec<String>> {
        let inner = self.inner.0.lock().map_err(|_| poisoned())?;
        Ok(inner
            .data
            .keys()
            .filter(|(n, _)| n == network)
            .map(|(_, p)| p.clone())
            .collect())
    }

    fn networks(&self) -> StoreResult<Vec<String>> {
        let inner = self.inner.0.lock().map_err(|_| poisoned())?;
        let mut v: Vec<String> = inner.data.keys().map(|(n, _)| n.clone()).collect();
        v.dedup();
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn memory_store_follows_the_contract() {
        super::super::contract::exercise(&super::MemoryStore::default());
    }
}
