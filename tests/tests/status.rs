//! STATUS with its cause: every reason a node cannot serve an ADD is code 50
//! and says what it is; a bridge that is down is 51 (the containers already
//! on it have no connectivity, while an ADD would still succeed). Run as the
//! runtime runs it, in a namespace standing in for the node, against real
//! components, a real read-only mount and a real etcd.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wasm_cni_tests::{is_root, plugin, Etcd, Invocation, Netns, Output, Pod, Sandbox};

fn status(pod: &Pod, conf: &Value) -> Output {
    pod.run(Invocation::new("STATUS"), conf)
}

/// A failed STATUS: its code, and every needle in its message or details.
fn assert_cause(out: &Output, code: u64, needles: &[&str]) {
    assert_eq!(out.error_code(), code, "{out:?}");
    let e = out.json();
    let text = format!(
        "{} {}",
        e["msg"].as_str().unwrap_or_default(),
        e["details"].as_str().unwrap_or_default()
    );
    for n in needles {
        assert!(text.contains(n), "{n:?} not in {text}");
    }
    assert!(!text.contains("\\n"), "one line: {text}");
}

fn bridge_conf(sb: &Sandbox, bridge: &str) -> Value {
    sb.conf(
        "1.1.0",
        "stnet",
        json!([{"type": "bridge", "bridge": bridge,
                "ipam": {"type": "host-local", "subnet": "10.93.0.0/24"}}]),
    )
}

#[test]
fn each_cause_a_node_cannot_serve_is_code_50_and_named() {
    if !is_root("status causes") {
        return;
    }
    let sb = Sandbox::new("stcause");
    sb.install(&plugin("bridge"), "bridge");
    sb.install(&plugin("host-local"), "host-local");
    let pod = Pod::new("stc");
    let conf = bridge_conf(&sb, "stbr0");
    status(&pod, &conf).assert_ok();

    // A component that is missing: the delegate ADD would call.
    let ipam = sb.plugin_dir().join("host-local.wasm");
    let ipam_bytes = std::fs::read(&ipam).unwrap();
    std::fs::remove_file(&ipam).unwrap();
    // (With no native of that name in CNI_PATH either: the reference
    // host-local there would answer for it.)
    let no_natives = pod.run(
        Invocation::new("STATUS").env("CNI_PATH", "/nonexistent"),
        &conf,
    );
    assert_cause(&no_natives, 50, &["host-local", "not found", "was code 7"]);
    std::fs::write(&ipam, &ipam_bytes).unwrap();
    status(&pod, &conf).assert_ok();

    // A component that does not compile.
    let bridge = sb.plugin_dir().join("bridge.wasm");
    let bridge_bytes = std::fs::read(&bridge).unwrap();
    std::fs::write(&bridge, b"not a component").unwrap();
    assert_cause(
        &status(&pod, &conf),
        50,
        &["bridge", "not a usable component", "chain[0]"],
    );
    std::fs::write(&bridge, &bridge_bytes).unwrap();
    status(&pod, &conf).assert_ok();

    // A digest pin the component does not match.
    let mut pinned = conf.clone();
    pinned["chain"][0]["wasm"] = json!({"sha256": "00".repeat(32)});
    assert_cause(&status(&pod, &pinned), 50, &["sha256 mismatch", "bridge"]);

    // A state directory that cannot be written: a file where it should be,
    // and a read-only mount of the real one (a mount namespace of this
    // call's own).
    let mut blocked = conf.clone();
    let file = sb.dir.join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    blocked["stateDir"] = json!(file);
    assert_cause(
        &status(&pod, &blocked),
        50,
        &[
            "state directory",
            "not-a-dir",
            "is not writable",
            "was code 5",
        ],
    );
    let state = sb.state_dir();
    let state = state.to_str().unwrap();
    let readonly = Invocation::new("STATUS").netns(pod.ctr.path()).run_wrapped(
        Some(&pod.node.name),
        &[
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            r#"mount --bind -o ro "$1" "$1" && shift && exec "$@""#,
            "sh",
            state,
        ],
        &conf,
    );
    assert_cause(&readonly, 50, &["is not writable", "Read-only file system"]);
    // The probe left nothing behind, in the directory or as a mount.
    let left: Vec<_> = std::fs::read_dir(sb.state_dir().join("networks/stnet"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "{left:?}");
    status(&pod, &conf).assert_ok();

    // A link of the bridge's name that is not a bridge: ADD would fail.
    pod.node.exec(&[
        "ip", "link", "add", "stbr0", "type", "veth", "peer", "stbr0p",
    ]);
    assert_cause(
        &status(&pod, &conf),
        50,
        &["\"stbr0\" exists but is not a bridge"],
    );
    pod.node.exec(&["ip", "link", "del", "stbr0"]);
    status(&pod, &conf).assert_ok();
}

#[test]
fn a_bridge_that_is_down_is_51_and_the_next_add_brings_it_back() {
    if !is_root("status 51") {
        return;
    }
    let sb = Sandbox::new("stdown");
    sb.install(&plugin("bridge"), "bridge");
    sb.install(&plugin("host-local"), "host-local");
    let pod = Pod::new("std");
    let conf = bridge_conf(&sb, "stbr1");
    pod.run(Invocation::new("ADD").id("c1"), &conf).assert_ok();
    status(&pod, &conf).assert_ok();
    pod.node.exec(&["ip", "link", "set", "stbr1", "down"]);
    assert_cause(
        &status(&pod, &conf),
        51,
        &["bridge \"stbr1\" is down", "no connectivity"],
    );
    // 51 is not "cannot serve ADD": an ADD succeeds and sets it up again.
    let second = Netns::new("std2");
    Invocation::new("ADD")
        .id("c2")
        .netns(second.path())
        .run_in(Some(&pod.node.name), &pod.conf(&conf))
        .assert_ok();
    status(&pod, &conf).assert_ok();
    for (id, ns) in [("c2", second.path()), ("c1", pod.ctr.path())] {
        Invocation::new("DEL")
            .id(id)
            .netns(ns)
            .run_in(Some(&pod.node.name), &pod.conf(&conf))
            .assert_ok();
    }
}

#[test]
fn a_cluster_store_that_does_not_answer_is_50_within_its_timeout() {
    if !is_root("status store") {
        return;
    }
    let mut etcd = Etcd::start();
    let node = Netns::new("stn");
    etcd.join(&node);
    let sb = Sandbox::new("ststore");
    sb.install(&plugin("host-local"), "host-local");
    let mut conf = sb.conf(
        "1.1.0",
        "stcl",
        json!([{"type": "host-local", "ipam": {"type": "host-local", "subnet": "10.94.0.0/24"}}]),
    );
    conf["store"] = etcd.store("stn", 1000);
    let run = || Invocation::new("STATUS").run_in(Some(&node.name), &conf);
    run().assert_ok();

    etcd.freeze();
    let started = Instant::now();
    let out = run();
    let took = started.elapsed();
    etcd.thaw();
    assert_cause(&out, 50, &["state store does not answer", "etcd"]);
    assert!(took < Duration::from_secs(5), "{took:?}");
    run().assert_ok();

    etcd.kill();
    assert_cause(&run(), 50, &["state store does not answer"]);
}

/// `wasm-cni status ARGS` in `node`: exit code and stdout.
fn status_cli(node: &Netns, args: &[&str]) -> (i32, String) {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &node.name])
        .arg(wasm_cni_tests::wasm_cni_bin())
        .arg("status")
        .args(args)
        .output()
        .expect("wasm-cni status");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), stdout)
}

#[test]
fn the_status_command_shows_the_node_at_a_glance() {
    if !is_root("status command") {
        return;
    }
    let sb = Sandbox::new("stcli");
    sb.install(&plugin("bridge"), "bridge");
    sb.install(&plugin("host-local"), "host-local");
    let pod = Pod::new("stl");
    let daemon =
        wasm_cni_tests::Daemon::start(&pod.node.name, &["--metrics", "tcp:127.0.0.1:19752"]);
    let conf = daemon.conf(&bridge_conf(&sb, "stbr2"), "require");
    // The conf dir as the runtime sees it: our conflist and another's.
    let conf_dir = sb.dir.join("net.d");
    std::fs::create_dir_all(&conf_dir).unwrap();
    let mut plugin_conf = conf.clone();
    let name = plugin_conf["name"].take();
    let version = plugin_conf["cniVersion"].take();
    let conflist = json!({"cniVersion": version, "name": name, "plugins": [plugin_conf]});
    std::fs::write(conf_dir.join("00-wasm-cni.conflist"), conflist.to_string()).unwrap();
    std::fs::write(
        conf_dir.join("10-other.conflist"),
        r#"{"cniVersion":"1.0.0","name":"other","plugins":[{"type":"bridge"}]}"#,
    )
    .unwrap();
    let dir = conf_dir.to_str().unwrap();

    pod.run(Invocation::new("ADD").id("c0ffee0123456789abcdef"), &conf)
        .assert_ok();
    pod.run(Invocation::new("ADD").id("gone").ifname("net1"), &conf)
        .assert_ok();
    pod.run(Invocation::new("DEL").id("gone").ifname("net1"), &conf)
        .assert_ok();
    let (code, text) = status_cli(
        &pod.node,
        &["--conf-dir", dir, "--metrics", "tcp:127.0.0.1:19752"],
    );
    assert_eq!(code, 0, "{text}");
    for needle in [
        "NETWORK stnet  ready  daemon: require",
        "chain: bridge",
        "c0ffee012345  eth0",
        "10.93.0.2/24",
        // A /24 less the gateway: 253, one allocated, one quarantined.
        "host-local  1          1            251",
        "10.93.0.3 in ",
        "interface-plugin  0.2.2  yes",
        "DAEMON tcp:127.0.0.1:19752",
        "requests (0 failed), 0 in flight",
        "plugins stopped by the host: none",
    ] {
        assert!(text.contains(needle), "{needle:?} not in\n{text}");
    }
    assert!(!text.contains("other"), "{text}");
    for line in text.lines() {
        assert!(line.chars().count() <= 80, "{line:?}");
    }

    let (_, json_text) = status_cli(&pod.node, &["--conf-dir", dir, "--json"]);
    let node: Value = serde_json::from_str(&json_text).unwrap();
    let net = &node["networks"][0];
    assert_eq!(net["status"]["ready"], true);
    assert_eq!(
        net["attachments"][0]["containerId"],
        "c0ffee0123456789abcdef"
    );
    assert_eq!(net["pools"][0]["free"], 251);
    let comps: Vec<&str> = net["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["plugin"].as_str().unwrap())
        .collect();
    assert_eq!(comps, ["bridge", "host-local"]);
    assert_eq!(net["components"][1]["world"], "ipam-plugin", "{net}");
    assert_eq!(net["components"][0]["cached"], true);

    // Not ready: the cause, exit 1.
    std::fs::remove_file(sb.plugin_dir().join("host-local.wasm")).unwrap();
    let (code, text) = status_cli(&pod.node, &["--conf-dir", dir]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("NOT READY (50)"), "{text}");
    assert!(text.contains("host-local"), "{text}");
    std::fs::copy(
        plugin("host-local"),
        sb.plugin_dir().join("host-local.wasm"),
    )
    .unwrap();
    pod.run(Invocation::new("DEL").id("c0ffee0123456789abcdef"), &conf)
        .assert_ok();
}

/// What a plugin controls here: the text of its STATUS error, which the
/// engine logs and `status` shows. What it must not gain: the operator's
/// terminal. An escape sequence that erases the line and a carriage return
/// once made `status` show "NETWORK … ready" for a network that failed;
/// now every control character of it reaches the terminal as an escape
/// (`\u{1b}`), in the engine's log line and in every row of `status`.
#[test]
fn a_plugins_text_never_drives_the_operators_terminal() {
    if !is_root("status terminal") {
        return;
    }
    let sb = Sandbox::new("stterm");
    sb.install(&wasm_cni_tests::fixture("fx"), "fx");
    let pod = Pod::new("stt");
    let forged = "\u{1b}[2K\r\u{1b}[1ANETWORK stterm  ready\u{9b}1;1H\u{202e}\n";
    let conf = sb.conf(
        "1.1.0",
        "stterm",
        json!([{"type": "fx", "tag": forged, "status": "fail", "failCode": 50}]),
    );
    // The engine's own line on stderr, as a runtime logs it.
    let out = status(&pod, &conf);
    assert_eq!(out.error_code(), 50, "{out:?}");
    let shows_nothing_but_text = |text: &str| {
        let bad: Vec<char> = text
            .chars()
            .filter(|c| (c.is_control() && *c != '\n') || ('\u{202a}'..='\u{202e}').contains(c))
            .collect();
        assert!(bad.is_empty(), "{bad:?} reach the terminal in {text:?}");
    };
    shows_nothing_but_text(&out.stderr);
    assert!(
        out.stderr
            .contains("\\u{1b}[2K\\r\\u{1b}[1ANETWORK stterm  ready"),
        "{}",
        out.stderr
    );
    // `status`, its table and its message.
    let file = sb.dir.join("stterm.conf");
    std::fs::write(&file, conf.to_string()).unwrap();
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &pod.node.name])
        .arg(wasm_cni_tests::wasm_cni_bin())
        .args(["status", "--conf", file.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{text}");
    shows_nothing_but_text(&text);
    // The STATUS it sends logs the plugin's error on stderr, escaped too.
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    shows_nothing_but_text(&stderr);
    assert!(stderr.contains("\\u{1b}[2K"), "{stderr}");
    let first = text.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("NETWORK stterm  NOT READY (50)"),
        "{text}"
    );
    assert_eq!(
        text.lines().filter(|l| l.starts_with("NETWORK")).count(),
        1,
        "a forged network line: {text}"
    );
    assert!(
        text.contains("  ! fx: \\u{1b}[2K \\u{1b}[1ANETWORK stterm ready\\u{9b}"),
        "{text}"
    );
    // JSON escapes on its own and keeps the text as the plugin sent it.
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &pod.node.name])
        .arg(wasm_cni_tests::wasm_cni_bin())
        .args(["status", "--conf", file.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    let json_text = String::from_utf8_lossy(&out.stdout).into_owned();
    shows_nothing_but_text(&json_text);
    let node: Value = serde_json::from_str(&json_text).unwrap();
    let message = node["networks"][0]["status"]["message"].as_str().unwrap();
    assert!(message.contains(forged), "{message:?}");
}
