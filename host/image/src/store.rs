//! The node's image store: an OCI image layout directory (`oci-layout`,
//! `index.json`, `blobs/sha256/<hex>`), so that skopeo, oras or umoci can
//! read it too. Blobs are named by their digest and written whole (temporary
//! file, fsync, rename); `index.json` lists what was pulled under which name
//! and is only for people: resolving an image needs its manifest digest and
//! nothing else.
//!
//! Resolving checks what it reads: the manifest's bytes against the digest
//! the chain names, the layer's size against the manifest; the component's
//! own digest is then the load's pin (checked by the sandbox as any `sha256`
//! pin is), so a blob changed on disk is refused, not run.

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::{
    parse_manifest, Descriptor, Digest, ImageError, ImageRef, WasmManifest, MANIFEST_MEDIA_TYPE,
    MAX_MANIFEST_BYTES,
};
use wasm_cni_base::fsutil::{lock_within, open_lock_file, write_atomic};

/// The store's lock, beside the layout's own files. Not `.lock`, the name an
/// older wasm-cni created readable by anyone: a descriptor someone opened
/// on that file before an upgrade must not hold this one.
const LOCK_FILE: &str = ".wasm-cni.lock";
/// How long a pull or a removal waits for another.
pub const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Repositories one manifest may be recorded as pulled from, and the size
/// of that record.
const MAX_PROVENANCE: usize = 64;
const MAX_PROVENANCE_BYTES: u64 = 64 << 10;

/// The annotation OCI layouts name an entry of index.json by.
const REF_NAME: &str = "org.opencontainers.image.ref.name";

#[derive(Debug, Clone)]
pub struct ImageStore {
    dir: PathBuf,
}

/// A chain entry's image, found in the store.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// The component file (a blob).
    pub path: PathBuf,
    /// Its sha256, which the load must find.
    pub pin: String,
}

/// One entry of index.json.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    pub name: String,
    pub manifest: Digest,
    pub size: u64,
}

fn io_err(what: &Path, e: io::Error) -> ImageError {
    ImageError::Io(format!("{}: {e}", what.display()))
}

impl ImageStore {
    pub fn new(dir: &Path) -> Self {
        ImageStore {
            dir: dir.to_path_buf(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn blob_path(&self, digest: &Digest) -> PathBuf {
        self.dir.join("blobs/sha256").join(digest.hex())
    }

    /// Read a blob of at most `max` bytes; `None` when it is not there.
    fn read_blob(&self, digest: &Digest, max: u64) -> Result<Option<Vec<u8>>, ImageError> {
        read_bounded(&self.blob_path(digest), max)
    }

    /// The manifest stored under `digest`, verified and parsed.
    pub fn manifest(&self, digest: &Digest) -> Result<Option<WasmManifest>, ImageError> {
        let Some(bytes) = self.read_blob(digest, MAX_MANIFEST_BYTES)? else {
            return Ok(None);
        };
        let what = format!("stored manifest {digest}");
        super::verify_digest(&what, digest, &bytes)?;
        parse_manifest(&bytes).map(Some)
    }

    /// Where the component of a chain entry's `image` is, and the digest it
    /// must have. Reads two small files; contacts nothing.
    pub fn resolve(&self, image: &ImageRef) -> Result<Resolved, ImageError> {
        let Some(digest) = &image.digest else {
            return Err(ImageError::Unpinned(image.to_string()));
        };
        let not_pulled = || ImageError::NotPulled {
            image: image.to_string(),
            dir: self.dir.display().to_string(),
        };
        let manifest = self.manifest(digest)?.ok_or_else(not_pulled)?;
        let path = self.blob_path(&manifest.layer.digest);
        match fs::metadata(&path) {
            Ok(m) if m.len() == manifest.layer.size => {}
            Ok(m) => {
                return Err(ImageError::Invalid {
                    what: format!("stored component of {image}"),
                    why: format!(
                        "{} bytes, the manifest says {}; pull it again",
                        m.len(),
                        manifest.layer.size
                    ),
                })
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(not_pulled()),
            Err(e) => return Err(io_err(&path, e)),
        }
        Ok(Resolved {
            path,
            pin: manifest.layer.digest.hex().to_string(),
        })
    }

    /// True when the blob is there with exactly this content (pull skips
    /// it then; a damaged one is fetched again).
    pub fn has_blob(&self, d: &Descriptor) -> bool {
        matches!(
            self.read_blob(&d.digest, d.size),
            Ok(Some(b)) if d.verify("blob", &b).is_ok()
        )
    }

    /// Store verified content under its digest.
    pub fn put_blob(&self, digest: &Digest, bytes: &[u8]) -> Result<(), ImageError> {
        super::verify_digest("blob", digest, bytes)?;
        self.init()?;
        let path = self.blob_path(digest);
        write_atomic(&path, bytes).map_err(|e| io_err(&path, e))
    }

    fn init(&self) -> Result<(), ImageError> {
        let blobs = self.dir.join("blobs/sha256");
        fs::create_dir_all(&blobs).map_err(|e| io_err(&blobs, e))?;
        let layout = self.dir.join("oci-layout");
        if !layout.exists() {
            write_atomic(&layout, br#"{"imageLayoutVersion":"1.0.0"}"#)
                .map_err(|e| io_err(&layout, e))?;
        }
        Ok(())
    }

    /// Run `f` holding the store's lock: a pull's writes (blobs, then
    /// manifest, then index) and a removal's sweep never interleave. The
    /// lock is a file only root opens (`fsutil::open_lock_file`): the
    /// store's `.lock` of old was created readable by anyone, and any local
    /// user holding it hung every pull and `images rm`. A wait ends after
    /// [`LOCK_WAIT`], naming who holds it.
    pub fn locked<T>(&self, f: impl FnOnce() -> Result<T, ImageError>) -> Result<T, ImageError> {
        self.init()?;
        let lock_path = self.dir.join(LOCK_FILE);
        let lock = open_lock_file(&lock_path).map_err(|e| io_err(&lock_path, e))?;
        let what = format!("the image store's lock {}", lock_path.display());
        lock_within(&lock, &what, LOCK_WAIT).map_err(ImageError::Io)?;
        f()
    }

    /// Where the signatures a pull verified for `manifest` are kept:
    /// `signatures/<hex>.json`, outside the OCI layout's own files.
    fn signatures_path(&self, manifest: &Digest) -> PathBuf {
        self.dir
            .join("signatures")
            .join(format!("{}.json", manifest.hex()))
    }

    /// Keep the signatures of `manifest` (each payload and its base64
    /// signature), for loads to check against the policy of the day, with
    /// those kept from its pulls from other repositories (each names the
    /// repository it signs for). Under [`Self::locked`].
    pub fn put_signatures(
        &self,
        manifest: &Digest,
        signatures: &[(Vec<u8>, String)],
    ) -> Result<(), ImageError> {
        use base64::Engine as _;
        // A kept file that no longer reads is replaced, not kept.
        let mut all = self.signatures(manifest).unwrap_or_default();
        for s in signatures {
            if !all.contains(s) {
                all.push(s.clone());
            }
        }
        let keep = all.len().saturating_sub(super::sign::MAX_SIGNATURES);
        let list: Vec<Value> = all[keep..]
            .iter()
            .map(|(payload, sig)| {
                json!({
                    "payload": base64::engine::general_purpose::STANDARD.encode(payload),
                    "signature": sig,
                })
            })
            .collect();
        let path = self.signatures_path(manifest);
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
        }
        let bytes = serde_json::to_vec(&list)
            .map_err(|e| ImageError::Io(format!("{}: {e}", path.display())))?;
        write_atomic(&path, &bytes).map_err(|e| io_err(&path, e))
    }

    /// The signatures kept for `manifest`; none when its pull verified
    /// none. Read as untrusted as a registry's reply: bounded, and each
    /// one checked by the policy again.
    pub fn signatures(&self, manifest: &Digest) -> Result<Vec<(Vec<u8>, String)>, ImageError> {
        use base64::Engine as _;
        let path = self.signatures_path(manifest);
        let bad = |why: String| ImageError::Invalid {
            what: path.display().to_string(),
            why,
        };
        let Some(bytes) = read_bounded(&path, MAX_MANIFEST_BYTES)? else {
            return Ok(Vec::new());
        };
        let list: Vec<Value> = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
        list.iter()
            .take(super::sign::MAX_SIGNATURES)
            .map(|one| {
                let field = |k: &str| one.get(k).and_then(Value::as_str);
                match (field("payload"), field("signature")) {
                    (Some(p), Some(sig)) => base64::engine::general_purpose::STANDARD
                        .decode(p)
                        .map(|p| (p, sig.to_string()))
                        .map_err(|e| bad(e.to_string())),
                    _ => Err(bad("an entry without payload and signature".into())),
                }
            })
            .collect()
    }

    /// Where the provenance of `manifest` is kept:
    /// `provenance/<hex>.json`, beside its signatures.
    fn provenance_path(&self, manifest: &Digest) -> PathBuf {
        self.dir
            .join("provenance")
            .join(format!("{}.json", manifest.hex()))
    }

    /// Record that this node pulled `manifest` from `image`'s repository
    /// (`REGISTRY/REPOSITORY`), beside every repository it was pulled from
    /// before. Under [`Self::locked`].
    pub fn add_provenance(&self, manifest: &Digest, image: &ImageRef) -> Result<(), ImageError> {
        let mut from = self.provenance(manifest)?;
        let repository = super::sign::docker_reference(image);
        if from.contains(&repository) {
            return Ok(());
        }
        if from.len() >= MAX_PROVENANCE {
            return Err(ImageError::Invalid {
                what: format!("provenance of {manifest}"),
                why: format!(
                    "pulled from {MAX_PROVENANCE} repositories already; `wasm-cni images rm` it first"
                ),
            });
        }
        from.push(repository);
        let path = self.provenance_path(manifest);
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
        }
        let bytes = serde_json::to_vec(&json!({ "repositories": from }))
            .map_err(|e| ImageError::Io(format!("{}: {e}", path.display())))?;
        write_atomic(&path, &bytes).map_err(|e| io_err(&path, e))
    }

    /// The repositories (`REGISTRY/REPOSITORY`) this node pulled `manifest`
    /// from, in the order it did. A store an older wasm-cni filled has no
    /// such record: the names its index.json gives that manifest stand for
    /// it (that wasm-cni recorded each pull there). Read as untrusted as
    /// the signatures: bounded, and names that do not parse are skipped.
    pub fn provenance(&self, manifest: &Digest) -> Result<Vec<String>, ImageError> {
        let path = self.provenance_path(manifest);
        let bad = |why: String| ImageError::Invalid {
            what: path.display().to_string(),
            why,
        };
        let Some(bytes) = read_bounded(&path, MAX_PROVENANCE_BYTES)? else {
            let mut named: Vec<String> = Vec::new();
            for listed in self.index()?.iter().filter(|l| l.manifest == *manifest) {
                if let Ok(image) = listed.name.parse::<ImageRef>() {
                    let repository = super::sign::docker_reference(&image);
                    if !named.contains(&repository) {
                        named.push(repository);
                    }
                }
            }
            return Ok(named);
        };
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
        let list = v
            .get("repositories")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("no list of repositories".into()))?;
        Ok(list
            .iter()
            .take(MAX_PROVENANCE)
            .filter_map(Value::as_str)
            .filter(|r| {
                format!("{r}@sha256:{}", "0".repeat(64))
                    .parse::<ImageRef>()
                    .is_ok()
            })
            .map(str::to_string)
            .collect())
    }

    /// Name a stored manifest in index.json (an entry of the same name is
    /// replaced: a tag pulled again may point elsewhere now). Under
    /// [`Self::locked`].
    pub fn record(&self, name: &str, manifest: &Digest, size: u64) -> Result<(), ImageError> {
        let mut entries: Vec<Listed> = self
            .index()?
            .into_iter()
            .filter(|e| e.name != name)
            .collect();
        entries.push(Listed {
            name: name.to_string(),
            manifest: manifest.clone(),
            size,
        });
        self.write_index(&entries)
    }

    fn write_index(&self, entries: &[Listed]) -> Result<(), ImageError> {
        let entries: Vec<Value> = entries.iter().map(entry_json).collect();
        let index = json!({"schemaVersion": 2, "manifests": entries});
        let path = self.dir.join("index.json");
        let bytes = serde_json::to_vec_pretty(&index)
            .map_err(|e| ImageError::Io(format!("index.json: {e}")))?;
        write_atomic(&path, &bytes).map_err(|e| io_err(&path, e))
    }

    /// Forget the images named `what` (a name as listed, `REPO@sha256:…`, or
    /// a manifest digest) and delete every blob no remaining image needs.
    /// What was removed, and the bytes freed.
    pub fn remove(&self, what: &str) -> Result<(Vec<Listed>, u64), ImageError> {
        self.locked(|| {
            let (gone, kept): (Vec<Listed>, Vec<Listed>) =
                self.index()?.into_iter().partition(|e| {
                    let digest = e.manifest.to_string();
                    e.name == what || digest == what || what.ends_with(&format!("@{digest}"))
                });
            if gone.is_empty() {
                return Ok((gone, 0));
            }
            self.write_index(&kept)?;
            let mut needed = std::collections::HashSet::new();
            for e in &kept {
                needed.insert(e.manifest.hex().to_string());
                // A damaged manifest keeps only itself: its blobs are unknown.
                if let Ok(Some(m)) = self.manifest(&e.manifest) {
                    needed.insert(m.config.digest.hex().to_string());
                    needed.insert(m.layer.digest.hex().to_string());
                }
            }
            let blobs = self.dir.join("blobs/sha256");
            let mut freed = 0;
            for entry in fs::read_dir(&blobs)
                .map_err(|e| io_err(&blobs, e))?
                .flatten()
            {
                let name = entry.file_name().to_string_lossy().into_owned();
                // Temporary files of a write in progress start with a dot.
                if name.starts_with('.') || needed.contains(&name) {
                    continue;
                }
                freed += entry.metadata().map_or(0, |m| m.len());
                fs::remove_file(entry.path()).map_err(|e| io_err(&entry.path(), e))?;
            }
            for e in &gone {
                if !needed.contains(e.manifest.hex()) {
                    for path in [
                        self.signatures_path(&e.manifest),
                        self.provenance_path(&e.manifest),
                    ] {
                        match fs::remove_file(&path) {
                            Ok(()) => {}
                            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                            Err(err) => return Err(io_err(&path, err)),
                        }
                    }
                }
            }
            Ok((gone, freed))
        })
    }

    /// What index.json names, in its order. Entries this host did not
    /// write (another tool's) are listed when they are well-formed.
    pub fn index(&self) -> Result<Vec<Listed>, ImageError> {
        let path = self.dir.join("index.json");
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err(&path, e)),
        };
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| ImageError::Invalid {
            what: path.display().to_string(),
            why: e.to_string(),
        })?;
        let listed = v
            .get("manifests")
            .and_then(Value::as_array)
            .map(|l| {
                l.iter()
                    .filter_map(|e| {
                        Some(Listed {
                            name: e.get("annotations")?.get(REF_NAME)?.as_str()?.to_string(),
                            manifest: e.get("digest")?.as_str()?.parse().ok()?,
                            size: e.get("size")?.as_u64()?,
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(listed)
    }
}

/// A file of the store, read as untrusted: `None` when it is not there,
/// refused when it is over `max` bytes.
fn read_bounded(path: &Path, max: u64) -> Result<Option<Vec<u8>>, ImageError> {
    let mut bytes = Vec::new();
    match fs::File::open(path) {
        Ok(f) => f
            .take(max + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| io_err(path, e))?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(path, e)),
    };
    if bytes.len() as u64 > max {
        return Err(ImageError::Invalid {
            what: path.display().to_string(),
            why: format!("larger than {max} bytes"),
        });
    }
    Ok(Some(bytes))
}

fn entry_json(e: &Listed) -> Value {
    json!({
        "mediaType": MANIFEST_MEDIA_TYPE,
        "digest": e.manifest.to_string(),
        "size": e.size,
        "annotations": {REF_NAME: e.name},
    })
}
