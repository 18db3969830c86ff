//! `wasm-cni plugin test`: a component checked against the CNI contract as
//! an ordinary user, with no namespaces: the real executor and sandbox run
//! it against the in-memory kernel model (`net::MemoryNet`), store, records
//! and packet filter, and each property of the contract gets a verdict.
//!
//! The plugin's own config (as a reference plugin reads it) becomes a
//! one-entry chain whose `type` is the component's file stem; IPAM
//! delegates load from the same directory. The model starts as a node with
//! `lo` and an uplink `eth0` (10.0.2.15/24, default route via 10.0.2.2) and
//! an empty container namespace.
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use wasm_cni_engine::chain::{Attachment, Executor};
use wasm_cni_engine::error::HostError;
use wasm_cni_engine::sandbox::{Faults, Runtime};
use wasm_cni_kernel::filter::{Filter, MemoryFilter};
use wasm_cni_kernel::net::{parse_cidr, MemoryNet, Net, NsRef, Route};
use wasm_cni_protocol::{config, result, version, CniError, Command};
use wasm_cni_store::state::{AttachmentRecords, MemoryRecords};
use wasm_cni_store::{MemoryStore, Scope, StateStore};

const NETNS: &str = "/run/netns/plugin-test";
/// Each ADD/DEL cycle is a new container, so what a plugin leaves per
/// attachment adds up and shows.
const CONTAINER_IDS: [&str; 3] = ["ptest-ctr-1", "ptest-ctr-2", "ptest-ctr-3"];
const IFNAME: &str = "eth0";

/// What to test.
pub struct Options {
    pub plugin: PathBuf,
    /// The plugin's own config.
    pub config: Value,
    /// `CNI_ARGS` pairs.
    pub args: Vec<(String, String)>,
    /// The runtime's capability arguments (`runtimeConfig`).
    pub capability_args: Option<Value>,
    /// A `prevResult` for a chained plugin.
    pub prev_result: Option<Value>,
    /// Overrides the config's `cniVersion`.
    pub cni_version: Option<String>,
    /// Also inject a failure at every host call of ADD and of DEL.
    pub faults: bool,
    /// The whole run's bound (`--max-seconds`).
    pub time_limit: Duration,
}

/// `--max-seconds` unless given.
pub use wasm_cni_engine::sandbox::limits::PLUGIN_TEST_MAX_SECONDS as DEFAULT_MAX_SECONDS;

/// What a call refused for want of time says.
const OUT_OF_TIME: &str = "the run's time bound (--max-seconds) was reached";

/// One property's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub property: &'static str,
    pub ok: bool,
    pub detail: String,
}

/// What the model, store, records and filter hold. Released store entries
/// (quarantine) and plain values (host-local's last reserved address) are
/// not holdings.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Snapshot {
    node: Vec<String>,
    container: Vec<String>,
    live: BTreeSet<String>,
    records: usize,
    rules: Vec<String>,
}

struct World {
    runtime: Arc<Runtime>,
    conf: Value,
    net: Arc<Mutex<Box<dyn Net>>>,
    filter: Arc<Mutex<Box<dyn Filter>>>,
    records: Arc<MemoryRecords>,
    store: Arc<MemoryStore>,
    network: String,
    prev: Option<Value>,
    /// When the run's time is up.
    until: Instant,
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// A failed call as the runtime would see it.
fn cni(e: HostError) -> String {
    let e = CniError::from(e);
    format!("error {}: {}", e.code, e.msg)
}

impl World {
    /// A fresh model; `runtime` reuses loaded components across worlds.
    fn new(opts: &Options, runtime: Option<Arc<Runtime>>, until: Instant) -> Result<World, String> {
        let stem = opts
            .plugin
            .file_stem()
            .and_then(|s| s.to_str())
            .filter(|s| !s.is_empty())
            .ok_or_else(|| format!("{}: not a component file name", opts.plugin.display()))?
            .to_string();
        let dir = opts
            .plugin
            .parent()
            .map(|d| {
                if d.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    d
                }
            })
            .ok_or_else(|| format!("{}: no directory", opts.plugin.display()))?;
        let dir = std::fs::canonicalize(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let Value::Object(mut entry) = opts.config.clone() else {
            return Err("the config must be a JSON object".into());
        };
        let version = match &opts.cni_version {
            Some(v) => v.clone(),
            None => entry
                .get("cniVersion")
                .and_then(Value::as_str)
                .unwrap_or(version::CURRENT)
                .to_string(),
        };
        let network = entry
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("plugin-test")
            .to_string();
        for key in ["cniVersion", "name", "prevResult", "runtimeConfig"] {
            entry.remove(key);
        }
        entry.insert("type".into(), Value::from(stem));
        let mut conf = json!({
            "cniVersion": version,
            "name": network,
            "type": "wasm-cni",
            "pluginDir": dir,
            "stateDir": "/run/wasm-cni-plugin-test",
            "chain": [entry],
        });
        if let Some(prev) = &opts.prev_result {
            conf["prevResult"] = prev.clone();
        }
        if let Some(rc) = &opts.capability_args {
            conf["runtimeConfig"] = rc.clone();
        }
        let runtime = match runtime {
            Some(r) => r,
            None => Arc::new(Runtime::new(&dir, None).map_err(|e| format!("the engine: {e:#}"))?),
        };
        let mut model = MemoryNet::new();
        model.add_namespace(NETNS);
        let node = model.open(NsRef::Current).map_err(err)?;
        model.add_device(node, "eth0", 1500, None).map_err(err)?;
        model
            .add_address(node, "eth0", &parse_cidr("10.0.2.15/24").map_err(err)?)
            .map_err(err)?;
        model
            .add_route(
                node,
                &Route {
                    gw: Some("10.0.2.2".parse().map_err(err)?),
                    dev: Some("eth0".into()),
                    ..Route::to(parse_cidr("0.0.0.0/0").map_err(err)?)
                },
            )
            .map_err(err)?;
        let world = World {
            runtime,
            conf,
            net: Arc::new(Mutex::new(Box::new(model))),
            filter: Arc::new(Mutex::new(Box::new(MemoryFilter::new()))),
            records: Arc::new(MemoryRecords::default()),
            store: Arc::new(MemoryStore::default()),
            network,
            prev: opts.prev_result.clone(),
            until,
        };
        world.stage()?;
        Ok(world)
    }

    /// Put the container interfaces a `prevResult` describes in place, with
    /// their addresses, as the earlier plugins of a chain would have.
    fn stage(&self) -> Result<(), String> {
        let Some(prev) = &self.prev else {
            return Ok(());
        };
        let version = self.conf["cniVersion"].as_str().unwrap_or(version::CURRENT);
        let prev = result::parse(prev, version).map_err(|e| format!("--prev-result: {e}"))?;
        let mut net = self.net.lock().map_err(|_| "poisoned".to_string())?;
        let model = net.as_memory().ok_or("not the kernel model")?;
        let ns = model.open(NsRef::Path(Path::new(NETNS))).map_err(err)?;
        for (i, iface) in prev.interfaces.iter().enumerate() {
            if iface.sandbox.as_deref().is_none_or(str::is_empty) {
                continue;
            }
            model
                .add_device(
                    ns,
                    &iface.name,
                    1500,
                    iface.mac.as_deref().or(Some("02:00:00:00:00:01")),
                )
                .map_err(|e| format!("--prev-result: interface {}: {e}", iface.name))?;
            for ip in prev.ips.iter().filter(|ip| ip.interface == Some(i as u32)) {
                let addr = parse_cidr(&ip.address).map_err(err)?;
                model
                    .add_address(ns, &iface.name, &addr)
                    .map_err(|e| format!("--prev-result: {}: {e}", ip.address))?;
            }
        }
        Ok(())
    }

    fn executor(&self, command: Command, valid: Option<Value>) -> Result<Executor, String> {
        self.executor_with(command, valid, None)
    }

    fn executor_with(
        &self,
        command: Command,
        valid: Option<Value>,
        faults: Option<Arc<Faults>>,
    ) -> Result<Executor, String> {
        let mut conf = self.conf.clone();
        if let Some(v) = valid {
            conf["cni.dev/valid-attachments"] = v;
        }
        let mut parsed = config::parse(conf.to_string().as_bytes(), command).map_err(err)?;
        // No call runs past the run's bound.
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(OUT_OF_TIME.into());
        }
        let left_ms = (left.as_millis() as u64).max(1);
        for e in &mut parsed.chain {
            for l in [&mut e.limits, &mut e.ipam_limits] {
                let ms = wasm_cni_engine::sandbox::Limits::resolve(l).deadline_ms;
                l.deadline_ms = Some(ms.min(left_ms));
            }
        }
        Ok(Executor::new(
            self.runtime.clone(),
            Arc::new(parsed),
            self.records.clone(),
            self.store.clone(),
            Box::new(MemoryNet::new()),
        )
        .with_shared(self.net.clone(), Some(self.filter.clone())))
        .map(|e| match faults {
            Some(f) => e.with_faults(f),
            None => e,
        })
    }

    fn snapshot(&self) -> Result<Snapshot, String> {
        let (node, container) = {
            let mut net = self.net.lock().map_err(|_| "poisoned".to_string())?;
            let model = net.as_memory().ok_or("not the kernel model")?;
            let node = model.open(NsRef::Current).map_err(err)?;
            // A container namespace that is gone reads as a fresh one.
            let container = match model.open(NsRef::Path(Path::new(NETNS))) {
                Ok(id) => model.dump(id),
                Err(_) => Vec::new(),
            };
            // In the container only which links exist counts: the runtime
            // deletes the namespace after DEL, and what DEL may leave on
            // links that stay is the kernel's (lo keeps 127.0.0.1 when set
            // down) or the earlier plugin's (sysctls of the interfaces a
            // prevResult names, which that plugin's DEL deletes).
            let container = container
                .iter()
                .filter_map(|l| {
                    let mut w = l.strip_prefix("link ")?.split(' ').skip(1);
                    Some(format!("link {} ({})", w.next()?, w.next()?))
                })
                .collect();
            (model.dump(node), container)
        };
        let mut live = BTreeSet::new();
        for plugin in self.store.scopes(&self.network).map_err(err)? {
            let scope = Scope {
                network: self.network.clone(),
                plugin: plugin.clone(),
                data_dir: None,
            };
            let mut txn = self.store.begin_by(&scope, None).map_err(err)?;
            for (key, e) in &txn.data().entries {
                if e.is_live() {
                    live.insert(format!(
                        "{plugin}: {key} held by {}/{}",
                        e.owner.container_id, e.owner.ifname
                    ));
                }
            }
        }
        let records = self.records.list(&self.network).map_err(err)?.len();
        let rules = self
            .filter
            .lock()
            .map_err(|_| "poisoned".to_string())?
            .list()
            .map_err(err)?
            .into_iter()
            .map(|e| e.comment)
            .collect();
        Ok(Snapshot {
            node,
            container,
            live,
            records,
            rules,
        })
    }

    fn remove_netns(&self) -> Result<(), String> {
        let mut net = self.net.lock().map_err(|_| "poisoned".to_string())?;
        let model = net.as_memory().ok_or("not the kernel model")?;
        model.remove_namespace(Path::new(NETNS));
        Ok(())
    }

    fn restore_netns(&self) -> Result<(), String> {
        let mut net = self.net.lock().map_err(|_| "poisoned".to_string())?;
        let model = net.as_memory().ok_or("not the kernel model")?;
        model.add_namespace(NETNS);
        drop(net);
        self.stage()
    }
}

/// Lines of `after` not in `before`.
fn new_lines<'a>(before: &[String], after: &'a [String]) -> Vec<&'a str> {
    let old: BTreeSet<&str> = before.iter().map(String::as_str).collect();
    after
        .iter()
        .map(String::as_str)
        .filter(|l| !old.contains(l))
        .collect()
}

/// `link cni0 (bridge), 1 route, 11 sysctls` for lines of a dump.
fn summary(lines: &[&str]) -> String {
    let mut parts: Vec<String> = lines
        .iter()
        .filter_map(|l| {
            let mut w = l.strip_prefix("link ")?.split(' ').skip(1);
            Some(format!("link {} ({})", w.next()?, w.next()?))
        })
        .collect();
    for (prefix, what) in [("route ", "route"), ("sysctl ", "sysctl")] {
        let n = lines.iter().filter(|l| l.starts_with(prefix)).count();
        if n > 0 {
            parts.push(format!("{n} {what}{}", if n == 1 { "" } else { "s" }));
        }
    }
    parts.join(", ")
}

/// What the attachment still holds after `after`, compared with `before`:
/// the container namespace, the store, the records and the filter rules
/// must be as they were; the node side only when `node` (the node keeps
/// what a network shares, such as its bridge and forwarding, after the
/// first DEL, as the reference plugins do).
fn leftovers(before: &Snapshot, after: &Snapshot, node: bool) -> Option<String> {
    let mut out = Vec::new();
    if node && before.node != after.node {
        out.push(format!(
            "the node changed: now has {:?}, no longer {:?}",
            new_lines(&before.node, &after.node),
            new_lines(&after.node, &before.node)
        ));
    }
    if !after.container.is_empty() && before.container != after.container {
        out.push(format!(
            "the container namespace's links changed: now has {:?}, no longer {:?}",
            new_lines(&before.container, &after.container),
            new_lines(&after.container, &before.container)
        ));
    }
    if before.live != after.live {
        let left: Vec<&String> = after.live.difference(&before.live).collect();
        out.push(format!("the store still holds {left:?}"));
    }
    if before.records != after.records {
        out.push(format!(
            "{} attachment record(s) remain",
            after.records.saturating_sub(before.records)
        ));
    }
    if before.rules != after.rules {
        out.push(format!("filter rules remain: {:?}", after.rules));
    }
    (!out.is_empty()).then(|| out.join("; "))
}

fn attachment(opts: &Options, cycle: usize, netns: bool) -> Attachment {
    Attachment {
        container_id: CONTAINER_IDS[cycle].into(),
        ifname: IFNAME.into(),
        netns: netns.then(|| NETNS.into()),
        args: opts.args.clone(),
        ..Attachment::default()
    }
}

struct Run {
    verdicts: Vec<Verdict>,
}

impl Run {
    fn say(&mut self, property: &'static str, outcome: Result<String, String>) -> bool {
        let ok = outcome.is_ok();
        let detail = outcome.unwrap_or_else(|e| e);
        self.verdicts.push(Verdict {
            property,
            ok,
            detail,
        });
        ok
    }
}

/// Why `prepare` stopped: the inputs were refused (as `run` would refuse
/// them), or staging broke its own property. Typed, so a fuzzer never mistakes
/// an input that echoes the property's words for a finding.
#[derive(Debug)]
pub enum Unprepared {
    Refused(String),
    /// Staging the same prevResult into a namespace made anew differed.
    Restaged(String),
}

/// What `run` does before the first plugin call: the config wrapped as a
/// chain, the model staged from the prevResult, a snapshot, each verb's
/// config parsed. For fuzzing the inputs with a `runtime` made once (no
/// component is loaded).
pub fn prepare(opts: &Options, runtime: Arc<Runtime>) -> Result<(), Unprepared> {
    let refused = Unprepared::Refused;
    let until = Instant::now() + opts.time_limit;
    let world = World::new(opts, Some(runtime), until).map_err(refused)?;
    let before = world.snapshot().map_err(refused)?;
    for command in [Command::Add, Command::Check, Command::Del, Command::Gc] {
        world.executor(command, Some(json!([]))).map_err(refused)?;
    }
    world.remove_netns().map_err(refused)?;
    world.restore_netns().map_err(refused)?;
    let after = world.snapshot().map_err(refused)?;
    match leftovers(&before, &after, true) {
        None => Ok(()),
        Some(d) => Err(Unprepared::Restaged(format!(
            "staging the prevResult again differs: {d}"
        ))),
    }
}

/// Run every property; `Err` only when the test cannot start (a config
/// that is not JSON, a component that does not load).
pub fn run(opts: &Options) -> Result<Vec<Verdict>, String> {
    let until = Instant::now() + opts.time_limit;
    let mut verdicts = properties(opts, until)?;
    if Instant::now() >= until {
        verdicts.push(Verdict {
            property: "time-bound",
            ok: false,
            detail: format!(
                "{OUT_OF_TIME} after {} s: the verdicts above that say so were not reached; a component that spins into its deadline on every call runs into it (raise --max-seconds if it is merely slow)",
                opts.time_limit.as_secs()
            ),
        });
    }
    Ok(verdicts)
}

fn properties(opts: &Options, until: Instant) -> Result<Vec<Verdict>, String> {
    let world = World::new(opts, None, until)?;
    let version = world.conf["cniVersion"]
        .as_str()
        .unwrap_or(version::CURRENT)
        .to_string();
    let initial = world.snapshot()?;
    let mut run = Run {
        verdicts: Vec::new(),
    };
    let att = attachment(opts, 0, true);

    // ADD: a result valid for the version, that survives its own round trip.
    let added = world
        .executor(Command::Add, None)
        .and_then(|e| e.add(&att).map_err(cni));
    let add_ok = run.say(
        "add",
        added.as_ref().map_err(Clone::clone).and_then(|r| {
            let text = r.to_json(&version).map_err(err)?;
            result::parse(&text, &version)
                .map_err(|e| format!("the result does not read back as {version}: {e}"))?;
            if let Some(prev) = &opts.prev_result {
                let prev = result::parse(prev, &version).map_err(err)?;
                for ip in &prev.ips {
                    if !r.ips.iter().any(|i| i.address == ip.address) {
                        return Err(format!(
                            "prevResult's address {} is missing from the result",
                            ip.address
                        ));
                    }
                }
            }
            Ok(format!(
                "{} interface(s), {} address(es), cniVersion {version}",
                r.interfaces.len(),
                r.ips.len()
            ))
        }),
    );

    // CHECK after ADD (CHECK exists from 0.4.0 on).
    if version::supports_check(&version) && add_ok {
        let checked = world
            .executor(Command::Check, None)
            .and_then(|e| e.check(&att).map_err(cni));
        run.say("check", checked.map(|()| "passes after ADD".into()));
    }

    // DEL leaves nothing of the attachment: the container namespace, the
    // store, records and rules as before ADD. What the node keeps after it
    // (a shared bridge, forwarding) is the network's: it is the baseline
    // every later ADD and DEL must return to.
    let del = |w: &World, a: &Attachment| -> Result<(), String> {
        w.executor(Command::Del, None)
            .and_then(|e| e.del(a).map_err(cni))
    };
    let deleted = del(&world, &att);
    let settled = world.snapshot()?;
    run.say(
        "del",
        deleted.and_then(|()| match leftovers(&initial, &settled, false) {
            None => {
                let kept = new_lines(&initial.node, &settled.node);
                Ok(if kept.is_empty() {
                    "nothing left behind".to_string()
                } else {
                    format!(
                        "nothing of the attachment left; the node keeps what the network shares: {}",
                        summary(&kept)
                    )
                })
            }
            Some(d) => Err(d),
        }),
    );
    let again = del(&world, &att);
    let after = world.snapshot()?;
    run.say(
        "del-again",
        again.and_then(|()| match leftovers(&settled, &after, true) {
            None => Ok("succeeds and changes nothing".into()),
            Some(d) => Err(d),
        }),
    );
    let readd = |w: &World, cycle: usize| -> Result<(), String> {
        w.executor(Command::Add, None).and_then(|e| {
            e.add(&attachment(opts, cycle, true))
                .map(|_| ())
                .map_err(cni)
        })
    };

    // DEL after the container's namespace is gone (the runtime may call it
    // then): it succeeds, and the node is back at the baseline.
    match readd(&world, 1) {
        Ok(()) => {
            world.remove_netns()?;
            let gone = del(&world, &attachment(opts, 1, false));
            let after = world.snapshot()?;
            world.restore_netns()?;
            run.say(
                "del-without-netns",
                gone.and_then(|()| match leftovers(&settled, &after, true) {
                    None => Ok("succeeds and leaves nothing".into()),
                    Some(d) => Err(d),
                }),
            );
        }
        Err(e) => {
            run.say("del-without-netns", Err(format!("ADD again: {e}")));
        }
    }

    // GC with no valid attachments releases everything (from 1.1.0 on).
    if version::supports_gc_status(&version) {
        let gc = readd(&world, 2).and_then(|()| {
            world
                .executor(Command::Gc, Some(json!([])))
                .and_then(|e| e.gc().map_err(cni))
        });
        let after = world.snapshot()?;
        run.say(
            "gc",
            gc.and_then(|()| match leftovers(&settled, &after, true) {
                None => Ok("with no valid attachments, nothing is held".into()),
                Some(d) => Err(d),
            }),
        );
        // STATUS answers: ready, or one of the spec's "not ready" codes.
        let status = world
            .executor(Command::Status, None)
            .and_then(|e| match e.status() {
                Ok(()) => Ok("ready".to_string()),
                Err(e) => {
                    let e = CniError::from(e);
                    match e.code {
                        50 | 51 => Ok(format!("not ready ({}): {}", e.code, e.msg)),
                        _ => Err(format!("error {}: {}", e.code, e.msg)),
                    }
                }
            });
        run.say("status", status);
    }
    if opts.faults {
        let runtime = world.runtime.clone();
        for verb in [Command::Add, Command::Del] {
            let property = match verb {
                Command::Add => "faults-add",
                _ => "faults-del",
            };
            let report = match sweep(opts, &runtime, verb, &initial, &settled, until) {
                Ok(r) => r,
                // Out of time (or the verb does not run without faults):
                // this property's verdict, not the run's end.
                Err(e) => {
                    run.say(property, Err(e));
                    continue;
                }
            };
            let outcome = if report.leaks.is_empty() {
                Ok(format!("{} injection points, 0 leaks", report.points))
            } else {
                Err(format!(
                    "{} injection points, {} leak(s): {}",
                    report.points,
                    report.leaks.len(),
                    report.leaks.join("; ")
                ))
            };
            run.say(property, outcome);
        }
    }
    Ok(run.verdicts)
}

/// What a fault sweep of one verb found.
struct Sweep {
    points: u64,
    leaks: Vec<String>,
}

/// The attachment's own state left over, in words.
fn attachment_left(initial: &Snapshot, after: &Snapshot) -> Option<String> {
    leftovers(initial, after, false)
}

/// Node state beyond what it held before ADD or keeps after a clean DEL.
fn node_extra(initial: &Snapshot, settled: &Snapshot, after: &Snapshot) -> Option<String> {
    let mut out = Vec::new();
    let allowed: BTreeSet<&str> = initial
        .node
        .iter()
        .chain(&settled.node)
        .map(String::as_str)
        .collect();
    let extra: Vec<&str> = after
        .node
        .iter()
        .map(String::as_str)
        .filter(|l| !allowed.contains(l))
        .collect();
    if !extra.is_empty() {
        out.push(format!("the node has {extra:?}"));
    }
    (!out.is_empty()).then(|| out.join("; "))
}

/// For every N, fail the Nth host call of `verb` in a fresh model: after an
/// ADD fault, DEL must succeed and leave nothing; after a DEL fault, a
/// second DEL must.
fn sweep(
    opts: &Options,
    runtime: &Arc<Runtime>,
    verb: Command,
    initial: &Snapshot,
    settled: &Snapshot,
    until: Instant,
) -> Result<Sweep, String> {
    let att = attachment(opts, 0, true);
    let add = |w: &World, faults: Option<Arc<Faults>>| {
        w.executor_with(Command::Add, None, faults)
            .and_then(|e| e.add(&att).map(|_| ()).map_err(cni))
    };
    let del = |w: &World, faults: Option<Arc<Faults>>| {
        w.executor_with(Command::Del, None, faults)
            .and_then(|e| e.del(&att).map_err(cni))
    };
    // How many calls the verb makes when nothing fails.
    let count = Arc::new(Faults::at(0));
    let w = World::new(opts, Some(runtime.clone()), until)?;
    match verb {
        Command::Add => add(&w, Some(count.clone()))?,
        _ => {
            add(&w, None)?;
            del(&w, Some(count.clone()))?;
        }
    }
    let points = count.seen();
    let mut leaks = Vec::new();
    for n in 1..=points {
        if Instant::now() >= until {
            leaks.push(format!(
                "stopped before injection point {n} of {points}: {OUT_OF_TIME}"
            ));
            break;
        }
        let w = World::new(opts, Some(runtime.clone()), until)?;
        let faults = Arc::new(Faults::at(n));
        let first = match verb {
            Command::Add => add(&w, Some(faults.clone())),
            _ => add(&w, None).and_then(|()| del(&w, Some(faults.clone()))),
        };
        let Some(what) = faults.hit() else {
            leaks.push(format!(
                "call {n} never came (the plugin's calls vary from run to run)"
            ));
            break;
        };
        let verb_name = if verb == Command::Add { "ADD" } else { "DEL" };
        let cleanup = del(&w, None);
        let after = w.snapshot()?;
        let why = match &cleanup {
            Err(e) => Some(format!("the DEL after it failed: {e}")),
            Ok(()) => match attachment_left(initial, &after) {
                Some(left) => Some(left),
                // A shared object a failed call left half-configured (a
                // bridge's accept_ra) is fine if the next clean ADD and DEL
                // of another container put it right.
                None => match node_extra(initial, settled, &after) {
                    None => None,
                    Some(extra) => {
                        let other = attachment(opts, 1, true);
                        let healed = w
                            .executor(Command::Add, None)
                            .and_then(|e| e.add(&other).map(|_| ()).map_err(cni))
                            .and_then(|()| {
                                w.executor(Command::Del, None)
                                    .and_then(|e| e.del(&other).map_err(cni))
                            })
                            .and_then(|()| w.snapshot())
                            .map(|s| node_extra(initial, settled, &s));
                        match healed {
                            Ok(None) => None,
                            Ok(Some(_)) => {
                                Some(format!("{extra}, still after another ADD and DEL"))
                            }
                            Err(e) => Some(format!("{extra}; the next ADD and DEL: {e}")),
                        }
                    }
                },
            },
        };
        if let Some(why) = why {
            let outcome = match first {
                Ok(()) => "succeeded anyway".to_string(),
                Err(e) => e,
            };
            leaks.push(format!(
                "{verb_name} with call {n} ({what}) failing [{outcome}]: {why}"
            ));
        }
    }
    Ok(Sweep { points, leaks })
}

/// The verdicts as the command prints them: one line per property, or one
/// JSON document.
pub fn render(verdicts: &[Verdict], as_json: bool) -> String {
    if as_json {
        let list: Vec<Value> = verdicts
            .iter()
            .map(|v| {
                let mut m = Map::new();
                m.insert("property".into(), Value::from(v.property));
                m.insert("ok".into(), Value::from(v.ok));
                m.insert("detail".into(), Value::from(v.detail.as_str()));
                Value::Object(m)
            })
            .collect();
        let passed = verdicts.iter().all(|v| v.ok);
        let report = json!({"passed": passed, "properties": list});
        // Details quote the plugin: escaped for a terminal like the text.
        return wasm_cni_base::text::json_pretty(&report)
            .map_or_else(|e| format!("{e}\n"), |t| t + "\n");
    }
    verdicts
        .iter()
        .map(|v| {
            // A detail quotes what the plugin answered.
            format!(
                "{} {}: {}\n",
                if v.ok { "PASS" } else { "FAIL" },
                v.property,
                wasm_cni_base::text::Shown(&v.detail)
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fuzzer's finding: a cniVersion that spells the restage property's
    /// message is a refused input, not a broken property.
    #[test]
    fn refusals_that_echo_the_property_are_refusals() {
        let runtime = Arc::new(Runtime::new(std::path::Path::new("/tmp"), None).unwrap());
        let opts = Options {
            plugin: "/tmp/fuzzed.wasm".into(),
            config: json!({"cniVersion": "0.3.1", "name": "t", "type": "tuning"}),
            args: Vec::new(),
            capability_args: None,
            prev_result: None,
            cni_version: Some("staging the prevResult again differs".into()),
            faults: false,
            time_limit: Duration::from_secs(60),
        };
        match prepare(&opts, runtime) {
            Err(Unprepared::Refused(why)) => assert!(why.contains("incompatible CNI versions")),
            other => panic!("{other:?}"),
        }
    }
}
