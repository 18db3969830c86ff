//! Item 12: what a plugin's language costs. The worked example (a meta
//! plugin adding the routes its config lists) in Rust (`cargo xtask
//! new-plugin`), Python (componentize-py) and JavaScript (componentize-js):
//! the component's size, its cold compile and warm load in-process, and the
//! per-invocation ADD of bridge + host-local + it, against the same chain
//! without it (wall and the process's peak RSS).

use std::io;
use std::path::Path;
use std::time::Instant;

use serde_json::{json, Value};
use wasm_cni_engine::sandbox::compile::CompileLimits;
use wasm_cni_engine::sandbox::{Origin, Runtime};

use crate::stats::{summarize, Summary};

/// Label and component name of each language's example.
pub const LANGS: [(&str, &str); 3] = [
    ("Rust", "routes-rs"),
    ("Python", "routes-py"),
    ("JavaScript", "routes-js"),
];

/// What an interpreter's component needs beyond the defaults (guest-plugins/docs/python-and-javascript.md): CPython's component is over the
/// default 16 MiB size cap, and compiling either takes longer than the
/// default 10 s of CPU and more than 512 MiB. The Rust one gets the same,
/// which it does not use.
pub fn limits() -> Value {
    json!({"maxComponentBytes": 32 << 20, "compileMs": 30_000, "compileMemoryBytes": 1 << 30})
}

/// The chain entry of `name`, for the chain after bridge.
pub fn entry(name: &str) -> Value {
    json!({"type": name, "routes": [{"dst": "192.168.0.0/16", "gw": "10.88.0.1"}],
           "wasm": limits()})
}

pub struct Static {
    pub label: &'static str,
    pub bytes: u64,
    /// Compile + pre-link with an empty artifact cache, ms.
    pub cold: Summary,
    /// Read + digest + deserialize + pre-link of the cached artifact, ms.
    pub warm: Summary,
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Sizes, cold compiles and warm loads of the three examples in `dir`.
pub fn measure_static(
    dir: &Path,
    scratch: &Path,
    cold_reps: usize,
    reps: usize,
) -> io::Result<Vec<Static>> {
    let err = |e: &dyn std::fmt::Display| io::Error::other(e.to_string());
    let compile = CompileLimits {
        max_bytes: 32 << 20,
        timeout: std::time::Duration::from_secs(30),
        memory_bytes: 1 << 30,
    };
    let mut out = Vec::new();
    for (label, name) in LANGS {
        crate::proc::check_interrupted()?;
        let bytes = std::fs::metadata(dir.join(format!("{name}.wasm")))?.len();
        let mut cold = Vec::new();
        for i in 0..cold_reps {
            let cache = scratch.join(format!("{name}-cold-{i}"));
            let rt = Runtime::new(dir, Some(cache.clone())).map_err(|e| err(&e))?;
            let t = Instant::now();
            let p = rt.load_within(name, None, &compile).map_err(|e| err(&e))?;
            cold.push(ms_since(t));
            if p.origin != Origin::Compiled {
                return Err(io::Error::other(format!(
                    "{name}: cold load did not compile"
                )));
            }
            let _ = std::fs::remove_dir_all(&cache);
        }
        let cache = scratch.join(format!("{name}-warm"));
        Runtime::new(dir, Some(cache.clone()))
            .map_err(|e| err(&e))?
            .load_within(name, None, &compile)
            .map_err(|e| err(&e))?;
        let mut warm = Vec::new();
        for _ in 0..reps {
            let rt = Runtime::new(dir, Some(cache.clone())).map_err(|e| err(&e))?;
            let t = Instant::now();
            let p = rt.load_within(name, None, &compile).map_err(|e| err(&e))?;
            warm.push(ms_since(t));
            if p.origin != Origin::Cached {
                return Err(io::Error::other(format!("{name}: warm load compiled")));
            }
        }
        let _ = std::fs::remove_dir_all(&cache);
        out.push(Static {
            label,
            bytes,
            cold: summarize(&cold),
            warm: summarize(&warm),
        });
    }
    Ok(out)
}
