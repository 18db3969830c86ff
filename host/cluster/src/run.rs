//! Cluster mode's loop: a watcher thread keeps the Nodes as the API server
//! reports them; the reconciler applies the plan they justify whenever they
//! change, and again every `resync` against what the kernel has (someone
//! may have deleted a route by hand).
//!
//! What an outage changes: nothing. Until the first list succeeds nothing
//! is planned (a daemon restarted during an outage adopts what its
//! predecessor applied and leaves it); after it, an error keeps the last
//! Nodes known, and a 410 lists again. Waits between attempts grow from
//! 250 ms to `max_backoff`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use serde_json::{json, Value};
use wasm_cni_base::log::{log, Level};
use wasm_cni_model::fabric::{reconcile, Fabric};

use crate::api::{Api, ApiError, Event};
use crate::node::Node;
use crate::plan::{plan, Plan, Settings};

/// A metric's name and help, and the metric.
pub type Described<M> = (&'static str, &'static str, M);

/// What cluster mode counts, for the daemon's `/metrics` (each shares its
/// value with its clones).
#[derive(Debug, Clone, Default)]
pub struct Gauges {
    pub nodes: Gauge,
    pub refused: Gauge,
    pub routes: Gauge,
    pub conflicts: Gauge,
    pub api_errors: Counter,
    pub changes: Counter,
}

impl Gauges {
    /// Name and help of each, for the daemon's registry.
    pub fn described(&self) -> (Vec<Described<Gauge>>, Vec<Described<Counter>>) {
        (
            vec![
                ("cluster_nodes", "Node objects cluster mode knows", self.nodes.clone()),
                ("cluster_refused_nodes", "Node objects refused by the scope rule: they add nothing (wasm-cni status says why)", self.refused.clone()),
                ("cluster_routes", "Routes to other nodes' pod CIDRs in the plan", self.routes.clone()),
                ("cluster_conflicts", "Changes the plan wants that the node refused (a destination another route holds)", self.conflicts.clone()),
            ],
            vec![
                ("cluster_api_errors", "Failed reads of the API server (what is applied stays)", self.api_errors.clone()),
                ("cluster_changes", "Routes, tunnels, peers and masquerades added or removed", self.changes.clone()),
            ],
        )
    }
}

#[derive(Debug, Clone)]
pub struct Options {
    pub api: Api,
    pub settings: Settings,
    /// Where `wasm-cni status` reads what cluster mode did (JSON).
    pub status_file: Option<PathBuf>,
    pub resync: Duration,
    pub max_backoff: Duration,
    pub gauges: Gauges,
}

/// What the watcher tells the reconciler.
enum Update {
    /// A whole list: every Node there is.
    Listed(BTreeMap<String, Node>, Vec<String>),
    Event(Event),
    /// The API server could not be read; what is applied stays.
    Error(String),
}

/// Run until the process ends. Returns only if the Node watch stops.
pub fn run(opts: Options, fabric: &mut dyn Fabric) -> Result<(), String> {
    let (tx, rx) = mpsc::channel();
    let api = opts.api.clone();
    let max_backoff = opts.max_backoff;
    std::thread::Builder::new()
        .name("node-watch".into())
        .spawn(move || watch(&api, max_backoff, &tx))
        .map_err(|e| format!("starting the Node watch: {e}"))?;
    let mut state = State {
        gauges: opts.gauges.clone(),
        ..State::default()
    };
    loop {
        let first = rx.recv_timeout(opts.resync);
        let mut changed = false;
        match first {
            Ok(u) => changed |= state.take(u),
            Err(RecvTimeoutError::Timeout) => {}
            // The watcher is gone (it never returns but by panicking).
            Err(RecvTimeoutError::Disconnected) => {
                return Err("the Node watch stopped".into());
            }
        }
        // Everything already waiting counts as one change.
        while let Ok(u) = rx.try_recv() {
            changed |= state.take(u);
        }
        let due = state.synced.is_none_or(|t| t.elapsed() >= opts.resync);
        if state.nodes.is_some() && (changed || due) {
            state.apply(&opts, fabric);
        }
        state.write_status(&opts);
    }
}

#[derive(Default)]
struct State {
    /// None until the first list.
    nodes: Option<BTreeMap<String, Node>>,
    skipped: Vec<String>,
    last_error: Option<String>,
    last_plan: Plan,
    conflicts: Vec<String>,
    synced: Option<Instant>,
    synced_at: Option<SystemTime>,
    /// Shared with the daemon's `/metrics`; the status file says the same.
    gauges: Gauges,
}

impl State {
    /// Fold one update in; whether the Nodes changed.
    fn take(&mut self, u: Update) -> bool {
        match u {
            Update::Listed(nodes, skipped) => {
                for why in &skipped {
                    log(Level::Warn, "cluster", format!("a Node was skipped: {why}"));
                }
                self.skipped = skipped;
                self.last_error = None;
                let changed = self.nodes.as_ref() != Some(&nodes);
                self.nodes = Some(nodes);
                changed
            }
            Update::Event(ev) => {
                self.last_error = None;
                let Some(nodes) = self.nodes.as_mut() else {
                    return false;
                };
                match ev {
                    Event::Put(n) => nodes.insert(n.name.clone(), n.clone()) != Some(n),
                    Event::Deleted(name) => nodes.remove(&name).is_some(),
                    Event::Skipped(why) => {
                        log(Level::Warn, "cluster", format!("a Node was skipped: {why}"));
                        false
                    }
                }
            }
            Update::Error(why) => {
                self.gauges.api_errors.inc();
                log(
                    Level::Warn,
                    "cluster",
                    format!("the API server: {why}; keeping what is applied"),
                );
                self.last_error = Some(why);
                false
            }
        }
    }

    fn apply(&mut self, opts: &Options, fabric: &mut dyn Fabric) {
        let Some(nodes) = &self.nodes else { return };
        let connected = match fabric.connected() {
            Ok(c) => c,
            Err(e) => {
                log(
                    Level::Error,
                    "cluster",
                    format!("reading the node's addresses: {e}"),
                );
                return;
            }
        };
        let p = plan(&opts.settings, nodes, &connected);
        for r in p
            .refused
            .iter()
            .filter(|r| !self.last_plan.refused.contains(r))
        {
            log(Level::Warn, "cluster", format!("refused {r}"));
        }
        match reconcile(fabric, &p.layout) {
            Ok(done) => {
                if !done.is_noop() {
                    log(
                        Level::Info,
                        "cluster",
                        format!(
                            "{} added, {} removed, {} not possible ({} Nodes)",
                            done.added,
                            done.removed,
                            done.failed.len(),
                            nodes.len()
                        ),
                    );
                    self.gauges
                        .changes
                        .inc_by((done.added + done.removed) as u64);
                }
                for f in &done.failed {
                    log(Level::Warn, "cluster", f);
                }
                self.conflicts = done.failed;
            }
            Err(e) => log(
                Level::Error,
                "cluster",
                format!("reading the node's routes: {e}"),
            ),
        }
        let g = &self.gauges;
        g.nodes.set(nodes.len() as i64);
        g.refused.set(p.refused.len() as i64);
        g.routes.set(p.layout.routes.len() as i64);
        g.conflicts.set(self.conflicts.len() as i64);
        self.last_plan = p;
        self.synced = Some(Instant::now());
        self.synced_at = Some(SystemTime::now());
    }

    fn status(&self, opts: &Options) -> Value {
        let l = &self.last_plan.layout;
        json!({
            "node": opts.settings.node,
            "mode": format!("{:?}", opts.settings.mode).to_lowercase(),
            "listed": self.nodes.is_some(),
            "nodes": self.nodes.as_ref().map_or(0, BTreeMap::len),
            "lastSync": self.synced_at.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok()).map(|d| d.as_secs()),
            "apiError": self.last_error,
            "routes": l.routes.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "tunnels": l.vteps.values().map(|v| json!({"name": v.name, "vni": v.vni, "port": v.port, "local": v.local.to_string(), "mtu": v.mtu})).collect::<Vec<_>>(),
            "peers": l.peers.len(),
            "refused": self.last_plan.refused.iter().map(|r| json!({"node": r.node, "why": r.why})).collect::<Vec<_>>(),
            "skipped": self.skipped,
            "conflicts": self.conflicts,
            "changes": self.gauges.changes.get(),
        })
    }

    fn write_status(&self, opts: &Options) {
        let Some(path) = &opts.status_file else {
            return;
        };
        let text = self.status(opts).to_string();
        if let Err(e) = wasm_cni_base::fsutil::write_atomic(path, text.as_bytes()) {
            log(Level::Warn, "cluster", format!("{}: {e}", path.display()));
        }
    }
}

/// List, then watch from the list's version; again from the top on a 410,
/// after a pause on any other error.
fn watch(api: &Api, max_backoff: Duration, tx: &mpsc::Sender<Update>) {
    let mut pause = Duration::from_millis(250);
    let backoff = |why: String, pause: &mut Duration| {
        let _ = tx.send(Update::Error(why));
        std::thread::sleep(*pause);
        *pause = (*pause * 2).min(max_backoff);
    };
    loop {
        let listed = match api.list() {
            Ok(l) => l,
            Err(e) => {
                backoff(format!("listing Nodes: {e}"), &mut pause);
                continue;
            }
        };
        pause = Duration::from_millis(250);
        let mut version = listed.resource_version.clone();
        if tx
            .send(Update::Listed(listed.nodes, listed.skipped))
            .is_err()
        {
            return;
        }
        loop {
            let mut send = |ev: Event| {
                let _ = tx.send(Update::Event(ev));
            };
            match api.watch(&version, &mut send) {
                // The server ended the watch: go on from where it was.
                Ok(v) => {
                    version = v;
                    pause = Duration::from_millis(250);
                }
                Err(ApiError::Gone) => break,
                Err(ApiError::Failed(why)) => backoff(format!("watching Nodes: {why}"), &mut pause),
            }
        }
    }
}
