//! Developer tasks for wasm-cni, run as `cargo xtask <task>`.
//!
//! `plugins` is the one entry point that builds guests: every crate under
//! `guest-plugins/` and `tests/fixtures/` becomes a component. `setup`
//! installs the Debian packages those builds need.

mod image;
mod layers;
mod plugins;
mod polyglot;
mod scaffold;
mod setup;
mod tasks;
mod toolchain;

use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "xtask",
    bin_name = "cargo xtask",
    about = "wasm-cni developer tasks"
)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Build guest-plugins/* and tests/fixtures/* as components.
    Plugins {
        /// Where to write `<type>.wasm` (fixtures go to `fixtures/`)
        /// [default: <workspace>/target-guest/components].
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Also list each component's imports.
        #[arg(long, short)]
        verbose: bool,
        /// Build only these guests (crate names); repeatable.
        #[arg(long, value_name = "NAME")]
        only: Vec<String>,
        /// Build this plugin crate outside the repository instead (one
        /// `new-plugin` made, or any cdylib crate on the SDK with a `guest`
        /// profile); the component goes to `<DIR>/target-guest/components`
        /// unless `--out` says otherwise.
        #[arg(long = "crate", value_name = "DIR", conflicts_with = "only")]
        external: Option<PathBuf>,
    },
    /// Build the plugins written in Python and JavaScript
    /// (guest-plugins/polyglot, tests/polyglot) into
    /// target-guest/polyglot, installing componentize-py from PyPI and
    /// componentize-js from npm into target/polyglot first (pinned, once),
    /// and the same example in Rust as `routes-rs.wasm`.
    Polyglot {
        /// [default: <workspace>/target-guest/polyglot]
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Start a plugin crate outside this repository: the worked
    /// example of guest-plugins/docs/writing.md (a meta plugin adding routes) on this checkout's SDK, with a
    /// config and a prevResult for `wasm-cni plugin test`.
    NewPlugin {
        dir: PathBuf,
        /// The plugin's name (its CNI `type`) [default: the directory's].
        #[arg(long)]
        name: Option<String>,
    },
    /// Install the Debian packages guest builds need (idempotent).
    Setup,
    /// Check the host's layering ([workspace.metadata.layers] in
    /// Cargo.toml) against the manifests; `test` runs it first.
    Layers,
    /// Build only what the demo runs (the engine and the components of
    /// host/examples/podnet.conflist), then ADD, CHECK and DEL two
    /// containers on that network in throwaway namespaces, printing each
    /// result and pinging between them.
    Demo,
    /// Everything CI runs: setup, format and lint checks, the build, the
    /// components, every test (unit, component, real-namespace), then a
    /// short fuzzing run.
    Test,
    /// Run each cargo-fuzz target under host/fuzz for a while (installs
    /// cargo-fuzz if missing). A crash fails the task and leaves its input
    /// in host/fuzz/artifacts/<target>/.
    Fuzz {
        /// Seconds per target [default: 25, so all four take under two
        /// minutes].
        #[arg(long, value_name = "N")]
        seconds: Option<u64>,
        /// Run only these targets; repeatable.
        #[arg(long, value_name = "NAME")]
        target: Vec<String>,
    },
    /// Build the node image (buildah, from scratch: the static binaries
    /// and the components, nothing else) as an OCI archive, loadable with
    /// `podman load -i` and `ctr images import`.
    Image {
        /// [default: <workspace>/target/image/wasm-cni.oci.tar]
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// The tag [default: the workspace version].
        #[arg(long)]
        tag: Option<String>,
        /// Where nodes pull it from (REGISTRY[/PATH]), for the manifest
        /// rendered beside the archive, which names the image by digest
        /// [default: localhost, as `podman load` names it].
        #[arg(long)]
        registry: Option<String>,
    },
    /// Build the release host, the bench and every component, then run
    /// the benchmark suite (host/bench; root, not part of `test`): wasm-cni
    /// against the reference plugins and a raw-netlink floor. Arguments
    /// after `--` go to the bench (`-- --help`).
    Bench {
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "BENCH ARGS"
        )]
        args: Vec<String>,
    },
}

/// An xtask failure: a message for the developer, printed once by `main`.
#[derive(Debug)]
pub struct Error(String);

impl Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Builds an [`Error`] from a format string.
macro_rules! fail {
    ($($arg:tt)*) => {
        $crate::Error(format!($($arg)*))
    };
}
pub(crate) use fail;

/// Adds what was being done to any displayable error.
pub trait Context<T> {
    fn context(self, what: impl Display) -> Result<T>;
}

impl<T, E: Display> Context<T> for std::result::Result<T, E> {
    fn context(self, what: impl Display) -> Result<T> {
        self.map_err(|e| Error(format!("{what}: {e}")))
    }
}

/// The workspace root (this crate lives in `host/xtask`).
fn workspace_root() -> Result<&'static Path> {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .ancestors()
        .nth(2)
        .ok_or_else(|| fail!("no workspace above {}", manifest_dir.display()))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.task {
        Task::Plugins {
            out,
            verbose,
            only,
            external: Some(dir),
        } => {
            let _ = only;
            plugins::run_external(&dir, out, verbose)
        }
        Task::Plugins {
            out,
            verbose,
            only,
            external: None,
        } => workspace_root().and_then(|root| plugins::run(root, out, verbose, &only)),
        Task::Polyglot { out } => workspace_root().and_then(|root| polyglot::run(root, out, true)),
        Task::NewPlugin { dir, name } => {
            workspace_root().and_then(|root| scaffold::run(root, &dir, name.as_deref()))
        }
        Task::Setup => setup::run(&[]),
        Task::Layers => workspace_root().and_then(layers::run),
        Task::Test => workspace_root().and_then(tasks::test),
        Task::Demo => workspace_root().and_then(tasks::demo),
        Task::Fuzz { seconds, target } => workspace_root()
            .and_then(|root| tasks::fuzz(root, seconds.unwrap_or(tasks::FUZZ_SECONDS), &target)),
        Task::Image { out, tag, registry } => {
            workspace_root().and_then(|root| tasks::image(root, out, tag, registry))
        }
        Task::Bench { args } => workspace_root().and_then(|root| tasks::bench(root, &args)),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e}");
            ExitCode::FAILURE
        }
    }
}
