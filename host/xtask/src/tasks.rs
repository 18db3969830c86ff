//! The composite tasks behind the README's commands.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::{fail, plugins, polyglot, setup, toolchain, Context, Result};

/// Run a cargo subcommand in the workspace with the toolchain that runs us.
fn cargo(root: &Path, args: &[&str]) -> Result<()> {
    cargo_env(root, args, &[])
}

fn cargo_env(root: &Path, args: &[&str], env: &[(String, String)]) -> Result<()> {
    let started = Instant::now();
    println!("xtask: cargo {}", args.join(" "));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(root)
        .status()
        .context(format_args!("running cargo {}", args.join(" ")))?;
    if !status.success() {
        return Err(fail!("cargo {} failed ({status})", args.join(" ")));
    }
    println!(
        "xtask: cargo {} done in {:.0} s",
        args.first().copied().unwrap_or_default(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The static build of the host's binaries, and every other cargo run that
/// compiles the host for this machine (`wasm-cni-plugin-test`, clippy, the
/// tests).
///
/// Every CNI call starts the binary, and a static PIE needs no dynamic
/// loader, no shared libraries mapped and bound: measured here, a process
/// start of 1.1 ms instead of 1.45 ms and 3.3 MiB resident instead of 5.0
/// for the thin client's path (host/bench/results/findings.md). Static
/// linking applies to the target's binaries only, never to build scripts
/// and proc-macros, which is why the target triple is named. A non-PIE
/// static binary would start 0.3 ms faster still, but its code would sit at
/// fixed addresses: a root process running untrusted code keeps ASLR.
///
/// All of these runs name the same target with the same flags and select
/// the whole workspace: cargo unifies dependency features over the
/// packages selected and hashes flags into every artifact, so one selection
/// and one set of flags is what lets wasmtime, cranelift and the rest
/// compile once for `cargo xtask test` instead of once per step (in CI: the
/// tests' 16 minutes of compiling were mostly that). What differs between
/// the runs is the `wasm-cni` crate itself: with the model (`fake`) for
/// `plugin test` and the tests, without it for what nodes run — a workspace
/// build leaves it out, since only a dev-dependency (the tests') asks for
/// it.
struct StaticBuild {
    triple: String,
    /// Rustflags for the triple's artifacts; empty off linux-gnu.
    rustflags: String,
}

impl StaticBuild {
    fn detect() -> Result<Self> {
        let out = Command::new("rustc")
            .arg("-vV")
            .output()
            .context("running rustc -vV")?;
        let text = String::from_utf8_lossy(&out.stdout);
        let triple = text
            .lines()
            .find_map(|l| l.strip_prefix("host: "))
            .ok_or_else(|| fail!("rustc -vV names no host triple"))?
            .trim()
            .to_string();
        let rustflags = if triple.ends_with("-linux-gnu") {
            "-C target-feature=+crt-static -C link-arg=-Wl,-z,pack-relative-relocs".into()
        } else {
            String::new()
        };
        Ok(Self { triple, rustflags })
    }

    /// Where its binaries land, relative to the workspace.
    fn dir(&self) -> PathBuf {
        self.profile_dir("release")
    }

    fn profile_dir(&self, profile: &str) -> PathBuf {
        PathBuf::from("target").join(&self.triple).join(profile)
    }

    /// The environment every such cargo run gets.
    fn env(&self) -> Vec<(String, String)> {
        if self.rustflags.is_empty() {
            return Vec::new();
        }
        vec![(
            toolchain::target_rustflags_var(&self.triple),
            self.rustflags.clone(),
        )]
    }

    /// `cargo <subcommand> --target <triple> <rest>`: the arguments of such
    /// a run (a `--` in `rest` stays after the target).
    fn args<'a>(&'a self, subcommand: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec![subcommand, "--target", self.triple.as_str()];
        args.extend_from_slice(rest);
        args
    }
}

/// Build the static binaries of the workspace and copy the host's to
/// `target/bin/`, the one place the docs, the tests, the demo and the
/// bench run them from.
fn build_host(root: &Path, build: &StaticBuild) -> Result<PathBuf> {
    // Binaries only: the fixtures are cdylib-only crates, which a static
    // target cannot link (they are built for wasm by `plugins`). Features
    // are still unified over the whole workspace.
    let args = build.args("build", &["--release", "--locked", "--workspace", "--bins"]);
    cargo_env(root, &args, &build.env())?;
    let bin = root.join("target/bin");
    std::fs::create_dir_all(&bin).context(bin.display())?;
    let built = root.join(build.dir());
    for entry in std::fs::read_dir(&built).context(built.display())? {
        let path = entry.context(built.display())?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        // The client and the floor come from `install_small`, the engine
        // from its own profile below.
        if name == "wasm-cni-bench" && path.is_file() {
            install_stripped(&path, &bin, name)?;
        }
    }
    install_engine(root, &bin, build)?;
    install_small(root, &bin, build)?;
    Ok(bin)
}

/// The engine as nodes install it: profile `node` (fat LTO, optimised for
/// size but for the compiler; `Cargo.toml` says why), built as its own
/// package so that only its own features are in it. The tests' builds stay on `release`, whose parallel
/// codegen keeps them quick; every integration test runs this binary.
fn install_engine(root: &Path, bin: &Path, build: &StaticBuild) -> Result<()> {
    let args = build.args(
        "build",
        &[
            "--profile",
            "node",
            "--locked",
            "-p",
            "wasm-cni",
            "--bin",
            "wasm-cni",
        ],
    );
    cargo_env(root, &args, &build.env())?;
    let built = root.join(build.profile_dir("node")).join("wasm-cni");
    install_stripped(&built, bin, "wasm-cni")
}

/// The programs whose process start is what they cost: the thin client,
/// which a runtime executes for every call of a daemon network, and the
/// bench's floor, which must not pay a start the cheapest program would
/// not. Built for size into `bin`: profile `client` (opt-level z,
/// whole-program LTO), the standard library rebuilt with it (Debian's rustc
/// and library source, as for the guests) and panics an immediate abort,
/// which drops the panic and backtrace machinery. Their own target
/// directory: a standard library built this way must not meet the
/// workspace's.
///
/// On a glibc machine they are linked against musl ([`MuslLink`]), static
/// and position-independent. glibc's start-up probes the CPU's caches with
/// `cpuid`, a dozen rounds of leaves 2 and 4, and under a hypervisor every
/// `cpuid` is a trap to it: measured on a cloud VM, 8.5 µs each and 0.5 ms
/// of CPU per process start, nearly all the client cost a call. musl does
/// no such probe (measured in host/bench/results/findings.md).
fn install_small(root: &Path, bin: &Path, build: &StaticBuild) -> Result<()> {
    const PROGRAMS: [&str; 2] = ["wasm-cni-client", "wasm-cni-floor"];
    let started = Instant::now();
    let target_dir = root.join("target/client");
    let musl = MuslLink::for_host(&build.triple, &target_dir)?;
    let (triple, link_flags) = match &musl {
        Some(m) => (m.triple.clone(), m.rustflags()),
        None => (build.triple.clone(), build.rustflags.clone()),
    };
    let mut cmd = toolchain::debian_cargo();
    cmd.current_dir(root)
        .args(["build", "--locked", "--profile", "client"]);
    for p in PROGRAMS {
        cmd.args(["-p", p, "--bin", p]);
    }
    cmd.args(["--target", &triple])
        .arg("-Zbuild-std=std,panic_abort")
        .arg("--target-dir")
        .arg(&target_dir);
    let flags = format!("{link_flags} -Zunstable-options -Cpanic=immediate-abort");
    cmd.env(toolchain::target_rustflags_var(&triple), flags.trim());
    println!(
        "xtask: {}, for size, for {triple}, with {}",
        PROGRAMS.join(" and "),
        toolchain::DEBIAN_CARGO
    );
    let status = cmd.status().context("running Debian's cargo")?;
    if !status.success() {
        return Err(fail!(
            "building {} for size failed ({status}); `cargo xtask setup` installs the Debian \
             toolchain and musl they need",
            PROGRAMS.join(" and ")
        ));
    }
    for p in PROGRAMS {
        let built = target_dir.join(&triple).join("client").join(p);
        install_stripped(&built, bin, p)?;
    }
    println!(
        "xtask: {} done in {:.0} s",
        PROGRAMS.join(" and "),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Linking a static PIE against Debian's musl (package `musl-dev`, which
/// `cargo xtask setup` installs): rustc's musl targets expect musl's objects
/// inside the Rust toolchain, which Debian does not ship, so the link is
/// gcc's with a specs file pointing at Debian's. Debian's own `musl-gcc`
/// specs always ask for the dynamic loader; these start a static PIE with
/// `rcrt1.o`, which relocates the program itself (the code keeps ASLR).
struct MuslLink {
    triple: String,
    /// What the link is given: the specs file and the directory of an
    /// empty `libunwind.a`.
    specs: PathBuf,
    lib_dir: PathBuf,
}

impl MuslLink {
    /// For a `<arch>-unknown-linux-gnu` host: the same machine with musl.
    /// None elsewhere (the client then links like the rest of the host).
    fn for_host(host: &str, target_dir: &Path) -> Result<Option<MuslLink>> {
        let Some(arch) = host.strip_suffix("-unknown-linux-gnu") else {
            return Ok(None);
        };
        let musl = PathBuf::from(format!("/usr/lib/{arch}-linux-musl"));
        for needed in ["rcrt1.o", "crti.o", "crtn.o", "libc.a"] {
            if !musl.join(needed).is_file() {
                return Err(fail!(
                    "{} missing: the thin client links musl; `cargo xtask setup` installs \
                     musl-dev",
                    musl.join(needed).display()
                ));
            }
        }
        let dir = target_dir.join("musl");
        std::fs::create_dir_all(&dir).context(dir.display())?;
        let m = musl.display();
        let specs = format!(
            "*link_libgcc:\n-L{m}\n\n\
             *libgcc:\nlibgcc.a%s %:if-exists(libgcc_eh.a%s)\n\n\
             *startfile:\n{m}/rcrt1.o {m}/crti.o crtbeginS.o%s\n\n\
             *endfile:\ncrtendS.o%s {m}/crtn.o\n\n\
             *link:\n-static -pie --no-dynamic-linker -z text -nostdlib\n"
        );
        let specs_file = dir.join("static-pie.specs");
        std::fs::write(&specs_file, specs).context(specs_file.display())?;
        // std's unwind crate asks for `-lunwind` on static musl. Panics
        // abort at once in this build, so nothing calls the unwinder: an
        // empty archive answers the request, and a reference to it would
        // fail the link rather than pass unnoticed.
        let unwind = dir.join("libunwind.a");
        std::fs::write(&unwind, b"!<arch>\n").context(unwind.display())?;
        Ok(Some(MuslLink {
            triple: format!("{arch}-unknown-linux-musl"),
            specs: specs_file,
            lib_dir: dir,
        }))
    }

    fn rustflags(&self) -> String {
        format!(
            "-C target-feature=+crt-static -C link-self-contained=no -C linker=gcc \
             -C link-arg=-specs={} -L native={}",
            self.specs.display(),
            self.lib_dir.display()
        )
    }
}

/// Put `path` into `bin` as `name` without its debug info and symbols,
/// which go to `bin/.debug/<name>.debug`, linked from the binary by a
/// `.gnu_debuglink` (the directory gdb and perf look in beside a binary):
/// what nodes run stays small, and whoever debugs has everything. Without
/// objcopy the binary is copied as it is. Replaces, never writes into, a
/// binary a process may be running.
fn install_stripped(path: &Path, bin: &Path, name: &str) -> Result<()> {
    let tmp = bin.join(format!(".{name}.tmp"));
    let debug_dir = bin.join(".debug");
    std::fs::create_dir_all(&debug_dir).context(debug_dir.display())?;
    let debug = debug_dir.join(format!("{name}.debug"));
    let objcopy = |args: &[&std::ffi::OsStr]| {
        Command::new("objcopy")
            .args(args)
            .status()
            .is_ok_and(|s| s.success())
    };
    let split = objcopy(&[
        "--only-keep-debug".as_ref(),
        path.as_os_str(),
        debug.as_os_str(),
    ]) && {
        let link = format!("--add-gnu-debuglink={}", debug.display());
        objcopy(&[
            "--strip-all".as_ref(),
            link.as_ref(),
            path.as_os_str(),
            tmp.as_os_str(),
        ])
    };
    if !split {
        std::fs::copy(path, &tmp).context(path.display())?;
    }
    std::fs::rename(&tmp, bin.join(name)).context(bin.display())?;
    Ok(())
}

/// Build `wasm-cni-plugin-test` (the CLI with the kernel model, feature
/// `fake`), static like the rest, and put it into `bin`. A cargo run of its
/// own after the static build, whose dependencies it shares (only the
/// `wasm-cni` crate compiles again, with the model, the same compile the
/// tests then reuse): features of one build are unified, and the model must
/// not reach `wasm-cni`. Plugin authors run it on their own machines.
fn install_plugin_test(root: &Path, bin: &Path, build: &StaticBuild) -> Result<()> {
    let args = build.args(
        "build",
        &[
            "--release",
            "--locked",
            "--workspace",
            "--features",
            "wasm-cni/fake",
            "--bin",
            "wasm-cni-plugin-test",
        ],
    );
    cargo_env(root, &args, &build.env())?;
    let name = "wasm-cni-plugin-test";
    install_stripped(&root.join(build.dir()).join(name), bin, name)
}

pub fn test(root: &Path) -> Result<()> {
    setup::run(setup::TEST_PACKAGES)?;
    cargo(root, &["fmt", "--all", "--check"])?;
    crate::layers::run(root)?;
    let build = StaticBuild::detect()?;
    let bin = build_host(root, &build)?;
    plugins::run(root, None, false, &[])?;
    // The Python and JavaScript examples and fixtures (tests/polyglot.rs).
    polyglot::run(root, None, false)?;
    let args = build.args(
        "clippy",
        &[
            "--release",
            "--locked",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
    );
    // The target named, so build scripts and proc-macros are the static
    // build's; without its flags, which only matter to linking (and with
    // them rustc warns about every cdylib it cannot link statically).
    cargo_env(root, &args, &[])?;
    // The tests run the static binary the docs install.
    let under_test = ("WASM_CNI_BIN", bin.join("wasm-cni"));
    let under_test = (under_test.0, under_test.1.to_string_lossy().into_owned());
    // The out-of-tree plugin test drives this xtask (new-plugin, plugins
    // --crate) without a cargo of its own under the running one.
    let me = std::env::current_exe().context("xtask's own executable")?;
    let me = me.to_string_lossy().into_owned();
    // Before the tests, which run `wasm-cni plugin test`.
    install_plugin_test(root, &bin, &build)?;
    // The node image the Kubernetes tests run, from this build.
    let image = root.join(IMAGE_ARCHIVE);
    let (_, digest) =
        crate::image::build(&bin, &root.join("target-guest/components"), &image, "test")?;
    // Beside it, the DaemonSet manifest pinned to it (the Kubernetes tests
    // check the pin against the image they load).
    let pinned = crate::image::render_manifest(
        &root.join("host/deploy/kubernetes/wasm-cni.yaml"),
        crate::image::NAME,
        "test",
        &digest,
    )?;
    let rendered = image.with_file_name("wasm-cni.yaml");
    std::fs::write(&rendered, pinned).context(rendered.display())?;
    let image = image.to_string_lossy().into_owned();
    // Every pass selects the whole workspace (see `StaticBuild`), so the
    // later ones compile nothing: `--test` picks the binaries.
    let all = ["--release", "--locked", "--workspace"];
    let (mut passed, mut failed) = cargo_test(
        root,
        &build,
        &all,
        &[
            (under_test.0, &under_test.1),
            ("WASM_CNI_XTASK", &me),
            ("WASM_CNI_IMAGE", &image),
        ],
    )?;
    // The same chain, policy, IPAM, conformance, filtering, shaping and
    // polyglot tests again, every call served by a daemon in the node
    // namespace (the other front door), and every call made through the thin
    // client as a node installs it: `wasm-cni-client` as `wasm-cni`, the
    // engine beside it (and `plugin test`'s binary, which the engine hands
    // that command to).
    let layout = bin.join("client-layout");
    std::fs::create_dir_all(&layout).context(layout.display())?;
    for (from, to) in [
        ("wasm-cni-client", "wasm-cni"),
        ("wasm-cni", "wasm-cni-engine"),
        ("wasm-cni-plugin-test", "wasm-cni-plugin-test"),
    ] {
        std::fs::copy(bin.join(from), layout.join(to)).context(bin.join(from).display())?;
    }
    let via_client = layout.join("wasm-cni").to_string_lossy().into_owned();
    let suites = [
        "chain",
        "policy",
        "host_local",
        "conformance",
        "filtering",
        "shaping",
        // Interpreters' components in the daemon's instance pool.
        "polyglot",
    ];
    let mut args = all.to_vec();
    for suite in suites {
        args.extend(["--test", suite]);
    }
    let (p, f) = cargo_test(
        root,
        &build,
        &args,
        &[("WASM_CNI_TEST_DAEMON", "1"), (under_test.0, &via_client)],
    )?;
    passed += p;
    failed += f;
    // The daemon's own suite through the thin client too: its refusals,
    // a daemon killed mid-stream, stop and restart, one node shared.
    let mut args = all.to_vec();
    args.extend(["--test", "daemon"]);
    let (p, f) = cargo_test(root, &build, &args, &[(under_test.0, &via_client)])?;
    passed += p;
    failed += f;
    // The fault-injection sweep over the bundled plugins once more, its
    // figures shown: injection points per plugin, 0 leaks.
    let mut args = all.to_vec();
    args.extend([
        "--test",
        "plugin_test",
        "every_bundled_plugin",
        "--",
        "--nocapture",
    ]);
    cargo_test(root, &build, &args, &[(under_test.0, &under_test.1)])?;
    // Last: it only adds to what the tests above already showed.
    fuzz(root, FUZZ_SECONDS, &[])?;
    // One closing line for the whole run (cargo's last line is the doc-test
    // summary of whichever crate came last, often "0 passed").
    println!("tests: {passed} passed, {failed} failed");
    Ok(())
}

/// `cargo test <args>` built as `build` says, with `env`, echoing its
/// output, summing its "test result" lines.
fn cargo_test(
    root: &Path,
    build: &StaticBuild,
    args: &[&str],
    env: &[(&str, &str)],
) -> Result<(u64, u64)> {
    use std::io::{BufRead, BufReader};
    let args = build.args("test", args);
    let shown: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
    println!("xtask: {}cargo {}", shown.concat(), args.join(" "));
    let started = Instant::now();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut child = Command::new(cargo)
        .args(&args)
        .envs(build.env())
        .envs(env.iter().copied())
        .current_dir(root)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("running cargo test")?;
    let (mut passed, mut failed) = (0, 0);
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines() {
            let line = line.context("reading cargo test output")?;
            println!("{line}");
            if let Some(rest) = line.strip_prefix("test result: ") {
                let count = |word: &str| -> u64 {
                    rest.split(';')
                        .find_map(|part| {
                            let part = part
                                .trim()
                                .trim_start_matches("ok. ")
                                .trim_start_matches("FAILED. ");
                            part.strip_suffix(word)?.trim().parse().ok()
                        })
                        .unwrap_or(0)
                };
                passed += count("passed");
                failed += count("failed");
            }
        }
    }
    let status = child.wait().context("waiting for cargo test")?;
    println!(
        "xtask: cargo test done in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    if !status.success() {
        println!("tests: {passed} passed, {failed} failed");
        return Err(fail!("cargo test failed ({status})"));
    }
    Ok((passed, failed))
}

/// The cargo-fuzz targets under host/fuzz (see its README).
const FUZZ_TARGETS: &[&str] = &[
    "cni_env_stdin",
    "chain_config",
    "result_versions",
    "host_imports",
    "daemon_request",
    "plugin_test_inputs",
    "etcd_replies",
    "oci_replies",
    "scope_file",
];
/// Per target, so that all of them together stay within about two minutes.
pub const FUZZ_SECONDS: u64 = 25;

/// `cargo fuzz` in host/fuzz with the toolchain that runs us. cargo-fuzz
/// passes unstable (`-Z`) flags; RUSTC_BOOTSTRAP lets a stable toolchain
/// take them, so no nightly is needed. No sanitizer: the code under test is
/// safe Rust, and without ASan the targets build faster and run about twice
/// as fast (host/fuzz/README.md shows how to run with one).
/// `cargo fuzz <args>` on `dir`, named as the fuzz project: cargo-fuzz
/// otherwise looks for `fuzz/` beside the nearest package above, and the
/// fuzz targets sit beside the host's crates, not inside one of them.
fn cargo_fuzz(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = toolchain::current_cargo();
    let (subcommand, rest) = args.split_first().unwrap_or((&"build", &[]));
    cmd.args(["fuzz", subcommand, "--fuzz-dir"])
        .arg(dir)
        .args(rest)
        .current_dir(dir)
        .env("RUSTC_BOOTSTRAP", "1");
    cmd
}

/// Run each fuzz target (all when `only` is empty) for `seconds`, from its
/// corpus (host/fuzz/corpus/<target>, kept between runs) and seeds
/// (host/fuzz/seeds/<target>). Fails on the first crash.
pub fn fuzz(root: &Path, seconds: u64, only: &[String]) -> Result<()> {
    if let Some(unknown) = only.iter().find(|t| !FUZZ_TARGETS.contains(&t.as_str())) {
        return Err(fail!(
            "no fuzz target {unknown:?} (there are {})",
            FUZZ_TARGETS.join(", ")
        ));
    }
    let dir = root.join("host/fuzz");
    let installed = toolchain::current_cargo()
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !installed {
        println!("xtask: installing cargo-fuzz from crates.io");
        cargo(root, &["install", "--locked", "cargo-fuzz"])?;
    }
    let started = Instant::now();
    let status = cargo_fuzz(&dir, &["build", "--sanitizer", "none"])
        .status()
        .context("running cargo fuzz build")?;
    if !status.success() {
        return Err(fail!("cargo fuzz build failed ({status})"));
    }
    println!(
        "xtask: fuzz targets built in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    for target in FUZZ_TARGETS
        .iter()
        .filter(|t| only.is_empty() || only.iter().any(|o| o == *t))
    {
        let corpus = dir.join("corpus").join(target);
        std::fs::create_dir_all(&corpus).context(corpus.display())?;
        let seeds = dir.join("seeds").join(target);
        let mut args = vec![
            "run".to_string(),
            "--sanitizer".into(),
            "none".into(),
            (*target).into(),
            corpus.display().to_string(),
        ];
        if seeds.is_dir() {
            args.push(seeds.display().to_string());
        }
        args.extend([
            "--".into(),
            format!("-max_total_time={seconds}"),
            "-print_final_stats=1".into(),
            // The code under test logs refusals to stderr; libFuzzer keeps
            // its own output on a descriptor of its own.
            "-close_fd_mask=3".into(),
        ]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = cargo_fuzz(&dir, &args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .context(format_args!("running cargo fuzz run {target}"))?;
        let log = String::from_utf8_lossy(&out.stderr);
        let stat = |name: &str| {
            log.lines()
                .find_map(|l| l.strip_prefix(&format!("stat::{name}:")))
                .map(|v| v.trim().to_string())
                .unwrap_or_else(|| "?".into())
        };
        if !out.status.success() {
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return Err(fail!(
                "fuzz target {target} failed ({}); the input is under {}:\n{}",
                out.status,
                dir.join("artifacts").join(target).display(),
                tail.join("\n")
            ));
        }
        println!(
            "xtask: fuzz {target}: {} runs in {seconds} s, corpus {} inputs, no crash",
            stat("number_of_executed_units"),
            std::fs::read_dir(&corpus).map_or(0, |d| d.count())
        );
    }
    Ok(())
}

/// Build the release host, the bench and every component, then run the
/// bench with `args`. Deliberately not part of `test`: it takes minutes,
/// needs a quiet machine, and its targets are goals, not assertions.
pub fn bench(root: &Path, args: &[String]) -> Result<()> {
    let mut packages = setup::TEST_PACKAGES.to_vec();
    // Item 6's peer: podman's network backend; item 14's traffic.
    packages.extend(["netavark", "iperf3"]);
    setup::run(&packages)?;
    let dir = build_host(root, &StaticBuild::detect()?)?;
    plugins::run(root, None, false, &[])?;
    // Item 12's examples in Rust, Python and JavaScript.
    polyglot::run(root, None, true)?;
    let bin = dir.join("wasm-cni-bench");
    let status = Command::new(&bin)
        .args(args)
        .current_dir(root)
        .status()
        .context(bin.display())?;
    if !status.success() {
        return Err(fail!("the bench failed ({status})"));
    }
    Ok(())
}

/// Build what the demo runs: the host binary and every component.
/// What the demo runs, built once: the engine alone (`release`, whose
/// parallel codegen builds in a fraction of the node profile's time; the
/// demo measures no figure that profile would change), and the components
/// its network names. Nothing else of the workspace: no bench, tests,
/// client or `plugin test`, and packages for the demo only.
fn build_demo(root: &Path, plugins_wanted: &[String]) -> Result<PathBuf> {
    setup::run(setup::DEMO_PACKAGES)?;
    cargo(
        root,
        &[
            "build",
            "--release",
            "--locked",
            "-p",
            "wasm-cni",
            "--bin",
            "wasm-cni",
        ],
    )?;
    plugins::run(root, None, false, plugins_wanted)?;
    Ok(root.join("target/release/wasm-cni"))
}

/// The plugin types a conflist's `wasm-cni` entries run: each chain entry's
/// `type` and its `ipam` delegate's, in order, once each.
fn plugins_named(conf: &serde_json::Value) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let entries = conf["plugins"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    for entry in entries.iter().filter(|e| e["type"] == "wasm-cni") {
        for step in entry["chain"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            for name in [&step["type"], &step["ipam"]["type"]] {
                if let Some(name) = name.as_str() {
                    if !names.iter().any(|n| n == name) {
                        names.push(name.to_string());
                    }
                }
            }
        }
    }
    names
}

pub fn image(
    root: &Path,
    out: Option<PathBuf>,
    tag: Option<String>,
    registry: Option<String>,
) -> Result<()> {
    setup::run(&["buildah"])?;
    let build = StaticBuild::detect()?;
    let bin = build_host(root, &build)?;
    plugins::run(root, None, false, &[])?;
    let out = out.unwrap_or_else(|| root.join(IMAGE_ARCHIVE));
    let tag = tag.unwrap_or_else(|| env!("CARGO_PKG_VERSION").to_string());
    let (size, digest) =
        crate::image::build(&bin, &root.join("target-guest/components"), &out, &tag)?;
    println!(
        "image: {}:{tag}@{digest} in {} ({:.2} MB)",
        crate::image::NAME,
        out.display(),
        size as f64 / 1e6
    );
    // The manifest pinned to what was built, for where the nodes pull it.
    let name = match &registry {
        Some(r) => format!("{}/wasm-cni", r.trim_end_matches('/')),
        None => crate::image::NAME.to_string(),
    };
    let manifest = crate::image::render_manifest(
        &root.join("host/deploy/kubernetes/wasm-cni.yaml"),
        &name,
        &tag,
        &digest,
    )?;
    let rendered = out.with_file_name("wasm-cni.yaml");
    std::fs::write(&rendered, manifest).context(rendered.display())?;
    println!(
        "manifest: {} (image {name}:{tag}@{digest}; `skopeo copy oci-archive:{} \
         docker://{name}:{tag}` keeps the digest)",
        rendered.display(),
        out.display()
    );
    Ok(())
}

/// Where `image` and `test` leave the node image.
const IMAGE_ARCHIVE: &str = "target/image/wasm-cni.oci.tar";

/// Namespaces and files the demo made, removed on drop, also on failure.
struct DemoEnv {
    namespaces: Vec<String>,
    dir: std::path::PathBuf,
}

impl Drop for DemoEnv {
    fn drop(&mut self) {
        for ns in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn run_checked(args: &[&str]) -> Result<String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .context(format_args!("running {}", args.join(" ")))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(fail!(
            "{} failed ({}): {}{}",
            args.join(" "),
            out.status,
            stdout,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(stdout)
}

pub fn demo(root: &Path) -> Result<()> {
    let conf_path = root.join("host/examples/podnet.conflist");
    let text = std::fs::read_to_string(&conf_path).context(conf_path.display())?;
    let mut conf: serde_json::Value = serde_json::from_str(&text).context(conf_path.display())?;
    let wanted = plugins_named(&conf);
    let bin = build_demo(root, &wanted)?;
    let bin = bin.to_str().ok_or_else(|| fail!("non-UTF-8 path"))?;
    let pid = std::process::id();
    let env = DemoEnv {
        namespaces: ["node", "a", "b"]
            .iter()
            .map(|n| format!("wcdemo-{n}-{pid}"))
            .collect(),
        dir: std::env::temp_dir().join(format!("wasm-cni-demo-{pid}")),
    };
    let (node, pods) = (&env.namespaces[0], &env.namespaces[1..]);
    // The plugin directory, state and artifact cache all live in a temp
    // dir; the node namespace stands in for the host.
    let plugin_dir = env.dir.join("plugins");
    std::fs::create_dir_all(&plugin_dir).context("creating the demo dir")?;
    let components = root.join("target-guest/components");
    for name in &wanted {
        let file = format!("{name}.wasm");
        let path = components.join(&file);
        std::fs::copy(&path, plugin_dir.join(&file)).context(path.display())?;
    }
    let cache_dir = env.dir.join("cache");
    if let Some(entry) = conf["plugins"].get_mut(0) {
        entry["pluginDir"] = plugin_dir.to_string_lossy().into();
        entry["stateDir"] = env.dir.join("state").to_string_lossy().into();
        entry["cacheDir"] = cache_dir.to_string_lossy().into();
    }
    let demo_conf = env.dir.join("podnet.conflist");
    std::fs::write(&demo_conf, conf.to_string()).context(demo_conf.display())?;
    let demo_conf = demo_conf.to_string_lossy().into_owned();

    // As `wasm-cni install` does on a node: every component compiled once,
    // ahead of the first pod, so each verb below shows what a call costs.
    let started = Instant::now();
    let plugin_dir_arg = plugin_dir.to_string_lossy().into_owned();
    let cache_dir_arg = cache_dir.to_string_lossy().into_owned();
    run_checked(&[
        bin,
        "compile",
        "--plugin-dir",
        &plugin_dir_arg,
        "--cache-dir",
        &cache_dir_arg,
    ])?;
    println!(
        "\n== compiled {} once, as `wasm-cni install` does on a node ({:.0} ms)",
        wanted.join(", "),
        started.elapsed().as_secs_f64() * 1000.0
    );
    for ns in &env.namespaces {
        run_checked(&["ip", "netns", "add", ns])?;
    }
    println!("\n== wasm-cni demo: network {conf_path:?}, node namespace {node}\n");
    let cni = |verb: &str, pod: &str| -> Result<String> {
        let netns = format!("/run/netns/{pod}");
        let started = Instant::now();
        let out = run_checked(&[
            "ip", "netns", "exec", node, bin, verb, "--conf", &demo_conf, "--netns", &netns,
            "--id", pod,
        ])?;
        println!(
            "-- {verb} {pod} ({:.1} ms)\n{}",
            started.elapsed().as_secs_f64() * 1000.0,
            if out.trim().is_empty() {
                "(ok)"
            } else {
                out.trim()
            }
        );
        Ok(out)
    };
    let mut ips = Vec::new();
    for pod in pods {
        let result: serde_json::Value =
            serde_json::from_str(&cni("add", pod)?).context("parsing the ADD result")?;
        let ip = result["ips"][0]["address"]
            .as_str()
            .and_then(|a| a.split('/').next())
            .ok_or_else(|| fail!("no address in the result"))?
            .to_string();
        ips.push(ip);
        cni("check", pod)?;
    }
    println!("-- ping {} -> {}", pods[0], ips[1]);
    print!(
        "{}",
        run_checked(&["ip", "netns", "exec", &pods[0], "ping", "-c", "2", "-W", "1", &ips[1]])?
    );
    for pod in pods {
        cni("del", pod)?;
    }
    println!("\n== demo done: namespaces and files are removed now");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::plugins_named;

    #[test]
    fn the_demo_builds_the_plugins_its_network_names() {
        let text = include_str!("../../examples/podnet.conflist");
        let conf: serde_json::Value = serde_json::from_str(text).expect("the bundled conflist");
        assert_eq!(
            plugins_named(&conf),
            ["bridge", "host-local", "tuning", "loopback"]
        );
        // Other plugin types' entries and repeated names add nothing.
        let conf = serde_json::json!({"plugins": [
            {"type": "wasm-cni", "chain": [
                {"type": "ptp", "ipam": {"type": "static"}},
                {"type": "ptp"},
            ]},
            {"type": "portmap"},
        ]});
        assert_eq!(plugins_named(&conf), ["ptp", "static"]);
    }
}
