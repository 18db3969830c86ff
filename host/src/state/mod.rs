//! The host's own record of each attachment: network, container id, ifname,
//! netns, arguments and the final ADD result.
//!
//! libcni keeps such a cache on the runtime side, but not every runtime
//! passes `prevResult` on DEL, and GC must find what a stale attachment left
//! behind. Records are keyed by (network, container id, ifname), so a late
//! DEL for an old container id can never read — or remove — the record of a
//! newer container on the same interface.

mod disk;
#[cfg(any(test, feature = "fake"))]
mod memory;

use std::io;

use serde::{Deserialize, Serialize};

pub use disk::DiskRecords;
#[cfg(any(test, feature = "fake"))]
pub use memory::MemoryRecords;

pub const RECORD_KIND: &str = "wasmCniAttachmentV1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttachmentRecord {
    pub kind: String,
    pub network: String,
    pub container_id: String,
    pub ifname: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cni_args: Vec<(String, String)>,
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub runtime_config: serde_json::Map<String, serde_json::Value>,
    /// The final ADD result in CNI 1.1 form.
    pub result: serde_json::Value,
    /// Links the attachment's plugins created in the node namespace: the
    /// only node links its DEL may delete, and what GC removes if stale.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_links: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub container_links: Vec<String>,
    /// Milliseconds since the Unix epoch.
    pub created_at: u64,
}

/// Where attachment records live.
pub trait AttachmentRecords {
    fn save(&self, record: &AttachmentRecord) -> io::Result<()>;
    fn load(
        &self,
        network: &str,
        container_id: &str,
        ifname: &str,
    ) -> io::Result<Option<AttachmentRecord>>;
    /// Remove a record; removing a missing one is not an error.
    fn remove(&self, network: &str, container_id: &str, ifname: &str) -> io::Result<()>;
    fn list(&self, network: &str) -> io::Result<Vec<AttachmentRecord>>;
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
pub(crate) mod contract {
    //! The behaviour every backend must show, run against each of them.
    use super::*;

    pub fn record(cid: &str, ifname: &str) -> AttachmentRecord {
        AttachmentRecord {
            kind: RECORD_KIND.into(),
            network: "net1".into(),
            container_id: cid.into(),
            ifname: ifname.into(),
            netns: Some("/run/netns/x".into()),
            cni_args: vec![("K".into(), "V".into())],
            runtime_config: serde_json::Map::new(),
            result: serde_json::json!({"cniVersion": "1.1.0", "ips": []}),
            node_links: vec!["veth01234567".into()],
            container_links: Vec::new(),
            created_at: 1,
        }
    }

    pub fn exercise(store: &dyn AttachmentRecords) {
        assert_eq!(store.load("net1", "a", "eth0").unwrap(), None);
        store.save(&record("a", "eth0")).unwrap();
        store.save(&record("b", "eth0")).unwrap();
        store.save(&record("a", "eth1")).unwrap();
        assert_eq!(
            store.load("net1", "a", "eth0").unwrap(),
            Some(record("a", "eth0"))
        );
        // Keyed by container id: a different id never sees this record.
        assert_eq!(store.load("net1", "c", "eth0").unwrap(), None);
        assert_eq!(store.list("net1").unwrap().len(), 3);
        assert_eq!(store.list("other").unwrap().len(), 0);
        store.remove("net1", "a", "eth0").unwrap();
        store.remove("net1", "a", "eth0").unwrap();
        assert_eq!(store.load("net1", "a", "eth0").unwrap(), None);
        let mut left: Vec<_> = store
            .list("net1")
            .unwrap()
            .into_iter()
            .map(|r| (r.container_id, r.ifname))
            .collect();
        left.sort();
        assert_eq!(
            left,
            vec![("a".into(), "eth1".into()), ("b".into(), "eth0".into())]
        );
    }
}
