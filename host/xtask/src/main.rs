//! Developer tasks for wasm-cni, run as `cargo xtask <task>`.
//!
//! `plugins` is the one entry point that builds guests: every crate under
//! `guest-plugins/` and `tests/fixtures/` becomes a component. `setup`
//! installs the Debian packages those builds need.

mod plugins;
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
    },
    /// Install the Debian packages guest builds need (idempotent).
    Setup,
    /// Build everything, then ADD, CHECK and DEL two containers on the
    /// bundled network (host/examples/podnet.conflist) in throwaway
    /// namespaces, printing each result and pinging between them.
    Demo,
    /// Everything CI runs: setup, format and lint checks, the build, the
    /// components, and every test (unit, component, real-namespace).
    Test,
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
        Task::Plugins { out, verbose, only } => {
            workspace_root().and_then(|root| plugins::run(root, out, verbose, &only))
        }
        Task::Setup => setup::run(&[]),
        Task::Test => workspace_root().and_then(tasks::test),
        Task::Demo => workspace_root().and_then(tasks::demo),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e}");
            ExitCode::FAILURE
        }
    }
}
