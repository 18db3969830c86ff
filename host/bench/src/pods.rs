//! Item 10: pods as the kubelet starts them after a node comes up: N
//! RunPodSandbox calls at once through containerd 1.6's CRI, on bridge +
//! host-local from the reference plugins, from wasm-cni per invocation, and
//! from wasm-cni through its daemon, against containerd's floor (a plugin
//! that only answers). Every side and round gets a node
//! namespace, a containerd (host/cri: its own root, state and socket, an
//! offline pause image) and state of its own; one pod is started and removed
//! before the measured burst (containerd's and the plugins' first-call costs
//! are not the burst's). The pods are stopped and removed after it,
//! unmeasured. Skipped (with a message) where containerd is not installed.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wasm_cni_cri::{pause_image, Containerd};

use crate::daemon::DaemonSide;
use crate::proc::{Netns, WorkDir};
use crate::scenarios::{bridge_entry, wasm_conf, Programs, CNI_VERSION, NETWORK};

/// The floor side's plugin: one exec, no kernel work, a result naming the
/// interface containerd looks for.
const FLOOR: &str = r#"#!/bin/sh
cat >/dev/null
case "$CNI_COMMAND" in
ADD) printf '{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"%s"}],"ips":[{"address":"10.89.0.2/24","interface":0}]}' "$CNI_NETNS" ;;
VERSION) printf '{"cniVersion":"1.0.0","supportedVersions":["1.0.0"]}' ;;
esac
"#;

pub fn containerd_installed() -> bool {
    Path::new("/usr/bin/containerd").is_file()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodSide {
    Reference,
    WasmCni,
    Daemon,
    /// containerd and runc with a plugin that only answers (a shell script
    /// printing a fixed result): what no CNI plugin can take away from a
    /// pod's start.
    Floor,
}

pub const SIDES: [PodSide; 4] = [
    PodSide::Reference,
    PodSide::WasmCni,
    PodSide::Daemon,
    PodSide::Floor,
];

impl PodSide {
    pub fn label(self) -> &'static str {
        match self {
            PodSide::Reference => "reference plugins",
            PodSide::WasmCni => "wasm-cni, per invocation",
            PodSide::Daemon => "wasm-cni, through the daemon",
            PodSide::Floor => "containerd's floor (a plugin that only answers)",
        }
    }
}

/// One side's bursts: every RunPodSandbox's time, ms, and the calls that
/// failed (of the burst, and of the unmeasured cleanup after it).
#[derive(Debug, Clone, Default)]
pub struct Burst {
    pub run_ms: Vec<f64>,
    pub failures: Vec<String>,
    /// From the first call's start to the last pod's answer, per round.
    pub all_up_ms: Vec<f64>,
}

/// `pods` RunPodSandbox at once, `rounds` times per side, sides rotated.
pub fn measure(
    progs: &Programs,
    work: &WorkDir,
    pods: usize,
    rounds: usize,
    bury: &dyn Fn(),
) -> io::Result<[Burst; 4]> {
    let pause = pause_image(&work.root).map_err(io::Error::other)?;
    let mut out: [Burst; 4] = Default::default();
    for round in 0..rounds {
        let mut order = SIDES;
        order.rotate_left(round % SIDES.len());
        for side in order {
            crate::proc::check_interrupted()?;
            eprintln!("bench: 10 round {}: {}", round + 1, side.label());
            let i = SIDES.iter().position(|s| *s == side).unwrap_or(0);
            burst(progs, work, &pause, side, pods, &mut out[i])?;
            bury();
        }
    }
    Ok(out)
}

fn burst(
    progs: &Programs,
    work: &WorkDir,
    pause: &Path,
    side: PodSide,
    pods: usize,
    into: &mut Burst,
) -> io::Result<()> {
    let dir = work.run_dir("cri")?;
    let bin = dir.join("bin");
    let conf = dir.join("net.d");
    std::fs::create_dir_all(&bin)?;
    std::fs::create_dir_all(&conf)?;
    // containerd runs the reference loopback for every pod, on every side,
    // as on any node.
    std::fs::copy(progs.reference.join("loopback"), bin.join("loopback"))?;
    let state = dir.join("state");
    let mut bridge = bridge_entry(&state);
    bridge["ipam"]["ranges"] = json!([[{"subnet": "10.89.0.0/24"}]]);
    // The daemon side's node is the daemon's; the others get one here.
    let (daemon, own_node) = match side {
        PodSide::Daemon => (Some(DaemonSide::start(&progs.wasm_cni, work)?), None),
        _ => (None, Some(Netns::new()?)),
    };
    let node_name = match (&daemon, &own_node) {
        (Some(d), _) => d.node.name.clone(),
        (_, Some(n)) => n.name.clone(),
        _ => return Err(io::Error::other("no node")),
    };
    let plugin: Value = match side {
        PodSide::Reference => {
            for p in ["bridge", "host-local"] {
                std::fs::copy(progs.reference.join(p), bin.join(p))?;
            }
            bridge
        }
        PodSide::WasmCni => {
            std::fs::copy(&progs.wasm_cni, bin.join("wasm-cni"))?;
            strip(wasm_conf(progs, &state, &[bridge]))
        }
        PodSide::Daemon => {
            install_client(&progs.client, &bin)?;
            let d = daemon
                .as_ref()
                .ok_or_else(|| io::Error::other("no daemon"))?;
            strip(d.conf(wasm_conf(progs, &state, &[bridge])))
        }
        PodSide::Floor => {
            let script = bin.join("floor");
            std::fs::write(&script, FLOOR)?;
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
            json!({"type": "floor"})
        }
    };
    let conflist = json!({
        "cniVersion": CNI_VERSION,
        "name": NETWORK,
        "plugins": [plugin],
    });
    std::fs::write(conf.join("10-bench.conflist"), conflist.to_string())?;
    let ctd = Containerd::start(&node_name, &dir.join("containerd"), &bin, &conf, pause)
        .map_err(io::Error::other)?;
    let cri = ctd.cri().map_err(io::Error::other)?;
    let started = Instant::now();
    while !cri.network_ready().map_err(io::Error::other)?.0 {
        if started.elapsed() > Duration::from_secs(20) {
            return Err(io::Error::other("containerd never reported NetworkReady"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    cri.run_pod("warm-up")
        .and_then(|id| cri.stop_pod(&id).and_then(|()| cri.remove_pod(&id)))
        .map_err(|e| io::Error::other(format!("{}: the warm-up pod: {e}", side.label())))?;

    let barrier = Barrier::new(pods);
    let t0 = Instant::now();
    let results: Vec<Result<(String, Duration, Duration), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..pods)
            .map(|i| {
                let (cri, barrier) = (&cri, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let t = Instant::now();
                    cri.run_pod(&format!("pod-{i}"))
                        .map(|id| (id, t.elapsed(), t0.elapsed()))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a thread panicked".into())))
            .collect()
    });
    let mut last_up = Duration::ZERO;
    let mut ids = Vec::new();
    for r in results {
        match r {
            Ok((id, took, up)) => {
                into.run_ms.push(took.as_secs_f64() * 1e3);
                last_up = last_up.max(up);
                ids.push(id);
            }
            Err(e) => into.failures.push(e),
        }
    }
    into.all_up_ms.push(last_up.as_secs_f64() * 1e3);
    for id in ids {
        if let Err(e) = cri.stop_pod(&id).and_then(|()| cri.remove_pod(&id)) {
            into.failures.push(format!("cleanup: {e}"));
        }
    }
    drop(cri);
    drop(ctd);
    drop(daemon);
    if let Some(n) = own_node {
        n.retire();
    }
    Ok(())
}

/// The network's plugin entry as it sits in a conflist: `name` and
/// `cniVersion` are the conflist's.
fn strip(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.remove("name");
        o.remove("cniVersion");
    }
    v
}

/// The thin client as `wasm-cni`, the engine beside it as
/// `wasm-cni-engine` (as `wasm-cni install` lays them out).
fn install_client(client: &Path, bin: &Path) -> io::Result<()> {
    let engine: PathBuf = client.with_file_name("wasm-cni-engine");
    std::fs::copy(client, bin.join("wasm-cni"))?;
    if engine.is_file() {
        std::fs::copy(&engine, bin.join("wasm-cni-engine"))?;
    }
    Ok(())
}

/// Nearest-rank percentile of `v` (unsorted), ms.
pub fn percentile(v: &[f64], p: f64) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return f64::NAN;
    }
    s.sort_by(f64::total_cmp);
    let rank = (p * s.len() as f64).ceil() as usize;
    s[rank.clamp(1, s.len()) - 1]
}
