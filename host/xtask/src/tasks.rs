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
    plugins::run(root, None, false)?;
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
