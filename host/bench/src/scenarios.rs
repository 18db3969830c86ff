//! Items 1–3: the bridge + host-local ADD+DEL cycle (reference, wasm-cni,
//! floor) and the chain ADD then DEL (reference, wasm-cni), every run in a
//! fresh node and container namespace with fresh state.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::proc::{exec, in_netns, Cni, Measured, Netns, WorkDir};

/// Where the programs under test are.
pub struct Programs {
    pub wasm_cni: PathBuf,
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
    WasmCni,
    Floor,
}

impl Side {
    fn tag(self) -> &'static str {
        match self {
            Side::Reference => "ref",
            Side::WasmCni => "wasm",
            Side::Floor => "floor",
        }
    }
}

/// What one run measured: the ADD processes, then the DEL processes.
#[derive(Debug, Clone)]
pub struct Run {
    pub add: Vec<Measured>,
    pub del: Vec<Measured>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl Run {
    pub fn add_wall_ms(&self) -> f64 {
        self.add.iter().map(|m| ms(m.wall)).sum()
    }
    pub fn del_wall_ms(&self) -> f64 {
        self.del.iter().map(|m| ms(m.wall)).sum()
    }
    pub fn wall_ms(&self) -> f64 {
        self.add_wall_ms() + self.del_wall_ms()
    }
    pub fn cpu_ms(&self) -> f64 {
        self.all().map(|m| ms(m.cpu)).sum()
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
fn bridge_entry(state: &Path) -> Value {
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

/// The wasm-cni network config for a chain.
pub fn wasm_conf(progs: &Programs, state: &Path, chain: &[Value]) -> Value {
    json!({
        "cniVersion": CNI_VERSION,
        "name": NETWORK,
        "type": "wasm-cni",
        "pluginDir": progs.components,
        "stateDir": state.join("wasm-cni"),
        "cacheDir": progs.cache,
        "chain": chain,
    })
}

/// A chain entry as libcni hands it to a plugin.
fn plugin_conf(entry: &Value, prev: Option<&Value>) -> Value {
    let mut c = entry.clone();
    c["name"] = json!(NETWORK);
    c["cniVersion"] = json!(CNI_VERSION);
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
    Ok(Run { add, del })
}

/// One run in fresh namespaces and a fresh state directory. `chain` false:
/// bridge + host-local; true: the 4-plugin chain.
pub fn run_once(progs: &Programs, work: &WorkDir, side: Side, chain: bool) -> io::Result<Run> {
    crate::proc::check_interrupted()?;
    let state = work.run_dir(side.tag())?;
    let entries = if chain {
        chain_entries(&state)
    } else {
        vec![bridge_entry(&state)]
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
    };
    let result = {
        let node = Netns::new()?;
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
        let r = in_netns(&node, || run_list(&bins, &entries, &cni));
        if r.is_ok() {
            node.retire();
            ctr.retire();
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
        floor: progs.floor.clone(),
        reference: progs.reference.clone(),
        components: progs.components.clone(),
        // A fresh directory: wasm-cni creates it 0700 and compiles into it.
        cache: cold_cache.join("cache"),
    };
    let r = run_once(&cold, work, Side::WasmCni, false);
    let _ = std::fs::remove_dir_all(&cold_cache);
    r
}
