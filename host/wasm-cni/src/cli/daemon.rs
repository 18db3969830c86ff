//! `wasm-cni daemon`: the options, and the conflist published once the
//! daemon answers STATUS.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use wasm_cni_cluster::plan::PodCidrBounds;

use super::install;

#[derive(clap::Args)]
pub(super) struct DaemonArgs {
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
    #[command(flatten)]
    cluster: ClusterArgs,
}

/// Cluster mode (host/docs/operate/cluster.md).
#[derive(clap::Args)]
struct ClusterArgs {
    /// Route this node's pods to every other Node's pod CIDRs, watching the
    /// Nodes on the Kubernetes API; NODE is this node's Node (in a
    /// DaemonSet, the downward API's spec.nodeName). Off unless given.
    #[arg(long, value_name = "NODE")]
    cluster_node: Option<String>,
    /// auto (a direct route where the peer shares a subnet with this node,
    /// VXLAN where not), direct, or vxlan.
    #[arg(long, default_value = "auto", value_name = "MODE")]
    cluster_mode: wasm_cni_cluster::plan::Mode,
    /// SNAT this node's pods' traffic leaving the cluster (to anywhere but
    /// the Nodes' pod CIDRs) to the node's address.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    cluster_masquerade: bool,
    /// The VXLAN network identifier, the same on every node.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16_777_215))]
    vxlan_vni: u32,
    /// The VXLAN UDP port, the same on every node.
    #[arg(long, default_value_t = 4789, value_parser = clap::value_parser!(u16).range(1..))]
    vxlan_port: u16,
    /// Where cluster mode says what it did, for `wasm-cni status`.
    #[arg(
        long,
        default_value = "/run/wasm-cni/cluster.json",
        value_name = "FILE"
    )]
    cluster_status: PathBuf,
    /// Check the kernel against the Nodes this often even when nothing
    /// changed (a route deleted by hand comes back).
    #[arg(long, default_value_t = 30_000, value_name = "MS")]
    cluster_resync_ms: u64,
    /// The longest pause between attempts to reach the API server.
    #[arg(long, default_value_t = 30_000, value_name = "MS")]
    api_max_backoff_ms: u64,
    /// How long one watch runs before it is renewed.
    #[arg(long, default_value_t = 300, value_name = "SECONDS")]
    api_watch_seconds: u64,
    /// The shortest IPv4 prefix another Node's pod CIDR may have.
    #[arg(long, value_name = "LEN", default_value_t = PodCidrBounds::DEFAULT.v4)]
    min_pod_cidr_prefix_v4: u8,
    /// The shortest IPv6 prefix another Node's pod CIDR may have.
    #[arg(long, value_name = "LEN", default_value_t = PodCidrBounds::DEFAULT.v6)]
    min_pod_cidr_prefix_v6: u8,
    #[command(flatten)]
    api: super::kube::ApiArgs,
}

/// Start cluster mode beside the daemon, if asked for; its metrics, for the
/// daemon's registry.
fn start_cluster(c: ClusterArgs) -> Result<wasm_cni_daemon::ExtraMetrics, String> {
    let Some(node) = c.cluster_node else {
        return Ok(wasm_cni_daemon::ExtraMetrics::default());
    };
    let gauges = wasm_cni_cluster::run::Gauges::default();
    let (g, counters) = gauges.described();
    let extra = wasm_cni_daemon::ExtraMetrics {
        gauges: g,
        counters,
    };
    if !wasm_cni_cluster::node::valid_name(&node) {
        return Err(format!("--cluster-node {node:?}: not a node name"));
    }
    let mut api =
        wasm_cni_cluster::api::Api::new(&c.api.base()?, c.api.token_file(), c.api.ca_file())?;
    api.watch_timeout = Duration::from_secs(c.api_watch_seconds.max(1));
    if let Err(e) = std::fs::metadata(&api.ca_file) {
        return Err(format!("--api-ca-file {}: {e}", api.ca_file.display()));
    }
    let opts = wasm_cni_cluster::run::Options {
        api,
        settings: wasm_cni_cluster::plan::Settings {
            node,
            mode: c.cluster_mode,
            vni: c.vxlan_vni,
            port: c.vxlan_port,
            masquerade: c.cluster_masquerade,
            bounds: PodCidrBounds {
                v4: c.min_pod_cidr_prefix_v4,
                v6: c.min_pod_cidr_prefix_v6,
            },
        },
        status_file: Some(c.cluster_status),
        resync: Duration::from_millis(c.cluster_resync_ms.max(100)),
        max_backoff: Duration::from_millis(c.api_max_backoff_ms.max(100)),
        gauges,
    };
    if let Some(dir) = opts.status_file.as_ref().and_then(|f| f.parent()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let mut fabric =
        wasm_cni_kernel::fabric::KernelFabric::open(wasm_cni_kernel::net::NsRef::Current)
            .map_err(|e| format!("cluster mode: {e}"))?;
    wasm_cni_daemon::block_signals()?;
    std::thread::Builder::new()
        .name("cluster".into())
        .spawn(move || {
            if let Err(e) = wasm_cni_cluster::run::run(opts, &mut fabric) {
                tracing::error!(event = "cluster", "cluster mode stopped: {e}");
            }
        })
        .map_err(|e| format!("cannot start cluster mode: {e}"))?;
    Ok(extra)
}

pub(super) fn daemon(d: DaemonArgs) -> Result<i32, String> {
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
    opts.extra_metrics = start_cluster(d.cluster)?;
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
