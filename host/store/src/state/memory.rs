//! In-memory records for tests and the rootless harness.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use super::{AttachmentRecord, AttachmentRecords, Lock};

type Key = (String, String, String);

#[derive(Default)]
pub struct MemoryRecords {
    map: Mutex<BTreeMap<Key, AttachmentRecord>>,
    locks: Arc<(Mutex<BTreeSet<Key>>, Condvar)>,
}

/// A held attachment (or, with an empty key, state-wide) lock.
struct Held {
    key: Key,
    locks: Arc<(Mutex<BTreeSet<Key>>, Condvar)>,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Ok(mut held) = self.locks.0.lock() {
            held.remove(&self.key);
        }
        self.locks.1.notify_all();
    }
}

impl MemoryRecords {
    fn take(&self, key: Key, deadline: Option<Instant>, wait_forever: bool) -> io::Result<Lock> {
        let (lock, cond) = &*self.locks;
        let mut held = lock.lock().map_err(|_| poisoned())?;
        while held.contains(&key) {
            if wait_forever {
                held = cond.wait(held).map_err(|_| poisoned())?;
                continue;
            }
            let Some(d) = deadline else {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "held by another call",
                ));
            };
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "held by another call",
                ));
            }
            held = cond.wait_timeout(held, left).map_err(|_| poisoned())?.0;
        }
        held.insert(key.clone());
        Ok(Box::new(Held {
            key,
            locks: self.locks.clone(),
        }))
    }
}

fn poisoned() -> io::Error {
    io::Error::other("record map poisoned")
}

impl AttachmentRecords for MemoryRecords {
    fn save(&self, r: &AttachmentRecord) -> io::Result<()> {
        let key = (r.network.clone(), r.container_id.clone(), r.ifname.clone());
        self.map
            .lock()
            .map_err(|_| poisoned())?
            .insert(key, r.clone());
        Ok(())
    }

    fn load(&self, network: &str, cid: &str, ifname: &str) -> io::Result<Option<AttachmentRecord>> {
        let key = (network.to_string(), cid.to_string(), ifname.to_string());
        Ok(self.map.lock().map_err(|_| poisoned())?.get(&key).cloned())
    }

    fn remove(&self, network: &str, cid: &str, ifname: &str) -> io::Result<()> {
        let key = (network.to_string(), cid.to_string(), ifname.to_string());
        self.map.lock().map_err(|_| poisoned())?.remove(&key);
        Ok(())
    }

    fn list(&self, network: &str) -> io::Result<Vec<AttachmentRecord>> {
        Ok(self
            .map
            .lock()
            .map_err(|_| poisoned())?
            .values()
            .filter(|r| r.network == network)
            .cloned()
            .collect())
    }

    fn networks(&self) -> io::Result<Vec<String>> {
        let map = self.map.lock().map_err(|_| poisoned())?;
        let set: BTreeSet<String> = map.keys().map(|(n, _, _)| n.clone()).collect();
        Ok(set.into_iter().collect())
    }

    fn lock(
        &self,
        network: &str,
        cid: &str,
        ifname: &str,
        deadline: Option<Instant>,
    ) -> io::Result<Lock> {
        let key = (network.to_string(), cid.to_string(), ifname.to_string());
        self.take(key, deadline, false)
    }

    fn lock_all(&self) -> io::Result<Lock> {
        self.take(Default::default(), None, true)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn memory_records_follow_the_contract() {
        super::super::contract::exercise(&super::MemoryRecords::default());
    }
}
