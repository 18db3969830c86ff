//! `cargo xtask new-plugin DIR`: a plugin crate outside this repository,
//! depending on this checkout's SDK (and through it the WIT) by path: the
//! worked example of guest-plugins/docs/writing.md (a meta plugin adding routes), a config
//! and a prevResult for `wasm-cni plugin test`. Build it with `cargo xtask
//! plugins --crate DIR`.

use std::fs;
use std::path::Path;

use crate::{fail, Context, Result};

const CARGO_TOML: &str = include_str!("../template/Cargo.toml.in");
const LIB_RS: &str = include_str!("../template/lib.rs");
const PLUGIN_TEST: &str = include_str!("../template/plugin-test.json");
const PREV_RESULT: &str = include_str!("../template/prev-result.json");

/// A crate name that is also a CNI `type` wasm-cni accepts.
fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(fail!(
            "{name:?}: a plugin name is lowercase letters, digits and '-', starting with a letter"
        ))
    }
}

pub fn run(root: &Path, dir: &Path, name: Option<&str>) -> Result<()> {
    let name = match name {
        Some(n) => n.to_string(),
        None => dir
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| fail!("{}: name the plugin with --name", dir.display()))?
            .to_string(),
    };
    check_name(&name)?;
    if dir.join("Cargo.toml").exists() {
        return Err(fail!("{} already has a Cargo.toml", dir.display()));
    }
    let sdk = fs::canonicalize(root.join("guest-plugins/sdk"))
        .context(root.join("guest-plugins/sdk").display())?;
    let fill = |t: &str| {
        t.replace("{{name}}", &name)
            .replace("{{sdk}}", &sdk.display().to_string())
    };
    fs::create_dir_all(dir.join("src")).context(dir.display())?;
    for (path, text) in [
        ("Cargo.toml", fill(CARGO_TOML)),
        ("src/lib.rs", fill(LIB_RS)),
        ("plugin-test.json", fill(PLUGIN_TEST)),
        ("prev-result.json", fill(PREV_RESULT)),
    ] {
        let p = dir.join(path);
        fs::write(&p, text).context(p.display())?;
    }
    eprintln!(
        "xtask: plugin {name} in {}\n  build: cargo xtask plugins --crate {}\n  test:  target/bin/wasm-cni plugin test {}/target-guest/components/{name}.wasm --config {}/plugin-test.json --prev-result @{}/prev-result.json",
        dir.display(),
        dir.display(),
        dir.display(),
        dir.display(),
        dir.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_cni_types() {
        for ok in ["routes", "my-routes2"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Routes", "2routes", "my_routes", "a/b", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_example_is_at_most_60_lines() {
        assert!(LIB_RS.lines().count() <= 60);
    }
}
