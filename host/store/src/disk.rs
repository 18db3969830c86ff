//! Scopes as files: `<root>/<network>/<plugin>.json`, locked with flock on
//! `<root>/<network>/<plugin>.lock`. The JSON is replaced atomically: the
//! new version is written into the previous one, kept beside it as
//! `.<plugin>.json.spare`, fsynced, and the two trade names in one rename
//! ([`write_exchange`]). A crash at any point leaves the previous or the
//! next committed state, never a torn one. Every reader holds the lock, so
//! none is still reading the spare when it is rewritten.
//!
//! Each commit writes a fresh random generation first in the file
//! (`{"gen":"…",…}`; readers without it ignore the key). A daemon keeps the
//! data it committed ([`ScopeCache`]), and its next transaction on that
//! scope takes it instead of parsing the file again when the file still
//! starts with that generation and has the length and mtime it had: any
//! other writer (another process, an operator's command, an older
//! wasm-cni) writes another generation or none. With host-local's history
//! of released addresses a scope holds thousands of entries, and parsing
//! them was nearly half of what the store cost a call.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use std::time::{Duration, Instant};

use super::{file, lock_failed, Scope, ScopeData, StateStore, StoreResult, Txn};
use wasm_cni_base::fsutil::{lock_gated, open_lock_file, random, write_exchange, Locked};

pub struct DiskStore {
    root: PathBuf,
    cache: Option<Arc<ScopeCache>>,
}

impl DiskStore {
    pub fn new(root: &Path) -> Self {
        DiskStore {
            root: root.to_path_buf(),
            cache: None,
        }
    }

    /// Keep committed scopes in `cache` for the next transaction (a
    /// long-lived process: the daemon).
    pub fn with_cache(mut self, cache: Arc<ScopeCache>) -> Self {
        self.cache = Some(cache);
        self
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

/// Scopes a process committed, parsed, by file. Bounded, since a request
/// names its `dataDir`: past [`CACHE_SCOPES`] scopes or [`CACHE_BYTES`] of
/// files it forgets one, and a file larger than that is never kept.
#[derive(Default)]
pub struct ScopeCache {
    // Held only to take or put one scope, never across I/O.
    scopes: Mutex<HashMap<PathBuf, Cached>>,
    /// When each scope's directory was last swept of orphaned temporary
    /// files ([`sweep_temp_files`]). Held only to look one up.
    swept: Mutex<HashMap<PathBuf, Instant>>,
}

/// How often a daemon sweeps a scope's directory. Orphans come only from a
/// writer killed mid-commit (a per-invocation call, which sweeps on its own
/// first transaction); they are never read, so a minute's delay costs
/// nothing, where a sweep on every transaction is a directory listing per
/// IPAM operation.
pub const SWEEP_EVERY: Duration = Duration::from_secs(60);

pub const CACHE_SCOPES: usize = 64;
pub const CACHE_BYTES: u64 = 16 << 20;

struct Cached {
    stamp: Stamp,
    data: ScopeData,
    /// Entries when its map was last built whole ([`compact`]).
    built: usize,
}

/// What identifies a committed file: its generation, length and mtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    gen: [u8; GEN_HEX],
    len: u64,
    mtime_ns: i128,
}

const GEN_HEX: usize = 32;
const HEAD: &[u8] = br#"{"gen":""#;

impl Stamp {
    /// The stamp of a file whose first bytes are `head`, if it has one.
    fn of(head: &[u8], meta: &fs::Metadata) -> Option<Stamp> {
        let rest = head.strip_prefix(HEAD)?;
        let gen: [u8; GEN_HEX] = rest.get(..GEN_HEX)?.try_into().ok()?;
        (rest.get(GEN_HEX) == Some(&b'"')).then_some(Stamp {
            gen,
            len: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        })
    }
}

impl ScopeCache {
    /// The scope's data if `stamp` is the file as it was committed; taken,
    /// so that a transaction that does not commit leaves nothing behind.
    /// A file without a stamp drops what was kept of it.
    fn take(&self, path: &Path, stamp: Option<&Stamp>) -> Option<(ScopeData, usize)> {
        let mut scopes = self.scopes.lock().unwrap_or_else(PoisonError::into_inner);
        let hit = scopes.get(path).is_some_and(|c| Some(&c.stamp) == stamp);
        // Stale or taken: either way it is of no further use.
        let cached = scopes.remove(path)?;
        hit.then_some((cached.data, cached.built))
    }

    fn put(&self, path: PathBuf, stamp: Stamp, data: ScopeData, built: usize) {
        if stamp.len > CACHE_BYTES {
            return;
        }
        let mut scopes = self.scopes.lock().unwrap_or_else(PoisonError::into_inner);
        scopes.remove(&path);
        let mut held: u64 = scopes.values().map(|c| c.stamp.len).sum();
        while scopes.len() >= CACHE_SCOPES || held + stamp.len > CACHE_BYTES {
            let Some(victim) = scopes.keys().next().cloned() else {
                break;
            };
            if let Some(c) = scopes.remove(&victim) {
                held -= c.stamp.len;
            }
        }
        scopes.insert(path, Cached { stamp, data, built });
    }

    /// Whether `path`'s directory is due a sweep at `now`; if so, it counts
    /// as swept from then.
    fn sweep_due(&self, path: &Path, now: Instant) -> bool {
        let mut swept = self.swept.lock().unwrap_or_else(PoisonError::into_inner);
        if swept
            .get(path)
            .is_some_and(|at| now.saturating_duration_since(*at) < SWEEP_EVERY)
        {
            return false;
        }
        // Paths are a node's scopes, few; a map of every one a long-lived
        // daemon ever saw is still bounded.
        if swept.len() >= 4 * CACHE_SCOPES {
            swept.retain(|_, at| now.saturating_duration_since(*at) < SWEEP_EVERY);
        }
        swept.insert(path.to_path_buf(), now);
        true
    }

    /// Scopes and file bytes held now.
    pub fn held(&self) -> (usize, u64) {
        let scopes = self.scopes.lock().unwrap_or_else(PoisonError::into_inner);
        (scopes.len(), scopes.values().map(|c| c.stamp.len).sum())
    }
}

struct DiskTxn {
    // Held for the life of the transaction. Declared first so that it is
    // dropped first: freeing a scope of thousands of entries is not work
    // other callers should wait for.
    _lock: Locked,
    path: PathBuf,
    data: ScopeData,
    built: usize,
    /// The file's length as read: what the data was parsed from, or what
    /// it was serialized to when it came from the cache.
    stored: u64,
    cache: Option<Arc<ScopeCache>>,
}

impl Txn for DiskTxn {
    fn data(&mut self) -> &mut ScopeData {
        &mut self.data
    }

    fn stored_bytes(&self) -> Option<u64> {
        Some(self.stored)
    }

    fn commit(self: Box<Self>) -> StoreResult<()> {
        let gen: String = random::<{ GEN_HEX / 2 }>()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let bytes = file::write(&gen, &self.data);
        write_exchange(&self.path, &spare_of(&self.path), &bytes)?;
        // Still under the lock: the file is the one just written.
        let DiskTxn {
            _lock,
            path,
            data,
            built,
            cache,
            ..
        } = *self;
        if let (Some(cache), Ok(meta)) = (cache, fs::metadata(&path)) {
            if let Some(stamp) = Stamp::of(&bytes, &meta) {
                cache.put(path, stamp, data, built);
            }
        }
        Ok(())
    }
}

/// Where a scope's previous version is kept to be written over next.
fn spare_of(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.spare"))
}

/// Entries below which a kept map is never rebuilt: its nodes are few.
const COMPACT_FROM: usize = 64;

/// Rebuild a kept scope's map of entries with full nodes once it has grown
/// by a quarter since it was last built whole; returns the count it was
/// last built at. A B-tree that grows at its end, as host-local's history
/// does (its never-used walk goes up the range), splits each full node at
/// its middle and leaves the left half as it is, so every node but the last
/// stays half full: about 80 bytes more per entry (349 against 268 for
/// host-local's), 0.3 MiB at its cap, held for the life of a daemon. A parsed file's map was built the
/// same way. The rebuild is linear and, by the quarter, amortized to a
/// constant per entry added.
fn compact(data: &mut ScopeData, built: usize) -> usize {
    let len = data.entries.len();
    if len < COMPACT_FROM || len <= built + built / 4 {
        return built.min(len);
    }
    // `append` into a map of one merges two sorted runs and fills each
    // node; `collect` would do the same after a sort, 1.5 KB more of the
    // engine nodes install.
    let mut rest = std::mem::take(&mut data.entries);
    if let Some((key, entry)) = rest.pop_first() {
        data.entries.insert(key, entry);
        data.entries.append(&mut rest);
    }
    len
}

/// A scope as read: its data, the count its map was last built whole at,
/// and the file's length.
type ReadScope = (ScopeData, usize, u64);

/// Read a scope's file: from the cache when it is the file the cache saw.
fn read_scope(path: &Path, cache: Option<&ScopeCache>) -> StoreResult<ReadScope> {
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((ScopeData::default(), 0, 0)),
        Err(e) => return Err(e.into()),
    };
    let meta = file.metadata()?;
    let head = HEAD.len() + GEN_HEX + 1;
    // Room for the head up front: into an empty vector `read_to_end`
    // probes 32 bytes first, two reads for the head.
    let mut bytes = Vec::with_capacity(head);
    if let Some(cache) = cache {
        // The head alone first: a hit reads no more of the file.
        (&mut file).take(head as u64).read_to_end(&mut bytes)?;
        if let Some((mut data, built)) = cache.take(path, Stamp::of(&bytes, &meta).as_ref()) {
            // Rebuilt when read back, not when kept: a per-invocation
            // process keeps what it commits too, but reads it back only if
            // one call opens the same scope twice.
            let built = compact(&mut data, built);
            return Ok((data, built, meta.len()));
        }
    }
    bytes.reserve(usize::try_from(meta.len()).unwrap_or(0));
    file.read_to_end(&mut bytes)?;
    let data = file::read(&bytes).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {e}", path.display()),
        )
    })?;
    Ok((data, 0, meta.len()))
}

impl StateStore for DiskStore {
    fn ready(&self, _deadline: Option<Instant>) -> StoreResult<()> {
        Ok(wasm_cni_base::fsutil::probe_writable(&self.root)?)
    }

    fn begin_by(&self, scope: &Scope, deadline: Option<Instant>) -> StoreResult<Box<dyn Txn>> {
        let (path, lock_path) = self.files(scope);
        let lock = open_lock_file(&lock_path)?;
        let lock = lock_gated(lock, deadline).map_err(|e| lock_failed(scope, e))?;
        // A process of one call sweeps on its transaction; a daemon, which
        // keeps a cache, once a minute per scope.
        if self
            .cache
            .as_deref()
            .is_none_or(|c| c.sweep_due(&path, Instant::now()))
        {
            sweep_temp_files(&path);
        }
        let (data, built, stored) = read_scope(&path, self.cache.as_deref())?;
        Ok(Box::new(DiskTxn {
            _lock: lock,
            path,
            data,
            built,
            stored,
            cache: self.cache.clone(),
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
    use crate::{Entry, Owner};
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
        super::super::contract::exercise(
            &DiskStore::new(&r).with_cache(Arc::new(ScopeCache::default())),
        );
        fs::remove_dir_all(&r).unwrap();
    }

    fn scope(plugin: &str) -> Scope {
        Scope {
            network: "n".into(),
            plugin: plugin.into(),
            data_dir: None,
        }
    }

    fn put(store: &DiskStore, scope: &Scope, k: &str, v: &str) {
        let mut t = store.begin(scope).unwrap();
        t.data().values.insert(k.into(), v.into());
        t.commit().unwrap();
    }

    fn get(store: &DiskStore, scope: &Scope, k: &str) -> Option<String> {
        store.begin(scope).unwrap().data().values.get(k).cloned()
    }

    // What the cache trusts is the file: a generation, a length and an
    // mtime. Whoever else writes the file (another process, an operator's
    // command, an older wasm-cni without generations, a hand edit) must be
    // read from the file, and a transaction that does not commit must not
    // leave its changes for the next one.
    #[test]
    fn the_scope_cache_serves_only_the_file_it_committed() {
        let r = root("cache");
        let cache = Arc::new(ScopeCache::default());
        let daemon = DiskStore::new(&r).with_cache(cache.clone());
        let other = DiskStore::new(&r);
        let s = scope("p");
        let file = r.join("n/p.json");

        put(&daemon, &s, "k", "a");
        assert_eq!(cache.held().0, 1);
        let written = fs::read(&file).unwrap();
        assert!(written.starts_with(br#"{"gen":""#), "{written:?}");
        // A reader without generations (an older binary) still reads it.
        let plain: ScopeData = serde_json::from_slice(&written).unwrap();
        assert_eq!(plain.values["k"], "a");

        // Taken from the cache: the entry is gone while the call holds it,
        // and a call that changes the data and does not commit takes its
        // changes with it.
        {
            let mut t = daemon.begin(&s).unwrap();
            assert_eq!(t.data().values["k"], "a");
            assert_eq!(cache.held(), (0, 0));
            t.data().values.insert("k".into(), "uncommitted".into());
        }
        assert_eq!(get(&daemon, &s, "k").as_deref(), Some("a"));

        // Another process commits: its generation is not ours.
        put(&daemon, &s, "k", "b");
        put(&other, &s, "k", "c");
        assert_eq!(get(&daemon, &s, "k").as_deref(), Some("c"));

        // An older wasm-cni writes no generation at all.
        put(&daemon, &s, "k", "d");
        fs::write(&file, br#"{"entries":{},"values":{"k":"e"}}"#).unwrap();
        assert_eq!(get(&daemon, &s, "k").as_deref(), Some("e"));
        assert_eq!(cache.held().0, 0, "what was kept of it is dropped");

        // A hand edit that keeps the generation and the length: the mtime
        // differs (set apart here, since file times can be coarser than two
        // writes).
        put(&daemon, &s, "k", "f");
        let bytes = fs::read(&file).unwrap();
        let mtime = fs::metadata(&file).unwrap().modified().unwrap();
        let edited = String::from_utf8(bytes)
            .unwrap()
            .replace(r#""k":"f""#, r#""k":"g""#);
        fs::write(&file, edited).unwrap();
        File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_modified(mtime + std::time::Duration::from_secs(1))
            .unwrap();
        assert_eq!(get(&daemon, &s, "k").as_deref(), Some("g"));

        // Garbage in place of a cached scope is an error, not the cache.
        put(&daemon, &s, "k", "h");
        fs::write(&file, b"{\"gen\":").unwrap();
        assert!(daemon.begin(&s).is_err());
        fs::remove_dir_all(&r).unwrap();
    }

    // A request names its dataDir, so a peer can make the daemon commit to
    // as many scopes as it likes, and a scope may hold up to the store's
    // quota: the cache must stay within its bounds whatever it is fed.
    #[test]
    fn the_scope_cache_is_bounded_in_scopes_and_bytes() {
        let r = root("cache-bound");
        let cache = Arc::new(ScopeCache::default());
        let daemon = DiskStore::new(&r).with_cache(cache.clone());
        for i in 0..CACHE_SCOPES + 10 {
            put(&daemon, &scope(&format!("p{i}")), "k", "v");
        }
        assert_eq!(cache.held().0, CACHE_SCOPES);
        let big = "x".repeat(usize::try_from(CACHE_BYTES).unwrap() / 3);
        for i in 0..4 {
            put(&daemon, &scope(&format!("big{i}")), "k", &big);
        }
        let (n, bytes) = cache.held();
        assert!(bytes <= CACHE_BYTES, "{n} scopes, {bytes} bytes");
        // Larger than the whole cache: never kept, still committed.
        let huge = "y".repeat(usize::try_from(CACHE_BYTES).unwrap() + 1);
        let before = cache.held();
        put(&daemon, &scope("huge"), "k", &huge);
        assert!(cache.held().1 <= before.1);
        assert_eq!(
            get(&daemon, &scope("huge"), "k").map(|v| v.len()),
            Some(huge.len())
        );
        // Every scope still reads back, from the cache or from its file.
        for i in 0..CACHE_SCOPES + 10 {
            assert_eq!(
                get(&daemon, &scope(&format!("p{i}")), "k").as_deref(),
                Some("v")
            );
        }
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

    // A scope's previous version stays beside it to be written over: it is
    // neither a scope of the network nor a killed writer's file to sweep,
    // and a scope read back is the last one committed, in either process.
    #[test]
    fn the_spare_version_is_kept_but_never_listed_or_read() {
        let r = root("spare");
        let daemon = DiskStore::new(&r).with_cache(Arc::new(ScopeCache::default()));
        let other = DiskStore::new(&r);
        let s = scope("p");
        put(&daemon, &s, "k", "1");
        put(&other, &s, "k", "2");
        put(&daemon, &s, "k", "3");
        assert!(r.join("n/.p.json.spare").is_file());
        assert_eq!(other.scopes("n").unwrap(), vec!["p".to_string()]);
        assert_eq!(get(&other, &s, "k").as_deref(), Some("3"));
        assert_eq!(get(&daemon, &s, "k").as_deref(), Some("3"));
        assert!(r.join("n/.p.json.spare").is_file(), "not swept");
        fs::remove_dir_all(&r).unwrap();
    }

    #[test]
    fn a_daemon_sweeps_a_scope_once_a_minute() {
        let r = root("sweep-daemon");
        let cache = Arc::new(ScopeCache::default());
        let daemon = DiskStore::new(&r).with_cache(cache.clone());
        let scope = Scope {
            network: "n".into(),
            plugin: "p".into(),
            data_dir: None,
        };
        let orphan = r.join("n/.p.json.999.tmp");
        fs::create_dir_all(r.join("n")).unwrap();
        fs::write(&orphan, b"half").unwrap();
        drop(daemon.begin(&scope).unwrap());
        assert!(!orphan.exists(), "the first transaction sweeps");
        fs::write(&orphan, b"half").unwrap();
        drop(daemon.begin(&scope).unwrap());
        assert!(orphan.exists(), "the next ones within the minute do not");
        // A process of one call (no cache) sweeps every time.
        drop(DiskStore::new(&r).begin(&scope).unwrap());
        assert!(!orphan.exists());
        // A minute on, the daemon is due again; another scope never waits
        // for this one's minute.
        let path = r.join("n/p.json");
        let later = Instant::now() + SWEEP_EVERY;
        assert!(cache.sweep_due(&path, later));
        assert!(!cache.sweep_due(&path, later));
        assert!(cache.sweep_due(&r.join("n/q.json"), Instant::now()));
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
            Some(crate::StoreError::Io(e)) => {
                assert_eq!(e.kind(), io::ErrorKind::InvalidData)
            }
            other => panic!("a corrupt scope is not an I/O error: {other:?}"),
        }
        fs::remove_dir_all(&r).unwrap();
    }

    #[test]
    fn a_kept_scope_is_rebuilt_when_read_back_and_a_parsed_one_is_not() {
        let r = root("rebuilt");
        let cache = Arc::new(ScopeCache::default());
        let daemon = DiskStore::new(&r).with_cache(cache.clone());
        let s = scope("p");
        let mut t = daemon.begin(&s).unwrap();
        for i in 0..100u32 {
            t.data().entries.insert(
                format!("10.0.0.{i}"),
                Entry {
                    owner: Owner {
                        container_id: format!("c{i}"),
                        ifname: "eth0".into(),
                    },
                    allocated_at: 1,
                    released_at: None,
                    node: None,
                },
            );
        }
        t.commit().unwrap();
        let (path, _) = daemon.files(&s);
        // Kept as committed, not rebuilt: a per-invocation process keeps
        // what it commits too, and would pay for a rebuild it never uses.
        assert_eq!(
            cache.scopes.lock().unwrap().get(&path).map(|c| c.built),
            Some(0)
        );
        // Rebuilt as the next call takes it back.
        let (data, built, _) = read_scope(&path, Some(&cache)).unwrap();
        assert_eq!((data.entries.len(), built), (100, 100));
        // Read from the file (a per-invocation process): never rebuilt.
        let (data, built, _) = read_scope(&path, None).unwrap();
        assert_eq!((data.entries.len(), built), (100, 0));
        let _ = fs::remove_dir_all(&r);
    }

    #[test]
    fn a_transaction_knows_its_files_length_parsed_or_kept() {
        let r = root("stored");
        let cache = Arc::new(ScopeCache::default());
        let daemon = DiskStore::new(&r).with_cache(cache.clone());
        let s = scope("p");
        let mut t = daemon.begin(&s).unwrap();
        assert_eq!(t.stored_bytes(), Some(0), "no file yet");
        t.data().values.insert("k".into(), "v".repeat(1000));
        t.commit().unwrap();
        let (path, _) = daemon.files(&s);
        let len = fs::metadata(&path).unwrap().len();
        assert!(len > 1000, "{len}");
        // Taken back from what the daemon kept...
        assert_eq!(cache.held().0, 1);
        assert_eq!(daemon.begin(&s).unwrap().stored_bytes(), Some(len));
        assert_eq!(cache.held().0, 0);
        // ...and parsed by another process: the same length.
        let other = DiskStore::new(&r);
        assert_eq!(other.begin(&s).unwrap().stored_bytes(), Some(len));
        let _ = fs::remove_dir_all(&r);
    }

    #[test]
    fn a_kept_map_is_rebuilt_whole_past_each_quarter_and_keeps_its_entries() {
        let entry = |i: u32| Entry {
            owner: Owner {
                container_id: format!("c{i}"),
                ifname: "eth0".into(),
            },
            allocated_at: u64::from(i),
            released_at: i.is_multiple_of(2).then_some(u64::from(i) + 1),
            node: None,
        };
        let mut d = ScopeData::default();
        let mut built = 0;
        let mut rebuilt_at = Vec::new();
        for i in 0..400u32 {
            d.entries
                .insert(format!("10.0.{}.{}", i / 256, i % 256), entry(i));
            let before = d.clone();
            let now = compact(&mut d, built);
            if now != built {
                rebuilt_at.push(d.entries.len());
            }
            built = now;
            assert_eq!(d, before, "a rebuild changed the entries at {i}");
        }
        // Never below the floor, then each time a quarter past the last.
        assert_eq!(rebuilt_at, [64, 81, 102, 128, 161, 202, 253, 317, 397]);
        // A map that shrank is measured from its new size.
        let keys: Vec<String> = d.entries.keys().take(300).cloned().collect();
        for k in keys {
            d.entries.remove(&k);
        }
        assert_eq!(compact(&mut d, built), 100);
        d.entries.insert("10.0.9.9".into(), entry(9));
        assert_eq!(compact(&mut d, 100), 100);
    }
}
