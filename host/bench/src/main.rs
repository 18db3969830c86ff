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
mod ipam;
mod languages;
mod plot;
mod pods;
mod proc;
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
    /// host-local's history at its cap); 3 runs with 1.
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
        wasm_cni::sandbox::compile::compile_with(progs.wasm_cni.clone());
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
    wasm_cni::sandbox::compile::compile_with(progs.wasm_cni.clone());
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

    fn render(&self, m: &Machine, args: &Args, took: Duration, figures: &[Figure]) -> String {
        let mut heads: Vec<Headline> = Vec::new();
        let mut body = String::new();
        type Metric = (&'static str, fn(&Run) -> f64);
        let metrics: [Metric; 5] = [
            ("ADD wall, ms", Run::add_wall_ms),
            ("DEL wall, ms", Run::del_wall_ms),
            ("ADD+DEL wall, ms", Run::wall_ms),
            ("CPU per invocation, ms", Run::cpu_per_invocation_ms),
            (RSS, Run::peak_rss_mib),
        ];

        if let Some(cycle) = &self.cycle {
            let [r, w, f, dm] = cycle;
            let _ = writeln!(
                body,
                "\n## 1 + 3. bridge + host-local, ADD then DEL\n\n\
                 {} alternated rounds (reference, wasm-cni, floor, daemon in rotating order), each run in a \
                 fresh container namespace and, but for the daemon, a fresh node namespace. Reference: \
                 `bridge` executed by a libcni-like runner, which executes `host-local`. wasm-cni: one \
                 process, both plugins as components. Daemon: the `wasm-cni` client talking to one warm \
                 `wasm-cni daemon` in a node of its own, a bridge of a fresh name per run (so the kernel \
                 makes one each time, as for the others); its CPU is the client's plus what the daemon \
                 logged for the calls, its RSS the client's. Floor: `wasm-cni-floor`, the same kernel \
                 operations over raw rtnetlink. Median (p25–p75); ratios are medians of per-round ratios. \
                 Peak RSS comes from 5 more runs per side under GNU time (a parent of about a megabyte: \
                 `wait4` alone reports a forked child's parent's size when that is larger, here the bench's).\n",
                r.len()
            );
            let _ = writeln!(
                body,
                "| metric | reference | wasm-cni | daemon | floor | wasm-cni ÷ reference | daemon ÷ reference | wasm-cni ÷ floor |\n|---|---|---|---|---|---|---|---|"
            );
            for (name, f_) in metrics {
                let [r, w, f, dm] = pick(name, cycle, &self.cycle_rss);
                let (a, b, c, e) = (column(r, f_), column(w, f_), column(f, f_), column(dm, f_));
                let _ = writeln!(
                    body,
                    "| {name} | {} | {} | {} | {} | {} | {} | {} |",
                    cell(&summarize(&a)),
                    cell(&summarize(&b)),
                    cell(&summarize(&e)),
                    cell(&summarize(&c)),
                    ratio_cell(&paired_ratio(&a, &b)),
                    ratio_cell(&paired_ratio(&a, &e)),
                    ratio_cell(&paired_ratio(&c, &b)),
                );
            }
            let inside = summarize(&column(dm, Run::daemon_add_ms));
            let _ = writeln!(
                body,
                "| ADD wall inside the daemon (its log), ms | | | {} | | | | |",
                cell(&inside)
            );
            let _ = writeln!(
                body,
                "| processes per cycle | {} | {} | {} (+ the daemon) | {} | | | |",
                r.first().map_or(0, |x| x.invocations() * 2),
                w.first().map_or(0, Run::invocations),
                dm.first().map_or(0, Run::invocations),
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
            let add_floor =
                paired_ratio(&column(f, Run::add_wall_ms), &column(w, Run::add_wall_ms));
            heads.push(Headline {
                what: "per-invocation ADD wall, wasm-cni ÷ floor".into(),
                value: format!("{}×", num(add_floor.median)),
                target: "≤ 1.5×".into(),
                met: add_floor.median <= 1.5,
            });
            let [rr, rw, _, rd] = pick(RSS, cycle, &self.cycle_rss);
            let rss = paired_ratio(
                &column(rr, Run::peak_rss_mib),
                &column(rw, Run::peak_rss_mib),
            );
            heads.push(Headline {
                what: "peak RSS per invocation, wasm-cni ÷ reference".into(),
                value: format!("{}×", num(rss.median)),
                target: "≤ 1.5×".into(),
                met: rss.median <= 1.5,
            });
            let add = paired_ratio(&column(r, Run::add_wall_ms), &column(dm, Run::add_wall_ms));
            heads.push(Headline {
                what: "daemon ADD wall ÷ reference".into(),
                value: format!("{}×", num(add.median)),
                target: "≤ 0.2×".into(),
                met: add.median <= 0.2,
            });
            let client = paired_ratio(
                &column(rr, Run::peak_rss_mib),
                &column(rd, Run::peak_rss_mib),
            );
            heads.push(Headline {
                what: "client peak RSS ÷ reference".into(),
                value: format!("{}×", num(client.median)),
                target: "≤ 0.5×".into(),
                met: client.median <= 0.5,
            });
            if let Some(b) = &self.bound {
                bound_section(&mut body, &mut heads, b, f);
            }
        }

        if let Some(chain) = &self.chain {
            let [r, w, dm] = chain;
            let _ = writeln!(
                body,
                "\n## 2. Chain: bridge + host-local, tuning, loopback — ADD then DEL\n\n\
                 4 plugins (portmap has no component yet, so it is not in the chain). {} alternated rounds. \
                 Reference: libcni order (ADD in order with prevResult, DEL in reverse), one process per \
                 plugin plus host-local under bridge; wasm-cni: one process per verb; daemon: the client \
                 per verb, the warm daemon doing the work.\n",
                r.len()
            );
            let _ = writeln!(
                body,
                "| metric | reference | wasm-cni | daemon | wasm-cni ÷ reference | daemon ÷ reference |\n|---|---|---|---|---|---|"
            );
            for (name, f_) in metrics {
                let [r, w, dm] = pick(name, chain, &self.chain_rss);
                let (a, b, c) = (column(r, f_), column(w, f_), column(dm, f_));
                let _ = writeln!(
                    body,
                    "| {name} | {} | {} | {} | {} | {} |",
                    cell(&summarize(&a)),
                    cell(&summarize(&b)),
                    cell(&summarize(&c)),
                    ratio_cell(&paired_ratio(&a, &b)),
                    ratio_cell(&paired_ratio(&a, &c)),
                );
            }
            let (a, b, c) = (
                column(r, Run::cpu_ms),
                column(w, Run::cpu_ms),
                column(dm, Run::cpu_ms),
            );
            let _ = writeln!(
                body,
                "| CPU per chain ADD+DEL, ms | {} | {} | {} | {} | {} |",
                cell(&summarize(&a)),
                cell(&summarize(&b)),
                cell(&summarize(&c)),
                ratio_cell(&paired_ratio(&a, &b)),
                ratio_cell(&paired_ratio(&a, &c)),
            );
            let _ = writeln!(
                body,
                "| processes per cycle | {} (+2 host-local) | {} | {} (+ the daemon) | | |",
                r.first().map_or(0, Run::invocations),
                w.first().map_or(0, Run::invocations),
                dm.first().map_or(0, Run::invocations),
            );
            let wall = paired_ratio(&column(r, Run::wall_ms), &column(w, Run::wall_ms));
            heads.push(Headline {
                what: "4-plugin chain ADD+DEL wall, wasm-cni ÷ reference".into(),
                value: format!("{}×", num(wall.median)),
                target: "(no target)".into(),
                met: true,
            });
            let wall = paired_ratio(&column(r, Run::wall_ms), &column(dm, Run::wall_ms));
            heads.push(Headline {
                what: "4-plugin chain ADD+DEL wall, daemon ÷ reference".into(),
                value: format!("{}×", num(wall.median)),
                target: "(no target)".into(),
                met: true,
            });
        }

        if !self.filtered.is_empty() {
            let rounds = self.filtered.first().map_or(0, |(r, _)| r[0].len());
            let _ = writeln!(
                body,
                "\n## 7. podman's default network, step by step: ipMasq, portmap, firewall, tuning\n\n\
                 bridge + host-local, then with `ipMasq` (and hairpin), then + portmap (one mapping, \
                 `portMappings` capability), + firewall, + tuning: the conflist podman writes. {rounds} \
                 alternated rounds per step, fresh namespaces each. Reference: the Debian plugins \
                 (iptables-nft); wasm-cni: one process per verb, the rules as host nftables batches; \
                 daemon: the warm daemon. Median (p25–p75) ADD and DEL wall per step, and what each \
                 step adds to the ADD (difference of medians).\n"
            );
            let _ = writeln!(
                body,
                "| chain | ADD ref, ms | ADD wasm-cni, ms | ADD daemon, ms | DEL ref, ms | DEL wasm-cni, ms | DEL daemon, ms | ADD added: ref / wasm-cni / daemon, ms |\n|---|---|---|---|---|---|---|---|"
            );
            let med = |runs: &[Run], f: fn(&Run) -> f64| summarize(&column(runs, f)).median;
            let mut before: Option<[f64; 3]> = None;
            for (i, (runs, _)) in self.filtered.iter().enumerate() {
                let [r, w, dm] = runs;
                let now = [
                    med(r, Run::add_wall_ms),
                    med(w, Run::add_wall_ms),
                    med(dm, Run::add_wall_ms),
                ];
                let added = match before {
                    Some(b) => format!(
                        "{} / {} / {}",
                        num(now[0] - b[0]),
                        num(now[1] - b[1]),
                        num(now[2] - b[2])
                    ),
                    None => String::new(),
                };
                let _ = writeln!(
                    body,
                    "| {} | {} | {} | {} | {} | {} | {} | {added} |",
                    scenarios::FILTERED_STEPS[i],
                    cell(&summarize(&column(r, Run::add_wall_ms))),
                    cell(&summarize(&column(w, Run::add_wall_ms))),
                    cell(&summarize(&column(dm, Run::add_wall_ms))),
                    cell(&summarize(&column(r, Run::del_wall_ms))),
                    cell(&summarize(&column(w, Run::del_wall_ms))),
                    cell(&summarize(&column(dm, Run::del_wall_ms))),
                );
                before = Some(now);
            }
            if let Some((full, Some(rss))) = self.filtered.last() {
                let _ = writeln!(
                    body,
                    "\nThe whole chain:\n\n| metric | reference | wasm-cni | daemon | wasm-cni ÷ reference | daemon ÷ reference |\n|---|---|---|---|---|---|"
                );
                let rss = Some(rss.clone());
                for (name, f_) in metrics {
                    let [r, w, dm] = pick(name, full, &rss);
                    let (a, b, c) = (column(r, f_), column(w, f_), column(dm, f_));
                    let _ = writeln!(
                        body,
                        "| {name} | {} | {} | {} | {} | {} |",
                        cell(&summarize(&a)),
                        cell(&summarize(&b)),
                        cell(&summarize(&c)),
                        ratio_cell(&paired_ratio(&a, &b)),
                        ratio_cell(&paired_ratio(&a, &c)),
                    );
                }
                let [r, w, dm] = full;
                let (a, b, c) = (
                    column(r, Run::cpu_ms),
                    column(w, Run::cpu_ms),
                    column(dm, Run::cpu_ms),
                );
                let _ = writeln!(
                    body,
                    "| CPU per chain ADD+DEL, ms | {} | {} | {} | {} | {} |",
                    cell(&summarize(&a)),
                    cell(&summarize(&b)),
                    cell(&summarize(&c)),
                    ratio_cell(&paired_ratio(&a, &b)),
                    ratio_cell(&paired_ratio(&a, &c)),
                );
            }
            // ipMasq + portmap: steps 1 and 2 over step 0.
            if let (Some((base, _)), Some((pm, _))) = (self.filtered.first(), self.filtered.get(2))
            {
                let cost = med(&pm[1], Run::add_wall_ms) - med(&base[1], Run::add_wall_ms);
                heads.push(Headline {
                    what: "ipMasq + portmap added to the chain ADD, wasm-cni".into(),
                    value: format!("{} ms", num(cost)),
                    target: "≤ 1 ms".into(),
                    met: cost <= 1.0,
                });
                let ref_cost = med(&pm[0], Run::add_wall_ms) - med(&base[0], Run::add_wall_ms);
                heads.push(Headline {
                    what: "ipMasq + portmap added to the chain ADD, reference".into(),
                    value: format!("{} ms", num(ref_cost)),
                    target: "(peer)".into(),
                    met: true,
                });
            }
        }

        if let Some(nv) = &self.netavark {
            let [n, w, dm] = nv;
            let _ = writeln!(
                body,
                "\n## 6. netavark: podman's backend, setup then teardown\n\n\
                 {} alternated rounds. netavark {}: `setup NETNS` then `teardown NETNS` with an internal \
                 bridge network and a static IP (no firewall work), in a fresh node namespace; wasm-cni: \
                 bridge + static with the same bridge, gateway and address, one process per call and through \
                 the daemon. (netavark's teardown also removes the bridge once it has no container left; \
                 wasm-cni's DEL, like the reference bridge, keeps it.)\n",
                n.len(),
                netavark_version()
            );
            let _ = writeln!(
                body,
                "| metric | netavark | wasm-cni | daemon | wasm-cni ÷ netavark | daemon ÷ netavark |\n|---|---|---|---|---|---|"
            );
            for (name, f_) in metrics {
                let [n, w, dm] = pick(name, nv, &self.netavark_rss);
                let (a, b, c) = (column(n, f_), column(w, f_), column(dm, f_));
                let _ = writeln!(
                    body,
                    "| {} | {} | {} | {} | {} | {} |",
                    name.replace("ADD", "ADD (setup)")
                        .replace("DEL", "DEL (teardown)"),
                    cell(&summarize(&a)),
                    cell(&summarize(&b)),
                    cell(&summarize(&c)),
                    ratio_cell(&paired_ratio(&a, &b)),
                    ratio_cell(&paired_ratio(&a, &c)),
                );
            }
            let add = paired_ratio(&column(n, Run::add_wall_ms), &column(dm, Run::add_wall_ms));
            heads.push(Headline {
                what: "daemon ADD wall ÷ netavark setup".into(),
                value: format!("{}×", num(add.median)),
                target: "≤ 0.3×".into(),
                met: add.median <= 0.3,
            });
            let add = paired_ratio(&column(n, Run::add_wall_ms), &column(w, Run::add_wall_ms));
            heads.push(Headline {
                what: "per-invocation ADD wall ÷ netavark setup".into(),
                value: format!("{}×", num(add.median)),
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
                 host-local, one process per call; daemon: the client per call, the warm daemon doing the \
                 work (CPU: client plus daemon). {} alternated runs per level, median.\n",
                args.ipam_allocs, args.ipam_allocs, args.ipam_reps
            );
            let _ = writeln!(
                body,
                "| clients | reference ops/s | wasm-cni ops/s | daemon ops/s | wasm-cni ÷ reference | daemon ÷ reference | CPU per op, ms (ref / wasm / daemon) | duplicates | failures |\n|---|---|---|---|---|---|---|---|---|"
            );
            for (clients, [r, w, dm]) in &self.ipam {
                let ops =
                    |v: &[ipam::Throughput]| v.iter().map(|t| t.ops_per_s).collect::<Vec<f64>>();
                let (a, b, c) = (ops(r), ops(w), ops(dm));
                let cpu = |v: &[ipam::Throughput]| {
                    num(summarize(&v.iter().map(|t| t.cpu_per_op_ms).collect::<Vec<_>>()).median)
                };
                let all = || r.iter().chain(w).chain(dm);
                let _ = writeln!(
                    body,
                    "| {clients} | {} | {} | {} | {} | {} | {} / {} / {} | {} | {} |",
                    cell(&summarize(&a)),
                    cell(&summarize(&b)),
                    cell(&summarize(&c)),
                    ratio_cell(&paired_ratio(&a, &b)),
                    ratio_cell(&paired_ratio(&a, &c)),
                    cpu(r),
                    cpu(w),
                    cpu(dm),
                    all().map(|t| t.duplicates).sum::<usize>(),
                    all().map(|t| t.failures).sum::<usize>(),
                );
                if *clients == 16 {
                    let per = paired_ratio(&a, &b);
                    heads.push(Headline {
                        what: "IPAM ops/s at 16 clients, wasm-cni ÷ reference".into(),
                        value: format!("{}×", num(per.median)),
                        target: "(no target)".into(),
                        met: true,
                    });
                    let daemon = paired_ratio(&a, &c);
                    heads.push(Headline {
                        what: "IPAM ops/s at 16 clients, daemon ÷ reference".into(),
                        value: format!("{}×", num(daemon.median)),
                        target: "≥ 5×".into(),
                        met: daemon.median >= 5.0,
                    });
                }
            }
            let (dups, fails) = self.ipam.iter().fold((0, 0), |(d, f), (_, sides)| {
                let all = || sides.iter().flatten();
                (
                    d + all().map(|t| t.duplicates).sum::<usize>(),
                    f + all().map(|t| t.failures).sum::<usize>(),
                )
            });
            heads.push(Headline {
                what: "IPAM duplicates (failures), every level, every side".into(),
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
        if let Some(fp) = &self.footprint {
            let _ = writeln!(
                body,
                "\n## Footprint: what a node installs\n\n\
                 Bytes on disk, in MB (10^6): the binaries as `cargo xtask` installs them in \
                 `target/bin` (debug info and symbols split out into `target/bin/.debug`), the bundled components, \
                 and every file of the reference plugin directory.\n\n\
                 | | MB |\n|---|---|\n\
                 | `wasm-cni` (the engine) | {} |\n\
                 | `wasm-cni-client` (what the runtime executes in daemon mode) | {} |\n\
                 | the bundled components | {} |\n\
                 | installed, all of them | {} |\n\
                 | the reference plugins, all of them | {} |\n\
                 | the reference `bridge` | {} |",
                mb(fp.engine),
                mb(fp.client),
                mb(fp.components),
                mb(fp.installed()),
                mb(fp.reference),
                mb(fp.reference_bridge),
            );
            heads.push(Headline {
                what: "installed footprint (engine + client + components), MB".into(),
                value: mb(fp.installed()),
                target: "≤ 22".into(),
                met: fp.installed() <= 22_000_000,
            });
            heads.push(Headline {
                what: "the binary a runtime executes in daemon mode, MB".into(),
                value: mb(fp.client),
                target: "≤ 1".into(),
                met: fp.client > 0 && fp.client <= 1_000_000,
            });
        }
        if let Some(soak) = &self.soak {
            let _ = writeln!(
                body,
                "\n## 9. The daemon over many ADD/DEL cycles\n\n\
                 A daemon of its own; first a STATUS of each of the {} bundled components ({}), which \
                 loads and pre-links every one; then bridge + host-local ADD and DEL through the thin \
                 client, one container namespace, a new container id per cycle. Read from \
                 `/proc/<pid>/status` and `/proc/<pid>/fd`; ADD wall is the client's, median \
                 of the cycles since the row before. Took {:.0} s.\n\n\
                 | cycles | RSS, MiB | open descriptors | threads | ADD wall, ms |\n|---|---|---|---|---|",
                soak.components.len(),
                soak.components.join(", "),
                soak.took.as_secs_f64(),
            );
            if let Some(s) = &soak.started {
                let _ = writeln!(
                    body,
                    "| (started, nothing loaded) | {:.2} | {} | {} | |",
                    mib(s.rss_kib),
                    s.fds,
                    s.threads
                );
            }
            for (i, s) in soak.samples.iter().enumerate() {
                let what = if i == 0 {
                    "0 (every component loaded)".to_string()
                } else {
                    s.cycles.to_string()
                };
                let _ = writeln!(
                    body,
                    "| {what} | {:.2} | {} | {} | {} |",
                    mib(s.rss_kib),
                    s.fds,
                    s.threads,
                    s.add_ms.map(crate::stats::num).unwrap_or_default(),
                );
            }
            if let Some(first) = soak.samples.first() {
                heads.push(Headline {
                    what: "daemon RSS, every bundled component loaded, MiB".into(),
                    value: format!("{:.1}", mib(first.rss_kib)),
                    target: "≤ 50".into(),
                    met: first.rss_kib <= 50 * 1024,
                });
            }
            if let (Some(loaded), Some(base), Some(last)) =
                (soak.samples.first(), soak.baseline(), soak.samples.last())
            {
                let _ = writeln!(
                    body,
                    "\nDescriptors, everything loaded → {} cycles: {}; {} → {} cycles: {}.",
                    base.cycles,
                    soak::kinds_diff(loaded, base),
                    base.cycles,
                    last.cycles,
                    soak::kinds_diff(base, last),
                );
            }
            if let (Some((rss, fds)), Some(base), Some(last)) =
                (soak.growth(), soak.baseline(), soak.samples.last())
            {
                heads.push(Headline {
                    what: format!(
                        "daemon RSS growth, cycles {} → {}, MiB",
                        base.cycles, last.cycles
                    ),
                    value: format!("{:.2}", rss as f64 / 1024.0),
                    target: "< 1".into(),
                    met: rss < 1024,
                });
                heads.push(Headline {
                    what: format!(
                        "daemon open descriptors, cycles {} → {}",
                        base.cycles, last.cycles
                    ),
                    value: format!("{fds:+}"),
                    target: "0".into(),
                    met: fds <= 0,
                });
                if let (Some(first), Some(then)) = (base.add_ms, last.add_ms) {
                    heads.push(Headline {
                        what: format!(
                            "daemon ADD wall, cycles {} ÷ the first {} (IPAM history kept)",
                            last.cycles, base.cycles
                        ),
                        value: format!("{:.2}×", then / first),
                        target: "(no target)".into(),
                        met: true,
                    });
                }
            }
        }
        if let Some(sides) = &self.tracing {
            let _ = writeln!(
                body,
                "\n## 11. What tracing costs a call\n\n\
                 bridge + host-local ADD then DEL in one node namespace whose loopback has a \
                 live OTLP sink (answers 200 to every export), a fresh container namespace per \
                 run, {} rounds with the sides rotated (one unmeasured round first). Per \
                 invocation: the runtime's `TRACEPARENT` and `OTEL_EXPORTER_OTLP_ENDPOINT` \
                 (\"on\") or neither (\"off\"); through the daemon: two daemons in the node, \
                 one started with `--otlp-endpoint`. ADD wall, ms, median (p25–p75); on ÷ off \
                 is the median of per-round ratios.\n\n\
                 | | ADD wall, ms | on ÷ off |\n|---|---|---|",
                sides[0].len(),
            );
            for (i, side) in tracing::SIDES.iter().enumerate() {
                let ratio = match i {
                    1 | 3 => ratio_cell(&paired_ratio(&sides[i - 1], &sides[i])),
                    _ => String::new(),
                };
                let _ = writeln!(
                    body,
                    "| {side} | {} | {ratio} |",
                    cell(&summarize(&sides[i]))
                );
            }
            for (what, off, on) in [("per-invocation", 0, 1), ("daemon", 2, 3)] {
                let r = paired_ratio(&sides[off], &sides[on]).median;
                heads.push(Headline {
                    what: format!("tracing on (live collector) ÷ off, {what} ADD wall"),
                    value: format!("{}×", num(r)),
                    target: "(cost of tracing)".into(),
                    met: true,
                });
            }
        }
        if let Some(l) = &self.languages {
            let _ = writeln!(
                body,
                "\n## 12. What a plugin's language costs\n\n\
                 The worked example, a meta plugin adding the routes its config lists, in Rust \
                 (`cargo xtask new-plugin`), Python (componentize-py) and JavaScript \
                 (componentize-js); the last two with the limits they need (`guest-plugins/docs/\
                 python-and-javascript.md`). In-process through the `wasm_cni` library: compile and \
                 pre-link with an empty cache, and the load of the cached artifact by a fresh \
                 runtime. Median (p25–p75).\n\n\
                 | | component, MB | cold compile, ms | warm load, ms |\n|---|---|---|---|"
            );
            for st in &l.stat {
                let _ = writeln!(
                    body,
                    "| {} | {:.1} | {} | {} |",
                    st.label,
                    st.bytes as f64 / 1e6,
                    cell(&st.cold),
                    cell(&st.warm)
                );
            }
            let _ = writeln!(
                body,
                "\nOne `wasm-cni` process per call, bridge + host-local alone and followed by each \
                 example, in fresh namespaces, {} rounds with the chains rotated (one unmeasured \
                 run of each first, which compiles it). ADD wall, ms, median (p25–p75); \"+ plugin\": \
                 the median of the chain's ADD minus the median without it; peak RSS of the ADD and \
                 DEL processes, MiB, median of {} runs.\n\n\
                 | chain | ADD wall | + plugin | peak RSS |\n|---|---|---|---|",
                l.runs[0].len(),
                l.rss[0].len(),
            );
            let base = summarize(&column(&l.runs[0], Run::add_wall_ms)).median;
            for (i, runs) in l.runs.iter().enumerate() {
                let label = match i {
                    0 => "bridge + host-local".to_string(),
                    _ => format!("+ {} routes", languages::LANGS[i - 1].0),
                };
                let add = summarize(&column(runs, Run::add_wall_ms));
                let extra = match i {
                    0 => String::new(),
                    _ => format!("{} ms", num(add.median - base)),
                };
                let rss = summarize(&column(&l.rss[i], Run::peak_rss_mib));
                let _ = writeln!(
                    body,
                    "| {label} | {} | {extra} | {} |",
                    cell(&add),
                    num(rss.median)
                );
            }
        }
        if let Some([empty, full]) = &self.history {
            let _ = writeln!(
                body,
                "\n## 13. host-local's history at its cap, per invocation\n\n\
                 bridge + host-local on a /16, one `wasm-cni` process per verb, {} alternated \
                 rounds in fresh namespaces and state: host-local's scope empty, or seeded with \
                 its history's cap ({} addresses, each released an hour ago by a container of \
                 its own), where an ADD reuses the address released longest ago and the DEL \
                 releases it again. What a podman host's default network holds after some \
                 thousands of containers; a Kubernetes node's /24 never gets there. Median \
                 (p25–p75); at cap ÷ empty is the median of per-round ratios.\n\n\
                 | metric | empty | at cap | at cap ÷ empty |\n|---|---|---|---|",
                empty.len(),
                scenarios::HISTORY_CAP,
            );
            type Metric = (&'static str, fn(&Run) -> f64);
            let metrics: [Metric; 3] = [
                ("ADD wall, ms", Run::add_wall_ms),
                ("DEL wall, ms", Run::del_wall_ms),
                ("CPU per invocation, ms", Run::cpu_per_invocation_ms),
            ];
            for (what, f) in metrics {
                let (e, c) = (column(empty, f), column(full, f));
                let _ = writeln!(
                    body,
                    "| {what} | {} | {} | {} |",
                    cell(&summarize(&e)),
                    cell(&summarize(&c)),
                    ratio_cell(&paired_ratio(&e, &c))
                );
            }
            let add = paired_ratio(
                &column(empty, Run::add_wall_ms),
                &column(full, Run::add_wall_ms),
            );
            heads.push(Headline {
                what: "per-invocation ADD wall, host-local's history at its cap ÷ empty".into(),
                value: format!("{}×", num(add.median)),
                target: "(no target)".into(),
                met: true,
            });
        }
        if let Some(bursts) = &self.pods {
            let _ = writeln!(
                body,
                "\n## 10. {} pods at once through containerd's CRI\n\n\
                 containerd 1.6 (host/cri: a containerd of the bench's own, an offline pause image) \
                 in a fresh node namespace per side and round; bridge + host-local, and as \
                 containerd's floor a plugin that only answers (a shell script printing a fixed \
                 result); containerd's own loopback is the reference one on every side. {} \
                 RunPodSandbox calls released \
                 together by a barrier, as the kubelet starts a node's pods; {} rounds, sides \
                 rotated. One pod is started and removed before each burst, unmeasured. Times in ms \
                 over every call of every round; \"all up\": first call to last answer, median of \
                 the rounds.\n\n\
                 | | RunPodSandbox p50 | p99 | all up | failed calls |\n|---|---|---|---|---|",
                args.pods, args.pods, args.pod_rounds,
            );
            for (side, b) in pods::SIDES.iter().zip(bursts) {
                let _ = writeln!(
                    body,
                    "| {} | {} | {} | {} | {} |",
                    side.label(),
                    num(pods::percentile(&b.run_ms, 0.5)),
                    num(pods::percentile(&b.run_ms, 0.99)),
                    num(summarize(&b.all_up_ms).median),
                    b.failures.len(),
                );
            }
            for (side, b) in pods::SIDES.iter().zip(bursts) {
                if let Some(e) = b.failures.first() {
                    let _ = writeln!(body, "\nFirst failure, {}: {e}", side.label());
                }
            }
            let p99 = |i: usize| pods::percentile(&bursts[i].run_ms, 0.99);
            let failed: usize = bursts.iter().map(|b| b.failures.len()).sum();
            heads.push(Headline {
                what: format!(
                    "{} pods at once through the CRI, RunPodSandbox p99, daemon ÷ reference",
                    args.pods
                ),
                value: format!("{}×", num(p99(2) / p99(0))),
                target: "≤ 0.5×".into(),
                met: p99(2) / p99(0) <= 0.5,
            });
            heads.push(Headline {
                what: "the same, wasm-cni per invocation ÷ reference".into(),
                value: format!("{}×", num(p99(1) / p99(0))),
                target: "(for comparison)".into(),
                met: true,
            });
            // What the network adds to containerd's own cost of a pod.
            heads.push(Headline {
                what:
                    "the same, each over containerd's floor: (daemon − floor) ÷ (reference − floor)"
                        .into(),
                value: format!("{}×", num((p99(2) - p99(3)) / (p99(0) - p99(3)))),
                target: "(for comparison)".into(),
                met: true,
            });
            heads.push(Headline {
                what: "failed CRI calls in item 10, all sides".into(),
                value: failed.to_string(),
                target: "0".into(),
                met: failed == 0,
            });
        }
        if let Some(ratio) = cluster::scaling(&self.cluster) {
            heads.push(Headline {
                what: "IPAM on etcd, 3 nodes ÷ 1 node (16 clients per node)".into(),
                value: format!("{}×", num(ratio)),
                target: "≥ 2×".into(),
                met: ratio >= 2.0,
            });
        }
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
        if !figures.is_empty() {
            let _ = writeln!(out, "\nFigures (beside this file):\n");
            for f in figures {
                let _ = writeln!(out, "![{}]({})", f.alt, f.file);
            }
        }
        out.push_str(&body);
        if !self.cluster.is_empty() {
            out.push_str(&cluster::render(&self.cluster, args.ipam_allocs, 3));
        }
        out
    }
}
