//! Components a one-shot call will compile, compiled ahead on threads of
//! their own.
//!
//! A chain loads each component when its step (or its IPAM delegation)
//! comes, so a process that runs one verb with an empty artifact cache
//! compiled them one after the other, each compile leaving part of the
//! machine idle in its serial phases. Here every component after the first
//! that would be compiled is loaded as the verb starts, and a step takes
//! what was loaded for it: the same result, `Ok` or `Err`, that loading it
//! then would have given (a failure is not retried, so a slow failing
//! compile is not paid twice).
//!
//! Only for a process of one call (the runtime's own, per invocation): it
//! is the caller with the node's authority, and a component it names would
//! be compiled in its turn anyway. A daemon keeps its components loaded,
//! and does not let a peer start more compiles at once than it runs
//! requests.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::sandbox::{CallError, Plugin, Runtime};
use wasm_cni_base::log;
use wasm_cni_protocol::config::{ChainEntry, Limits};

use super::{ipam_type, load_component, Trust};

/// At most this many loads ahead at once: a long chain does not start a
/// compile per entry (each bounded in memory by its own limits).
const MAX_AHEAD: usize = 3;

type Loaded = Result<Arc<Plugin>, CallError>;

/// The loads started ahead, by the component and limits they are for.
#[derive(Default)]
pub(crate) struct Ahead {
    loads: Mutex<HashMap<(String, Limits), JoinHandle<Loaded>>>,
}

impl Ahead {
    /// Start compiling what `chain` will load, in the order a verb runs it
    /// (`reverse` for DEL), but for the first component, which the verb
    /// loads at once itself. Only components that would be compiled: a
    /// cached artifact loads in a fraction of a millisecond, less than a
    /// thread would save (and an image's component was compiled when it
    /// was pulled). Each load is [`load_component`], as a step's is.
    pub(crate) fn start(
        &self,
        runtime: &Arc<Runtime>,
        image_dir: &Path,
        trust: Option<&Arc<Trust>>,
        chain: &[ChainEntry],
        reverse: bool,
    ) {
        let mut wanted: Vec<(String, Limits)> = Vec::new();
        let mut entries: Vec<&ChainEntry> = chain.iter().collect();
        if reverse {
            entries.reverse();
        }
        for entry in entries {
            wanted.push((entry.plugin_type.clone(), entry.limits.clone()));
            if let Some(ipam) = ipam_type(entry) {
                wanted.push((ipam.to_string(), entry.ipam_limits.clone()));
            }
        }
        let first = wanted.first().cloned();
        let mut seen = Vec::new();
        wanted.retain(|w| {
            let keep = Some(w) != first.as_ref()
                && !seen.contains(w)
                && w.1.image.is_none()
                && !runtime.is_compiled(&w.0);
            seen.push(w.clone());
            keep
        });
        if wanted.is_empty() {
            return;
        }
        let Ok(mut loads) = self.loads.lock() else {
            return;
        };
        for (plugin, limits) in wanted.into_iter().take(MAX_AHEAD) {
            let (runtime, image_dir, trust) =
                (runtime.clone(), image_dir.to_path_buf(), trust.cloned());
            let (p, l) = (plugin.clone(), limits.clone());
            let spawned = std::thread::Builder::new()
                .name("wasm-cni-load".into())
                .spawn(move || {
                    let started = std::time::Instant::now();
                    let loaded = load_component(&runtime, &image_dir, trust.as_deref(), &p, &l);
                    if loaded.is_ok() {
                        log::debug(format_args!(
                            "{p}: loaded ahead of its step in {:.1} ms",
                            started.elapsed().as_secs_f64() * 1e3
                        ));
                    }
                    loaded
                });
            // No thread: the step loads it in its turn, as it would have.
            if let Ok(handle) = spawned {
                loads.insert((plugin, limits), handle);
            }
        }
    }

    /// What was loaded ahead for `plugin` under `limits`, waiting for it if
    /// it is still loading; taken, so a later load of it is a load of its
    /// own. None if nothing was started for it.
    fn take(&self, plugin: &str, limits: &Limits) -> Option<Loaded> {
        let handle = self
            .loads
            .lock()
            .ok()?
            .remove(&(plugin.to_string(), limits.clone()))?;
        // A load that panicked is loaded again by the step, which reports
        // whatever it finds.
        handle.join().ok()
    }
}

/// A step's or a delegate's component: what was loaded ahead for it, else
/// loaded now.
pub(crate) fn load(
    ahead: Option<&Ahead>,
    runtime: &Runtime,
    image_dir: &Path,
    trust: Option<&Trust>,
    plugin: &str,
    limits: &Limits,
) -> Loaded {
    match ahead.and_then(|a| a.take(plugin, limits)) {
        Some(loaded) => loaded,
        None => load_component(runtime, image_dir, trust, plugin, limits),
    }
}
