//! Item 8: IPAM on the etcd store. One real etcd in a namespace of its
//! own; 1 or 3 node namespaces on a bridge to it, each with its own state
//! directory; per node 1, 4 or 16 clients running host-local through
//! wasm-cni, every client ADDing its share and then DELing it. The local
//! store on one node is the baseline. Skipped (with a message) where
//! `etcd` is not installed.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::proc::{exec_env, in_netns, Cni, Measured, Netns, WorkDir};
use crate::scenarios::{Programs, CNI_VERSION, NETWORK};

#[derive(Debug, Clone)]
pub struct Point {
    /// `local` or `etcd`.
    pub store: &'static str,
    pub nodes: usize,
    pub clients_per_node: usize,
    pub ops_per_s: Vec<f64>,
    pub duplicates: usize,
    pub failures: usize,
    /// CPU (user + system) of the wasm-cni processes per operation, ms.
    pub cpu_per_op_ms: Vec<f64>,
    /// etcd's own CPU per operation, ms.
    pub etcd_cpu_per_op_ms: Vec<f64>,
    /// Calls run again: after a commit conflict with another node, and
    /// after an ADD its node's share of the pool could not serve.
    pub conflicts: usize,
    pub borrowed: usize,
}

pub fn etcd_installed() -> bool {
    Path::new("/usr/bin/etcd").is_file()
}

const ETCD_ADDR: &str = "10.219.0.1";

struct Etcd {
    ns: Netns,
    child: Child,
    _data: PathBuf,
}

impl Etcd {
    fn start(work: &WorkDir) -> io::Result<Etcd> {
        let ns = Netns::new()?;
        for args in [
            vec!["link", "set", "lo", "up"],
            vec!["link", "add", "cl0", "type", "bridge"],
            vec!["addr", "add", "10.219.0.1/24", "dev", "cl0"],
            vec!["link", "set", "cl0", "up"],
        ] {
            ip(&ns.name, &args)?;
        }
        let data = work.run_dir("etcd")?;
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns.name,
                "etcd",
                "--name",
                "b",
                "--data-dir",
            ])
            .arg(&data)
            .args([
                "--listen-client-urls",
                &format!("http://{ETCD_ADDR}:2379,http://127.0.0.1:2379"),
                "--advertise-client-urls",
                &format!("http://{ETCD_ADDR}:2379"),
                "--listen-peer-urls",
                "http://127.0.0.1:2380",
                "--initial-advertise-peer-urls",
                "http://127.0.0.1:2380",
                "--initial-cluster",
                "b=http://127.0.0.1:2380",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let e = Etcd {
            ns,
            child,
            _data: data,
        };
        let started = Instant::now();
        loop {
            let ok = Command::new("ip")
                .args(["netns", "exec", &e.ns.name, "etcdctl", "endpoint", "health"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()?
                .success();
            if ok {
                return Ok(e);
            }
            if started.elapsed() > Duration::from_secs(20) {
                return Err(io::Error::other("etcd did not come up"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn join(&self, node: &Netns, n: usize) -> io::Result<()> {
        let port = format!("p{n}");
        ip(
            &self.ns.name,
            &[
                "link", "add", &port, "type", "veth", "peer", "name", "cl0", "netns", &node.name,
            ],
        )?;
        ip(
            &self.ns.name,
            &["link", "set", &port, "master", "cl0", "up"],
        )?;
        ip(
            &node.name,
            &[
                "addr",
                "add",
                &format!("10.219.0.{}/24", 10 + n),
                "dev",
                "cl0",
            ],
        )?;
        ip(&node.name, &["link", "set", "cl0", "up"])
    }
}

impl Etcd {
    /// CPU etcd has used so far (user + system).
    fn cpu(&self) -> Duration {
        crate::proc::cpu_time(self.child.id()).unwrap_or_default()
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ip(ns: &str, args: &[&str]) -> io::Result<()> {
    let ok = Command::new("ip")
        .args(["-n", ns])
        .args(args)
        .stdout(Stdio::null())
        .status()?
        .success();
    if ok {
        Ok(())
    } else {
        Err(io::Error::other(format!("ip -n {ns} {}", args.join(" "))))
    }
}

/// One run: `nodes` × `clients` clients of `per_client` ADDs then DELs.
fn run_once(
    progs: &Programs,
    work: &WorkDir,
    etcd: Option<&Etcd>,
    nodes: usize,
    clients: usize,
    per_client: usize,
    round: usize,
) -> io::Result<RunOutcome> {
    crate::proc::check_interrupted()?;
    let mut node_ns = Vec::new();
    let mut confs = Vec::new();
    for n in 0..nodes {
        let ns = Netns::new()?;
        ip(&ns.name, &["link", "set", "lo", "up"])?;
        let state = work.run_dir(&format!("cluster-{round}-{n}"))?;
        let mut conf = json!({
            "cniVersion": CNI_VERSION, "name": format!("{NETWORK}-{round}"), "type": "wasm-cni",
            "pluginDir": progs.components, "stateDir": state.join("wasm-cni"),
            "cacheDir": progs.cache,
            "chain": [{"type": "host-local", "ipam": {"ranges": [[{"subnet": "10.78.0.0/16"}]]}}],
        });
        if let Some(e) = etcd {
            e.join(&ns, round * 3 + n)?;
            conf["store"] = json!({"type": "etcd", "endpoints": [format!("http://{ETCD_ADDR}:2379")],
                "prefix": "/bench", "node": format!("n{n}"), "timeoutMs": 5000});
        }
        node_ns.push(ns);
        confs.push(conf.to_string());
    }
    let live: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let failures: Mutex<usize> = Mutex::new(0);
    let tally: Mutex<(Duration, usize, usize)> = Mutex::new((Duration::ZERO, 0, 0));
    let note = |m: &Measured| {
        if let Ok(mut t) = tally.lock() {
            t.0 += m.cpu;
            t.1 += m.stderr.matches("running it again").count();
            t.2 += m
                .stderr
                .matches("borrowing from other nodes' blocks")
                .count();
        }
    };
    let barrier = std::sync::Barrier::new(nodes * clients);
    let cni_path = progs.reference.to_string_lossy().into_owned();
    let etcd_cpu = etcd.map(Etcd::cpu);
    let started = Instant::now();
    std::thread::scope(|s| {
        for (n, ns) in node_ns.iter().enumerate() {
            for c in 0..clients {
                let (conf, live, failures, barrier, cni_path, note) =
                    (&confs[n], &live, &failures, &barrier, &cni_path, &note);
                let netns = ns.path();
                s.spawn(move || {
                    let fail = || {
                        if let Ok(mut f) = failures.lock() {
                            *f += 1;
                        }
                    };
                    let ids: Vec<String> =
                        (0..per_client).map(|i| format!("n{n}c{c}-{i}")).collect();
                    let cni = |command, id| Cni {
                        command,
                        container_id: id,
                        netns: &netns,
                        ifname: "eth0",
                        cni_path,
                    };
                    let outcome = in_netns(ns, || {
                        for id in &ids {
                            let out =
                                exec_env(&progs.wasm_cni, &cni("ADD", id), conf.as_bytes(), LOG);
                            if let Ok(m) = &out {
                                note(m);
                            }
                            match out {
                                Ok(m) if m.code == 0 => {
                                    let ip = m.json().ok().and_then(|v| {
                                        v["ips"][0]["address"].as_str().map(str::to_string)
                                    });
                                    match (ip, live.lock()) {
                                        (Some(ip), Ok(mut l)) => l.push(ip),
                                        _ => fail(),
                                    }
                                }
                                _ => fail(),
                            }
                        }
                        Ok(())
                    });
                    if outcome.is_err() {
                        fail();
                    }
                    barrier.wait();
                    let outcome = in_netns(ns, || {
                        for id in &ids {
                            let out =
                                exec_env(&progs.wasm_cni, &cni("DEL", id), conf.as_bytes(), LOG);
                            if let Ok(m) = &out {
                                note(m);
                            }
                            match out {
                                Ok(m) if m.code == 0 => {}
                                _ => fail(),
                            }
                        }
                        Ok(())
                    });
                    if outcome.is_err() {
                        fail();
                    }
                });
            }
        }
    });
    let elapsed = started.elapsed().as_secs_f64();
    let etcd_cpu = match (etcd, etcd_cpu) {
        (Some(e), Some(before)) => e.cpu().saturating_sub(before),
        _ => Duration::ZERO,
    };
    for ns in node_ns {
        ns.retire();
    }
    let live = live.into_inner().map_err(io::Error::other)?;
    let unique: HashSet<&String> = live.iter().collect();
    let failures = failures.into_inner().map_err(io::Error::other)?;
    let ops = 2 * nodes * clients * per_client;
    let (cpu, conflicts, borrowed) = tally.into_inner().map_err(io::Error::other)?;
    Ok(RunOutcome {
        ops_per_s: ops as f64 / elapsed,
        cpu_per_op_ms: cpu.as_secs_f64() * 1e3 / ops as f64,
        etcd_cpu_per_op_ms: etcd_cpu.as_secs_f64() * 1e3 / ops as f64,
        duplicates: live.len() - unique.len(),
        failures,
        conflicts,
        borrowed,
    })
}

/// Debug level: the lines that say a call ran again.
const LOG: &[(&str, &str)] = &[("WASM_CNI_LOG", "debug")];

struct RunOutcome {
    ops_per_s: f64,
    cpu_per_op_ms: f64,
    etcd_cpu_per_op_ms: f64,
    duplicates: usize,
    failures: usize,
    conflicts: usize,
    borrowed: usize,
}

/// Every point: the local store on one node, etcd on 1 and 3 nodes, at 1,
/// 4 and 16 clients per node, `reps` runs each.
pub fn measure(
    progs: &Programs,
    work: &WorkDir,
    allocs_per_node: usize,
    reps: usize,
    bury: &dyn Fn(),
) -> io::Result<Vec<Point>> {
    let etcd = Etcd::start(work)?;
    let mut points = Vec::new();
    let mut round = 0;
    for clients in [1usize, 4, 16] {
        for (store, nodes) in [("local", 1usize), ("etcd", 1), ("etcd", 3)] {
            eprintln!("bench: 8 cluster IPAM, {store} store, {nodes} node(s) x {clients} clients");
            let per_client = (allocs_per_node / clients).max(1);
            let mut p = Point {
                store,
                nodes,
                clients_per_node: clients,
                ops_per_s: Vec::new(),
                duplicates: 0,
                failures: 0,
                cpu_per_op_ms: Vec::new(),
                etcd_cpu_per_op_ms: Vec::new(),
                conflicts: 0,
                borrowed: 0,
            };
            for _ in 0..reps {
                bury();
                let e = (store == "etcd").then_some(&etcd);
                let r = run_once(progs, work, e, nodes, clients, per_client, round)?;
                round += 1;
                p.ops_per_s.push(r.ops_per_s);
                p.cpu_per_op_ms.push(r.cpu_per_op_ms);
                p.etcd_cpu_per_op_ms.push(r.etcd_cpu_per_op_ms);
                p.duplicates += r.duplicates;
                p.failures += r.failures;
                p.conflicts += r.conflicts;
                p.borrowed += r.borrowed;
            }
            points.push(p);
        }
    }
    Ok(points)
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// 3 nodes ÷ 1 node on etcd at 16 clients per node (medians).
pub fn scaling(points: &[Point]) -> Option<f64> {
    let get = |nodes: usize| {
        points
            .iter()
            .find(|p| p.store == "etcd" && p.nodes == nodes && p.clients_per_node == 16)
            .map(|p| median(&p.ops_per_s))
    };
    let (one, three) = (get(1)?, get(3)?);
    (one > 0.0).then(|| three / one)
}

/// The item's table and the scaling figure (3 nodes ÷ 1 node on etcd).
pub fn render(points: &[Point], allocs_per_node: usize, reps: usize) -> String {
    let mut out = format!(
        "\n## 8. IPAM on the etcd store (host-local, ops/s = ADDs + DELs per second, all nodes together)\n\n\
         One real etcd 3.4 in its own namespace; each node a namespace on a bridge to it, \
         with its own state directory; {allocs_per_node} addresses per node per run, split \
         over its clients, ADDed then DELed; median of {reps} runs.\n\n\
         | clients per node | local store, 1 node | etcd, 1 node | etcd, 3 nodes | 3 nodes ÷ 1 node | wasm-cni CPU per op, ms (local / etcd 1 / etcd 3) | etcd CPU per op, ms (1 / 3 nodes) | cores busy, wasm-cni + etcd (1 / 3 nodes) | ops per busy core-second, 3 ÷ 1 node | calls run again, 3 nodes (conflict / borrowed) |\n|---|---|---|---|---|---|---|---|---|---|\n"
    );
    let mut dups = 0;
    let mut fails = 0;
    for clients in [1usize, 4, 16] {
        let find = |store: &str, nodes: usize| {
            points
                .iter()
                .find(|p| p.store == store && p.nodes == nodes && p.clients_per_node == clients)
        };
        let ops = |store, nodes| find(store, nodes).map_or(0.0, |p| median(&p.ops_per_s));
        let cpu = |store, nodes| find(store, nodes).map_or(0.0, |p| median(&p.cpu_per_op_ms));
        let ecpu = |nodes| find("etcd", nodes).map_or(0.0, |p| median(&p.etcd_cpu_per_op_ms));
        let (l, e1, e3) = (ops("local", 1), ops("etcd", 1), ops("etcd", 3));
        let (again, borrowed) = find("etcd", 3).map_or((0, 0), |p| (p.conflicts, p.borrowed));
        let busy = |ops: f64, nodes| ops * (cpu("etcd", nodes) + ecpu(nodes)) / 1e3;
        let (b1, b3) = (busy(e1, 1), busy(e3, 3));
        let per_core = if e1 > 0.0 && b1 > 0.0 && b3 > 0.0 {
            (e3 / b3) / (e1 / b1)
        } else {
            0.0
        };
        out.push_str(&format!(
            "| {clients} | {l:.0} | {e1:.0} | {e3:.0} | {:.2}× | {:.2} / {:.2} / {:.2} | {:.2} / {:.2} | {b1:.2} / {b3:.2} | {per_core:.2}× | {again} / {borrowed} |\n",
            if e1 > 0.0 { e3 / e1 } else { 0.0 },
            cpu("local", 1),
            cpu("etcd", 1),
            cpu("etcd", 3),
            ecpu(1),
            ecpu(3),
        ));
    }
    for p in points {
        dups += p.duplicates;
        fails += p.failures;
    }
    out.push_str(&format!(
        "\nDuplicates (an address held twice at the barrier): {dups}. Failed calls: {fails}.\n\n\
         Every node here shares the machine's cores. Once one node keeps them busy (cores \
         busy near their number), three cannot do more, whatever the store does; what scales \
         when each node has CPU of its own is the work per operation, and \
         ops per busy core-second, 3 ÷ 1 node, says how much of it cross-node contention \
         (conflicts, etcd) costs: 1.00× is none.\n"
    ));
    out
}
