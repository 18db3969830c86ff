//! `wasm-cni status`: the node at a glance. Every wasm-cni network of the
//! conf dir with its STATUS (sent as the runtime sends it), its attachments,
//! its address pools and its components, and the daemon as its metrics
//! listener reports it. Read-only: nothing is compiled (a component without
//! an artifact shows as not cached), no scope is waited for, nothing is
//! written.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Map, Value};

use wasm_cni_base::text::{printable, shown, Shown};
use wasm_cni_daemon::MetricsAddr;
use wasm_cni_engine::edge::DEFAULT_CACHE_DIR;
use wasm_cni_engine::sandbox::{sha256_hex, Runtime};
use wasm_cni_protocol::config::{self, ChainEntry, Limits, NetConf};
use wasm_cni_store::admin::{self, State};
use wasm_cni_store::state::{now_ms, AttachmentRecords, DiskRecords};
use wasm_cni_store::{DiskStore, EtcdConfig, EtcdStore, StateStore};

#[derive(clap::Args)]
pub struct StatusArgs {
    /// The directory the runtime reads network configs from; every conflist
    /// (or plugin config) of type wasm-cni in it is shown.
    #[arg(long, default_value = "/etc/cni/net.d")]
    conf_dir: PathBuf,
    /// Show this network config instead of the conf dir's (repeatable).
    #[arg(long, value_name = "FILE")]
    conf: Vec<PathBuf>,
    /// The daemon's metrics listener, as given to `daemon --metrics`
    /// (`unix:PATH` or `tcp:ADDRESS:PORT`).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<MetricsAddr>,
    /// What the daemon's cluster mode last did (`daemon --cluster-status`);
    /// shown when the file is there.
    #[arg(
        long,
        default_value = "/run/wasm-cni/cluster.json",
        value_name = "FILE"
    )]
    cluster_status: PathBuf,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Node {
    networks: Vec<Network>,
    #[serde(skip_serializing_if = "Option::is_none")]
    daemon: Option<Daemon>,
    /// Cluster mode's own account, as the daemon wrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    cluster: Option<Value>,
    /// Configs that name wasm-cni but could not be read.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    problems: Vec<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Network {
    name: String,
    file: PathBuf,
    /// `off`, `prefer` or `require`: where calls run.
    daemon: String,
    status: Status,
    chain: Vec<String>,
    attachments: Vec<Attachment>,
    pools: Vec<Pool>,
    components: Vec<Component>,
    /// What could not be read (the records, the store).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    errors: Vec<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Status {
    ready: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Attachment {
    container_id: String,
    ifname: String,
    addresses: Vec<String>,
    age_ms: u64,
    /// An ADD is running, or was killed before it finished.
    pending: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Pool {
    plugin: String,
    allocated: usize,
    quarantined: usize,
    /// Addresses of the pool neither allocated nor quarantined, from the
    /// size the plugin stored (`poolSize`); unknown if it keeps none.
    #[serde(skip_serializing_if = "Option::is_none")]
    free: Option<u128>,
    quarantine: Vec<Quarantined>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Quarantined {
    address: String,
    left_ms: u64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Component {
    plugin: String,
    /// The file in pluginDir, or the image the entry names.
    source: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    sha256: Option<String>,
    /// Its world and the `cni:plugin` version it imports (known once
    /// compiled).
    #[serde(skip_serializing_if = "Option::is_none")]
    world: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wit: Option<String>,
    cached: bool,
    /// The entry's `sha256` pin: `matches` or `mismatch`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pinned: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct Daemon {
    metrics: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    uptime_s: Option<u64>,
    requests: u64,
    errors: u64,
    in_flight: u64,
    /// Plugin calls the host stopped, by cause.
    aborts: BTreeMap<String, u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Exit 0 when every network shown is ready, 1 otherwise.
pub fn status(a: &StatusArgs) -> Result<i32, String> {
    let (files, explicit) = if a.conf.is_empty() {
        (config_files(&a.conf_dir)?, false)
    } else {
        (a.conf.clone(), true)
    };
    let mut node = Node {
        networks: Vec::new(),
        daemon: a.metrics.as_ref().map(daemon),
        cluster: None,
        problems: Vec::new(),
    };
    match std::fs::read(&a.cluster_status) {
        Ok(bytes) => match serde_json::from_slice::<Value>(&bytes) {
            Ok(v) => node.cluster = Some(v),
            Err(e) => node
                .problems
                .push(format!("{}: {e}", a.cluster_status.display())),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => node
            .problems
            .push(format!("{}: {e}", a.cluster_status.display())),
    }
    for file in files {
        match network(&file) {
            Ok(Some(n)) => node.networks.push(n),
            Ok(None) if explicit => node
                .problems
                .push(format!("{}: not a wasm-cni network", file.display())),
            Ok(None) => {}
            Err(e) => node.problems.push(format!("{}: {e}", file.display())),
        }
    }
    if node.networks.is_empty() && node.problems.is_empty() {
        node.problems
            .push(format!("no wasm-cni network in {}", a.conf_dir.display()));
    }
    if a.json {
        println!("{}", wasm_cni_base::text::json_pretty(&node)?);
    } else {
        print!("{}", render(&node));
    }
    let ready = node.problems.is_empty() && node.networks.iter().all(|n| n.status.ready);
    Ok(if ready { 0 } else { 1 })
}

/// The conf dir's configs in the order the runtime reads them.
fn config_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let rd = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut files: Vec<PathBuf> = rd
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("conflist" | "conf" | "json")
                )
        })
        .collect();
    files.sort();
    Ok(files)
}

/// One network, or `None` for a config of another plugin.
fn network(file: &Path) -> Result<Option<Network>, String> {
    // Configs are small; a huge file is not one the runtime would load.
    let mut text = Vec::new();
    std::fs::File::open(file)
        .and_then(|f| f.take(1 << 20).read_to_end(&mut text))
        .map_err(|e| e.to_string())?;
    let Ok(conf) = serde_json::from_slice::<Value>(&text) else {
        // Another plugin's business unless it names us.
        return if contains(&text, b"wasm-cni") {
            Err("not valid JSON".into())
        } else {
            Ok(None)
        };
    };
    if !names_wasm_cni(&conf) {
        return Ok(None);
    }
    let stdin = super::plugin_stdin(&conf, &Map::new())?;
    let bytes = serde_json::to_vec(&stdin).map_err(|e| e.to_string())?;
    let net = config::parse(&bytes, wasm_cni_protocol::Command::Add).map_err(|e| e.msg)?;
    let mut errors = Vec::new();
    let attachments = attachments(&net).unwrap_or_else(|e| {
        errors.push(format!("attachment records: {e}"));
        Vec::new()
    });
    let pools = pools(&net).unwrap_or_else(|e| {
        errors.push(format!("state store: {e}"));
        Vec::new()
    });
    Ok(Some(Network {
        name: net.name.clone(),
        file: file.to_path_buf(),
        daemon: stdin
            .get("daemon")
            .and_then(Value::as_str)
            .unwrap_or("off")
            .to_string(),
        status: status_call(bytes),
        chain: net.chain.iter().map(|e| e.plugin_type.clone()).collect(),
        attachments,
        pools,
        components: components(&net),
        errors,
    }))
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn names_wasm_cni(conf: &Value) -> bool {
    let is_ours = |p: &Value| p.get("type").and_then(Value::as_str) == Some("wasm-cni");
    match conf.get("plugins").and_then(Value::as_array) {
        Some(plugins) => plugins.iter().any(is_ours),
        None => is_ours(conf),
    }
}

/// STATUS through the same door a runtime's call takes (the daemon when
/// the config asks for it).
fn status_call(stdin: Vec<u8>) -> Status {
    let cni_path = std::env::var("CNI_PATH").unwrap_or_else(|_| "/opt/cni/bin".into());
    let vars = vec![
        ("CNI_COMMAND".to_string(), "STATUS".to_string()),
        ("CNI_PATH".to_string(), cni_path),
    ];
    let out = wasm_cni_daemon::client::run(vars, stdin);
    if out.exit_code == 0 {
        return Status {
            ready: true,
            code: None,
            message: None,
        };
    }
    let e: Value = serde_json::from_str(out.stdout.trim()).unwrap_or(Value::Null);
    let msg = e["msg"].as_str().unwrap_or(out.stdout.trim());
    let details = e["details"].as_str().filter(|d| !d.is_empty());
    Status {
        ready: false,
        code: e["code"].as_u64(),
        message: Some(match details {
            Some(d) => format!("{msg} ({d})"),
            None => msg.to_string(),
        }),
    }
}

fn attachments(net: &NetConf) -> std::io::Result<Vec<Attachment>> {
    let now = now_ms();
    let mut records = DiskRecords::new(&net.state_dir).list(&net.name)?;
    records.sort_by_key(|r| r.created_at);
    Ok(records
        .into_iter()
        .map(|r| Attachment {
            addresses: r.result["ips"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|ip| ip["address"].as_str().map(str::to_string))
                .collect(),
            age_ms: now.saturating_sub(r.created_at),
            pending: r.pending,
            container_id: r.container_id,
            ifname: r.ifname,
        })
        .collect())
}

fn pools(net: &NetConf) -> Result<Vec<Pool>, String> {
    let store: Box<dyn StateStore> = match &net.store {
        None => Box::new(DiskStore::new(&net.state_dir.join("store"))),
        Some(v) => {
            let ec = EtcdConfig::from_value(v).map_err(|e| e.to_string())?;
            Box::new(
                EtcdStore::new(ec, net.state_dir.join("store-etcd")).map_err(|e| e.to_string())?,
            )
        }
    };
    // A scope another call holds right now is left out, not waited for.
    let deadline = Instant::now() + Duration::from_millis(500);
    let views = admin::list_by(&*store, Some(&net.name), now_ms(), Some(deadline))
        .map_err(|e| e.to_string())?;
    Ok(views
        .into_iter()
        .map(|v| {
            let allocated = v.count(State::Allocated);
            let quarantined = v.count(State::Quarantined);
            let free = v
                .pool_size
                .map(|size| size.saturating_sub((allocated + quarantined) as u128));
            Pool {
                quarantine: v
                    .entries
                    .iter()
                    .filter(|e| e.state == State::Quarantined)
                    .map(|e| Quarantined {
                        address: e.key.clone(),
                        left_ms: e.quarantine_left_ms.unwrap_or(0),
                    })
                    .collect(),
                plugin: v.plugin,
                allocated,
                quarantined,
                free,
            }
        })
        .collect())
}

fn components(net: &NetConf) -> Vec<Component> {
    let cache_dir = net
        .cache_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CACHE_DIR));
    let runtime = Runtime::new(&net.plugin_dir, Some(cache_dir)).map(Arc::new);
    let mut seen: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for (plugin, limits) in net.chain.iter().flat_map(entry_plugins) {
        if seen.contains(&plugin) {
            continue;
        }
        seen.push(plugin.clone());
        out.push(component(net, runtime.as_ref().ok(), plugin, limits));
    }
    out
}

/// The plugins an entry runs: its own type and its IPAM delegate's.
fn entry_plugins(e: &ChainEntry) -> Vec<(String, &Limits)> {
    let mut out = vec![(e.plugin_type.clone(), &e.limits)];
    if let Some(t) = e
        .raw
        .get("ipam")
        .and_then(|i| i.get("type"))
        .and_then(Value::as_str)
    {
        if t != e.plugin_type {
            out.push((t.to_string(), &e.ipam_limits));
        }
    }
    out
}

fn component(
    net: &NetConf,
    runtime: Option<&Arc<Runtime>>,
    plugin: String,
    limits: &Limits,
) -> Component {
    let mut c = Component {
        source: String::new(),
        sha256: None,
        world: None,
        wit: None,
        cached: false,
        pinned: None,
        error: None,
        plugin,
    };
    if let Some(image) = &limits.image {
        c.source = image.clone();
        c.sha256 = image.rsplit_once("@sha256:").map(|(_, d)| d.to_string());
        return c;
    }
    let path = net.plugin_dir.join(format!("{}.wasm", c.plugin));
    c.source = path.display().to_string();
    let digest = match std::fs::read(&path) {
        Ok(bytes) => sha256_hex(&bytes),
        Err(e) => {
            c.error = Some(e.to_string());
            return c;
        }
    };
    c.pinned = limits.sha256.as_ref().map(|pin| {
        if *pin == digest {
            "matches"
        } else {
            "mismatch"
        }
    });
    if let Some(rt) = runtime {
        c.cached = rt.cache().is_cached(&digest);
        // Only a cached one: describing loads, and loading compiles.
        if c.cached {
            match rt.describe(&c.plugin) {
                Ok(info) => {
                    c.world = Some(info.world.to_string());
                    c.wit = Some(info.wit.to_string());
                }
                Err(e) => c.error = Some(e.to_string()),
            }
        }
    }
    c.sha256 = Some(digest);
    c
}

/// The daemon as its metrics listener reports it.
fn daemon(addr: &MetricsAddr) -> Daemon {
    let mut d = Daemon {
        metrics: match addr {
            MetricsAddr::Unix(p) => format!("unix:{}", p.display()),
            MetricsAddr::Tcp(a) => format!("tcp:{a}"),
        },
        ..Daemon::default()
    };
    let page = match scrape(addr) {
        Ok(p) => p,
        Err(e) => {
            d.error = Some(e);
            return d;
        }
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |t| t.as_secs_f64());
    for (name, labels, value) in samples(&page) {
        let label = |k: &str| labels.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        let count = if value.is_finite() && value > 0.0 {
            value as u64
        } else {
            0
        };
        match name {
            "wasm_cni_requests_total" => {
                d.requests += count;
                if label("outcome") == Some("error") {
                    d.errors += count;
                }
            }
            "wasm_cni_requests_in_flight" => d.in_flight = count,
            "wasm_cni_start_time_seconds" if value.is_finite() && value > 0.0 => {
                d.uptime_s = Some((now - value).max(0.0) as u64);
            }
            "wasm_cni_build_info" => d.version = label("version").map(str::to_string),
            "wasm_cni_plugin_aborts_total" => {
                let cause = label("cause").unwrap_or("unknown").to_string();
                *d.aborts.entry(cause).or_default() += count;
            }
            _ => {}
        }
    }
    d
}

/// The exposition of `GET /metrics`: 2 s for the whole exchange, 4 MiB at
/// most, from the daemon only (`daemon::scrape`).
fn scrape(addr: &MetricsAddr) -> Result<String, String> {
    match wasm_cni_daemon::scrape::fetch(addr, "/metrics", Duration::from_secs(2))? {
        (200, body) => Ok(body),
        (code, _) => Err(format!("metrics: HTTP {code}")),
    }
}

type Sample<'a> = (&'a str, Vec<(String, String)>, f64);

/// `name{label="value",…} number` lines of an OpenMetrics page; anything
/// else is skipped.
fn samples(page: &str) -> Vec<Sample<'_>> {
    let mut out = Vec::new();
    for line in page.lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (series, rest) = match line.find('{') {
            Some(open) => match line[open..].rfind('}') {
                Some(close) => (&line[..open + close + 1], &line[open + close + 1..]),
                None => continue,
            },
            None => match line.split_once(' ') {
                Some((s, r)) => (s, r),
                None => continue,
            },
        };
        let Some(value) = rest.split_whitespace().next().and_then(|v| v.parse().ok()) else {
            continue;
        };
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (n, labels_of(l.strip_suffix('}').unwrap_or(l))),
            None => (series, Vec::new()),
        };
        out.push((name, labels, value));
    }
    out
}

fn labels_of(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some((name, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, ch)) = chars.next() {
            match ch {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => {}
                },
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.push((name.trim_start_matches(',').trim().to_string(), value));
        rest = &after[end.min(after.len())..];
    }
    out
}

fn render(node: &Node) -> String {
    let mut out = String::new();
    for n in &node.networks {
        let state = if n.status.ready {
            "ready".to_string()
        } else {
            format!(
                "NOT READY ({})",
                n.status.code.map_or("?".into(), |c| c.to_string())
            )
        };
        out.push_str(&format!(
            "NETWORK {}  {state}  daemon: {}\n",
            Shown(&n.name),
            Shown(&n.daemon)
        ));
        out.push_str(&format!("  {}\n", Shown(&n.file.to_string_lossy())));
        if let Some(m) = &n.status.message {
            out.push_str(&wrap(m, "  ! "));
        }
        out.push_str(&format!("  chain: {}\n", Shown(&n.chain.join(" → "))));
        for e in &n.errors {
            out.push_str(&wrap(e, "  ! "));
        }

        out.push_str(&format!("ATTACHMENTS ({})\n", n.attachments.len()));
        if !n.attachments.is_empty() {
            let mut rows = vec![cells(&["  CONTAINER", "IFNAME", "ADDRESSES", "AGE"])];
            for a in &n.attachments {
                let id: String = a.container_id.chars().take(12).collect();
                let age = admin::human(a.age_ms);
                rows.push(vec![
                    format!("  {}", Shown(&id)),
                    shown(Shown(&a.ifname)),
                    shown(Shown(&a.addresses.join(","))),
                    if a.pending {
                        format!("{age} (pending)")
                    } else {
                        age
                    },
                ]);
            }
            out.push_str(&table(&rows));
        }

        out.push_str("POOLS\n");
        if n.pools.is_empty() {
            out.push_str("  (no allocations)\n");
        } else {
            let mut rows = vec![cells(&[
                "  PLUGIN",
                "ALLOCATED",
                "QUARANTINED",
                "FREE",
                "NEXT REUSABLE",
            ])];
            for p in &n.pools {
                let next = p
                    .quarantine
                    .iter()
                    .min_by_key(|q| q.left_ms)
                    .map_or("-".to_string(), |q| {
                        format!("{} in {}", Shown(&q.address), admin::human(q.left_ms))
                    });
                rows.push(vec![
                    format!("  {}", Shown(&p.plugin)),
                    p.allocated.to_string(),
                    p.quarantined.to_string(),
                    p.free.map_or("?".into(), |f| f.to_string()),
                    next,
                ]);
            }
            out.push_str(&table(&rows));
        }

        out.push_str("COMPONENTS\n");
        let mut rows = vec![cells(&[
            "  PLUGIN", "SHA256", "WORLD", "WIT", "CACHED", "PINNED",
        ])];
        for c in &n.components {
            rows.push(vec![
                format!("  {}", Shown(&c.plugin)),
                c.sha256.as_deref().map_or("-".into(), |d| {
                    shown(Shown(&d.chars().take(12).collect::<String>()))
                }),
                c.world.as_deref().map_or("-".into(), shown),
                c.wit.as_deref().map_or("-".into(), shown),
                if c.cached { "yes" } else { "no" }.into(),
                c.pinned.unwrap_or("no").into(),
            ]);
        }
        out.push_str(&table(&rows));
        for c in n.components.iter().filter(|c| c.error.is_some()) {
            out.push_str(&wrap(
                &format!("{}: {}", c.plugin, c.error.as_deref().unwrap_or_default()),
                "  ! ",
            ));
        }
        out.push('\n');
    }
    if let Some(d) = &node.daemon {
        out.push_str(&format!("DAEMON {}\n", Shown(&d.metrics)));
        match &d.error {
            Some(e) => out.push_str(&wrap(e, "  ! ")),
            None => {
                out.push_str(&format!(
                    "  {}up {}, {} requests ({} failed), {} in flight\n",
                    d.version
                        .as_deref()
                        .map(|v| format!("version {}, ", Shown(v)))
                        .unwrap_or_default(),
                    d.uptime_s
                        .map_or("?".into(), |s| admin::human(s.saturating_mul(1000))),
                    d.requests,
                    d.errors,
                    d.in_flight
                ));
                let aborts: Vec<String> = d
                    .aborts
                    .iter()
                    .map(|(c, n)| format!("{} {n}", Shown(c)))
                    .collect();
                out.push_str(&format!(
                    "  plugins stopped by the host: {}\n",
                    if aborts.is_empty() {
                        "none".to_string()
                    } else {
                        aborts.join(", ")
                    }
                ));
            }
        }
    }
    if let Some(c) = &node.cluster {
        out.push_str(&render_cluster(c));
    }
    for p in &node.problems {
        out.push_str(&wrap(p, "! "));
    }
    out
}

/// Cluster mode's section. Every string in it may quote an API object, so
/// each is shown neutralised.
fn render_cluster(c: &Value) -> String {
    let text = |v: &Value| shown(Shown(v.as_str().unwrap_or("?")));
    let list = |k: &str| c[k].as_array().cloned().unwrap_or_default();
    let mut out = format!(
        "CLUSTER node {}  mode {}  {} Nodes{}\n",
        text(&c["node"]),
        text(&c["mode"]),
        c["nodes"].as_u64().unwrap_or(0),
        if c["listed"].as_bool() == Some(true) {
            ""
        } else {
            "  (not listed yet: nothing applied)"
        }
    );
    if let Some(e) = c["apiError"].as_str() {
        out.push_str(&wrap(
            &format!("the API server: {e}; keeping what is applied"),
            "  ! ",
        ));
    }
    for t in list("tunnels") {
        out.push_str(&format!(
            "  tunnel {}  vni {}  port {}  local {}  mtu {}\n",
            text(&t["name"]),
            t["vni"],
            t["port"],
            text(&t["local"]),
            t["mtu"]
        ));
    }
    out.push_str(&format!(
        "  routes ({}), tunnel peers ({})\n",
        list("routes").len(),
        c["peers"].as_u64().unwrap_or(0)
    ));
    for r in list("routes") {
        out.push_str(&format!("    {}\n", text(&r)));
    }
    for r in list("refused") {
        out.push_str(&wrap(
            &format!("refused node {}: {}", text(&r["node"]), text(&r["why"])),
            "  ! ",
        ));
    }
    for k in ["skipped", "conflicts"] {
        for x in list(k) {
            out.push_str(&wrap(&text(&x), "  ! "));
        }
    }
    out
}

fn cells(c: &[&str]) -> Vec<String> {
    c.iter().map(|s| s.to_string()).collect()
}

/// Columns padded to their widest cell, two spaces apart.
fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// `text` wrapped at 80 columns, each line led by `lead`; others' text, so
/// shown with its control characters escaped.
fn wrap(text: &str, lead: &str) -> String {
    let width = 80usize.saturating_sub(lead.chars().count()).max(20);
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let word = printable(word);
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            out.push_str(lead);
            out.push_str(&line);
            out.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&word);
    }
    if !line.is_empty() {
        out.push_str(lead);
        out.push_str(&line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_pages_are_read_without_trusting_them() {
        let page = "# HELP x\nwasm_cni_requests_total{verb=\"ADD\",outcome=\"ok\",code=\"0\"} 7\n\
             wasm_cni_requests_total{verb=\"ADD\",outcome=\"error\",code=\"999\"} 2\n\
             wasm_cni_plugin_aborts_total{plugin=\"a\",cause=\"deadline\"} 1\n\
             wasm_cni_plugin_aborts_total{plugin=\"b\",cause=\"deadline\"} 2\n\
             wasm_cni_build_info{version=\"0.1.0\"} 1\n\
             wasm_cni_requests_in_flight 3\n\
             {broken\nno_value\nx{a=\"unterminated} 1\nwasm_cni_requests_total NaN\n\
             wasm_cni_requests_in_flight -5e300\n";
        let s = samples(page);
        assert!(s.iter().any(|(n, l, v)| *n == "wasm_cni_requests_total"
            && l.contains(&("outcome".into(), "error".into()))
            && *v == 2.0));
        // Nothing in a hostile page panics, however it is cut.
        for cut in 0..page.len() {
            if page.is_char_boundary(cut) {
                let _ = samples(&page[..cut]);
            }
        }
        assert_eq!(
            labels_of(r#"a="x\"y",b="z""#),
            vec![("a".into(), "x\"y".into()), ("b".into(), "z".into())]
        );
    }

    #[test]
    fn the_table_fits_80_columns() {
        let node = Node {
            networks: vec![Network {
                name: "k8s-pod-network".into(),
                file: "/etc/cni/net.d/00-wasm-cni.conflist".into(),
                daemon: "require".into(),
                status: Status {
                    ready: false,
                    code: Some(50),
                    message: Some("x ".repeat(100)),
                },
                chain: vec!["bridge".into(), "portmap".into()],
                attachments: vec![Attachment {
                    container_id: "f".repeat(64),
                    ifname: "eth0".into(),
                    addresses: vec!["10.244.3.17/24".into(), "fd00:10:244:3::11/64".into()],
                    age_ms: 7_200_000,
                    pending: false,
                }],
                pools: vec![Pool {
                    plugin: "host-local".into(),
                    allocated: 12,
                    quarantined: 1,
                    free: Some(240),
                    quarantine: vec![Quarantined {
                        address: "10.244.3.9".into(),
                        left_ms: 45_000,
                    }],
                }],
                components: vec![Component {
                    plugin: "host-local".into(),
                    source: "/opt/cni/wasm/host-local.wasm".into(),
                    sha256: Some("a".repeat(64)),
                    world: Some("interface-plugin".into()),
                    wit: Some("0.1.0".into()),
                    cached: true,
                    pinned: Some("matches"),
                    error: None,
                }],
                errors: vec![],
            }],
            daemon: None,
            // What an API object put in the daemon's account: shown, never
            // obeyed by the terminal.
            cluster: Some(serde_json::json!({
                "node": "n1", "mode": "auto", "nodes": 3, "listed": true,
                "apiError": "503: etcd \u{1b}[2Jleader changed",
                "tunnels": [{"name": "wcni-vx4", "vni": 1, "port": 4789, "local": "192.168.1.1", "mtu": 1450}],
                "routes": ["10.244.2.0/24 via 192.168.1.2 dev eth0"], "peers": 1,
                "refused": [{"node": "x", "why": "0.0.0.0/0 is wider than a /16 \u{1b}]0;owned\u{7}"}],
                "skipped": [], "conflicts": [],
            })),
            problems: vec![],
        };
        let text = render(&node);
        for line in text.lines() {
            assert!(line.chars().count() <= 80, "{line:?}");
        }
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "{text:?}"
        );
        assert!(
            text.contains("CLUSTER node n1  mode auto  3 Nodes"),
            "{text}"
        );
        assert!(
            text.contains("refused node x: 0.0.0.0/0 is wider"),
            "{text}"
        );
        assert!(text.contains("NOT READY (50)"), "{text}");
        assert!(text.contains("10.244.3.9 in 45.0s"), "{text}");
    }
}
