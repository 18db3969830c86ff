//! In-memory records for tests and the rootless harness.

use std::collections::BTreeMap;
use std::io;
use std::sync::Mutex;

use super::{AttachmentRecord, AttachmentRecords};

#[derive(Default)]
pub struct MemoryRecords {
    map: Mutex<BTreeMap<(String, String, String), AttachmentRecord>>,
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
}

#[cfg(test)]
mod tests {
    #[test]
    fn memory_records_follow_the_contract() {
        super::super::contract::exercise(&super::MemoryRecords::default());
    }
}
