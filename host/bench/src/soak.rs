//! Item 9: the daemon over many ADD/DEL cycles. A daemon of its own (what
//! the other items sent it is not this item's), every bundled component
//! loaded into it first (a STATUS of each), then bridge + host-local ADD
//! and DEL through the thin client, again and again, in one container
//! namespace under a new container id each cycle. Its resident memory and
//! open descriptors are read from /proc when everything is loaded and then
//! every `every` cycles: a leak of memory, a descriptor, a namespace handle
//! or a thread shows as growth.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::daemon::DaemonSide;
use crate::proc::{exec, in_netns, Cni, Netns, WorkDir};
use crate::scenarios::{bridge_entry, wasm_conf, Programs};

/// One reading of the daemon process.
#[derive(Debug, Clone)]
pub struct Sample {
    /// ADD/DEL cycles done when it was taken.
    pub cycles: usize,
    pub rss_kib: u64,
    pub fds: usize,
    pub threads: u64,
    /// Median ADD wall (ms, the client's) over the cycles since the sample
    /// before: how a call's cost follows what the node has kept (IPAM
    /// history above all).
    pub add_ms: Option<f64>,
    /// Open descriptors by what they are (`socket`, `net` namespace,
    /// `anon_inode:[eventpoll]`, a file's path).
    pub kinds: BTreeMap<String, usize>,
}

#[derive(Debug, Default)]
pub struct Soak {
    /// Components found and loaded (each one's STATUS answered, whatever
    /// its outcome).
    pub components: Vec<String>,
    /// Before anything was loaded, as the daemon started.
    pub started: Option<Sample>,
    /// The first is with every component loaded, before any cycle.
    pub samples: Vec<Sample>,
    pub took: Duration,
}

impl Soak {
    /// The sample growth is measured from: the first after `every` cycles
    /// (what the daemon keeps once it has served a network, its socket
    /// pools and allocator arenas, is not a leak; what grows after is).
    pub fn baseline(&self) -> Option<&Sample> {
        self.samples.get(1)
    }

    /// RSS (KiB) and descriptors, from [`Soak::baseline`] to the last.
    pub fn growth(&self) -> Option<(i64, i64)> {
        let (first, last) = (self.baseline()?, self.samples.last()?);
        Some((
            last.rss_kib as i64 - first.rss_kib as i64,
            last.fds as i64 - first.fds as i64,
        ))
    }
}

/// What differs between two samples' descriptors, as `kind ±n`.
pub fn kinds_diff(from: &Sample, to: &Sample) -> String {
    let mut keys: Vec<&String> = from.kinds.keys().chain(to.kinds.keys()).collect();
    keys.sort();
    keys.dedup();
    let parts: Vec<String> = keys
        .into_iter()
        .filter_map(|k| {
            let a = from.kinds.get(k).copied().unwrap_or(0) as i64;
            let b = to.kinds.get(k).copied().unwrap_or(0) as i64;
            (a != b).then(|| format!("`{k}` {:+}", b - a))
        })
        .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

fn sample(pid: u32, cycles: usize) -> io::Result<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| crate::proc::status_field(&status, name).unwrap_or(0);
    let mut kinds = BTreeMap::new();
    let mut fds = 0;
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))?.flatten() {
        fds += 1;
        let target = std::fs::read_link(entry.path())
            .map(|t| t.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "?".into());
        // `socket:[123]`, `net:[4026…]`: the kind, not the instance.
        let kind = match target.split_once(":[") {
            Some((kind, _)) if !target.starts_with('/') => kind.to_string(),
            _ => target,
        };
        *kinds.entry(kind).or_insert(0) += 1;
    }
    Ok(Sample {
        cycles,
        rss_kib: field("VmRSS:"),
        fds,
        threads: field("Threads:"),
        add_ms: None,
        kinds,
    })
}

/// The bundled components: the `.wasm` files of the components directory
/// (not its fixtures).
fn bundled(dir: &Path) -> io::Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "wasm"))
        .filter_map(|p| Some(p.file_stem()?.to_str()?.to_string()))
        .collect();
    names.sort();
    Ok(names)
}

pub fn measure(progs: &Programs, work: &WorkDir, cycles: usize, every: usize) -> io::Result<Soak> {
    let started = Instant::now();
    let d = DaemonSide::start(&progs.wasm_cni, work)?;
    let pid = d
        .pid()
        .ok_or_else(|| io::Error::other("the daemon has no process"))?;
    let mut soak = Soak {
        started: Some(sample(pid, 0)?),
        ..Soak::default()
    };
    let state = work.run_dir("soak")?;
    let cni_path = progs.reference.to_string_lossy().into_owned();
    let ctr = Netns::new()?;
    let netns = ctr.path();
    let call = |command: &str, container_id: &str, conf: &Value| {
        exec(
            &progs.client,
            &Cni {
                command,
                container_id,
                netns: &netns,
                ifname: "eth0",
                cni_path: &cni_path,
            },
            conf.to_string().as_bytes(),
        )
    };
    for name in bundled(&progs.components)? {
        let mut conf = d.conf(wasm_conf(progs, &state, &[json!({"type": name})]));
        // STATUS is a verb of 1.1.0.
        conf["cniVersion"] = json!("1.1.0");
        // A plugin may answer STATUS with an error for a config this
        // small; it was loaded to answer at all.
        call("STATUS", "", &conf)?;
        soak.components.push(name);
    }
    let mut entry = bridge_entry(&state);
    entry["bridge"] = json!("soak0");
    let conf = d.conf(wasm_conf(progs, &state, &[entry]));
    let every = every.max(1);
    soak.samples.push(sample(pid, 0)?);
    let outcome = in_netns(&d.node, || {
        let mut adds = Vec::with_capacity(every);
        for cycle in 1..=cycles {
            crate::proc::check_interrupted()?;
            let id = format!("soak-{cycle}");
            let t = Instant::now();
            call("ADD", &id, &conf)?.ok("soak ADD")?;
            adds.push(t.elapsed().as_secs_f64() * 1e3);
            call("DEL", &id, &conf)?.ok("soak DEL")?;
            if cycle % every == 0 {
                let mut s = sample(pid, cycle)?;
                s.add_ms = Some(crate::stats::summarize(&adds).median);
                adds.clear();
                eprintln!(
                    "bench: 9 soak, {cycle} cycles: RSS {} KiB, {} descriptors, ADD {:.2} ms",
                    s.rss_kib,
                    s.fds,
                    s.add_ms.unwrap_or(f64::NAN),
                );
                soak.samples.push(s);
            }
        }
        Ok(())
    });
    d.remove_link("soak0");
    let _ = std::fs::remove_dir_all(&state);
    outcome?;
    soak.took = started.elapsed();
    Ok(soak)
}
