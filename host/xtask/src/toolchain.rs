//! Which compiler builds the guests for a target, and `cargo` commands that
//! really use it.
//!
//! `cargo xtask` runs under the developer's (usually rustup's) cargo, which
//! leaves its toolchain in the environment: `RUSTUP_TOOLCHAIN`, `CARGO`,
//! `CARGO_MANIFEST_DIR`, its bin directory first in `PATH` and its lib
//! directory in `LD_LIBRARY_PATH`. The inner build must not inherit what
//! would select another compiler, target directory or flags.

use std::env;
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::{fail, Result};

pub const WASM32: &str = "wasm32-unknown-unknown";
pub const WASIP1: &str = "wasm32-wasip1";

/// The Debian packages that provide a wasm-capable Rust (see
/// /work/shared/notes/wasm-toolchain.md).
pub const RUST_PACKAGES: &[&str] = &["rustc-web", "cargo-web", "rust-web-src", "lld-22"];
/// Debian's preview-1 libc, for `wasm32-wasip1` guests.
pub const WASI_LIBC_PACKAGE: &str = "wasi-libc";

const DEBIAN_RUSTC: &str = "/usr/bin/rustc";
pub const DEBIAN_CARGO: &str = "/usr/bin/cargo";
const DEBIAN_STD_SOURCE: &str = "/usr/lib/rustlib/src/rust/library/std";
const DEBIAN_RUST_LLD: &str = "/usr/bin/rust-lld";
const DEBIAN_WASI_LIBC: &str = "/usr/lib/wasm32-wasi";

/// Rustup may try to download a toolchain instead of answering; never wait
/// long for it.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// A compiler that can build guests for one target.
pub struct Toolchain {
    pub target: &'static str,
    kind: Kind,
    /// Extra `rustflags` for the target (linking wasm32-wasip1 reactors).
    rustflags: Vec<String>,
}

enum Kind {
    /// The current toolchain ships the target's standard library.
    Current,
    /// Debian's `rustc-web`, building the standard library from source.
    Debian,
}

impl Toolchain {
    /// Prefers the current toolchain if it has `target`'s standard library,
    /// then Debian's rustc-web; fails naming the packages to install.
    pub fn select(target: &'static str) -> Result<Self> {
        if let Some(libdir) = current_target_libdir(target) {
            let mut rustflags = Vec::new();
            if target == WASIP1 {
                let reactor = libdir.join("self-contained/crt1-reactor.o");
                if reactor.is_file() {
                    rustflags.push(format!("-Clink-arg={}", reactor.display()));
                }
            }
            return Ok(Self {
                target,
                kind: Kind::Current,
                rustflags,
            });
        }

        let mut required: Vec<PathBuf> = [
            DEBIAN_RUSTC,
            DEBIAN_CARGO,
            DEBIAN_STD_SOURCE,
            DEBIAN_RUST_LLD,
        ]
        .map(PathBuf::from)
        .into();
        let mut packages = RUST_PACKAGES.to_vec();
        let mut rustflags = Vec::new();
        if target == WASIP1 {
            let libc = Path::new(DEBIAN_WASI_LIBC);
            required.extend(["libc.a", "crt1-reactor.o"].map(|f| libc.join(f)));
            packages.push(WASI_LIBC_PACKAGE);
            // A cdylib gets no crt object from rustc; the reactor's
            // `_initialize` runs the constructors, and the component calls it.
            rustflags = [
                "-Clink-self-contained=no".to_owned(),
                format!("-L{DEBIAN_WASI_LIBC}"),
                format!("-Clink-arg={DEBIAN_WASI_LIBC}/crt1-reactor.o"),
            ]
            .into();
        }
        let missing: Vec<String> = required
            .iter()
            .filter(|p| !p.exists())
            .map(|p| p.display().to_string())
            .collect();
        if !missing.is_empty() {
            return Err(fail!(
                "no Rust toolchain can build {target}: the current rustc has no {target} \
                 standard library (`rustup target add` needs network access to rustup's \
                 servers), and Debian's fallback is incomplete (missing {}). Run \
                 `cargo xtask setup`, or `apt-get install -y {}`",
                missing.join(", "),
                packages.join(" "),
            ));
        }
        Ok(Self {
            target,
            kind: Kind::Debian,
            rustflags,
        })
    }

    pub fn describe(&self) -> String {
        match self.kind {
            Kind::Current => "the current toolchain".to_owned(),
            Kind::Debian => format!("{DEBIAN_RUSTC} with -Zbuild-std"),
        }
    }

    /// `cargo build --target <target>` for this toolchain, with a scrubbed
    /// environment.
    pub fn cargo_build(&self) -> Command {
        let mut cmd = match self.kind {
            Kind::Current => current_cargo(),
            Kind::Debian => debian_cargo(),
        };
        cmd.args(["build", "--target", self.target]);
        if let Kind::Debian = self.kind {
            cmd.arg("-Zbuild-std=std,panic_abort");
        }
        if !self.rustflags.is_empty() {
            cmd.env(target_rustflags_var(self.target), self.rustflags.join(" "));
        }
        cmd
    }
}

/// The variable cargo reads `triple`'s rustflags from. With `--target`
/// named they reach that target's artifacts only, never build scripts and
/// proc-macros, which run on the build machine.
pub fn target_rustflags_var(triple: &str) -> String {
    format!(
        "CARGO_TARGET_{}_RUSTFLAGS",
        triple.to_uppercase().replace('-', "_")
    )
}

/// Debian's cargo and rustc, with rustup's toolchain out of the way: nothing
/// it set is inherited, and its toolchain directories leave `PATH` and
/// `LD_LIBRARY_PATH` (where build scripts would find `rustc`, `cargo` and
/// their libraries).
pub fn debian_cargo() -> Command {
    let mut cmd = scrubbed(DEBIAN_CARGO);
    cmd.env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("RUSTUP_TOOLCHAIN_SOURCE")
        .env("RUSTC", DEBIAN_RUSTC)
        .env("RUSTC_BOOTSTRAP", "1");
    let rustup_toolchains = rustup_toolchains_dir();
    let foreign = |p: &Path| {
        rustup_toolchains
            .as_deref()
            .is_some_and(|t| p.starts_with(t))
    };
    // Joining fails only for an entry containing `:`, which could not have
    // come from splitting either.
    if let Ok(path) = prepend_filtered("/usr/bin", env::var_os("PATH"), foreign) {
        cmd.env("PATH", path);
    }
    match env::var_os("LD_LIBRARY_PATH")
        .map(|v| env::join_paths(env::split_paths(&v).filter(|p| !foreign(p))))
    {
        Some(Ok(v)) if !v.is_empty() => cmd.env("LD_LIBRARY_PATH", v),
        _ => cmd.env_remove("LD_LIBRARY_PATH"),
    };
    cmd
}

/// The cargo `cargo xtask` runs under, without the settings it passed on.
pub fn current_cargo() -> Command {
    scrubbed(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// `program` without the inherited variables that would change what or
/// where it builds.
fn scrubbed(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    for (key, _) in env::vars_os() {
        if key.to_str().is_some_and(is_inherited_build_setting) {
            cmd.env_remove(key);
        }
    }
    cmd
}

fn is_inherited_build_setting(key: &str) -> bool {
    const EXACT: &[&str] = &[
        "CARGO",
        "CARGO_BIN_NAME",
        "CARGO_BUILD_RUSTC",
        "CARGO_BUILD_RUSTC_WORKSPACE_WRAPPER",
        "CARGO_BUILD_RUSTC_WRAPPER",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_BUILD_TARGET_DIR",
        "CARGO_CRATE_NAME",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_MAKEFLAGS",
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_DIR",
        "OUT_DIR",
        "RUSTC",
        "RUSTC_BOOTSTRAP",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_WRAPPER",
        "RUSTFLAGS",
    ];
    const PREFIXES: &[&str] = &[
        "CARGO_PKG_",
        "CARGO_TARGET_WASM32_",
        "CARGO_PROFILE_GUEST_",
        "__CARGO",
    ];
    EXACT.contains(&key) || PREFIXES.iter().any(|p| key.starts_with(p))
}

/// Where rustup keeps its toolchains, if it is in use.
fn rustup_toolchains_dir() -> Option<PathBuf> {
    let home = env::var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| Path::new(&h).join(".rustup")))?;
    Some(home.join("toolchains"))
}

/// `first`, then the entries of `list` that are not `dropped`.
fn prepend_filtered(
    first: &str,
    list: Option<OsString>,
    dropped: impl Fn(&Path) -> bool,
) -> Result<OsString, env::JoinPathsError> {
    let rest: Vec<PathBuf> = list
        .map(|l| {
            env::split_paths(&l)
                .filter(|p| !dropped(p) && p != Path::new(first))
                .collect()
        })
        .unwrap_or_default();
    env::join_paths(std::iter::once(PathBuf::from(first)).chain(rest))
}

/// The current rustc's library directory for `target`, if it holds a
/// standard library.
fn current_target_libdir(target: &str) -> Option<PathBuf> {
    let mut rustc = scrubbed("rustc");
    rustc.args(["--print", "target-libdir", "--target", target]);
    let stdout = stdout_within(&mut rustc, PROBE_TIMEOUT)?;
    let libdir = PathBuf::from(stdout.trim());
    let has_std = std::fs::read_dir(&libdir).ok()?.flatten().any(|entry| {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        name.starts_with("libstd-") && name.ends_with(".rlib")
    });
    has_std.then_some(libdir)
}

/// Runs `cmd` and returns its standard output if it succeeds within `limit`;
/// kills it otherwise.
fn stdout_within(cmd: &mut Command, limit: Duration) -> Option<String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => break,
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
            Ok(Some(_)) => return None,
            Ok(None) | Err(_) => {
                // Best effort: the probe has already failed either way.
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let mut stdout = String::new();
    child.stdout.take()?.read_to_string(&mut stdout).ok()?;
    Some(stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrubs_what_cargo_run_and_rustup_pass_on() {
        for key in [
            "CARGO",
            "CARGO_MANIFEST_DIR",
            "CARGO_PKG_NAME",
            "CARGO_TARGET_DIR",
            "CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS",
            "RUSTC",
            "RUSTFLAGS",
        ] {
            assert!(is_inherited_build_setting(key), "{key}");
        }
        for key in [
            "CARGO_HOME",
            "CARGO_BUILD_JOBS",
            "CARGO_TERM_COLOR",
            "PATH",
            "RUSTUP_HOME",
        ] {
            assert!(!is_inherited_build_setting(key), "{key}");
        }
    }

    #[test]
    fn debian_path_puts_usr_bin_first_and_drops_rustup_toolchains() {
        let path = OsString::from("/r/toolchains/stable/bin:/root/.cargo/bin:/usr/bin:/bin");
        let path = prepend_filtered("/usr/bin", Some(path), |p| p.starts_with("/r/toolchains"));
        assert_eq!(path.unwrap(), "/usr/bin:/root/.cargo/bin:/bin");
    }
}
