//! File helpers shared by the artifact cache, the state stores and the
//! trust policy, and the OS's randomness.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustix::fs::{flock, FlockOperation};

/// Owned by root or by us (root can replace our binary anyway), and not
/// writable by anyone else: a file whose contents decide what the host
/// runs. `what` names it in the refusal.
pub fn owned_and_private(meta: &fs::Metadata, what: &str) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let euid = rustix::process::geteuid().as_raw();
    if meta.uid() != euid && meta.uid() != 0 {
        return Err(format!(
            "{what} is owned by uid {}, neither root nor {euid}",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{what} is group- or world-writable (mode {:o})",
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// `op` on a file under `dir`, creating `dir` (and its parents) only when
/// `op` finds it missing, then once more. The directories of the state
/// exist after a node's first call; creating them first on every call was
/// a `mkdir` and a `stat` per directory per call.
pub fn in_dir<T>(dir: &Path, mut op: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    match op() {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::create_dir_all(dir)?;
            op()
        }
        other => other,
    }
}

/// Open (creating it, mode 0600) the lock file `path`, and its directory
/// when that is missing: the state's and the stores' per-attachment and
/// per-scope locks, the install record's and the image store's.
///
/// flock needs only a descriptor, and any descriptor will do, even one
/// opened read-only: whoever can open a lock file can hold it, and every
/// caller that waits on it waits for them. So a lock file is one only its
/// owner can open: made 0600, never followed through a link, and refused
/// when it is not a regular file of this user's or root's. One left group-
/// or world-readable (by an older wasm-cni, or by hand) is made 0600.
pub fn open_lock_file(path: &Path) -> io::Result<File> {
    let file = in_dir(path.parent().unwrap_or(Path::new(".")), || {
        fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            // A FIFO planted there fails at once instead of waiting for a
            // reader.
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
    })?;
    private_lock(&file)?;
    Ok(file)
}

/// `file` is a lock only root or this user can open (see
/// [`open_lock_file`]).
fn private_lock(file: &File) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file: not a lock of ours",
        ));
    }
    let euid = rustix::process::geteuid().as_raw();
    if meta.uid() != euid && meta.uid() != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "owned by uid {}, neither root nor {euid}: whoever owns a lock file can hold it",
                meta.uid()
            ),
        ));
    }
    if meta.mode() & 0o077 != 0 {
        rustix::fs::fchmod(file, rustix::fs::Mode::from_raw_mode(0o600))?;
    }
    Ok(())
}

/// Take `file`'s exclusive lock within `wait`; past it, an error that says
/// what `what` is and who holds it (from `/proc/locks`), for an operator's
/// command or a log line. For locks a command takes for seconds at most
/// (an install, an image pull or removal, the state's own).
pub fn lock_within(file: &File, what: &str, wait: Duration) -> Result<(), String> {
    let now = Instant::now();
    lock_until(file, what, now, now + wait)
}

/// [`lock_within`] for a wait that began at `since` (a caller that tries
/// more than one file) and ends at `deadline`.
pub fn lock_until(
    file: &File,
    what: &str,
    since: Instant,
    deadline: Instant,
) -> Result<(), String> {
    match lock_exclusive(file, Some(deadline)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::TimedOut => Err(format!(
            "{what} is held by {} (waited {} ms)",
            holders(file),
            deadline.saturating_duration_since(since).as_millis()
        )),
        Err(e) => Err(format!("{what}: {e}")),
    }
}

/// Who holds a flock on `file`: the processes `/proc/locks` names for its
/// inode, with their command names (as [`crate::text`] shows others' text),
/// or "another process" when it names none (a holder in another pid
/// namespace shows as none, or as pid 0).
pub(crate) fn holders(file: &File) -> String {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = file.metadata() else {
        return "another process".into();
    };
    let dev = meta.dev();
    let id = format!(
        "{:02x}:{:02x}:{}",
        rustix::fs::major(dev),
        rustix::fs::minor(dev),
        meta.ino()
    );
    let locks = fs::read_to_string("/proc/locks").unwrap_or_default();
    let mut pids: Vec<u32> = locks
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // `N: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE START END`; a
            // waiter's line has `->` after the number.
            match fields.as_slice() {
                [_, "FLOCK", _, _, pid, at, ..] if *at == id => pid.parse().ok(),
                _ => None,
            }
        })
        .filter(|pid| *pid > 0)
        .collect();
    pids.sort_unstable();
    pids.dedup();
    if pids.is_empty() {
        return "another process".into();
    }
    let named: Vec<String> = pids
        .iter()
        .map(|pid| {
            let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            let comm = crate::text::printable(comm.trim_end());
            if comm.is_empty() {
                format!("pid {pid}")
            } else {
                format!("pid {pid} ({comm})")
            }
        })
        .collect();
    named.join(", ")
}

/// Write via a temporary file, fsync and rename: a concurrent reader sees
/// either no artifact or a whole one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Unique per process and call: a daemon writes from many threads.
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{file_name}.{}.{seq}.tmp", std::process::id()));
    let result = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Replace `path`'s contents with `bytes`, as [`write_atomic`] does, for a
/// file only read and written under a lock the caller holds (a store's
/// scope). The bytes go into `spare`, the file's previous version kept
/// beside it, overwritten in place; then the two trade names in one
/// `renameat2(RENAME_EXCHANGE)`. A reader under the lock sees the old file
/// or the new one, whole, as with a rename. What it saves: a new inode per
/// write and, on tmpfs, freeing the old file's pages only to allocate them
/// again (creating and evicting a scope's file was a tenth of a daemon's
/// request threads at 16 clients).
///
/// The spare is opened without following a link and used only when it is
/// a regular file with one name; anything else there is removed and a new
/// spare made, so a planted symlink, hard link or FIFO is never written
/// through or waited on; a spare that cannot be made (a directory in its
/// place) leaves the write to [`write_atomic`]. The first write (no file
/// yet), or a filesystem that cannot exchange, renames the spare over the
/// file instead.
pub fn write_exchange(path: &Path, spare: &Path, bytes: &[u8]) -> io::Result<()> {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    use std::os::unix::fs::FileExt;
    // The spare is only a saving: whatever is in its way, the file is
    // still written.
    let Ok((f, had)) = open_spare(spare) else {
        return write_atomic(path, bytes);
    };
    let len = bytes.len() as u64;
    let written = f
        .write_all_at(bytes, 0)
        // Only a longer spare has a tail to cut.
        .and_then(|()| if had > len { f.set_len(len) } else { Ok(()) })
        .and_then(|()| f.sync_all());
    drop(f);
    if let Err(e) = written {
        // Half written: not worth the space it holds.
        let _ = fs::remove_file(spare);
        return Err(e);
    }
    match renameat_with(CWD, spare, CWD, path, RenameFlags::EXCHANGE) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::NOENT | rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => {
            fs::rename(spare, path)
        }
        Err(e) => Err(e.into()),
    }
}

/// `spare` opened for writing, with its length, if it is a regular file of
/// one name (created when missing), else removed and made anew.
fn open_spare(spare: &Path) -> io::Result<(File, u64)> {
    use std::os::unix::fs::MetadataExt;
    let open = |create_new: bool| {
        fs::OpenOptions::new()
            .write(true)
            .create(!create_new)
            .create_new(create_new)
            .truncate(false)
            .mode(0o600)
            // A FIFO fails at once (ENXIO) instead of waiting for a reader.
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(spare)
    };
    match open(false) {
        Ok(f) => {
            let meta = f.metadata()?;
            if meta.is_file() && meta.nlink() == 1 {
                return Ok((f, meta.len()));
            }
        }
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENXIO)) => {}
        Err(e) => return Err(e),
    }
    fs::remove_file(spare)?;
    Ok((open(true)?, 0))
}

/// Whether a file could be written in `dir` now (created as a write
/// would create it): an unnamed file (`O_TMPFILE`) gets a byte, so a
/// read-only mount, a directory without write permission and a full
/// filesystem all show, and nothing is left behind even if the process is
/// killed. Filesystems without `O_TMPFILE` get a named probe, removed at
/// once.
pub fn probe_writable(dir: &Path) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    let unnamed = fs::OpenOptions::new()
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE)
        .open(dir);
    match unnamed {
        Ok(mut f) => f.write_all(b"0"),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EISDIR)) => {
            static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path = dir.join(format!(".probe.{}.{seq}", std::process::id()));
            let written = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .and_then(|mut f| f.write_all(b"0"));
            let _ = fs::remove_file(&path);
            written
        }
        Err(e) => Err(e),
    }
}

/// Take an exclusive flock on `file`, waiting at most until `deadline`
/// (forever without one). Past the deadline: `TimedOut`.
///
/// flock(2) cannot wait with a timeout, so a bounded wait polls the
/// non-blocking form with a backoff from 100 µs to 5 ms: an uncontended lock
/// costs one system call, and a waiter notices a release within 5 ms. Locks
/// that threads of one process contend for (the daemon's) go through
/// [`lock_gated`], which hands them over at once.
pub fn lock_exclusive(file: &File, deadline: Option<Instant>) -> io::Result<()> {
    let Some(deadline) = deadline else {
        return flock(file, FlockOperation::LockExclusive).map_err(io::Error::from);
    };
    let mut pause = Duration::from_micros(100);
    loop {
        match flock(file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(()),
            Err(e) if e == rustix::io::Errno::WOULDBLOCK || e == rustix::io::Errno::INTR => {}
            Err(e) => return Err(e.into()),
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "still locked by another call at the deadline",
            ));
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(5));
    }
}

/// An exclusive lock on a file, held by this thread until dropped: the
/// flock (which excludes other processes) and this process's gate for the
/// file (which queues its other threads).
pub struct Locked {
    // Declared first, so dropped first: the flock is free before the next
    // thread in this process is let through, and its first try succeeds.
    _file: File,
    _gate: GateGuard,
    /// The file's device and inode, as stated when it was locked.
    id: (u64, u64),
}

impl Locked {
    /// The locked file's (device, inode): a descriptor's file never
    /// changes, so what was stated to lock it stays true.
    pub fn identity(&self) -> (u64, u64) {
        self.id
    }
}

/// [`lock_exclusive`] for locks that a daemon's request threads contend
/// for (a network's IPAM scope, an attachment, the state directory). Threads
/// of this process wait for each other on a condition variable, which wakes
/// the next one the moment the holder lets go; only then does a thread take
/// the flock, where it waits (polling) only for other processes. With the
/// flock alone, 16 threads allocating from one scope polled it with up to
/// 5 ms pauses while the holder needed a fraction of a millisecond
/// (host/bench/results/findings.md, issue 21).
///
/// The gate is keyed by the file's device and inode, so that two paths to one
/// file share it and a lock file replaced at its path gets a new one, as
/// flock itself does.
pub fn lock_gated(file: File, deadline: Option<Instant>) -> io::Result<Locked> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata()?;
    let id = (meta.dev(), meta.ino());
    let gate = Gate::of(id.0, id.1).enter(deadline)?;
    lock_exclusive(&file, deadline)?;
    Ok(Locked {
        _file: file,
        _gate: gate,
        id,
    })
}

/// One file's queue of this process's threads.
struct Gate {
    held: Mutex<bool>,
    freed: Condvar,
}

type GateKey = (u64, u64);

/// Live gates by file. Held only to find or add a gate, never while a lock
/// is waited for or held.
static GATES: Mutex<Option<HashMap<GateKey, Weak<Gate>>>> = Mutex::new(None);

impl Gate {
    fn of(dev: u64, ino: u64) -> Arc<Gate> {
        let mut gates = GATES.lock().unwrap_or_else(PoisonError::into_inner);
        let map = gates.get_or_insert_with(Default::default);
        if let Some(gate) = map.get(&(dev, ino)).and_then(Weak::upgrade) {
            return gate;
        }
        // Gates live as long as someone holds or waits: forget the dead ones
        // as new files come, so that a node's every container ID does not
        // stay in the map.
        map.retain(|_, g| g.strong_count() > 0);
        let gate = Arc::new(Gate {
            held: Mutex::new(false),
            freed: Condvar::new(),
        });
        map.insert((dev, ino), Arc::downgrade(&gate));
        gate
    }

    fn enter(self: Arc<Self>, deadline: Option<Instant>) -> io::Result<GateGuard> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        while *held {
            held = match deadline {
                None => self
                    .freed
                    .wait(held)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "still locked by another call at the deadline",
                        ));
                    }
                    self.freed
                        .wait_timeout(held, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
        *held = true;
        drop(held);
        Ok(GateGuard(self))
    }
}

struct GateGuard(Arc<Gate>);

impl Drop for GateGuard {
    fn drop(&mut self) {
        *self.0.held.lock().unwrap_or_else(PoisonError::into_inner) = false;
        self.0.freed.notify_one();
    }
}

/// `N` random bytes from the kernel, never all zero (trace and span ids,
/// a state scope's generation).
pub fn random<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    loop {
        let mut filled = 0;
        while filled < N {
            // SAFETY: the buffer is valid for N - filled bytes from there.
            let n = unsafe { libc::getrandom(out[filled..].as_mut_ptr().cast(), N - filled, 0) };
            if n > 0 {
                filled += n as usize;
            } else if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                // No randomness: a time-derived id (unique enough for one
                // node; these ids are not secrets).
                let t = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos());
                for (i, b) in out.iter_mut().enumerate() {
                    *b = (t >> ((i % 16) * 8)) as u8 ^ (std::process::id() >> (i % 4 * 8)) as u8;
                }
                filled = N;
            }
        }
        if out.iter().any(|b| *b != 0) {
            return out;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writability_probe_leaves_nothing_and_names_what_is_not_a_directory() {
        let dir = std::env::temp_dir().join(format!("wasm-cni-probe-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        probe_writable(&dir.join("networks/n")).unwrap();
        let left: Vec<_> = fs::read_dir(dir.join("networks/n")).unwrap().collect();
        assert!(left.is_empty(), "{left:?}");
        fs::write(dir.join("file"), b"x").unwrap();
        assert!(probe_writable(&dir.join("file")).is_err());
        assert!(probe_writable(&dir.join("file/below")).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }

    fn exchange_dir(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("wasm-cni-xchg-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    // Each write leaves the file whole (a shorter one keeps no tail of the
    // longer one before it) and the version before it as the spare; from
    // the second write on, the two inodes trade places instead of a new
    // one being made for every write.
    #[test]
    fn an_exchanged_write_reuses_the_previous_version_and_leaves_no_tail() {
        use std::os::unix::fs::MetadataExt;
        let dir = exchange_dir("reuse");
        let (file, spare) = (dir.join("s.json"), dir.join(".s.json.spare"));
        write_exchange(&file, &spare, b"first, and the longest of all").unwrap();
        assert_eq!(fs::read(&file).unwrap(), b"first, and the longest of all");
        assert!(!spare.exists(), "the first write renames its spare");
        let first = fs::metadata(&file).unwrap().ino();
        write_exchange(&file, &spare, b"second").unwrap();
        assert_eq!(fs::read(&file).unwrap(), b"second");
        assert_eq!(fs::read(&spare).unwrap(), b"first, and the longest of all");
        write_exchange(&file, &spare, b"third").unwrap();
        assert_eq!(fs::read(&file).unwrap(), b"third");
        assert_eq!(fs::read(&spare).unwrap(), b"second");
        assert_eq!(
            fs::metadata(&file).unwrap().ino(),
            first,
            "the first inode is back, rewritten"
        );
        assert_eq!(fs::metadata(&file).unwrap().mode() & 0o777, 0o600);
        // Into the shorter spare ("second"): it grows to exactly the bytes.
        write_exchange(&file, &spare, b"a fourth, longer than the second").unwrap();
        assert_eq!(
            fs::read(&file).unwrap(),
            b"a fourth, longer than the second"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    // The spare's name is fixed, so whoever can write the directory could
    // plant something there: a symlink or a hard link to another file must
    // not be written through, a FIFO must not block the writer, and a
    // directory there must not stop the write.
    #[test]
    fn a_planted_spare_is_never_written_through_or_waited_on() {
        let dir = exchange_dir("hostile");
        let (file, spare) = (dir.join("s.json"), dir.join(".s.json.spare"));
        let victim = dir.join("victim");
        write_exchange(&file, &spare, b"v1").unwrap();

        fs::write(&victim, b"precious").unwrap();
        std::os::unix::fs::symlink(&victim, &spare).unwrap();
        write_exchange(&file, &spare, b"v2").unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert_eq!(fs::read(&file).unwrap(), b"v2");
        assert!(!fs::symlink_metadata(&spare)
            .unwrap()
            .file_type()
            .is_symlink());

        // Dangling: O_CREAT alone would create the link's target.
        fs::remove_file(&spare).unwrap();
        let target = dir.join("made-through-the-link");
        std::os::unix::fs::symlink(&target, &spare).unwrap();
        write_exchange(&file, &spare, b"v3").unwrap();
        assert!(!target.exists());
        assert_eq!(fs::read(&file).unwrap(), b"v3");

        fs::remove_file(&spare).unwrap();
        fs::hard_link(&victim, &spare).unwrap();
        write_exchange(&file, &spare, b"v4").unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert_eq!(fs::read(&file).unwrap(), b"v4");

        fs::remove_file(&spare).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &spare,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        write_exchange(&file, &spare, b"v5").unwrap();
        assert_eq!(fs::read(&file).unwrap(), b"v5");

        fs::remove_file(&spare).unwrap();
        fs::create_dir(&spare).unwrap();
        write_exchange(&file, &spare, b"v6").unwrap();
        assert_eq!(fs::read(&file).unwrap(), b"v6");
        assert!(spare.is_dir(), "not the writer's to remove");
        fs::remove_dir_all(&dir).unwrap();
    }

    // The directory is made only on a miss, and a miss is retried once:
    // other errors pass through untouched, and an operation that keeps
    // missing ends as its error, not as a loop.
    #[test]
    fn a_file_op_makes_its_directory_only_when_missing_and_retries_once() {
        let root = std::env::temp_dir().join(format!("wasm-cni-indir-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let dir = root.join("locks/net");
        let file = dir.join("a.lock");
        let mut calls = 0;
        let create = |calls: &mut u32| {
            *calls += 1;
            fs::OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(false)
                .open(&file)
        };
        in_dir(&dir, || create(&mut calls)).unwrap();
        assert_eq!(calls, 2, "missed, made the directory, then opened");
        in_dir(&dir, || create(&mut calls)).unwrap();
        assert_eq!(calls, 3, "the directory exists: one try");

        let other = root.join("other");
        let mut tries = 0;
        let denied = in_dir(&other, || -> io::Result<()> {
            tries += 1;
            Err(io::Error::from(io::ErrorKind::PermissionDenied))
        });
        assert_eq!(denied.unwrap_err().kind(), io::ErrorKind::PermissionDenied);
        assert_eq!(tries, 1);
        assert!(
            !other.exists(),
            "no directory for an error that is not a miss"
        );

        let mut tries = 0;
        let missing = in_dir(&other, || -> io::Result<()> {
            tries += 1;
            Err(io::Error::from(io::ErrorKind::NotFound))
        });
        assert_eq!(missing.unwrap_err().kind(), io::ErrorKind::NotFound);
        assert_eq!(tries, 2);

        // A file where the directory should be: the creation's own error.
        fs::write(root.join("flat"), b"x").unwrap();
        let mut tries = 0;
        let blocked = in_dir(&root.join("flat/below"), || -> io::Result<()> {
            tries += 1;
            Err(io::Error::from(io::ErrorKind::NotFound))
        });
        assert!(blocked.is_err());
        assert_eq!(tries, 1);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_bounded_lock_wait_ends_at_the_deadline() {
        let path = std::env::temp_dir().join(format!("wasm-cni-lock-{}", std::process::id()));
        let open = || {
            fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .unwrap()
        };
        let (a, b) = (open(), open());
        lock_exclusive(&a, None).unwrap();
        let started = Instant::now();
        let err = lock_exclusive(&b, Some(started + Duration::from_millis(50))).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(50), "{waited:?}");
        drop(a);
        lock_exclusive(&b, Some(Instant::now() + Duration::from_millis(50))).unwrap();
        let _ = fs::remove_file(&path);
    }

    fn lock_file(name: &str) -> (std::path::PathBuf, impl Fn() -> File) {
        let path = std::env::temp_dir().join(format!("wasm-cni-{name}-{}", std::process::id()));
        let p = path.clone();
        (path, move || {
            fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&p)
                .unwrap()
        })
    }

    #[test]
    fn a_gated_lock_goes_to_the_waiting_thread_and_still_excludes_other_processes() {
        let (path, open) = lock_file("gate-handover");
        let first = lock_gated(open(), None).unwrap();
        let waiter = {
            let f = open();
            std::thread::spawn(move || {
                let held = lock_gated(f, Some(Instant::now() + Duration::from_secs(30)));
                (held.map(|_| ()).map_err(|e| e.kind()), Instant::now())
            })
        };
        // Another process takes only the flock: refused while a thread here
        // holds the lock.
        let other = open();
        let now = Some(Instant::now());
        assert_eq!(
            lock_exclusive(&other, now).unwrap_err().kind(),
            io::ErrorKind::TimedOut
        );
        std::thread::sleep(Duration::from_millis(20));
        let released = Instant::now();
        drop(first);
        let (got, at) = waiter.join().unwrap();
        assert_eq!(got, Ok(()));
        assert!(at >= released);
        // Dropped with the waiter's guard: both the flock and the gate.
        lock_exclusive(&other, Some(Instant::now())).unwrap();
        drop(other);
        lock_gated(open(), Some(Instant::now())).unwrap();
        let _ = fs::remove_file(&path);
    }

    #[test]
    fn a_gated_wait_ends_at_the_deadline_as_a_flock_wait_does() {
        let (path, open) = lock_file("gate-deadline");
        let held = lock_gated(open(), None).unwrap();
        let started = Instant::now();
        let err = lock_gated(open(), Some(started + Duration::from_millis(50)))
            .err()
            .map(|e| e.kind());
        assert_eq!(err, Some(io::ErrorKind::TimedOut));
        assert!(started.elapsed() >= Duration::from_millis(50));
        // A try (deadline now) is refused at once, then succeeds once free.
        let err = lock_gated(open(), Some(Instant::now()))
            .err()
            .map(|e| e.kind());
        assert_eq!(err, Some(io::ErrorKind::TimedOut));
        drop(held);
        lock_gated(open(), Some(Instant::now())).unwrap();
        let _ = fs::remove_file(&path);
    }

    #[test]
    fn a_lock_file_only_its_owner_can_open_and_a_timeout_names_the_holder() {
        use std::os::unix::fs::PermissionsExt;
        let dir = exchange_dir("private-lock");
        let path = dir.join("sub/x.lock");
        let file = open_lock_file(&path).unwrap();
        assert_eq!(file.metadata().unwrap().permissions().mode() & 0o777, 0o600);
        // One left readable by others is closed.
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let again = open_lock_file(&path).unwrap();
        assert_eq!(
            again.metadata().unwrap().permissions().mode() & 0o777,
            0o600
        );
        // A link or a FIFO in its place is not a lock.
        let link = dir.join("link.lock");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(open_lock_file(&link).is_err());
        let fifo = dir.join("fifo.lock");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let started = Instant::now();
        assert!(open_lock_file(&fifo).is_err());
        assert!(started.elapsed() < Duration::from_secs(1));
        // Held by this process: the message names it.
        lock_exclusive(&file, None).unwrap();
        let e = lock_within(&again, "the lock", Duration::from_millis(30)).unwrap_err();
        let me = format!("pid {}", std::process::id());
        assert!(
            e.starts_with("the lock is held by ") && e.contains(&me),
            "{e}"
        );
        assert!(e.ends_with("(waited 30 ms)"), "{e}");
        drop(file);
        lock_within(&again, "the lock", Duration::from_millis(30)).unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_lock_file_replaced_at_its_path_has_a_gate_of_its_own() {
        // The attachment lock is unlinked with its record; a new file at the
        // path is a new lock, for the flock and so for the gate.
        let (path, open) = lock_file("gate-replaced");
        let old = lock_gated(open(), None).unwrap();
        fs::remove_file(&path).unwrap();
        let new = lock_gated(open(), Some(Instant::now())).unwrap();
        drop((old, new));
        let _ = fs::remove_file(&path);
    }
}
