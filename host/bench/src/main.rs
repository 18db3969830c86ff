//! `wasm-cni-bench`: wasm-cni against the Debian reference plugins and
//! against a raw-netlink floor, side by side, in one run. Needs root (it
//! makes network namespaces); run it with `cargo xtask bench`, which builds
//! the release host and the components first.
//!
//! Every measured run starts in fresh namespaces with fresh state; the
//! sides of a comparison alternate run by run (A B, B A, …) so that machine
//! drift falls on both, and ratios are medians of per-round ratios. The
//! table is printed and written to `host/bench/results/latest.md`.

mod components;
mod ipam;
mod proc;
mod scenarios;
mod stats;

use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;

use crate::proc::WorkDir;
use crate::scenarios::{Programs, Run, Side};
use crate::stats::{cell, num, paired_ratio, ratio_cell, summarize, Summary};

#[derive(Parser)]
#[command(
    name = "wasm-cni-bench",
    about = "wasm-cni vs the reference plugins vs the netlink floor"
)]
struct Args {
    /// Alternated rounds for the ADD+DEL cycle (reference, wasm-cni, floor
    /// per round) and for the chain (reference, wasm-cni per round).
    #[arg(long, default_value_t = 60)]
    rounds: usize,
    /// Alternated repetitions per IPAM concurrency level.
    #[arg(long, default_value_t = 5)]
    ipam_reps: usize,
    /// Addresses allocated (and released) per IPAM run, split over clients.
    #[arg(long, default_value_t = 96)]
    ipam_allocs: usize,
    /// Cold (empty cache) samples.
    #[arg(long, default_value_t = 5)]
    cold_reps: usize,
    /// Pause after each run.
    #[arg(long, default_value_t = 10)]
    settle_ms: u64,
    /// Namespaces of finished runs are deleted every this many rounds,
    /// followed by `--bury-ms` of quiet, so that the kernel's background
    /// teardown of namespaces never overlaps a measured run.
    #[arg(long, default_value_t = 5)]
    bury_every: usize,
    #[arg(long, default_value_t = 300)]
    bury_ms: u64,
    /// Only these items (1 cycle, 2 chain, 3 floor, 4 components, 5 ipam);
    /// 3 runs with 1.
    #[arg(long, value_delimiter = ',')]
    only: Vec<u8>,
    /// The wasm-cni binary [default: <workspace>/target/release/wasm-cni].
    #[arg(long)]
    wasm_cni: Option<PathBuf>,
    /// Built components [default: <workspace>/target-guest/components].
    #[arg(long)]
    components: Option<PathBuf>,
    /// The reference plugins.
    #[arg(long, default_value = "/usr/lib/cni")]
    reference: PathBuf,
    /// Where to write the table [default: host/bench/results/latest.md].
    #[arg(long)]
    out: Option<PathBuf>,
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Deletes every namespace the bench made on the way out, also when it
/// panics.
struct Sweep;

impl Drop for Sweep {
    fn drop(&mut self) {
        proc::sweep_namespaces();
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    proc::install_signal_handlers();
    let sweep = Sweep;
    let outcome = run(&args);
    drop(sweep);
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wasm-cni-bench: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn want(args: &Args, item: u8) -> bool {
    args.only.is_empty() || args.only.contains(&item) || (item == 3 && args.only.contains(&1))
}

fn run(args: &Args) -> io::Result<()> {
    let root = workspace_root();
    let floor = std::env::current_exe()?.with_file_name("wasm-cni-floor");
    let work = WorkDir::new()?;
    let progs = Programs {
        wasm_cni: args
            .wasm_cni
            .clone()
            .unwrap_or_else(|| root.join("target/release/wasm-cni")),
        floor,
        reference: args.reference.clone(),
        components: args
            .components
            .clone()
            .unwrap_or_else(|| root.join("target-guest/components")),
        cache: work.root.join("cache"),
    };
    for (what, p) in [
        ("wasm-cni", progs.wasm_cni.clone()),
        ("the floor", progs.floor.clone()),
        ("reference bridge", progs.reference.join("bridge")),
        (
            "host-local component",
            progs.components.join("host-local.wasm"),
        ),
        ("fx fixture", progs.components.join("fixtures/fx.wasm")),
    ] {
        if !p.is_file() {
            return Err(io::Error::other(format!(
                "{what} not found at {} (cargo xtask bench builds everything)",
                p.display()
            )));
        }
    }
    let started = Instant::now();
    let machine = Machine::probe(work.tmpfs);
    let settle = Duration::from_millis(args.settle_ms);
    let bury = || proc::bury(Duration::from_millis(args.bury_ms));
    let bury_every = args.bury_every.max(1);
    let mut report = Report::default();

    // Warm-up, not recorded: the artifact cache, page cache, the binaries.
    eprintln!("bench: warm-up");
    for side in [Side::Reference, Side::WasmCni, Side::Floor] {
        scenarios::run_once(&progs, &work, side, false)?;
        scenarios::run_once(&progs, &work, side, true)?;
    }
    bury();

    if want(args, 1) || want(args, 3) {
        eprintln!("bench: 1+3 ADD+DEL cycle, {} rounds", args.rounds);
        let order = [Side::Reference, Side::WasmCni, Side::Floor];
        let mut runs: [Vec<Run>; 3] = Default::default();
        for round in 0..args.rounds {
            if round % bury_every == 0 {
                bury();
            }
            // Rotate and reverse so each side runs in each position.
            let mut sides = order;
            sides.rotate_left(round % 3);
            if round % 2 == 1 {
                sides.reverse();
            }
            for side in sides {
                let r = scenarios::run_once(&progs, &work, side, false)?;
                let i = order.iter().position(|s| *s == side).unwrap_or(0);
                runs[i].push(r);
                std::thread::sleep(settle);
            }
        }
        report.cycle = Some(runs);
    }

    if want(args, 2) {
        eprintln!("bench: 2 chain ADD then DEL, {} rounds", args.rounds);
        let mut runs: [Vec<Run>; 2] = Default::default();
        for round in 0..args.rounds {
            if round % bury_every == 0 {
                bury();
            }
            let sides = if round % 2 == 0 {
                [Side::Reference, Side::WasmCni]
            } else {
                [Side::WasmCni, Side::Reference]
            };
            for side in sides {
                let r = scenarios::run_once(&progs, &work, side, true)?;
                runs[usize::from(side == Side::WasmCni)].push(r);
                std::thread::sleep(settle);
            }
        }
        report.chain = Some(runs);
    }

    if want(args, 4) {
        eprintln!("bench: 4 component costs");
        bury();
        let mut cold = Vec::new();
        for _ in 0..args.cold_reps {
            cold.push(scenarios::cold_binary_add(&progs, &work)?);
            std::thread::sleep(settle);
        }
        report.cold_binary = Some(cold);
        // fx and the plugins side by side in one plugin directory, as
        // symlinks: the files keep their identity (and age), so a warm load
        // is the steady state of a node whose plugins were installed a while
        // ago (digest recorded, nothing hashed).
        let lib_dir = work.run_dir("lib-plugins")?;
        std::os::unix::fs::symlink(
            progs.components.join("fixtures/fx.wasm"),
            lib_dir.join("fx.wasm"),
        )?;
        for p in ["bridge", "host-local", "tuning", "loopback"] {
            let name = format!("{p}.wasm");
            std::os::unix::fs::symlink(progs.components.join(&name), lib_dir.join(&name))?;
        }
        let scratch = work.run_dir("lib-caches")?;
        report.costs = Some(components::measure(&lib_dir, &scratch, args.cold_reps, 20)?);
    }

    if want(args, 5) {
        for clients in [1usize, 4, 16] {
            eprintln!("bench: 5 IPAM, {clients} clients");
            let per_client = (args.ipam_allocs / clients).max(1);
            let mut pairs = (Vec::new(), Vec::new());
            for rep in 0..args.ipam_reps {
                bury();
                let sides = if rep % 2 == 0 {
                    [Side::Reference, Side::WasmCni]
                } else {
                    [Side::WasmCni, Side::Reference]
                };
                for side in sides {
                    let t = ipam::run_once(&progs, &work, side, clients, per_client)?;
                    if side == Side::Reference {
                        pairs.0.push(t);
                    } else {
                        pairs.1.push(t);
                    }
                    std::thread::sleep(settle);
                }
            }
            report.ipam.push((clients, pairs.0, pairs.1));
        }
    }

    bury();
    let text = report.render(&machine, args, started.elapsed());
    println!("{text}");
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| root.join("host/bench/results/latest.md"));
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&out, &text)?;
    eprintln!("bench: written to {}", out.display());
    Ok(())
}

struct Machine {
    cores: usize,
    cpu: String,
    kernel: String,
    load_start: String,
    date: String,
    reference_version: String,
    tmpfs: bool,
}

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

fn command_line(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "?".into())
}

fn load_avg() -> String {
    read_trim("/proc/loadavg")
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

impl Machine {
    fn probe(tmpfs: bool) -> Self {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "?".into());
        Machine {
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu,
            kernel: read_trim("/proc/sys/kernel/osrelease"),
            load_start: load_avg(),
            date: command_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
            reference_version: command_line(
                "dpkg-query",
                &["-W", "-f", "${Version}", "containernetworking-plugins"],
            ),
            tmpfs,
        }
    }
}

#[derive(Default)]
struct Report {
    /// Reference, wasm-cni, floor.
    cycle: Option<[Vec<Run>; 3]>,
    /// Reference, wasm-cni.
    chain: Option<[Vec<Run>; 2]>,
    cold_binary: Option<Vec<Run>>,
    costs: Option<components::Costs>,
    ipam: Vec<(usize, Vec<ipam::Throughput>, Vec<ipam::Throughput>)>,
}

fn column(runs: &[Run], f: impl Fn(&Run) -> f64) -> Vec<f64> {
    runs.iter().map(f).collect()
}

/// A headline row: what, measured value, target, met?
struct Headline {
    what: String,
    value: String,
    target: String,
    met: bool,
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "**missed**"
    }
}

impl Report {
    fn render(&self, m: &Machine, args: &Args, took: Duration) -> String {
        let mut heads: Vec<Headline> = Vec::new();
        let mut body = String::new();
        type Metric = (&'static str, fn(&Run) -> f64);
        let metrics: [Metric; 5] = [
            ("ADD wall, ms", Run::add_wall_ms),
            ("DEL wall, ms", Run::del_wall_ms),
            ("ADD+DEL wall, ms", Run::wall_ms),
            ("CPU per invocation, ms", Run::cpu_per_invocation_ms),
            ("peak RSS, MiB", Run::peak_rss_mib),
        ];

        if let Some([r, w, f]) = &self.cycle {
            let _ = writeln!(
                body,
                "\n## 1 + 3. bridge + host-local, ADD then DEL\n\n\
                 {} alternated rounds (reference, wasm-cni, floor in rotating order), each run in a fresh node + \
                 container namespace. Reference: `bridge` executed by a libcni-like runner, which executes \
                 `host-local`. wasm-cni: one process, both plugins as components. Floor: `wasm-cni-floor`, \
                 the same kernel operations over raw rtnetlink. Median (p25–p75); ratios are medians of \
                 per-round ratios.\n",
                r.len()
            );
            let _ = writeln!(
                body,
                "| metric | reference | wasm-cni | floor | wasm-cni ÷ reference | wasm-cni ÷ floor |\n|---|---|---|---|---|---|"
            );
            for (name, f_) in metrics {
                let (a, b, c) = (column(r, f_), column(w, f_), column(f, f_));
                let _ = writeln!(
                    body,
                    "| {name} | {} | {} | {} | {} | {} |",
                    cell(&summarize(&a)),
                    cell(&summarize(&b)),
                    cell(&summarize(&c)),
                    ratio_cell(&paired_ratio(&a, &b)),
                    ratio_cell(&paired_ratio(&c, &b)),
                );
            }
            let _ = writeln!(
                body,
                "| processes per cycle | {} | {} | {} | | |",
                r.first().map_or(0, |x| x.invocations() * 2),
                w.first().map_or(0, Run::invocations),
                f.first().map_or(0, Run::invocations),
            );
            let wall = paired_ratio(&column(r, Run::wall_ms), &column(w, Run::wall_ms));
            heads.push(Headline {
                what: "ADD+DEL cycle wall, wasm-cni ÷ reference".into(),
                value: format!("{}×", num(wall.median)),
                target: "≤ 0.12×".into(),
                met: wall.median <= 0.12,
            });
            let floor = paired_ratio(&column(f, Run::wall_ms), &column(w, Run::wall_ms));
            heads.push(Headline {
                what: "ADD+DEL cycle wall, wasm-cni ÷ floor".into(),
                value: format!("{}×", num(floor.median)),
                target: "≤ 1.3×".into(),
                met: floor.median <= 1.3,
            });
            let rss = paired_ratio(&column(r, Run::peak_rss_mib), &column(w, Run::peak_rss_mib));
            heads.push(Headline {
                what: "peak RSS per invocation, wasm-cni ÷ reference".into(),
                value: format!("{}×", num(rss.median)),
                target: "≤ 1.5×".into(),
                met: rss.median <= 1.5,
            });
        }

        if let Some([r, w]) = &self.chain {
            let _ = writeln!(
                body,
                "\n## 2. Chain: bridge + host-local, tuning, loopback — ADD then DEL\n\n\
                 4 plugins (portmap has no component yet, so it is not in the chain). {} alternated rounds. \
                 Reference: libcni order (ADD in order with prevResult, DEL in reverse), one process per \
                 plugin plus host-local under bridge; wasm-cni: one process per verb.\n",
                r.len()
            );
            let _ = writeln!(
                body,
                "| metric | reference | wasm-cni | wasm-cni ÷ reference |\n|---|---|---|---|"
            );
            for (name, f_) in metrics {
                let (a, b) = (column(r, f_), column(w, f_));
                let _ = writeln!(
                    body,
                    "| {name} | {} | {} | {} |",
                    cell(&summarize(&a)),
                    cell(&summarize(&b)),
                    ratio_cell(&paired_ratio(&a, &b)),
                );
            }
            let (a, b) = (column(r, Run::cpu_ms), column(w, Run::cpu_ms));
            let _ = writeln!(
                body,
                "| CPU per chain ADD+DEL, ms | {} | {} | {} |",
                cell(&summarize(&a)),
                cell(&summarize(&b)),
                ratio_cell(&paired_ratio(&a, &b)),
            );
            let _ = writeln!(
                body,
                "| processes per cycle | {} (+2 host-local) | {} | |",
                r.first().map_or(0, Run::invocations),
                w.first().map_or(0, Run::invocations),
            );
            let wall = paired_ratio(&column(r, Run::wall_ms), &column(w, Run::wall_ms));
            heads.push(Headline {
                what: "4-plugin chain ADD+DEL wall, wasm-cni ÷ reference".into(),
                value: format!("{}×", num(wall.median)),
                target: "(no target)".into(),
                met: true,
            });
        }

        if let Some(c) = &self.costs {
            let _ = writeln!(
                body,
                "\n## 4. Component costs\n\n\
                 In-process through the `wasm_cni` library (fixture `fx`: a plugin that only logs), \
                 except the first row. Median (p25–p75), n samples.\n"
            );
            let _ = writeln!(body, "| cost | median (p25–p75) | n |\n|---|---|---|");
            if let Some(cold) = &self.cold_binary {
                let add = summarize(&column(cold, Run::add_wall_ms));
                let _ = writeln!(
                    body,
                    "| cold first call: `wasm-cni` ADD of bridge + host-local, empty artifact cache (process wall), ms | {} | {} |",
                    cell(&add),
                    add.n
                );
                heads.push(Headline {
                    what: "cold first call (first ADD, empty cache)".into(),
                    value: format!("{} ms", num(add.median)),
                    target: "≤ 250 ms".into(),
                    met: add.median <= 250.0,
                });
            }
            let row = |body: &mut String, what: &str, s: &Summary| {
                let _ = writeln!(body, "| {what} | {} | {} |", cell(s), s.n);
            };
            row(
                &mut body,
                "cold first call, library: engine + compile + instantiate + ADD of `fx`, ms",
                &c.cold_fx,
            );
            row(
                &mut body,
                "cold load of `bridge` (compile + pre-link), ms",
                &c.cold_bridge_load,
            );
            row(
                &mut body,
                "per-invocation engine set-up (`Runtime::new`), ms",
                &c.engine_setup,
            );
            let mut worst = 0.0f64;
            for (name, s) in &c.warm_load {
                row(
                    &mut body,
                    &format!("warm load `{name}` (cached artifact), ms"),
                    s,
                );
                if name != "fx" {
                    worst = worst.max(s.median);
                }
            }
            row(
                &mut body,
                "host→guest round trip: fresh store + instantiate + ADD call of `fx`, µs",
                &c.round_trip,
            );
            heads.push(Headline {
                what: "warm component load (slowest plugin)".into(),
                value: format!("{} ms", num(worst)),
                target: "≤ 1 ms".into(),
                met: worst <= 1.0,
            });
        }

        if !self.ipam.is_empty() {
            let _ = writeln!(
                body,
                "\n## 5. IPAM throughput (host-local)\n\n\
                 {} allocations then {} releases per run, split over N concurrent clients (each a runtime \
                 executing the plugin per request); duplicates are addresses held twice at the barrier \
                 between the phases. Reference: `host-local` executed directly; wasm-cni: a chain of just \
                 host-local. {} alternated runs per level, median.\n",
                args.ipam_allocs, args.ipam_allocs, args.ipam_reps
            );
            let _ = writeln!(
                body,
                "| clients | reference ops/s | wasm-cni ops/s | wasm-cni ÷ reference | CPU per op, ms (ref / wasm) | duplicates (ref / wasm) | failures (ref / wasm) |\n|---|---|---|---|---|---|---|"
            );
            for (clients, r, w) in &self.ipam {
                let a: Vec<f64> = r.iter().map(|t| t.ops_per_s).collect();
                let b: Vec<f64> = w.iter().map(|t| t.ops_per_s).collect();
                let ratio = paired_ratio(&a, &b);
                let sum = |v: &[ipam::Throughput], f: fn(&ipam::Throughput) -> usize| {
                    v.iter().map(f).sum::<usize>()
                };
                let cpu = |v: &[ipam::Throughput]| {
                    num(summarize(&v.iter().map(|t| t.cpu_per_op_ms).collect::<Vec<_>>()).median)
                };
                let _ = writeln!(
                    body,
                    "| {clients} | {} | {} | {} | {} / {} | {} / {} | {} / {} |",
                    cell(&summarize(&a)),
                    cell(&summarize(&b)),
                    ratio_cell(&ratio),
                    cpu(r),
                    cpu(w),
                    sum(r, |t| t.duplicates),
                    sum(w, |t| t.duplicates),
                    sum(r, |t| t.failures),
                    sum(w, |t| t.failures),
                );
                if *clients == 16 {
                    heads.push(Headline {
                        what: "IPAM ops/s at 16 clients, wasm-cni ÷ reference".into(),
                        value: format!("{}×", num(ratio.median)),
                        target: "≥ 5×".into(),
                        met: ratio.median >= 5.0,
                    });
                }
            }
            let (dups, fails) = self.ipam.iter().fold((0, 0), |(d, f), (_, r, w)| {
                let all = r.iter().chain(w);
                let all2 = r.iter().chain(w);
                (
                    d + all.map(|t| t.duplicates).sum::<usize>(),
                    f + all2.map(|t| t.failures).sum::<usize>(),
                )
            });
            heads.push(Headline {
                what: "IPAM duplicates (failures), every level, both sides".into(),
                value: format!("{dups} ({fails})"),
                target: "0".into(),
                met: dups == 0 && fails == 0,
            });
        }

        let mut out = String::new();
        let _ = writeln!(out, "# wasm-cni benchmark\n");
        let _ = writeln!(
            out,
            "Machine: {} cores, {}, Linux {} · {} · load average before the run {} (after: {}, the bench's own \
             16 IPAM clients included) · \
             reference plugins {} (Debian), cniVersion 1.0.0 on both sides · state on {} · \
             run took {:.0} s (`cargo xtask bench`).\n",
            m.cores,
            m.cpu,
            m.kernel,
            m.date,
            m.load_start,
            load_avg(),
            m.reference_version,
            if m.tmpfs {
                "tmpfs"
            } else {
                "disk (tmpfs mount failed)"
            },
            took.as_secs_f64()
        );
        let _ = writeln!(
            out,
            "## Headline\n\n| | measured | target | |\n|---|---|---|---|"
        );
        for h in &heads {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                h.what,
                h.value,
                h.target,
                if h.target.starts_with('(') {
                    ""
                } else {
                    verdict(h.met)
                }
            );
        }
        out.push_str(&body);
        out
    }
}
