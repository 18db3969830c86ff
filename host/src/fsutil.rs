//! File helpers shared by the artifact cache, the state stores and the
//! trust policy.

use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

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
/// costs one system call, and a waiter notices a release within 5 ms.
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
}
