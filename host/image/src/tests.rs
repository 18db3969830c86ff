use super::*;

/// The smallest component: magic, component-layer version.
const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\x00\x01\x00";
const CORE_MODULE: &[u8] = b"\0asm\x01\x00\x00\x00";

fn digest(c: char) -> String {
    format!("sha256:{}", c.to_string().repeat(64))
}

#[test]
fn references_parse_as_docker_reads_them() {
    let r: ImageRef = "127.0.0.1:5000/wasm/bridge:1.0".parse().unwrap();
    assert_eq!(
        (
            r.registry.as_str(),
            r.repository.as_str(),
            r.tag.as_deref(),
            r.digest.is_none()
        ),
        ("127.0.0.1:5000", "wasm/bridge", Some("1.0"), true)
    );
    let d = digest('a');
    let r: ImageRef = format!("ghcr.io/o/p@{d}").parse().unwrap();
    assert_eq!(r.by_digest().unwrap(), format!("ghcr.io/o/p@{d}"));
    assert_eq!(r.manifest_reference(), d);
    let hub: ImageRef = "busybox".parse().unwrap();
    assert_eq!(
        (hub.registry.as_str(), hub.repository.as_str()),
        ("docker.io", "library/busybox")
    );
    assert_eq!(hub.api_host(), "registry-1.docker.io");
    assert_eq!(hub.manifest_reference(), "latest");
    let explicit: ImageRef = "docker.io/busybox:1".parse().unwrap();
    assert_eq!(explicit.repository, "library/busybox");
    let local: ImageRef = "localhost/x:t".parse().unwrap();
    assert_eq!(local.registry, "localhost");
    let v6: ImageRef = "[::1]:5000/a/b:c".parse().unwrap();
    assert_eq!(
        (v6.registry.as_str(), v6.tag.as_deref()),
        ("[::1]:5000", Some("c"))
    );
    // Round trip through Display.
    for s in [
        "reg.io:443/a/b:c@".to_string() + &d,
        "reg.io/a__b/c-d.e_f:v1.2-x".into(),
    ] {
        let r: ImageRef = s.parse().unwrap();
        assert_eq!(r.to_string(), s);
    }
}

#[test]
fn bad_references_say_why() {
    for (s, why) in [
        ("reg.io/Upper:1", "lowercase"),
        ("reg.io/a:", "tag"),
        ("reg.io/a:-x", "tag"),
        ("reg.io/a@sha256:abc", "64 lowercase hex"),
        ("reg.io/a@sha512:abc", "only sha256"),
        ("reg.io/a@notadigest", "no algorithm"),
        ("reg.io:99999/a", "HOST:PORT"),
        ("reg.io/a//b", "lowercase"),
        ("reg.io/a..b", "lowercase"),
        ("", "lowercase"),
    ] {
        let e = s.parse::<ImageRef>().unwrap_err().to_string();
        assert!(e.contains(why), "{s:?}: {e}");
    }
    let upper_digest = format!("r.io/a@sha256:{}", "A".repeat(64));
    assert!(upper_digest.parse::<ImageRef>().is_err());
}

fn manifest_json(config_type: &str, layers: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": {"mediaType": config_type, "digest": digest('c'), "size": 10},
        "layers": layers,
    }))
    .unwrap()
}

fn layer(media_type: &str, size: u64) -> Value {
    json!({"mediaType": media_type, "digest": digest('d'), "size": size})
}

#[test]
fn manifests_of_wasm_artifacts_parse() {
    let m = parse_manifest(&manifest_json(
        CONFIG_MEDIA_TYPE,
        json!([layer(LAYER_MEDIA_TYPE, 7)]),
    ))
    .unwrap();
    assert_eq!(m.layer.size, 7);
    assert_eq!(m.layer.digest.to_string(), digest('d'));
    assert_eq!(m.config.digest.to_string(), digest('c'));
}

#[test]
fn other_manifests_are_refused_with_what_they_are() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (manifest_json("application/vnd.oci.image.config.v1+json", json!([layer(LAYER_MEDIA_TYPE, 1)])), "not a wasm component artifact"),
        (manifest_json(CONFIG_MEDIA_TYPE, json!([])), "0 layers"),
        (manifest_json(CONFIG_MEDIA_TYPE, json!([layer(LAYER_MEDIA_TYPE, 1), layer(LAYER_MEDIA_TYPE, 1)])), "2 layers"),
        (manifest_json(CONFIG_MEDIA_TYPE, json!([layer("application/vnd.oci.image.layer.v1.tar+gzip", 1)])), "layer media type"),
        (manifest_json(CONFIG_MEDIA_TYPE, json!([layer(LAYER_MEDIA_TYPE, MAX_COMPONENT_BYTES + 1)])), "over the limit"),
        (manifest_json(CONFIG_MEDIA_TYPE, json!([{"mediaType": LAYER_MEDIA_TYPE, "digest": "md5:x", "size": 1}])), "only sha256"),
        (manifest_json(CONFIG_MEDIA_TYPE, json!([{"mediaType": LAYER_MEDIA_TYPE, "digest": digest('d'), "size": -1}])), "non-negative"),
        (br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}"#.to_vec(), "image index"),
        (br#"{"schemaVersion":2,"manifests":[]}"#.to_vec(), "image index"),
        (br#"{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json"}"#.to_vec(), "not an OCI image manifest"),
        (br#"{"schemaVersion":1}"#.to_vec(), "schemaVersion"),
        (b"[]".to_vec(), "not a JSON object"),
        (b"\xff".to_vec(), "not JSON"),
        (vec![b' '; (MAX_MANIFEST_BYTES + 1) as usize], "larger than 4 MiB"),
    ];
    for (bytes, why) in cases {
        let e = parse_manifest(&bytes).unwrap_err().to_string();
        assert!(e.contains(why), "{why}: {e}");
    }
}

#[test]
fn blobs_verify_size_and_digest() {
    let d = Descriptor::of(LAYER_MEDIA_TYPE, b"abc");
    d.verify("x", b"abc").unwrap();
    assert!(d
        .verify("x", b"abd")
        .unwrap_err()
        .to_string()
        .contains("does not match its digest"));
    assert!(d
        .verify("x", b"abcd")
        .unwrap_err()
        .to_string()
        .contains("4 bytes, its descriptor says 3"));
}

#[test]
fn built_artifacts_parse_back_with_the_component_interface() {
    let component = wat_component();
    let a = build_artifact(&component, SystemTime::UNIX_EPOCH).unwrap();
    let m = parse_manifest(&a.manifest).unwrap();
    assert_eq!(m.layer, a.layer);
    assert_eq!(m.config, a.config_descriptor);
    let summary = parse_config(&a.config, &m).unwrap();
    assert_eq!(summary.imports, vec!["cni:plugin/log@0.1.0".to_string()]);
    assert_eq!(summary.exports, vec!["run".to_string()]);
    let config: Value = serde_json::from_slice(&a.config).unwrap();
    assert_eq!(config["created"], "1970-01-01T00:00:00Z");
    assert_eq!(config["os"], "wasip2");
    // The same component packaged twice at the same time: the same digest.
    assert_eq!(
        build_artifact(&component, SystemTime::UNIX_EPOCH)
            .unwrap()
            .manifest_digest(),
        a.manifest_digest()
    );
}

/// A component importing an instance and exporting a type (parsed, not
/// validated: the interface is all push reads).
fn wat_component() -> Vec<u8> {
    wat::parse_str(
        r#"(component
            (import "cni:plugin/log@0.1.0" (instance))
            (type (func))
            (export "run" (type 0)))"#,
    )
    .unwrap()
}

#[test]
fn only_components_are_packaged() {
    assert!(component_interface(EMPTY_COMPONENT)
        .unwrap()
        .imports
        .is_empty());
    assert!(component_interface(CORE_MODULE)
        .unwrap_err()
        .to_string()
        .contains("core module"));
    assert!(component_interface(b"garbage")
        .unwrap_err()
        .to_string()
        .contains("not a valid component"));
    assert!(component_interface(&EMPTY_COMPONENT[..6]).is_err());
}

#[test]
fn configs_must_name_the_layer() {
    let component = wat_component();
    let a = build_artifact(&component, SystemTime::UNIX_EPOCH).unwrap();
    let m = parse_manifest(&a.manifest).unwrap();
    let mut other = m.clone();
    other.layer.digest = Digest::of(b"else");
    assert!(parse_config(&a.config, &other)
        .unwrap_err()
        .to_string()
        .contains("layerDigests"));
    assert!(parse_config(br#"{"architecture":"amd64"}"#, &m)
        .unwrap_err()
        .to_string()
        .contains("architecture"));
    assert!(parse_config(
        br#"{"architecture":"wasm","component":{"imports":[1]}}"#,
        &m
    )
    .is_err());
    assert_eq!(
        parse_config(br#"{"architecture":"wasm"}"#, &m).unwrap(),
        ComponentSummary::default()
    );
}

#[test]
fn timestamps_are_rfc3339_utc() {
    let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_796_083_200 + 3_723);
    assert_eq!(rfc3339(t), "2026-12-01T01:02:03Z");
    let leap = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(951_782_400);
    assert_eq!(rfc3339(leap), "2000-02-29T00:00:00Z");
}

mod store {
    use super::super::store::*;
    use super::*;

    fn tmp(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("wasm-cni-images-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    /// Put an artifact in a store as pull does; its pinned reference.
    fn stage(store: &ImageStore, component: &[u8]) -> (ImageRef, Artifact) {
        stage_as(store, component, "reg.io/p/bridge:1")
    }

    fn stage_as(store: &ImageStore, component: &[u8], name: &str) -> (ImageRef, Artifact) {
        let a = build_artifact(component, SystemTime::UNIX_EPOCH).unwrap();
        store.put_blob(&a.layer.digest, component).unwrap();
        store
            .put_blob(&a.config_descriptor.digest, &a.config)
            .unwrap();
        store.put_blob(&a.manifest_digest(), &a.manifest).unwrap();
        let r: ImageRef = name.parse().unwrap();
        let pinned = r.pinned(a.manifest_digest());
        store
            .record(
                &r.to_string(),
                &a.manifest_digest(),
                a.manifest.len() as u64,
            )
            .unwrap();
        (pinned, a)
    }

    #[test]
    fn a_pulled_image_resolves_to_its_component_and_pin() {
        let dir = tmp("resolve");
        let store = ImageStore::new(&dir);
        let (pinned, a) = stage(&store, EMPTY_COMPONENT);
        let r = store.resolve(&pinned).unwrap();
        assert_eq!(std::fs::read(&r.path).unwrap(), EMPTY_COMPONENT);
        assert_eq!(r.pin, a.layer.digest.hex());
        assert_eq!(
            store.index().unwrap(),
            vec![Listed {
                name: "reg.io/p/bridge:1".into(),
                manifest: a.manifest_digest(),
                size: a.manifest.len() as u64,
            }]
        );
        assert!(dir.join("oci-layout").is_file());
        // Recording the name again replaces its entry.
        store
            .record("reg.io/p/bridge:1", &a.manifest_digest(), 1)
            .unwrap();
        assert_eq!(store.index().unwrap().len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn missing_tampered_and_unpinned_images_are_refused() {
        let dir = tmp("refuse");
        let store = ImageStore::new(&dir);
        let absent: ImageRef = format!("reg.io/p/x@{}", digest('e')).parse().unwrap();
        let e = store.resolve(&absent).unwrap_err();
        assert!(matches!(e, ImageError::NotPulled { .. }), "{e}");
        assert!(
            e.to_string()
                .contains("wasm-cni pull reg.io/p/x@sha256:eee"),
            "{e}"
        );
        let tag: ImageRef = "reg.io/p/x:1".parse().unwrap();
        assert!(matches!(store.resolve(&tag), Err(ImageError::Unpinned(_))));

        let (pinned, a) = stage(&store, EMPTY_COMPONENT);
        // A manifest changed on disk no longer matches the digest it is
        // filed under.
        let mpath = store.blob_path(&a.manifest_digest());
        let mut bytes = std::fs::read(&mpath).unwrap();
        bytes.push(b' ');
        std::fs::write(&mpath, &bytes).unwrap();
        assert!(matches!(
            store.resolve(&pinned),
            Err(ImageError::DigestMismatch { .. })
        ));
        std::fs::write(&mpath, &a.manifest).unwrap();
        // A truncated component is refused by size before any load.
        let lpath = store.blob_path(&a.layer.digest);
        std::fs::write(&lpath, &EMPTY_COMPONENT[..4]).unwrap();
        let e = store.resolve(&pinned).unwrap_err().to_string();
        assert!(e.contains("pull it again"), "{e}");
        std::fs::remove_file(&lpath).unwrap();
        assert!(matches!(
            store.resolve(&pinned),
            Err(ImageError::NotPulled { .. })
        ));
        // put_blob refuses content under another digest.
        assert!(store.put_blob(&a.layer.digest, b"other").is_err());
        assert!(!store.has_blob(&a.layer));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn removing_an_image_deletes_only_the_blobs_no_other_image_needs() {
        let dir = tmp("remove");
        let store = ImageStore::new(&dir);
        let (a, aa) = stage_as(&store, EMPTY_COMPONENT, "reg.io/p/a:1");
        let (b, ab) = stage_as(&store, &wat_component(), "reg.io/p/b:1");
        // The same component under a second name shares its blobs.
        stage_as(&store, EMPTY_COMPONENT, "reg.io/p/a-too:1");
        let (none, freed) = store.remove("reg.io/p/nothing:1").unwrap();
        assert!(none.is_empty() && freed == 0);
        let (gone, freed) = store.remove(&a.by_digest().unwrap()).unwrap();
        assert_eq!(gone.len(), 2, "both names of that manifest");
        assert!(freed > 0);
        assert!(!store.blob_path(&aa.layer.digest).exists());
        assert!(matches!(
            store.resolve(&a),
            Err(ImageError::NotPulled { .. })
        ));
        assert!(store.resolve(&b).is_ok());
        assert!(store.blob_path(&ab.config_descriptor.digest).exists());
        assert_eq!(store.index().unwrap().len(), 1);
        let (gone, _) = store.remove("reg.io/p/b:1").unwrap();
        assert_eq!(gone.len(), 1);
        assert_eq!(
            std::fs::read_dir(dir.join("blobs/sha256")).unwrap().count(),
            0
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
