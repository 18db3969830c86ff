//! `wasm-cni pull`, `push` and `images`: plugin images between a registry
//! and the node's image store.

use std::path::{Path, PathBuf};

use clap::Subcommand;
use serde_json::{Map, Value};

use super::{plugin_stdin, CompileArgs};
use wasm_cni_base::text::Shown;
use wasm_cni_engine::edge::DEFAULT_CACHE_DIR;
use wasm_cni_engine::sandbox::Runtime;
use wasm_cni_image::trust::Decision;
use wasm_cni_image::{registry, Digest, ImageError, ImageRef, ImageStore};
use wasm_cni_protocol::config::DEFAULT_IMAGE_DIR;

#[derive(Subcommand)]
pub(super) enum ImagesCmd {
    /// List the images: name, manifest digest, component.
    Ls {
        #[arg(long, default_value = DEFAULT_IMAGE_DIR)]
        image_dir: PathBuf,
    },
    /// Forget images (by name as listed, REPO@sha256:… or manifest digest)
    /// and delete the blobs no remaining image needs. A network that names
    /// a removed image fails its next call until it is pulled again.
    Rm {
        #[arg(required = true)]
        images: Vec<String>,
        #[arg(long, default_value = DEFAULT_IMAGE_DIR)]
        image_dir: PathBuf,
    },
}

#[derive(clap::Args)]
struct RegistryArgs {
    /// Talk plain HTTP to the registry (one on loopback); HTTPS otherwise.
    #[arg(long)]
    plain_http: bool,
    /// Credentials from this auth file (podman's auth.json or docker's
    /// config.json format) instead of podman's and docker's default ones.
    #[arg(long, value_name = "FILE")]
    auth_file: Option<PathBuf>,
    /// Trust these PEM certificates instead of the system's.
    #[arg(long, value_name = "FILE")]
    ca_file: Option<PathBuf>,
    /// Each request to the registry ends within this time.
    #[arg(long, default_value_t = 60, value_name = "SECONDS")]
    timeout: u64,
}

impl RegistryArgs {
    fn options(&self) -> registry::Options {
        registry::Options {
            plain_http: self.plain_http,
            auth_file: self.auth_file.clone(),
            ca_file: self.ca_file.clone(),
            timeout: std::time::Duration::from_secs(self.timeout.max(1)),
        }
    }
}

#[derive(clap::Args)]
pub(super) struct PullArgs {
    /// REGISTRY/REPOSITORY:TAG or REGISTRY/REPOSITORY@sha256:DIGEST.
    #[arg(required_unless_present = "conf", conflicts_with = "conf")]
    image: Option<String>,
    /// Instead: every image this network config (conflist or wasm-cni
    /// config) names, into its imageDir and cacheDir unless given here.
    #[arg(long, value_name = "FILE")]
    conf: Option<PathBuf>,
    /// [default: /var/lib/wasm-cni/images]
    #[arg(long)]
    image_dir: Option<PathBuf>,
    /// The artifact cache the component is compiled into (the networks'
    /// `cacheDir`), so that the first ADD finds it compiled.
    /// [default: /var/cache/wasm-cni]
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// The node's trust policy: the image must pass it before anything of
    /// it is stored (host/docs/operate/oci-plugins.md) [default:
    /// WASM_CNI_TRUST_POLICY, else /etc/wasm-cni/policy.json if there].
    #[arg(long, value_name = "FILE")]
    trust_policy: Option<PathBuf>,
    #[command(flatten)]
    compile: CompileArgs,
    #[command(flatten)]
    registry: RegistryArgs,
}

#[derive(clap::Args)]
pub(super) struct PushArgs {
    /// The component file.
    file: PathBuf,
    /// REGISTRY/REPOSITORY:TAG.
    image: String,
    /// Also push a signature of the image, made with this ECDSA P-256
    /// private key (unencrypted PKCS#8 PEM), in cosign's format.
    #[arg(long, value_name = "KEY")]
    sign: Option<PathBuf>,
    #[command(flatten)]
    registry: RegistryArgs,
}

pub(super) fn pull(p: &PullArgs) -> Result<i32, String> {
    let (images, conf_dirs) = match (&p.image, &p.conf) {
        (Some(image), _) => (vec![image.clone()], None),
        (None, Some(path)) => {
            let text = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let conf: Value =
                serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            let stdin = plugin_stdin(&conf, &Map::new())?;
            let net = wasm_cni_protocol::config::parse(
                stdin.to_string().as_bytes(),
                wasm_cni_protocol::Command::Add,
            )
            .map_err(|e| format!("{}: {}", path.display(), e.msg))?;
            let images: Vec<String> = net
                .chain
                .iter()
                .flat_map(|e| [&e.limits.image, &e.ipam_limits.image])
                .flatten()
                .cloned()
                .collect();
            if images.is_empty() {
                return Err(format!("{}: the chain names no image", path.display()));
            }
            (images, Some((net.image_dir, net.cache_dir)))
        }
        (None, None) => return Err("name an image or --conf".into()),
    };
    let image_dir = p
        .image_dir
        .clone()
        .or_else(|| conf_dirs.as_ref().map(|d| d.0.clone()))
        .unwrap_or_else(|| DEFAULT_IMAGE_DIR.into());
    let cache_dir = p
        .cache_dir
        .clone()
        .or_else(|| conf_dirs.and_then(|d| d.1))
        .unwrap_or_else(|| DEFAULT_CACHE_DIR.into());
    let policy = wasm_cni_image::trust::load(p.trust_policy.as_deref())?;
    let store = ImageStore::new(&image_dir);
    let runtime = Runtime::new(&image_dir, Some(cache_dir.clone()))
        .map_err(|e| e.to_string())?
        .with_compile_limits(p.compile.limits());
    for text in images {
        let image: ImageRef = text.parse().map_err(|e: ImageError| e.to_string())?;
        if p.conf.is_some() && image.digest.is_none() {
            return Err(ImageError::Unpinned(image.to_string()).to_string());
        }
        pull_one(
            &store,
            &runtime,
            &cache_dir,
            &image,
            &p.registry,
            policy.as_ref(),
        )?;
    }
    Ok(0)
}

fn pull_one(
    store: &ImageStore,
    runtime: &Runtime,
    cache_dir: &Path,
    image: &ImageRef,
    registry_args: &RegistryArgs,
    policy: Option<&wasm_cni_image::trust::Policy>,
) -> Result<(), String> {
    let name = image
        .repository
        .rsplit('/')
        .next()
        .unwrap_or("image")
        .to_string();
    // Compiled and linked against this host's imports before it counts as
    // pulled: a component this wasm-cni cannot run is refused now.
    let compile = |path: &Path, digest: &Digest| {
        let started = std::time::Instant::now();
        runtime
            .load_image(
                &name,
                path.to_path_buf(),
                digest.hex(),
                runtime.compile_limits(),
            )
            .map_err(|e| e.to_string())?;
        eprintln!(
            "compiled into {} in {} ms",
            cache_dir.display(),
            started.elapsed().as_millis()
        );
        Ok(())
    };
    let pulled = registry::pull(store, image, &registry_args.options(), policy, &compile)?;
    match (&pulled.trust, policy) {
        (Some(Decision::Verified { rule, key }), Some(p)) => eprintln!(
            "signature verified with {} (rule {rule} of {})",
            key.display(),
            p.path().display()
        ),
        (Some(Decision::Skip { rule }), Some(p)) => eprintln!(
            "no signature needed (rule {rule} of {})",
            p.path().display()
        ),
        _ => {}
    }
    let pinned = pulled.pinned.by_digest().unwrap_or_default();
    if image.digest.is_none() {
        eprintln!("{image} is {pinned}");
    }
    eprintln!(
        "component {} ({} bytes{}), imports {}",
        pulled.manifest.layer.digest,
        pulled.manifest.layer.size,
        if pulled.fetched_component {
            ""
        } else {
            ", already in the store"
        },
        Shown(&pulled.summary.imports.join(", "))
    );
    println!("{pinned}");
    Ok(())
}

pub(super) fn push(p: &PushArgs) -> Result<i32, String> {
    let image: ImageRef = p.image.parse().map_err(|e: ImageError| e.to_string())?;
    let at = |e: std::io::Error| format!("{}: {e}", p.file.display());
    let component = std::fs::read(&p.file).map_err(at)?;
    // The artifact's `created` is when the component was built (its file's
    // mtime, or SOURCE_DATE_EPOCH for reproducible builds), so pushing the
    // same component again gives the same digest.
    let created = match std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(secs) => std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs),
        None => std::fs::metadata(&p.file)
            .and_then(|m| m.modified())
            .map_err(at)?,
    };
    let key = p
        .sign
        .as_deref()
        .map(wasm_cni_image::sign::SigningKey::from_file)
        .transpose()?;
    let pinned = registry::push(
        &component,
        created,
        &image,
        &p.registry.options(),
        key.as_ref(),
    )?;
    if let (Some(_), Some(digest)) = (&key, &pinned.digest) {
        eprintln!(
            "signature pushed as {}/{}:{}",
            image.registry,
            image.repository,
            wasm_cni_image::sign::signature_tag(digest)
        );
    }
    println!("{}", pinned.by_digest().unwrap_or_default());
    Ok(0)
}

pub(super) fn list(dir: &Path) -> Result<i32, String> {
    let store = ImageStore::new(dir);
    for listed in store.index().map_err(|e| e.to_string())? {
        let component = match store.manifest(&listed.manifest) {
            Ok(Some(m)) if store.has_blob(&m.layer) => {
                format!("component {} {} bytes", m.layer.digest, m.layer.size)
            }
            Ok(Some(_)) | Ok(None) => "incomplete: pull it again".to_string(),
            Err(e) => format!("damaged: {e}"),
        };
        // Names another tool wrote into index.json, a damaged file's error.
        println!(
            "{}\t{}\t{}",
            Shown(&listed.name),
            listed.manifest,
            Shown(&component)
        );
    }
    Ok(0)
}

pub(super) fn remove(dir: &Path, images: &[String]) -> Result<i32, String> {
    let store = ImageStore::new(dir);
    let mut missing = 0;
    for what in images {
        let (gone, freed) = store.remove(what).map_err(|e| e.to_string())?;
        if gone.is_empty() {
            eprintln!(
                "wasm-cni: no image {what:?} in {}",
                Shown(&dir.to_string_lossy())
            );
            missing += 1;
        }
        for listed in gone {
            println!("removed {}\t{}", Shown(&listed.name), listed.manifest);
        }
        if freed > 0 {
            eprintln!("freed {freed} bytes");
        }
    }
    Ok(if missing == 0 { 0 } else { 1 })
}
