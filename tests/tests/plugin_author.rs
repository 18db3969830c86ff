//! A plugin author's whole path, outside this repository: `cargo xtask
//! new-plugin` in a temporary directory, `cargo xtask plugins --crate` to
//! build the component, `wasm-cni plugin test` (with fault injection) on
//! it, then the component in a real chain after bridge in namespaces.

use std::path::PathBuf;
use std::process::Command;

use serde_json::json;
use wasm_cni_tests::{is_root, plugin, wasm_cni_bin, Invocation, Netns, Sandbox, TempDir};

/// The xtask binary: the one running `cargo xtask test` passes itself in
/// `WASM_CNI_XTASK`; by hand, the one `cargo xtask` built.
fn xtask() -> PathBuf {
    if let Some(p) = std::env::var_os("WASM_CNI_XTASK") {
        return PathBuf::from(p);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let p = root.join("target/release/xtask");
    assert!(
        p.is_file(),
        "{} missing: run `cargo xtask test` (or any `cargo xtask` task) first",
        p.display()
    );
    p
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?}: {}\n{text}", out.status);
    text
}

#[test]
fn a_plugin_made_outside_the_tree_builds_tests_and_runs_in_a_chain() {
    let tmp = TempDir::new("oot");
    let dir = tmp.join("routes-ex");
    assert!(!dir.starts_with(env!("CARGO_MANIFEST_DIR")));
    run(Command::new(xtask()).arg("new-plugin").arg(&dir));
    let lib = std::fs::read_to_string(dir.join("src/lib.rs")).unwrap();
    assert!(lib.lines().count() <= 60, "the worked example grew");
    run(Command::new(xtask()).args(["plugins", "--crate"]).arg(&dir));
    let component = dir.join("target-guest/components/routes-ex.wasm");
    assert!(component.is_file());

    // The contract, rootless, every host call failed in turn.
    let verdicts = run(Command::new(wasm_cni_bin())
        .args(["plugin", "test"])
        .arg(&component)
        .arg("--config")
        .arg(dir.join("plugin-test.json"))
        .arg("--prev-result")
        .arg(format!("@{}", dir.join("prev-result.json").display()))
        .arg("--faults")
        .env_remove("CNI_COMMAND"));
    assert!(!verdicts.contains("FAIL"), "{verdicts}");
    assert!(verdicts.contains("PASS faults-add"), "{verdicts}");

    // In a real chain, in namespaces of its own.
    if !is_root("a_plugin_made_outside_the_tree_builds_tests_and_runs_in_a_chain") {
        return;
    }
    let sb = Sandbox::new("oot");
    sb.install(&plugin("bridge"), "bridge")
        .install(&plugin("host-local"), "host-local")
        .install(&component, "routes-ex");
    let node = Netns::new("ootn");
    let ctr = Netns::new("ootc");
    let conf = sb.conf(
        "1.1.0",
        "ootnet",
        json!([
            {"type": "bridge", "bridge": "ootbr0", "isGateway": true,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.61.0.0/24"}]]}},
            {"type": "routes-ex", "routes": [{"dst": "192.168.61.0/24", "gw": "10.61.0.1"}]}
        ]),
    );
    let add = Invocation::new("ADD")
        .netns(ctr.path())
        .run_in(Some(&node.name), &conf);
    add.assert_ok();
    let routes = add.json()["routes"].to_string();
    assert!(routes.contains("192.168.61.0/24"), "{routes}");
    let table = ctr.exec(&["ip", "route", "show", "192.168.61.0/24"]);
    assert!(
        table.contains("192.168.61.0/24 via 10.61.0.1 dev eth0"),
        "{table}"
    );
    Invocation::new("CHECK")
        .netns(ctr.path())
        .run_in(Some(&node.name), &conf)
        .assert_ok();
    Invocation::new("DEL")
        .netns(ctr.path())
        .run_in(Some(&node.name), &conf)
        .assert_ok();
    assert_eq!(ctr.exec(&["ip", "route", "show", "192.168.61.0/24"]), "");
}
