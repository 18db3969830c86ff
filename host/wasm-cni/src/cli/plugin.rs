//! `wasm-cni plugin test`: run here when this binary has the kernel model
//! (`wasm-cni-plugin-test`), handed to that binary otherwise.

use std::path::PathBuf;

use clap::Subcommand;

#[cfg(feature = "fake")]
use serde_json::Value;

#[derive(Subcommand)]
pub(super) enum PluginCmd {
    /// Check a component against the CNI contract as an ordinary user, in
    /// the in-memory kernel model: ADD gives a result valid for the
    /// version, CHECK passes after it, DEL (also a second one, and one
    /// after the namespace is gone) and GC with no valid attachments leave
    /// nothing behind, STATUS answers. Exits 1 if a property fails.
    Test(PluginTestArgs),
}

#[derive(clap::Args)]
pub(super) struct PluginTestArgs {
    /// The component; its file stem is its `type`, and IPAM delegates are
    /// loaded from its directory.
    plugin: PathBuf,
    /// The plugin's own config, as a reference plugin reads it on stdin.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// `CNI_ARGS`, e.g. `IP=10.1.2.3;K8S_POD_NAME=web`.
    #[arg(long, value_name = "ARGS")]
    cni_args: Option<String>,
    /// Capability arguments (`runtimeConfig`), a JSON object or @FILE.
    #[arg(long, value_name = "JSON")]
    capability_args: Option<String>,
    /// A `prevResult` for a chained plugin, a JSON object or @FILE.
    #[arg(long, value_name = "JSON")]
    prev_result: Option<String>,
    /// Test at this cniVersion instead of the config's.
    #[arg(long, value_name = "VERSION")]
    cni_version: Option<String>,
    /// One JSON document instead of a line per property.
    #[arg(long)]
    json: bool,
    /// Also fail each host call of ADD (then DEL) and of DEL (then DEL
    /// again) in turn: nothing may be left behind after any of them.
    #[arg(long)]
    faults: bool,
    /// The whole run's bound: no plugin call runs past it (each call's
    /// deadline is cut to what is left), and the properties not reached
    /// by then fail, saying so. A component cannot make the run longer.
    #[arg(long, value_name = "SECONDS", default_value_t = wasm_cni_engine::sandbox::limits::PLUGIN_TEST_MAX_SECONDS)]
    max_seconds: u64,
}

/// A JSON argument given inline or as `@FILE`.
#[cfg(feature = "fake")]
fn json_arg(what: &str, text: &str) -> Result<Value, String> {
    let text = match text.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).map_err(|e| format!("{what}: {path}: {e}"))?,
        None => text.to_string(),
    };
    serde_json::from_str(&text).map_err(|e| format!("{what}: {e}"))
}

/// What runs `plugin test` when this binary has no kernel model: the
/// plugin-test binary beside it, with the same arguments.
pub const PLUGIN_TEST_BIN: &str = "wasm-cni-plugin-test";

#[cfg(not(feature = "fake"))]
pub(super) fn plugin_test(_t: PluginTestArgs) -> Result<i32, String> {
    use std::os::unix::process::CommandExt;
    let me = std::env::current_exe().map_err(|e| format!("this binary's path: {e}"))?;
    let sibling = me.with_file_name(PLUGIN_TEST_BIN);
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let e = std::process::Command::new(&sibling).args(args).exec();
    Err(format!(
        "plugin test runs in {PLUGIN_TEST_BIN} (the kernel model it needs is not in this binary): {}: {e}",
        sibling.display()
    ))
}

#[cfg(feature = "fake")]
pub(super) fn plugin_test(t: PluginTestArgs) -> Result<i32, String> {
    let config = json_arg("--config", &format!("@{}", t.config.display()))?;
    let args = t
        .cni_args
        .as_deref()
        .unwrap_or_default()
        .split(';')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| format!("--cni-args: {kv:?} is not KEY=VALUE"))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let opts = wasm_cni_testing::Options {
        plugin: t.plugin,
        config,
        args,
        capability_args: t
            .capability_args
            .map(|c| json_arg("--capability-args", &c))
            .transpose()?,
        prev_result: t
            .prev_result
            .map(|p| json_arg("--prev-result", &p))
            .transpose()?,
        cni_version: t.cni_version,
        faults: t.faults,
        time_limit: std::time::Duration::from_secs(t.max_seconds.max(1)),
    };
    let verdicts = wasm_cni_testing::run(&opts)?;
    print!("{}", wasm_cni_testing::render(&verdicts, t.json));
    Ok(if verdicts.iter().all(|v| v.ok) { 0 } else { 1 })
}
