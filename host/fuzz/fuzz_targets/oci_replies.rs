//! What a registry (or whatever answers in its place) sends `wasm-cni pull`:
//! a manifest, an artifact config, a blob, a header (a `WWW-Authenticate`
//! challenge, a `Location`, an error body), plus an auth file and an image
//! reference as operators write them; NUL-separated. The manifest and blob
//! are also read as a signature image's manifest and payload, and the blob
//! as a public key and a signature (`image::sign`).
//!
//! Properties: nothing panics; an accepted manifest names one
//! `application/wasm` layer and a wasm config within their size limits; a
//! descriptor accepts exactly the content of its size and digest; an
//! accepted reference prints as text that parses back to itself; a URL
//! joined with any Location stays an http(s) URL with a path.

#![no_main]

use libfuzzer_sys::fuzz_target;
use wasm_cni_image::registry::{describe_error, parse_challenge, Challenge, Url};
use wasm_cni_image::sign::{self, PublicKey, MAX_PAYLOAD_BYTES, MAX_SIGNATURES};
use wasm_cni_image::{
    auth, component_interface, parse_config, parse_manifest, Digest, ImageRef, CONFIG_MEDIA_TYPE,
    LAYER_MEDIA_TYPE, MAX_COMPONENT_BYTES, MAX_CONFIG_BYTES,
};

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(6, |b| *b == 0);
    let mut next = || parts.next().unwrap_or_default();
    let (manifest, config, blob, header, auth_file, reference) =
        (next(), next(), next(), next(), next(), next());

    if let Ok(m) = parse_manifest(manifest) {
        assert_eq!(m.layer.media_type, LAYER_MEDIA_TYPE);
        assert_eq!(m.config.media_type, CONFIG_MEDIA_TYPE);
        assert!(m.layer.size <= MAX_COMPONENT_BYTES && m.config.size <= MAX_CONFIG_BYTES);
        let _ = parse_config(config, &m);
        let exact = blob.len() as u64 == m.layer.size && Digest::of(blob) == m.layer.digest;
        assert_eq!(m.layer.verify("layer", blob).is_ok(), exact);
    }
    let _ = component_interface(blob);

    // Signatures: a signature manifest names at most MAX_SIGNATURES
    // payloads, each within its limit; a payload claim names a digest; a
    // key and a signature from the same hostile bytes never verify.
    if let Ok(signed) = sign::parse_signature_manifest(manifest) {
        assert!(!signed.is_empty() && signed.len() <= MAX_SIGNATURES);
        for s in &signed {
            assert!(s.payload.size <= MAX_PAYLOAD_BYTES && s.signature.len() <= 512);
        }
    }
    if let Ok(claim) = sign::parse_payload(blob) {
        assert_eq!(claim.manifest.hex().len(), 64);
    }
    let text = String::from_utf8_lossy(blob);
    if let Ok(key) = PublicKey::from_pem(&text) {
        assert_eq!(PublicKey::from_pem(&key.to_pem()), Ok(key.clone()));
        let _ = key.verifies(config, &String::from_utf8_lossy(header));
    }

    let header = String::from_utf8_lossy(header);
    if let Ok(Challenge::Bearer { realm, params }) = parse_challenge(&header) {
        assert!(params.iter().all(|(k, _)| k != "realm"), "{realm}");
    }
    let _ = describe_error(hyper::StatusCode::NOT_FOUND, header.as_bytes());
    let _ = auth::find(auth_file, "reg.example:5000", "team/tuning");

    let reference = String::from_utf8_lossy(reference);
    if let Ok(r) = reference.parse::<ImageRef>() {
        let again: ImageRef = r.to_string().parse().expect("a printed reference parses");
        assert_eq!(again, r);
        let _ = r.api_host();
        let _ = r.by_digest();
    }
    if let Ok(u) = Url::parse(&reference) {
        if let Ok(j) = u.join(&header) {
            assert!(j.target.starts_with('/') && j.port > 0, "{j:?}");
        }
    }
});
