//! Item 5: IPAM throughput. `clients` threads, each a runtime executing
//! host-local for its own containers: every client ADDs its share, all
//! wait at a barrier (where every live address is checked for duplicates),
//! then every client DELs its share. Reference: /usr/lib/cni/host-local
//! executed directly; wasm-cni: a chain of just host-local, one process per
//! call or through the daemon.

use std::collections::HashSet;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::Instant;

use serde_json::{json, Value};

use crate::daemon::DaemonSide;
use crate::proc::{exec, in_netns, Cni, Netns, WorkDir};
use crate::scenarios::{wasm_conf, Programs, Side, CNI_VERSION, NETWORK};

#[derive(Debug, Clone)]
pub struct Throughput {
    /// ADDs + DELs per second over the whole run.
    pub ops_per_s: f64,
    /// Addresses held by two live containers at the barrier.
    pub duplicates: usize,
    pub failures: usize,
    /// CPU (user + system) of the plugin processes per operation, ms: on a
    /// machine with every core busy, throughput is cores ÷ this.
    pub cpu_per_op_ms: f64,
}

fn ipam_entry(state: &Path) -> Value {
    json!({
        "type": "host-local",
        "ranges": [[{"subnet": "10.77.0.0/16"}]],
        "dataDir": state.join("ipam"),
    })
}

/// One run: `clients` concurrent clients of `per_client` ADDs then DELs
/// each, in a fresh node namespace with fresh state.
pub fn run_once(
    progs: &Programs,
    work: &WorkDir,
    side: Side,
    clients: usize,
    per_client: usize,
    daemon: Option<&DaemonSide>,
) -> io::Result<Throughput> {
    crate::proc::check_interrupted()?;
    let state = work.run_dir("ipam")?;
    let ipam = ipam_entry(&state);
    let (bin, conf) = match side {
        Side::Reference => (
            progs.reference.join("host-local"),
            json!({"cniVersion": CNI_VERSION, "name": NETWORK, "type": "host-local", "ipam": ipam}),
        ),
        _ => {
            let conf = wasm_conf(
                progs,
                &state,
                &[json!({"type": "host-local", "ipam": ipam})],
            );
            match (side, daemon) {
                (Side::Daemon, Some(d)) => (progs.client.clone(), d.conf(conf)),
                _ => (progs.wasm_cni.clone(), conf),
            }
        }
    };
    // What the daemon did before this run is not this run's.
    if let Some(d) = daemon {
        d.cpu_since();
    }
    let conf = conf.to_string();
    let node = Netns::new()?;
    let netns = node.path();
    let cni_path = progs.reference.to_string_lossy().into_owned();
    let barrier = Barrier::new(clients);
    let live: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let failures: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let cpu_us = AtomicU64::new(0);

    let started = Instant::now();
    std::thread::scope(|s| {
        for c in 0..clients {
            let (bin, conf, netns, cni_path) = (&bin, &conf, &netns, &cni_path);
            let (barrier, live, failures, node) = (&barrier, &live, &failures, &node);
            let cpu_us = &cpu_us;
            let account = move |m: &crate::proc::Measured| {
                cpu_us.fetch_add(m.cpu.as_micros() as u64, Ordering::Relaxed);
            };
            s.spawn(move || {
                // Whatever happens, every client reaches the barrier once.
                let passed = AtomicBool::new(false);
                let outcome = in_netns(node, || {
                    let ids: Vec<String> = (0..per_client).map(|i| format!("c{c}-{i}")).collect();
                    let cni = |command, id| Cni {
                        command,
                        container_id: id,
                        netns,
                        ifname: "eth0",
                        cni_path,
                    };
                    let mut errors = Vec::new();
                    for id in &ids {
                        let out = exec(bin, &cni("ADD", id), conf.as_bytes());
                        if let Ok(m) = &out {
                            account(m);
                        }
                        match out {
                            Ok(m) if m.code == 0 => {
                                let ip = m.json().ok().and_then(|v| {
                                    v["ips"][0]["address"].as_str().map(str::to_string)
                                });
                                match ip {
                                    Some(ip) => {
                                        if let Ok(mut l) = live.lock() {
                                            l.push(ip);
                                        }
                                    }
                                    None => errors.push(format!("ADD {id}: no address")),
                                }
                            }
                            Ok(m) => errors.push(format!("ADD {id}: {}", m.stdout.trim())),
                            Err(e) => errors.push(format!("ADD {id}: {e}")),
                        }
                    }
                    barrier.wait();
                    passed.store(true, Ordering::SeqCst);
                    for id in &ids {
                        let out = exec(bin, &cni("DEL", id), conf.as_bytes());
                        if let Ok(m) = &out {
                            account(m);
                        }
                        match out {
                            Ok(m) if m.code == 0 => {}
                            Ok(m) => errors.push(format!("DEL {id}: {}", m.stdout.trim())),
                            Err(e) => errors.push(format!("DEL {id}: {e}")),
                        }
                    }
                    Ok(errors)
                });
                if !passed.load(Ordering::SeqCst) {
                    barrier.wait();
                }
                let errors = outcome.unwrap_or_else(|e| vec![e.to_string()]);
                if let Ok(mut f) = failures.lock() {
                    f.extend(errors);
                }
            });
        }
    });
    let elapsed = started.elapsed().as_secs_f64();
    if let (Side::Daemon, Some(d)) = (side, daemon) {
        cpu_us.fetch_add(d.cpu_since().as_micros() as u64, Ordering::Relaxed);
    }
    node.retire();
    let _ = std::fs::remove_dir_all(&state);

    let live = live.into_inner().map_err(io::Error::other)?;
    let unique: HashSet<&String> = live.iter().collect();
    let failures = failures.into_inner().map_err(io::Error::other)?;
    if let Some(first) = failures.first() {
        eprintln!(
            "bench: ipam {side:?} x{clients}: {} failures, first: {first}",
            failures.len()
        );
    }
    let ops = 2 * clients * per_client;
    Ok(Throughput {
        ops_per_s: ops as f64 / elapsed,
        cpu_per_op_ms: cpu_us.load(Ordering::Relaxed) as f64 / 1e3 / ops as f64,
        duplicates: live.len() - unique.len(),
        failures: failures.len(),
    })
}
