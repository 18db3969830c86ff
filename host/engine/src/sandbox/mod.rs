//! The sandbox: one wasmtime engine per process, plugins loaded by type from
//! the plugin directory, each call in a fresh store under limits.
//!
//! Loading goes file → sha256 → (digest pin check) → precompiled artifact or
//! compile → `InstancePre` (imports resolved once). A call instantiates the
//! pre-linked component in a new `Store` whose data is a [`Ctx`], so nothing
//! survives from one call to the next, then maps whatever ended the call —
//! result, plugin error, trap, deadline, memory cap — to a [`CallError`]
//! that names the plugin.

mod bindings;
pub mod cache;
mod compat;
pub mod compile;
pub mod contract;
pub mod convert;
pub mod fail;
pub mod faults;
#[cfg(feature = "fake")]
pub mod harness;
mod host_clocks;
mod host_files;
mod host_filter;
mod host_ipam;
mod host_log;
pub(crate) mod host_network;
pub use host_network::{
    Change, CreatedLinks, FilterAccess, Holder, Ledger, NetAccess, OnCreated, Undo,
};
pub use wasm_cni_model::{live, policy};
mod host_store;
pub mod limits;
mod state;
pub use state::StoreAccess;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use sha2::{Digest, Sha256};
use wasmtime::component::Linker;
use wasmtime::{Config, Engine, Store, Trap};

pub use bindings::types as wit;
use bindings::{PluginHost, PluginHostPre};
pub use cache::{ArtifactCache, Origin, SourceId};
pub use limits::Effective as Limits;
use limits::{MemoryCap, Ticker};
use state::Ctx;

use wasm_cni_protocol::CniError;
use wasm_cni_store::StoreError;

/// Host services a plugin call may use through its imports. The chain
/// executor implements this for the attachment being processed; the sandbox
/// only forwards.
pub use faults::Faults;

pub trait Services: Send + Sync {
    /// Run the calling plugin's IPAM delegate for `op`, within the caller's
    /// `deadline` (time in the delegate counts toward it).
    fn ipam(&self, op: IpamOp, deadline: Instant) -> Result<Option<CniResultWit>, CniError>;
    /// The state-store scope for this call, if it may use one.
    fn store(&self) -> Option<StoreAccess>;
    /// Kernel networking for this call, if it may use it.
    fn net(&self) -> Option<NetAccess>;
    /// Faults to inject into this call's host calls (`plugin test --faults`).
    fn faults(&self) -> Option<Arc<Faults>> {
        None
    }
    /// Whether this call's host work is wanted ([`Services::record`]): only
    /// when the call is traced, so that an untraced call pays nothing.
    fn wants_work(&self) -> bool {
        false
    }
    /// What the host did for the plugin (or refused it), as it happens.
    fn record(&self, _work: HostWork) {}
}

/// One piece of host work for a plugin call, for its trace.
#[derive(Debug, Clone, PartialEq)]
pub struct HostWork {
    /// `netlink`, `nftables` or `store`.
    pub kind: &'static str,
    /// What was asked (`create veth0 (container)`); for a refusal, why.
    pub what: String,
    pub started: std::time::SystemTime,
    pub took: std::time::Duration,
    /// The policy refused it: nothing was done.
    pub refused: bool,
}

pub type CniResultWit = wit::CniResult;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpamOp {
    Add,
    Del,
    Check,
    Status,
    Gc,
}

/// One verb call with its arguments.
pub enum Call<'a> {
    Add(&'a wit::Request),
    Del(&'a wit::Request),
    Check(&'a wit::Request),
    Status(&'a str),
    Gc(&'a str, &'a [wit::Attachment]),
}

impl Call<'_> {
    /// The request config the call carries (JSON).
    pub fn config(&self) -> &str {
        match self {
            Call::Add(r) | Call::Del(r) | Call::Check(r) => &r.config,
            Call::Status(c) | Call::Gc(c, _) => c,
        }
    }

    pub fn verb(&self) -> &'static str {
        match self {
            Call::Add(_) => "add",
            Call::Del(_) => "del",
            Call::Check(_) => "check",
            Call::Status(_) => "status",
            Call::Gc(..) => "gc",
        }
    }
}

/// Why a plugin could not be loaded or a call did not produce an answer.
/// wasmparser and wasmtime format some reasons over several indented
/// lines; a CNI message (a kubelet event, a log field) reads better on one.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("plugin {plugin:?} not found: no {plugin}.wasm in {}{}", dir.display(), searched(cni_path))]
    NotFound {
        plugin: String,
        dir: PathBuf,
        /// CNI_PATH, when it was searched for a native plugin too.
        cni_path: Vec<PathBuf>,
    },
    #[error("plugin {plugin:?}: {error}")]
    Image {
        plugin: String,
        /// Boxed: the other variants stay small.
        error: Box<wasm_cni_image::ImageError>,
    },
    #[error("plugin {plugin:?}: invalid plugin type name")]
    BadName { plugin: String },
    #[error("plugin {plugin:?}: sha256 mismatch: config pins {expected}, {} has {actual}", path.display())]
    DigestMismatch {
        plugin: String,
        path: PathBuf,
        expected: String,
        actual: String,
    },
    #[error("plugin {plugin:?}: cannot read {}: {source}", path.display())]
    Read {
        plugin: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("plugin {plugin:?}: not a usable component: {reason}")]
    Invalid { plugin: String, reason: String },
    /// Built against a contract, or asking for imports, this host does
    /// not serve (`contract.rs`).
    #[error("plugin {plugin:?}: {reason}")]
    Contract { plugin: String, reason: String },
    /// Loading it would pass a bound on its size or on compiling it.
    #[error("plugin {plugin:?}: {}: refused: {error}", path.display())]
    CompileLimit {
        plugin: String,
        path: PathBuf,
        /// Boxed: the other variants stay small.
        error: Box<compile::CompileError>,
    },
    /// The plugin ran and returned an error of its own.
    #[error("plugin {plugin:?}: {error}")]
    Plugin { plugin: String, error: CniError },
    #[error("plugin {plugin:?}: saving its state: {source}")]
    Store {
        plugin: String,
        source: wasm_cni_store::StoreError,
    },
    #[error("plugin {plugin:?}: {verb}: {cause}")]
    Aborted {
        plugin: String,
        verb: &'static str,
        cause: AbortCause,
    },
}

fn searched(cni_path: &[PathBuf]) -> String {
    if cni_path.is_empty() {
        String::new()
    } else {
        let dirs: Vec<_> = cni_path.iter().map(|p| p.display().to_string()).collect();
        format!(" and no executable in CNI_PATH [{}]", dirs.join(":"))
    }
}

/// Why the host stopped a plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AbortCause {
    Deadline {
        ms: u64,
    },
    Memory {
        limit: u64,
        wanted: u64,
    },
    HostCalls {
        budget: u64,
    },
    /// `what` is "result" or "error": either answer is bounded.
    ResultTooLarge {
        what: &'static str,
        limit: u64,
        size: u64,
    },
    /// The answer was over what the host copies out of a plugin at once
    /// ([`limits::transfer_bytes`]), so its size is known only to be more.
    AnswerTooLarge {
        limit: u64,
        bound: u64,
    },
    /// An import's arguments were over what the host copies out of a
    /// plugin at once.
    ArgumentsTooLarge {
        bound: u64,
    },
    /// Another call held the plugin's store scope until this one's
    /// deadline: a transient condition, reported as "try again later".
    StoreBusy {
        scope: String,
        waited_ms: u64,
    },
    /// A cluster store was out of reach or too slow.
    StoreUnavailable(String),
    Trap(String),
}

impl AbortCause {
    /// A short label for metrics: `deadline`, `memory`, `host_calls`,
    /// `result_size`, `store_busy` or `trap`.
    pub fn kind(&self) -> &'static str {
        match self {
            AbortCause::Deadline { .. } => "deadline",
            AbortCause::Memory { .. } => "memory",
            AbortCause::HostCalls { .. } => "host_calls",
            AbortCause::ResultTooLarge { .. } | AbortCause::AnswerTooLarge { .. } => "result_size",
            AbortCause::ArgumentsTooLarge { .. } => "arguments_size",
            AbortCause::StoreBusy { .. } => "store_busy",
            AbortCause::StoreUnavailable(_) => "store_unavailable",
            AbortCause::Trap(_) => "trap",
        }
    }
}

/// A plugin's import or its memory cap stops the call by returning the
/// cause as the error the trap carries.
impl std::error::Error for AbortCause {}

impl fmt::Display for AbortCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AbortCause::Deadline { ms } => write!(f, "deadline of {ms} ms exceeded"),
            AbortCause::Memory { limit, wanted } => write!(
                f,
                "memory limit of {limit} bytes exceeded (tried to grow to {wanted})"
            ),
            AbortCause::HostCalls { budget } => {
                write!(f, "host call budget of {budget} calls exhausted")
            }
            AbortCause::ResultTooLarge { what, limit, size } => {
                write!(f, "{what} of {size} bytes exceeds maxResultBytes ({limit})")
            }
            AbortCause::AnswerTooLarge { limit, bound } => write!(
                f,
                "answer of more than {bound} bytes (all the host copies from a plugin at once) \
                 exceeds maxResultBytes ({limit})"
            ),
            AbortCause::ArgumentsTooLarge { bound } => write!(
                f,
                "an import's arguments of more than {bound} bytes, all the host copies from a \
                 plugin at once"
            ),
            AbortCause::StoreBusy { scope, waited_ms } => write!(
                f,
                "its state {scope} stayed locked by another call for {waited_ms} ms, until its deadline"
            ),
            AbortCause::StoreUnavailable(why) => write!(f, "its state store is unavailable: {why}"),
            AbortCause::Trap(msg) => write!(f, "trapped: {msg}"),
        }
    }
}

/// A plugin ready to be instantiated.
pub struct Plugin {
    pub name: String,
    pub path: PathBuf,
    pub digest: String,
    pub origin: Origin,
    /// The contract its `plugin` export names.
    wit: contract::Version,
    pre: Bound,
}

/// A component linked for the contract version it exports.
enum Bound {
    Now(PluginHostPre<Ctx>),
    V0_1(bindings::v0_1_0::PluginHostPre<Ctx>),
}

impl Bound {
    fn component(&self) -> &wasmtime::component::Component {
        match self {
            Bound::Now(pre) => pre.instance_pre().component(),
            Bound::V0_1(pre) => pre.instance_pre().component(),
        }
    }
}

impl Plugin {
    /// The `cni:plugin` version the component was built against.
    pub fn wit_version(&self) -> &'static str {
        self.wit.as_str()
    }
}

/// What `describe` reports.
pub struct PluginInfo {
    pub world: &'static str,
    /// The `cni:plugin` version it was built against.
    pub wit: &'static str,
    pub imports: Vec<String>,
}

/// What every [`Runtime`] of a process shares: one wasmtime engine with its
/// linker (the host's imports and WASI, resolved once) and the epoch ticker
/// that drives every call's deadline. A per-invocation process makes one; a
/// daemon makes one and keeps it.
pub struct SharedEngine {
    engine: Engine,
    /// The current contract alone: all that a component built with the
    /// SDK imports.
    linker: Linker<Ctx>,
    /// The current contract, every older one and WASI, made the first time
    /// a component imports more than the current contract (a Python or
    /// JavaScript one, or one built against 0.1.0). WASI's part alone was
    /// 5 % of a per-invocation call whose components never import it.
    full: OnceLock<Result<Linker<Ctx>, String>>,
    ticker: Ticker,
}

/// The engine's configuration: one place, so that the compiler child
/// (`compile`) makes artifacts this engine loads.
pub(crate) fn engine_config() -> Config {
    let mut config = Config::new();
    config.epoch_interruption(true);
    // Deep recursion must end as a trap well before the host's own
    // thread stack is at risk.
    config.max_wasm_stack(1 << 20);
    // Plugins run microseconds of their own code per call (the host does
    // the work), so compile time matters and code quality does not:
    // without Cranelift's optimisation passes the first (uncached) call
    // compiles about 20% faster, and warm calls measured the same
    // (host/bench). Register allocation stays the default, safe one.
    config.cranelift_opt_level(wasmtime::OptLevel::None);
    config
}

impl SharedEngine {
    /// Each instance mapped for its call and unmapped after: what a
    /// process that makes one call needs.
    pub fn new() -> wasmtime::Result<Arc<Self>> {
        Self::with_config(&engine_config())
    }

    /// Instances in slots kept for the next call (`limits::instance_pool`),
    /// for `calls` stores alive at once: a daemon's engine.
    pub fn pooled(calls: u32) -> wasmtime::Result<Arc<Self>> {
        let mut config = engine_config();
        config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(
            limits::instance_pool(calls),
        ));
        Self::with_config(&config)
    }

    fn with_config(config: &Config) -> wasmtime::Result<Arc<Self>> {
        let engine = Engine::new(config)?;
        let linker = current_linker(&engine)?;
        let ticker = Ticker::start(&engine);
        Ok(Arc::new(SharedEngine {
            engine,
            linker,
            full: OnceLock::new(),
            ticker,
        }))
    }

    /// The linker for a component whose imports `contract::check` passed.
    fn linker_for(&self, checked: contract::Checked) -> Result<&Linker<Ctx>, String> {
        if checked.current_only {
            return Ok(&self.linker);
        }
        self.full
            .get_or_init(|| {
                wasm_cni_base::log::debug(format_args!(
                    "linking WASI and cni:plugin 0.1.0 (a component imports them)"
                ));
                full_linker(&self.engine).map_err(|e| format!("{e:#}"))
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Whether a component beyond the current contract was linked.
    #[cfg(test)]
    fn full_linker_made(&self) -> bool {
        self.full.get().is_some()
    }
}

fn current_linker(engine: &Engine) -> wasmtime::Result<Linker<Ctx>> {
    let mut linker = Linker::new(engine);
    PluginHost::add_to_linker::<Ctx, wasmtime::component::HasSelf<Ctx>>(&mut linker, |c| c)?;
    Ok(linker)
}

fn full_linker(engine: &Engine) -> wasmtime::Result<Linker<Ctx>> {
    let mut linker = current_linker(engine)?;
    // Every released contract, each forwarding to the current one.
    bindings::v0_1_0::PluginHost::add_to_linker::<Ctx, wasmtime::component::HasSelf<Ctx>>(
        &mut linker,
        |c| c,
    )?;
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
    // The monotonic clock is the host's own: its sleeps end by the
    // call's deadline (host_clocks.rs).
    linker.allow_shadowing(true);
    wasmtime_wasi::p2::bindings::clocks::monotonic_clock::add_to_linker::<
        Ctx,
        wasmtime::component::HasSelf<Ctx>,
    >(&mut linker, |c| c)?;
    linker.allow_shadowing(false);
    Ok(linker)
}

/// Components of one plugin directory, compiled or loaded from one artifact
/// cache, on a [`SharedEngine`].
pub struct Runtime {
    shared: Arc<SharedEngine>,
    cache: ArtifactCache,
    plugin_dir: PathBuf,
    /// Loaded plugins by type and pin, with the identity of the file they
    /// came from: a file that changes is loaded again (a daemon picks up a
    /// replaced component without a restart).
    loaded: Mutex<HashMap<String, (SourceId, Arc<Plugin>)>>,
    /// Bounds on loading a component, unless a chain entry says otherwise.
    compile: compile::CompileLimits,
}

impl Runtime {
    /// An engine of its own (one per process). `cache_dir` None disables
    /// the artifact cache.
    pub fn new(plugin_dir: &Path, cache_dir: Option<PathBuf>) -> wasmtime::Result<Self> {
        Ok(Self::with_engine(
            SharedEngine::new()?,
            plugin_dir,
            cache_dir,
        ))
    }

    /// On an engine shared with other runtimes.
    pub fn with_engine(
        shared: Arc<SharedEngine>,
        plugin_dir: &Path,
        cache_dir: Option<PathBuf>,
    ) -> Self {
        let cache = ArtifactCache::new(cache_dir, &shared.engine);
        Runtime {
            shared,
            cache,
            plugin_dir: plugin_dir.to_path_buf(),
            loaded: Mutex::new(HashMap::new()),
            compile: compile::CompileLimits::default(),
        }
    }

    /// Load components within `limits` unless told otherwise.
    pub fn with_compile_limits(mut self, limits: compile::CompileLimits) -> Self {
        self.compile = limits;
        self
    }

    /// The bounds a load without its own uses.
    pub fn compile_limits(&self) -> &compile::CompileLimits {
        &self.compile
    }

    pub fn plugin_dir(&self) -> &Path {
        &self.plugin_dir
    }

    pub fn cache(&self) -> &ArtifactCache {
        &self.cache
    }

    /// Path of the component for a plugin type, if the name is acceptable.
    pub fn plugin_path(&self, plugin: &str) -> Result<PathBuf, CallError> {
        if !valid_type_name(plugin) {
            return Err(CallError::BadName {
                plugin: plugin.to_string(),
            });
        }
        Ok(self.plugin_dir.join(format!("{plugin}.wasm")))
    }

    /// False when loading `plugin` from the plugin directory would compile
    /// it: a component there whose file, as it is now, the artifact cache
    /// has no digest for. A guess for loading ahead, never a check: the
    /// load itself decides.
    pub fn is_compiled(&self, plugin: &str) -> bool {
        let meta = match self.plugin_path(plugin).map(std::fs::metadata) {
            Ok(Ok(meta)) => meta,
            // No component: a native plugin, or an error its step reports.
            _ => return true,
        };
        self.cache
            .known_digest(plugin, &SourceId::of(&meta))
            .is_some()
    }

    /// True if a component for `plugin` exists in the plugin directory.
    pub fn has_plugin(&self, plugin: &str) -> bool {
        self.plugin_path(plugin)
            .map(|p| p.is_file())
            .unwrap_or(false)
    }

    /// Load the component for a plugin type: once, and again whenever its
    /// file changes.
    pub fn load(&self, plugin: &str, pin: Option<&str>) -> Result<Arc<Plugin>, CallError> {
        self.load_within(plugin, pin, &self.compile)
    }

    /// [`Runtime::load`] within `limits`.
    pub fn load_within(
        &self,
        plugin: &str,
        pin: Option<&str>,
        limits: &compile::CompileLimits,
    ) -> Result<Arc<Plugin>, CallError> {
        let path = self.plugin_path(plugin)?;
        self.load_from(plugin, plugin, path, pin, limits)
    }

    /// Load the component of an image from the image store: `path` is its
    /// blob and `pin` the digest the manifest names, which it must have.
    pub fn load_image(
        &self,
        plugin: &str,
        path: PathBuf,
        pin: &str,
        limits: &compile::CompileLimits,
    ) -> Result<Arc<Plugin>, CallError> {
        // The digest record is named after the image, not the type: one
        // type may come from pluginDir in one network, an image in another.
        let record = format!("image-{pin}");
        self.load_from(plugin, &record, path, Some(pin), limits)
    }

    fn load_from(
        &self,
        plugin: &str,
        record: &str,
        path: PathBuf,
        pin: Option<&str>,
        limits: &compile::CompileLimits,
    ) -> Result<Arc<Plugin>, CallError> {
        let key = format!("{}@{}", path.display(), pin.unwrap_or(""));
        if let Ok(meta) = std::fs::metadata(&path) {
            let id = SourceId::of(&meta);
            let hit = self.loaded.lock().ok().and_then(|m| match m.get(&key) {
                Some((known, p)) if *known == id => Some(p.clone()),
                _ => None,
            });
            if let Some(p) = hit {
                return Ok(p);
            }
        }
        let read_err = |source: std::io::Error| {
            if source.kind() == std::io::ErrorKind::NotFound {
                CallError::NotFound {
                    plugin: plugin.to_string(),
                    dir: self.plugin_dir.clone(),
                    cni_path: Vec::new(),
                }
            } else {
                CallError::Read {
                    plugin: plugin.to_string(),
                    path: path.clone(),
                    source,
                }
            }
        };
        let mut file = std::fs::File::open(&path).map_err(read_err)?;
        let meta = file.metadata().map_err(read_err)?;
        let id = SourceId::of(&meta);
        // Before it is read, hashed or compiled: its size bounds what
        // loading it can cost.
        if meta.len() > limits.max_bytes {
            return Err(CallError::CompileLimit {
                plugin: plugin.to_string(),
                path,
                error: Box::new(compile::CompileError::TooLarge {
                    size: meta.len(),
                    max: limits.max_bytes,
                }),
            });
        }
        let invalid = |e: wasmtime::Error| CallError::Invalid {
            plugin: plugin.to_string(),
            reason: one_line(&format!("{e:#}")),
        };
        // Warm path: the file is the one whose digest the cache recorded,
        // and its artifact is there: neither read nor hash the component.
        let engine = &self.shared.engine;
        let warm = match self.cache.known_digest(record, &id) {
            Some(digest) => {
                check_pin(plugin, &path, pin, &digest)?;
                self.cache
                    .load_cached(engine, plugin, &digest)
                    .map(|c| (digest, c))
            }
            None => None,
        };
        let (digest, component, origin) = match warm {
            Some((digest, component)) => (digest, component, Origin::Cached),
            None => {
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut file, &mut bytes).map_err(read_err)?;
                let digest = sha256_hex(&bytes);
                check_pin(plugin, &path, pin, &digest)?;
                let (component, origin) = self
                    .cache
                    .load_or_compile(engine, plugin, &digest, &bytes, limits)
                    .map_err(|error| match error {
                        error if error.is_limit() => CallError::CompileLimit {
                            plugin: plugin.to_string(),
                            path: path.clone(),
                            error: Box::new(error),
                        },
                        error => CallError::Invalid {
                            plugin: plugin.to_string(),
                            reason: one_line(&error.to_string()),
                        },
                    })?;
                self.cache.remember_digest(record, &id, &digest);
                (digest, component, origin)
            }
        };
        let refused = |reason| CallError::Contract {
            plugin: plugin.to_string(),
            reason,
        };
        let checked = contract::check(&component.component_type(), engine).map_err(refused)?;
        let version = checked.version;
        let pre = self
            .shared
            .linker_for(checked)
            .map_err(|e| CallError::Invalid {
                plugin: plugin.to_string(),
                reason: one_line(&e),
            })?
            .instantiate_pre(&component)
            .map_err(|e| refused(contract::mismatch(version, &format!("{e:#}"))))?;
        let pre = match version {
            contract::Version::V0_1 => {
                Bound::V0_1(bindings::v0_1_0::PluginHostPre::new(pre).map_err(invalid)?)
            }
            // 0.2.1 and 0.2.2 only added functions: an older 0.2 component's
            // imports and export match the current ones by wasmtime's semver
            // rules.
            contract::Version::V0_2 | contract::Version::V0_2_1 | contract::Version::V0_2_2 => {
                Bound::Now(PluginHostPre::new(pre).map_err(invalid)?)
            }
        };
        let loaded = Arc::new(Plugin {
            name: plugin.to_string(),
            path,
            digest,
            origin,
            wit: version,
            pre,
        });
        if let Ok(mut m) = self.loaded.lock() {
            m.insert(key, (id, loaded.clone()));
        }
        Ok(loaded)
    }

    /// Load a plugin and report what it imports, for `wasm-cni plugins`.
    pub fn describe(&self, plugin: &str) -> Result<PluginInfo, CallError> {
        let loaded = self.load(plugin, None)?;
        let ty = loaded.pre.component().component_type();
        let mut imports: Vec<String> = ty
            .imports(&self.shared.engine)
            .map(|(n, _)| n.to_string())
            .collect();
        imports.sort();
        // Components do not name their world; infer it from what they use.
        let uses = |iface: &str| imports.iter().any(|i| i.starts_with(iface));
        let world = if uses("cni:plugin/network@") || uses("cni:plugin/ipam@") {
            "interface-plugin"
        } else if uses("cni:plugin/store@") {
            "ipam-plugin"
        } else {
            "any"
        };
        Ok(PluginInfo {
            world,
            wit: loaded.wit_version(),
            imports,
        })
    }

    /// Instantiate `plugin` in a fresh store and make one call. When a
    /// cluster store refuses the call's commit because another node changed
    /// what it read (and the call changed nothing but its state), the call
    /// runs again on a fresh snapshot, within the same deadline.
    pub fn call(
        &self,
        plugin: &Plugin,
        limits: Limits,
        services: Arc<dyn Services>,
        call: Call<'_>,
    ) -> Result<Option<wit::CniResult>, CallError> {
        let started = std::time::Instant::now();
        let deadline = started
            .checked_add(std::time::Duration::from_millis(limits.deadline_ms))
            .unwrap_or(started + std::time::Duration::from_secs(86_400));
        let mut pause = std::time::Duration::from_micros(500);
        loop {
            let once = self.call_once(plugin, &limits, services.clone(), &call, deadline);
            match once {
                Err(CallError::Store {
                    source: source @ StoreError::Conflict(_),
                    ..
                }) if std::time::Instant::now() + pause < deadline => {
                    wasm_cni_base::log::debug(format_args!(
                        "{}: {source}; running it again",
                        plugin.name
                    ));
                    // A little jitter keeps two losers from meeting again.
                    std::thread::sleep(
                        pause
                            + std::time::Duration::from_micros(u64::from(
                                started.elapsed().subsec_nanos() % 1000,
                            )),
                    );
                    pause = (pause * 2).min(std::time::Duration::from_millis(20));
                }
                Err(CallError::Store {
                    plugin: p,
                    source: source @ StoreError::Conflict(_),
                }) => {
                    return Err(CallError::Aborted {
                        plugin: p,
                        verb: call.verb(),
                        cause: AbortCause::StoreUnavailable(format!(
                            "{source}, again until the deadline"
                        )),
                    })
                }
                other => return other,
            }
        }
    }

    fn call_once(
        &self,
        plugin: &Plugin,
        limits: &Limits,
        services: Arc<dyn Services>,
        call: &Call<'_>,
        deadline: std::time::Instant,
    ) -> Result<Option<wit::CniResult>, CallError> {
        let verb = call.verb();
        let limits = *limits;
        let mut ctx = Ctx::new(
            &plugin.name,
            MemoryCap::new(limits.memory_bytes),
            limits.host_call_budget,
            deadline,
            limits.deadline_ms,
            services,
        );
        ctx.config_files = host_files::allowed_paths(call.config());
        // The epoch (and so the deadline) advances while this call runs.
        let _running = self.shared.ticker.running();
        let mut store = Store::new(&self.shared.engine, ctx);
        store.limiter(|c| &mut c.memory);
        // A call run again gets what is left of the deadline, not all of it.
        let left = Limits {
            deadline_ms: deadline
                .saturating_duration_since(std::time::Instant::now())
                .as_millis() as u64,
            ..limits
        };
        store.set_epoch_deadline(left.deadline_ticks());
        store.epoch_deadline_trap();
        store.call_hook(state::budget_hook);
        // What the host copies out of the plugin at once (an import's
        // arguments, its answer) is bounded before it is copied: a log line
        // is kept to 4 KiB whatever its length, and a list of strings that
        // all point at one buffer would copy it once per element.
        let transfer = limits::transfer_bytes(limits.max_result_bytes);
        store.set_hostcall_fuel(transfer);

        let outcome = match &plugin.pre {
            Bound::Now(pre) => pre.instantiate(&mut store).and_then(|inst| {
                let g = inst.cni_plugin_plugin();
                match call {
                    Call::Add(req) => g.call_add(&mut store, req).map(|r| r.map(Some)),
                    Call::Del(req) => g.call_del(&mut store, req).map(|r| r.map(|()| None)),
                    Call::Check(req) => g.call_check(&mut store, req).map(|r| r.map(|()| None)),
                    Call::Status(conf) => g.call_status(&mut store, conf).map(|r| r.map(|()| None)),
                    Call::Gc(conf, valid) => {
                        g.call_gc(&mut store, conf, valid).map(|r| r.map(|()| None))
                    }
                }
            }),
            Bound::V0_1(pre) => pre
                .instantiate(&mut store)
                .and_then(|inst| compat::call_v0_1(inst.cni_plugin_plugin(), &mut store, call)),
        };
        let (bytes, grown) = store.data().memory.usage();
        wasm_cni_base::log::debug(format_args!(
            "{}: {verb}: {} KiB of linear memory, grown {grown} times in the call",
            plugin.name,
            bytes >> 10
        ));

        let aborted = |cause| CallError::Aborted {
            plugin: plugin.name.clone(),
            verb,
            cause,
        };
        // Nothing a plugin returns is used, or committed, before its size is
        // known to be within the limit: an oversized answer is an abort,
        // whether it is a result or an error.
        let outcome = match outcome {
            // The epoch interrupt stops wasm code a little after the
            // deadline, and a plugin the host woke at its deadline may run
            // on to an answer: either way, an answer that comes late is not
            // taken (nor its state committed).
            Ok(_) if std::time::Instant::now() > deadline => {
                return Err(aborted(AbortCause::Deadline {
                    ms: limits.deadline_ms,
                }))
            }
            Ok(answer) => {
                let (what, size) = match &answer {
                    Ok(Some(r)) => ("result", wit_result_size(r)),
                    Ok(None) => ("result", 0),
                    Err(e) => ("error", (64 + e.msg.len() + e.details.len()) as u64),
                };
                if size > limits.max_result_bytes {
                    return Err(aborted(AbortCause::ResultTooLarge {
                        what,
                        limit: limits.max_result_bytes,
                        size,
                    }));
                }
                Ok(answer)
            }
            Err(e) => Err(e),
        };
        // The store transaction commits only if the plugin succeeded.
        let txn = store.data_mut().txn.take();
        let acted = store.data().acted;
        let outcome = match (outcome, txn) {
            (Ok(Ok(r)), Some(txn)) => match txn.commit() {
                Ok(()) => Ok(Ok(r)),
                // A conflict is worth running again only for a call that
                // changed nothing else; for one that did, it is plain
                // unavailability (code 11, the runtime retries the chain).
                Err(e @ StoreError::Conflict(_)) if acted => {
                    return Err(aborted(AbortCause::StoreUnavailable(e.to_string())))
                }
                Err(e) => {
                    return Err(CallError::Store {
                        plugin: plugin.name.clone(),
                        source: e,
                    })
                }
            },
            (other, _) => other,
        };
        match outcome {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(e)) => Err(CallError::Plugin {
                plugin: plugin.name.clone(),
                error: CniError {
                    code: e.code,
                    msg: e.msg,
                    details: e.details,
                },
            }),
            Err(err) => {
                // The host's own reasons travel in the error it stopped the
                // plugin with (`Ctx::abort`, the memory cap); the epoch
                // interrupt is the deadline reached in wasm code.
                let cause = if let Some(cause) = err.downcast_ref::<AbortCause>() {
                    cause.clone()
                } else if limits::is_transfer_bound(&err) {
                    // Copying an import's arguments, the error came up
                    // through the plugin's frames, which left their
                    // backtrace on it; copying the answer, after the plugin
                    // returned, it did not.
                    if err.downcast_ref::<wasmtime::WasmBacktrace>().is_none() {
                        AbortCause::AnswerTooLarge {
                            limit: limits.max_result_bytes,
                            bound: transfer as u64,
                        }
                    } else {
                        AbortCause::ArgumentsTooLarge {
                            bound: transfer as u64,
                        }
                    }
                } else if err.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
                    AbortCause::Deadline {
                        ms: limits.deadline_ms,
                    }
                } else if let Some(trap) = err.downcast_ref::<Trap>() {
                    AbortCause::Trap(trap.to_string())
                } else {
                    // Not a wasm trap but an error raised while running the
                    // plugin (a forged handle index, a failed instantiation):
                    // the outermost context is wasmtime's backtrace, the
                    // root cause says what happened.
                    AbortCause::Trap(err.root_cause().to_string())
                };
                Err(aborted(cause))
            }
        }
    }
}

/// Approximate serialised size of a result: a bound on what the host will
/// copy, print and store on the plugin's behalf.
fn wit_result_size(r: &wit::CniResult) -> u64 {
    let opt = |s: &Option<String>| s.as_ref().map_or(0, |s| s.len() + 16);
    let mut n = 64usize;
    for i in &r.interfaces {
        n += 48
            + i.name.len()
            + opt(&i.mac)
            + opt(&i.sandbox)
            + opt(&i.socket_path)
            + opt(&i.pci_id);
    }
    for ip in &r.ips {
        n += 48 + ip.address.len() + opt(&ip.gateway);
    }
    for rt in &r.routes {
        n += 96 + rt.dst.len() + opt(&rt.gw);
    }
    if let Some(d) = &r.dns {
        n += 64 + opt(&d.domain);
        for s in d.nameservers.iter().chain(&d.search).chain(&d.options) {
            n += s.len() + 4;
        }
    }
    n as u64
}

/// A pinned digest (`sha256` in the config) must match the component's.
fn check_pin(plugin: &str, path: &Path, pin: Option<&str>, digest: &str) -> Result<(), CallError> {
    match pin {
        Some(expected) if !expected.eq_ignore_ascii_case(digest) => {
            Err(CallError::DigestMismatch {
                plugin: plugin.to_string(),
                path: path.to_path_buf(),
                expected: expected.to_string(),
                actual: digest.to_string(),
            })
        }
        _ => Ok(()),
    }
}

/// A CNI plugin type: a file name without path separators or leading dot.
pub fn valid_type_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    let d = Sha256::digest(bytes);
    let mut s = String::with_capacity(64);
    for b in d {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names() {
        assert!(valid_type_name("host-local"));
        assert!(valid_type_name("fx_1.2"));
        assert!(!valid_type_name(""));
        assert!(!valid_type_name("../etc/x"));
        assert!(!valid_type_name(".hidden"));
        assert!(!valid_type_name("a/b"));
    }

    #[test]
    fn the_full_linker_is_made_once_and_only_when_asked_for() {
        let shared = SharedEngine::new().unwrap();
        let of = |current_only| contract::Checked {
            version: contract::Version::V0_2_1,
            current_only,
        };
        let current = shared.linker_for(of(true)).unwrap();
        assert!(std::ptr::eq(current, &shared.linker));
        assert!(!shared.full_linker_made());
        let full = shared.linker_for(of(false)).unwrap();
        assert!(!std::ptr::eq(full, &shared.linker) && shared.full_linker_made());
        assert!(std::ptr::eq(shared.linker_for(of(false)).unwrap(), full));
    }

    #[test]
    fn digest_is_sha256() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
