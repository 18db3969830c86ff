//! The component runtime with fixture guests: results, traps, deadlines,
//! memory caps, WASI components, the artifact cache. No root needed.

use std::time::Duration;

use serde_json::json;
use wasm_cni_tests::{fixture, plugin_logs, Invocation, Sandbox};

fn fx_sandbox(tag: &str) -> Sandbox {
    let sb = Sandbox::new(tag);
    sb.install(&fixture("fx"), "fx");
    sb
}

#[test]
fn a_plugin_returns_a_result() {
    let sb = fx_sandbox("ok");
    let conf = sb.conf("1.1.0", "okn", json!([{"type":"fx","tag":"solo"}]));
    let out = Invocation::new("ADD").netns("/run/netns/c1").run(&conf);
    out.assert_ok();
    let r = out.json();
    assert_eq!(
        r["interfaces"],
        json!([{"name":"solo","sandbox":"/run/netns/c1"}])
    );
}

fn assert_clean_abort(out: &wasm_cni_tests::Output, needle: &str) {
    // The host itself exits normally (no signal, exit status 1) with a CNI
    // error naming the plugin and the cause.
    assert_eq!(out.error_code(), 999, "{out:?}");
    let msg = out.error_msg();
    assert!(msg.contains("\"fx\""), "plugin not named: {msg}");
    assert!(msg.contains(needle), "cause not named: {msg}");
}

#[test]
fn a_trap_is_a_clean_error() {
    let sb = fx_sandbox("trap");
    for behaviour in ["trap", "panic"] {
        let conf = sb.conf("1.1.0", "trapn", json!([{"type":"fx","add":behaviour}]));
        let out = Invocation::new("ADD").run(&conf);
        assert_clean_abort(&out, "trapped");
    }
}

#[test]
fn an_endless_loop_hits_the_deadline_in_time() {
    let sb = fx_sandbox("spin");
    let conf = sb.conf(
        "1.1.0",
        "spinn",
        json!([{"type":"fx","add":"spin","wasm":{"deadlineMs":300}}]),
    );
    let out = Invocation::new("ADD").run(&conf);
    assert_clean_abort(&out, "deadline of 300 ms exceeded");
    // Deadline plus compile time plus slack; a missed deadline would hang.
    assert!(
        out.elapsed < Duration::from_secs(5),
        "took {:?}",
        out.elapsed
    );
}

#[test]
fn unbounded_memory_growth_hits_the_cap() {
    let sb = fx_sandbox("hog");
    let conf = sb.conf(
        "1.1.0",
        "hogn",
        json!([{"type":"fx","add":"hog","wasm":{"memoryBytes": 16 << 20}}]),
    );
    let out = Invocation::new("ADD").run(&conf);
    assert_clean_abort(&out, "memory limit of 16777216 bytes exceeded");
}

#[test]
fn a_plugin_error_keeps_its_code_and_names_the_plugin() {
    let sb = fx_sandbox("fail");
    let conf = sb.conf(
        "1.1.0",
        "failn",
        json!([{"type":"fx","tag":"t","add":"fail","failCode":11}]),
    );
    let out = Invocation::new("ADD").run(&conf);
    assert_eq!(out.error_code(), 11);
    assert_eq!(out.error_msg(), "fx: t: add failed");
    assert_eq!(out.json()["details"], "chain[0] (fx)");
}

#[test]
fn a_wasi_component_instantiates_with_no_authority() {
    let sb = Sandbox::new("wasi");
    sb.install(&fixture("fx-wasi"), "fx-wasi");
    let conf = sb.conf("1.1.0", "wasin", json!([{"type":"fx-wasi"}]));
    let out = Invocation::new("ADD").run(&conf);
    out.assert_ok();
    // The fixture names its interface after what it managed to reach.
    assert_eq!(
        out.json()["interfaces"][0]["name"],
        "denied",
        "{}",
        out.stdout
    );
}

/// What a plugin author controls here: the component's imports. What they
/// must not gain: a component that imports anything beyond the current
/// contract linked without WASI's monotonic clock being the host's own,
/// bounded by the call's deadline (`sandbox_limits` has that sleep end on
/// time). A chain of SDK components links neither WASI nor 0.1.0; the
/// first WASI component of a process links both, once, and still finds no
/// authority.
#[test]
fn wasi_is_linked_only_once_a_component_imports_it() {
    let sb = fx_sandbox("wlink");
    sb.install(&fixture("fx-wasi"), "fx-wasi");
    let linked = |stderr: &str| stderr.matches("linking WASI").count();
    let conf = sb.conf(
        "1.1.0",
        "wlinkn",
        json!([{"type":"fx"},{"type":"fx","tag":"again"}]),
    );
    let out = Invocation::new("ADD")
        .id("sdk")
        .env("WASM_CNI_LOG", "debug")
        .run(&conf);
    out.assert_ok();
    assert_eq!(linked(&out.stderr), 0, "{}", out.stderr);
    let conf = sb.conf(
        "1.1.0",
        "wlinkw",
        json!([{"type":"fx"},{"type":"fx-wasi"},{"type":"fx-wasi","tag":"again"}]),
    );
    let out = Invocation::new("ADD")
        .id("wasi")
        .env("WASM_CNI_LOG", "debug")
        .run(&conf);
    out.assert_ok();
    assert_eq!(linked(&out.stderr), 1, "{}", out.stderr);
    let result = out.json();
    let names: Vec<&str> = result["interfaces"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["name"].as_str())
        .collect();
    assert!(names.contains(&"denied"), "{}", out.stdout);
}

fn cache_line(stderr: &str) -> (u64, u64) {
    let line = stderr
        .lines()
        .find(|l| l.contains("artifact cache:"))
        .unwrap_or_else(|| panic!("no cache accounting in stderr: {stderr}"));
    let nums: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|s| s.parse().ok())
        .collect();
    (nums[0], nums[1])
}

#[test]
fn the_second_process_loads_the_artifact_instead_of_compiling() {
    let sb = fx_sandbox("cache");
    let conf = sb.conf(
        "1.1.0",
        "cachen",
        json!([{"type":"fx"},{"type":"fx","tag":"again"}]),
    );
    let first = Invocation::new("ADD")
        .id("c1")
        .env("WASM_CNI_LOG", "debug")
        .run(&conf);
    first.assert_ok();
    // One component used twice in the chain is compiled once.
    assert_eq!(cache_line(&first.stderr), (1, 0), "{}", first.stderr);
    let second = Invocation::new("ADD")
        .id("c2")
        .env("WASM_CNI_LOG", "debug")
        .run(&conf);
    second.assert_ok();
    assert_eq!(cache_line(&second.stderr), (0, 1), "{}", second.stderr);
    // (The cache may also hold a `.source` digest record per plugin.)
    let artifacts = std::fs::read_dir(sb.cache_dir())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
        })
        .count();
    assert_eq!(artifacts, 1);
}

#[test]
fn a_changed_component_is_recompiled_not_served_stale() {
    let sb = fx_sandbox("stale");
    let conf = sb.conf("1.1.0", "stalen", json!([{"type":"fx"}]));
    Invocation::new("ADD").id("s1").run(&conf).assert_ok();
    // Replace fx with a different component under the same type name.
    sb.install(&fixture("fx-wasi"), "fx");
    let out = Invocation::new("ADD")
        .id("s2")
        .env("WASM_CNI_LOG", "debug")
        .run(&conf);
    out.assert_ok();
    assert_eq!(cache_line(&out.stderr), (1, 0));
    assert_eq!(out.json()["interfaces"][0]["name"], "denied");
}

#[test]
fn an_untrusted_cache_directory_is_not_used() {
    use std::os::unix::fs::PermissionsExt;
    let sb = fx_sandbox("untrusted");
    std::fs::set_permissions(sb.cache_dir(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let conf = sb.conf("1.1.0", "untr", json!([{"type":"fx"}]));
    for id in ["u1", "u2"] {
        let out = Invocation::new("ADD")
            .id(id)
            .env("WASM_CNI_LOG", "debug")
            .run(&conf);
        out.assert_ok();
        assert_eq!(cache_line(&out.stderr), (1, 0), "{}", out.stderr);
        assert!(out.stderr.contains("writable"), "{}", out.stderr);
    }
    assert_eq!(std::fs::read_dir(sb.cache_dir()).unwrap().count(), 0);
}

#[test]
fn plugin_logs_reach_stderr_tagged_with_the_plugin() {
    let sb = fx_sandbox("logs");
    let conf = sb.conf("1.1.0", "logn", json!([{"type":"fx","tag":"hello"}]));
    let out = Invocation::new("ADD")
        .env("WASM_CNI_LOG", "info")
        .run(&conf);
    out.assert_ok();
    assert_eq!(
        plugin_logs(&out.stderr),
        vec![("fx".to_string(), "hello add".to_string())]
    );
    // At the default level, info is quiet.
    let out = Invocation::new("ADD").id("q").run(&conf);
    assert!(plugin_logs(&out.stderr).is_empty(), "{}", out.stderr);
}
