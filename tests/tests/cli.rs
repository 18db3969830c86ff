//! The operator CLI: cnitool-like add/check/del, plugins, compile.

use std::process::Command;

use serde_json::json;
use wasm_cni_tests::{fixture, wasm_cni_bin, Sandbox};

fn cli(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(wasm_cni_bin())
        .args(args)
        .env_remove("CNI_COMMAND")
        .output()
        .expect("run wasm-cni");
    (
        out.status.code().expect("exit code"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn add_check_del_by_hand_with_a_conflist() {
    let sb = Sandbox::new("cli");
    sb.install(&fixture("fx"), "fx");
    let entry = sb.conf("1.1.0", "ignored", json!([{"type":"fx","tag":"byhand"}]));
    let conflist = json!({"cniVersion":"1.0.0","name":"clinet","plugins":[entry]});
    let file = sb.dir.join("net.conflist");
    std::fs::write(&file, conflist.to_string()).unwrap();
    let conf = file.to_str().unwrap();

    let (code, out, err) = cli(&["add", "--conf", conf, "--netns", "/run/netns/cli1"]);
    assert_eq!(code, 0, "{out}{err}");
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    // The conflist's name and version win over the entry's.
    assert_eq!(r["cniVersion"], "1.0.0");
    assert_eq!(r["interfaces"][0]["name"], "byhand");
    assert!(sb.state_dir().join("networks/clinet").is_dir());

    let (code, out, err) = cli(&["check", "--conf", conf, "--netns", "/run/netns/cli1"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = cli(&["del", "--conf", conf, "--netns", "/run/netns/cli1"]);
    assert_eq!(code, 0, "{out}{err}");
    let left = std::fs::read_dir(sb.state_dir().join("networks/clinet"))
        .unwrap()
        .count();
    assert_eq!(left, 0);
}

#[test]
fn a_failing_add_prints_the_cni_error_and_exits_1() {
    let sb = Sandbox::new("clifail");
    sb.install(&fixture("fx"), "fx");
    let entry = sb.conf(
        "1.1.0",
        "clif",
        json!([{"type":"fx","add":"fail","failCode":11}]),
    );
    let file = sb.dir.join("net.conf");
    std::fs::write(&file, entry.to_string()).unwrap();
    let (code, out, _) = cli(&[
        "add",
        "--conf",
        file.to_str().unwrap(),
        "--netns",
        "/run/netns/x",
    ]);
    assert_eq!(code, 1);
    let e: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(e["code"], 11);
    // ADD without a namespace is refused before anything runs.
    let (code, _, err) = cli(&["add", "--conf", file.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("--netns"), "{err}");
}

#[test]
fn plugins_lists_digest_world_and_cache_state_and_compile_fills_the_cache() {
    let sb = Sandbox::new("cliplugins");
    sb.install(&fixture("fx"), "fx");
    std::fs::write(sb.plugin_dir().join("broken.wasm"), b"not wasm").unwrap();
    let (plugin_dir, cache_dir) = (sb.plugin_dir(), sb.cache_dir());
    let dirs = [
        "--plugin-dir",
        plugin_dir.to_str().unwrap(),
        "--cache-dir",
        cache_dir.to_str().unwrap(),
    ];
    let (code, out, _) = cli(&[&["compile"][..], &dirs[..]].concat());
    // The broken plugin fails, fx compiles.
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("fx\tcompiled in"), "{out}");
    assert!(out.contains("broken\terror"), "{out}");
    let (_, out, _) = cli(&[&["plugins"][..], &dirs[..]].concat());
    let fx = out.lines().find(|l| l.starts_with("fx\t")).unwrap();
    assert!(fx.contains("cached=yes"), "{fx}");
    assert!(fx.contains("world=interface-plugin"), "{fx}");
    assert!(
        fx.contains("cni:plugin/log@0.2.2") && fx.contains("wit=0.2.2"),
        "{fx}"
    );
    assert!(fx.contains("sha256="), "{fx}");
    let (_, out, _) = cli(&[&["compile"][..], &dirs[..]].concat());
    assert!(out.contains("fx\talready cached"), "{out}");
}

#[test]
fn help_is_available_everywhere() {
    for args in [
        &["--help"][..],
        &["add", "--help"],
        &["plugins", "--help"],
        &["compile", "--help"],
    ] {
        let (code, out, _) = cli(args);
        assert_eq!(code, 0);
        assert!(out.contains("Usage"), "{out}");
    }
    let (code, _, err) = cli(&["frobnicate"]);
    assert_eq!(code, 2);
    assert!(err.contains("frobnicate"));
}

/// What whoever starts the engine controls here: its standard descriptors.
/// Started with stdout and stderr closed (a runtime's bug, or a parent that
/// means harm), the engine must not write its result or its log into a
/// file it opened itself (a lock, a record, a scope), which the next open
/// would otherwise get as descriptor 1 or 2; with stdout a pipe that nobody
/// reads, it must finish its call and end with its exit code, not be
/// killed by SIGPIPE at its first write.
#[test]
fn closed_or_unread_standard_descriptors_end_cleanly() {
    use std::io::Write;
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;
    let sb = Sandbox::new("stdfd");
    sb.install(&wasm_cni_tests::plugin("host-local"), "host-local");
    let conf = sb.conf(
        "1.1.0",
        "stdfdn",
        json!([{"type": "host-local", "ipam": {"type": "host-local",
            "ranges": [[{"subnet": "10.9.0.0/24"}]],
            "dataDir": sb.state_dir().join("ipam")}}]),
    );
    let engine = wasm_cni_bin();
    let run = |redirect: &str, verb: &str, id: &str, stdout: Stdio| {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!("exec \"$0\" {redirect}"))
            .arg(&engine)
            .env("WASM_CNI_LOG", "debug")
            .env("CNI_COMMAND", verb)
            .env("CNI_CONTAINERID", id)
            .env("CNI_NETNS", "/run/netns/none")
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", "/usr/lib/cni")
            .stdin(Stdio::piped())
            .stdout(stdout)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let _ = child
            .stdin
            .take()
            .unwrap()
            .write_all(conf.to_string().as_bytes());
        child.wait_with_output().unwrap()
    };
    let files = |dir: &std::path::Path| -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        let mut todo = vec![dir.to_path_buf()];
        while let Some(d) = todo.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    todo.push(p);
                } else {
                    out.push(p);
                }
            }
        }
        out
    };

    for (n, id) in ["c1", "c2", "c3"].iter().enumerate() {
        let out = run(">&- 2>&-", "ADD", id, Stdio::piped());
        assert_eq!(out.status.code(), Some(0), "ADD {n}: {out:?}");
    }
    let state = files(&sb.state_dir());
    assert!(state.len() >= 5, "{state:?}");
    for file in state {
        let bytes = std::fs::read(&file).unwrap();
        let name = file.to_string_lossy();
        if name.ends_with(".lock") {
            assert!(
                bytes.is_empty(),
                "{name}: {}",
                String::from_utf8_lossy(&bytes)
            );
        } else if !name.contains("/cache/") {
            let parsed: Result<serde_json::Value, _> = serde_json::from_slice(&bytes);
            assert!(
                parsed.is_ok(),
                "{name}: {}",
                String::from_utf8_lossy(&bytes)
            );
        }
    }

    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = run("", "ADD", "c4", writer.into());
    assert_eq!(out.status.signal(), None, "killed: {out:?}");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(sb.state_dir().join("networks/stdfdn/c4:eth0.json").exists());
}
