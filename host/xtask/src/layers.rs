//! `cargo xtask layers`: the host's layering, as the workspace's
//! `Cargo.toml` declares it under `[workspace.metadata.layers]`, checked
//! against what the manifests actually say.
//!
//! Three rules, each a dependency that exists or does not:
//! - a layered crate depends (normal or build) only on layered crates of a
//!   lower layer, and every crate under `host/` is either layered or named
//!   as outside the node;
//! - a dependency listed under `only` (netlink, etcd, TLS, wasmtime) is
//!   named by no layered crate but the ones listed;
//! - the node's package, built as nodes build it (no features), has none of
//!   the `never` features on (the in-memory backends), as cargo resolves it.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::{fail, Context, Result};

pub fn run(root: &Path) -> Result<()> {
    let metadata = cargo_output(
        root,
        &["metadata", "--format-version", "1", "--no-deps", "--locked"],
    )?;
    let metadata: Value = serde_json::from_str(&metadata).context("cargo metadata's output")?;
    let rules = Rules::from_metadata(&metadata)?;
    let mut problems = rules.dependency_problems(&packages(&metadata, root)?);
    let tree = cargo_output(
        root,
        &[
            "tree",
            "--locked",
            "-p",
            &rules.node,
            "-e",
            "normal,build",
            "--prefix",
            "none",
            "-f",
            "{p}|{f}",
        ],
    )?;
    problems.extend(rules.node_problems(&tree));
    if !problems.is_empty() {
        return Err(fail!(
            "the host's layering ([workspace.metadata.layers] in Cargo.toml) is broken:\n  {}",
            problems.join("\n  ")
        ));
    }
    println!(
        "xtask: layers hold: {} layered crates, {} rules on who may name what, {} features kept out of {}",
        rules.layer.len(),
        rules.only.len(),
        rules.never.len(),
        rules.node
    );
    Ok(())
}

fn cargo_output(root: &Path, args: &[&str]) -> Result<String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args(args)
        .current_dir(root)
        .output()
        .context(format_args!("running cargo {}", args.join(" ")))?;
    if !out.status.success() {
        return Err(fail!(
            "cargo {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    String::from_utf8(out.stdout).context(format_args!("cargo {}'s output", args.join(" ")))
}

/// A workspace package as the rules see it.
#[derive(Debug)]
struct Package {
    name: String,
    /// Whether its manifest lives under `host/`.
    in_host: bool,
    /// (dependency's package name, kind: "normal", "build" or "dev").
    deps: Vec<(String, String)>,
}

fn packages(metadata: &Value, root: &Path) -> Result<Vec<Package>> {
    let host = root.join("host");
    let list = metadata["packages"]
        .as_array()
        .ok_or_else(|| fail!("cargo metadata lists no packages"))?;
    list.iter()
        .map(|p| {
            let name = p["name"]
                .as_str()
                .ok_or_else(|| fail!("a package without a name"))?;
            let manifest = p["manifest_path"].as_str().unwrap_or_default();
            let deps = p["dependencies"]
                .as_array()
                .map(|ds| {
                    ds.iter()
                        .filter_map(|d| {
                            let kind = d["kind"].as_str().unwrap_or("normal");
                            Some((d["name"].as_str()?.to_string(), kind.to_string()))
                        })
                        .collect()
                })
                .unwrap_or_default();
            Ok(Package {
                name: name.to_string(),
                in_host: Path::new(manifest).starts_with(&host),
                deps,
            })
        })
        .collect()
}

#[derive(Debug)]
struct Rules {
    /// Layered crate → its layer (0 lowest).
    layer: BTreeMap<String, usize>,
    outside: Vec<String>,
    /// Dependency pattern → the layered crates that may name it.
    only: Vec<(String, Vec<String>)>,
    node: String,
    /// `package/feature`s the node must not have on.
    never: Vec<String>,
}

impl Rules {
    fn from_metadata(metadata: &Value) -> Result<Rules> {
        let table = &metadata["metadata"]["layers"];
        let strings = |v: &Value, what: &str| -> Result<Vec<String>> {
            v.as_array()
                .ok_or_else(|| fail!("[workspace.metadata.layers] {what}: not a list"))?
                .iter()
                .map(|s| {
                    s.as_str().map(str::to_string).ok_or_else(|| {
                        fail!("[workspace.metadata.layers] {what}: not a list of names")
                    })
                })
                .collect()
        };
        let mut layer = BTreeMap::new();
        let order = table["order"]
            .as_array()
            .ok_or_else(|| fail!("Cargo.toml has no [workspace.metadata.layers] order"))?;
        for (i, crates) in order.iter().enumerate() {
            for name in strings(crates, "order")? {
                if layer.insert(name.clone(), i).is_some() {
                    return Err(fail!("[workspace.metadata.layers] names {name} twice"));
                }
            }
        }
        let outside = strings(&table["outside"], "outside")?;
        let mut only = Vec::new();
        if let Some(map) = table["only"].as_object() {
            for (pattern, crates) in map {
                only.push((pattern.clone(), strings(crates, pattern)?));
            }
        }
        let node = table["node"]["package"]
            .as_str()
            .ok_or_else(|| fail!("[workspace.metadata.layers.node] names no package"))?
            .to_string();
        let never = strings(&table["node"]["never"], "node.never")?;
        Ok(Rules {
            layer,
            outside,
            only,
            node,
            never,
        })
    }

    fn dependency_problems(&self, packages: &[Package]) -> Vec<String> {
        let mut problems = Vec::new();
        for p in packages {
            let Some(&mine) = self.layer.get(&p.name) else {
                if p.in_host && !self.outside.contains(&p.name) {
                    problems.push(format!(
                        "{} lives under host/ but is neither in a layer nor outside",
                        p.name
                    ));
                }
                continue;
            };
            for (dep, kind) in &p.deps {
                if kind != "dev" {
                    if let Some(&theirs) = self.layer.get(dep) {
                        if theirs >= mine {
                            problems.push(format!(
                                "{} (layer {mine}) depends on {dep} (layer {theirs}): only lower layers",
                                p.name
                            ));
                        }
                    } else if self.outside.contains(dep) {
                        problems.push(format!(
                            "{} depends on {dep}, which is outside the node's layers",
                            p.name
                        ));
                    }
                }
                for (pattern, allowed) in &self.only {
                    if matches(pattern, dep) && !allowed.contains(&p.name) {
                        problems.push(format!(
                            "{} names {dep} ({kind}): only {} may",
                            p.name,
                            allowed.join(", ")
                        ));
                    }
                }
            }
        }
        problems
    }

    /// `tree`: `cargo tree -f "{p}|{f}" --prefix none` of the node package.
    fn node_problems(&self, tree: &str) -> Vec<String> {
        let mut problems = Vec::new();
        for line in tree.lines() {
            let Some((package, features)) = line.split_once('|') else {
                continue;
            };
            let Some(name) = package.split_whitespace().next() else {
                continue;
            };
            let features = features.trim_end_matches(" (*)");
            for feature in features.split(',') {
                let full = format!("{name}/{feature}");
                if self.never.contains(&full)
                    && !problems.iter().any(|p: &String| p.contains(&full))
                {
                    problems.push(format!(
                        "{} as nodes build it has {full} on: the in-memory backends would ship",
                        self.node
                    ));
                }
            }
        }
        problems
    }
}

fn matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == pattern,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules() -> Rules {
        Rules::from_metadata(&json!({"metadata": {"layers": {
            "order": [["model"], ["base", "cni"], ["kernel", "store"], ["engine"]],
            "outside": ["bench"],
            "only": {"netlink-*": ["kernel"], "wasmtime": ["engine"]},
            "node": {"package": "engine", "never": ["model/memory"]},
        }}}))
        .expect("rules")
    }

    fn package(name: &str, deps: &[(&str, &str)]) -> Package {
        Package {
            name: name.into(),
            in_host: true,
            deps: deps
                .iter()
                .map(|(d, k)| (d.to_string(), k.to_string()))
                .collect(),
        }
    }

    #[test]
    fn downward_dependencies_hold() {
        let ok = [
            package("kernel", &[("base", "normal"), ("netlink-sys", "normal")]),
            package("engine", &[("kernel", "normal"), ("wasmtime", "normal")]),
            package("store", &[("engine", "dev")]),
            package("bench", &[("netlink-sys", "normal"), ("engine", "normal")]),
        ];
        assert_eq!(rules().dependency_problems(&ok), Vec::<String>::new());
    }

    #[test]
    fn a_dependency_up_sideways_or_outside_is_refused() {
        let bad = [
            package("cni", &[("kernel", "normal")]),
            package("store", &[("kernel", "build")]),
            package("kernel", &[("bench", "normal")]),
            package("stray", &[]),
        ];
        let problems = rules().dependency_problems(&bad);
        assert_eq!(problems.len(), 4, "{problems:#?}");
        assert!(problems[0].contains("cni (layer 1) depends on kernel (layer 2)"));
        assert!(problems[1].contains("store (layer 2) depends on kernel (layer 2)"));
        assert!(problems[2].contains("outside"));
        assert!(problems[3].contains("stray lives under host/"));
    }

    #[test]
    fn netlink_or_wasmtime_outside_their_crate_is_refused() {
        let bad = [
            package("store", &[("netlink-packet-route", "normal")]),
            package("cni", &[("netlink-sys", "dev")]),
            package("kernel", &[("wasmtime", "normal")]),
        ];
        let problems = rules().dependency_problems(&bad);
        assert_eq!(problems.len(), 3, "{problems:#?}");
        assert!(problems[0].contains("store names netlink-packet-route (normal): only kernel"));
        assert!(problems[1].contains("cni names netlink-sys (dev)"));
        assert!(problems[2].contains("kernel names wasmtime"));
    }

    #[test]
    fn memory_backends_in_the_node_are_refused() {
        let tree = "engine v0.1.0 (/h)|default\nmodel v0.1.0 (/h/model)|default,memory\nmodel v0.1.0 (/h/model)|default,memory (*)\n";
        let problems = rules().node_problems(tree);
        assert_eq!(problems.len(), 1, "{problems:#?}");
        assert!(problems[0].contains("model/memory"));
        let clean = "engine v0.1.0 (/h)|default\nmodel v0.1.0 (/h/model)|default\n";
        assert!(rules().node_problems(clean).is_empty());
    }

    #[test]
    fn a_crate_named_in_two_layers_is_refused() {
        let twice = json!({"metadata": {"layers": {
            "order": [["model"], ["model"]], "outside": [],
            "node": {"package": "model", "never": []},
        }}});
        assert!(Rules::from_metadata(&twice).is_err());
    }
}
