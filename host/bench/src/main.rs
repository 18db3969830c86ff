//! `wasm-cni-bench`: wasm-cni against the Debian reference plugins and
//! against a raw-netlink floor, side by side, in one run. Needs root (it
//! makes network namespaces); run it with `cargo xtask bench`, which builds
//! the release host and the components first.
//!
//! Every measured run starts in fresh namespaces with fresh state; the
//! sides of a comparison alternate run by run (A B, B A, …) so that machine
//! drift falls on both, and ratios are medians of per-round ratios. The
//! table is printed and written to `host/bench/results/latest.md`.

mod cluster;
mod components;
mod daemon;
mod fabric;
mod ipam;
mod languages;
mod plot;
mod pods;
mod proc;
mod report;
mod scenarios;
mod soak;
mod stats;
mod tracing;

use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;

use crate::daemon::DaemonSide;
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
    /// Alternated rounds per step of the filtered chain (item 7).
    #[arg(long, default_value_t = 30)]
    filter_rounds: usize,
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
    /// Pods started at once through containerd's CRI in item 10.
    #[arg(long, default_value_t = 30)]
    pods: usize,
    /// Rounds of item 10 per side.
    #[arg(long, default_value_t = 3)]
    pod_rounds: usize,
    /// Rounds of item 11 (tracing off and on) per side.
    #[arg(long, default_value_t = 30)]
    trace_rounds: usize,
    /// ADD/DEL cycles through the daemon in item 9.
    #[arg(long, default_value_t = 10_000)]
    soak_cycles: usize,
    /// Item 9 reads the daemon's RSS and descriptors every this many cycles.
    #[arg(long, default_value_t = 1_000)]
    soak_every: usize,
    /// Only these items (1 cycle, 2 chain, 3 floor, 4 components, 5 ipam,
    /// 6 netavark, 7 filtered chain, 8 IPAM on etcd, 9 the daemon over
    /// many cycles, 10 pods at once through containerd's CRI, 11 what
    /// tracing costs a call, 12 what a plugin's language costs, 13
    /// host-local's history at its cap, 14 cluster mode: convergence,
    /// footprint, pod-to-pod throughput); 3 runs with 1.
    #[arg(long, value_delimiter = ',')]
    only: Vec<u8>,
    /// podman's network backend, the peer of item 6.
    #[arg(long, default_value = "/usr/lib/podman/netavark")]
    netavark: PathBuf,
    /// The wasm-cni binary [default: the one beside this bench].
    #[arg(long)]
    wasm_cni: Option<PathBuf>,
    /// Built components [default: <workspace>/target-guest/components].
    #[arg(long)]
    components: Option<PathBuf>,
    /// Item 12's examples, `routes-{rs,py,js}.wasm` [default:
    /// <workspace>/target-guest/polyglot, where `cargo xtask bench` builds
    /// them].
    #[arg(long)]
    languages: Option<PathBuf>,
    /// Rounds of item 12 (the four chains rotated in each).
    #[arg(long, default_value_t = 20)]
    language_rounds: usize,
    /// Node adds (and as many deletes) per Node count in item 14.
    #[arg(long, default_value_t = 40)]
    converge_samples: usize,
    /// Pods on the measured node in item 14 (the kubelet's default cap).
    #[arg(long, default_value_t = 110)]
    cluster_pods: usize,
    /// Seconds item 14's daemon is watched idle.
    #[arg(long, default_value_t = 60)]
    idle_s: u64,
    /// Alternated iperf3 rounds per mode in item 14.
    #[arg(long, default_value_t = 6)]
    iperf_rounds: usize,
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

/// Rounds of the RSS pass per side.
const RSS_ROUNDS: usize = 5;

/// Run each side `RSS_ROUNDS` times under GNU time, for peak RSS alone.
fn rss_pass<S: Copy + PartialEq, const N: usize>(
    order: &[S; N],
    mut run: impl FnMut(S) -> io::Result<Run>,
) -> io::Result<[Vec<Run>; N]> {
    proc::rss_pass(true);
    let mut out: [Vec<Run>; N] = std::array::from_fn(|_| Vec::new());
    let mut outcome = Ok(());
    'rounds: for round in 0..RSS_ROUNDS {
        for side in rotation(order, round) {
            match run(side) {
                Ok(r) => {
                    let i = order.iter().position(|s| *s == side).unwrap_or(0);
                    out[i].push(r);
                }
                Err(e) => {
                    outcome = Err(e);
                    break 'rounds;
                }
            }
        }
    }
    proc::rss_pass(false);
    outcome.map(|()| out)
}

/// The sides in a different order each round: rotated, and reversed every
/// other round, so that each side runs in each position.
fn rotation<S: Copy, const N: usize>(order: &[S; N], round: usize) -> [S; N] {
    let mut sides = *order;
    sides.rotate_left(round % N);
    if round % 2 == 1 {
        sides.reverse();
    }
    sides
}

fn want(args: &Args, item: u8) -> bool {
    args.only.is_empty() || args.only.contains(&item) || (item == 3 && args.only.contains(&1))
}

/// The thin client beside the engine, installed as a node installs it:
/// `wasm-cni` (the client) with `wasm-cni-engine` beside it. The engine
/// itself when there is no client.
fn client_layout(work: &WorkDir, engine: &Path) -> io::Result<PathBuf> {
    let client = engine.with_file_name("wasm-cni-client");
    if !client.is_file() {
        return Ok(engine.to_path_buf());
    }
    let dir = work.root.join("client-bin");
    std::fs::create_dir_all(&dir)?;
    std::fs::copy(&client, dir.join("wasm-cni"))?;
    std::fs::copy(engine, dir.join("wasm-cni-engine"))?;
    Ok(dir.join("wasm-cni"))
}

fn run(args: &Args) -> io::Result<()> {
    let root = workspace_root();
    let floor = std::env::current_exe()?.with_file_name("wasm-cni-floor");
    let work = WorkDir::new()?;
    let wasm_cni = args
        .wasm_cni
        .clone()
        .unwrap_or_else(|| floor.with_file_name("wasm-cni"));
    let progs = Programs {
        wasm_cni: wasm_cni.clone(),
        client: client_layout(&work, &wasm_cni)?,
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
    let mut report = Report {
        footprint: Some(Footprint::measure(&progs)?),
        ..Report::default()
    };

    // The daemon side: one warm daemon for the whole run.
    let daemon = DaemonSide::start(&progs.wasm_cni, &work)?;
    let d = Some(&daemon);

    // Warm-up, not recorded: the artifact cache, page cache, the binaries.
    eprintln!("bench: warm-up");
    for side in [Side::Reference, Side::WasmCni, Side::Floor, Side::Daemon] {
        scenarios::run_once(&progs, &work, side, false, d)?;
        scenarios::run_once(&progs, &work, side, true, d)?;
    }
    bury();

    if want(args, 1) || want(args, 3) {
        eprintln!("bench: 1+3 ADD+DEL cycle, {} rounds", args.rounds);
        let order = [Side::Reference, Side::WasmCni, Side::Floor, Side::Daemon];
        let mut runs: [Vec<Run>; 4] = Default::default();
        let mut bound = Bound::default();
        for round in 0..args.rounds {
            if round % bury_every == 0 {
                bury();
            }
            for side in rotation(&order, round) {
                let r = scenarios::run_once(&progs, &work, side, false, d)?;
                let i = order.iter().position(|s| *s == side).unwrap_or(0);
                runs[i].push(r);
                std::thread::sleep(settle);
            }
            // The bound's four runs in this round, their order turned too.
            for k in rotation(&[0, 1, 2, 3], round) {
                match k {
                    0 => bound.wasm.push(scenarios::ipam_alone_once(
                        &progs,
                        &work,
                        Side::WasmCni,
                        d,
                    )?),
                    1 => bound.daemon.push(scenarios::ipam_alone_once(
                        &progs,
                        &work,
                        Side::Daemon,
                        d,
                    )?),
                    2 => bound
                        .floor_start
                        .push(scenarios::version_once(&progs.floor, &progs)?.wall),
                    _ => bound
                        .wasm_start
                        .push(scenarios::version_once(&progs.wasm_cni, &progs)?.wall),
                }
                std::thread::sleep(settle);
            }
        }
        report.cycle = Some(runs);
        report.bound = Some(bound);
        report.cycle_rss = Some(rss_pass(&order, |side| {
            scenarios::run_once(&progs, &work, side, false, d)
        })?);
    }

    if want(args, 2) {
        eprintln!("bench: 2 chain ADD then DEL, {} rounds", args.rounds);
        let order = [Side::Reference, Side::WasmCni, Side::Daemon];
        let mut runs: [Vec<Run>; 3] = Default::default();
        for round in 0..args.rounds {
            if round % bury_every == 0 {
                bury();
            }
            for side in rotation(&order, round) {
                let r = scenarios::run_once(&progs, &work, side, true, d)?;
                let i = order.iter().position(|s| *s == side).unwrap_or(0);
                runs[i].push(r);
                std::thread::sleep(settle);
            }
        }
        report.chain = Some(runs);
        report.chain_rss = Some(rss_pass(&order, |side| {
            scenarios::run_once(&progs, &work, side, true, d)
        })?);
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
        // Compiled as the binary compiles: in a child process of it.
        wasm_cni_engine::sandbox::compile::compile_with(progs.wasm_cni.clone());
        report.costs = Some(components::measure(&lib_dir, &scratch, args.cold_reps, 20)?);
    }

    if want(args, 12) {
        report.languages = Some(measure_languages(args, &progs, &work, &root, bury)?);
    }

    if want(args, 5) {
        let order = [Side::Reference, Side::WasmCni, Side::Daemon];
        for clients in [1usize, 4, 16] {
            eprintln!("bench: 5 IPAM, {clients} clients");
            let per_client = (args.ipam_allocs / clients).max(1);
            let mut sides: [Vec<ipam::Throughput>; 3] = Default::default();
            for rep in 0..args.ipam_reps {
                bury();
                for side in rotation(&order, rep) {
                    let t = ipam::run_once(&progs, &work, side, clients, per_client, d)?;
                    let i = order.iter().position(|s| *s == side).unwrap_or(0);
                    sides[i].push(t);
                    std::thread::sleep(settle);
                }
            }
            report.ipam.push((clients, sides));
        }
    }

    if want(args, 6) {
        if args.netavark.is_file() {
            eprintln!("bench: 6 netavark, {} rounds", args.rounds);
            let order = [Side::Netavark, Side::WasmCni, Side::Daemon];
            let mut runs: [Vec<Run>; 3] = Default::default();
            for side in order {
                scenarios::netavark_once(&progs, &work, side, &args.netavark, d)?;
            }
            for round in 0..args.rounds {
                if round % bury_every == 0 {
                    bury();
                }
                for side in rotation(&order, round) {
                    let r = scenarios::netavark_once(&progs, &work, side, &args.netavark, d)?;
                    let i = order.iter().position(|s| *s == side).unwrap_or(0);
                    runs[i].push(r);
                    std::thread::sleep(settle);
                }
            }
            report.netavark = Some(runs);
            report.netavark_rss = Some(rss_pass(&order, |side| {
                scenarios::netavark_once(&progs, &work, side, &args.netavark, d)
            })?);
        } else {
            eprintln!(
                "bench: 6 skipped: no netavark at {} (Debian package netavark)",
                args.netavark.display()
            );
        }
    }

    if want(args, 7) {
        let order = [Side::Reference, Side::WasmCni, Side::Daemon];
        for step in 0..scenarios::FILTERED_STEPS.len() {
            eprintln!(
                "bench: 7 filtered chain, {} ({} rounds)",
                scenarios::FILTERED_STEPS[step],
                args.filter_rounds
            );
            let mut runs: [Vec<Run>; 3] = Default::default();
            for round in 0..args.filter_rounds {
                if round % bury_every == 0 {
                    bury();
                }
                for side in rotation(&order, round) {
                    let r = scenarios::filtered_once(&progs, &work, side, step, d)?;
                    let i = order.iter().position(|s| *s == side).unwrap_or(0);
                    runs[i].push(r);
                    std::thread::sleep(settle);
                }
            }
            let rss = if step + 1 == scenarios::FILTERED_STEPS.len() {
                Some(rss_pass(&order, |side| {
                    scenarios::filtered_once(&progs, &work, side, step, d)
                })?)
            } else {
                None
            };
            report.filtered.push((runs, rss));
        }
    }

    if want(args, 8) {
        if cluster::etcd_installed() {
            report.cluster = cluster::measure(&progs, &work, args.ipam_allocs, 3, &bury)?;
        } else {
            eprintln!(
                "bench: 8 skipped: etcd is not installed (cargo xtask setup installs etcd-server)"
            );
        }
    }

    if want(args, 10) {
        if pods::containerd_installed() {
            eprintln!(
                "bench: 10 {} pods at once through containerd's CRI",
                args.pods
            );
            report.pods = Some(pods::measure(
                &progs,
                &work,
                args.pods.max(1),
                args.pod_rounds.max(1),
                &bury,
            )?);
        } else {
            eprintln!(
                "bench: 10 skipped: containerd is not installed (cargo xtask setup installs it)"
            );
        }
    }

    if want(args, 11) {
        eprintln!("bench: 11 tracing off and on, {} rounds", args.trace_rounds);
        bury();
        report.tracing = Some(tracing::measure(&progs, &work, args.trace_rounds.max(1))?);
    }

    if want(args, 13) {
        eprintln!(
            "bench: 13 host-local's history at its cap, {} rounds",
            args.rounds
        );
        bury();
        let mut runs: [Vec<Run>; 2] = Default::default();
        for round in 0..args.rounds {
            if round % bury_every == 0 {
                bury();
            }
            for full in rotation(&[false, true], round) {
                runs[usize::from(full)].push(scenarios::history_once(&progs, &work, full)?);
                std::thread::sleep(settle);
            }
        }
        report.history = Some(runs);
    }

    if want(args, 14) {
        if fabric::iperf3_installed() {
            bury();
            report.fabric = Some(fabric::measure(
                &progs,
                &work,
                &fabric::Knobs {
                    samples: args.converge_samples.max(1),
                    pods: args.cluster_pods.max(1),
                    idle: Duration::from_secs(args.idle_s),
                    rounds: args.iperf_rounds.max(1),
                },
            )?);
            bury();
        } else {
            eprintln!("bench: 14 skipped: iperf3 is not installed (cargo xtask bench installs it)");
        }
    }

    drop(daemon);
    bury();
    if want(args, 9) {
        eprintln!(
            "bench: 9 the daemon over {} ADD/DEL cycles",
            args.soak_cycles
        );
        report.soak = Some(soak::measure(
            &progs,
            &work,
            args.soak_cycles,
            args.soak_every,
        )?);
        bury();
    }
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| root.join("host/bench/results/latest.md"));
    let stem = out
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("latest")
        .to_string();
    let figures = report.figures(&stem);
    let text = report.render(&machine, args, started.elapsed(), &figures);
    println!("{text}");
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // Beside the report, which links them by file name.
    for f in &figures {
        std::fs::write(out.with_file_name(&f.file), &f.svg)?;
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

fn netavark_version() -> String {
    command_line("/usr/lib/podman/netavark", &["--version"])
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
    /// Reference, wasm-cni, floor, daemon.
    cycle: Option<[Vec<Run>; 4]>,
    /// Item 1's bound, from the same rounds.
    bound: Option<Bound>,
    /// Reference, wasm-cni, daemon.
    chain: Option<[Vec<Run>; 3]>,
    cold_binary: Option<Vec<Run>>,
    costs: Option<components::Costs>,
    /// Per client count: reference, wasm-cni, daemon.
    ipam: Vec<(usize, [Vec<ipam::Throughput>; 3])>,
    /// netavark, wasm-cni, daemon.
    netavark: Option<[Vec<Run>; 3]>,
    /// Item 7 per step: reference, wasm-cni, daemon, and the RSS pass of
    /// the last step.
    filtered: Vec<FilteredStep>,
    /// The RSS passes of items 1, 2 and 6 (same sides, same order).
    cycle_rss: Option<[Vec<Run>; 4]>,
    chain_rss: Option<[Vec<Run>; 3]>,
    netavark_rss: Option<[Vec<Run>; 3]>,
    /// Item 8: IPAM on the etcd store.
    cluster: Vec<cluster::Point>,
    /// What a node installs, against the reference set.
    footprint: Option<Footprint>,
    /// Item 9: the daemon over many cycles.
    soak: Option<soak::Soak>,
    /// Item 10: pods at once through containerd's CRI, per side.
    pods: Option<[pods::Burst; 4]>,
    /// Item 11: ADD wall (ms) with tracing off and on, per side.
    tracing: Option<[Vec<f64>; 4]>,
    /// Item 12: what a plugin's language costs.
    languages: Option<Languages>,
    /// Item 13: per invocation, host-local's scope empty and at its
    /// history's cap.
    history: Option<[Vec<Run>; 2]>,
    /// Item 14: cluster mode.
    fabric: Option<fabric::Figures>,
}

/// Item 1's bound, a run of each per round: host-local alone per
/// invocation and through the daemon, and the floor's and the engine's
/// start (VERSION).
#[derive(Default)]
struct Bound {
    wasm: Vec<Run>,
    daemon: Vec<Run>,
    floor_start: Vec<Duration>,
    wasm_start: Vec<Duration>,
}

/// Item 12's figures.
struct Languages {
    stat: Vec<languages::Static>,
    /// ADD+DEL of bridge + host-local, then with the Rust, Python and
    /// JavaScript example after it.
    runs: [Vec<Run>; 4],
    rss: [Vec<Run>; 4],
}

/// Item 12: the examples' sizes and loads in-process, then bridge +
/// host-local alone and with each example, one process per call, the four
/// chains rotated each round.
fn measure_languages(
    args: &Args,
    progs: &Programs,
    work: &WorkDir,
    root: &Path,
    bury: impl Fn(),
) -> io::Result<Languages> {
    eprintln!("bench: 12 what a plugin's language costs");
    let built = args
        .languages
        .clone()
        .unwrap_or_else(|| root.join("target-guest/polyglot"));
    // One plugin directory with the chain's plugins and the examples, as
    // symlinks (see item 4).
    let dir = work.run_dir("lang-plugins")?;
    for p in ["bridge", "host-local"] {
        let name = format!("{p}.wasm");
        std::os::unix::fs::symlink(progs.components.join(&name), dir.join(&name))?;
    }
    for (_, name) in languages::LANGS {
        let from = built.join(format!("{name}.wasm"));
        if !from.is_file() {
            return Err(io::Error::other(format!(
                "{} not found (cargo xtask bench builds it)",
                from.display()
            )));
        }
        std::os::unix::fs::symlink(&from, dir.join(format!("{name}.wasm")))?;
    }
    wasm_cni_engine::sandbox::compile::compile_with(progs.wasm_cni.clone());
    let scratch = work.run_dir("lang-caches")?;
    let stat = languages::measure_static(&dir, &scratch, args.cold_reps.min(3), 10)?;

    let lang = Programs {
        wasm_cni: progs.wasm_cni.clone(),
        client: progs.client.clone(),
        floor: progs.floor.clone(),
        reference: progs.reference.clone(),
        components: dir,
        cache: progs.cache.clone(),
    };
    let once = |variant: usize| {
        scenarios::run_entries(&lang, work, Side::WasmCni, None, |state| {
            let mut chain = vec![scenarios::bridge_entry(state)];
            if let Some((_, name)) = variant.checked_sub(1).map(|i| languages::LANGS[i]) {
                chain.push(languages::entry(name));
            }
            Ok(chain)
        })
    };
    // Unmeasured: compiles each example into the run's cache.
    for v in 0..4 {
        once(v)?;
    }
    let variants = [0usize, 1, 2, 3];
    let mut runs: [Vec<Run>; 4] = Default::default();
    let settle = Duration::from_millis(args.settle_ms);
    for round in 0..args.language_rounds {
        if round % args.bury_every.max(1) == 0 {
            bury();
        }
        for v in rotation(&variants, round) {
            runs[v].push(once(v)?);
            std::thread::sleep(settle);
        }
    }
    let rss = rss_pass(&variants, once)?;
    Ok(Languages { stat, runs, rss })
}

/// Bytes on disk of what a node installs.
#[derive(Debug, Default)]
struct Footprint {
    engine: u64,
    /// The thin client (0 when none was built).
    client: u64,
    components: u64,
    /// Every regular file of the reference plugin directory.
    reference: u64,
    /// The reference bridge alone.
    reference_bridge: u64,
}

impl Footprint {
    fn measure(progs: &Programs) -> io::Result<Footprint> {
        let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        let dir_sum = |d: &Path, ext: Option<&str>| -> u64 {
            std::fs::read_dir(d)
                .map(|rd| {
                    rd.flatten()
                        .map(|e| e.path())
                        .filter(|p| p.is_file())
                        .filter(|p| ext.is_none_or(|x| p.extension().is_some_and(|e| e == x)))
                        .map(|p| size(&p))
                        .sum()
                })
                .unwrap_or(0)
        };
        let client = progs.wasm_cni.with_file_name("wasm-cni-client");
        Ok(Footprint {
            engine: size(&progs.wasm_cni),
            client: size(&client),
            components: dir_sum(&progs.components, Some("wasm")),
            reference: dir_sum(&progs.reference, None),
            reference_bridge: size(&progs.reference.join("bridge")),
        })
    }

    fn installed(&self) -> u64 {
        self.engine + self.client + self.components
    }
}

/// KiB as MiB.
fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// An SVG figure of the report, written beside it.
struct Figure {
    file: String,
    alt: String,
    svg: String,
}

fn mb(bytes: u64) -> String {
    format!("{:.2}", bytes as f64 / 1e6)
}

/// One step of item 7: reference, wasm-cni, daemon runs, and the RSS pass
/// (last step only).
type FilteredStep = ([Vec<Run>; 3], Option<[Vec<Run>; 3]>);

/// Peak RSS is taken from the RSS pass (`proc::measure` says why).
const RSS: &str = "peak RSS, MiB";

/// `timed` for every metric but peak RSS, which comes from `rss`.
fn pick<'a, const N: usize>(
    name: &str,
    timed: &'a [Vec<Run>; N],
    rss: &'a Option<[Vec<Run>; N]>,
) -> &'a [Vec<Run>; N] {
    match rss {
        Some(r) if name == RSS => r,
        _ => timed,
    }
}

fn column(runs: &[Run], f: impl Fn(&Run) -> f64) -> Vec<f64> {
    runs.iter().map(f).collect()
}

/// Item 1's bound: what its two ADD targets leave for the bridge plugin.
/// wasm-cni's bridge + host-local ADD is its host-local-alone ADD plus the
/// bridge plugin, whose kernel work is at least the floor's link work (the
/// floor's ADD less its own start). Each ratio is per round, over that
/// round's floor ADD.
fn bound_section(body: &mut String, heads: &mut Vec<Headline>, b: &Bound, floor: &[Run]) {
    let ms = |v: &[Duration]| v.iter().copied().map(scenarios::ms).collect::<Vec<f64>>();
    let floor_add = column(floor, Run::add_wall_ms);
    let (floor_start, wasm_start) = (ms(&b.floor_start), ms(&b.wasm_start));
    let link: Vec<f64> = floor_add
        .iter()
        .zip(&floor_start)
        .map(|(a, s)| a - s)
        .collect();
    let alone = |runs: &[Run]| column(runs, Run::add_wall_ms);
    let (wasm, daemon) = (alone(&b.wasm), alone(&b.daemon));
    let over_floor = |part: &[f64]| {
        let bound: Vec<f64> = part.iter().zip(&link).map(|(p, l)| p + l).collect();
        paired_ratio(&floor_add, &bound)
    };
    let (wasm_bound, daemon_bound) = (over_floor(&wasm), over_floor(&daemon));
    let _ = writeln!(
        body,
        "\n**What the ADD targets leave** (the same {} rounds, a run of each per round). A bridge + \
         host-local ADD is host-local's ADD alone (a chain of one, no link made) plus the bridge plugin, \
         whose kernel work is at least the floor's link work: the floor's ADD less its start (its \
         VERSION; its lease, a few small files, stays in it). The sum over the floor's ADD is about the \
         lowest ratio the ADD could reach if the bridge plugin cost nothing but the kernel's work.\n\n\
         | | wasm-cni | daemon | floor |\n|---|---|---|---|\n\
         | start and exit (VERSION), wall, ms | {} | | {} |\n\
         | ADD of host-local alone, wall, ms | {} | {} | |\n\
         | link work (ADD less VERSION), wall, ms | | | {} |\n\
         | host-local alone + the floor's link work, ÷ floor ADD | {} | {} | |",
        b.wasm.len(),
        cell(&summarize(&wasm_start)),
        cell(&summarize(&floor_start)),
        cell(&summarize(&wasm)),
        cell(&summarize(&daemon)),
        cell(&summarize(&link)),
        ratio_cell(&wasm_bound),
        ratio_cell(&daemon_bound),
    );
    for (what, v, target) in [
        ("per-invocation ADD", &wasm_bound, "1.5×"),
        ("daemon ADD", &daemon_bound, "1.2×"),
    ] {
        heads.push(Headline {
            what: format!(
                "{what}, lowest reachable ÷ floor (host-local alone + the floor's link work)"
            ),
            value: format!("{}×", num(v.median)),
            target: format!("(bound of the ≤ {target} target)"),
            met: true,
        });
    }
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
    /// The figures of what was measured, named after the report's `stem`.
    fn figures(&self, stem: &str) -> Vec<Figure> {
        let mut out = Vec::new();
        let mut add = |name: &str, alt: String, svg: String| {
            out.push(Figure {
                file: format!("{stem}-{name}.svg"),
                alt,
                svg,
            })
        };
        if let Some([r, w, f, dm]) = &self.cycle {
            let rows = [
                ("reference", column(r, Run::add_wall_ms)),
                ("wasm-cni", column(w, Run::add_wall_ms)),
                ("daemon (client)", column(dm, Run::add_wall_ms)),
                ("floor", column(f, Run::add_wall_ms)),
            ];
            let title = "bridge + host-local: ADD wall per run";
            add("add", title.into(), plot::distributions(title, "ms", &rows));
        }
        if !self.ipam.is_empty() {
            let side = |k: usize| -> Vec<(f64, f64)> {
                self.ipam
                    .iter()
                    .map(|(clients, sides)| {
                        let v: Vec<f64> = sides[k].iter().map(|t| t.ops_per_s).collect();
                        (*clients as f64, summarize(&v).median)
                    })
                    .collect()
            };
            let series = [
                ("reference", side(0)),
                ("wasm-cni", side(1)),
                ("daemon", side(2)),
            ];
            let title = "host-local IPAM: ops/s by concurrent clients (median)";
            add(
                "ipam",
                title.into(),
                plot::lines(title, "clients", "ops/s", &series),
            );
        }
        if let Some(soak) = &self.soak {
            let points = |f: fn(&soak::Sample) -> f64| -> Vec<(f64, f64)> {
                soak.samples
                    .iter()
                    .map(|s| (s.cycles as f64, f(s)))
                    .collect()
            };
            let title = "daemon over ADD/DEL cycles: resident memory";
            let rss = [("RSS, MiB", points(|s| mib(s.rss_kib)))];
            add(
                "soak-rss",
                title.into(),
                plot::lines(title, "cycles", "MiB", &rss),
            );
            let title = "daemon over ADD/DEL cycles: open descriptors and threads";
            let fds = [
                ("descriptors", points(|s| s.fds as f64)),
                ("threads", points(|s| s.threads as f64)),
            ];
            add(
                "soak-fds",
                title.into(),
                plot::lines(title, "cycles", "count", &fds),
            );
            let adds: Vec<(f64, f64)> = soak
                .samples
                .iter()
                .filter_map(|s| Some((s.cycles as f64, s.add_ms?)))
                .collect();
            if !adds.is_empty() {
                let title = "daemon over ADD/DEL cycles: ADD wall (median since the point before)";
                add(
                    "soak-add",
                    title.into(),
                    plot::lines(title, "cycles", "ms", &[("ADD wall, ms", adds)]),
                );
            }
        }
        out
    }
}
