//! The operator CLI, used when CNI_COMMAND is not set: run a network by hand
//! (like `cnitool`), inspect and precompile plugins.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use serde_json::{Map, Value};

use wasm_cni_engine::edge::DEFAULT_CACHE_DIR;
use wasm_cni_engine::sandbox::{sha256_hex, Runtime};
use wasm_cni_protocol::config::DEFAULT_STATE_DIR;
use wasm_cni_store::{admin, DiskStore, EtcdConfig, EtcdStore, StateStore};

const DEFAULT_PLUGIN_DIR: &str = "/opt/cni/wasm";
/// What a call's stdin is first read into; a larger config grows it.
const STDIN_CAPACITY: usize = 16 << 10;

mod images;
mod install;
mod kube;
mod status;

#[derive(Parser)]
#[command(
    name = "wasm-cni",
    version,
    about = "CNI plugin host running plugin chains as WebAssembly components",
    long_about = "Run by a container runtime (CNI_COMMAND set), wasm-cni is a CNI plugin. \
                  Run by hand, it offers the commands below."
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(clap::Args)]
struct AttachArgs {
    /// Network configuration: a conflist whose plugins are of type
    /// `wasm-cni`, or a single `wasm-cni` plugin config.
    #[arg(long)]
    conf: PathBuf,
    /// Path of the container's network namespace (e.g. /run/netns/NAME).
    #[arg(long)]
    netns: Option<String>,
    /// Container id; defaults to one derived from the netns path.
    #[arg(long)]
    id: Option<String>,
    /// Interface name inside the container.
    #[arg(long, default_value = "eth0")]
    ifname: String,
    /// CNI_ARGS, `K=V;K=V`.
    #[arg(long, default_value = "")]
    args: String,
    /// Capability arguments as JSON, e.g. '{"mac":"02:00:00:00:00:01"}'.
    #[arg(long)]
    capability_args: Option<String>,
}

#[derive(clap::Args)]
struct DirArgs {
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
struct CompileArgs {
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
    fn limits(&self) -> wasm_cni_engine::sandbox::compile::CompileLimits {
        wasm_cni_engine::sandbox::compile::CompileLimits {
            max_bytes: self.max_component_bytes,
            timeout: std::time::Duration::from_millis(self.compile_ms),
            memory_bytes: self.compile_memory_bytes,
        }
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Attach a container to the network and print the result.
    Add(AttachArgs),
    /// Check an attachment made by `add`.
    Check(AttachArgs),
    /// Remove an attachment made by `add`.
    Del(AttachArgs),
    /// List plugins: world, imports, digest, whether an artifact is cached.
    Plugins(DirArgs),
    /// Precompile every plugin into the artifact cache.
    Compile(DirArgs),
    /// IPAM allocations in the state store.
    #[command(subcommand)]
    Ipam(IpamCmd),
    /// The node at a glance: each wasm-cni network of the conf dir with its
    /// STATUS, attachments, address pools and components, and the daemon
    /// (with --metrics). Exits 1 when a network is not ready.
    Status(status::StatusArgs),
    /// Ask the daemon whether it is alive (`live`: GET /healthz) or ready
    /// for pods (`ready`: GET /readyz), on its metrics listener, refusing an
    /// answer from anything but the daemon (another user's listener on its
    /// port). What the DaemonSet's exec probes run. Exits 0 on 200, else 1.
    Probe(ProbeArgs),
    /// Serve CNI requests on a unix socket, with the engine and components
    /// kept warm, for networks whose config sets "daemon": "prefer" or
    /// "require" (host/docs/operate/daemon.md). Stops on SIGTERM or SIGINT once the
    /// requests in flight are done.
    Daemon(DaemonArgs),
    /// Fetch a plugin image (a wasm component artifact) into the image store,
    /// verifying every digest. A tag is resolved to a digest, printed on
    /// stdout: the REPOSITORY@sha256:… a chain entry names as
    /// "wasm": {"image": …}.
    Pull(images::PullArgs),
    /// Publish a component as a wasm component artifact (CNCF layout: its
    /// imports and exports in the config, one application/wasm layer) under
    /// REPOSITORY:TAG; prints REPOSITORY@sha256:….
    Push(images::PushArgs),
    /// The image store.
    #[command(subcommand)]
    Images(images::ImagesCmd),
    /// Tools for plugin authors (`plugin test` runs in
    /// `wasm-cni-plugin-test`, beside this binary: the kernel model it
    /// needs is not in what nodes run).
    #[command(subcommand)]
    Plugin(PluginCmd),
    /// Put wasm-cni on this node: the binaries into the CNI bin dir(s), the
    /// components into the conflist's pluginDir (precompiled), then the
    /// conflist rendered from a template into the conf dir. Replaces only
    /// files it wrote, and records them for `uninstall`. What a DaemonSet's
    /// init container runs.
    Install(install::InstallArgs),
    /// Remove what `install` wrote: the conflist first, then (once no
    /// attachment remains, or with --force) the binaries, components and
    /// artifacts. Files changed since are left in place and named.
    Uninstall(install::UninstallArgs),
}

#[derive(Subcommand)]
enum PluginCmd {
    /// Check a component against the CNI contract as an ordinary user, in
    /// the in-memory kernel model: ADD gives a result valid for the
    /// version, CHECK passes after it, DEL (also a second one, and one
    /// after the namespace is gone) and GC with no valid attachments leave
    /// nothing behind, STATUS answers. Exits 1 if a property fails.
    Test(PluginTestArgs),
}

#[derive(clap::Args)]
struct PluginTestArgs {
    /// The component; its file stem is its `type`, and IPAM delegates are
    /// loaded from its directory.
    plugin: PathBuf,
    /// The plugin's own config, as a reference plugin reads it on stdin.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// `CNI_ARGS`, e.g. `IP=10.1.2.3;K8S_POD_NAME=web`.
    #[arg(long, value_name = "ARGS")]
    cni_args: Option<String>,
    /// Capability arguments (`runtimeConfig`), a JSON object or @FILE.
    #[arg(long, value_name = "JSON")]
    capability_args: Option<String>,
    /// A `prevResult` for a chained plugin, a JSON object or @FILE.
    #[arg(long, value_name = "JSON")]
    prev_result: Option<String>,
    /// Test at this cniVersion instead of the config's.
    #[arg(long, value_name = "VERSION")]
    cni_version: Option<String>,
    /// One JSON document instead of a line per property.
    #[arg(long)]
    json: bool,
    /// Also fail each host call of ADD (then DEL) and of DEL (then DEL
    /// again) in turn: nothing may be left behind after any of them.
    #[arg(long)]
    faults: bool,
    /// The whole run's bound: no plugin call runs past it (each call's
    /// deadline is cut to what is left), and the properties not reached
    /// by then fail, saying so. A component cannot make the run longer.
    #[arg(long, value_name = "SECONDS", default_value_t = wasm_cni_engine::sandbox::limits::PLUGIN_TEST_MAX_SECONDS)]
    max_seconds: u64,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ProbeKind {
    Live,
    Ready,
}

#[derive(clap::Args)]
struct ProbeArgs {
    what: ProbeKind,
    /// The daemon's metrics listener, as given to `daemon --metrics`.
    #[arg(long, value_name = "ADDR", default_value = wasm_cni_daemon::DEFAULT_METRICS_SOCKET)]
    metrics: wasm_cni_daemon::MetricsAddr,
    /// The whole exchange's bound.
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    timeout_ms: u64,
}

/// `wasm-cni probe`: the page's text on stdout, 0 when the daemon said 200.
fn probe(a: &ProbeArgs) -> Result<i32, String> {
    let path = match a.what {
        ProbeKind::Live => "/healthz",
        ProbeKind::Ready => "/readyz",
    };
    let within = Duration::from_millis(a.timeout_ms);
    let (code, body) = wasm_cni_daemon::scrape::fetch(&a.metrics, path, within)?;
    println!("{}", wasm_cni_base::text::Shown(body.trim_end()));
    Ok(if code == 200 { 0 } else { 1 })
}

#[derive(clap::Args)]
struct DaemonArgs {
    /// The socket to listen on (its directory is made 0700, the socket
    /// 0600). Ignored when systemd passes a socket (LISTEN_FDS).
    #[arg(long, default_value = wasm_cni_daemon::client::DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Also serve this non-root uid (repeatable).
    #[arg(long, value_name = "UID")]
    allow_uid: Vec<u32>,
    /// Also serve peers of this gid (repeatable).
    #[arg(long, value_name = "GID")]
    allow_gid: Vec<u32>,
    /// Serve Prometheus metrics at GET /metrics: `unix:/PATH` (reachable
    /// from no pod) or `tcp:127.0.0.1:PORT`. Off unless given.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<wasm_cni_daemon::MetricsAddr>,
    /// Export a trace of each request (OTLP/HTTP protobuf) to this
    /// collector: `http://IP:PORT[/PATH]` or `http://localhost:PORT`
    /// (default path /v1/traces). Without it, the daemon's own
    /// OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT; OTEL_SDK_DISABLED=true turns it off.
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<wasm_cni_engine::trace::Endpoint>,
    /// The node's trust policy for images (host/docs/operate/oci-plugins.md)
    /// [default: WASM_CNI_TRUST_POLICY, else /etc/wasm-cni/policy.json if there].
    #[arg(long, value_name = "FILE")]
    trust_policy: Option<PathBuf>,
    /// Requests served at once; further ones wait their turn.
    #[arg(long, default_value_t = 64)]
    max_concurrent: usize,
    /// The memory the daemon may use in all, in bytes [default: its
    /// cgroup's limit, if any]. Less 48 MiB of its own, it is what requests
    /// may use together: each is admitted only when the memory its plugins
    /// may use (the largest chain entry with its IPAM: `memoryBytes`, a
    /// copy of `maxResultBytes`, the host's share) fits beside those in
    /// flight, and waits for room otherwise (code 11 past its client's
    /// patience).
    #[arg(long, value_name = "BYTES")]
    memory_limit: Option<u64>,
    /// A client has this long to send its request.
    #[arg(long, default_value_t = 5000, value_name = "MS")]
    read_timeout_ms: u64,
    /// Connections open at once, every peer together; more are refused.
    #[arg(long, default_value_t = 512)]
    max_connections: usize,
    /// Connections one non-root peer (uid) may hold open at once.
    #[arg(long, default_value_t = 16)]
    max_peer_connections: usize,
    /// On SIGTERM, wait this long for the requests in flight, then exit.
    #[arg(long, default_value_t = 20_000, value_name = "MS")]
    drain_timeout_ms: u64,
    /// The stateDir of non-root peers' networks (their configs may name no
    /// paths) [default: the config default, /run/wasm-cni].
    #[arg(long, value_name = "DIR")]
    peer_state_dir: Option<PathBuf>,
    /// Their pluginDir [default: /opt/cni/wasm].
    #[arg(long, value_name = "DIR")]
    peer_plugin_dir: Option<PathBuf>,
    /// Their cacheDir [default: /var/cache/wasm-cni].
    #[arg(long, value_name = "DIR")]
    peer_cache_dir: Option<PathBuf>,
    /// Their imageDir [default: /var/lib/wasm-cni/images].
    #[arg(long, value_name = "DIR")]
    peer_image_dir: Option<PathBuf>,
    /// The daemon's own log lines as JSON objects, one per line.
    #[arg(long)]
    json_log: bool,
    /// Write the conflist `install --defer-conflist` left pending in this
    /// install record once the network's STATUS, sent the way the runtime
    /// sends it, answers success: the node is ready when this daemon is.
    #[arg(long, value_name = "RECORD")]
    publish_conflist: Option<PathBuf>,
}

#[derive(Subcommand)]
enum IpamCmd {
    /// List allocations with owner and age, and quarantined addresses with
    /// the time they have left.
    Ls {
        /// Only this network.
        #[arg(long)]
        network: Option<String>,
        #[command(flatten)]
        store: StoreArgs,
        /// Also list released addresses whose quarantine is over.
        #[arg(long)]
        all: bool,
        #[arg(long)]
        json: bool,
    },
    /// Import the reference host-local's allocations (`DIR/<network>/<ip>`
    /// files, e.g. DIR=/var/lib/cni/networks) into the store, so a node can
    /// switch to wasm-cni without losing them.
    ImportHostLocal {
        /// The reference plugin's dataDir.
        dir: PathBuf,
        /// Only this network.
        #[arg(long)]
        network: Option<String>,
        #[command(flatten)]
        store: StoreArgs,
        /// Interface for legacy files that hold only a container id.
        #[arg(long, default_value = "eth0")]
        legacy_ifname: String,
    },
    /// Move this node's local allocations (the store under --from-state-dir)
    /// into the cluster store --store names, so a node joins the cluster
    /// store without losing one. Safe to run again.
    ImportLocal {
        /// The local stateDir whose store is moved.
        #[arg(long, default_value = DEFAULT_STATE_DIR)]
        from_state_dir: PathBuf,
        /// Only this network.
        #[arg(long)]
        network: Option<String>,
        #[command(flatten)]
        store: StoreArgs,
    },
}

#[derive(clap::Args)]
struct StoreArgs {
    /// wasm-cni's stateDir; the store is `<stateDir>/store`.
    #[arg(long, default_value = DEFAULT_STATE_DIR)]
    state_dir: PathBuf,
    /// The store root itself, for networks whose config sets `ipam.dataDir`
    /// (overrides --state-dir).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// A cluster store instead: the `store` object of the network's config
    /// (`{"type":"etcd","endpoints":[…],…}`), inline or as @FILE (a whole
    /// network config file also does).
    #[arg(long, value_name = "JSON|@FILE")]
    store: Option<String>,
}

impl StoreArgs {
    fn open(&self) -> Result<Box<dyn StateStore>, String> {
        let Some(arg) = &self.store else {
            return Ok(Box::new(DiskStore::new(
                &self
                    .data_dir
                    .clone()
                    .unwrap_or_else(|| self.state_dir.join("store")),
            )));
        };
        let text = match arg.strip_prefix('@') {
            Some(path) => std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?,
            None => arg.clone(),
        };
        let v: Value = serde_json::from_str(&text).map_err(|e| format!("--store: {e}"))?;
        // A network config carries the object under "store".
        let v = v.get("store").cloned().unwrap_or(v);
        let conf = EtcdConfig::from_value(&v).map_err(|e| format!("--store: {e}"))?;
        let store = EtcdStore::new(conf, self.state_dir.join("store-etcd"))
            .map_err(|e| format!("--store: {e}"))?;
        Ok(Box::new(store))
    }
}

pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    let result = match cli.command {
        Cmd::Add(a) => attach("ADD", a),
        Cmd::Check(a) => attach("CHECK", a),
        Cmd::Del(a) => attach("DEL", a),
        Cmd::Plugins(d) => plugins(&d, false),
        Cmd::Compile(d) => plugins(&d, true),
        Cmd::Ipam(c) => ipam(c),
        Cmd::Status(a) => status::status(&a),
        Cmd::Probe(a) => probe(&a),
        Cmd::Daemon(d) => daemon(d),
        Cmd::Pull(p) => images::pull(&p),
        Cmd::Push(p) => images::push(&p),
        Cmd::Images(images::ImagesCmd::Ls { image_dir }) => images::list(&image_dir),
        Cmd::Images(images::ImagesCmd::Rm {
            images: named,
            image_dir,
        }) => images::remove(&image_dir, &named),
        Cmd::Plugin(PluginCmd::Test(t)) => plugin_test(t),
        Cmd::Install(a) => install::install(&a),
        Cmd::Uninstall(a) => install::uninstall(&a),
    };
    match result {
        Ok(code) => code,
        Err(msg) => {
            // Errors quote others' text: a registry's or a server's reply,
            // a config's names.
            eprintln!("wasm-cni: {}", wasm_cni_base::text::Shown(&msg));
            1
        }
    }
}

/// Build the stdin a runtime would send for the `wasm-cni` entry of `conf`.
pub fn plugin_stdin(conf: &Value, capability_args: &Map<String, Value>) -> Result<Value, String> {
    let obj = conf.as_object().ok_or("the config is not a JSON object")?;
    let mut entry = match obj.get("plugins") {
        Some(Value::Array(plugins)) => {
            let mut found = plugins
                .iter()
                .filter(|p| p.get("type").and_then(Value::as_str) == Some("wasm-cni"));
            let first = found
                .next()
                .and_then(Value::as_object)
                .cloned()
                .ok_or("the conflist has no plugin of type wasm-cni")?;
            if found.next().is_some() {
                return Err("the conflist has more than one wasm-cni plugin".into());
            }
            first
        }
        Some(_) => return Err("`plugins` must be a list".into()),
        None => obj.clone(),
    };
    for key in ["name", "cniVersion", "cniVersions"] {
        if let Some(v) = obj.get(key) {
            entry.insert(key.into(), v.clone());
        }
    }
    // libcni passes a capability only if the plugin declares it.
    let declared: Vec<String> = entry
        .get("capabilities")
        .and_then(Value::as_object)
        .map(|c| {
            c.iter()
                .filter(|(_, v)| v.as_bool() == Some(true))
                .map(|(k, _)| k.clone())
                .collect()
        })
        .unwrap_or_default();
    let rc: Map<String, Value> = capability_args
        .iter()
        .filter(|(k, _)| declared.contains(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !rc.is_empty() {
        entry.insert("runtimeConfig".into(), Value::Object(rc));
    }
    Ok(Value::Object(entry))
}

fn attach(command: &str, a: AttachArgs) -> Result<i32, String> {
    let text = std::fs::read(&a.conf).map_err(|e| format!("{}: {e}", a.conf.display()))?;
    let conf: Value =
        serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", a.conf.display()))?;
    let caps: Map<String, Value> = match &a.capability_args {
        Some(s) => serde_json::from_str(s).map_err(|e| format!("--capability-args: {e}"))?,
        None => Map::new(),
    };
    let stdin = plugin_stdin(&conf, &caps)?;
    let netns = a.netns.clone().unwrap_or_default();
    if command != "DEL" && netns.is_empty() {
        return Err(format!("{} needs --netns", command.to_lowercase()));
    }
    let id = a.id.clone().unwrap_or_else(|| {
        let h = sha256_hex(netns.as_bytes());
        format!("cli-{}", &h[..16])
    });
    let cni_path = std::env::var("CNI_PATH").unwrap_or_else(|_| "/opt/cni/bin".into());
    let vars = vec![
        ("CNI_COMMAND".to_string(), command.to_string()),
        ("CNI_CONTAINERID".to_string(), id),
        ("CNI_NETNS".to_string(), netns),
        ("CNI_IFNAME".to_string(), a.ifname.clone()),
        ("CNI_ARGS".to_string(), a.args.clone()),
        ("CNI_PATH".to_string(), cni_path),
    ];
    let bytes = serde_json::to_vec(&stdin).map_err(|e| e.to_string())?;
    // The same door a runtime goes through: the daemon, if the config asks.
    let out = wasm_cni_daemon::client::run(vars, bytes);
    eprint!("{}", out.stderr);
    if !out.stdout.is_empty() {
        println!("{}", out.stdout.trim_end());
    }
    Ok(out.exit_code)
}

fn daemon(d: DaemonArgs) -> Result<i32, String> {
    let mut opts = wasm_cni_daemon::Options::new(d.socket);
    opts.allow_uids = d.allow_uid;
    opts.allow_gids = d.allow_gid;
    opts.metrics = d.metrics;
    opts.max_concurrent = d.max_concurrent;
    opts.read_timeout = std::time::Duration::from_millis(d.read_timeout_ms);
    opts.max_connections = d.max_connections.max(1);
    opts.max_peer_connections = d.max_peer_connections.max(1);
    opts.drain_timeout = std::time::Duration::from_millis(d.drain_timeout_ms);
    opts.peer_dirs = wasm_cni_engine::edge::PeerDirs {
        state_dir: d.peer_state_dir,
        plugin_dir: d.peer_plugin_dir,
        cache_dir: d.peer_cache_dir,
        image_dir: d.peer_image_dir,
    };
    opts.json_log = d.json_log;
    let env = |k: &str| std::env::var(k).ok();
    let disabled = env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    opts.otlp_endpoint = match d.otlp_endpoint {
        _ if disabled => None,
        Some(e) => Some(e),
        None => wasm_cni_engine::trace::endpoint_from_env(env)
            .map(|e| e.parse())
            .transpose()
            .map_err(|e| format!("OTEL_EXPORTER_OTLP_ENDPOINT: {e}"))?,
    };
    opts.trust_policy = d.trust_policy;
    opts.memory_limit = d.memory_limit;
    wasm_cni_daemon::init_log(opts.json_log);
    if let Some(record) = d.publish_conflist {
        wasm_cni_daemon::block_signals()?;
        let r = record.clone();
        std::thread::Builder::new()
            .name("publish-conflist".into())
            .spawn(move || publish_when_ready(&r))
            .map_err(|e| format!("cannot start the conflist publisher: {e}"))?;
        // /readyz: the same STATUS, of whatever the record holds now.
        opts.ready_check = Some(wasm_cni_daemon::ReadyCheck(Arc::new(move || {
            let (conf, cni_path) = install::network(&record)?
                .ok_or_else(|| format!("nothing installed in {}", record.display()))?;
            status_of(conf, cni_path)
        })));
    }
    wasm_cni_daemon::serve(opts).map(|()| 0)
}

/// Ask STATUS of the pending network, through the socket its config names,
/// until it answers success; then write its conflist. Gives up only when
/// nothing is pending, or the record cannot be read (said in the log): a
/// STATUS that fails (the daemon still starting, a store down) is retried,
/// and the node stays not ready meanwhile.
fn publish_when_ready(record: &Path) {
    let mut pause = Duration::from_millis(50);
    let mut last = String::new();
    loop {
        let (conf, cni_path) = match install::pending(record) {
            Ok(Some(c)) => c,
            Ok(None) => {
                tracing::info!(
                    event = "publish-conflist",
                    "publish-conflist: nothing pending in {}",
                    record.display()
                );
                return;
            }
            Err(e) => {
                tracing::error!(event = "publish-conflist", "publish-conflist: {e}");
                return;
            }
        };
        match status_of(conf, cni_path) {
            Ok(()) => {
                match install::publish(record) {
                    Ok(Some(path)) => tracing::info!(
                        event = "publish-conflist",
                        "publish-conflist: the daemon answers; wrote {}",
                        path.display()
                    ),
                    Ok(None) => tracing::info!(
                        event = "publish-conflist",
                        "publish-conflist: nothing pending in {} any more",
                        record.display()
                    ),
                    // An installer is at work: what it leaves pending is
                    // published on the next round.
                    Err(install::PublishError::Busy(why)) => {
                        if why != last {
                            tracing::warn!(
                                event = "publish-conflist",
                                "publish-conflist: the daemon answers, the conflist waits: {why}"
                            );
                            last = why;
                        }
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(Duration::from_secs(2));
                        continue;
                    }
                    Err(install::PublishError::Failed(e)) => {
                        tracing::error!(event = "publish-conflist", "publish-conflist: {e}")
                    }
                }
                return;
            }
            Err(why) if why != last => {
                tracing::warn!(
                    event = "publish-conflist",
                    "publish-conflist: not ready, the conflist waits: {why}"
                );
                last = why;
            }
            Err(_) => {}
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}

/// STATUS of a network, sent as the runtime sends it: through the socket
/// its config names, with `CNI_PATH`. `Err`: the CNI error, as one line.
fn status_of(conf: Value, cni_path: String) -> Result<(), String> {
    let vars = vec![
        ("CNI_COMMAND".to_string(), "STATUS".to_string()),
        ("CNI_PATH".to_string(), cni_path),
    ];
    let answer = wasm_cni_client::forward::run(
        vars,
        conf.to_string().into_bytes(),
        |_, _, _| wasm_cni_client::wire::Response {
            exit_code: 1,
            stdout: "no daemon answers at the network's daemonSocket".into(),
            stderr: String::new(),
        },
        &|_, _| {},
    );
    if answer.exit_code == 0 {
        return Ok(());
    }
    let text = answer.stdout.trim();
    Err(match serde_json::from_str::<Value>(text) {
        Ok(e) if e.get("code").is_some() => {
            let details = e["details"].as_str().filter(|d| !d.is_empty());
            format!(
                "STATUS: code {}: {}{}",
                e["code"],
                e["msg"].as_str().unwrap_or_default(),
                details.map(|d| format!(" ({d})")).unwrap_or_default()
            )
        }
        _ => format!("STATUS: {text}"),
    })
}

fn plugins(d: &DirArgs, compile: bool) -> Result<i32, String> {
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

fn ipam(cmd: IpamCmd) -> Result<i32, String> {
    match cmd {
        IpamCmd::Ls {
            network,
            store,
            all,
            json,
        } => {
            let views = admin::list(
                &*store.open()?,
                network.as_deref(),
                wasm_cni_store::state::now_ms(),
            )
            .map_err(|e| format!("reading the store: {e}"))?;
            if json {
                println!("{}", wasm_cni_base::text::json_pretty(&views)?);
            } else {
                print!("{}", admin::render(&views, all));
            }
        }
        IpamCmd::ImportHostLocal {
            dir,
            network,
            store,
            legacy_ifname,
        } => {
            let reports =
                admin::import_host_local(&*store.open()?, &dir, network.as_deref(), &legacy_ifname)
                    .map_err(|e| e.to_string())?;
            for r in reports {
                println!(
                    "{}: {} imported, {} already present, {} cursor(s)",
                    r.network,
                    r.imported.len(),
                    r.unchanged.len(),
                    r.cursors.len()
                );
                for s in r.skipped {
                    println!("{}: skipped {}", r.network, wasm_cni_base::text::Shown(&s));
                }
            }
        }
        IpamCmd::ImportLocal {
            from_state_dir,
            network,
            store,
        } => {
            let from = DiskStore::new(&from_state_dir.join("store"));
            let reports = admin::import_store(&from, &*store.open()?, network.as_deref())
                .map_err(|e| e.to_string())?;
            for r in reports {
                println!(
                    "{}: {} imported, {} already there, {} value(s)",
                    r.network,
                    r.imported.len(),
                    r.unchanged.len(),
                    r.cursors.len()
                );
                for s in r.skipped {
                    println!("{}: skipped {}", r.network, wasm_cni_base::text::Shown(&s));
                }
            }
        }
    }
    Ok(0)
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

/// A JSON argument given inline or as `@FILE`.
#[cfg(feature = "fake")]
fn json_arg(what: &str, text: &str) -> Result<Value, String> {
    let text = match text.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).map_err(|e| format!("{what}: {path}: {e}"))?,
        None => text.to_string(),
    };
    serde_json::from_str(&text).map_err(|e| format!("{what}: {e}"))
}

/// What runs `plugin test` when this binary has no kernel model: the
/// plugin-test binary beside it, with the same arguments.
pub const PLUGIN_TEST_BIN: &str = "wasm-cni-plugin-test";

#[cfg(not(feature = "fake"))]
fn plugin_test(_t: PluginTestArgs) -> Result<i32, String> {
    use std::os::unix::process::CommandExt;
    let me = std::env::current_exe().map_err(|e| format!("this binary's path: {e}"))?;
    let sibling = me.with_file_name(PLUGIN_TEST_BIN);
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let e = std::process::Command::new(&sibling).args(args).exec();
    Err(format!(
        "plugin test runs in {PLUGIN_TEST_BIN} (the kernel model it needs is not in this binary): {}: {e}",
        sibling.display()
    ))
}

#[cfg(feature = "fake")]
fn plugin_test(t: PluginTestArgs) -> Result<i32, String> {
    let config = json_arg("--config", &format!("@{}", t.config.display()))?;
    let args = t
        .cni_args
        .as_deref()
        .unwrap_or_default()
        .split(';')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| format!("--cni-args: {kv:?} is not KEY=VALUE"))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let opts = wasm_cni_testing::Options {
        plugin: t.plugin,
        config,
        args,
        capability_args: t
            .capability_args
            .map(|c| json_arg("--capability-args", &c))
            .transpose()?,
        prev_result: t
            .prev_result
            .map(|p| json_arg("--prev-result", &p))
            .transpose()?,
        cni_version: t.cni_version,
        faults: t.faults,
        time_limit: std::time::Duration::from_secs(t.max_seconds.max(1)),
    };
    let verdicts = wasm_cni_testing::run(&opts)?;
    print!("{}", wasm_cni_testing::render(&verdicts, t.json));
    Ok(if verdicts.iter().all(|v| v.ok) { 0 } else { 1 })
}

/// What std's runtime start did for `main` and `#![no_main]` leaves to us.
/// A standard descriptor the parent left closed is opened on `/dev/null`:
/// else the next file this process opens takes its number, and the CNI
/// result or the log goes into that file (a lock, a record, a scope). And
/// a write to a pipe whose reader is gone (a runtime that gave up waiting)
/// is the error `EPIPE`, not a signal that kills the process mid-call.
pub fn process_start() {
    use rustix::event::{poll, PollFd, PollFlags};
    use rustix::fd::BorrowedFd;
    // SAFETY: 0, 1 and 2 are only polled: an fd number that is not open
    // comes back as POLLNVAL, nothing is read or closed.
    let std_fds = unsafe { [0, 1, 2].map(|fd| BorrowedFd::borrow_raw(fd)) };
    let mut fds = std_fds
        .each_ref()
        .map(|fd| PollFd::new(fd, PollFlags::empty()));
    // A zero timeout: asked for no event, an open descriptor never wakes it.
    let closed: Vec<bool> = match poll(&mut fds, Some(&rustix::event::Timespec::default())) {
        Ok(_) => fds
            .iter()
            .map(|p| p.revents().contains(PollFlags::NVAL))
            .collect(),
        // Cannot tell: check each the slow way.
        Err(_) => (0..3)
            .map(|fd| {
                // SAFETY: F_GETFD only reads the descriptor's flags.
                unsafe { libc::fcntl(fd, libc::F_GETFD) == -1 }
            })
            .collect(),
    };
    for (fd, closed) in (0..3).zip(closed) {
        if !closed {
            continue;
        }
        // The lowest free number is the closed one, lowest first; without
        // close-on-exec, as the descriptor it stands for was (a child the
        // engine starts inherits it).
        // SAFETY: a NUL-terminated path; the descriptor is kept for good.
        let opened = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
        if opened != fd {
            std::process::abort();
        }
    }
    // SAFETY: setting a signal's disposition to "ignore" runs no code of
    // ours in a handler.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// What the `wasm-cni` binaries run: a CNI plugin when the runtime sets
/// `CNI_COMMAND`, the compiler child, or the operator CLI.
pub fn process_main() -> ! {
    // Components are compiled in a child process of this executable, under
    // a deadline and a memory bound (sandbox::compile).
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(
            wasm_cni_engine::sandbox::compile::CHILD_COMMAND,
        ))
    {
        std::process::exit(wasm_cni_engine::sandbox::compile::child_main());
    }
    wasm_cni_engine::sandbox::compile::use_child_process();
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(wasm_cni_engine::trace::CHILD_COMMAND))
    {
        std::process::exit(wasm_cni_engine::trace::child_main());
    }
    if std::env::var_os("CNI_COMMAND").is_some() {
        let vars = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        // Sized for a whole config: an empty vector is read in growing
        // probes (32, 32, 64, 128... bytes), a read each.
        let mut stdin = Vec::with_capacity(STDIN_CAPACITY);
        if let Err(e) = std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut stdin) {
            let e = wasm_cni_protocol::CniError::new(
                wasm_cni_protocol::ErrorCode::Io,
                format!("reading stdin: {e}"),
            );
            eprintln!("wasm-cni error: {e}");
            print!("{}", e.to_json(None));
            std::process::exit(1);
        }
        // Through the daemon when the config asks for one, else in-process.
        // The in-process host is never dropped: `exit` leaves it to the
        // kernel (`run_keeping`).
        let mut spent = None;
        let out = wasm_cni_daemon::client::run_keeping(vars, stdin, &mut spent);
        let _ = std::io::Write::write_all(&mut std::io::stderr(), out.stderr.as_bytes());
        // A runtime that stopped reading gets the exit code all the same.
        let _ = std::io::Write::write_all(&mut std::io::stdout(), out.stdout.as_bytes());
        std::process::exit(out.exit_code);
    }
    std::process::exit(main());
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn stdin_from_conflist_injects_name_version_and_declared_caps() {
        let conf = json!({"cniVersion":"1.0.0","name":"n","plugins":[
            {"type":"wasm-cni","capabilities":{"mac":true},"chain":[{"type":"fx"}]}]});
        let caps: Map<String, Value> =
            serde_json::from_value(json!({"mac":"02:00:00:00:00:01","ips":["10.0.0.2"]})).unwrap();
        let s = plugin_stdin(&conf, &caps).unwrap();
        assert_eq!(s["name"], "n");
        assert_eq!(s["cniVersion"], "1.0.0");
        assert_eq!(s["runtimeConfig"], json!({"mac":"02:00:00:00:00:01"}));
    }

    #[test]
    fn stdin_needs_exactly_one_wasm_cni_plugin() {
        let none = json!({"name":"n","plugins":[{"type":"bridge"}]});
        assert!(plugin_stdin(&none, &Map::new()).is_err());
        let bare = json!({"name":"n","cniVersion":"1.1.0","type":"wasm-cni","chain":[]});
        assert_eq!(
            plugin_stdin(&bare, &Map::new()).unwrap()["type"],
            "wasm-cni"
        );
    }
}
