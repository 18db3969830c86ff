//! `cargo xtask image`: the node image a DaemonSet runs, built offline with
//! buildah from scratch: the static `wasm-cni` (engine, installer, daemon),
//! the thin client beside it, and the bundled components. Nothing else: no
//! shell, no libc, no package manager, so nothing in it but wasm-cni can run.
//!
//! Layout (what host/deploy/kubernetes names):
//!   /opt/wasm-cni/wasm-cni            entrypoint
//!   /opt/wasm-cni/wasm-cni-client     installed as `wasm-cni` on nodes
//!   /opt/wasm-cni/components/*.wasm   installed into the conflist's pluginDir

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{fail, Context, Result};

/// The image's name, as the manifests refer to it.
pub const NAME: &str = "localhost/wasm-cni";

/// Build `bin`'s binaries and `components`' top-level `*.wasm` into an OCI
/// archive at `out`, tagged `NAME:tag`. Returns the archive's size and its
/// manifest's digest (`sha256:…`).
pub fn build(bin: &Path, components: &Path, out: &Path, tag: &str) -> Result<(u64, String)> {
    let ctr = buildah(&["from", "--format", "oci", "scratch"])?;
    let ctr = ctr.trim().to_string();
    let result = (|| {
        for name in ["wasm-cni", "wasm-cni-client"] {
            let from = bin.join(name);
            buildah(&[
                "copy",
                "--chmod",
                "0755",
                &ctr,
                path_str(&from)?,
                &format!("/opt/wasm-cni/{name}"),
            ])?;
        }
        let mut wasm: Vec<PathBuf> = std::fs::read_dir(components)
            .context(components.display())?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "wasm"))
            .collect();
        wasm.sort();
        if wasm.is_empty() {
            return Err(fail!("no components in {}", components.display()));
        }
        let mut args: Vec<String> =
            vec!["copy".into(), "--chmod".into(), "0644".into(), ctr.clone()];
        for p in &wasm {
            args.push(path_str(p)?.to_string());
        }
        args.push("/opt/wasm-cni/components/".into());
        buildah(&args.iter().map(String::as_str).collect::<Vec<_>>())?;
        buildah(&[
            "config",
            "--entrypoint",
            r#"["/opt/wasm-cni/wasm-cni"]"#,
            "--cmd",
            "daemon",
            "--label",
            "org.opencontainers.image.title=wasm-cni",
            "--label",
            &format!("org.opencontainers.image.version={tag}"),
            &ctr,
        ])?;
        if let Some(dir) = out.parent() {
            std::fs::create_dir_all(dir).context(dir.display())?;
        }
        let _ = std::fs::remove_file(out);
        buildah(&[
            "commit",
            "--format",
            "oci",
            "--quiet",
            &ctr,
            &format!("oci-archive:{}:{NAME}:{tag}", path_str(out)?),
        ])?;
        manifest_digest(out)
    })();
    let _ = buildah(&["rm", &ctr]);
    let digest = result?;
    if !digest.starts_with("sha256:") {
        return Err(fail!(
            "buildah named the image {digest:?}, not a sha256 digest"
        ));
    }
    Ok((std::fs::metadata(out).context(out.display())?.len(), digest))
}

/// The digest of the image's manifest in an OCI archive: what its
/// `index.json` names (one image), as registries and runtimes know it.
fn manifest_digest(archive: &Path) -> Result<String> {
    let out = Command::new("tar")
        .arg("-xOf")
        .arg(archive)
        .arg("index.json")
        .output()
        .context("running tar")?;
    if !out.status.success() {
        return Err(fail!(
            "{}: no index.json: {}",
            archive.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let index: serde_json::Value = serde_json::from_slice(&out.stdout)
        .context(format_args!("{}: index.json", archive.display()))?;
    match index["manifests"].as_array().map(Vec::as_slice) {
        Some([one]) => one["digest"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| fail!("{}: a manifest without a digest", archive.display())),
        _ => Err(fail!("{}: not one image in index.json", archive.display())),
    }
}

/// The DaemonSet manifest with its image named by `name:tag@digest`, so
/// that every node runs exactly the image built (a tag can be moved, a
/// digest cannot). `name` is where the nodes pull it from.
pub fn render_manifest(manifest: &Path, name: &str, tag: &str, digest: &str) -> Result<String> {
    let text = std::fs::read_to_string(manifest).context(manifest.display())?;
    let from = format!("image: {NAME}:{}", env!("CARGO_PKG_VERSION"));
    if !text.contains(&from) {
        return Err(fail!("{}: no {from:?} to pin", manifest.display()));
    }
    Ok(text.replace(&from, &format!("image: {name}:{tag}@{digest}")))
}

fn path_str(p: &Path) -> Result<&str> {
    p.to_str()
        .ok_or_else(|| fail!("{}: not UTF-8", p.display()))
}

fn buildah(args: &[&str]) -> Result<String> {
    let out = Command::new("buildah")
        .args(args)
        .output()
        .context("running buildah (apt-get install buildah)")?;
    if !out.status.success() {
        return Err(fail!(
            "buildah {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
