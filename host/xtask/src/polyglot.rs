//! `cargo xtask polyglot`: plugins written in Python (componentize-py) and
//! JavaScript (componentize-js), built against `wit/` like the Rust ones.
//!
//! Each toolchain comes from its registry, pinned with its hashes
//! (`guest-plugins/polyglot/python/requirements.txt`, the JavaScript
//! `package-lock.json`), into `target/polyglot/`, once: a later run whose
//! pins have not changed installs nothing. The components go to
//! `target-guest/polyglot/`, not beside the bundled ones: they are examples
//! for authors, not something a node installs. The test fixtures written in
//! these languages go to its `fixtures/`. With `rust`, the same example in
//! Rust (what `new-plugin` writes, built as an author would) goes beside
//! them as `routes-rs.wasm`, for the bench's comparison.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::{fail, Context, Result};

/// The world every example here is built for.
const WORLD: &str = "interface-plugin";

/// Where the sources are, relative to the workspace.
const PYTHON: &str = "guest-plugins/polyglot/python";
const JS: &str = "guest-plugins/polyglot/js";

/// What one build makes: a Python app directory or a JavaScript module,
/// and the component's name.
enum Source {
    /// `componentize-py` on `<dir>/app.py`.
    Python { dir: &'static str },
    /// `componentize-js` on a module. `fetch`: leave componentize-js's
    /// default `wasi:http` imports in (only the fixture that shows the host
    /// refusing them does).
    Js { module: &'static str, fetch: bool },
}

struct Build {
    name: &'static str,
    source: Source,
    fixture: bool,
}

const BUILDS: &[Build] = &[
    Build {
        name: "routes-py",
        source: Source::Python {
            dir: "guest-plugins/polyglot/python/routes",
        },
        fixture: false,
    },
    Build {
        name: "routes-js",
        source: Source::Js {
            module: "guest-plugins/polyglot/js/routes/routes.js",
            fetch: false,
        },
        fixture: false,
    },
    Build {
        name: "hostile-py",
        source: Source::Python {
            dir: "tests/polyglot/hostile-py",
        },
        fixture: true,
    },
    Build {
        name: "routes-js-fetch",
        source: Source::Js {
            module: "guest-plugins/polyglot/js/routes/routes.js",
            fetch: true,
        },
        fixture: true,
    },
];

/// The installed toolchains.
struct Tools {
    componentize_py: PathBuf,
    componentize_js: PathBuf,
}

pub fn run(root: &Path, out: Option<PathBuf>, rust: bool) -> Result<()> {
    let started = Instant::now();
    let out = out.unwrap_or_else(|| root.join("target-guest/polyglot"));
    let tools = install(root)?;
    std::fs::create_dir_all(out.join("fixtures")).context(out.display())?;
    if rust {
        // Written afresh from the template each time (its build directory
        // stays), so that it is the example as the template has it now.
        let dir = root.join("target/polyglot/routes-rs");
        let _ = std::fs::remove_file(dir.join("Cargo.toml"));
        crate::scaffold::run(root, &dir, Some("routes-rs"))?;
        crate::plugins::run_external(&dir, Some(out.clone()), false)?;
    }
    let wit = root.join("wit");
    for b in BUILDS {
        let dest = if b.fixture {
            out.join("fixtures")
        } else {
            out.clone()
        }
        .join(format!("{}.wasm", b.name));
        let t = Instant::now();
        let mut cmd = match &b.source {
            Source::Python { dir } => {
                // componentize-py imports the app to snapshot it, and
                // Python leaves bytecode beside what it imports: build from
                // a copy under target/, never in the source tree.
                let copy = root.join("target/polyglot/src").join(b.name);
                copy_sources(&root.join(dir), &copy)?;
                let mut c = Command::new(&tools.componentize_py);
                c.arg("-d")
                    .arg(&wit)
                    .args(["-w", WORLD, "componentize", "-p"])
                    .arg(&copy)
                    .args(["app", "-o"])
                    .arg(&dest);
                c
            }
            Source::Js { module, fetch } => {
                let mut c = Command::new(&tools.componentize_js);
                c.arg(root.join(module))
                    .arg("-w")
                    .arg(&wit)
                    .args(["-n", WORLD]);
                if !fetch {
                    // What a plugin has no use for and the host does not
                    // grant: an HTTP client and an HTTP server entry point.
                    c.args(["-d", "http", "fetch-event"]);
                }
                c.arg("-o").arg(&dest);
                c
            }
        };
        checked(&mut cmd, b.name)?;
        let size = std::fs::metadata(&dest).context(dest.display())?.len();
        println!(
            "xtask: {} ({:.1} MB) in {:.0} s",
            dest.display(),
            size as f64 / 1e6,
            t.elapsed().as_secs_f64()
        );
    }
    println!(
        "xtask: polyglot done in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The `.py` files of `from` into a fresh `to`.
fn copy_sources(from: &Path, to: &Path) -> Result<()> {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).context(to.display())?;
    for entry in std::fs::read_dir(from).context(from.display())? {
        let path = entry.context(from.display())?.path();
        if path.extension().is_some_and(|e| e == "py") {
            if let Some(name) = path.file_name() {
                std::fs::copy(&path, to.join(name)).context(path.display())?;
            }
        }
    }
    Ok(())
}

fn checked(cmd: &mut Command, what: &str) -> Result<()> {
    let status = cmd
        .status()
        .context(format_args!("{what}: running {:?}", cmd.get_program()))?;
    if !status.success() {
        return Err(fail!("{what}: {cmd:?} failed ({status})"));
    }
    Ok(())
}

/// Run `install` into a fresh `dir` unless `dir` was last installed from
/// the pins `pins` holds now (a copy of them is kept in `dir` as the stamp).
fn install_once(
    dir: &Path,
    pins: &Path,
    what: &str,
    install: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let want = std::fs::read(pins).context(pins.display())?;
    let stamp = dir.join(".installed-from");
    if std::fs::read(&stamp).ok().as_deref() == Some(want.as_slice()) {
        return Ok(());
    }
    println!("xtask: installing {what} into {}", dir.display());
    let _ = std::fs::remove_dir_all(dir);
    install()?;
    std::fs::write(&stamp, &want).context(stamp.display())
}

/// Install both toolchains under `target/polyglot/` unless the pins they
/// were installed from are the ones in the tree.
fn install(root: &Path) -> Result<Tools> {
    let base = root.join("target/polyglot");
    std::fs::create_dir_all(&base).context(base.display())?;

    // Python: a virtual environment of its own, the pinned wheel only.
    let venv = base.join("venv");
    let requirements = root.join(PYTHON).join("requirements.txt");
    install_once(&venv, &requirements, "componentize-py from PyPI", || {
        checked(
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
            "python3 -m venv (Debian: python3-venv)",
        )?;
        checked(
            Command::new(venv.join("bin/pip"))
                .args(["install", "--quiet", "--require-hashes", "--no-deps", "-r"])
                .arg(&requirements),
            "pip install componentize-py",
        )
    })?;

    // JavaScript: `npm ci` on a copy of the manifest and its lock, so that
    // the 150 packages land under target/, not in the source tree.
    let js = base.join("js");
    let lock = root.join(JS).join("package-lock.json");
    install_once(&js, &lock, "componentize-js from npm", || {
        std::fs::create_dir_all(&js).context(js.display())?;
        for f in ["package.json", "package-lock.json"] {
            std::fs::copy(root.join(JS).join(f), js.join(f)).context(f)?;
        }
        checked(
            Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund", "--silent"])
                .current_dir(&js),
            "npm ci (Node.js 18 or later and npm)",
        )
    })?;

    Ok(Tools {
        componentize_py: venv.join("bin/componentize-py"),
        componentize_js: js.join("node_modules/.bin/componentize-js"),
    })
}
