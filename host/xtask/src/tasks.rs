//! The composite tasks behind the README's commands.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use crate::{fail, plugins, setup, Context, Result};

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
    cargo(root, &["test", "--release", "--locked", "--workspace"])
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
