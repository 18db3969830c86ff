//! The contract holds still (`wit/README.md`): components built against
//! released WIT versions keep loading, and a component the host cannot
//! serve is refused at load with code 7 and a sentence that names it, its
//! version and what this host serves.
//!
//! The old components in `tests/compat/` were built once from the git
//! history (`tests/compat/README.md` names each commit) and are committed
//! as they came out, so these tests run what authors really shipped.
//!
//! What an author (or an attacker with a registry) controls here: the
//! component's import and export names, their versions and their types.
//! What they must not gain: a link against an interface the host did not
//! mean to serve, a panic, or a misleading error.

use std::path::PathBuf;
use std::process::Command;

use serde_json::{json, Value};
use wasm_cni_tests::{plugin, wasm_cni_bin, workspace_root, Invocation, Pod, Sandbox, TempDir};

fn old(revision: &str, name: &str) -> PathBuf {
    workspace_root()
        .join("tests/compat")
        .join(revision)
        .join(format!("{name}.wasm"))
}

/// `cni:plugin@0.1.0` as released (commit 63aab4e).
const V0_1_0: &str = "wit-0.1.0-63aab4e";
/// `cni:plugin@0.2.0` as released (the bundled components at 5e2224b).
const V0_2_0: &str = "wit-0.2.0-5e2224b";
/// `cni:plugin@0.2.1` as released (the bundled components at 960f314).
const V0_2_1: &str = "wit-0.2.1-960f314";
/// The unreleased revision of 0.1.0 whose `link` has 15 fields (fab0967).
const V0_1_0_LATER: &str = "wit-0.1.0-fab0967";

fn bridge_conf(name: &str, bridge: &str, subnet: &str) -> Value {
    json!({"cniVersion": "1.1.0", "name": name, "type": "bridge", "bridge": bridge,
           "isGateway": true, "ipMasq": false,
           "ipam": {"type": "host-local", "subnet": subnet}})
}

/// `wasm-cni plugin test` of a component with its IPAM delegate beside it.
fn plugin_test(component: &PathBuf, delegate: &PathBuf, config: Value) -> (i32, String) {
    let dir = TempDir::new("compat-pt");
    std::fs::copy(component, dir.join("bridge.wasm")).unwrap();
    std::fs::copy(delegate, dir.join("host-local.wasm")).unwrap();
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let config = dir.join("config.json");
    wasm_cni_tests::plugin_test(
        &dir.join("bridge.wasm"),
        &["--config".as_ref(), config.as_os_str(), "--faults".as_ref()],
    )
}

#[test]
fn components_built_against_released_versions_pass_plugin_test() {
    let conf = bridge_conf("compatpt", "cni0", "10.77.0.0/24");
    // Both old, and each old one beside a current one: a chain may mix
    // versions, and IPAM delegation crosses them. The 0.2.0 host-local
    // reads the whole scope (`store.list`), the current one asks `lookup`
    // and `span`: both over the same store.
    for (bridge, host_local) in [
        (old(V0_1_0, "bridge"), old(V0_1_0, "host-local")),
        (old(V0_1_0, "bridge"), plugin("host-local")),
        (plugin("bridge"), old(V0_1_0, "host-local")),
        (old(V0_2_0, "bridge"), old(V0_2_0, "host-local")),
        (plugin("bridge"), old(V0_2_0, "host-local")),
        (old(V0_2_0, "bridge"), old(V0_1_0, "host-local")),
        (old(V0_2_1, "bridge"), old(V0_2_1, "host-local")),
        (plugin("bridge"), old(V0_2_1, "host-local")),
        (old(V0_2_1, "bridge"), plugin("host-local")),
    ] {
        let (code, out) = plugin_test(&bridge, &host_local, conf.clone());
        assert_eq!(
            code,
            0,
            "{} + {}:\n{out}",
            bridge.display(),
            host_local.display()
        );
        assert!(
            out.contains("PASS faults-add") && !out.contains("FAIL"),
            "{out}"
        );
    }
}

#[test]
fn a_0_1_0_chain_runs_in_real_namespaces() {
    old_chain_runs(V0_1_0, "0.1.0", "cpt", "10.78.0");
}

#[test]
fn a_0_2_0_chain_runs_in_real_namespaces() {
    old_chain_runs(V0_2_0, "0.2.0", "cpt2", "10.79.0");
}

#[test]
fn a_0_2_1_chain_runs_in_real_namespaces() {
    old_chain_runs(V0_2_1, "0.2.1", "cpt3", "10.76.0");
}

/// ADD, CHECK and DEL of a chain of components built against `wit` in a
/// pod's real namespaces; then the current host-local takes over the
/// same store, and sees what the old one released.
fn old_chain_runs(revision: &str, wit: &str, tag: &str, net: &str) {
    let pod = Pod::new(tag);
    let sb = Sandbox::new(&format!("compat-ns-{tag}"));
    sb.install(&old(revision, "bridge"), "bridge");
    sb.install(&old(revision, "host-local"), "host-local");
    let conf = sb.conf(
        "1.1.0",
        &format!("compat{tag}"),
        json!([{"type": "bridge", "bridge": format!("{tag}br0"), "isGateway": true,
                "ipam": {"type": "host-local", "subnet": format!("{net}.0/24"),
                         "reuseIPWait": 600}}]),
    );
    let add = pod.run(Invocation::new("ADD").id("c1"), &conf);
    add.assert_ok();
    let r = add.json();
    assert_eq!(r["ips"][0]["address"], format!("{net}.2/24"), "{r}");
    // The veth the old plugin made through the adapted `create-veth`, with
    // the address its old IPAM delegate chose.
    let addrs = pod.ctr.exec(&["ip", "-o", "addr", "show", "dev", "eth0"]);
    assert!(addrs.contains(&format!("{net}.2/24")), "{addrs}");
    let host_side = pod
        .node
        .link(&format!("{tag}br0"))
        .expect("the bridge exists");
    assert_eq!(host_side["operstate"], "UP", "{host_side}");
    pod.run(Invocation::new("CHECK").id("c1"), &conf)
        .assert_ok();
    pod.run(Invocation::new("DEL").id("c1"), &conf).assert_ok();
    assert!(pod.ctr.link("eth0").is_none());

    // `wasm-cni plugins` says which contract each was built against.
    let out = Command::new(wasm_cni_bin())
        .args(["plugins", "--plugin-dir"])
        .arg(sb.plugin_dir())
        .arg("--cache-dir")
        .arg(sb.cache_dir())
        .env_remove("CNI_COMMAND")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for name in ["bridge", "host-local"] {
        let line = text.lines().find(|l| l.starts_with(name)).unwrap_or("");
        assert!(line.contains(&format!("wit={wit}")), "{text}");
    }

    // The current host-local on the old one's store: .2 is quarantined
    // (reuseIPWait), so the next ADD gets .3.
    sb.install(&plugin("host-local"), "host-local");
    let add = pod.run(Invocation::new("ADD").id("c2"), &conf);
    add.assert_ok();
    assert_eq!(add.json()["ips"][0]["address"], format!("{net}.3/24"));
    pod.run(Invocation::new("DEL").id("c2"), &conf).assert_ok();
}

/// A load refusal as the runtime sees it: code 7 and the message.
fn refusal(component: &[u8], tag: &str) -> (u64, String) {
    let sb = Sandbox::new(tag);
    let path = sb.plugin_dir().join("odd.wasm");
    std::fs::write(&path, component).unwrap();
    let conf = sb.conf("1.1.0", tag, json!([{"type": "odd"}]));
    let out = Invocation::new("ADD").id("r1").run(&conf);
    (out.error_code(), out.error_msg())
}

#[test]
fn the_unreleased_revision_of_0_1_0_is_refused_with_what_to_do() {
    let bytes = std::fs::read(old(V0_1_0_LATER, "bridge")).unwrap();
    let (code, msg) = refusal(&bytes, "compatlate");
    assert_eq!(code, 7, "{msg}");
    assert!(
        msg.contains("\"odd\"")
            && msg.contains("built against cni:plugin@0.1.0")
            && msg.contains("its import cni:plugin/network@0.1.0 differs")
            && msg.contains("this host serves cni:plugin 0.1.0, 0.2.0, 0.2.1, 0.2.2")
            && msg.contains("rebuild it against 0.2.0"),
        "{msg}"
    );
    assert!(!msg.contains("type mismatch"), "{msg}");
}

/// A component with these imports that exports `plugin` at `export`.
fn component(imports: &[&str], export: &str) -> Vec<u8> {
    let mut text = String::from("(component\n");
    for i in imports {
        text += &format!("  (import \"{i}\" (instance))\n");
    }
    text += &format!("  (instance $p)\n  (export \"{export}\" (instance $p))\n)\n");
    wat::parse_str(&text).unwrap()
}

#[test]
fn unknown_versions_and_ungranted_imports_are_refused_by_name() {
    let cases = [
        (
            component(&["cni:plugin/log@0.3.0"], "cni:plugin/plugin@0.2.1"),
            "built against cni:plugin@0.3.0 (it imports cni:plugin/log@0.3.0); this host serves \
             cni:plugin 0.1.0, 0.2.0, 0.2.1, 0.2.2",
        ),
        // A later patch would link against 0.2.2 by wasmtime's semver
        // rules, lacking whatever it added: refused by name first.
        (
            component(&["cni:plugin/store@0.2.3"], "cni:plugin/plugin@0.2.2"),
            "built against cni:plugin@0.2.3 (it imports cni:plugin/store@0.2.3)",
        ),
        (
            component(&[], "cni:plugin/plugin@0.2.9"),
            "built against cni:plugin@0.2.9 (it exports cni:plugin/plugin@0.2.9)",
        ),
        (
            component(&[], "cni:plugin/plugin@0.9.1"),
            "built against cni:plugin@0.9.1 (it exports cni:plugin/plugin@0.9.1)",
        ),
        (
            component(&["cni:plugin/log@0.1.1"], "cni:plugin/plugin@0.1.0"),
            "built against cni:plugin@0.1.1",
        ),
        (
            component(
                &["wasi:http/outgoing-handler@0.2.0"],
                "cni:plugin/plugin@0.2.0",
            ),
            "imports wasi:http/outgoing-handler@0.2.0, which this host does not grant",
        ),
        (
            component(&["cni:plugin/tunnel@0.2.0"], "cni:plugin/plugin@0.2.0"),
            "imports cni:plugin/tunnel@0.2.0, which cni:plugin@0.2.0 does not provide",
        ),
        (
            component(&["cni:plugin/log@0.2.0"], "my:thing/other@1.0.0"),
            "exports no cni:plugin/plugin interface",
        ),
    ];
    for (i, (bytes, expected)) in cases.iter().enumerate() {
        let (code, msg) = refusal(bytes, &format!("compatodd{i}"));
        assert_eq!(code, 7, "{msg}");
        assert!(msg.contains(expected) && msg.contains("\"odd\""), "{msg}");
        assert!(
            !msg.contains("mismatch") && !msg.contains("linker"),
            "{msg}"
        );
    }
}
