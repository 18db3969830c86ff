//! Operator tooling over the state store, no wasm involved:
//!
//! * [`list`]: allocations per network with owner and age, and released
//!   addresses with what is left of their quarantine (`wasm-cni ipam ls`);
//! * [`import_host_local`]: take over the reference host-local's on-disk
//!   allocations (`<dataDir>/<network>/<ip>` files) so a node can switch
//!   without losing them (`wasm-cni ipam import-host-local`).
//!
//! Both work inside the store's own transactions, so they are safe next to
//! running plugins.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use serde::Serialize;

use super::{valid_key, Entry, Owner, Scope, StateStore, StoreError, StoreResult};
use wasm_cni_base::text::{shown, Shown};
use wasm_cni_protocol::env::valid_name;

/// The scope plugin the import writes to.
pub const HOST_LOCAL: &str = "host-local";
/// Store value host-local keeps its effective `reuseIPWait` in (ms).
pub const REUSE_WAIT_VALUE: &str = "reuseIPWaitMs";
/// Store value an IPAM plugin may keep its pool's size in: how many
/// addresses its configured ranges hold, in decimal. The operator views
/// read what the plugin stored rather than re-reading its config, so they
/// know no plugin's ranges; a value that is not a number is no size.
pub const POOL_SIZE_VALUE: &str = "poolSize";
/// Prefix of the reference's per-range-set cursor file (and store value).
const LAST_RESERVED: &str = "last_reserved_ip.";

/// What an entry is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum State {
    /// Held by its owner.
    Allocated,
    /// Released, not reusable until `quarantine_left_ms` has passed.
    Quarantined,
    /// Released and reusable.
    Free,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryView {
    pub key: String,
    pub container_id: String,
    pub ifname: String,
    pub state: State,
    pub allocated_at: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub released_at: Option<u64>,
    /// Since allocation (allocated) or release (otherwise).
    pub age_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quarantine_left_ms: Option<u64>,
    /// The node that allocated it (a cluster store).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScopeView {
    pub network: String,
    pub plugin: String,
    /// The wait the plugin last reported; without one nothing is
    /// quarantined.
    #[serde(rename = "reuseIPWaitMs", skip_serializing_if = "Option::is_none")]
    pub reuse_wait_ms: Option<u64>,
    /// The pool's size as the plugin last stored it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool_size: Option<u128>,
    pub entries: Vec<EntryView>,
}

impl ScopeView {
    pub fn count(&self, state: State) -> usize {
        self.entries.iter().filter(|e| e.state == state).count()
    }
}

fn view(key: &str, e: &Entry, wait: Option<u64>, now: u64) -> EntryView {
    let (state, age_ms, left) = match e.released_at {
        None => (State::Allocated, now.saturating_sub(e.allocated_at), None),
        Some(r) => {
            let left = wait.map_or(0, |w| r.saturating_add(w).saturating_sub(now));
            if left > 0 {
                (State::Quarantined, now.saturating_sub(r), Some(left))
            } else {
                (State::Free, now.saturating_sub(r), None)
            }
        }
    };
    EntryView {
        key: key.to_string(),
        container_id: e.owner.container_id.clone(),
        ifname: e.owner.ifname.clone(),
        state,
        allocated_at: e.allocated_at,
        released_at: e.released_at,
        age_ms,
        quarantine_left_ms: left,
        node: e.node.clone(),
    }
}

/// Every scope with entries, of one network or all, as of `now` (ms).
pub fn list(
    store: &dyn StateStore,
    network: Option<&str>,
    now: u64,
) -> StoreResult<Vec<ScopeView>> {
    list_by(store, network, now, None)
}

/// [`list`], skipping any scope another call holds past `deadline`.
pub fn list_by(
    store: &dyn StateStore,
    network: Option<&str>,
    now: u64,
    deadline: Option<std::time::Instant>,
) -> StoreResult<Vec<ScopeView>> {
    let networks = match network {
        Some(n) => vec![n.to_string()],
        None => store.networks()?,
    };
    let mut out = Vec::new();
    for network in networks {
        for plugin in store.scopes(&network)? {
            let scope = Scope {
                network: network.clone(),
                plugin: plugin.clone(),
                data_dir: None,
            };
            // Read under the scope's lock for a consistent snapshot; never
            // committed.
            let mut txn = match store.begin_by(&scope, deadline) {
                Ok(t) => t,
                Err(StoreError::Busy(_)) => continue,
                Err(e) => return Err(e),
            };
            let data = txn.data();
            if data.entries.is_empty() {
                continue;
            }
            let wait = data
                .values
                .get(REUSE_WAIT_VALUE)
                .and_then(|v| v.parse::<u64>().ok());
            let pool_size = data
                .values
                .get(POOL_SIZE_VALUE)
                .and_then(|v| v.parse::<u128>().ok());
            let mut entries: Vec<EntryView> = data
                .entries
                .iter()
                .map(|(k, e)| view(k, e, wait, now))
                .collect();
            entries.sort_by(|a, b| sort_key(&a.key).cmp(&sort_key(&b.key)));
            out.push(ScopeView {
                network: network.clone(),
                plugin,
                reuse_wait_ms: wait,
                pool_size,
                entries,
            });
        }
    }
    Ok(out)
}

/// Addresses sort numerically, anything else after them by text.
fn sort_key(key: &str) -> (u8, Option<IpAddr>, &str) {
    match key.parse::<IpAddr>() {
        Ok(ip) => (0, Some(ip), key),
        Err(_) => (1, None, key),
    }
}

/// `1h2m`, `3m4s`, `5.2s`, `250ms`.
pub fn human(ms: u64) -> String {
    let s = ms / 1000;
    if ms < 1000 {
        format!("{ms}ms")
    } else if s < 60 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else if s < 3600 {
        format!("{}m{}s", s / 60, s % 60)
    } else if s < 86_400 {
        format!("{}h{}m", s / 3600, (s % 3600) / 60)
    } else {
        format!("{}d{}h", s / 86_400, (s % 86_400) / 3600)
    }
}

/// Table text for `ipam ls`; released entries past quarantine only with
/// `all`.
pub fn render(views: &[ScopeView], all: bool) -> String {
    let mut rows = vec![[
        "NETWORK".to_string(),
        "PLUGIN".into(),
        "ADDRESS".into(),
        "STATE".into(),
        "OWNER".into(),
        "AGE".into(),
    ]];
    for v in views {
        for e in &v.entries {
            let age = match e.state {
                State::Allocated => human(e.age_ms),
                State::Quarantined => format!(
                    "released {} ago, {} left",
                    human(e.age_ms),
                    human(e.quarantine_left_ms.unwrap_or(0))
                ),
                State::Free if all => format!("released {} ago", human(e.age_ms)),
                State::Free => continue,
            };
            let state = match e.state {
                State::Allocated => "allocated",
                State::Quarantined => "quarantined",
                State::Free => "free",
            };
            // Keys and owners are what plugins and runtimes wrote.
            rows.push([
                shown(Shown(&v.network)),
                shown(Shown(&v.plugin)),
                shown(Shown(&e.key)),
                state.into(),
                shown(format_args!("{}/{}", e.container_id, e.ifname)),
                age,
            ]);
        }
    }
    let mut widths = [0usize; 6];
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = String::new();
    for r in &rows {
        let cells: Vec<String> = r
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    for v in views {
        let wait = v.reuse_wait_ms.map_or_else(|| "unknown".to_string(), human);
        out.push_str(&format!(
            "# {} {}: {} allocated, {} quarantined (reuseIPWait {wait}), {} free in history\n",
            Shown(&v.network),
            Shown(&v.plugin),
            v.count(State::Allocated),
            v.count(State::Quarantined),
            v.count(State::Free),
        ));
    }
    out
}

/// What one network's import did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportReport {
    pub network: String,
    /// Addresses now allocated in the store from the reference files.
    pub imported: Vec<String>,
    /// Already in the store for the same owner (held, or released since).
    pub unchanged: Vec<String>,
    /// Cursor values taken over (`last_reserved_ip.N`).
    pub cursors: Vec<String>,
    /// Files that are not allocations, with why.
    pub skipped: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("network {network}: {0} already allocated to another owner in the store; nothing imported for this network", conflicts.join(", "))]
    Conflict {
        network: String,
        conflicts: Vec<String>,
    },
    #[error("{0}")]
    Invalid(String),
}

/// Move every scope of `from` (this node's local store) into `to` (a
/// cluster store): live and quarantined entries it does not hold yet, and
/// the values it has none of. A key `to` holds live for another owner is a
/// conflict, and nothing of that scope is written. Running it again changes
/// nothing: what was moved is there for the same owner.
pub fn import_store(
    from: &dyn StateStore,
    to: &dyn StateStore,
    network: Option<&str>,
) -> Result<Vec<ImportReport>, ImportError> {
    let store_err = |e: StoreError| ImportError::Invalid(format!("store: {e}"));
    let networks = match network {
        Some(n) => vec![n.to_string()],
        None => from.networks().map_err(store_err)?,
    };
    let mut reports = Vec::new();
    for network in networks {
        for plugin in from.scopes(&network).map_err(store_err)? {
            let scope = Scope {
                network: network.clone(),
                plugin: plugin.clone(),
                data_dir: None,
            };
            let mut source = from.begin(&scope).map_err(store_err)?;
            let mut txn = to.begin(&scope).map_err(store_err)?;
            let mut report = ImportReport {
                network: format!("{network}/{plugin}"),
                imported: Vec::new(),
                unchanged: Vec::new(),
                cursors: Vec::new(),
                skipped: Vec::new(),
            };
            let theirs = txn.data();
            let mut conflicts = Vec::new();
            for (key, e) in &source.data().entries {
                match theirs.entries.get(key) {
                    Some(t) if t.owner == e.owner => report.unchanged.push(key.clone()),
                    Some(t) if t.is_live() => {
                        if e.is_live() {
                            conflicts.push(format!(
                                "{key} (cluster: {}/{}, here: {}/{})",
                                t.owner.container_id,
                                t.owner.ifname,
                                e.owner.container_id,
                                e.owner.ifname
                            ));
                        } else {
                            report
                                .skipped
                                .push(format!("{key}: released here, held there"));
                        }
                    }
                    _ => {
                        theirs.entries.insert(key.clone(), e.clone());
                        report.imported.push(key.clone());
                    }
                }
            }
            if !conflicts.is_empty() {
                return Err(ImportError::Conflict {
                    network: report.network,
                    conflicts,
                });
            }
            for (name, v) in &source.data().values {
                if !theirs.values.contains_key(name) {
                    theirs.values.insert(name.clone(), v.clone());
                    report.cursors.push(name.clone());
                }
            }
            txn.commit().map_err(store_err)?;
            reports.push(report);
        }
    }
    Ok(reports)
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> ImportError + '_ {
    move |source| ImportError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Import `<data_dir>/<network>/` (every network, or just `network`) into
/// the store scopes `(network, host-local)`. Legacy files that hold only a
/// container id get `legacy_ifname`. Each network is all-or-nothing: an
/// address the store already gives to another owner aborts that network.
pub fn import_host_local(
    store: &dyn StateStore,
    data_dir: &Path,
    network: Option<&str>,
    legacy_ifname: &str,
) -> Result<Vec<ImportReport>, ImportError> {
    let networks = match network {
        Some(n) => vec![n.to_string()],
        None => {
            let mut v = Vec::new();
            for e in fs::read_dir(data_dir).map_err(io_at(data_dir))? {
                let e = e.map_err(io_at(data_dir))?;
                if e.file_type().map_err(io_at(&e.path()))?.is_dir() {
                    if let Some(n) = e.file_name().to_str() {
                        v.push(n.to_string());
                    }
                }
            }
            v.sort();
            v
        }
    };
    let mut reports = Vec::new();
    for net in networks {
        if !valid_name(&net) {
            return Err(ImportError::Invalid(format!(
                "{}: not a CNI network name",
                data_dir.join(&net).display()
            )));
        }
        reports.push(import_network(
            store,
            &data_dir.join(&net),
            &net,
            legacy_ifname,
        )?);
    }
    Ok(reports)
}

/// Hold the reference plugin's own lock while reading, so a host-local
/// still running on the node cannot change the directory meanwhile. That
/// file is the reference plugin's, made readable by anyone: the wait is
/// bounded and names who holds it.
fn lock_reference(dir: &Path) -> Result<Option<File>, ImportError> {
    let path = dir.join("lock");
    match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
    {
        Ok(f) => {
            wasm_cni_base::fsutil::lock_within(
                &f,
                "the reference host-local's lock",
                REFERENCE_LOCK_WAIT,
            )
            .map_err(|why| io_at(&path)(io::Error::other(why)))?;
            Ok(Some(f))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_at(&path)(e)),
    }
}

/// How long an import waits for a reference host-local at work.
const REFERENCE_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

fn mtime_ms(path: &Path) -> Option<u64> {
    let t = fs::metadata(path).ok()?.modified().ok()?;
    Some(t.duration_since(UNIX_EPOCH).ok()?.as_millis() as u64)
}

fn import_network(
    store: &dyn StateStore,
    dir: &Path,
    network: &str,
    legacy_ifname: &str,
) -> Result<ImportReport, ImportError> {
    let _reference_lock = lock_reference(dir)?;
    let mut report = ImportReport {
        network: network.to_string(),
        ..ImportReport::default()
    };
    let mut found: Vec<(String, Owner, u64)> = Vec::new();
    let mut cursors: Vec<(String, String)> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for e in fs::read_dir(dir).map_err(io_at(dir))? {
        let e = e.map_err(io_at(dir))?;
        match e.file_name().into_string() {
            Ok(n) => names.push(n),
            Err(n) => report
                .skipped
                .push(format!("{}: not UTF-8", n.to_string_lossy())),
        }
    }
    names.sort();
    for name in names {
        let path = dir.join(&name);
        // The reference's lock, hidden temporaries, and this store's own
        // files when both share one dataDir.
        if name == "lock"
            || name.starts_with('.')
            || name.ends_with(".json")
            || name.ends_with(".lock")
        {
            continue;
        }
        if !path.is_file() {
            report.skipped.push(format!("{name}: not a regular file"));
            continue;
        }
        let text = fs::read_to_string(&path).map_err(io_at(&path))?;
        if let Some(idx) = name.strip_prefix(LAST_RESERVED) {
            match (idx.parse::<usize>(), text.trim().parse::<IpAddr>()) {
                (Ok(_), Ok(ip)) => cursors.push((name.clone(), ip.to_string())),
                _ => report.skipped.push(format!("{name}: not a cursor")),
            }
            continue;
        }
        // Windows builds of the reference write `:` as `_`.
        let Ok(ip) = name.replace('_', ":").parse::<IpAddr>() else {
            report.skipped.push(format!("{name}: not an address"));
            continue;
        };
        let key = ip.to_string();
        let (id, ifname) = match text.split_once("\r\n") {
            Some((id, ifname)) => (id.trim(), ifname.trim()),
            None => (text.trim(), legacy_ifname),
        };
        if id.is_empty() || ifname.is_empty() || !valid_key(&key) {
            report.skipped.push(format!("{name}: no owner"));
            continue;
        }
        let owner = Owner {
            container_id: id.to_string(),
            ifname: ifname.to_string(),
        };
        found.push((
            key,
            owner,
            mtime_ms(&path).unwrap_or_else(crate::state::now_ms),
        ));
    }

    let scope = Scope {
        network: network.to_string(),
        plugin: HOST_LOCAL.to_string(),
        data_dir: None,
    };
    let mut txn = store
        .begin(&scope)
        .map_err(|e| ImportError::Invalid(format!("store: {e}")))?;
    let data = txn.data();
    let mut conflicts = Vec::new();
    for (key, owner, at) in found {
        match data.entries.get(&key) {
            // Released since by wasm-cni itself: the store knows better
            // than a stale reference file.
            Some(e) if e.owner == owner => report.unchanged.push(key),
            Some(e) if e.is_live() => conflicts.push(format!(
                "{key} (store: {}/{}, host-local: {}/{})",
                e.owner.container_id, e.owner.ifname, owner.container_id, owner.ifname
            )),
            _ => {
                data.entries.insert(
                    key.clone(),
                    Entry {
                        owner,
                        allocated_at: at,
                        released_at: None,
                        node: None,
                    },
                );
                report.imported.push(key);
            }
        }
    }
    if !conflicts.is_empty() {
        return Err(ImportError::Conflict {
            network: network.to_string(),
            conflicts,
        });
    }
    // The store's own cursor is newer than the reference's, if it has one.
    for (name, ip) in cursors {
        if !data.values.contains_key(&name) {
            data.values.insert(name.clone(), ip);
            report.cursors.push(name);
        }
    }
    txn.commit()
        .map_err(|e| ImportError::Invalid(format!("store: {e}")))?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DiskStore;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("wasm-cni-admin-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn owner(c: &str, i: &str) -> Owner {
        Owner {
            container_id: c.into(),
            ifname: i.into(),
        }
    }

    fn scope(n: &str) -> Scope {
        Scope {
            network: n.into(),
            plugin: HOST_LOCAL.into(),
            data_dir: None,
        }
    }

    /// A reference dataDir: allocations, a legacy file, cursors, the lock.
    fn reference_dir(root: &Path) -> PathBuf {
        let ref_dir = root.join("networks");
        let net = ref_dir.join("mynet");
        fs::create_dir_all(&net).unwrap();
        fs::write(net.join("10.1.2.2"), "ctr-a\r\neth0").unwrap();
        fs::write(net.join("2001:db8:1::2"), "ctr-a\r\neth0").unwrap();
        fs::write(net.join("10.1.2.3"), "  ctr-b \n").unwrap();
        fs::write(net.join("10.1.2.4"), "ctr-c\r\nnet1").unwrap();
        fs::write(net.join("last_reserved_ip.0"), "10.1.2.4").unwrap();
        fs::write(net.join("last_reserved_ip.1"), "2001:db8:1::2").unwrap();
        fs::write(net.join("lock"), "").unwrap();
        fs::write(net.join("README"), "not ours").unwrap();
        fs::write(net.join("host-local.json"), "{}").unwrap();
        ref_dir
    }

    #[test]
    fn imports_the_reference_format() {
        let root = tmp("import");
        let refd = reference_dir(&root);
        let store = DiskStore::new(&root.join("store"));
        let reports = import_host_local(&store, &refd, None, "eth0").unwrap();
        assert_eq!(reports.len(), 1);
        let r = &reports[0];
        assert_eq!(
            r.imported,
            ["10.1.2.2", "10.1.2.3", "10.1.2.4", "2001:db8:1::2"]
        );
        assert_eq!(r.cursors, ["last_reserved_ip.0", "last_reserved_ip.1"]);
        assert_eq!(r.skipped, ["README: not an address"]);
        let mut t = store.begin(&scope("mynet")).unwrap();
        let d = t.data();
        assert_eq!(d.entries["10.1.2.2"].owner, owner("ctr-a", "eth0"));
        assert_eq!(d.entries["2001:db8:1::2"].owner, owner("ctr-a", "eth0"));
        // Legacy id-only file: trimmed id, the default interface.
        assert_eq!(d.entries["10.1.2.3"].owner, owner("ctr-b", "eth0"));
        assert_eq!(d.entries["10.1.2.4"].owner, owner("ctr-c", "net1"));
        assert!(d.entries.values().all(Entry::is_live));
        assert_eq!(d.values["last_reserved_ip.0"], "10.1.2.4");
        drop(t);
        // Again: nothing new, nothing lost.
        let again = import_host_local(&store, &refd, Some("mynet"), "eth0").unwrap();
        assert!(again[0].imported.is_empty());
        assert_eq!(again[0].unchanged.len(), 4);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_conflict_aborts_the_network() {
        let root = tmp("conflict");
        let refd = reference_dir(&root);
        let store = DiskStore::new(&root.join("store"));
        let mut t = store.begin(&scope("mynet")).unwrap();
        t.data().entries.insert(
            "10.1.2.3".into(),
            Entry {
                owner: owner("other", "eth0"),
                allocated_at: 1,
                released_at: None,
                node: None,
            },
        );
        // A released entry is simply taken over.
        t.data().entries.insert(
            "10.1.2.2".into(),
            Entry {
                owner: owner("old", "eth0"),
                allocated_at: 1,
                released_at: Some(2),
                node: None,
            },
        );
        t.commit().unwrap();
        let err = import_host_local(&store, &refd, None, "eth0").unwrap_err();
        assert!(matches!(err, ImportError::Conflict { .. }), "{err}");
        assert!(
            err.to_string().contains("10.1.2.3 (store: other/eth0"),
            "{err}"
        );
        let mut t = store.begin(&scope("mynet")).unwrap();
        assert_eq!(t.data().entries.len(), 2, "nothing imported");
        drop(t);
        fs::remove_dir_all(&root).unwrap();
    }

    /// The plugin controls the pool's size as stored: whatever it writes
    /// there is a number or no size, never text the view repeats.
    #[test]
    fn a_pool_size_is_a_number_the_plugin_stored_or_none() {
        let root = tmp("poolsize");
        let store = DiskStore::new(&root.join("store"));
        for (stored, read) in [
            ("5", Some(5)),
            ("340282366920938463463374607431768211455", Some(u128::MAX)),
            ("340282366920938463463374607431768211456", None),
            ("-1", None),
            ("1e9", None),
            ("\u{1b}[2J7", None),
            ("", None),
        ] {
            let mut t = store.begin(&scope("net1")).unwrap();
            let d = t.data();
            d.entries.insert(
                "10.0.0.2".into(),
                Entry {
                    owner: owner("a", "eth0"),
                    allocated_at: 1,
                    released_at: None,
                    node: None,
                },
            );
            d.values.insert(POOL_SIZE_VALUE.into(), stored.into());
            t.commit().unwrap();
            let views = list(&store, None, 2).unwrap();
            assert_eq!(views[0].pool_size, read, "{stored:?}");
        }
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn lists_allocations_and_quarantine() {
        let root = tmp("list");
        let store = DiskStore::new(&root.join("store"));
        let mut t = store.begin(&scope("net1")).unwrap();
        let d = t.data();
        for (k, o, at, rel) in [
            ("10.0.0.10", "a", 1_000, None),
            ("10.0.0.9", "b", 2_000, Some(50_000)),
            ("10.0.0.2", "c", 3_000, Some(10_000)),
        ] {
            d.entries.insert(
                k.into(),
                Entry {
                    owner: owner(o, "eth0"),
                    allocated_at: at,
                    released_at: rel,
                    node: None,
                },
            );
        }
        d.values.insert(REUSE_WAIT_VALUE.into(), "60000".into());
        d.values.insert(POOL_SIZE_VALUE.into(), "253".into());
        t.commit().unwrap();
        let views = list(&store, None, 80_000).unwrap();
        assert_eq!(views.len(), 1);
        let v = &views[0];
        assert_eq!(v.reuse_wait_ms, Some(60_000));
        assert_eq!(v.pool_size, Some(253));
        let keys: Vec<&str> = v.entries.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, ["10.0.0.2", "10.0.0.9", "10.0.0.10"]);
        assert_eq!(v.entries[2].state, State::Allocated);
        assert_eq!(v.entries[2].age_ms, 79_000);
        assert_eq!(v.entries[1].state, State::Quarantined);
        assert_eq!(v.entries[1].quarantine_left_ms, Some(30_000));
        assert_eq!(v.entries[0].state, State::Free);
        let text = render(&views, false);
        assert!(text.contains("quarantined  b/eth0"), "{text}");
        assert!(text.contains("30.0s left"), "{text}");
        assert!(!text.contains("c/eth0"), "{text}");
        assert!(render(&views, true).contains("c/eth0"));
        assert!(text
            .contains("# net1 host-local: 1 allocated, 1 quarantined (reuseIPWait 1m0s), 1 free"));
        let json = serde_json::to_value(&views).unwrap();
        assert_eq!(json[0]["reuseIPWaitMs"], 60_000);
        assert_eq!(json[0]["poolSize"], 253);
        assert_eq!(json[0]["entries"][1]["quarantineLeftMs"], 30_000);
        assert_eq!(list(&store, Some("nope"), 0).unwrap(), vec![]);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn human_durations() {
        assert_eq!(human(250), "250ms");
        assert_eq!(human(5_200), "5.2s");
        assert_eq!(human(62_000), "1m2s");
        assert_eq!(human(3_720_000), "1h2m");
        assert_eq!(human(90_000_000), "1d1h");
    }
}
