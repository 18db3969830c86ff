//! Items 1–3: the bridge + host-local ADD+DEL cycle (reference, wasm-cni,
//! floor) and the chain ADD then DEL (reference, wasm-cni), every run in a
//! fresh node and container namespace with fresh state.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::daemon::DaemonSide;
use crate::proc::{exec, in_netns, Cni, Measured, Netns, WorkDir};

/// Where the programs under test are.
pub struct Programs {
    pub wasm_cni: PathBuf,
    /// What a runtime executes in daemon mode: the thin client, installed
    /// as a node installs it (`wasm-cni`, the engine beside it as
    /// `wasm-cni-engine`); the engine itself where no client was built.
    pub client: PathBuf,
    pub floor: PathBuf,
    /// The Debian reference plugins (a CNI_PATH directory).
    pub reference: PathBuf,
    /// `<type>.wasm` components.
    pub components: PathBuf,
    /// wasm-cni's artifact cache, warmed before the measured runs.
    pub cache: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Reference,
    /// wasm-cni, one process per call.
    WasmCni,
    Floor,
    /// wasm-cni through its daemon: the measured process is the client.
    Daemon,
    /// podman's netavark.
    Netavark,
}

impl Side {
    pub fn tag(self) -> &'static str {
        match self {
            Side::Reference => "ref",
            Side::WasmCni => "wasm",
            Side::Floor => "floor",
            Side::Daemon => "daemon",
            Side::Netavark => "netavark",
        }
    }
}

/// What one run measured: the ADD processes, then the DEL processes, and
/// the CPU a daemon spent on them.
#[derive(Debug, Clone)]
pub struct Run {
    pub add: Vec<Measured>,
    pub del: Vec<Measured>,
    pub daemon_cpu: Duration,
    /// For the daemon side: the ADD's time inside the daemon.
    pub daemon_add_wall: Duration,
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl Run {
    pub fn daemon_add_ms(&self) -> f64 {
        ms(self.daemon_add_wall)
    }
    pub fn add_wall_ms(&self) -> f64 {
        self.add.iter().map(|m| ms(m.wall)).sum()
    }
    pub fn del_wall_ms(&self) -> f64 {
        self.del.iter().map(|m| ms(m.wall)).sum()
    }
    pub fn wall_ms(&self) -> f64 {
        self.add_wall_ms() + self.del_wall_ms()
    }
    /// CPU of every process, and of the daemon for them.
    pub fn cpu_ms(&self) -> f64 {
        self.all().map(|m| ms(m.cpu)).sum::<f64>() + ms(self.daemon_cpu)
    }
    /// CPU per plugin process the runtime started.
    pub fn cpu_per_invocation_ms(&self) -> f64 {
        self.cpu_ms() / self.all().count() as f64
    }
    /// The largest peak RSS of any process of the run (a process's figure
    /// includes the children it waited for), MiB.
    pub fn peak_rss_mib(&self) -> f64 {
        self.all().map(|m| m.maxrss_kib).max().unwrap_or(0) as f64 / 1024.0
    }
    pub fn invocations(&self) -> usize {
        self.all().count()
    }
    fn all(&self) -> impl Iterator<Item = &Measured> {
        self.add.iter().chain(&self.del)
    }
}

pub const NETWORK: &str = "benchnet";
pub const CNI_VERSION: &str = "1.0.0";
const IFNAME: &str = "eth0";
const CONTAINER_ID: &str = "bench-ctr";

/// The bridge + host-local entry both sides run.
pub fn bridge_entry(state: &Path) -> Value {
    json!({
        "type": "bridge",
        "bridge": "cni0",
        "isGateway": true,
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": "10.88.0.0/16"}]],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": state.join("ipam"),
        }
    })
}

/// Item 1's host-local alone, as a chain of one: the same range and state
/// as [`bridge_entry`], no link made. What a call costs wasm-cni before
/// its first link (see [`ipam_alone_once`]).
fn ipam_alone_entry(state: &Path) -> Value {
    let mut e = bridge_entry(state);
    json!({"type": "host-local", "ipam": e["ipam"].take()})
}

/// bridge + host-local, tuning, loopback: the bundled podnet chain
/// (portmap has no component, so the chain is 4 plugins with host-local).
/// Reference tuning 1.1.1 has no IFNAME placeholder, so the sysctl names
/// eth0; its backup files go to the run's state.
fn chain_entries(state: &Path) -> Vec<Value> {
    vec![
        bridge_entry(state),
        json!({"type": "tuning", "sysctl": {"net.ipv4.conf.eth0.arp_notify": "1"},
               "dataDir": state.join("tuning")}),
        json!({"type": "loopback"}),
    ]
}

/// The filtered chains of item 7, step by step towards podman's default
/// network: bridge + host-local; with ipMasq; + portmap (one mapping);
/// + firewall; + tuning.
pub const FILTERED_STEPS: [&str; 5] = [
    "bridge + host-local",
    "+ ipMasq",
    "+ portmap",
    "+ firewall",
    "+ tuning",
];

fn filtered_entries(state: &Path, step: usize) -> Vec<Value> {
    let mut bridge = bridge_entry(state);
    if step >= 1 {
        bridge["ipMasq"] = json!(true);
        bridge["hairpinMode"] = json!(true);
    }
    let mut out = vec![bridge];
    if step >= 2 {
        out.push(json!({"type": "portmap", "capabilities": {"portMappings": true}}));
    }
    if step >= 3 {
        out.push(json!({"type": "firewall"}));
    }
    if step >= 4 {
        out.push(json!({"type": "tuning"}));
    }
    out
}

/// What the runtime passes to plugins with the `portMappings` capability.
fn port_mappings() -> Value {
    json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}])
}

/// The wasm-cni network config for a chain.
pub fn wasm_conf(progs: &Programs, state: &Path, chain: &[Value]) -> Value {
    let mut c = json!({
        "cniVersion": CNI_VERSION,
        "name": NETWORK,
        "type": "wasm-cni",
        "pluginDir": progs.components,
        "stateDir": state.join("wasm-cni"),
        "cacheDir": progs.cache,
        "chain": chain,
    });
    if chain.iter().any(|e| e.get("capabilities").is_some()) {
        c["capabilities"] = json!({"portMappings": true});
        c["runtimeConfig"] = json!({"portMappings": port_mappings()});
    }
    c
}

/// A chain entry as libcni hands it to a plugin.
fn plugin_conf(entry: &Value, prev: Option<&Value>) -> Value {
    let mut c = entry.clone();
    c["name"] = json!(NETWORK);
    c["cniVersion"] = json!(CNI_VERSION);
    if entry.get("capabilities").is_some() {
        c["runtimeConfig"] = json!({"portMappings": port_mappings()});
    }
    if let Some(p) = prev {
        c["prevResult"] = p.clone();
    }
    c
}

/// A libcni-like runner: ADD each plugin in order, passing the previous
/// result on; DEL in reverse order, each with the cached final result.
fn run_list(bins: &[PathBuf], entries: &[Value], cni: &Cni<'_>) -> io::Result<Run> {
    let mut add = Vec::new();
    let mut prev: Option<Value> = None;
    for (bin, entry) in bins.iter().zip(entries) {
        let conf = plugin_conf(entry, prev.as_ref());
        let m = exec(
            bin,
            &Cni {
                command: "ADD",
                ..*cni
            },
            conf.to_string().as_bytes(),
        )?
        .ok(&format!("ADD {}", bin.display()))?;
        prev = Some(m.json()?);
        add.push(m);
    }
    let mut del = Vec::new();
    for (bin, entry) in bins.iter().zip(entries).rev() {
        let conf = plugin_conf(entry, prev.as_ref());
        let m = exec(
            bin,
            &Cni {
                command: "DEL",
                ..*cni
            },
            conf.to_string().as_bytes(),
        )?
        .ok(&format!("DEL {}", bin.display()))?;
        del.push(m);
    }
    Ok(Run {
        add,
        del,
        daemon_cpu: Duration::ZERO,
        daemon_add_wall: Duration::ZERO,
    })
}

/// A bridge name of its own for each daemon-mode run (the daemon's node
/// stays; the kernel still makes a bridge per run, as for the others).
fn own_bridge(entries: &mut [Value]) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let name = format!(
        "cnd{}",
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    if let Some(e) = entries.first_mut() {
        e["bridge"] = json!(name);
    }
    name
}

/// One run in fresh namespaces and a fresh state directory (the daemon
/// side: its warm node, a fresh container namespace). `chain` false:
/// bridge + host-local; true: the 4-plugin chain.
pub fn run_once(
    progs: &Programs,
    work: &WorkDir,
    side: Side,
    chain: bool,
    daemon: Option<&DaemonSide>,
) -> io::Result<Run> {
    run_entries(progs, work, side, daemon, |state| {
        Ok(if chain {
            chain_entries(state)
        } else {
            vec![bridge_entry(state)]
        })
    })
}

/// Item 1's bound: wasm-cni (`side`: per invocation or the daemon) running
/// host-local alone in fresh namespaces. Its ADD is everything of a
/// bridge and host-local ADD but the bridge plugin, so that ADD cannot cost
/// less than this plus the kernel's link work, which the floor measures.
pub fn ipam_alone_once(
    progs: &Programs,
    work: &WorkDir,
    side: Side,
    daemon: Option<&DaemonSide>,
) -> io::Result<Run> {
    run_entries(progs, work, side, daemon, |state| {
        Ok(vec![ipam_alone_entry(state)])
    })
}

/// A program's start and exit: `bin` answering VERSION (the floor and the
/// engine answer it without touching the kernel or any state).
pub fn version_once(bin: &Path, progs: &Programs) -> io::Result<Measured> {
    // Item 1's config; VERSION reads no state, so its dataDir is moot.
    let conf = plugin_conf(&bridge_entry(Path::new("")), None);
    let cni_path = progs.reference.to_string_lossy().into_owned();
    let cni = Cni {
        command: "VERSION",
        container_id: CONTAINER_ID,
        netns: "",
        ifname: IFNAME,
        cni_path: &cni_path,
    };
    exec(bin, &cni, conf.to_string().as_bytes())?.ok(&format!("VERSION {}", bin.display()))
}

/// Released entries item 13 seeds host-local's scope with: its history's
/// cap (`HISTORY_CAP` in guest-plugins/host-local), past which an ADD
/// reuses the address released longest ago rather than a never-used one.
pub const HISTORY_CAP: usize = 4096;

/// Item 13: one per-invocation run of bridge + host-local on a /16, its
/// host-local scope empty or, if `full`, holding a full history: a podman
/// host's default network after some thousands of containers.
pub fn history_once(progs: &Programs, work: &WorkDir, full: bool) -> io::Result<Run> {
    run_entries(progs, work, Side::WasmCni, None, |state| {
        if full {
            seed_history(&state.join("ipam").join(NETWORK))?;
        }
        Ok(vec![bridge_entry(state)])
    })
}

/// Write host-local's scope file with [`HISTORY_CAP`] addresses, each held
/// by a container of its own and released an hour ago (past any
/// `reuseIPWait`), oldest first; written as wasm-cni writes it.
fn seed_history(dir: &Path) -> io::Result<()> {
    let released = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(io::Error::other)?
        .as_millis() as u64;
    let released = released.saturating_sub(3_600_000);
    // In the order and with the generation wasm-cni writes: what a node
    // holds once wasm-cni has committed the scope.
    let mut entries = std::collections::BTreeMap::new();
    for i in 0..HISTORY_CAP as u64 {
        // From 10.88.1.1: clear of the gateway, 250 to a /24.
        let ip = format!("10.88.{}.{}", 1 + i / 250, 1 + i % 250);
        entries.insert(
            ip,
            json!({
                "owner": {"containerId": format!("{i:064x}"), "ifname": IFNAME},
                "allocatedAt": released.saturating_sub(60_000),
                "releasedAt": released + i,
            }),
        );
    }
    std::fs::create_dir_all(dir)?;
    let gen = "0123456789abcdef0123456789abcdef";
    let file = json!({"gen": gen, "entries": entries, "values": {}});
    std::fs::write(dir.join("host-local.json"), file.to_string())
}

/// Item 7: step `step` of [`FILTERED_STEPS`].
pub fn filtered_once(
    progs: &Programs,
    work: &WorkDir,
    side: Side,
    step: usize,
    daemon: Option<&DaemonSide>,
) -> io::Result<Run> {
    run_entries(progs, work, side, daemon, |state| {
        Ok(filtered_entries(state, step))
    })
}

/// One run of the chain `make` writes (given the run's state directory).
pub fn run_entries(
    progs: &Programs,
    work: &WorkDir,
    side: Side,
    daemon: Option<&DaemonSide>,
    make: impl FnOnce(&Path) -> io::Result<Vec<Value>>,
) -> io::Result<Run> {
    crate::proc::check_interrupted()?;
    let state = work.run_dir(side.tag())?;
    let mut entries = match make(&state) {
        Ok(entries) => entries,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&state);
            return Err(e);
        }
    };
    let bridge = match side {
        Side::Daemon if entries.first().is_some_and(|e| e["type"] == "bridge") => {
            Some(own_bridge(&mut entries))
        }
        _ => None,
    };
    let (bins, entries): (Vec<PathBuf>, Vec<Value>) = match side {
        Side::Reference => (
            entries
                .iter()
                .map(|e| progs.reference.join(e["type"].as_str().unwrap_or("?")))
                .collect(),
            entries,
        ),
        Side::Floor => (vec![progs.floor.clone()], entries),
        Side::WasmCni => {
            // One plugin to the runtime, the whole chain inside.
            let conf = wasm_conf(progs, &state, &entries);
            (vec![progs.wasm_cni.clone()], vec![conf])
        }
        Side::Daemon => {
            let d = daemon.ok_or_else(|| io::Error::other("no daemon"))?;
            let conf = d.conf(wasm_conf(progs, &state, &entries));
            (vec![progs.client.clone()], vec![conf])
        }
        Side::Netavark => return Err(io::Error::other("netavark runs in item 6")),
    };
    let daemon_node = daemon.filter(|_| side == Side::Daemon);
    let result = {
        let fresh_node = match daemon_node {
            Some(_) => None,
            None => Some(Netns::new()?),
        };
        let node = match (&fresh_node, daemon_node) {
            (Some(n), _) => n,
            (None, Some(d)) => &d.node,
            (None, None) => return Err(io::Error::other("no node")),
        };
        let ctr = Netns::new()?;
        let netns = ctr.path();
        let cni_path = progs.reference.to_string_lossy().into_owned();
        let cni = Cni {
            command: "",
            container_id: CONTAINER_ID,
            netns: &netns,
            ifname: IFNAME,
            cni_path: &cni_path,
        };
        let mut r = in_netns(node, || run_list(&bins, &entries, &cni));
        if r.is_ok() {
            if let Some(n) = fresh_node {
                n.retire();
            }
            ctr.retire();
        }
        if let (Some(d), Ok(run)) = (daemon_node, &mut r) {
            let logged = d.since();
            run.daemon_cpu = logged.cpu;
            run.daemon_add_wall = logged.add_wall;
        }
        if let (Some(d), Some(b)) = (daemon_node, &bridge) {
            d.remove_link(b);
        }
        r
    };
    let _ = std::fs::remove_dir_all(&state);
    result
}

/// Item 4, as a user sees it: the first ADD (+ DEL) of bridge + host-local
/// through the binary with an empty artifact cache.
pub fn cold_binary_add(progs: &Programs, work: &WorkDir) -> io::Result<Run> {
    let cold_cache = work.run_dir("cold-cache")?;
    let cold = Programs {
        wasm_cni: progs.wasm_cni.clone(),
        client: progs.client.clone(),
        floor: progs.floor.clone(),
        reference: progs.reference.clone(),
        components: progs.components.clone(),
        // A fresh directory: wasm-cni creates it 0700 and compiles into it.
        cache: cold_cache.join("cache"),
    };
    let r = run_once(&cold, work, Side::WasmCni, false, None);
    let _ = std::fs::remove_dir_all(&cold_cache);
    r
}

/// Item 6: what podman users already run. netavark (`setup` then
/// `teardown`) with an internal bridge network and a static IP, against
/// wasm-cni's bridge + static with the same bridge, gateway and address,
/// one process per call and through the daemon.
pub fn netavark_once(
    progs: &Programs,
    work: &WorkDir,
    side: Side,
    netavark: &Path,
    daemon: Option<&DaemonSide>,
) -> io::Result<Run> {
    crate::proc::check_interrupted()?;
    let state = work.run_dir(side.tag())?;
    let mut entries = vec![json!({
        "type": "bridge", "bridge": "podman9", "isGateway": true,
        "ipam": {"type": "static", "addresses": [{"address": "10.89.0.5/24", "gateway": "10.89.0.1"}]}
    })];
    let bridge = match side {
        Side::Daemon => Some(own_bridge(&mut entries)),
        _ => None,
    };
    let daemon_node = daemon.filter(|_| side == Side::Daemon);
    let fresh_node = match daemon_node {
        Some(_) => None,
        None => Some(Netns::new()?),
    };
    let node = match (&fresh_node, daemon_node) {
        (Some(n), _) => n,
        (None, Some(d)) => &d.node,
        (None, None) => return Err(io::Error::other("no node")),
    };
    let ctr = Netns::new()?;
    let netns = ctr.path();
    let mut r = in_netns(node, || match side {
        Side::Netavark => {
            let input = json!({
                "container_id": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                "container_name": "bench",
                "networks": {"bench": {"static_ips": ["10.89.0.5"], "interface_name": "eth0"}},
                "network_info": {"bench": {
                    "name": "bench",
                    "id": "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210",
                    "driver": "bridge", "network_interface": "podman9",
                    "subnets": [{"subnet": "10.89.0.0/24", "gateway": "10.89.0.1"}],
                    "ipv6_enabled": false, "internal": true, "dns_enabled": false
                }}
            })
            .to_string();
            let config = state.join("netavark");
            let call = |verb: &str| {
                crate::proc::exec_args(
                    netavark,
                    &[
                        "--config".as_ref(),
                        config.as_os_str(),
                        verb.as_ref(),
                        netns.as_ref(),
                    ],
                    input.as_bytes(),
                )?
                .ok(&format!("netavark {verb}"))
            };
            let add = call("setup")?;
            let del = call("teardown")?;
            Ok(Run {
                add: vec![add],
                del: vec![del],
                daemon_cpu: Duration::ZERO,
                daemon_add_wall: Duration::ZERO,
            })
        }
        _ => {
            let mut conf = wasm_conf(progs, &state, &entries);
            if let Some(d) = daemon_node {
                conf = d.conf(conf);
            }
            let cni_path = progs.reference.to_string_lossy().into_owned();
            let cni = Cni {
                command: "",
                container_id: CONTAINER_ID,
                netns: &netns,
                ifname: IFNAME,
                cni_path: &cni_path,
            };
            let bin = match daemon_node {
                Some(_) => &progs.client,
                None => &progs.wasm_cni,
            };
            run_list(std::slice::from_ref(bin), &[conf], &cni)
        }
    });
    if r.is_ok() {
        if let Some(n) = fresh_node {
            n.retire();
        }
        ctr.retire();
    }
    if let (Some(d), Ok(run)) = (daemon_node, &mut r) {
        let logged = d.since();
        run.daemon_cpu = logged.cpu;
        run.daemon_add_wall = logged.add_wall;
    }
    if let (Some(d), Some(b)) = (daemon_node, &bridge) {
        d.remove_link(b);
    }
    let _ = std::fs::remove_dir_all(&state);
    r
}
