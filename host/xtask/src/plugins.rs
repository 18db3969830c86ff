//! `cargo xtask plugins`: builds every guest crate and turns each core module
//! into a component.
//!
//! Guests are the crates under `guest-plugins/` (written to `<out>/<type>.wasm`,
//! the crate name being the CNI `type`) and `tests/fixtures/` (written to
//! `<out>/fixtures/<name>.wasm`). They build for `wasm32-unknown-unknown`
//! unless their manifest says
//! `[package.metadata.wasm-cni] target = "wasm32-wasip1"`, under the
//! workspace's `guest` profile into `target-guest/`, one cargo invocation per
//! target.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Instant, SystemTime};

use serde_json::Value;
use sha2::{Digest, Sha256};
use wasi_preview1_component_adapter_provider::{
    WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
};
use wit_component::{ComponentEncoder, DecodedWasm};

use crate::toolchain::{self, Toolchain, WASIP1, WASM32};
use crate::{fail, Context, Result};

/// Where guest crates live, and where their components go under `<out>`.
const GUEST_DIRS: &[(&str, &str)] = &[("guest-plugins", ""), ("tests/fixtures", "fixtures")];
const PROFILE: &str = "guest";

struct Guest {
    name: String,
    manifest: PathBuf,
    target: &'static str,
    /// The component's path relative to `<out>`.
    output: PathBuf,
    /// A bundled plugin, installed on every node: its function names go to
    /// `<out>/.debug/` instead (see [`strip_names`]).
    strip_names: bool,
}

/// Build a plugin crate outside this repository (one made by `cargo xtask
/// new-plugin`, or any crate with a cdylib target depending on the SDK)
/// with the same toolchain, profile and encoder as the bundled ones;
/// writes `<out>/<name>.wasm` [default: `<crate>/target-guest/components`].
pub fn run_external(crate_dir: &Path, out: Option<PathBuf>, verbose: bool) -> Result<()> {
    let started = Instant::now();
    let manifest = fs::canonicalize(crate_dir.join("Cargo.toml"))
        .context(crate_dir.join("Cargo.toml").display())?;
    let dir = manifest
        .parent()
        .ok_or_else(|| fail!("{}: no directory", manifest.display()))?
        .to_path_buf();
    let packages = workspace_packages(&dir)?;
    let package = packages
        .get(&manifest)
        .ok_or_else(|| fail!("{}: not a package", manifest.display()))?;
    let Some(mut guest) = guest(package, manifest.clone(), "")? else {
        return Err(fail!(
            "{}: no cdylib target: add [lib] crate-type = [\"cdylib\"]",
            manifest.display()
        ));
    };
    // An author's build keeps its function names: a profiler names its
    // functions by them (perf reads them from the compiled artifact).
    guest.strip_names = false;
    let toolchain = Toolchain::select(guest.target)?;
    let target_dir = dir.join("target-guest");
    let out = out.unwrap_or_else(|| target_dir.join("components"));
    let modules = build(&dir, &target_dir, &toolchain, &[&guest])?;
    let module = modules
        .get(&guest.manifest)
        .ok_or_else(|| fail!("cargo reported no .wasm artifact for {}", guest.name))?;
    let encoder_time = std::env::current_exe()
        .and_then(fs::metadata)
        .and_then(|m| m.modified())
        .context("xtask's own executable")?;
    let dest = out.join(&guest.output);
    let (component, fresh) = componentize(&guest, module, &dest, encoder_time)?;
    report(&guest, &component, fresh, verbose)?;
    eprintln!(
        "xtask: {} in {} ({:.1} s)",
        dest.display(),
        out.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Build the guests named in `only` (every guest when empty).
pub fn run(root: &Path, out: Option<PathBuf>, verbose: bool, only: &[String]) -> Result<()> {
    let started = Instant::now();
    let target_dir = root.join("target-guest");
    let out = out.unwrap_or_else(|| target_dir.join("components"));
    let mut guests = discover(root)?;
    if !only.is_empty() {
        if let Some(unknown) = only.iter().find(|n| !guests.iter().any(|g| &g.name == *n)) {
            return Err(fail!("no guest crate named {unknown:?}"));
        }
        guests.retain(|g| only.contains(&g.name));
    }
    if guests.is_empty() {
        eprintln!(
            "xtask: no guest crates under {}",
            GUEST_DIRS
                .iter()
                .map(|(d, _)| *d)
                .collect::<Vec<_>>()
                .join(", ")
        );
        return Ok(());
    }
    // Choose every toolchain before building anything, so a missing one
    // fails fast.
    let toolchains = [WASM32, WASIP1]
        .into_iter()
        .filter(|t| guests.iter().any(|g| g.target == *t))
        .map(Toolchain::select)
        .collect::<Result<Vec<_>>>()?;
    // A new xtask may encode differently: re-encode everything once.
    let encoder_time = std::env::current_exe()
        .and_then(fs::metadata)
        .and_then(|m| m.modified())
        .context("xtask's own executable")?;

    for toolchain in &toolchains {
        let group: Vec<&Guest> = guests
            .iter()
            .filter(|g| g.target == toolchain.target)
            .collect();
        let modules = build(root, &target_dir, toolchain, &group)?;
        for guest in group {
            let module = modules
                .get(&guest.manifest)
                .ok_or_else(|| fail!("cargo reported no .wasm artifact for {}", guest.name))?;
            let dest = out.join(&guest.output);
            let (component, fresh) = componentize(guest, module, &dest, encoder_time)?;
            report(guest, &component, fresh, verbose)?;
        }
    }
    eprintln!(
        "xtask: {} components in {} ({:.1} s)",
        guests.len(),
        out.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Every directory with a `Cargo.toml` under [`GUEST_DIRS`], described by
/// `cargo metadata`.
fn discover(root: &Path) -> Result<Vec<Guest>> {
    let mut dirs = Vec::new();
    for (parent, out_subdir) in GUEST_DIRS {
        let parent = root.join(parent);
        let entries = match fs::read_dir(&parent) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(fail!("{}: {e}", parent.display())),
        };
        for entry in entries {
            let manifest = entry.context(parent.display())?.path().join("Cargo.toml");
            if manifest.is_file() {
                let manifest = fs::canonicalize(&manifest).context(manifest.display())?;
                dirs.push((manifest, *out_subdir));
            }
        }
    }
    if dirs.is_empty() {
        return Ok(Vec::new());
    }
    dirs.sort();

    let packages = workspace_packages(root)?;
    let mut guests = Vec::new();
    for (manifest, out_subdir) in dirs {
        let package = packages.get(&manifest).ok_or_else(|| {
            fail!(
                "{} is not a workspace member: list its directory under [workspace] \
                 members in {}",
                manifest.display(),
                root.join("Cargo.toml").display()
            )
        })?;
        guests.extend(guest(package, manifest, out_subdir)?);
    }
    Ok(guests)
}

/// The workspace's packages by canonical manifest path.
fn workspace_packages(root: &Path) -> Result<HashMap<PathBuf, Value>> {
    let output = toolchain::current_cargo()
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--manifest-path",
        ])
        .arg(root.join("Cargo.toml"))
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo metadata")?;
    if !output.status.success() {
        return Err(fail!("cargo metadata failed ({})", output.status));
    }
    let metadata: Value =
        serde_json::from_slice(&output.stdout).context("parsing cargo metadata")?;
    let mut packages = HashMap::new();
    for package in metadata["packages"].as_array().into_iter().flatten() {
        if let Some(manifest) = package["manifest_path"].as_str() {
            let manifest = fs::canonicalize(manifest).context(manifest)?;
            packages.insert(manifest, package.clone());
        }
    }
    Ok(packages)
}

/// The guest `package` describes, or `None` for a library (no cdylib target)
/// that guests only depend on.
fn guest(package: &Value, manifest: PathBuf, out_subdir: &str) -> Result<Option<Guest>> {
    let name = package["name"]
        .as_str()
        .ok_or_else(|| fail!("{}: package without a name", manifest.display()))?
        .to_owned();
    let is_cdylib = package["targets"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|t| {
            t["crate_types"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|k| k == "cdylib")
        });
    if !is_cdylib {
        eprintln!("xtask: {name}: no cdylib target, not a component (a library for guests)");
        return Ok(None);
    }
    let target = match &package["metadata"]["wasm-cni"]["target"] {
        Value::Null => WASM32,
        Value::String(t) if t == WASM32 => WASM32,
        Value::String(t) if t == WASIP1 => WASIP1,
        other => {
            return Err(fail!(
                "{}: [package.metadata.wasm-cni] target = {other}: expected \"{WASM32}\" or \"{WASIP1}\"",
                manifest.display()
            ))
        }
    };
    let output = Path::new(out_subdir).join(format!("{name}.wasm"));
    Ok(Some(Guest {
        name,
        manifest,
        target,
        output,
        strip_names: out_subdir.is_empty(),
    }))
}

/// Builds `group` in one cargo invocation; returns each crate's core module
/// by manifest path.
fn build(
    root: &Path,
    target_dir: &Path,
    toolchain: &Toolchain,
    group: &[&Guest],
) -> Result<HashMap<PathBuf, PathBuf>> {
    eprintln!(
        "xtask: building {} for {} with {}",
        group
            .iter()
            .map(|g| g.name.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        toolchain.target,
        toolchain.describe()
    );
    let mut cargo = toolchain.cargo_build();
    cargo
        .current_dir(root)
        .args([
            "--profile",
            PROFILE,
            "--message-format=json-render-diagnostics",
        ])
        .arg("--manifest-path")
        .arg(root.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir);
    for guest in group {
        cargo.args(["--package", &guest.name]);
    }
    let mut child = cargo
        .stdout(Stdio::piped())
        .spawn()
        .context("starting cargo")?;

    let mut modules = HashMap::new();
    let mut read_error = None;
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines() {
            match line {
                Ok(line) => modules.extend(artifact(&line)),
                Err(e) => {
                    // Stop reading: closing the pipe stops cargo too.
                    read_error = Some(e);
                    break;
                }
            }
        }
    }
    let status = child.wait().context("waiting for cargo")?;
    if let Some(e) = read_error {
        return Err(fail!("reading cargo's output: {e}"));
    }
    if !status.success() {
        return Err(fail!(
            "cargo build for {} failed ({status})",
            toolchain.target
        ));
    }
    Ok(modules)
}

/// The manifest and `.wasm` file of a `compiler-artifact` message.
fn artifact(line: &str) -> Option<(PathBuf, PathBuf)> {
    let message: Value = serde_json::from_str(line).ok()?;
    if message["reason"] != "compiler-artifact" {
        return None;
    }
    let module = message["filenames"]
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .find(|f| f.ends_with(".wasm"))?;
    let manifest = fs::canonicalize(message["manifest_path"].as_str()?).ok()?;
    Some((manifest, PathBuf::from(module)))
}

/// Encodes `module` as a component at `dest` unless `dest` is newer than both
/// the module and the encoder. Returns the component and whether it was
/// written now.
fn componentize(
    guest: &Guest,
    module: &Path,
    dest: &Path,
    encoder_time: SystemTime,
) -> Result<(Vec<u8>, bool)> {
    let module_time = fs::metadata(module)
        .and_then(|m| m.modified())
        .context(module.display())?;
    let dest_time = fs::metadata(dest).and_then(|m| m.modified()).ok();
    if dest_time.is_some_and(|t| t > module_time && t > encoder_time) {
        return Ok((fs::read(dest).context(dest.display())?, false));
    }

    let bytes = fs::read(module).context(module.display())?;
    let making = || format!("{}: making a component of {}", guest.name, module.display());
    let bytes = if guest.strip_names {
        let named = encode(&bytes, guest.target == WASIP1).context(making())?;
        write_atomically(&debug_copy(dest)?, &named)?;
        strip_names(&bytes).context(making())?
    } else {
        bytes
    };
    let component = encode(&bytes, guest.target == WASIP1).context(making())?;
    write_atomically(dest, &component)?;
    Ok((component, true))
}

/// Where the named build of a bundled component is kept: `.debug/` beside
/// it, as `cargo xtask` keeps the binaries' debug info.
fn debug_copy(dest: &Path) -> Result<PathBuf> {
    let (Some(dir), Some(file)) = (dest.parent(), dest.file_name()) else {
        return Err(fail!("{}: no directory or file name", dest.display()));
    };
    Ok(dir.join(".debug").join(file))
}

/// `module` (a core wasm module) without its `name` custom section.
///
/// The names are a quarter of a bundled component (1.25 of 4.44 MB for the
/// 14) and nothing on a node reads them: the host reports a trap by its kind
/// and a plugin's panic by its message, never by a backtrace. Function
/// indices do not change, so `wasm[0]::function[N]` in a profile or a trap
/// is found in the named copy under `.debug/`.
fn strip_names(module: &[u8]) -> Result<Vec<u8>> {
    const HEADER: &[u8] = b"\0asm\x01\0\0\0";
    if !module.starts_with(HEADER) {
        return Err(fail!("not a core wasm module (version 1)"));
    }
    let mut out = HEADER.to_vec();
    let mut at = HEADER.len();
    while at < module.len() {
        let start = at;
        let id = module[at];
        let (size, body) = leb_u32(module, at + 1)?;
        let end = body
            .checked_add(size as usize)
            .filter(|e| *e <= module.len())
            .ok_or_else(|| fail!("section at byte {start} runs past the end"))?;
        let is_names = id == 0 && {
            let (len, name) = leb_u32(&module[..end], body)?;
            module.get(name..name + len as usize) == Some(b"name".as_slice())
        };
        if !is_names {
            out.extend_from_slice(&module[start..end]);
        }
        at = end;
    }
    Ok(out)
}

/// An unsigned LEB128 `u32` at `at`: the value and where what follows it
/// starts.
fn leb_u32(bytes: &[u8], mut at: usize) -> Result<(u32, usize)> {
    let mut value = 0u32;
    for shift in (0..35).step_by(7) {
        let byte = *bytes
            .get(at)
            .ok_or_else(|| fail!("a length runs past the end at byte {at}"))?;
        at += 1;
        value |= u32::from(byte & 0x7f)
            .checked_shl(shift)
            .filter(|_| shift < 28 || byte & 0x70 == 0)
            .ok_or_else(|| fail!("a length at byte {at} overflows"))?;
        if byte & 0x80 == 0 {
            return Ok((value, at));
        }
    }
    Err(fail!("a length at byte {at} is longer than 5 bytes"))
}

fn encode(module: &[u8], wasip1: bool) -> Result<Vec<u8>> {
    let mut encoder = ComponentEncoder::default();
    encoder.module(module).map_err(chain)?.validate(true);
    if wasip1 {
        encoder
            .adapter(
                WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME,
                WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
            )
            .map_err(chain)?;
    }
    encoder.encode().map_err(chain)
}

/// wit-component's errors are `anyhow::Error`s: `{:#}` shows their chain.
fn chain(e: impl std::fmt::Display) -> crate::Error {
    fail!("{e:#}")
}

fn write_atomically(dest: &Path, bytes: &[u8]) -> Result<()> {
    let dir = dest
        .parent()
        .ok_or_else(|| fail!("{}: no parent directory", dest.display()))?;
    fs::create_dir_all(dir).context(dir.display())?;
    let file_name = dest.file_name().unwrap_or_default().to_string_lossy();
    let temp = dir.join(format!(".{file_name}.{}.tmp", std::process::id()));
    let written = fs::write(&temp, bytes).and_then(|()| fs::rename(&temp, dest));
    if written.is_err() {
        // Best effort: the write already failed, report that error.
        let _ = fs::remove_file(&temp);
    }
    written.context(dest.display())
}

/// One line per component: path under `<out>`, size, sha256.
fn report(guest: &Guest, component: &[u8], fresh: bool, verbose: bool) -> Result<()> {
    let digest = Sha256::digest(component);
    let mut hex = String::with_capacity(64);
    for byte in digest {
        // Writing to a String cannot fail.
        let _ = write!(hex, "{byte:02x}");
    }
    println!(
        "{:<28} {:>9} B  sha256:{hex}{}",
        guest.output.display(),
        component.len(),
        if fresh { "" } else { "  (unchanged)" }
    );
    if verbose {
        let decoded = wit_component::decode(component)
            .map_err(|e| fail!("{}: decoding the component: {e:#}", guest.name))?;
        if let DecodedWasm::Component(resolve, world) = &decoded {
            let world = &resolve.worlds[*world];
            let names =
                |items: &mut dyn Iterator<Item = String>| items.collect::<Vec<_>>().join(", ");
            println!(
                "    imports: {}",
                names(&mut world.imports.keys().map(|k| resolve.name_world_key(k)))
            );
            println!(
                "    exports: {}",
                names(&mut world.exports.keys().map(|k| resolve.name_world_key(k)))
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A custom section named `name` holding `body`.
    fn custom(name: &str, body: &[u8]) -> Vec<u8> {
        let mut payload = vec![name.len() as u8];
        payload.extend_from_slice(name.as_bytes());
        payload.extend_from_slice(body);
        let mut s = vec![0, payload.len() as u8];
        s.extend(payload);
        s
    }

    #[test]
    fn strip_names_drops_the_name_section_and_keeps_every_other() {
        let header = b"\0asm\x01\0\0\0".to_vec();
        // A type section with one `[] -> []` function type.
        let types = vec![1, 4, 1, 0x60, 0, 0];
        let module = [
            header.clone(),
            types.clone(),
            custom("name", &[1, 2, 3]),
            custom("producers", &[4]),
        ]
        .concat();
        let stripped = strip_names(&module).unwrap();
        assert_eq!(
            stripped,
            [header, types, custom("producers", &[4])].concat()
        );
        // A custom section merely starting with "name" stays.
        let other = [b"\0asm\x01\0\0\0".to_vec(), custom("names", &[9])].concat();
        assert_eq!(strip_names(&other).unwrap(), other);
    }

    #[test]
    fn strip_names_refuses_what_is_not_a_whole_core_module() {
        let module = [b"\0asm\x01\0\0\0".to_vec(), custom("name", &[1, 2, 3])].concat();
        for cut in 9..module.len() {
            assert!(strip_names(&module[..cut]).is_err(), "cut at {cut}");
        }
        // A component (layer 1) is not stripped by this.
        assert!(strip_names(b"\0asm\x0d\0\x01\0").is_err());
        // A section length of more than five LEB bytes.
        let long = [
            b"\0asm\x01\0\0\0".to_vec(),
            vec![0, 0x80, 0x80, 0x80, 0x80, 0x80, 0],
        ]
        .concat();
        assert!(strip_names(&long).is_err());
    }

    #[test]
    fn guest_target_and_output_come_from_the_manifest() {
        let manifest = PathBuf::from("/ws/tests/fixtures/fx-wasi/Cargo.toml");
        let package = json!({
            "name": "fx-wasi",
            "targets": [{"crate_types": ["cdylib"]}],
            "metadata": {"wasm-cni": {"target": "wasm32-wasip1"}},
        });
        let found = guest(&package, manifest.clone(), "fixtures")
            .unwrap()
            .unwrap();
        assert_eq!(found.target, WASIP1);
        assert_eq!(found.output, Path::new("fixtures/fx-wasi.wasm"));

        let package = json!({"name": "bridge", "targets": [{"crate_types": ["cdylib"]}]});
        let found = guest(&package, manifest.clone(), "").unwrap().unwrap();
        assert_eq!(found.target, WASM32);
        assert_eq!(found.output, Path::new("bridge.wasm"));

        let library = json!({"name": "sdk", "targets": [{"crate_types": ["rlib"]}]});
        assert!(guest(&library, manifest.clone(), "").unwrap().is_none());

        let unknown = json!({
            "name": "x",
            "targets": [{"crate_types": ["cdylib"]}],
            "metadata": {"wasm-cni": {"target": "wasm32-wasip2"}},
        });
        assert!(guest(&unknown, manifest, "").is_err());
    }

    #[test]
    fn artifact_picks_the_wasm_file() {
        let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
        let line = json!({
            "reason": "compiler-artifact",
            "manifest_path": manifest,
            "filenames": ["/t/guest/fx.d", "/t/guest/fx.wasm"],
        })
        .to_string();
        let (found, module) = artifact(&line).unwrap();
        assert_eq!(found, fs::canonicalize(manifest).unwrap());
        assert_eq!(module, Path::new("/t/guest/fx.wasm"));
        assert!(artifact(r#"{"reason":"build-finished","success":true}"#).is_none());
    }
}
