//! Precompiled-artifact cache.
//!
//! Compiling a component with Cranelift costs tens of milliseconds; loading
//! a precompiled artifact costs well under one. Artifacts are keyed by the
//! sha256 of the component *and* a tag of the engine that compiled them, so a
//! changed plugin or a changed host never loads a stale artifact.
//!
//! Trust. An artifact is native machine code: `Component::deserialize` maps
//! it executable and runs it without verification (wasmtime checks only that
//! the header matches the engine, not that the code is what Cranelift would
//! make). Whoever can write an artifact that we load therefore runs arbitrary
//! code in the host, outside the sandbox and as root, and every promise of
//! the sandbox is void. So an artifact is used only if this host produced it:
//!
//! * the cache directory and the artifact are opened once, without following
//!   a symlink at the last component, and every check is made on the opened
//!   descriptors (`fstat`), then the code is mapped from that same
//!   descriptor (through `/proc/self/fd`): renaming or swapping paths after
//!   the check changes nothing;
//! * both are owned by root or by our effective uid, and neither is group- or
//!   world-writable: only someone who could replace the wasm-cni binary
//!   itself could have written them;
//! * the artifact is a regular file that ends with a trailer recording the
//!   sha256 of the component it was compiled from and the engine tag, and
//!   that digest must equal the digest of the component being loaded now.
//!   The file name carries the digest too, but a name is only a lookup key:
//!   the trailer binds content to source, so an artifact of one plugin
//!   renamed to another's name is refused.
//!
//! The trailer comes after wasmtime's ELF image, which starts at offset 0,
//! so the artifact is mapped as it is (`deserialize_file`), not read and
//! copied: a warm load touches only the pages it uses, and they are page
//! cache shared by every wasm-cni process.
//!
//! Anything else is ignored with a warning and the component is compiled
//! from source (and, when the directory itself is trusted, a fresh artifact
//! replaces the refused one). A mismatching pin (`sha256` in the config) is
//! checked before any of this, on the component's bytes.

use std::collections::hash_map::DefaultHasher;
use std::fs::{self, File};
use std::hash::{Hash, Hasher};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{Mode, OFlags};

use wasmtime::component::Component;
use wasmtime::Engine;

use wasm_cni_base::fsutil::write_atomic;
use wasm_cni_base::log;

/// Where a loaded component came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Compiled,
    Cached,
}

pub struct ArtifactCache {
    dir: Option<PathBuf>,
    engine_tag: String,
    compiled: AtomicU64,
    loaded: AtomicU64,
}

impl ArtifactCache {
    /// `dir` None disables caching (every load compiles).
    pub fn new(dir: Option<PathBuf>, engine: &Engine) -> Self {
        let mut h = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        // The hasher is only stable within one build, which the version tag
        // makes explicit; wasmtime re-checks compatibility on load anyway.
        env!("CARGO_PKG_VERSION").hash(&mut h);
        ArtifactCache {
            dir,
            engine_tag: format!("{:016x}", h.finish()),
            compiled: AtomicU64::new(0),
            loaded: AtomicU64::new(0),
        }
    }

    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The artifact path for a component digest.
    pub fn artifact_path(&self, digest: &str) -> Option<PathBuf> {
        self.dir
            .as_ref()
            .map(|d| d.join(format!("{digest}-{}.cwasm", self.engine_tag)))
    }

    fn artifact_name(&self, digest: &str) -> String {
        format!("{digest}-{}.cwasm", self.engine_tag)
    }

    /// The trailer that binds an artifact to its source and engine.
    fn trailer(&self, digest: &str) -> Vec<u8> {
        format!("{MAGIC}{digest} {}\n", self.engine_tag).into_bytes()
    }

    /// True if a trusted artifact exists for `digest`.
    pub fn is_cached(&self, digest: &str) -> bool {
        self.dir
            .as_deref()
            .is_some_and(|dir| self.read_trusted(dir, digest).is_ok())
    }

    /// The trusted artifact for `digest`, opened and checked as the module
    /// docs describe (trailer included).
    pub fn read_trusted(&self, dir: &Path, digest: &str) -> Result<File, TrustError> {
        let dir_fd = open_trusted_dir(dir)?;
        let name = self.artifact_name(digest);
        let fd = match rustix::fs::openat(
            &dir_fd,
            name.as_str(),
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Err(TrustError::Missing),
            // O_NOFOLLOW on a symlink.
            Err(rustix::io::Errno::LOOP) => {
                return Err(TrustError::Untrusted("the artifact is a symlink".into()))
            }
            Err(e) => return Err(std::io::Error::from(e).into()),
        };
        let file = File::from(fd);
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(TrustError::Untrusted(
                "the artifact is not a regular file".into(),
            ));
        }
        owned_and_private(&meta, "the artifact")?;
        let trailer = self.trailer(digest);
        let mut found = vec![0u8; trailer.len()];
        let sealed = meta
            .len()
            .checked_sub(trailer.len() as u64)
            .is_some_and(|at| file.read_exact_at(&mut found, at).is_ok() && found == trailer);
        if !sealed {
            return Err(TrustError::Untrusted(format!(
                "the artifact's trailer does not record component {digest} and engine {}",
                self.engine_tag
            )));
        }
        Ok(file)
    }

    /// (components compiled, artifacts loaded) by this process.
    pub fn stats(&self) -> (u64, u64) {
        (
            self.compiled.load(Ordering::Relaxed),
            self.loaded.load(Ordering::Relaxed),
        )
    }

    /// The cached component for `digest`, if a trusted artifact exists (no
    /// directory is created and nothing is compiled).
    pub fn load_cached(&self, engine: &Engine, name: &str, digest: &str) -> Option<Component> {
        self.load_trusted(engine, name, self.dir.as_deref()?, digest)
    }

    fn load_trusted(
        &self,
        engine: &Engine,
        name: &str,
        dir: &Path,
        digest: &str,
    ) -> Option<Component> {
        let path = dir.join(self.artifact_name(digest));
        match self.read_trusted(dir, digest) {
            Ok(file) => {
                // SAFETY: the file is an artifact this host wrote (the trust
                // rule in the module docs: checked owner, mode and file type
                // on this descriptor, and a trailer naming this component's
                // digest and this engine); the path names this descriptor's
                // file, whatever happened to the directory since; wasmtime
                // re-validates its own header and refuses an incompatible
                // engine.
                let fd_path = format!("/proc/self/fd/{}", file.as_raw_fd());
                match unsafe { Component::deserialize_file(engine, &fd_path) } {
                    Ok(c) => {
                        self.loaded.fetch_add(1, Ordering::Relaxed);
                        log::debug(format_args!("{name}: loaded {}", path.display()));
                        return Some(c);
                    }
                    Err(e) => log::warn(format_args!(
                        "{name}: ignoring artifact {}: {e}",
                        path.display()
                    )),
                }
            }
            Err(TrustError::Missing) => {}
            Err(why) => log::warn(format_args!(
                "{name}: ignoring artifact {}: {why}",
                path.display()
            )),
        }
        None
    }

    /// Load the artifact for `digest` or compile `bytes` and store one.
    pub fn load_or_compile(
        &self,
        engine: &Engine,
        name: &str,
        digest: &str,
        bytes: &[u8],
        limits: &super::compile::CompileLimits,
    ) -> Result<(Component, Origin), super::compile::CompileError> {
        let usable_dir = match &self.dir {
            Some(dir) => match ensure_dir(dir).and_then(|()| trusted_dir(dir)) {
                Ok(()) => Some(dir.as_path()),
                Err(why) => {
                    log::warn(format_args!(
                        "artifact cache {} not used: {why}",
                        dir.display()
                    ));
                    None
                }
            },
            None => None,
        };
        let path = usable_dir.and_then(|_| self.artifact_path(digest));

        if let Some(dir) = usable_dir {
            if let Some(c) = self.load_trusted(engine, name, dir, digest) {
                return Ok((c, Origin::Cached));
            }
        }
        // One compile of a component per node at a time: the others wait
        // for its artifact. A node starting many pods at once (after an
        // upgrade, say) would otherwise compile it in every process, each
        // slower for the others.
        let _compiling = match usable_dir {
            Some(dir) => match compile_lock(dir, digest, limits.wall()) {
                Ok(lock) => {
                    if let Some(c) = self.load_trusted(engine, name, dir, digest) {
                        return Ok((c, Origin::Cached));
                    }
                    Some(lock)
                }
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                    return Err(super::compile::CompileError::Overloaded {
                        ms: limits.wall().as_millis(),
                    })
                }
                Err(e) => {
                    log::warn(format_args!(
                        "{name}: compiling without the cache's lock: {e}"
                    ));
                    None
                }
            },
            None => None,
        };

        let component = super::compile::compile(engine, bytes, limits)?;
        self.compiled.fetch_add(1, Ordering::Relaxed);
        log::debug(format_args!("{name}: compiled ({digest})"));
        if let Some(path) = &path {
            match component.serialize() {
                Ok(mut art) => {
                    art.extend_from_slice(&self.trailer(digest));
                    if let Err(e) = write_atomic(path, &art) {
                        log::warn(format_args!(
                            "{name}: cannot write artifact {}: {e}",
                            path.display()
                        ));
                    }
                }
                Err(e) => log::warn(format_args!("{name}: cannot serialise: {e}")),
            }
        }
        Ok((component, Origin::Compiled))
    }
}

/// `locks/<digest>.lock` under the cache directory, held: waited for until
/// `wait` has passed (`TimedOut` then).
fn compile_lock(dir: &Path, digest: &str, wait: std::time::Duration) -> std::io::Result<File> {
    let locks = dir.join("locks");
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&locks)?;
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(locks.join(format!("{digest}.lock")))?;
    wasm_cni_base::fsutil::lock_exclusive(&file, Some(std::time::Instant::now() + wait))?;
    Ok(file)
}

/// First line of every artifact's trailer, followed by
/// `<sha256> <engine tag>\n`.
const MAGIC: &str = "wasm-cni artifact 1\n";

#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("no artifact")]
    Missing,
    #[error("{0}")]
    Untrusted(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

fn ensure_dir(dir: &Path) -> Result<(), TrustError> {
    if !dir.exists() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    Ok(())
}

fn owned_and_private(meta: &fs::Metadata, what: &str) -> Result<(), TrustError> {
    wasm_cni_base::fsutil::owned_and_private(meta, what).map_err(TrustError::Untrusted)
}

/// Open the cache directory (not through a symlink) and check it on the
/// descriptor.
fn open_trusted_dir(dir: &Path) -> Result<File, TrustError> {
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) | Some(libc::ENOTDIR) => {
                TrustError::Untrusted("not a directory (or a symlink to one)".into())
            }
            _ => TrustError::Io(e),
        })?;
    owned_and_private(&f.metadata()?, "the directory")?;
    Ok(f)
}

fn trusted_dir(dir: &Path) -> Result<(), TrustError> {
    open_trusted_dir(dir).map(drop)
}

/// Identity of a component file as the file system reports it: the same
/// identity means the same bytes, unless the file was changed within the
/// timestamp granularity of the last change (see [`ArtifactCache::remember_digest`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl SourceId {
    pub fn of(meta: &fs::Metadata) -> Self {
        SourceId {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    fn line(&self, digest: &str) -> String {
        format!(
            "{SOURCE_MAGIC}{} {} {} {}.{} {}.{} {digest}\n",
            self.dev, self.ino, self.size, self.mtime.0, self.mtime.1, self.ctime.0, self.ctime.1
        )
    }
}

/// First word of a `<plugin>.source` record.
const SOURCE_MAGIC: &str = "wasm-cni source 1 ";

/// A file changed this recently may change again without its timestamps
/// moving (they are coarser than writes), so its digest is not recorded.
const RACY_SECS: i64 = 2;

/// The digest index: `<cache>/<plugin>.source` records the sha256 of the
/// component file last seen under that plugin name with its [`SourceId`], so
/// a warm load neither reads nor hashes the component. Any change to the
/// file (content, size, inode, even `touch`) changes the id and the file is
/// hashed again. Records are trusted like artifacts: read through checked
/// descriptors in the trusted directory, owned by root or us, private.
impl ArtifactCache {
    fn source_name(name: &str) -> String {
        format!("{name}.source")
    }

    /// The recorded digest of the component `name` if `id` is the file it
    /// was recorded for.
    pub fn known_digest(&self, name: &str, id: &SourceId) -> Option<String> {
        let dir = open_trusted_dir(self.dir.as_deref()?).ok()?;
        let fd = rustix::fs::openat(
            &dir,
            Self::source_name(name).as_str(),
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::empty(),
        )
        .ok()?;
        let file = File::from(fd);
        let meta = file.metadata().ok()?;
        if !meta.is_file() || owned_and_private(&meta, "the record").is_err() {
            return None;
        }
        // Sized up front: an empty string is read in growing probes, five
        // reads for a record of 146 bytes.
        let mut text = String::with_capacity(256);
        file.take(256).read_to_string(&mut text).ok()?;
        let digest = text.trim_end().rsplit(' ').next()?;
        let valid = digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit());
        (valid && text == id.line(digest)).then(|| digest.to_string())
    }

    /// Record `digest` for the component `name` read from the file `id`,
    /// unless the file changed within the last [`RACY_SECS`] (best effort:
    /// a record that cannot be written only costs a hash next time).
    pub fn remember_digest(&self, name: &str, id: &SourceId, digest: &str) {
        let Some(dir) = self.dir.as_deref() else {
            return;
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        if now - id.mtime.0.max(id.ctime.0) < RACY_SECS {
            return;
        }
        if ensure_dir(dir).and_then(|()| trusted_dir(dir)).is_err() {
            return;
        }
        let path = dir.join(Self::source_name(name));
        if let Err(e) = write_atomic(&path, id.line(digest).as_bytes()) {
            log::debug(format_args!("{name}: cannot record its digest: {e}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// The smallest valid component: the preamble alone.
    const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\0\x01\0";

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("wasm-cni-cache-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn world_writable_dir_is_not_trusted() {
        let d = tmpdir("ww");
        ensure_dir(&d).unwrap();
        assert!(trusted_dir(&d).is_ok());
        fs::set_permissions(&d, fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(trusted_dir(&d), Err(TrustError::Untrusted(_))));
        let link = tmpdir("wwlink");
        fs::set_permissions(&d, fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink(&d, &link).unwrap();
        assert!(matches!(trusted_dir(&link), Err(TrustError::Untrusted(_))));
        fs::remove_file(&link).unwrap();
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn only_artifacts_this_host_wrote_for_this_component_are_loaded() {
        let d = tmpdir("art");
        let engine = Engine::default();
        let cache = ArtifactCache::new(Some(d.clone()), &engine);
        let digest = crate::sandbox::sha256_hex(EMPTY_COMPONENT);
        let (_, origin) = cache
            .load_or_compile(
                &engine,
                "empty",
                &digest,
                EMPTY_COMPONENT,
                &Default::default(),
            )
            .unwrap();
        assert_eq!(origin, Origin::Compiled);
        let path = cache.artifact_path(&digest).unwrap();
        let written = fs::read(&path).unwrap();
        assert!(written.ends_with(&cache.trailer(&digest)));
        assert!(cache.is_cached(&digest));
        let load = || {
            cache
                .load_or_compile(
                    &engine,
                    "empty",
                    &digest,
                    EMPTY_COMPONENT,
                    &Default::default(),
                )
                .unwrap()
                .1
        };
        assert_eq!(load(), Origin::Cached);

        // Writable by others: refused, then replaced by a fresh artifact.
        fs::set_permissions(&path, fs::Permissions::from_mode(0o666)).unwrap();
        assert!(matches!(
            cache.read_trusted(&d, &digest),
            Err(TrustError::Untrusted(_))
        ));
        assert_eq!(load(), Origin::Compiled);
        assert_eq!(load(), Origin::Cached);

        // A symlink to a good artifact is not followed.
        let real = d.join("elsewhere.cwasm");
        fs::rename(&path, &real).unwrap();
        std::os::unix::fs::symlink(&real, &path).unwrap();
        assert!(matches!(
            cache.read_trusted(&d, &digest),
            Err(TrustError::Untrusted(_))
        ));
        fs::remove_file(&path).unwrap();

        // The right name on an artifact recorded for another component.
        let other = "0".repeat(64);
        let code = &written[..written.len() - cache.trailer(&digest).len()];
        let mut planted = code.to_vec();
        planted.extend_from_slice(&cache.trailer(&other));
        write_atomic(&path, &planted).unwrap();
        let why = cache.read_trusted(&d, &digest).unwrap_err().to_string();
        assert!(why.contains("trailer"), "{why}");
        assert_eq!(load(), Origin::Compiled);

        // No trailer at all (a bare `Component::serialize` output).
        write_atomic(&path, code).unwrap();
        assert!(matches!(
            cache.read_trusted(&d, &digest),
            Err(TrustError::Untrusted(_))
        ));
        assert!(matches!(
            cache.read_trusted(&d, &other),
            Err(TrustError::Missing)
        ));
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn the_digest_index_answers_only_for_the_same_file() {
        let d = tmpdir("src");
        let cache = ArtifactCache::new(Some(d.clone()), &Engine::default());
        let digest = "ab".repeat(32);
        let old = SourceId {
            dev: 1,
            ino: 2,
            size: 3,
            mtime: (1_000, 5),
            ctime: (1_000, 6),
        };
        assert_eq!(cache.known_digest("p", &old), None);
        cache.remember_digest("p", &old, &digest);
        assert_eq!(cache.known_digest("p", &old), Some(digest.clone()));
        // Any difference in the identity is another file.
        for other in [
            SourceId {
                ino: 9,
                ..old.clone()
            },
            SourceId {
                size: 4,
                ..old.clone()
            },
            SourceId {
                mtime: (1_000, 7),
                ..old.clone()
            },
            SourceId {
                ctime: (1_001, 6),
                ..old.clone()
            },
        ] {
            assert_eq!(cache.known_digest("p", &other), None, "{other:?}");
        }
        assert_eq!(cache.known_digest("q", &old), None);
        // A record others could have written is not believed.
        let record = d.join("p.source");
        fs::set_permissions(&record, fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(cache.known_digest("p", &old), None);
        fs::set_permissions(&record, fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(cache.known_digest("p", &old), Some(digest.clone()));
        // A file changed just now may change again within its timestamp
        // granularity: not recorded.
        let f = d.join("p.wasm");
        fs::write(&f, b"fresh").unwrap();
        let fresh = SourceId::of(&fs::metadata(&f).unwrap());
        cache.remember_digest("p", &fresh, &digest);
        assert_eq!(cache.known_digest("p", &fresh), None);
        assert_eq!(cache.known_digest("p", &old), Some(digest));
        fs::remove_dir_all(&d).unwrap();
    }
}
