//! Signatures over images, in cosign's key-based format, offline: no
//! transparency log, no certificate authority.
//!
//! A signature is an OCI image pushed beside the signed one under the tag
//! `sha256-<hex>.sig` (no referrers API needed, so docker-registry 2.8
//! serves it). Each of its layers is a simple-signing payload naming the
//! signed manifest's digest, with the ECDSA P-256 / SHA-256 signature of
//! those payload bytes (ASN.1 DER, base64) in its
//! `dev.cosignproject.cosign/signature` annotation. Keys: PKCS#8 PEM
//! private keys to sign, SubjectPublicKeyInfo PEM public keys (what
//! `cosign public-key` and `openssl pkey -pubout` print) to verify.
//!
//! Crypto is `ring`'s, already linked for TLS: no new crate, no new bytes
//! in the binary (host/bench/results/findings.md).
//!
//! Everything here parses what a registry sent: sizes are bounded before
//! anything is decoded, and every refusal says which part was wrong.

use std::path::Path;

use base64::Engine as _;
use ring::signature::{self, EcdsaKeyPair, KeyPair as _, UnparsedPublicKey};
use serde_json::{json, Value};

use super::{Descriptor, Digest, ImageRef, MANIFEST_MEDIA_TYPE};

pub const PAYLOAD_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// cosign's config media type for signature images.
pub const SIG_CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
const PAYLOAD_TYPE: &str = "cosign container image signature";

/// A payload is a small JSON document; more is not read.
pub const MAX_PAYLOAD_BYTES: u64 = 64 << 10;
/// Signatures kept for one image: cosign appends a layer per signing.
pub const MAX_SIGNATURES: usize = 64;
/// A P-256 DER signature is at most 72 bytes: 96 in base64. Room to spare,
/// not for a megabyte.
const MAX_SIGNATURE_B64: usize = 512;
const MAX_KEY_FILE: u64 = 64 << 10;

/// The tag a signature of `manifest` is pushed under.
pub fn signature_tag(manifest: &Digest) -> String {
    format!("sha256-{}.sig", manifest.hex())
}

/// The image a signature names: `REGISTRY/REPOSITORY`, as cosign writes
/// `docker-reference`.
pub fn docker_reference(image: &ImageRef) -> String {
    format!("{}/{}", image.registry, image.repository)
}

/// The simple-signing payload for `manifest` of `image`, byte for byte as
/// cosign writes it.
pub fn payload(image: &ImageRef, manifest: &Digest) -> Vec<u8> {
    let v = json!({
        "critical": {
            "identity": {"docker-reference": docker_reference(image)},
            "image": {"docker-manifest-digest": manifest.to_string()},
            "type": PAYLOAD_TYPE,
        },
        "optional": null,
    });
    // A `Value` of strings and objects always serialises.
    serde_json::to_vec(&v).unwrap_or_default()
}

/// What a payload claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub docker_reference: String,
    pub manifest: Digest,
}

/// Parse a payload as a registry sent it.
pub fn parse_payload(bytes: &[u8]) -> Result<Claim, String> {
    if bytes.len() as u64 > MAX_PAYLOAD_BYTES {
        return Err(format!("payload of {} bytes is over 64 KiB", bytes.len()));
    }
    let v: Value =
        serde_json::from_slice(bytes).map_err(|e| format!("payload is not JSON: {e}"))?;
    let critical = v
        .get("critical")
        .ok_or("payload has no `critical` section")?;
    let text = |section: &str, key: &str| -> Result<String, String> {
        critical
            .get(section)
            .and_then(|s| s.get(key))
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| format!("payload has no critical.{section}.{key} string"))
    };
    match critical.get("type").and_then(Value::as_str) {
        Some(PAYLOAD_TYPE) => {}
        other => return Err(format!("payload type is {other:?}, not {PAYLOAD_TYPE:?}")),
    }
    let manifest = text("image", "docker-manifest-digest")?
        .parse::<Digest>()
        .map_err(|e| format!("payload: {e}"))?;
    Ok(Claim {
        docker_reference: text("identity", "docker-reference")?,
        manifest,
    })
}

/// One signature as a signature image carries it: where its payload is,
/// and the base64 signature of the payload's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    pub payload: Descriptor,
    pub signature: String,
}

/// The signatures of a signature image's manifest, as a registry sent it.
/// Layers of other media types are not signatures and are skipped (cosign
/// attaches attestations the same way).
pub fn parse_signature_manifest(bytes: &[u8]) -> Result<Vec<Signed>, String> {
    if bytes.len() as u64 > super::MAX_MANIFEST_BYTES {
        return Err("signature manifest is larger than 4 MiB".into());
    }
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|e| format!("signature manifest is not JSON: {e}"))?;
    if v.get("schemaVersion").and_then(Value::as_u64) != Some(2) {
        return Err("signature manifest: schemaVersion must be 2".into());
    }
    if let Some(t) = v.get("mediaType") {
        if t.as_str() != Some(MANIFEST_MEDIA_TYPE) {
            return Err(format!(
                "signature manifest: media type {t} is not an OCI image manifest"
            ));
        }
    }
    let Some(layers) = v.get("layers").and_then(Value::as_array) else {
        return Err("signature manifest: layers must be a list".into());
    };
    let mut out = Vec::new();
    for (i, layer) in layers.iter().enumerate() {
        let desc = Descriptor::parse("signature layer", Some(layer), MAX_PAYLOAD_BYTES)
            .map_err(|e| format!("signature manifest: layer {i}: {e}"))?;
        if desc.media_type != PAYLOAD_MEDIA_TYPE {
            continue;
        }
        if out.len() == MAX_SIGNATURES {
            return Err(format!(
                "signature manifest: more than {MAX_SIGNATURES} signatures"
            ));
        }
        let signature = layer
            .get("annotations")
            .and_then(|a| a.get(SIGNATURE_ANNOTATION))
            .and_then(Value::as_str)
            .ok_or_else(|| {
                format!("signature manifest: layer {i} has no {SIGNATURE_ANNOTATION} annotation")
            })?;
        if signature.len() > MAX_SIGNATURE_B64 {
            return Err(format!(
                "signature manifest: layer {i}: a signature of {} characters is not P-256",
                signature.len()
            ));
        }
        out.push(Signed {
            payload: desc,
            signature: signature.to_string(),
        });
    }
    if out.is_empty() {
        return Err("signature manifest carries no signature layer".into());
    }
    Ok(out)
}

/// A signature image for one payload: its config, and its manifest.
pub struct SignatureImage {
    pub config: Vec<u8>,
    pub config_descriptor: Descriptor,
    pub payload: Vec<u8>,
    pub payload_descriptor: Descriptor,
    pub manifest: Vec<u8>,
}

/// The image cosign would push for `payload` signed as `signature`.
pub fn signature_image(payload: Vec<u8>, signature: &str) -> SignatureImage {
    let payload_descriptor = Descriptor::of(PAYLOAD_MEDIA_TYPE, &payload);
    let config = json!({
        "architecture": "",
        "config": {},
        "created": "0001-01-01T00:00:00Z",
        "history": [{"created": "0001-01-01T00:00:00Z"}],
        "os": "",
        "rootfs": {"type": "layers", "diff_ids": [payload_descriptor.digest.to_string()]},
    });
    let config = serde_json::to_vec(&config).unwrap_or_default();
    let config_descriptor = Descriptor::of(SIG_CONFIG_MEDIA_TYPE, &config);
    let mut layer = payload_descriptor.to_json();
    layer["annotations"] = json!({ SIGNATURE_ANNOTATION: signature });
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": config_descriptor.to_json(),
        "layers": [layer],
    });
    SignatureImage {
        manifest: serde_json::to_vec(&manifest).unwrap_or_default(),
        config,
        config_descriptor,
        payload,
        payload_descriptor,
    }
}

/// The body of the one PEM block labelled `label` in `text`.
fn pem(text: &str, label: &str) -> Result<Vec<u8>, String> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = text
        .find(&begin)
        .ok_or_else(|| format!("no {begin} block"))?;
    let body = &text[start + begin.len()..];
    let stop = body.find(&end).ok_or_else(|| format!("no {end} line"))?;
    let b64: String = body[..stop]
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|e| format!("{label} block is not base64: {e}"))
}

fn read_key_file(path: &Path) -> Result<String, String> {
    let at = |e: std::io::Error| format!("{}: {e}", path.display());
    let meta = std::fs::metadata(path).map_err(at)?;
    if meta.len() > MAX_KEY_FILE {
        return Err(format!(
            "{}: not a key file ({} bytes)",
            path.display(),
            meta.len()
        ));
    }
    std::fs::read_to_string(path).map_err(at)
}

/// An ECDSA P-256 private key, to sign with.
pub struct SigningKey(EcdsaKeyPair);

impl SigningKey {
    /// An unencrypted PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`).
    pub fn from_pem(text: &str) -> Result<Self, String> {
        if text.contains("ENCRYPTED") {
            return Err(
                "an encrypted key (cosign's own format, or PKCS#8 with a password) is \
                        not read: give an unencrypted PKCS#8 PEM P-256 key"
                    .into(),
            );
        }
        let der = pem(text, "PRIVATE KEY")?;
        let rng = ring::rand::SystemRandom::new();
        EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_ASN1_SIGNING, &der, &rng)
            .map(SigningKey)
            .map_err(|e| format!("not a PKCS#8 ECDSA P-256 private key: {e}"))
    }

    pub fn from_file(path: &Path) -> Result<Self, String> {
        Self::from_pem(&read_key_file(path)?).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The base64 DER signature of `payload`.
    pub fn sign(&self, payload: &[u8]) -> Result<String, String> {
        let rng = ring::rand::SystemRandom::new();
        let sig = self
            .0
            .sign(&rng, payload)
            .map_err(|_| "signing failed".to_string())?;
        Ok(base64::engine::general_purpose::STANDARD.encode(sig.as_ref()))
    }

    pub fn public_key(&self) -> PublicKey {
        PublicKey(self.0.public_key().as_ref().to_vec())
    }
}

/// The DER prefix of a P-256 SubjectPublicKeyInfo (id-ecPublicKey,
/// prime256v1, an uncompressed point of 65 bytes follows).
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// An ECDSA P-256 public key (the uncompressed point), to verify with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey(Vec<u8>);

impl PublicKey {
    /// A SubjectPublicKeyInfo PEM (`-----BEGIN PUBLIC KEY-----`).
    pub fn from_pem(text: &str) -> Result<Self, String> {
        let der = pem(text, "PUBLIC KEY")?;
        match der.strip_prefix(&P256_SPKI_PREFIX[..]) {
            Some(point) if point.len() == 65 && point[0] == 4 => Ok(PublicKey(point.to_vec())),
            _ => Err(
                "not an ECDSA P-256 public key (SubjectPublicKeyInfo, named curve, \
                      uncompressed point)"
                    .into(),
            ),
        }
    }

    /// The SubjectPublicKeyInfo PEM of this key.
    pub fn to_pem(&self) -> String {
        let mut der = P256_SPKI_PREFIX.to_vec();
        der.extend_from_slice(&self.0);
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        let mut out = String::from("-----BEGIN PUBLIC KEY-----\n");
        for line in b64.as_bytes().chunks(64) {
            out.push_str(&String::from_utf8_lossy(line));
            out.push('\n');
        }
        out.push_str("-----END PUBLIC KEY-----\n");
        out
    }

    /// Whether `signature` (base64 DER) is this key's over `payload`.
    pub fn verifies(&self, payload: &[u8], signature: &str) -> bool {
        let Ok(sig) = base64::engine::general_purpose::STANDARD.decode(signature.trim()) else {
            return false;
        };
        UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_ASN1, &self.0)
            .verify(payload, &sig)
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> SigningKey {
        let rng = ring::rand::SystemRandom::new();
        let doc =
            EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_ASN1_SIGNING, &rng).unwrap();
        let b64 = base64::engine::general_purpose::STANDARD.encode(doc.as_ref());
        SigningKey::from_pem(&format!(
            "-----BEGIN PRIVATE KEY-----\n{b64}\n-----END PRIVATE KEY-----\n"
        ))
        .unwrap()
    }

    fn image() -> ImageRef {
        "127.0.0.1:5000/cni/ptp:v1".parse().unwrap()
    }

    #[test]
    fn payloads_are_cosigns_and_parse_back() {
        let d = Digest::of(b"manifest");
        let p = payload(&image(), &d);
        assert_eq!(
            String::from_utf8(p.clone()).unwrap(),
            format!(
                "{{\"critical\":{{\"identity\":{{\"docker-reference\":\"127.0.0.1:5000/cni/ptp\"}},\
                 \"image\":{{\"docker-manifest-digest\":\"{d}\"}},\"type\":\"cosign container \
                 image signature\"}},\"optional\":null}}"
            )
        );
        let claim = parse_payload(&p).unwrap();
        assert_eq!(claim.manifest, d);
        assert_eq!(claim.docker_reference, "127.0.0.1:5000/cni/ptp");
    }

    #[test]
    fn a_signature_verifies_with_its_key_only() {
        let k = key();
        let p = payload(&image(), &Digest::of(b"m"));
        let sig = k.sign(&p).unwrap();
        let public = PublicKey::from_pem(&k.public_key().to_pem()).unwrap();
        assert!(public.verifies(&p, &sig));
        assert!(!public.verifies(&payload(&image(), &Digest::of(b"n")), &sig));
        assert!(!key().public_key().verifies(&p, &sig));
        assert!(!public.verifies(&p, "not base64!"));
        assert!(!public.verifies(&p, ""));
    }

    #[test]
    fn a_signature_image_parses_back_to_its_signature() {
        let k = key();
        let p = payload(&image(), &Digest::of(b"m"));
        let sig = k.sign(&p).unwrap();
        let img = signature_image(p.clone(), &sig);
        let signed = parse_signature_manifest(&img.manifest).unwrap();
        assert_eq!(signed.len(), 1);
        assert_eq!(signed[0].signature, sig);
        assert_eq!(signed[0].payload.digest, Digest::of(&p));
    }

    #[test]
    fn hostile_signature_documents_are_refused_by_part() {
        let d = Digest::of(b"x").to_string();
        let layer = |extra: &str| {
            format!(
                r#"{{"schemaVersion":2,"layers":[{{"mediaType":"{PAYLOAD_MEDIA_TYPE}","digest":"{d}","size":10{extra}}}]}}"#
            )
        };
        for (doc, why) in [
            ("[]".to_string(), "schemaVersion"),
            ("{\"schemaVersion\":2}".into(), "layers must be a list"),
            (
                layer(""),
                "no dev.cosignproject.cosign/signature annotation",
            ),
            (
                layer(&format!(
                    r#","annotations":{{"{SIGNATURE_ANNOTATION}":"{}"}}"#,
                    "A".repeat(600)
                )),
                "is not P-256",
            ),
            (
                r#"{"schemaVersion":2,"layers":[{"mediaType":"x","digest":"sha256:00","size":1}]}"#
                    .into(),
                "64 lowercase hex",
            ),
            (
                format!(
                    r#"{{"schemaVersion":2,"layers":[{{"mediaType":"other","digest":"{d}","size":1}}]}}"#
                ),
                "no signature layer",
            ),
            (
                format!(
                    r#"{{"schemaVersion":2,"layers":[{{"mediaType":"{PAYLOAD_MEDIA_TYPE}","digest":"{d}","size":99999999}}]}}"#
                ),
                "over the limit",
            ),
        ] {
            let e = parse_signature_manifest(doc.as_bytes()).unwrap_err();
            assert!(e.contains(why), "{doc}: {e}");
        }
        for (p, why) in [
            (&b"{}"[..], "no `critical`"),
            (br#"{"critical":{"type":"other"}}"#, "payload type"),
            (
                br#"{"critical":{"type":"cosign container image signature","image":{"docker-manifest-digest":"md5:1"}}}"#,
                "only sha256",
            ),
            (
                br#"{"critical":{"type":"cosign container image signature","image":{"docker-manifest-digest":"sha256:0000000000000000000000000000000000000000000000000000000000000000"}}}"#,
                "identity.docker-reference",
            ),
        ] {
            let e = parse_payload(p).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn keys_of_other_kinds_are_refused_with_what_is_wanted() {
        assert!(
            SigningKey::from_pem("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----")
                .err()
                .unwrap()
                .contains("encrypted")
        );
        assert!(SigningKey::from_pem("nothing")
            .err()
            .unwrap()
            .contains("no -----BEGIN"));
        let e = PublicKey::from_pem(
            "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n-----END PUBLIC KEY-----\n",
        )
        .unwrap_err();
        assert!(e.contains("not an ECDSA P-256 public key"), "{e}");
    }
}
