//! `wasm-cni plugins` and `compile`: the components of a plugin directory,
//! described or precompiled into the artifact cache.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use wasm_cni_engine::edge::DEFAULT_CACHE_DIR;
use wasm_cni_engine::sandbox::{sha256_hex, Runtime};

use super::DEFAULT_PLUGIN_DIR;

#[derive(clap::Args)]
pub(super) struct DirArgs {
    /// Directory holding `<type>.wasm` components.
    #[arg(long, default_value = DEFAULT_PLUGIN_DIR)]
    plugin_dir: PathBuf,
    /// Directory of precompiled artifacts.
    #[arg(long, default_value = DEFAULT_CACHE_DIR)]
    cache_dir: PathBuf,
    #[command(flatten)]
    compile: CompileArgs,
}

/// Bounds on loading a component (what a chain entry's `wasm` object says
/// for ADD).
#[derive(clap::Args)]
pub(super) struct CompileArgs {
    /// Refuse components larger than this.
    #[arg(long, value_name = "BYTES", default_value_t = wasm_cni_engine::sandbox::compile::DEFAULT_MAX_COMPONENT_BYTES)]
    max_component_bytes: u64,
    /// Give up compiling one component after this long.
    #[arg(long, value_name = "MS", default_value_t = wasm_cni_engine::sandbox::compile::DEFAULT_COMPILE_MS)]
    compile_ms: u64,
    /// The memory compiling one component may take.
    #[arg(long, value_name = "BYTES", default_value_t = wasm_cni_engine::sandbox::compile::DEFAULT_COMPILE_MEMORY_BYTES)]
    compile_memory_bytes: u64,
}

impl CompileArgs {
    pub(super) fn limits(&self) -> wasm_cni_engine::sandbox::compile::CompileLimits {
        wasm_cni_engine::sandbox::compile::CompileLimits {
            max_bytes: self.max_component_bytes,
            timeout: std::time::Duration::from_millis(self.compile_ms),
            memory_bytes: self.compile_memory_bytes,
        }
    }
}

pub(super) fn plugins(d: &DirArgs, compile: bool) -> Result<i32, String> {
    let runtime = Arc::new(
        Runtime::new(&d.plugin_dir, Some(d.cache_dir.clone()))
            .map_err(|e| e.to_string())?
            .with_compile_limits(d.compile.limits()),
    );
    let mut names = plugin_names(&d.plugin_dir)?;
    names.sort();
    let mut failures = 0;
    for name in names {
        let path = d.plugin_dir.join(format!("{name}.wasm"));
        let digest = std::fs::read(&path)
            .map(|b| sha256_hex(&b))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let was_cached = runtime.cache().is_cached(&digest);
        if !compile {
            let info = runtime.describe(&name);
            match info {
                Ok(i) => println!(
                    "{name}\tworld={}\twit={}\tsha256={digest}\tcached={}\timports={}",
                    i.world,
                    i.wit,
                    if was_cached { "yes" } else { "no" },
                    // Names the component itself chose.
                    wasm_cni_base::text::Shown(&i.imports.join(","))
                ),
                Err(e) => {
                    failures += 1;
                    println!("{name}\terror: {}", wasm_cni_base::text::shown(&e));
                }
            }
            continue;
        }
        let start = std::time::Instant::now();
        match runtime.load(&name, None) {
            Ok(_) if was_cached => println!("{name}\talready cached"),
            Ok(_) => println!("{name}\tcompiled in {} ms", start.elapsed().as_millis()),
            Err(e) => {
                failures += 1;
                println!("{name}\terror: {}", wasm_cni_base::text::shown(&e));
            }
        }
    }
    Ok(if failures == 0 { 0 } else { 1 })
}

fn plugin_names(dir: &Path) -> Result<Vec<String>, String> {
    let rd = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(rd
        .filter_map(Result::ok)
        .filter_map(|e| {
            let p = e.path();
            if p.extension()? != "wasm" {
                return None;
            }
            Some(p.file_stem()?.to_str()?.to_string())
        })
        .collect())
}
