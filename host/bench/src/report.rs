//! The report's text: a section per bench item, each writing its part of
//! the page and its headline rows, and `render` putting them in order
//! under the machine, the headline table and the figures.

use std::fmt::Write as _;
use std::time::Duration;

use super::*;

/// What the sections write: the headline rows, then the body below them.
#[derive(Default)]
pub(crate) struct Page {
    pub(crate) heads: Vec<Headline>,
    pub(crate) body: String,
}

type Metric = (&'static str, fn(&Run) -> f64);

/// The per-run figures items 1 and 3 compare, in the order of their rows.
const METRICS: [Metric; 5] = [
    ("ADD wall, ms", Run::add_wall_ms),
    ("DEL wall, ms", Run::del_wall_ms),
    ("ADD+DEL wall, ms", Run::wall_ms),
    ("CPU per invocation, ms", Run::cpu_per_invocation_ms),
    (RSS, Run::peak_rss_mib),
];

impl Report {
    pub(crate) fn render(
        &self,
        m: &Machine,
        args: &Args,
        took: Duration,
        figures: &[Figure],
    ) -> String {
        let mut page = Page::default();
        let page = &mut page;

        self.cycle_section(page);

        self.chain_section(page);

        self.filtered_section(page);

        self.netavark_section(page);

        self.costs_section(page);

        self.ipam_section(page, args);

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
        self.footprint_section(page);
        self.soak_section(page);
        self.tracing_section(page);
        self.languages_section(page);
        self.history_section(page);
        self.pods_section(page, args);
        self.scaling_headline(page);
        if let Some(f) = &self.fabric {
            f.section(page);
        }
        let _ = writeln!(
            out,
            "## Headline\n\n| | measured | target | |\n|---|---|---|---|"
        );
        for h in &page.heads {
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
        out.push_str(&page.body);
        if !self.cluster.is_empty() {
            out.push_str(&cluster::render(&self.cluster, args.ipam_allocs, 3));
        }
        out
    }

    fn cycle_section(&self, page: &mut Page) {
        let Some(cycle) = &self.cycle else {
            return;
        };
        let Page { heads, body } = page;
        let metrics = METRICS;
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
        let add_floor = paired_ratio(&column(f, Run::add_wall_ms), &column(w, Run::add_wall_ms));
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
            bound_section(body, heads, b, f);
        }
    }

    fn chain_section(&self, page: &mut Page) {
        let Some(chain) = &self.chain else {
            return;
        };
        let Page { heads, body } = page;
        let metrics = METRICS;
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
            sides_row(body, name, pick(name, chain, &self.chain_rss), f_);
        }
        sides_row(body, "CPU per chain ADD+DEL, ms", chain, Run::cpu_ms);
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

    fn filtered_section(&self, page: &mut Page) {
        if self.filtered.is_empty() {
            return;
        }
        let Page { heads, body } = page;
        let metrics = METRICS;
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
                sides_row(body, name, pick(name, full, &rss), f_);
            }
            sides_row(body, "CPU per chain ADD+DEL, ms", full, Run::cpu_ms);
        }
        // ipMasq + portmap: steps 1 and 2 over step 0.
        if let (Some((base, _)), Some((pm, _))) = (self.filtered.first(), self.filtered.get(2)) {
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

    fn netavark_section(&self, page: &mut Page) {
        let Some(nv) = &self.netavark else {
            return;
        };
        let Page { heads, body } = page;
        let metrics = METRICS;
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
            let label = name
                .replace("ADD", "ADD (setup)")
                .replace("DEL", "DEL (teardown)");
            sides_row(body, &label, pick(name, nv, &self.netavark_rss), f_);
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

    fn costs_section(&self, page: &mut Page) {
        let Some(c) = &self.costs else {
            return;
        };
        let Page { heads, body } = page;
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
            body,
            "cold first call, library: engine + compile + instantiate + ADD of `fx`, ms",
            &c.cold_fx,
        );
        row(
            body,
            "cold load of `bridge` (compile + pre-link), ms",
            &c.cold_bridge_load,
        );
        row(
            body,
            "per-invocation engine set-up (`Runtime::new`), ms",
            &c.engine_setup,
        );
        let mut worst = 0.0f64;
        for (name, s) in &c.warm_load {
            row(
                body,
                &format!("warm load `{name}` (cached artifact), ms"),
                s,
            );
            if name != "fx" {
                worst = worst.max(s.median);
            }
        }
        row(
            body,
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

    fn ipam_section(&self, page: &mut Page, args: &Args) {
        if self.ipam.is_empty() {
            return;
        }
        let Page { heads, body } = page;
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
            let ops = |v: &[ipam::Throughput]| v.iter().map(|t| t.ops_per_s).collect::<Vec<f64>>();
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

    fn footprint_section(&self, page: &mut Page) {
        let Some(fp) = &self.footprint else {
            return;
        };
        let Page { heads, body } = page;
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

    fn soak_section(&self, page: &mut Page) {
        let Some(soak) = &self.soak else {
            return;
        };
        let Page { heads, body } = page;
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

    fn tracing_section(&self, page: &mut Page) {
        let Some(sides) = &self.tracing else {
            return;
        };
        let Page { heads, body } = page;
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

    fn languages_section(&self, page: &mut Page) {
        let Some(l) = &self.languages else {
            return;
        };
        let body = &mut page.body;
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

    fn history_section(&self, page: &mut Page) {
        let Some([empty, full]) = &self.history else {
            return;
        };
        let Page { heads, body } = page;
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

    fn pods_section(&self, page: &mut Page, args: &Args) {
        let Some(bursts) = &self.pods else {
            return;
        };
        let Page { heads, body } = page;
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
            what: "the same, each over containerd's floor: (daemon − floor) ÷ (reference − floor)"
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

    fn scaling_headline(&self, page: &mut Page) {
        let Some(ratio) = cluster::scaling(&self.cluster) else {
            return;
        };
        let heads = &mut page.heads;
        heads.push(Headline {
            what: "IPAM on etcd, 3 nodes ÷ 1 node (16 clients per node)".into(),
            value: format!("{}×", num(ratio)),
            target: "≥ 2×".into(),
            met: ratio >= 2.0,
        });
    }
}

/// A table row of three sides' medians (p25–p75) and the second and the
/// third side over the first, paired by round.
fn sides_row(body: &mut String, label: &str, sides: &[Vec<Run>; 3], f: impl Fn(&Run) -> f64) {
    let [a, b, c] = sides.each_ref().map(|runs| column(runs, &f));
    let _ = writeln!(
        body,
        "| {label} | {} | {} | {} | {} | {} |",
        cell(&summarize(&a)),
        cell(&summarize(&b)),
        cell(&summarize(&c)),
        ratio_cell(&paired_ratio(&a, &b)),
        ratio_cell(&paired_ratio(&a, &c)),
    );
}
