//! Plugins written in Python (componentize-py) and JavaScript
//! (componentize-js), built by `cargo xtask polyglot`: the worked example
//! (extra routes) in each language passes `plugin test --faults` and runs
//! after bridge in a real chain; a hostile Python plugin gets no more than
//! a Rust one (its loops, allocations and sleeps end as CNI errors within
//! its deadline; it finds no file, environment or socket); a JavaScript
//! component that keeps componentize-js's HTTP client is refused at load
//! naming the import.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wasm_cni_tests::{
    is_root, plugin, plugin_test, workspace_root, Invocation, Netns, Output, Sandbox, TempDir,
};

/// What `cargo xtask polyglot` built (`WASM_CNI_POLYGLOT` overrides).
fn built(name: &str) -> PathBuf {
    let dir = std::env::var_os("WASM_CNI_POLYGLOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target-guest/polyglot"));
    let p = dir.join(format!("{name}.wasm"));
    assert!(
        p.is_file(),
        "{} missing: run `cargo xtask polyglot`",
        p.display()
    );
    p
}

/// The limits an interpreter's component needs (guest-plugins/docs/
/// python-and-javascript.md): CPython's is 18.5 MB, over the default 16 MiB
/// cap on a component's size, and compiling either takes 14–17 s of CPU
/// here, over the default 10 s (once: the artifact is cached). Memory stays
/// at the default 64 MiB; the examples need 13 and 11 MB.
fn interpreter_limits() -> Value {
    json!({"maxComponentBytes": 32 << 20, "compileMs": 30_000, "compileMemoryBytes": 1 << 30})
}

fn routes_conf(routes: Value) -> Value {
    json!({"cniVersion": "1.1.0", "name": "routes-net", "type": "routes",
           "routes": routes, "wasm": interpreter_limits()})
}

#[test]
fn the_python_and_javascript_examples_pass_plugin_test_with_faults() {
    let prev = workspace_root().join("host/xtask/template/prev-result.json");
    let tmp = TempDir::new("polyt");
    let conf = tmp.join("conf.json");
    std::fs::write(
        &conf,
        routes_conf(json!([{"dst": "192.168.0.0/16", "gw": "10.0.2.2"}])).to_string(),
    )
    .unwrap();
    let prev = format!("@{}", prev.display());
    for name in ["routes-py", "routes-js"] {
        let (code, text) = plugin_test(
            &built(name),
            &[
                "--config".as_ref(),
                conf.as_os_str(),
                "--prev-result".as_ref(),
                prev.as_ref(),
                "--faults".as_ref(),
            ],
        );
        assert_eq!(code, 0, "{name}: {text}");
        assert!(!text.contains("FAIL"), "{name}: {text}");
        for property in ["PASS add", "PASS faults-add", "PASS faults-del"] {
            assert!(text.contains(property), "{name}: no {property:?}\n{text}");
        }
    }
}

#[test]
fn the_python_and_javascript_examples_run_after_bridge_in_a_chain() {
    if !is_root("the_python_and_javascript_examples_run_after_bridge_in_a_chain") {
        return;
    }
    let sb = Sandbox::new("poly");
    sb.install(&plugin("bridge"), "bridge")
        .install(&plugin("host-local"), "host-local")
        .install(&built("routes-py"), "routes-py")
        .install(&built("routes-js"), "routes-js");
    let node = Netns::new("polyn");
    let ctr = Netns::new("polyc");
    let conf = sb.conf(
        "1.1.0",
        "polynet",
        json!([
            {"type": "bridge", "bridge": "polybr0", "isGateway": true,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.62.0.0/24"}]]}},
            {"type": "routes-py", "routes": [{"dst": "192.168.62.0/24", "gw": "10.62.0.1"}],
             "wasm": interpreter_limits()},
            {"type": "routes-js", "routes": [{"dst": "192.168.63.0/24", "gw": "10.62.0.1"}],
             "wasm": interpreter_limits()}
        ]),
    );
    let add = Invocation::new("ADD")
        .netns(ctr.path())
        .run_in(Some(&node.name), &conf);
    add.assert_ok();
    // Each plugin passed the result on with its route added.
    let routes = add.json()["routes"].to_string();
    for dst in ["192.168.62.0/24", "192.168.63.0/24"] {
        assert!(routes.contains(dst), "{routes}");
        let table = ctr.exec(&["ip", "route", "show", dst]);
        assert!(
            table.contains(&format!("{dst} via 10.62.0.1 dev eth0")),
            "{table}"
        );
    }
    Invocation::new("CHECK")
        .netns(ctr.path())
        .run_in(Some(&node.name), &conf)
        .assert_ok();
    // A route taken away behind the chain's back fails CHECK (bridge, which
    // checks every route of the result, notices first).
    ctr.exec(&["ip", "route", "del", "192.168.63.0/24"]);
    let check = Invocation::new("CHECK")
        .netns(ctr.path())
        .run_in(Some(&node.name), &conf);
    assert_eq!(check.error_code(), 999, "{check:?}");
    assert!(check.error_msg().contains("192.168.63.0/24"), "{check:?}");
    Invocation::new("DEL")
        .netns(ctr.path())
        .run_in(Some(&node.name), &conf)
        .assert_ok();
    assert_eq!(ctr.exec(&["ip", "route", "show", "192.168.62.0/24"]), "");
    assert!(!ctr.try_exec(&["ip", "link", "show", "eth0"]));

    // A config the example cannot use fails ADD with code 7 in either
    // language, and the chain before it is rolled back.
    for (ty, bad, says) in [
        (
            "routes-py",
            json!("192.168.62.0/24"),
            "routes is not a list",
        ),
        (
            "routes-js",
            json!([{"gw": "10.62.0.1"}]),
            "a route is an object",
        ),
    ] {
        let conf = sb.conf(
            "1.1.0",
            "polynet",
            json!([
                {"type": "bridge", "bridge": "polybr0", "isGateway": true,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.62.0.0/24"}]]}},
                {"type": ty, "routes": bad, "wasm": interpreter_limits()}
            ]),
        );
        let add = Invocation::new("ADD")
            .netns(ctr.path())
            .run_in(Some(&node.name), &conf);
        assert_eq!(add.error_code(), 7, "{ty}: {add:?}");
        assert!(add.error_msg().contains(says), "{ty}: {add:?}");
        assert!(!ctr.try_exec(&["ip", "link", "show", "eth0"]), "{ty}");
    }
}

/// One ADD of the hostile plugin doing `what`, alone in its chain.
fn hostile(sb: &Sandbox, ctr: &Netns, what: &str, deadline_ms: u64) -> (Output, Duration) {
    let mut limits = interpreter_limits();
    limits["deadlineMs"] = json!(deadline_ms);
    let conf = sb.conf(
        "1.1.0",
        "hostilenet",
        json!([{"type": "hostile-py", "do": what, "wasm": limits}]),
    );
    let started = Instant::now();
    let out = Invocation::new("ADD").netns(ctr.path()).run(&conf);
    (out, started.elapsed())
}

#[test]
fn a_hostile_python_plugin_ends_within_its_deadline_and_reaches_nothing() {
    if !is_root("a_hostile_python_plugin_ends_within_its_deadline_and_reaches_nothing") {
        return;
    }
    let sb = Sandbox::new("polyh");
    sb.install(&built("fixtures/hostile-py"), "hostile-py");
    let ctr = Netns::new("polyh");

    // Everything a plugin could reach without an import of the contract:
    // the node's files, its environment, a socket. (This call also
    // compiles the component, so the timed calls below load it cached.)
    let (out, _) = hostile(&sb, &ctr, "reach", 10_000);
    assert_eq!(out.error_code(), 100, "{out:?}");
    // The host names the plugin before its message.
    let msg = out.error_msg();
    let found: Vec<String> = serde_json::from_str(msg.trim_start_matches("hostile-py: "))
        .unwrap_or_else(|e| panic!("{e}: {out:?}"));
    let found = found.join("\n");
    for denied in ["file: ", "listdir: ", "socket: "] {
        let line = found.lines().find(|l| l.starts_with(denied)).unwrap();
        assert!(!line.contains(": got "), "{found}");
    }
    assert!(found.contains("env: got {}"), "{found}");

    // Every way of not answering ends as a CNI error, by the deadline (with
    // slack for starting the process and loading the cached component).
    const DEADLINE_MS: u64 = 1_500;
    for (what, code, says) in [
        ("loop", 999, "deadline"),
        ("sleep", 999, "deadline"),
        ("alloc", 999, "memory"),
        ("exit", 999, "exit status 0"),
    ] {
        let (out, took) = hostile(&sb, &ctr, what, DEADLINE_MS);
        assert_eq!(out.error_code(), code, "{what}: {out:?}");
        assert!(out.error_msg().contains(says), "{what}: {out:?}");
        assert!(
            took < Duration::from_millis(DEADLINE_MS + 3_000),
            "{what}: took {took:?}"
        );
    }
}

#[test]
fn a_javascript_plugin_that_keeps_the_http_client_is_refused_naming_the_import() {
    if !is_root("a_javascript_plugin_that_keeps_the_http_client_is_refused_naming_the_import") {
        return;
    }
    let sb = Sandbox::new("polyf");
    sb.install(&built("fixtures/routes-js-fetch"), "routes-js");
    let ctr = Netns::new("polyf");
    let conf = sb.conf(
        "1.1.0",
        "fetchnet",
        json!([{"type": "routes-js", "routes": [], "wasm": interpreter_limits()}]),
    );
    let out = Invocation::new("ADD").netns(ctr.path()).run(&conf);
    assert_eq!(out.error_code(), 7, "{out:?}");
    let msg = out.error_msg();
    assert!(msg.contains("routes-js"), "{msg}");
    assert!(msg.contains("imports wasi:http/"), "{msg}");
    assert!(msg.contains("does not grant"), "{msg}");
}
