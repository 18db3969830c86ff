//! The host's own record of each attachment: network, container id, ifname,
//! netns, arguments and the final ADD result.
//!
//! libcni keeps such a cache on the runtime side, but not every runtime
//! passes `prevResult` on DEL, and GC must find what a stale attachment left
//! behind. Records are keyed by (network, container id, ifname), so a late
//! DEL for an old container id can never read — or remove — the record of a
//! newer container on the same interface.

mod disk;
#[cfg(any(test, feature = "memory"))]
mod memory;

use std::io;
use std::time::Instant;

use serde::{Deserialize, Serialize};

pub use disk::DiskRecords;
#[cfg(any(test, feature = "memory"))]
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
    /// The daemon peer that made the attachment, when not root: the host
    /// never opens `netns` (a path that peer named) on its behalf.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_uid: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cni_args: Vec<(String, String)>,
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub runtime_config: serde_json::Map<String, serde_json::Value>,
    /// The final ADD result in CNI 1.1 form (`null` while pending).
    pub result: serde_json::Value,
    /// Links the attachment's plugins created in the node namespace: the
    /// only node links its DEL may delete, and what DEL and GC remove.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "links")]
    pub node_links: Vec<RecordedLink>,
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "links")]
    pub container_links: Vec<RecordedLink>,
    /// Settings the host itself changed on node links for this attachment
    /// (`route_localnet` for a hairpin rule), put back by its DEL or GC
    /// when no other attachment records the same one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_settings: Vec<NodeSetting>,
    /// Milliseconds since the Unix epoch.
    pub created_at: u64,
    /// Written when an ADD starts and updated as it creates links; cleared
    /// when it completes. A pending record whose attachment is not locked
    /// is what a killed ADD left: DEL and GC clean it up like any other.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pending: bool,
}

/// A per-interface sysctl of a node link the host changed for an
/// attachment: the link's ifindex when it was changed, the value before and
/// the value written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSetting {
    pub key: String,
    pub index: u32,
    pub old: String,
    pub value: String,
}

impl NodeSetting {
    /// The same setting of the same link.
    pub fn same(&self, other: &NodeSetting) -> bool {
        self.key == other.key && self.index == other.index
    }

    /// The interface a `net.ipv4.conf.<dev>.<setting>` key names.
    pub fn link_name(&self) -> Option<&str> {
        let rest = self.key.strip_prefix("net.ipv4.conf.")?;
        let (dev, _) = rest.rsplit_once('.')?;
        (!dev.is_empty()).then_some(dev)
    }
}

/// A link an attachment created, with the identity the host checks before
/// it touches a link of that name again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedLink {
    pub name: String,
    pub index: u32,
    pub kind: String,
}

mod links {
    //! Records written before links had an identity list bare names; such
    //! a name cannot be told from a later link of the same name, so it is
    //! dropped (with a warning) rather than trusted.
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::RecordedLink;

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Stored {
        Link(RecordedLink),
        Name(String),
    }

    pub fn serialize<S: Serializer>(links: &[RecordedLink], s: S) -> Result<S::Ok, S::Error> {
        links.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<RecordedLink>, D::Error> {
        let stored = Vec::<Stored>::deserialize(d)?;
        Ok(stored
            .into_iter()
            .filter_map(|s| match s {
                Stored::Link(l) => Some(l),
                Stored::Name(n) => {
                    wasm_cni_base::log::warn(format_args!(
                        "attachment record lists link {n:?} without its identity: not trusted"
                    ));
                    None
                }
            })
            .collect())
    }
}

/// A held lock: released when dropped.
pub type Lock = Box<dyn Send>;

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
    /// Networks with any record.
    fn networks(&self) -> io::Result<Vec<String>>;
    /// Serialise verbs on one attachment, across processes: wait for the
    /// attachment's lock until `deadline` (`TimedOut` past it; `None`: try
    /// once, `WouldBlock` if held).
    fn lock(
        &self,
        network: &str,
        container_id: &str,
        ifname: &str,
        deadline: Option<Instant>,
    ) -> io::Result<Lock>;
    /// Remove what writers killed mid-write left of this network's records
    /// (temporary files of attachments nobody is working on).
    fn sweep(&self, _network: &str) {}
    /// One lock for the whole state directory, held briefly: around an ADD
    /// writing its pending record, and while a failed ADD decides whether it
    /// may undo changes other attachments could depend on.
    fn lock_all(&self) -> io::Result<Lock>;
    /// Whether a record of `network` could be written now (STATUS: an ADD
    /// could not finish without one).
    fn writable(&self, _network: &str) -> io::Result<()> {
        Ok(())
    }
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
            peer_uid: None,
            cni_args: vec![("K".into(), "V".into())],
            runtime_config: serde_json::Map::new(),
            result: serde_json::json!({"cniVersion": "1.1.0", "ips": []}),
            node_links: vec![RecordedLink {
                name: "veth01234567".into(),
                index: 7,
                kind: "veth".into(),
            }],
            container_links: Vec::new(),
            node_settings: vec![NodeSetting {
                key: "net.ipv4.conf.cni0.route_localnet".into(),
                index: 4,
                old: "0".into(),
                value: "1".into(),
            }],
            created_at: 1,
            pending: false,
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
        assert_eq!(store.networks().unwrap(), vec!["net1".to_string()]);
        // One verb at a time per attachment; others are not held up.
        let held = store.lock("net1", "a", "eth1", None).unwrap();
        let again = store.lock("net1", "a", "eth1", None).err().unwrap();
        assert_eq!(again.kind(), io::ErrorKind::WouldBlock);
        let soon = Instant::now() + std::time::Duration::from_millis(30);
        let timed = store.lock("net1", "a", "eth1", Some(soon)).err().unwrap();
        assert_eq!(timed.kind(), io::ErrorKind::TimedOut);
        let other = store.lock("net1", "b", "eth0", None).unwrap();
        drop(held);
        drop(other);
        drop(store.lock("net1", "a", "eth1", None).unwrap());
        drop(store.lock_all().unwrap());
    }

    #[test]
    fn legacy_bare_link_names_are_dropped_not_trusted() {
        let mut v = serde_json::to_value(record("a", "eth0")).unwrap();
        v["nodeLinks"] =
            serde_json::json!(["veth0", {"name": "veth1", "index": 3, "kind": "veth"}]);
        let r: AttachmentRecord = serde_json::from_value(v).unwrap();
        assert_eq!(r.node_links.len(), 1);
        assert_eq!(r.node_links[0].name, "veth1");
    }

    #[test]
    fn a_node_setting_names_its_link() {
        let r = record("a", "eth0");
        assert_eq!(r.node_settings[0].link_name(), Some("cni0"));
        let odd = NodeSetting {
            key: "net.ipv4.conf..route_localnet".into(),
            ..r.node_settings[0].clone()
        };
        assert_eq!(odd.link_name(), None);
        // Records written before node settings existed still read.
        let mut v = serde_json::to_value(&r).unwrap();
        v.as_object_mut().unwrap().remove("nodeSettings");
        let old: AttachmentRecord = serde_json::from_value(v).unwrap();
        assert!(old.node_settings.is_empty());
    }
}
