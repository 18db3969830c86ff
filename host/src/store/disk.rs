//! Scopes as files: `<root>/<network>/<plugin>.json`, locked with flock on
//! `<root>/<network>/<plugin>.lock`. The JSON is replaced atomically (temp
//! file, fsync, rename), so a crash at any point leaves the previous or the
//! next committed state, never a torn one.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use std::time::Instant;

use super::{lock_failed, Scope, ScopeData, StateStore, StoreResult, Txn};
use crate::fsutil::{lock_gated, write_atomic, Locked};

pub struct DiskStore {
    root: PathBuf,
}

impl DiskStore {
    pub fn new(root: &Path) -> Self {
        DiskStore {
            root: root.to_path_buf(),
        }
    }

    fn files(&self, scope: &Scope) -> (PathBuf, PathBuf) {
        let root = scope.data_dir.as_deref().unwrap_or(&self.root);
        let dir = root.join(&scope.network);
        (
            dir.join(format!("{}.json", scope.plugin)),
            dir.join(format!("{}.lock", scope.plugin)),
        )
    }
}

struct DiskTxn {
    path: PathBuf,
    data: ScopeData,
    // Held for the life of the transaction.
    _lock: Locked,
}

impl Txn for DiskTxn {
    fn data(&mut self) -> &mut ScopeData {
        &mut self.data
    }

    fn commit(self: Box<Self>) -> StoreResult<()> {
        let bytes = serde_json::to_vec(&self.data).map_err(io::Error::other)?;
        Ok(write_atomic(&self.path, &bytes)?)
    }
}

impl StateStore for DiskStore {
    fn ready(&self, _deadline: Option<Instant>) -> StoreResult<()> {
        Ok(crate::fsutil::probe_writable(&self.root)?)
    }

    fn begin_by(&self, scope: &Scope, deadline: Option<Instant>) -> StoreResult<Box<dyn Txn>> {
        let (path, lock_path) = self.files(scope);
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir)?;
        }
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&lock_path)?;
        let lock = lock_gated(lock, deadline).map_err(|e| lock_failed(scope, e))?;
        sweep_temp_files(&path);
        let data = match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: {e}", path.display()),
                )
            })?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => ScopeData::default(),
            Err(e) => return Err(e.into()),
        };
        Ok(Box::new(DiskTxn {
            path,
            data,
            _lock: lock,
        }))
    }

    fn scopes(&self, network: &str) -> StoreResult<Vec<String>> {
        Ok(list(&self.root.join(network), |name| {
            name.strip_suffix(".json").map(str::to_string)
        })?)
    }

    fn networks(&self) -> StoreResult<Vec<String>> {
        Ok(list(&self.root, |name| Some(name.to_string()))?)
    }
}

/// Remove temporary files a killed writer left next to `path`. Only the lock
/// holder writes, so under the lock any such file is an orphan.
fn sweep_temp_files(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return;
    };
    let prefix = format!(".{name}.");
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        let n = e.file_name();
        let n = n.to_string_lossy();
        if n.starts_with(&prefix) && n.ends_with(".tmp") {
            let _ = fs::remove_file(e.path());
        }
    }
}

fn list(dir: &Path, pick: impl Fn(&str) -> Option<String>) -> io::Result<Vec<String>> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out: Vec<String> = rd
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(&pick))
        .filter(|n| !n.starts_with('.'))
        .collect();
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    fn root(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("wasm-cni-store-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn disk_store_follows_the_contract() {
        let r = root("contract");
        super::super::contract::exercise(&DiskStore::new(&r));
        fs::remove_dir_all(&r).unwrap();
    }

    #[test]
    fn transactions_on_one_scope_are_serialised() {
        // Two threads each read-increment-write a counter 50 times; with
        // real exclusion the result is exactly 100.
        let r = root("excl");
        let store = Arc::new(DiskStore::new(&r));
        let scope = Scope {
            network: "n".into(),
            plugin: "p".into(),
            data_dir: None,
        };
        let barrier = Arc::new(Barrier::new(2));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let (store, scope, barrier) = (store.clone(), scope.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    for _ in 0..50 {
                        let mut t = store.begin(&scope).unwrap();
                        let n: u32 = t.data().values.get("n").map_or(0, |v| v.parse().unwrap());
                        t.data().values.insert("n".into(), (n + 1).to_string());
                        t.commit().unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(store.begin(&scope).unwrap().data().values["n"], "100");
        fs::remove_dir_all(&r).unwrap();
    }

    #[test]
    fn data_dir_overrides_the_root() {
        let r = root("datadir");
        let elsewhere = root("datadir-other");
        let store = DiskStore::new(&r);
        let scope = Scope {
            network: "n".into(),
            plugin: "p".into(),
            data_dir: Some(elsewhere.clone()),
        };
        let mut t = store.begin(&scope).unwrap();
        t.data().values.insert("k".into(), "v".into());
        t.commit().unwrap();
        assert!(elsewhere.join("n/p.json").is_file());
        assert!(!r.join("n/p.json").exists());
        let _ = fs::remove_dir_all(&r);
        fs::remove_dir_all(&elsewhere).unwrap();
    }

    #[test]
    fn a_killed_writers_temp_file_is_swept_under_the_lock() {
        let r = root("sweep");
        let store = DiskStore::new(&r);
        let scope = Scope {
            network: "n".into(),
            plugin: "p".into(),
            data_dir: None,
        };
        fs::create_dir_all(r.join("n")).unwrap();
        fs::write(r.join("n/.p.json.12345.tmp"), b"half").unwrap();
        fs::write(r.join("n/.other.json.1.tmp"), b"not ours").unwrap();
        drop(store.begin(&scope).unwrap());
        assert!(!r.join("n/.p.json.12345.tmp").exists());
        assert!(r.join("n/.other.json.1.tmp").exists());
        fs::remove_dir_all(&r).unwrap();
    }

    #[test]
    fn a_corrupt_scope_is_an_error_not_an_empty_pool() {
        let r = root("corrupt");
        let store = DiskStore::new(&r);
        let scope = Scope {
            network: "n".into(),
            plugin: "p".into(),
            data_dir: None,
        };
        fs::create_dir_all(r.join("n")).unwrap();
        fs::write(r.join("n/p.json"), b"{\"entries\":").unwrap();
        match store.begin(&scope).err() {
            Some(crate::store::StoreError::Io(e)) => {
                assert_eq!(e.kind(), io::ErrorKind::InvalidData)
            }
            other => panic!("a corrupt scope is not an I/O error: {other:?}"),
        }
        fs::remove_dir_all(&r).unwrap();
    }
}
