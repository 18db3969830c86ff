//! Records as one JSON file each under `<stateDir>/networks/<network>/`,
//! named `<containerID>:<ifname>.json` (`:` is invalid in both, so the name
//! is unambiguous). Written atomically: a crash leaves the old record or the
//! new one, never half of one.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::{AttachmentRecord, AttachmentRecords};
use crate::fsutil::write_atomic;

pub struct DiskRecords {
    root: PathBuf,
}

impl DiskRecords {
    pub fn new(state_dir: &Path) -> Self {
        DiskRecords {
            root: state_dir.join("networks"),
        }
    }

    fn dir(&self, network: &str) -> PathBuf {
        self.root.join(network)
    }

    fn path(&self, network: &str, cid: &str, ifname: &str) -> PathBuf {
        self.dir(network).join(format!("{cid}:{ifname}.json"))
    }
}

impl AttachmentRecords for DiskRecords {
    fn save(&self, record: &AttachmentRecord) -> io::Result<()> {
        let dir = self.dir(&record.network);
        fs::create_dir_all(&dir)?;
        let bytes = serde_json::to_vec_pretty(record).map_err(io::Error::other)?;
        write_atomic(
            &self.path(&record.network, &record.container_id, &record.ifname),
            &bytes,
        )
    }

    fn load(&self, network: &str, cid: &str, ifname: &str) -> io::Result<Option<AttachmentRecord>> {
        match fs::read(self.path(network, cid, ifname)) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn remove(&self, network: &str, cid: &str, ifname: &str) -> io::Result<()> {
        match fs::remove_file(self.path(network, cid, ifname)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    fn list(&self, network: &str) -> io::Result<Vec<AttachmentRecord>> {
        let entries = match fs::read_dir(self.dir(network)) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for entry in entries {
            let path = entry?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            // An unreadable record is reported, not fatal: GC must still be
            // able to clean up everything else.
            match fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
            {
                Ok(r) => out.push(r),
                Err(e) => crate::log::warn(format_args!("skipping record {}: {e}", path.display())),
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_records_follow_the_contract() {
        let dir = std::env::temp_dir().join(format!("wasm-cni-records-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        super::super::contract::exercise(&DiskRecords::new(&dir));
        // A corrupt record is skipped by list and reported by load.
        fs::write(dir.join("networks/net1/z:eth0.json"), b"{not json").unwrap();
        assert_eq!(DiskRecords::new(&dir).list("net1").unwrap().len(), 2);
        assert!(DiskRecords::new(&dir).load("net1", "z", "eth0").is_err());
        fs::remove_dir_all(&dir).unwrap();
    }
}
