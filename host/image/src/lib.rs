//! Plugins distributed as OCI artifacts, in the CNCF wasm layout: a manifest
//! whose config is `application/vnd.wasm.config.v0+json` (the component's
//! imports and exports) and whose one layer is the `application/wasm`
//! component.
//!
//! This module holds what needs no network: image references, the artifact's
//! documents (parsed and checked as a hostile registry could write them), and
//! the node's content-addressed [`store`]. The [`registry`] client that fills
//! the store is used by `wasm-cni pull` and `push` only: a CNI verb reads the
//! store and never contacts a registry.
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod auth;
pub mod registry;
pub mod sign;
pub mod store;
pub mod trust;

use std::fmt;
use std::str::FromStr;
use std::time::SystemTime;

use serde_json::{json, Map, Value};

pub use store::ImageStore;

pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
pub const INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
pub const LAYER_MEDIA_TYPE: &str = "application/wasm";

/// Registries must accept manifests of 4 MiB (distribution spec); nothing
/// larger is read.
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// Bigger than any plugin; a layer that claims more is refused before a
/// byte of it is read.
pub const MAX_COMPONENT_BYTES: u64 = 256 << 20;

/// Why an image could not be used: every one is an operator's message.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ImageError {
    #[error("invalid image reference {reference:?}: {why}")]
    BadReference { reference: String, why: String },
    #[error("image {0} is named by tag only; a chain names its image by digest (REPO@sha256:…): `wasm-cni pull {0}` prints it")]
    Unpinned(String),
    #[error(
        "image {image} is not in the image store {dir}: run `wasm-cni pull {image}` on this node"
    )]
    NotPulled { image: String, dir: String },
    #[error("{what}: {why}")]
    Invalid { what: String, why: String },
    #[error("{what}: content does not match its digest: expected {expected}, has {actual}")]
    DigestMismatch {
        what: String,
        expected: String,
        actual: String,
    },
    /// The node's trust policy does not let this image run.
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Io(String),
}

fn invalid(what: &str, why: impl Into<String>) -> ImageError {
    ImageError::Invalid {
        what: what.to_string(),
        why: why.into(),
    }
}

/// A `sha256:` content digest (the only algorithm accepted).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest {
    hex: String,
}

impl Digest {
    pub fn of(bytes: &[u8]) -> Self {
        use sha2::Digest as _;
        let sum = sha2::Sha256::digest(bytes);
        Digest {
            hex: sum.iter().map(|b| format!("{b:02x}")).collect(),
        }
    }

    /// The 64 lowercase hex characters.
    pub fn hex(&self) -> &str {
        &self.hex
    }
}

impl FromStr for Digest {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let Some((algorithm, hex)) = s.split_once(':') else {
            return Err(format!("digest {s:?} has no algorithm (sha256:…)"));
        };
        if algorithm != "sha256" {
            return Err(format!(
                "digest {s:?}: only sha256 digests are accepted, not {algorithm:?}"
            ));
        }
        if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(format!(
                "digest {s:?}: expected 64 lowercase hex characters"
            ));
        }
        Ok(Digest {
            hex: hex.to_string(),
        })
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex)
    }
}

/// `[REGISTRY/]REPOSITORY[:TAG][@sha256:DIGEST]`, as docker and podman read
/// it: the first component is a registry when it has a `.` or a `:`, or is
/// `localhost`; otherwise the registry is docker.io (with `library/` for
/// one-component names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    pub registry: String,
    pub repository: String,
    pub tag: Option<String>,
    pub digest: Option<Digest>,
}

impl ImageRef {
    /// The same image pinned to `digest` (tag kept for display).
    pub fn pinned(&self, digest: Digest) -> ImageRef {
        ImageRef {
            digest: Some(digest),
            ..self.clone()
        }
    }

    /// REGISTRY/REPOSITORY@sha256:… — the form a chain entry names.
    pub fn by_digest(&self) -> Option<String> {
        let digest = self.digest.as_ref()?;
        Some(format!("{}/{}@{digest}", self.registry, self.repository))
    }

    /// What the manifest is fetched by: the digest when there is one.
    pub fn manifest_reference(&self) -> String {
        match (&self.digest, &self.tag) {
            (Some(d), _) => d.to_string(),
            (None, Some(t)) => t.clone(),
            (None, None) => "latest".into(),
        }
    }

    /// The host that serves the registry API (docker.io's is another).
    pub fn api_host(&self) -> &str {
        if self.registry == "docker.io" {
            "registry-1.docker.io"
        } else {
            &self.registry
        }
    }
}

impl FromStr for ImageRef {
    type Err = ImageError;

    fn from_str(s: &str) -> Result<Self, ImageError> {
        let bad = |why: &str| ImageError::BadReference {
            reference: s.to_string(),
            why: why.to_string(),
        };
        if s.len() > 1024 {
            return Err(bad("longer than 1024 characters"));
        }
        let (rest, digest) = match s.split_once('@') {
            Some((rest, d)) => (rest, Some(d.parse::<Digest>().map_err(|e| bad(&e))?)),
            None => (s, None),
        };
        // A tag is after the last ':' that follows the last '/' (a ':'
        // before it is a registry port).
        let slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match rest[slash..].rfind(':') {
            Some(i) => (&rest[..slash + i], Some(&rest[slash + i + 1..])),
            None => (rest, None),
        };
        if let Some(tag) = tag {
            let ok = !tag.is_empty()
                && tag.len() <= 128
                && !tag.starts_with(['.', '-'])
                && tag
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
            if !ok {
                return Err(bad(
                    "a tag is 1–128 of [A-Za-z0-9_.-], not starting with . or -",
                ));
            }
        }
        let (registry, repository) = match name.split_once('/') {
            // docker.io/busybox is docker.io/library/busybox.
            Some(("docker.io", path)) if !path.contains('/') => {
                ("docker.io".to_string(), format!("library/{path}"))
            }
            Some((first, path)) if first.contains(['.', ':']) || first == "localhost" => {
                (first.to_string(), path.to_string())
            }
            Some(_) => ("docker.io".to_string(), name.to_string()),
            None => ("docker.io".to_string(), format!("library/{name}")),
        };
        if !valid_registry(&registry) {
            return Err(bad("the registry must be HOST or HOST:PORT"));
        }
        if !valid_repository(&repository) {
            return Err(bad(
                "a repository is lowercase path components of [a-z0-9] joined by ., _, __ or -",
            ));
        }
        Ok(ImageRef {
            registry,
            repository,
            tag: tag.map(str::to_string),
            digest,
        })
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

fn valid_registry(r: &str) -> bool {
    let (host, port) = if let Some(v6) = r.strip_prefix('[') {
        match v6.split_once(']') {
            Some((addr, rest)) if addr.parse::<std::net::Ipv6Addr>().is_ok() => {
                (addr, rest.strip_prefix(':'))
            }
            _ => return false,
        }
    } else {
        match r.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (r, None),
        }
    };
    let host_ok = r.starts_with('[')
        || (!host.is_empty()
            && host.split('.').all(|l| {
                !l.is_empty()
                    && !l.starts_with('-')
                    && !l.ends_with('-')
                    && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            }));
    let port_ok = port.is_none_or(|p| p.parse::<u16>().is_ok_and(|n| n > 0));
    host_ok && port_ok
}

/// The distribution spec's path grammar:
/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(\/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*`.
fn valid_repository(r: &str) -> bool {
    r.len() <= 255
        && r.split('/').all(|part| {
            let b = part.as_bytes();
            let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
            if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
                return false;
            }
            let mut i = 0;
            while i < b.len() {
                if alnum(b[i]) {
                    i += 1;
                    continue;
                }
                let start = i;
                while i < b.len() && !alnum(b[i]) {
                    i += 1;
                }
                let sep = &part[start..i];
                if !(sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|c| c == b'-')) {
                    return false;
                }
            }
            true
        })
}

/// An OCI content descriptor, as far as an artifact needs one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    pub media_type: String,
    pub digest: Digest,
    pub size: u64,
}

impl Descriptor {
    fn of(media_type: &str, bytes: &[u8]) -> Self {
        Descriptor {
            media_type: media_type.to_string(),
            digest: Digest::of(bytes),
            size: bytes.len() as u64,
        }
    }

    fn to_json(&self) -> Value {
        json!({"mediaType": self.media_type, "digest": self.digest.to_string(), "size": self.size})
    }

    fn parse(what: &str, v: Option<&Value>, max: u64) -> Result<Self, ImageError> {
        let Some(Value::Object(m)) = v else {
            return Err(invalid(what, "expected a descriptor object"));
        };
        let media_type = match m.get("mediaType") {
            Some(Value::String(s)) => s.clone(),
            _ => return Err(invalid(what, "mediaType must be a string")),
        };
        let digest = match m.get("digest") {
            Some(Value::String(s)) => s.parse::<Digest>().map_err(|e| invalid(what, e))?,
            _ => return Err(invalid(what, "digest must be a string")),
        };
        let size = m
            .get("size")
            .and_then(Value::as_u64)
            .ok_or_else(|| invalid(what, "size must be a non-negative integer"))?;
        if size > max {
            return Err(invalid(
                what,
                format!("size {size} is over the limit of {max} bytes"),
            ));
        }
        Ok(Descriptor {
            media_type,
            digest,
            size,
        })
    }

    /// `bytes` are exactly the content this descriptor names.
    pub fn verify(&self, what: &str, bytes: &[u8]) -> Result<(), ImageError> {
        if bytes.len() as u64 != self.size {
            return Err(invalid(
                what,
                format!("{} bytes, its descriptor says {}", bytes.len(), self.size),
            ));
        }
        verify_digest(what, &self.digest, bytes)
    }
}

pub fn verify_digest(what: &str, expected: &Digest, bytes: &[u8]) -> Result<(), ImageError> {
    let actual = Digest::of(bytes);
    if &actual != expected {
        return Err(ImageError::DigestMismatch {
            what: what.to_string(),
            expected: expected.to_string(),
            actual: actual.to_string(),
        });
    }
    Ok(())
}

/// A manifest that is a wasm component artifact: its config and its one
/// component layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WasmManifest {
    pub config: Descriptor,
    pub layer: Descriptor,
}

/// Parse and check a manifest as a registry sent it (or as the store holds
/// it). Anything but an OCI image manifest with the wasm config and exactly
/// one `application/wasm` layer is refused, with what it was instead.
pub fn parse_manifest(bytes: &[u8]) -> Result<WasmManifest, ImageError> {
    let what = "manifest";
    if bytes.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(invalid(what, "larger than 4 MiB"));
    }
    let v: Value =
        serde_json::from_slice(bytes).map_err(|e| invalid(what, format!("not JSON: {e}")))?;
    let Value::Object(m) = &v else {
        return Err(invalid(what, "not a JSON object"));
    };
    if m.get("schemaVersion").and_then(Value::as_u64) != Some(2) {
        return Err(invalid(what, "schemaVersion must be 2"));
    }
    let media_type = m.get("mediaType").map(|t| t.as_str().unwrap_or("?"));
    if m.contains_key("manifests") || media_type == Some(INDEX_MEDIA_TYPE) {
        return Err(invalid(
            what,
            "is an image index (several platforms); a wasm component artifact is one manifest",
        ));
    }
    if let Some(other) = media_type.filter(|t| *t != MANIFEST_MEDIA_TYPE) {
        return Err(invalid(
            what,
            format!("media type {other:?} is not an OCI image manifest"),
        ));
    }
    let config = Descriptor::parse("manifest config", m.get("config"), MAX_CONFIG_BYTES)?;
    if config.media_type != CONFIG_MEDIA_TYPE {
        return Err(invalid(
            what,
            format!(
                "config media type {:?}: not a wasm component artifact ({CONFIG_MEDIA_TYPE})",
                config.media_type
            ),
        ));
    }
    let layers = match m.get("layers") {
        Some(Value::Array(l)) => l,
        _ => return Err(invalid(what, "layers must be a list")),
    };
    let [layer] = layers.as_slice() else {
        return Err(invalid(
            what,
            format!("{} layers; a wasm component artifact has one", layers.len()),
        ));
    };
    let layer = Descriptor::parse("manifest layer", Some(layer), MAX_COMPONENT_BYTES)?;
    if layer.media_type != LAYER_MEDIA_TYPE {
        return Err(invalid(
            what,
            format!(
                "layer media type {:?}, expected {LAYER_MEDIA_TYPE}",
                layer.media_type
            ),
        ));
    }
    Ok(WasmManifest { config, layer })
}

/// What the artifact's config says about the component.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ComponentSummary {
    pub imports: Vec<String>,
    pub exports: Vec<String>,
}

/// Parse the config blob: `architecture` "wasm", `layerDigests` (when
/// present) naming the manifest's layer, and the component's interface.
pub fn parse_config(bytes: &[u8], manifest: &WasmManifest) -> Result<ComponentSummary, ImageError> {
    let what = "artifact config";
    let v: Value =
        serde_json::from_slice(bytes).map_err(|e| invalid(what, format!("not JSON: {e}")))?;
    let Value::Object(m) = &v else {
        return Err(invalid(what, "not a JSON object"));
    };
    if m.get("architecture").and_then(Value::as_str) != Some("wasm") {
        return Err(invalid(what, "architecture must be \"wasm\""));
    }
    if let Some(digests) = m.get("layerDigests") {
        let listed: Option<Vec<&str>> = digests
            .as_array()
            .and_then(|l| l.iter().map(Value::as_str).collect());
        if listed != Some(vec![manifest.layer.digest.to_string().as_str()]) {
            return Err(invalid(
                what,
                "layerDigests does not name the manifest's layer",
            ));
        }
    }
    let names = |key: &str| -> Result<Vec<String>, ImageError> {
        match m.get("component").and_then(|c| c.get(key)) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(l)) => l
                .iter()
                .map(|n| {
                    n.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| invalid(what, format!("component.{key} must be strings")))
                })
                .collect(),
            Some(_) => Err(invalid(what, format!("component.{key} must be a list"))),
        }
    };
    Ok(ComponentSummary {
        imports: names("imports")?,
        exports: names("exports")?,
    })
}

/// The top-level imports and exports of a component binary, read without
/// compiling it. A core module or anything else is refused.
pub fn component_interface(bytes: &[u8]) -> Result<ComponentSummary, ImageError> {
    use wasmparser::{Encoding, Parser, Payload};
    let what = "component";
    let mut summary = ComponentSummary::default();
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(|e| invalid(what, format!("not a valid component: {e}")))?;
        match payload {
            Payload::Version { encoding, .. } => {
                if depth == 0 && encoding != Encoding::Component {
                    return Err(invalid(
                        what,
                        "is a core module; plugins are components (wasm-tools component new)",
                    ));
                }
                depth += 1;
            }
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(reader) if depth == 1 => {
                for import in reader {
                    let import =
                        import.map_err(|e| invalid(what, format!("not a valid component: {e}")))?;
                    summary.imports.push(import.name.name.to_string());
                }
            }
            Payload::ComponentExportSection(reader) if depth == 1 => {
                for export in reader {
                    let export =
                        export.map_err(|e| invalid(what, format!("not a valid component: {e}")))?;
                    summary.exports.push(export.name.name.to_string());
                }
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(invalid(what, "truncated"));
    }
    Ok(summary)
}

/// The three documents `wasm-cni push` uploads.
#[derive(Debug, Clone)]
pub struct Artifact {
    pub config: Vec<u8>,
    pub manifest: Vec<u8>,
    pub layer: Descriptor,
    pub config_descriptor: Descriptor,
}

impl Artifact {
    pub fn manifest_digest(&self) -> Digest {
        Digest::of(&self.manifest)
    }
}

/// Package a component in the CNCF wasm layout (config fields as
/// bytecodealliance/oci-wasm writes them).
pub fn build_artifact(component: &[u8], created: SystemTime) -> Result<Artifact, ImageError> {
    if component.len() as u64 > MAX_COMPONENT_BYTES {
        return Err(invalid("component", "larger than 256 MiB"));
    }
    let summary = component_interface(component)?;
    let layer = Descriptor::of(LAYER_MEDIA_TYPE, component);
    let mut config = Map::new();
    config.insert("created".into(), rfc3339(created).into());
    config.insert("architecture".into(), "wasm".into());
    config.insert("os".into(), "wasip2".into());
    config.insert("layerDigests".into(), json!([layer.digest.to_string()]));
    config.insert(
        "component".into(),
        json!({"exports": summary.exports, "imports": summary.imports}),
    );
    let config = serde_json::to_vec(&Value::Object(config))
        .map_err(|e| ImageError::Io(format!("serialising the config: {e}")))?;
    let config_descriptor = Descriptor::of(CONFIG_MEDIA_TYPE, &config);
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": config_descriptor.to_json(),
        "layers": [layer.to_json()],
    });
    let manifest = serde_json::to_vec(&manifest)
        .map_err(|e| ImageError::Io(format!("serialising the manifest: {e}")))?;
    Ok(Artifact {
        config,
        manifest,
        layer,
        config_descriptor,
    })
}

/// `YYYY-MM-DDTHH:MM:SSZ` (UTC), without a date crate.
pub fn rfc3339(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests;
