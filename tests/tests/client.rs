//! The thin client (`wasm-cni-client`) installed as a node installs it: as
//! the CNI plugin `wasm-cni`, the engine beside it as `wasm-cni-engine`.
//! It forwards calls to the daemon, becomes the engine for everything else
//! (a network without the daemon, `prefer` with none listening, operator
//! commands), and keeps its refusal paths' codes and messages: a daemon that
//! is down, one that answers garbage, one that closes mid-answer. (The whole
//! daemon pass of `cargo xtask test` also runs through it.) And what nodes
//! run carries no test fake, model or fuzz harness: those live in
//! `wasm-cni-plugin-test`.

use std::io::{Read, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use wasm_cni_tests::{
    fixture, is_root, output_of_copied, run_program, wasm_cni_bin, Daemon, Netns, Sandbox, TempDir,
};

/// `wasm-cni-client` and the engine, as `wasm-cni` and `wasm-cni-engine`
/// in a bin directory of their own.
struct Layout {
    dir: TempDir,
}

impl Layout {
    fn new() -> Layout {
        let engine = wasm_cni_bin();
        let client = engine.with_file_name("wasm-cni-client");
        assert!(
            client.is_file(),
            "{} missing: cargo xtask test builds it",
            client.display()
        );
        let dir = TempDir::new("layout");
        std::fs::copy(&client, dir.join("wasm-cni")).unwrap();
        std::fs::copy(&engine, dir.join("wasm-cni-engine")).unwrap();
        Layout { dir }
    }

    fn client(&self) -> PathBuf {
        self.dir.join("wasm-cni")
    }
}

/// Run the client as a runtime would, for `conf`: exit code, the answer
/// (null when there is none), stderr.
fn call(layout: &Layout, inv: &[(&str, &str)], conf: &Value) -> (i32, Value, String) {
    let out = run_program(
        &layout.client(),
        None,
        &[],
        inv,
        conf.to_string().as_bytes(),
    );
    let v = if out.stdout.trim().is_empty() {
        Value::Null
    } else {
        out.json()
    };
    (out.code, v, out.stderr)
}

fn env<'a>(verb: &'a str, netns: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("CNI_COMMAND", verb),
        ("CNI_CONTAINERID", "c1"),
        ("CNI_NETNS", netns),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", "/usr/lib/cni"),
    ]
}

#[test]
fn the_client_forwards_or_becomes_the_engine() {
    if !is_root("the_client_forwards_or_becomes_the_engine") {
        return;
    }
    let layout = Layout::new();
    let sb = Sandbox::new("clnt");
    sb.install(&fixture("fx"), "fx");
    let node = Netns::new("clntn");
    let ctr = Netns::new("clntc");
    let d = Daemon::start(&node.name, &[]);
    let base = sb.conf(
        "1.1.0",
        "clnet",
        json!([{"type": "fx", "tag": "viaclient"}]),
    );
    let path = ctr.path();
    for mode in ["require", "prefer", "off"] {
        let conf = d.conf(&base, mode);
        let (code, r, err) = call(&layout, &env("ADD", &path), &conf);
        assert_eq!(code, 0, "{mode}: {r} {err}");
        assert_eq!(r["interfaces"][0]["name"], "viaclient", "{mode}");
        let (code, _, err) = call(&layout, &env("DEL", &path), &conf);
        assert_eq!(code, 0, "{mode}: {err}");
    }
    let served = d.log().matches("event=\"request\"").count()
        + d.log().matches("\"event\":\"request\"").count();
    assert_eq!(
        served,
        4,
        "require and prefer went to the daemon:\n{}",
        d.log()
    );
    // An operator's command through the client is the engine's.
    let out = output_of_copied(
        Command::new(layout.client())
            .args(["plugins", "--plugin-dir"])
            .arg(sb.plugin_dir())
            .arg("--cache-dir")
            .arg(sb.cache_dir())
            .env_remove("CNI_COMMAND"),
    )
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("fx"),
        "{out:?}"
    );
    // VERSION needs no daemon and no config.
    let (code, r, _) = call(&layout, &[("CNI_COMMAND", "VERSION")], &json!({}));
    assert_eq!(code, 0);
    assert!(r["supportedVersions"]
        .as_array()
        .is_some_and(|v| !v.is_empty()));
}

/// A stand-in for a daemon that accepts and then misbehaves.
fn bad_daemon(socket: &Path, answer: &'static [u8]) -> std::thread::JoinHandle<()> {
    let listener = UnixListener::bind(socket).unwrap();
    std::thread::spawn(move || {
        if let Ok((mut s, _)) = listener.accept() {
            let mut buf = [0u8; 4096];
            let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
            let _ = s.read(&mut buf);
            let _ = s.write_all(answer);
        }
    })
}

#[test]
fn the_clients_refusals_keep_their_codes_and_messages() {
    let layout = Layout::new();
    let dir = TempDir::new("clntbad");
    let conf = |socket: &Path, mode: &str| {
        json!({"cniVersion": "1.1.0", "name": "clbad", "type": "wasm-cni",
               "daemon": mode, "daemonSocket": socket, "daemonWaitMs": 300,
               "chain": [{"type": "fx"}]})
    };
    let none = dir.join("none.sock");
    let (code, r, _) = call(&layout, &env("ADD", ""), &conf(&none, "require"));
    assert_eq!((code, r["code"].clone()), (1, json!(11)), "{r}");
    let msg = r["msg"].as_str().unwrap();
    assert!(
        msg.starts_with("the wasm-cni daemon is not reachable at")
            && msg.ends_with("(waited 300 ms)"),
        "{r}"
    );
    let mut typo = conf(&none, "require");
    typo["daemonWaitMs"] = json!("5s");
    let (_, r, _) = call(&layout, &env("DEL", ""), &typo);
    assert_eq!(r["code"], 7, "{r}");
    let (_, r, _) = call(&layout, &env("STATUS", ""), &conf(&none, "require"));
    assert_eq!(r["code"], 50, "{r}");
    let (_, r, _) = call(&layout, &env("ADD", ""), &conf(&none, "sometimes"));
    assert_eq!(r["code"], 7, "{r}");
    assert_eq!(r["cniVersion"], "1.1.0");
    for (name, answer) in [
        ("garbage", &b"HTTP/1.1 400 Bad Request\r\n\r\n"[..]),
        (
            "cut",
            &b"WCNS\x01\x00\x00\x00\x00\x00\x00\x00\x40{\"cni"[..],
        ),
    ] {
        let socket = dir.join(format!("{name}.sock"));
        let server = bad_daemon(&socket, answer);
        let (code, r, _) = call(&layout, &env("ADD", ""), &conf(&socket, "require"));
        assert_eq!((code, r["code"].clone()), (1, json!(11)), "{name}: {r}");
        assert!(
            r["msg"].as_str().unwrap().contains("gave no answer"),
            "{name}: {r}"
        );
        server.join().unwrap();
    }
}

/// A binary's symbols: from its split-out debug file (`.debug/<name>.debug`
/// beside it, where `cargo xtask` puts them) or from the binary itself.
fn symbols(bin: &Path) -> String {
    let name = bin.file_name().unwrap().to_string_lossy().into_owned();
    let split = bin.with_file_name(".debug").join(format!("{name}.debug"));
    let file = if split.is_file() {
        split
    } else {
        bin.to_path_buf()
    };
    let out = Command::new("nm")
        .arg("--demangle")
        .arg(&file)
        .output()
        .expect("nm (binutils)");
    assert!(out.status.success(), "nm {}: {out:?}", file.display());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn what_nodes_run_carries_no_fake_model_or_fuzz_harness() {
    let engine = wasm_cni_bin();
    let fakes = [
        // The kernel and filter models live in the model crate.
        "wasm_cni_model::net::memory::",
        "wasm_cni_model::filter::memory::",
        "wasm_cni_store::memory::",
        "wasm_cni_store::state::memory::",
        "wasm_cni_engine::sandbox::harness::",
        "wasm_cni_testing::",
    ];
    let node = symbols(&engine);
    // A control: these are the names the compiler gives, and the listing
    // has them (a stripped binary without its debug file would pass
    // anything).
    assert!(
        node.contains("wasm_cni_engine::edge::"),
        "no symbols for {}",
        engine.display()
    );
    for f in fakes {
        assert!(!node.contains(f), "{} has {f}", engine.display());
    }
    // They are where plugin authors find them.
    let dev = engine.with_file_name("wasm-cni-plugin-test");
    assert!(
        dev.is_file(),
        "{} missing: cargo xtask builds it",
        dev.display()
    );
    let dev = symbols(&dev);
    assert!(dev.contains("wasm_cni_model::net::memory::"));
    assert!(dev.contains("wasm_cni_testing::"));
    let client = engine.with_file_name("wasm-cni-client");
    let c = symbols(&client);
    assert!(
        c.contains("wasm_cni_client::forward::"),
        "no symbols for the client"
    );
    assert!(!c.contains("wasmtime"), "the client links the engine");
}

/// The client is what a runtime executes for every call of a daemon
/// network, so what its start costs is paid per call. It is a static PIE
/// (no loader to find on the node, its code still at random addresses) and
/// carries none of glibc's start-up probe of the CPU's caches, whose `cpuid`
/// instructions each trap to the hypervisor on a VM (measured in
/// host/bench/results/findings.md). The engine, still linked with glibc,
/// is the control: the probe's names are what the listing would show.
#[test]
fn the_client_starts_without_a_loader_or_glibcs_cpu_probe() {
    let engine = wasm_cni_bin();
    let client = engine.with_file_name("wasm-cni-client");
    let out = Command::new("readelf")
        .arg("-lW")
        .arg(&client)
        .output()
        .expect("readelf (binutils)");
    assert!(out.status.success(), "readelf: {out:?}");
    let headers = String::from_utf8_lossy(&out.stdout);
    assert!(
        headers.contains("DYN (Position-Independent Executable"),
        "the client is not position-independent:\n{headers}"
    );
    assert!(
        !headers.contains("INTERP"),
        "the client asks for a loader:\n{headers}"
    );
    let probe = ["intel_check_word", "handle_amd", "__libc_early_init"];
    let control = symbols(&engine);
    for p in probe {
        assert!(control.contains(p), "no {p} in the engine's listing");
    }
    let c = symbols(&client);
    assert!(c.contains("wasm_cni_client::"), "no symbols for the client");
    for p in probe {
        assert!(!c.contains(p), "the client links glibc's {p}");
    }
}

#[test]
fn a_missing_sibling_is_a_clear_error_not_a_hang_or_a_panic() {
    let dir = TempDir::new("lonely");
    // The client without the engine beside it: a CNI call it would hand to
    // the engine is a CNI error on stdout (999, the engine's name in it), an
    // operator command a line on stderr; both exit 1.
    let client = dir.join("wasm-cni");
    std::fs::copy(wasm_cni_bin().with_file_name("wasm-cni-client"), &client).unwrap();
    let lonely = Layout { dir };
    let conf = json!({"cniVersion": "1.1.0", "name": "n", "type": "wasm-cni", "chain": []});
    let (code, r, err) = call(&lonely, &env("ADD", ""), &conf);
    assert_eq!((code, r["code"].clone()), (1, json!(999)), "{r} {err}");
    assert!(
        r["msg"].as_str().unwrap().contains("wasm-cni-engine"),
        "{r}"
    );
    let out = output_of_copied(Command::new(lonely.client()).arg("plugins")).unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("wasm-cni-engine"),
        "{out:?}"
    );
    // The engine without `wasm-cni-plugin-test` beside it: `plugin test`
    // says where it runs.
    let engine = lonely.dir.join("wasm-cni-engine");
    std::fs::copy(wasm_cni_bin(), &engine).unwrap();
    let out = output_of_copied(
        Command::new(&engine)
            .args(["plugin", "test", "x.wasm", "--config", "c.json"])
            .env_remove("CNI_COMMAND"),
    )
    .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("wasm-cni-plugin-test"),
        "{out:?}"
    );
}
