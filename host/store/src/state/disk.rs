//! Records as one JSON file each under `<stateDir>/networks/<network>/`,
//! named `<containerID>:<ifname>.json` (`:` is invalid in both, so the name
//! is unambiguous). Written atomically: a crash leaves the old record or the
//! new one, never half of one. Locks live beside them under
//! `<stateDir>/locks/`.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::{AttachmentRecord, AttachmentRecords, Lock};
use wasm_cni_base::fsutil::{in_dir, lock_gated, open_lock_file, write_atomic, Locked};

pub struct DiskRecords {
    root: PathBuf,
    /// Lock files, `<stateDir>/locks/<network>/<containerID>:<ifname>.lock`
    /// and `<stateDir>/locks/all.lock`, apart from the records themselves.
    locks: PathBuf,
}

impl DiskRecords {
    pub fn new(state_dir: &Path) -> Self {
        DiskRecords {
            root: state_dir.join("networks"),
            locks: state_dir.join("locks"),
        }
    }

    fn dir(&self, network: &str) -> PathBuf {
        self.root.join(network)
    }

    fn path(&self, network: &str, cid: &str, ifname: &str) -> PathBuf {
        self.dir(network).join(format!("{cid}:{ifname}.json"))
    }

    fn lock_path(&self, network: &str, cid: &str, ifname: &str) -> PathBuf {
        self.locks
            .join(network)
            .join(format!("{cid}:{ifname}.lock"))
    }
}

/// How long a call waits for the state directory's own lock.
const LOCK_ALL_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// An attachment's lock file, held; removed with the record, so that lock
/// files do not pile up for every container a node ever ran.
struct FileLock {
    _held: Locked,
}

/// Lock `path`, creating it. A holder may unlink the file (after its DEL):
/// a waiter that then gets the lock on the unlinked inode sees that the
/// path no longer names it, and starts over on the new file.
fn lock_file(path: &Path, deadline: Option<Instant>) -> io::Result<Lock> {
    loop {
        let file = open_lock_file(path)?;
        let held = match deadline {
            Some(d) => lock_gated(file, Some(d))?,
            None => lock_gated(file, Some(Instant::now())).map_err(|e| {
                if e.kind() == io::ErrorKind::TimedOut {
                    io::Error::new(io::ErrorKind::WouldBlock, "held by another call")
                } else {
                    e
                }
            })?,
        };
        let same = fs::metadata(path).is_ok_and(|now| held.identity() == (now.dev(), now.ino()));
        if same {
            return Ok(Box::new(FileLock { _held: held }));
        }
    }
}

impl AttachmentRecords for DiskRecords {
    fn save(&self, record: &AttachmentRecord) -> io::Result<()> {
        let bytes = serde_json::to_vec_pretty(record).map_err(io::Error::other)?;
        let path = self.path(&record.network, &record.container_id, &record.ifname);
        in_dir(&self.dir(&record.network), || write_atomic(&path, &bytes))
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
        for path in [
            self.path(network, cid, ifname),
            self.lock_path(network, cid, ifname),
        ] {
            match fs::remove_file(path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }

    fn networks(&self) -> io::Result<Vec<String>> {
        let entries = match fs::read_dir(&self.root) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out: Vec<String> = entries
            .filter_map(Result::ok)
            .filter(|e| e.path().is_dir())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        out.sort();
        Ok(out)
    }

    fn lock(
        &self,
        network: &str,
        cid: &str,
        ifname: &str,
        deadline: Option<Instant>,
    ) -> io::Result<Lock> {
        lock_file(&self.lock_path(network, cid, ifname), deadline)
    }

    fn sweep(&self, network: &str) {
        let Ok(entries) = fs::read_dir(self.dir(network)) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            // `.<containerID>:<ifname>.json.<pid>.<n>.tmp`, from write_atomic.
            let Some(rest) = name.strip_prefix('.').filter(|_| name.ends_with(".tmp")) else {
                continue;
            };
            let Some((att, _)) = rest.split_once(".json.") else {
                continue;
            };
            let Some((cid, ifname)) = att.rsplit_once(':') else {
                continue;
            };
            // Only while nobody works on the attachment: then no writer is
            // alive to finish the file.
            if let Ok(_held) = self.lock(network, cid, ifname, None) {
                let _ = fs::remove_file(e.path());
            }
        }
    }

    fn writable(&self, network: &str) -> io::Result<()> {
        wasm_cni_base::fsutil::probe_writable(&self.dir(network))
    }

    fn lock_all(&self) -> io::Result<Lock> {
        let path = self.locks.join("all.lock");
        let file = open_lock_file(&path)?;
        // Held briefly, and only by wasm-cni's own calls (it is root's
        // file): a holder for longer is a hung process, not worth waiting
        // for without end.
        let held = lock_gated(file, Some(Instant::now() + LOCK_ALL_WAIT));
        Ok(Box::new(FileLock { _held: held? }))
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
                Err(e) => wasm_cni_base::log::warn(format_args!(
                    "skipping record {}: {e}",
                    path.display()
                )),
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

    #[test]
    fn sweeping_removes_dead_writers_temporary_files_only() {
        let dir = std::env::temp_dir().join(format!("wasm-cni-rsweep-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let records = DiskRecords::new(&dir);
        fs::create_dir_all(dir.join("networks/n")).unwrap();
        let dead = dir.join("networks/n/.c1:eth0.json.4242.0.tmp");
        let busy = dir.join("networks/n/.c2:eth0.json.4242.1.tmp");
        let other = dir.join("networks/n/notes.txt");
        for f in [&dead, &busy, &other] {
            fs::write(f, b"x").unwrap();
        }
        let held = records.lock("n", "c2", "eth0", None).unwrap();
        records.sweep("n");
        assert!(!dead.exists());
        assert!(busy.exists() && other.exists());
        drop(held);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_lock_file_removed_by_its_holder_is_not_a_lock_for_the_next_waiter() {
        let dir = std::env::temp_dir().join(format!("wasm-cni-rlock-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let records = std::sync::Arc::new(DiskRecords::new(&dir));
        let held = records.lock("n", "c", "eth0", None).unwrap();
        let waiter = {
            let records = records.clone();
            std::thread::spawn(move || {
                let deadline = Instant::now() + std::time::Duration::from_secs(5);
                records.lock("n", "c", "eth0", Some(deadline)).map(drop)
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        // The holder's DEL removes record and lock file, then lets go.
        records.remove("n", "c", "eth0").unwrap();
        drop(held);
        waiter.join().unwrap().unwrap();
        // The waiter ended up holding a lock on a file that exists.
        assert!(dir.join("locks/n/c:eth0.lock").is_file());
        fs::remove_dir_all(&dir).unwrap();
    }
}
