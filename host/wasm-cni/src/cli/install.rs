//! `wasm-cni install` and `wasm-cni uninstall`: what a DaemonSet's init
//! container (or an operator on a bare node) runs to put wasm-cni on a node.
//!
//! The rules, each from a field report of another CNI's installer:
//! - Every file is written to a temporary file in its own directory, synced
//!   and renamed over the old one: a runtime executing the old binary keeps
//!   its inode (no "Text file busy"), and a reader never sees half a file.
//!   A file whose content is already right is not written at all.
//! - Only files this installer wrote are replaced or removed: a file at one
//!   of its paths that it did not write (or that changed since) is left
//!   alone and named. What it wrote is recorded (paths and digests), and
//!   uninstall removes exactly that. Directories are created when missing,
//!   never removed or recreated.
//! - Everything is read and checked before anything is written: bad input
//!   (a template that does not render or does not parse as ADD would parse
//!   it, an unreadable component, a conf dir that is not a directory, a path
//!   that is not ours) ends with the cause and nothing written.
//! - The conflist is written last, after the binaries, the components and
//!   their precompiled artifacts: the runtime reports the network ready as
//!   soon as a conflist exists. It is 0600 (CIS 1.1.9/1.1.10) and named to
//!   sort first in the conf dir.
//! - Uninstall removes nothing while attachments of the network remain
//!   (unless `--force`): the runtime deletes a pod with the conflist it has
//!   loaded, and the binaries and components it names. Then the conflist
//!   goes first, so no ADD starts against a half-removed network.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command as Process;
use std::rc::Rc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use wasm_cni_engine::edge::DEFAULT_CACHE_DIR;
use wasm_cni_engine::sandbox::sha256_hex;
use wasm_cni_protocol::{config, Command};
use wasm_cni_store::state::{AttachmentRecords, DiskRecords};

pub const DEFAULT_RECORD: &str = "/var/lib/wasm-cni/install.json";
/// Names sort by byte: digits before letters, and "00-" before anything
/// another CNI is likely to use ("05-cilium", "10-calico", "10-flannel").
pub const DEFAULT_CONF_NAME: &str = "00-wasm-cni.conflist";
/// Larger templates are refused: a conflist is a few kilobytes.
const MAX_TEMPLATE_BYTES: u64 = 1 << 20;

#[derive(clap::Args)]
pub struct InstallArgs {
    /// The conflist template: a conflist whose strings may hold ${NAME}
    /// placeholders, filled from --set. A string that is exactly one
    /// placeholder takes the value as JSON when it is a number or a boolean
    /// (an MTU), else as text.
    #[arg(long, value_name = "FILE")]
    template: PathBuf,
    /// A placeholder's value (repeatable). Every placeholder in the
    /// template must have one.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    set: Vec<String>,
    /// A directory the runtime looks for CNI plugins in (repeatable).
    #[arg(long = "bin-dir", value_name = "DIR", default_value = "/opt/cni/bin")]
    bin_dirs: Vec<PathBuf>,
    /// The runtime's CNI config directory.
    #[arg(long, value_name = "DIR", default_value = "/etc/cni/net.d")]
    conf_dir: PathBuf,
    /// The conflist's file name in --conf-dir.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_CONF_NAME)]
    conf_name: String,
    /// The components to install into the conflist's pluginDir (every
    /// *.wasm in it). Default: `components` beside this binary.
    #[arg(long, value_name = "DIR")]
    components: Option<PathBuf>,
    /// Where install records what it wrote, for uninstall.
    #[arg(long, value_name = "FILE", default_value = DEFAULT_RECORD)]
    record: PathBuf,
    /// Leave the conflist to the daemon: record it as pending, for
    /// `wasm-cni daemon --publish-conflist` to write once the daemon
    /// answers STATUS for it (the runtime calls the node ready as soon as
    /// a conflist exists). For networks with "daemon": "prefer" or
    /// "require".
    #[arg(long)]
    defer_conflist: bool,
    /// How long to wait for another install or uninstall of the same
    /// record before giving up, naming it.
    #[arg(long, value_name = "MS", default_value_t = RECORD_LOCK_WAIT_MS)]
    lock_wait_ms: u64,
    #[command(flatten)]
    kube: super::kube::KubeArgs,
}

#[derive(clap::Args)]
pub struct UninstallArgs {
    /// What install recorded.
    #[arg(long, value_name = "FILE", default_value = DEFAULT_RECORD)]
    record: PathBuf,
    /// Remove everything even while attachments remain (their pods then
    /// cannot be deleted through the runtime).
    #[arg(long)]
    force: bool,
    /// How long to wait for an install or uninstall of the same record.
    #[arg(long, value_name = "MS", default_value_t = RECORD_LOCK_WAIT_MS)]
    lock_wait_ms: u64,
    /// Cluster mode's status file (`daemon --cluster-status`), removed
    /// with its routes and tunnels.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/run/wasm-cni/cluster.json"
    )]
    cluster_status: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Kind {
    Conflist,
    Binary,
    Component,
    Artifact,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Written {
    kind: Kind,
    sha256: String,
}

/// What install wrote, and what uninstall needs to know whether attachments
/// remain.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Record {
    network: String,
    state_dir: PathBuf,
    files: BTreeMap<PathBuf, Written>,
    /// A conflist rendered and checked by `install --defer-conflist`,
    /// waiting for the daemon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pending: Option<Pending>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Pending {
    path: PathBuf,
    conflist: String,
}

impl Record {
    fn load(path: &Path) -> Result<Option<Record>, String> {
        match fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| format!("{}: not an install record: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    fn save(&self, path: &Path) -> Result<(), String> {
        let text = serde_json::to_vec_pretty(self).map_err(|e| e.to_string())?;
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        write_replacing(path, &text, 0o600).map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// What goes into a file: read and digested once, however many paths it
/// goes to (the engine into every bin dir).
struct Content {
    bytes: Vec<u8>,
    digest: String,
}

impl Content {
    fn new(bytes: Vec<u8>) -> Rc<Self> {
        let digest = sha256_hex(&bytes);
        Rc::new(Content { bytes, digest })
    }
}

/// One file to put in place.
struct Planned {
    path: PathBuf,
    content: Rc<Content>,
    mode: u32,
    kind: Kind,
    /// Already there with this content.
    current: bool,
}

/// How long `install` and `uninstall` wait for another installer (an init
/// container restarted while an operator runs one by hand) by default.
pub const RECORD_LOCK_WAIT_MS: u64 = 60_000;
/// How long the daemon's publisher waits for it: an installer holds it for
/// the whole install, and the publisher tries again later instead.
const PUBLISH_LOCK_WAIT: Duration = Duration::from_millis(500);

/// One installer at a time per record: `.<record>.lock` beside it, held
/// until the command ends. A lock file only root (the installer's user) can
/// open: a lock on the record's directory, as this once was, could be held
/// by any local user who could list it, and every installer, uninstall and
/// the daemon's publisher waited for them without end. The holder removes
/// the file as it lets go, so nothing stays behind; a waiter that then gets
/// the lock of the removed file sees that the path no longer names it and
/// starts over on the path's new file.
struct RecordLock {
    file: File,
    path: PathBuf,
}

fn lock_record(record: &Path, wait: Duration) -> Result<RecordLock, String> {
    use std::os::unix::fs::MetadataExt;
    let dir = match record.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = record
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "install.json".into());
    let path = dir.join(format!(".{name}.lock"));
    let what = format!("the install record's lock {}", path.display());
    let since = std::time::Instant::now();
    let deadline = since + wait;
    loop {
        let file = wasm_cni_base::fsutil::open_lock_file(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        wasm_cni_base::fsutil::lock_until(&file, &what, since, deadline)?;
        let held = file.metadata().map_err(|e| format!("{what}: {e}"))?;
        let named = fs::symlink_metadata(&path)
            .is_ok_and(|now| (now.dev(), now.ino()) == (held.dev(), held.ino()));
        if named {
            return Ok(RecordLock { file, path });
        }
    }
}

impl Drop for RecordLock {
    fn drop(&mut self) {
        use std::os::unix::fs::MetadataExt;
        let ours = match (self.file.metadata(), fs::symlink_metadata(&self.path)) {
            (Ok(held), Ok(now)) => (now.dev(), now.ino()) == (held.dev(), held.ino()),
            _ => false,
        };
        if ours {
            let _ = fs::remove_file(&self.path);
        }
    }
}

pub fn install(a: &InstallArgs) -> Result<i32, String> {
    // Everything is read and checked first.
    let (conflist, conf, daemon_mode) = render(a)?;
    let engine_path = std::env::current_exe().map_err(|e| format!("this binary: {e}"))?;
    let engine = read_source(&engine_path)?;
    let here = engine_path.parent().unwrap_or(Path::new("/"));
    let client_path = here.join("wasm-cni-client");
    let client = match fs::symlink_metadata(&client_path) {
        Ok(_) => Some(read_source(&client_path)?),
        Err(_) => None,
    };
    let components_dir = a
        .components
        .clone()
        .unwrap_or_else(|| here.join("components"));
    let components = read_components(&components_dir)?;

    let mut plan = Vec::new();
    for (name, content) in &components {
        plan.push(planned(
            conf.plugin_dir.join(name),
            content,
            0o644,
            Kind::Component,
        ));
    }
    // With the thin client, nodes run it as `wasm-cni` and the engine beside
    // it as `wasm-cni-engine` (the client's fallback and the daemon).
    let engine_name = if client.is_some() {
        "wasm-cni-engine"
    } else {
        "wasm-cni"
    };
    for dir in &a.bin_dirs {
        plan.push(planned(dir.join(engine_name), &engine, 0o755, Kind::Binary));
        if let Some(client) = &client {
            plan.push(planned(dir.join("wasm-cni"), client, 0o755, Kind::Binary));
        }
    }
    check_name(&a.conf_name)?;
    let conflist_path = a.conf_dir.join(&a.conf_name);
    if a.defer_conflist && !matches!(daemon_mode.as_deref(), Some("prefer" | "require")) {
        return Err(format!(
            "--defer-conflist: the network does not use the daemon (\"daemon\" is {}), \
             so no daemon would ever write its conflist",
            daemon_mode.map_or("not set".to_string(), |m| format!("{m:?}"))
        ));
    }
    plan.push(planned(
        conflist_path,
        &Content::new(conflist),
        0o600,
        Kind::Conflist,
    ));

    if fs::metadata(&a.conf_dir).is_ok_and(|m| !m.is_dir()) {
        return Err(format!(
            "--conf-dir {}: not a directory",
            a.conf_dir.display()
        ));
    }
    // What the record says is read under its lock, and written under it.
    let _lock = lock_record(&a.record, Duration::from_millis(a.lock_wait_ms))?;
    let mut record = Record::load(&a.record)?.unwrap_or_default();
    for p in &mut plan {
        p.current = check_ours(p, &record)?;
    }

    // Then written: components and binaries, the artifacts, the conflist.
    record.network = conf.name.clone();
    record.state_dir = conf.state_dir.clone();
    let (conflist, files): (Vec<_>, Vec<_>) =
        plan.into_iter().partition(|p| p.kind == Kind::Conflist);
    for p in &files {
        put(p, &mut record, &a.record)?;
    }
    let engine_at = a
        .bin_dirs
        .first()
        .map(|d| d.join(engine_name))
        .ok_or("no --bin-dir")?;
    precompile(&engine_at, &conf, &mut record, &a.record)?;
    record.pending = None;
    for p in &conflist {
        if a.defer_conflist && !p.current {
            record.pending = Some(Pending {
                path: p.path.clone(),
                conflist: String::from_utf8_lossy(&p.content.bytes).into_owned(),
            });
            record.save(&a.record)?;
            println!(
                "pending {}: `wasm-cni daemon --publish-conflist {}` writes it once the daemon answers",
                p.path.display(),
                a.record.display()
            );
            return Ok(0);
        }
        put(p, &mut record, &a.record)?;
    }
    finish_conflist(&conflist[..], &mut record, &a.record)?;
    Ok(0)
}

/// With `written` in place: a conflist an earlier install wrote under another
/// name would keep its network configured, so it goes (binaries and
/// components stay recorded, as DEL of pods it attached may need them).
fn finish_conflist(
    written: &[Planned],
    record: &mut Record,
    record_path: &Path,
) -> Result<(), String> {
    let stale: Vec<PathBuf> = record
        .files
        .iter()
        .filter(|(path, w)| w.kind == Kind::Conflist && !written.iter().any(|p| &p.path == *path))
        .map(|(path, _)| path.clone())
        .collect();
    for path in stale {
        remove_ours(&path, record)?;
    }
    record.save(record_path)
}

/// The conflist `install --defer-conflist` left for the daemon, as the
/// runtime would call its STATUS: the plugin config, and `CNI_PATH` (the
/// bin dirs install wrote to). None when nothing is pending.
pub fn pending(record_path: &Path) -> Result<Option<(Value, String)>, String> {
    let Some(record) = Record::load(record_path)? else {
        return Ok(None);
    };
    let Some(p) = &record.pending else {
        return Ok(None);
    };
    status_call(record_path, &record, &p.conflist, "the pending conflist").map(Some)
}

/// The network install put on the node, as [`pending`] gives it: the
/// pending conflist, else the one install wrote, read from where it is now.
/// None when the record holds neither.
pub fn network(record_path: &Path) -> Result<Option<(Value, String)>, String> {
    let Some(record) = Record::load(record_path)? else {
        return Ok(None);
    };
    if let Some(p) = &record.pending {
        return status_call(record_path, &record, &p.conflist, "the pending conflist").map(Some);
    }
    let Some(path) = record
        .files
        .iter()
        .find(|(_, w)| w.kind == Kind::Conflist)
        .map(|(p, _)| p.clone())
    else {
        return Ok(None);
    };
    let text = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    status_call(record_path, &record, &text, &path.display().to_string()).map(Some)
}

fn status_call(
    record_path: &Path,
    record: &Record,
    conflist: &str,
    what: &str,
) -> Result<(Value, String), String> {
    let conflist: Value = serde_json::from_str(conflist)
        .map_err(|e| format!("{}: {what}: {e}", record_path.display()))?;
    let stdin = super::plugin_stdin(&conflist, &Map::new())
        .map_err(|e| format!("{}: {what}: {e}", record_path.display()))?;
    let mut dirs: Vec<String> = Vec::new();
    for (path, w) in &record.files {
        if let (Kind::Binary, Some(dir)) = (w.kind, path.parent()) {
            let dir = dir.display().to_string();
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
    }
    Ok((stdin, dirs.join(":")))
}

/// Why [`publish`] wrote nothing.
#[derive(Debug)]
pub enum PublishError {
    /// An installer holds the record now: try again later.
    Busy(String),
    Failed(String),
}

/// Write the pending conflist, under the record's lock and by install's
/// rules (a file there that install did not write is left, and this
/// fails). Returns its path, or None when nothing was pending (another
/// publisher, or an install since, got there first). It waits for the lock
/// briefly: an installer holding it is mid-install, and what it leaves
/// pending is published on a later try.
pub fn publish(record_path: &Path) -> Result<Option<PathBuf>, PublishError> {
    let _lock = lock_record(record_path, PUBLISH_LOCK_WAIT).map_err(PublishError::Busy)?;
    publish_locked(record_path).map_err(PublishError::Failed)
}

fn publish_locked(record_path: &Path) -> Result<Option<PathBuf>, String> {
    let Some(mut record) = Record::load(record_path)? else {
        return Ok(None);
    };
    let Some(p) = record.pending.clone() else {
        return Ok(None);
    };
    let mut planned = planned(
        p.path.clone(),
        &Content::new(p.conflist.into_bytes()),
        0o600,
        Kind::Conflist,
    );
    planned.current = check_ours(&planned, &record)?;
    record.pending = None;
    put(&planned, &mut record, record_path)?;
    finish_conflist(std::slice::from_ref(&planned), &mut record, record_path)?;
    Ok(Some(p.path))
}

pub fn uninstall(a: &UninstallArgs) -> Result<i32, String> {
    let _lock = lock_record(&a.record, Duration::from_millis(a.lock_wait_ms))?;
    let Some(mut record) = Record::load(&a.record)? else {
        println!(
            "nothing to uninstall: {} does not exist",
            a.record.display()
        );
        remove_cluster_mode(&a.cluster_status)?;
        return Ok(0);
    };
    // Attachments before anything is removed: containerd tears a pod's
    // network down with the conflist it has loaded now, so a pod whose
    // network's conflist is gone can never be stopped ("cni plugin not
    // initialized"). While any remain, nothing changes. Unknown counts as
    // some.
    let remaining = match DiskRecords::new(&record.state_dir).list(&record.network) {
        Ok(list) => list,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) if a.force => {
            eprintln!(
                "wasm-cni: --force: {}: cannot tell whether attachments remain: {e}",
                record.state_dir.display()
            );
            Vec::new()
        }
        Err(e) => {
            return Err(format!(
                "{}: cannot tell whether attachments remain: {e}",
                record.state_dir.display()
            ))
        }
    };
    if !remaining.is_empty() {
        let mut ids: Vec<&str> = remaining.iter().map(|r| r.container_id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        let more = match ids.len().saturating_sub(5) {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        let which = format!(
            "{} attachment(s) of network {:?} remain (containers {}{more})",
            remaining.len(),
            record.network,
            ids[..ids.len().min(5)].join(", ")
        );
        if !a.force {
            return Err(format!(
                "nothing removed: {which}, and the runtime deletes their pods with this \
                 conflist and these binaries. Delete the pods first (kubectl drain), then run \
                 uninstall again; --force removes everything and leaves those pods undeletable."
            ));
        }
        eprintln!(
            "wasm-cni: --force: {}; their pods cannot be deleted through the runtime now",
            wasm_cni_base::text::Shown(&which)
        );
    }
    // The conflist first: the runtime stops sending ADDs for this network
    // (and a daemon still running publishes nothing now).
    record.pending = None;
    let conflists: Vec<PathBuf> = record
        .files
        .iter()
        .filter(|(_, w)| w.kind == Kind::Conflist)
        .map(|(p, _)| p.clone())
        .collect();
    for path in conflists {
        remove_ours(&path, &mut record)?;
    }
    let paths: Vec<PathBuf> = record.files.keys().cloned().collect();
    for path in paths {
        remove_ours(&path, &mut record)?;
    }
    if record.files.is_empty() {
        fs::remove_file(&a.record).map_err(|e| format!("{}: {e}", a.record.display()))?;
    } else {
        // What was changed by someone else stays recorded, and named.
        record.save(&a.record)?;
    }
    remove_cluster_mode(&a.cluster_status)?;
    Ok(0)
}

/// Remove what cluster mode made on this node: its routes (protocol 157),
/// its tunnels and their entries, and its status file; nothing it does not
/// mark as its own. A daemon still running cluster mode would put them
/// back: it is stopped first (the DaemonSet deleted).
fn remove_cluster_mode(status: &Path) -> Result<(), String> {
    use wasm_cni_kernel::fabric::{reconcile, KernelFabric, Layout};
    let mut fabric = KernelFabric::open(wasm_cni_kernel::net::NsRef::Current)
        .map_err(|e| format!("cluster mode's routes: {e}"))?;
    let done = reconcile(&mut fabric, &Layout::default())
        .map_err(|e| format!("cluster mode's routes: {e}"))?;
    if done.removed > 0 {
        println!(
            "removed cluster mode's routes, tunnels and tunnel peers ({})",
            done.removed
        );
    }
    if let Some(f) = done.failed.first() {
        return Err(format!("cluster mode's routes: {f}"));
    }
    match fs::remove_file(status) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(format!("{}: {e}", status.display()))
        }
        _ => Ok(()),
    }
}

/// Remove `path` if it still holds what install wrote there; otherwise
/// leave it, say so, and forget it.
fn remove_ours(path: &Path, record: &mut Record) -> Result<(), String> {
    let Some(written) = record.files.get(path).cloned() else {
        return Ok(());
    };
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            record.files.remove(path);
            return Ok(());
        }
        Err(e) => return Err(format!("{}: {e}", path.display())),
        Ok(m) if !m.is_file() => {
            eprintln!(
                "wasm-cni: left {}: no longer the file install wrote",
                path.display()
            );
            record.files.remove(path);
            return Ok(());
        }
        Ok(_) => {}
    }
    let now = digest_file(path)?;
    if now != written.sha256 {
        eprintln!(
            "wasm-cni: left {}: changed since install wrote it",
            path.display()
        );
    } else {
        fs::remove_file(path).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("removed {}", path.display());
    }
    record.files.remove(path);
    Ok(())
}

fn planned(path: PathBuf, content: &Rc<Content>, mode: u32, kind: Kind) -> Planned {
    Planned {
        path,
        content: content.clone(),
        mode,
        kind,
        current: false,
    }
}

/// Whether `p` is already in place; an error if its path holds something
/// install did not write.
fn check_ours(p: &Planned, record: &Record) -> Result<bool, String> {
    let meta = match fs::symlink_metadata(&p.path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(format!("{}: {e}", p.path.display())),
        Ok(m) => m,
    };
    if !meta.is_file() {
        return Err(format!(
            "{} exists and is not a regular file: left as it is, nothing installed",
            p.path.display()
        ));
    }
    let now = digest_file(&p.path)?;
    let ours = record.files.get(&p.path).is_some_and(|w| w.sha256 == now);
    if now == p.content.digest && ours && meta.permissions().mode() & 0o7777 == p.mode {
        return Ok(true);
    }
    if !ours {
        return Err(format!(
            "{} exists and was not written by wasm-cni install (or changed since): left as it is, \
             nothing installed",
            p.path.display()
        ));
    }
    Ok(false)
}

fn put(p: &Planned, record: &mut Record, record_path: &Path) -> Result<(), String> {
    if p.current {
        println!("up to date {}", p.path.display());
        return Ok(());
    }
    if let Some(dir) = p.path.parent() {
        fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    // Recorded before the rename: a crash between the two leaves a record of
    // a file that is not there yet, never a file nobody knows is ours.
    record.files.insert(
        p.path.clone(),
        Written {
            kind: p.kind,
            sha256: p.content.digest.clone(),
        },
    );
    record.save(record_path)?;
    write_replacing(&p.path, &p.content.bytes, p.mode)
        .map_err(|e| format!("{}: {e}", p.path.display()))?;
    println!("installed {}", p.path.display());
    Ok(())
}

/// Write `bytes` to a new temporary file beside `path` (never one that
/// exists, never through a link), sync it, and rename it over `path`.
fn write_replacing(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.wasm-cni-install.{}", std::process::id()));
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.write_all(bytes)?;
        // The umask may have narrowed the mode.
        f.set_permissions(fs::Permissions::from_mode(mode))?;
        f.sync_all()?;
        // Closed before it takes the name: a file open for writing cannot
        // be executed (ETXTBSY), and a runtime may exec it the moment it is
        // there.
        drop(f);
        fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Compile every installed component into the conflist's artifact cache
/// with the installed engine (which also shows that it runs), so the first
/// pod on the node does not wait for the compiler. The artifacts it adds
/// are recorded.
fn precompile(
    engine: &Path,
    conf: &config::NetConf,
    record: &mut Record,
    record_path: &Path,
) -> Result<(), String> {
    let run = |args: &[&std::ffi::OsStr]| -> Result<String, String> {
        let out = Process::new(engine)
            .args(args)
            .output()
            .map_err(|e| format!("running {}: {e}", engine.display()))?;
        if !out.status.success() {
            return Err(format!(
                "{} {} failed ({}): {}{}",
                engine.display(),
                args.iter()
                    .map(|a| a.to_string_lossy())
                    .collect::<Vec<_>>()
                    .join(" "),
                out.status,
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    run(&["--version".as_ref()])?;
    let cache = conf
        .cache_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CACHE_DIR));
    let before = artifacts(&cache);
    let out = run(&[
        "compile".as_ref(),
        "--plugin-dir".as_ref(),
        conf.plugin_dir.as_os_str(),
        "--cache-dir".as_ref(),
        cache.as_os_str(),
    ])?;
    print!("{out}");
    for path in artifacts(&cache) {
        if before.contains(&path) || record.files.contains_key(&path) {
            continue;
        }
        let sha256 = digest_file(&path)?;
        record.files.insert(
            path,
            Written {
                kind: Kind::Artifact,
                sha256,
            },
        );
    }
    record.save(record_path)
}

/// The files in the artifact cache (artifacts and their lock files, one
/// level down), to record what compiling added.
fn artifacts(cache: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = fs::read_dir(cache) else {
        return out;
    };
    for entry in rd.filter_map(Result::ok) {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_file() {
            out.push(entry.path());
        } else if kind.is_dir() {
            if let Ok(inner) = fs::read_dir(entry.path()) {
                out.extend(
                    inner
                        .filter_map(Result::ok)
                        .filter(|e| e.file_type().is_ok_and(|k| k.is_file()))
                        .map(|e| e.path()),
                );
            }
        }
    }
    out
}

/// The conflist from the template, the network config ADD would see, and
/// its `daemon` mode.
fn render(a: &InstallArgs) -> Result<(Vec<u8>, config::NetConf, Option<String>), String> {
    let mut values = BTreeMap::new();
    for s in &a.set {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| format!("--set {s:?}: expected NAME=VALUE"))?;
        if k.is_empty() || !k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(format!("--set {s:?}: a name is letters, digits and _"));
        }
        values.insert(k.to_string(), v.to_string());
    }
    if let Some(node) = &a.kube.pod_cidr_from_node {
        for (k, v) in super::kube::pod_cidr_values(&a.kube, node)? {
            if values.contains_key(&k) {
                let flag = if k == "MTU" {
                    "--mtu-for-cluster-mode"
                } else {
                    "--pod-cidr-from-node"
                };
                return Err(format!(
                    "--set {k} and {flag} both give ${{{k}}}: choose one"
                ));
            }
            values.insert(k, v);
        }
    } else if a.kube.mtu_for_cluster_mode.is_some() {
        return Err(
            "--mtu-for-cluster-mode needs --pod-cidr-from-node (the Node's InternalIPs name the uplink)"
                .into(),
        );
    }
    let text = read_bounded(&a.template, MAX_TEMPLATE_BYTES)
        .map_err(|e| format!("--template {}: {e}", a.template.display()))?;
    let mut template: Value = serde_json::from_slice(&text)
        .map_err(|e| format!("--template {}: not JSON: {e}", a.template.display()))?;
    let mut missing = Vec::new();
    fill(&mut template, &values, &mut missing);
    if !missing.is_empty() {
        missing.sort();
        missing.dedup();
        return Err(format!(
            "--template {}: no --set for {}",
            a.template.display(),
            missing.join(", ")
        ));
    }
    if template.get("plugins").is_none() {
        return Err(format!(
            "--template {}: not a conflist (no \"plugins\" list)",
            a.template.display()
        ));
    }
    let stdin = super::plugin_stdin(&template, &Map::new())
        .map_err(|e| format!("--template {}: {e}", a.template.display()))?;
    let bytes = serde_json::to_vec(&stdin).map_err(|e| e.to_string())?;
    let conf = config::parse(&bytes, Command::Add).map_err(|e| {
        format!(
            "--template {}: ADD would refuse it: {e}",
            a.template.display()
        )
    })?;
    let mut out = serde_json::to_vec_pretty(&template).map_err(|e| e.to_string())?;
    out.push(b'\n');
    let daemon_mode = stdin
        .get("daemon")
        .and_then(Value::as_str)
        .map(str::to_string);
    Ok((out, conf, daemon_mode))
}

/// Replace `${NAME}` in every string of `v`; names without a value go to
/// `missing`. Keys are not templated.
fn fill(v: &mut Value, values: &BTreeMap<String, String>, missing: &mut Vec<String>) {
    match v {
        Value::String(s) => {
            if let Some(name) = s.strip_prefix("${").and_then(|r| r.strip_suffix('}')) {
                if !name.contains(['$', '{', '}']) {
                    match values.get(name) {
                        Some(val) => {
                            *v = match serde_json::from_str::<Value>(val) {
                                Ok(n @ (Value::Number(_) | Value::Bool(_))) => n,
                                _ => Value::String(val.clone()),
                            };
                        }
                        None => missing.push(name.to_string()),
                    }
                    return;
                }
            }
            let mut out = String::new();
            let mut rest = s.as_str();
            while let Some(start) = rest.find("${") {
                out.push_str(&rest[..start]);
                let after = &rest[start + 2..];
                match after.find('}') {
                    Some(end) => {
                        let name = &after[..end];
                        match values.get(name) {
                            Some(val) => out.push_str(val),
                            None => missing.push(name.to_string()),
                        }
                        rest = &after[end + 1..];
                    }
                    None => {
                        missing.push(after.to_string());
                        rest = "";
                    }
                }
            }
            out.push_str(rest);
            *s = out;
        }
        Value::Array(items) => items.iter_mut().for_each(|i| fill(i, values, missing)),
        Value::Object(map) => map.values_mut().for_each(|i| fill(i, values, missing)),
        _ => {}
    }
}

fn read_components(dir: &Path) -> Result<Vec<(String, Rc<Content>)>, String> {
    let rd = fs::read_dir(dir).map_err(|e| format!("--components {}: {e}", dir.display()))?;
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| format!("--components {}: {e}", dir.display()))?;
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "wasm") {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        check_name(&name)?;
        out.push((name, read_source(&path)?));
    }
    if out.is_empty() {
        return Err(format!("--components {}: no *.wasm in it", dir.display()));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

fn read_source(path: &Path) -> Result<Rc<Content>, String> {
    fs::read(path)
        .map(Content::new)
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn read_bounded(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    File::open(path)?.take(limit + 1).read_to_end(&mut out)?;
    if out.len() as u64 > limit {
        return Err(std::io::Error::other(format!("larger than {limit} bytes")));
    }
    Ok(out)
}

/// A file name of ours: no separators, not hidden (the temporary files
/// are), printable.
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && !name.starts_with('.')
        && !name.contains('/')
        && name.chars().all(|c| !c.is_control());
    if ok {
        Ok(())
    } else {
        Err(format!("{name:?}: not a plain file name"))
    }
}

fn digest_file(path: &Path) -> Result<String, String> {
    fs::read(path)
        .map(|b| sha256_hex(&b))
        .map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(template: Value, set: &[(&str, &str)]) -> (Value, Vec<String>) {
        let values = set
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut v = template;
        let mut missing = Vec::new();
        fill(&mut v, &values, &mut missing);
        (v, missing)
    }

    #[test]
    fn placeholders_fill_strings_and_whole_values() {
        let (v, missing) = filled(
            serde_json::json!({"mtu": "${MTU}", "name": "n-${NODE}-x", "ok": "${ON}",
                               "list": ["${NODE}"], "${NODE}": "keys stay"}),
            &[("MTU", "1450"), ("NODE", "node-1"), ("ON", "true")],
        );
        assert!(missing.is_empty());
        assert_eq!(
            v,
            serde_json::json!({"mtu": 1450, "name": "n-node-1-x", "ok": true,
                               "list": ["node-1"], "${NODE}": "keys stay"})
        );
    }

    #[test]
    fn a_placeholder_without_a_value_is_named() {
        let (_, missing) = filled(
            serde_json::json!({"a": "${A}", "b": "x${B}y", "c": "${unclosed"}),
            &[],
        );
        assert_eq!(missing, vec!["A", "B", "unclosed"]);
    }

    #[test]
    fn a_value_cannot_inject_json() {
        let (v, _) = filled(
            serde_json::json!({"a": "${A}"}),
            &[("A", r#"{"type":"evil"}"#)],
        );
        assert_eq!(v, serde_json::json!({"a": "{\"type\":\"evil\"}"}));
    }

    #[test]
    fn names_of_ours_are_plain() {
        for bad in ["", ".hidden", "a/b", "../x", "a\nb"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_name("00-wasm-cni.conflist").is_ok());
    }
}
