//! Artifacts: what is loaded is what the config pinned. A pinned digest
//! must match, a planted compiled artifact is never loaded, and a component
//! too large or too costly to compile is refused, each as a clean CNI error
//! with the world as it was.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::json;
use sha2::{Digest, Sha256};
use wasm_cni_tests::hostile::{add, everything, sandbox_with};
use wasm_cni_tests::{fixture, is_root, sh, Invocation, Output, Sandbox};

fn sha256(path: &Path) -> String {
    Sha256::digest(std::fs::read(path).unwrap())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `(compiled, loaded)` from the host's debug line.
fn cache_stats(out: &Output) -> (u64, u64) {
    let line = out
        .stderr
        .lines()
        .find(|l| l.contains("artifact cache:"))
        .unwrap_or_else(|| panic!("no cache accounting: {}", out.stderr));
    let n: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|s| s.parse().ok())
        .collect();
    (n[0], n[1])
}

#[test]
fn a_pinned_digest_must_match() {
    let sb = Sandbox::new("pin");
    sb.install(&fixture("fx-hostile"), "fx-hostile");
    let actual = sha256(&sb.plugin_dir().join("fx-hostile.wasm"));
    let wrong = "ab".repeat(32);
    let pinned =
        |pin: &str| json!({"type": "fx-hostile", "attack": "none", "wasm": {"sha256": pin}});
    let out = Invocation::new("ADD").run(&sb.conf("1.1.0", "pin", json!([pinned(&wrong)])));
    assert_eq!(out.error_code(), 7, "{out:?}");
    let msg = out.error_msg();
    assert!(
        msg.contains("fx-hostile") && msg.contains("sha256 mismatch"),
        "{msg}"
    );
    assert!(msg.contains(&wrong) && msg.contains(&actual), "{msg}");
    // Nothing was loaded, so nothing was compiled into the cache.
    assert_eq!(std::fs::read_dir(sb.cache_dir()).unwrap().count(), 0);
    // Upper case is the same digest.
    let out = Invocation::new("ADD").run(&sb.conf(
        "1.1.0",
        "pin",
        json!([pinned(&actual.to_uppercase())]),
    ));
    out.assert_ok();
    // The IPAM delegate's pin is `ipam.wasm.sha256`.
    let conf = sb.conf(
        "1.1.0",
        "pin",
        json!([{"type": "fx-hostile", "attack": "none",
                "ipam": {"type": "fx-hostile", "wasm": {"sha256": wrong}}}]),
    );
    sb.install(&fixture("fx"), "fx");
    let mut conf = conf;
    conf["chain"][0]["type"] = json!("fx");
    conf["chain"][0]["callIpam"] = json!(true);
    let out = Invocation::new("ADD").id("ipam").run(&conf);
    assert_eq!(out.error_code(), 7, "{out:?}");
    let msg = out.error_msg();
    assert!(msg.contains(&wrong) && msg.contains(&actual), "{msg}");
}

#[test]
fn a_planted_artifact_is_never_loaded() {
    let sb = Sandbox::new("plant");
    sb.install(&fixture("fx-hostile"), "fx-hostile");
    sb.install(&fixture("fx-wasi"), "fx-wasi");
    let run = |plugin: &str| {
        let conf = sb.conf(
            "1.1.0",
            "plant",
            json!([{"type": plugin, "attack": "none"}]),
        );
        let out = Invocation::new("ADD")
            .env("WASM_CNI_LOG", "debug")
            .run(&conf);
        out.assert_ok();
        out
    };
    run("fx-hostile");
    run("fx-wasi");
    let digest = sha256(&sb.plugin_dir().join("fx-hostile.wasm"));
    let artifact_of = |digest: &str| {
        std::fs::read_dir(sb.cache_dir())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                name.starts_with(digest) && name.ends_with(".cwasm")
            })
            .unwrap()
    };
    let mine = artifact_of(&digest);
    let theirs = artifact_of(&sha256(&sb.plugin_dir().join("fx-wasi.wasm")));
    let genuine = std::fs::read(&mine).unwrap();
    assert_eq!(cache_stats(&run("fx-hostile")), (0, 1));

    // Another component's artifact under this one's name: its trailer
    // records the other digest.
    std::fs::copy(&theirs, &mine).unwrap();
    let out = run("fx-hostile");
    assert_eq!(cache_stats(&out), (1, 0), "{}", out.stderr);
    assert!(
        out.stderr.contains("trailer does not record"),
        "{}",
        out.stderr
    );
    assert_eq!(out.json()["interfaces"][0]["name"], "calm");

    // Bytes anyone could have written (they would forge the trailer too):
    // group- or world-writable, or owned by another user.
    std::fs::write(&mine, &genuine).unwrap();
    std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = run("fx-hostile");
    assert_eq!(cache_stats(&out), (1, 0), "{}", out.stderr);
    assert!(
        out.stderr.contains("group- or world-writable"),
        "{}",
        out.stderr
    );
    if is_root("a_planted_artifact_is_never_loaded (foreign owner)") {
        std::fs::write(&mine, &genuine).unwrap();
        std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o644)).unwrap();
        sh(&["chown", "65534:65534", mine.to_str().unwrap()]);
        let out = run("fx-hostile");
        assert_eq!(cache_stats(&out), (1, 0), "{}", out.stderr);
        assert!(out.stderr.contains("owned by uid 65534"), "{}", out.stderr);
    }
    // Each refused artifact was replaced by one of our own.
    assert_eq!(cache_stats(&run("fx-hostile")), (0, 1));
}

#[test]
fn a_component_too_large_or_too_costly_to_compile_is_refused() {
    let Some((sb, pod)) = sandbox_with("tb8", &[], &["bridge"]) else {
        return;
    };
    // 17 MB of bytes: refused before it is read, let alone compiled.
    std::fs::write(sb.plugin_dir().join("huge.wasm"), vec![0u8; 17 << 20]).unwrap();
    let huge = sb.conf("1.1.0", "tbnet8", json!([{"type": "huge"}]));
    let out = pod.run(add("h1"), &huge);
    assert_eq!(out.error_code(), 7, "{out:?}");
    assert!(
        out.error_msg()
            .contains("17825792 bytes is over the limit of 16777216 (wasm.maxComponentBytes)"),
        "{}",
        out.error_msg()
    );
    assert!(out.elapsed < Duration::from_secs(1), "{:?}", out.elapsed);
    // A real component under bounds it cannot meet: the compiler is
    // stopped at the bound, and nothing is cached.
    for (limit, value, why) in [
        (
            "compileMs",
            5,
            "compiling took more than 5 ms of CPU time (wasm.compileMs)",
        ),
        (
            "compileMemoryBytes",
            8 << 20,
            "compiling needed more than 8388608 bytes of memory (wasm.compileMemoryBytes)",
        ),
    ] {
        let conf = sb.conf(
            "1.1.0",
            "tbnet8",
            json!([{"type": "bridge", "bridge": "tbbr8", "wasm": {limit: value}}]),
        );
        let before = everything(&sb, &pod, &[]);
        let out = pod.run(add("b1"), &conf);
        assert_eq!(out.error_code(), 7, "{out:?}");
        assert!(out.error_msg().contains(why), "{}", out.error_msg());
        assert!(out.elapsed < Duration::from_secs(2), "{:?}", out.elapsed);
        assert_eq!(before, everything(&sb, &pod, &[]));
        let cached: Vec<_> = std::fs::read_dir(sb.cache_dir())
            .unwrap()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
            .collect();
        assert!(cached.is_empty(), "{cached:?}");
    }
    // The operator's own commands take the same bounds.
    let out = Command::new(wasm_cni_tests::wasm_cni_bin())
        .arg("compile")
        .arg("--plugin-dir")
        .arg(sb.plugin_dir())
        .arg("--cache-dir")
        .arg(sb.cache_dir())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(
        text.contains("huge\terror:") && text.contains("wasm.maxComponentBytes"),
        "{text}"
    );
    assert!(text.contains("bridge\tcompiled"), "{text}");
}

/// The engine itself (in a daemon-mode layout, the one beside the client).
fn engine_bin() -> std::path::PathBuf {
    let bin = wasm_cni_tests::wasm_cni_bin();
    let beside = bin.with_file_name("wasm-cni-engine");
    if beside.is_file() {
        beside
    } else {
        bin
    }
}

/// A component Cranelift takes a while over: one core function of `n`
/// additions. It never runs (it exports nothing a plugin must).
fn slow_to_compile(n: usize) -> Vec<u8> {
    let body = "local.get 0 i32.const 7 i32.mul i32.const 1 i32.add local.set 0\n".repeat(n);
    wat::parse_str(format!(
        "(component (core module (func (export \"f\") (param i32) (result i32)\n{body} local.get 0)))"
    ))
    .unwrap()
}

/// Processes whose program is `exe`.
fn running(exe: &Path) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|p| p == exe))
        .collect()
}

/// A process of one call compiles the components its chain will need at
/// once (the IPAM delegate's while the first plugin's compiles), with the
/// outcomes loading them in turn would have had; a compile it started
/// ahead of a step it never reached does not outlive it.
///
/// What could go wrong here: a failure reported differently, or not at its
/// step; a compile left running on the node after the call returned (CPU
/// and memory nobody accounts for); the call waiting for a compile it does
/// not need.
#[test]
fn a_cold_chain_compiles_ahead_and_leaves_no_compile_behind() {
    let sb = Sandbox::new("ahead");
    sb.install(&fixture("fx"), "fx");
    sb.install(&fixture("fx-hostile"), "fx-hostile");
    std::fs::write(sb.plugin_dir().join("slow.wasm"), slow_to_compile(300_000)).unwrap();
    // The cache records the digest of a file that has not changed for 2 s
    // (a racy one is hashed at each load, and then loaded ahead): let the
    // files be installed a while ago, as a node's are.
    std::thread::sleep(Duration::from_millis(2_100));
    // A copy of the engine: its compile children are this test's alone.
    let dir = wasm_cni_tests::TempDir::new("ahead-bin");
    let engine = dir.join("wasm-cni");
    std::fs::copy(engine_bin(), &engine).unwrap();
    let engine = engine.canonicalize().unwrap();
    let run = |id: &str, chain: serde_json::Value| {
        let conf = sb.conf("1.1.0", "ahead", chain);
        wasm_cni_tests::run_program(
            &engine,
            None,
            &[],
            &[
                ("CNI_COMMAND", "ADD"),
                ("CNI_CONTAINERID", id),
                ("CNI_NETNS", "/run/netns/none"),
                ("CNI_IFNAME", "eth0"),
                ("CNI_PATH", "/usr/lib/cni"),
                ("WASM_CNI_LOG", "debug"),
            ],
            &serde_json::to_vec(&conf).unwrap(),
        )
    };
    let delegating = |ipam_wasm: serde_json::Value| {
        json!([{"type": "fx", "callIpam": true, "attack": "none",
                "ipam": {"type": "fx-hostile", "wasm": ipam_wasm}}])
    };

    // Its own compile limits hold for a delegate compiled ahead: the same
    // error, at the delegation, and nothing cached for it.
    let out = run("lim", delegating(json!({"compileMemoryBytes": 8 << 20})));
    assert_eq!(out.error_code(), 7, "{out:?}");
    assert!(
        out.error_msg().contains("fx-hostile")
            && out
                .error_msg()
                .contains("compiling needed more than 8388608 bytes of memory"),
        "{}",
        out.error_msg()
    );
    assert!(!out.stderr.contains("loaded ahead"), "{}", out.stderr);

    // Cold: the delegate is compiled ahead, the first plugin in its turn.
    let out = run("cold", delegating(json!({})));
    out.assert_ok();
    assert!(
        out.stderr.contains("fx-hostile: loaded ahead of its step"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("fx: loaded ahead"), "{}", out.stderr);
    // fx was compiled by the call that failed above.
    assert_eq!(cache_stats(&out), (1, 1), "{}", out.stderr);
    // Warm: nothing to compile, so nothing ahead.
    let out = run("warm", delegating(json!({})));
    out.assert_ok();
    assert!(!out.stderr.contains("loaded ahead"), "{}", out.stderr);
    assert_eq!(cache_stats(&out), (0, 2), "{}", out.stderr);

    // The first plugin fails while the next one still compiles: the call
    // returns without waiting for it, and the compile goes with the call.
    // (It fails at its deadline, by when the compile has all its input.)
    let first = json!({"type": "fx-hostile", "attack": "spin", "wasm": {"deadlineMs": 300}});
    let slow = json!({"type": "slow",
                      "wasm": {"compileMs": 60_000, "compileMemoryBytes": 2u64 << 30}});
    let doomed = json!([first, slow]);
    let out = run("spin", json!([first]));
    assert_eq!(out.error_code(), 999, "{out:?}");
    let started = std::time::Instant::now();
    let out = run("doomed", doomed);
    let returned = started.elapsed();
    assert_eq!(out.error_code(), 999, "{out:?}");
    assert!(
        out.error_msg().contains("fx-hostile"),
        "{}",
        out.error_msg()
    );
    let mut left = running(&engine);
    let until = std::time::Instant::now() + Duration::from_millis(500);
    while !left.is_empty() && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
        left = running(&engine);
    }
    assert!(left.is_empty(), "a compile outlived its call: {left:?}");
    // Compiled in full, it takes far longer than the call took.
    let started = std::time::Instant::now();
    let out = run("slow", json!([slow]));
    let compile = started.elapsed();
    assert_eq!(out.error_code(), 7, "{out:?}");
    assert!(
        out.stderr.contains("artifact cache: 1 compiled"),
        "{}",
        out.stderr
    );
    eprintln!("doomed call {returned:?}, the slow compile {compile:?}");
    assert!(
        returned * 2 < compile,
        "the call waited: {returned:?}, the compile {compile:?}"
    );
}
