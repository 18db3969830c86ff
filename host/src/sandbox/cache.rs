//! Precompiled-artifact cache.
//!
//! Compiling a component with Cranelift costs tens of milliseconds; loading
//! a precompiled artifact costs well under one. Artifacts are keyed by the
//! sha256 of the component *and* a tag of the engine that compiled them, so a
//! changed plugin or a changed host never loads a stale artifact.
//!
//! Trust: `Component::deserialize_file` maps native code and runs it without
//! verification, so a tampered artifact is arbitrary code execution in the
//! host, outside the sandbox. An artifact is therefore used only if this host
//! could have written it: the cache directory and the file must be owned by
//! our effective uid and writable by nobody else, and the file must be a
//! regular file (not a symlink). Otherwise the component is compiled from
//! source and the cache is left alone. The file name carries the source
//! digest, and we only ever write an artifact under the digest of the bytes
//! we compiled.

use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use wasmtime::component::Component;
use wasmtime::Engine;

use crate::fsutil::write_atomic;
use crate::log;

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

    /// True if a trusted artifact exists for `digest`.
    pub fn is_cached(&self, digest: &str) -> bool {
        match (&self.dir, self.artifact_path(digest)) {
            (Some(dir), Some(path)) => trusted_dir(dir).is_ok() && trusted_file(&path).is_ok(),
            _ => false,
        }
    }

    /// (components compiled, artifacts loaded) by this process.
    pub fn stats(&self) -> (u64, u64) {
        (
            self.compiled.load(Ordering::Relaxed),
            self.loaded.load(Ordering::Relaxed),
        )
    }

    /// Load the artifact for `digest` or compile `bytes` and store one.
    pub fn load_or_compile(
        &self,
        engine: &Engine,
        name: &str,
        digest: &str,
        bytes: &[u8],
    ) -> wasmtime::Result<(Component, Origin)> {
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

        if let Some(path) = &path {
            match trusted_file(path) {
                Ok(()) => {
                    // SAFETY: the file is ours (see the module docs for the
                    // trust rule) and was produced by `Component::serialize`
                    // of an engine with the same compatibility tag; wasmtime
                    // re-validates the header and refuses a mismatch.
                    match unsafe { Component::deserialize_file(engine, path) } {
                        Ok(c) => {
                            self.loaded.fetch_add(1, Ordering::Relaxed);
                            log::debug(format_args!("{name}: loaded {}", path.display()));
                            return Ok((c, Origin::Cached));
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
        }

        let component = Component::new(engine, bytes)?;
        self.compiled.fetch_add(1, Ordering::Relaxed);
        log::debug(format_args!("{name}: compiled ({digest})"));
        if let Some(path) = &path {
            match component.serialize() {
                Ok(art) => {
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
    let euid = rustix::process::geteuid().as_raw();
    if meta.uid() != euid {
        return Err(TrustError::Untrusted(format!(
            "{what} is owned by uid {}, not {euid}",
            meta.uid()
        )));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(TrustError::Untrusted(format!(
            "{what} is group- or world-writable (mode {:o})",
            meta.mode() & 0o7777
        )));
    }
    Ok(())
}

fn trusted_dir(dir: &Path) -> Result<(), TrustError> {
    let meta = fs::symlink_metadata(dir)?;
    if !meta.is_dir() {
        return Err(TrustError::Untrusted("not a directory".into()));
    }
    owned_and_private(&meta, "the directory")
}

fn trusted_file(path: &Path) -> Result<(), TrustError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(TrustError::Missing),
        Err(e) => return Err(e.into()),
    };
    if !meta.is_file() {
        return Err(TrustError::Untrusted("not a regular file".into()));
    }
    owned_and_private(&meta, "the artifact")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

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
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn symlinked_or_writable_artifact_is_not_trusted() {
        let d = tmpdir("art");
        ensure_dir(&d).unwrap();
        let real = d.join("real");
        write_atomic(&real, b"x").unwrap();
        assert!(trusted_file(&real).is_ok());
        let link = d.join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(matches!(trusted_file(&link), Err(TrustError::Untrusted(_))));
        fs::set_permissions(&real, fs::Permissions::from_mode(0o666)).unwrap();
        assert!(matches!(trusted_file(&real), Err(TrustError::Untrusted(_))));
        assert!(matches!(
            trusted_file(&d.join("none")),
            Err(TrustError::Missing)
        ));
        fs::remove_dir_all(&d).unwrap();
    }
}
