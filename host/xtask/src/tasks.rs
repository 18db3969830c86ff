//! The composite tasks behind the README's commands.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::{fail, plugins, setup, toolchain, Context, Result};

/// Run a cargo subcommand in the workspace with the toolchain that runs us.
fn cargo(root: &Path, args: &[&str]) -> Result<()> {
    let started = Instant::now();
    println!("xtask: cargo {}", args.join(" "));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(args)
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

pub fn test(root: &Path) -> Result<()> {
    setup::run(setup::TEST_PACKAGES)?;
    cargo(root, &["fmt", "--all", "--check"])?;
    cargo(root, &["build", "--release", "--locked", "-p", "wasm-cni"])?;
    plugins::run(root, None, false, &[])?;
    cargo(
        root,
        &[
            "clippy",
            "--release",
            "--locked",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
    )?;
    let (passed, failed) = cargo_test(root, &["test", "--release", "--locked", "--workspace"])?;
    // Last: it only adds to what the tests above already showed.
    fuzz(root, FUZZ_SECONDS, &[])?;
    // One closing line for the whole run (cargo's last line is the doc-test
    // summary of whichever crate came last, often "0 passed").
    println!("tests: {passed} passed, {failed} failed");
    Ok(())
}

/// `cargo test`, echoing its output, summing its "test result" lines.
fn cargo_test(root: &Path, args: &[&str]) -> Result<(u64, u64)> {
    use std::io::{BufRead, BufReader};
    println!("xtask: cargo {}", args.join(" "));
    let started = Instant::now();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut child = Command::new(cargo)
        .args(args)
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
];
/// Per target, so that all of them together stay within two minutes.
pub const FUZZ_SECONDS: u64 = 25;

/// `cargo fuzz` in host/fuzz with the toolchain that runs us. cargo-fuzz
/// passes unstable (`-Z`) flags; RUSTC_BOOTSTRAP lets a stable toolchain
/// take them, so no nightly is needed. No sanitizer: the code under test is
/// safe Rust, and without ASan the targets build faster and run about twice
/// as fast (host/fuzz/README.md shows how to run with one).
fn cargo_fuzz(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = toolchain::current_cargo();
    cmd.arg("fuzz")
        .args(args)
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
    setup::run(setup::TEST_PACKAGES)?;
    cargo(
        root,
        &[
            "build",
            "--release",
            "--locked",
            "-p",
            "wasm-cni",
            "-p",
            "wasm-cni-bench",
        ],
    )?;
    plugins::run(root, None, false, &[])?;
    let bin = root.join("target/release/wasm-cni-bench");
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
fn build_all(root: &Path) -> Result<()> {
    setup::run(setup::TEST_PACKAGES)?;
    cargo(root, &["build", "--release", "--locked", "-p", "wasm-cni"])?;
    plugins::run(root, None, false, &[])
}

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
    build_all(root)?;
    let bin = root.join("target/release/wasm-cni");
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
    for entry in std::fs::read_dir(&components).context(components.display())? {
        let path = entry.context(components.display())?.path();
        if path.extension().is_some_and(|e| e == "wasm") {
            if let Some(name) = path.file_name() {
                std::fs::copy(&path, plugin_dir.join(name)).context(path.display())?;
            }
        }
    }
    let conf_path = root.join("host/examples/podnet.conflist");
    let text = std::fs::read_to_string(&conf_path).context(conf_path.display())?;
    let mut conf: serde_json::Value = serde_json::from_str(&text).context(conf_path.display())?;
    if let Some(entry) = conf["plugins"].get_mut(0) {
        entry["pluginDir"] = plugin_dir.to_string_lossy().into();
        entry["stateDir"] = env.dir.join("state").to_string_lossy().into();
        entry["cacheDir"] = env.dir.join("cache").to_string_lossy().into();
    }
    let demo_conf = env.dir.join("podnet.conflist");
    std::fs::write(&demo_conf, conf.to_string()).context(demo_conf.display())?;
    let demo_conf = demo_conf.to_string_lossy().into_owned();

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
