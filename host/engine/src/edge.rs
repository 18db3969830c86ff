//! The CNI edge: environment + stdin in, result or error JSON out. Every
//! failure becomes a CNI error here and nowhere else.

use std::collections::HashMap;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::chain::{Attachment, Executor, Passed, StepReport};
use crate::error::HostError;
use crate::sandbox::{Runtime, SharedEngine};
use wasm_cni_base::log;
use wasm_cni_kernel::filter::{KernelFilter, SocketPool};
use wasm_cni_kernel::net::KernelNet;
use wasm_cni_protocol::{self as cni, config, env, version, CniError, Command, ErrorCode};
use wasm_cni_store::state::DiskRecords;
use wasm_cni_store::{DiskStore, EtcdConfig, EtcdStore, ScopeCache, StateStore};

/// Where compiled artifacts go unless the config says `cacheDir`: on disk,
/// so they survive reboots (unlike the state under /run).
pub const DEFAULT_CACHE_DIR: &str = "/var/cache/wasm-cni";

/// What the process prints and how it exits, and what happened on the way.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub stdout: String,
    pub exit_code: i32,
    pub report: Report,
}

/// What one invocation was and did: the daemon logs a line and counts
/// metrics from it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// `None` when the environment named no valid verb.
    pub command: Option<Command>,
    /// The network's name, once the config parsed.
    pub network: String,
    pub container_id: String,
    pub ifname: String,
    /// The config's `stateDir`, once the config parsed.
    pub state_dir: Option<PathBuf>,
    pub steps: Vec<StepReport>,
    /// The CNI error code, if it failed.
    pub error_code: Option<u32>,
}

impl Outcome {
    fn ok(stdout: String, report: Report) -> Self {
        Outcome {
            stdout,
            exit_code: 0,
            report,
        }
    }

    fn error(e: CniError, cni_version: Option<&str>, mut report: Report) -> Self {
        log::error(format_args!("{e}"));
        report.error_code = Some(e.code);
        Outcome {
            stdout: e.to_json(cni_version),
            exit_code: 1,
            report,
        }
    }
}

/// What invocations of one process share: the wasm engine and, per plugin
/// directory and artifact cache, the loaded components. A per-invocation
/// process makes one for its one call; the daemon keeps one for all of
/// them, so its calls start with everything compiled and pre-linked. Each
/// call still gets a fresh store and instance, under the same limits.
#[derive(Default)]
pub struct Host {
    engine: Mutex<Option<Arc<SharedEngine>>>,
    runtimes: Mutex<HashMap<(PathBuf, PathBuf), Arc<Runtime>>>,
    /// Netfilter sockets of finished calls, for the next ones: closing one
    /// right after a commit waits out an RCU grace period.
    filter_sockets: Arc<SocketPool>,
    /// Cluster stores by config: the daemon keeps its etcd connections.
    etcd: Mutex<HashMap<EtcdConfig, Arc<EtcdStore>>>,
    /// Local scopes as the last call committed them: the daemon's next
    /// call on a scope does not parse its file again.
    scopes: Arc<ScopeCache>,
    /// Calls are traced: keep the host's work per plugin call.
    traced: bool,
    /// Stores the daemon may have alive at once: its engine keeps their
    /// instances' slots (`SharedEngine::pooled`). None: one call, per
    /// invocation.
    pooled_calls: Option<u32>,
    /// The trust policy file the operator gave (the daemon's
    /// `--trust-policy`); without it `image::trust::load` looks where a
    /// node's policy is. Never a request's.
    trust_policy: Option<PathBuf>,
}

impl Host {
    pub fn new() -> Self {
        Self::default()
    }

    /// Read the trust policy from `path` rather than where a node's is.
    pub fn with_trust_policy(mut self, path: Option<PathBuf>) -> Self {
        self.trust_policy = path;
        self
    }

    /// Keep instance slots for `calls` stores alive at once (a daemon).
    pub fn pooled(mut self, calls: u32) -> Self {
        self.pooled_calls = Some(calls);
        self
    }

    /// A host whose calls keep what they do for their traces.
    pub fn traced(mut self, traced: bool) -> Self {
        self.traced = traced;
        self
    }

    /// Make the engine now rather than on the first call.
    pub fn warm(&self) -> Result<(), HostError> {
        self.engine().map(drop)
    }

    /// The network's state store: the config's `store` (etcd), else the
    /// local one under its stateDir.
    fn store(&self, conf: &config::NetConf) -> Result<Arc<dyn StateStore>, HostError> {
        let Some(v) = &conf.store else {
            return Ok(Arc::new(
                DiskStore::new(&conf.state_dir.join("store")).with_cache(self.scopes.clone()),
            ));
        };
        let ec = EtcdConfig::from_value(v).map_err(|e| {
            HostError::from(CniError::new(
                ErrorCode::InvalidConfig,
                format!("store: {e}"),
            ))
        })?;
        let mut cache = self
            .etcd
            .lock()
            .map_err(|_| HostError::internal("store cache lock poisoned"))?;
        if let Some(s) = cache.get(&ec) {
            return Ok(s.clone());
        }
        let s = Arc::new(
            EtcdStore::new(ec.clone(), conf.state_dir.join("store-etcd")).map_err(|e| {
                HostError::from(CniError::new(
                    ErrorCode::InvalidConfig,
                    format!("store: {e}"),
                ))
            })?,
        );
        cache.insert(ec, s.clone());
        Ok(s)
    }

    fn engine(&self) -> Result<Arc<SharedEngine>, HostError> {
        let mut slot = self
            .engine
            .lock()
            .map_err(|_| HostError::internal("engine lock poisoned"))?;
        if let Some(e) = &*slot {
            return Ok(e.clone());
        }
        let engine = match self.pooled_calls {
            Some(calls) => SharedEngine::pooled(calls),
            None => SharedEngine::new(),
        }
        .map_err(|e| HostError::internal(format!("starting the wasm engine: {e}")))?;
        *slot = Some(engine.clone());
        Ok(engine)
    }

    /// The runtime for a plugin directory and artifact cache.
    pub fn runtime(
        &self,
        plugin_dir: &std::path::Path,
        cache_dir: &std::path::Path,
    ) -> Result<Arc<Runtime>, HostError> {
        let key = (plugin_dir.to_path_buf(), cache_dir.to_path_buf());
        if let Some(r) = self.runtimes.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(r);
        }
        let runtime = Arc::new(Runtime::with_engine(
            self.engine()?,
            plugin_dir,
            Some(cache_dir.to_path_buf()),
        ));
        if let Ok(mut m) = self.runtimes.lock() {
            m.entry(key).or_insert_with(|| runtime.clone());
        }
        Ok(runtime)
    }
}

/// What the edge makes of the environment and stdin before anything runs.
pub enum Prepared {
    /// Answer without running a chain (VERSION, or a protocol error).
    Reply(Outcome),
    /// Run the chain.
    Dispatch(Box<cni::Invocation>, Box<config::NetConf>),
}

/// Parse and validate one invocation: everything [`run`] does before it
/// touches the machine (no file, namespace or plugin is opened), so this is
/// the part the fuzzers drive with arbitrary input.
pub fn prepare(vars: Vec<(String, String)>, stdin: &mut dyn Read) -> Prepared {
    let inv = match env::from_env(vars) {
        Ok(inv) => inv,
        Err(e) => return Prepared::Reply(Outcome::error(e, None, Report::default())),
    };
    let mut report = Report {
        command: Some(inv.command),
        container_id: inv.container_id.clone(),
        ifname: inv.ifname.clone(),
        ..Report::default()
    };
    let mut input = Vec::new();
    if let Err(e) = stdin.read_to_end(&mut input) {
        return Prepared::Reply(Outcome::error(
            CniError::new(ErrorCode::Io, format!("reading stdin: {e}")),
            None,
            report,
        ));
    }
    if inv.command == Command::Version {
        let asked = serde_json::from_slice::<serde_json::Value>(&input)
            .ok()
            .and_then(|v| v.get("cniVersion")?.as_str().map(str::to_string));
        return Prepared::Reply(Outcome::ok(
            version::version_reply(asked.as_deref()),
            report,
        ));
    }
    match config::parse(&input, inv.command) {
        Ok(c) => Prepared::Dispatch(Box::new(inv), Box::new(c)),
        Err(e) => {
            report.network = network_name(&input);
            Prepared::Reply(Outcome::error(e, None, report))
        }
    }
}

/// The `name` of a config that did not parse, for the report, if any.
fn network_name(input: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(input)
        .ok()
        .and_then(|v| v.get("name")?.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Who asked a daemon: the socket peer's credentials, and the container's
/// network namespace as the peer opened it.
#[derive(Debug, Default)]
pub struct Peer {
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
    /// The container's network namespace, a descriptor the peer passed.
    pub netns: Option<Arc<OwnedFd>>,
    /// The directories a non-root peer's networks use (the operator's
    /// choice: its config may name none).
    pub dirs: PeerDirs,
}

/// The directories the daemon's operator gives non-root peers' networks
/// (`wasm-cni daemon --peer-state-dir` ...); each unset one is the
/// config's default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerDirs {
    pub state_dir: Option<PathBuf>,
    pub plugin_dir: Option<PathBuf>,
    pub cache_dir: Option<PathBuf>,
    pub image_dir: Option<PathBuf>,
}

impl Peer {
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }
}

/// Run one CNI invocation on a [`Host`] that others may share.
pub fn run_on(host: &Host, vars: Vec<(String, String)>, stdin: &mut dyn Read) -> Outcome {
    run_for(host, vars, stdin, None)
}

/// Run one CNI invocation for a daemon's socket peer, if `peer`, with no
/// more than the peer could do itself and the operator granted
/// ([`check_peer`]); else for this process's own caller (the runtime).
pub fn run_for(
    host: &Host,
    vars: Vec<(String, String)>,
    stdin: &mut dyn Read,
    peer: Option<&Peer>,
) -> Outcome {
    let (inv, mut conf) = match prepare(vars, stdin) {
        Prepared::Reply(out) => return out,
        Prepared::Dispatch(inv, conf) => (inv, conf),
    };
    if let Some(peer) = peer {
        if let Err(e) = check_peer(peer, &inv, &conf) {
            let report = Report {
                command: Some(inv.command),
                network: conf.name.clone(),
                container_id: inv.container_id.clone(),
                ifname: inv.ifname.clone(),
                ..Report::default()
            };
            return Outcome::error(e, Some(&conf.cni_version), report);
        }
        if !peer.is_root() {
            let d = &peer.dirs;
            let pick = |given: &Option<PathBuf>, default: &mut PathBuf| {
                if let Some(p) = given {
                    *default = p.clone();
                }
            };
            pick(&d.state_dir, &mut conf.state_dir);
            pick(&d.plugin_dir, &mut conf.plugin_dir);
            pick(&d.image_dir, &mut conf.image_dir);
            if d.cache_dir.is_some() {
                conf.cache_dir = d.cache_dir.clone();
            }
        }
    }
    let cni_version = conf.cni_version.clone();
    let mut report = Report {
        command: Some(inv.command),
        network: conf.name.clone(),
        container_id: inv.container_id.clone(),
        ifname: inv.ifname.clone(),
        state_dir: Some(conf.state_dir.clone()),
        ..Report::default()
    };
    let (out, steps) = dispatch(host, &inv, *conf, peer);
    report.steps = steps;
    match out {
        Ok(stdout) => Outcome::ok(stdout, report),
        Err(e) => Outcome::error(CniError::from(e), Some(&cni_version), report),
    }
}

/// The config keys that name a path the host opens (as root) or a server
/// it connects to, which a non-root peer may not set: the daemon would
/// open what the peer names with privileges the peer does not have.
const PEER_PATH_KEYS: &[&str] = &["stateDir", "pluginDir", "cacheDir", "imageDir", "store"];
/// Keys of a chain entry (and of its `ipam`) that name a path.
const PEER_ENTRY_PATH_KEYS: &[&str] = &["dataDir", "resolvConf"];

/// What a daemon's non-root peer may not ask for, refused before anything
/// runs: a path of its choosing opened with the daemon's privileges (config
/// paths; a namespace by path instead of by descriptor). Native plugins are
/// not run for it either ([`dispatch`]). A root peer could do all of that
/// itself.
fn check_peer(peer: &Peer, inv: &cni::Invocation, conf: &config::NetConf) -> Result<(), CniError> {
    if let Some(fd) = &peer.netns {
        if !is_netns(fd) {
            return Err(CniError::new(
                ErrorCode::InvalidEnvironment,
                "CNI_NETNS: the descriptor the client passed is not a network namespace",
            ));
        }
    }
    if peer.is_root() {
        return Ok(());
    }
    let who = format!("uid {}", peer.uid);
    // Without the descriptor, a DEL goes on as if the namespace were gone
    // (`dispatch` opens nothing); ADD and CHECK need it.
    let named = inv.netns.as_deref().is_some_and(|p| !p.is_empty());
    if named && peer.netns.is_none() && inv.command != Command::Del {
        return Err(CniError::new(
            ErrorCode::InvalidEnvironment,
            format!("CNI_NETNS: a non-root daemon peer ({who}) passes the namespace as a descriptor it opened itself (a client of this version does); the daemon does not open a path on its behalf"),
        ));
    }
    let refuse = |key: String| {
        Err(CniError::new(
            ErrorCode::InvalidConfig,
            format!("{key}: a non-root daemon peer ({who}) may not name paths or servers: the daemon would use them with its own privileges; leave it out (the daemon's --peer-* directories apply) or call as root"),
        ))
    };
    for key in PEER_PATH_KEYS {
        if conf.raw.contains_key(*key) {
            return refuse((*key).to_string());
        }
    }
    for (i, entry) in conf.chain.iter().enumerate() {
        let ipam = entry.raw.get("ipam").and_then(serde_json::Value::as_object);
        for key in PEER_ENTRY_PATH_KEYS {
            if entry.raw.contains_key(*key) {
                return refuse(format!("chain[{i}].{key}"));
            }
            if ipam.is_some_and(|m| m.contains_key(*key)) {
                return refuse(format!("chain[{i}].ipam.{key}"));
            }
        }
    }
    Ok(())
}

/// Whether `fd` is a network namespace (`NS_GET_NSTYPE`).
fn is_netns(fd: &OwnedFd) -> bool {
    // _IO(0xb7, 0x3), linux/nsfs.h.
    const NS_GET_NSTYPE: libc::c_ulong = 0xb703;
    // SAFETY: the ioctl takes no argument and only reads the descriptor,
    // which is open for the duration of the call.
    let kind = unsafe { libc::ioctl(fd.as_raw_fd(), NS_GET_NSTYPE as _) };
    kind == libc::CLONE_NEWNET
}

fn dispatch(
    host: &Host,
    inv: &cni::Invocation,
    conf: config::NetConf,
    peer: Option<&Peer>,
) -> (Result<String, HostError>, Vec<StepReport>) {
    let cache_dir = conf
        .cache_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CACHE_DIR));
    let runtime = match host.runtime(&conf.plugin_dir, &cache_dir) {
        Ok(r) => r,
        Err(e) => return (Err(e), Vec::new()),
    };
    let records = Arc::new(DiskRecords::new(&conf.state_dir));
    let cni_version = conf.cni_version.clone();
    let store = match host.store(&conf) {
        Ok(s) => s,
        Err(e) => return (Err(e), Vec::new()),
    };
    // Only a chain that names an image needs the policy: the others pay
    // nothing, not even the look for its file.
    let names_image = conf
        .chain
        .iter()
        .any(|e| e.limits.image.is_some() || e.ipam_limits.image.is_some());
    let trust = if names_image {
        match wasm_cni_image::trust::load(host.trust_policy.as_deref()) {
            Ok(p) => p,
            Err(why) => {
                return (
                    Err(HostError::from(CniError::new(
                        ErrorCode::InvalidConfig,
                        why,
                    ))),
                    Vec::new(),
                )
            }
        }
    } else {
        None
    };
    let exec = Executor::new(
        runtime.clone(),
        Arc::new(conf),
        records,
        store,
        Box::new(KernelNet::new()),
    )
    .with_trust(trust)
    .with_filter(Box::new(KernelFilter::pooled(host.filter_sockets.clone())))
    .with_host_work(host.traced);
    // A process of one call loads the chain's components at once; a daemon
    // keeps them loaded (chain/ahead.rs).
    let exec = if host.pooled_calls.is_none() {
        exec.loading_ahead()
    } else {
        exec
    };
    // Native plugins run with the daemon's privileges: only for a peer that
    // has them (the program and CNI_PATH are the peer's choice).
    let exec = match peer {
        Some(p) if !p.is_root() => exec.without_natives(format!(
            "native plugins from CNI_PATH are not run for a non-root daemon peer (uid {})",
            p.uid
        )),
        _ => exec.with_cni_path(inv.path.clone()),
    };
    let att = Attachment {
        container_id: inv.container_id.clone(),
        ifname: inv.ifname.clone(),
        netns: inv.netns.clone(),
        // The namespace as the peer opened it, held for the call. A
        // non-root peer's namespace only as it passed it: never by name.
        passed: match peer {
            Some(p) => match &p.netns {
                Some(fd) => Passed::Descriptor(fd.clone()),
                None if !p.is_root() => Passed::Nothing,
                None => Passed::ByName,
            },
            None => Passed::ByName,
        },
        peer_uid: peer.filter(|p| !p.is_root()).map(|p| p.uid),
        args: inv.args.clone(),
    };
    let out = match inv.command {
        Command::Add => exec.add(&att).and_then(|result| {
            Ok(cni::result::to_string_pretty(
                &result.to_json(&cni_version)?,
            ))
        }),
        Command::Del => exec.del(&att).map(|()| String::new()),
        Command::Check => {
            if exec.conf().disable_check {
                Ok(String::new())
            } else {
                exec.check(&att).map(|()| String::new())
            }
        }
        Command::Status => exec.status().map(|()| String::new()),
        Command::Gc => {
            if exec.conf().disable_gc {
                Ok(String::new())
            } else if exec.conf().valid_attachments.is_none() {
                // Never guess: without the list, every allocation would look
                // stale.
                Err(CniError::new(
                    ErrorCode::InvalidConfig,
                    "GC needs cni.dev/valid-attachments",
                )
                .into())
            } else {
                exec.gc().map(|()| String::new())
            }
        }
        Command::Version => Ok(version::version_reply(None)),
    };
    let (compiled, loaded) = runtime.cache().stats();
    log::debug(format_args!(
        "artifact cache: {compiled} compiled, {loaded} loaded"
    ));
    (out, exec.steps())
}
