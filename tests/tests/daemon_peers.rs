//! Daemon peers: what a process that can reach the daemon's socket, or its
//! metrics port, controls, and what it must not gain.
//!
//! 1. a request (CNI_PATH, config paths, the namespace): nothing run or
//!    opened with the daemon's privileges for a non-root peer, which passes
//!    its namespace as a descriptor;
//! 2. its connections (idle, many, abandoned): the runtime is still served
//!    in time, SIGTERM is honoured, nothing is started for a client that
//!    left (or it is undone, before a GC of its network returns);
//! 3. a scraper's connections: other scrapes are still answered.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wasm_cni_tests::hostile::sandbox_with;
use wasm_cni_tests::{Daemon, Invocation, Pod, Sandbox, TempDir};

const NOBODY: &[&str] = &[
    "setpriv",
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
];

/// A daemon in the pod's node that also serves uid 65534, its non-root
/// peers' networks in the sandbox's directories (never the machine's).
/// The operator lets that uid reach the socket, as a systemd socket unit's
/// `SocketUser`/`SocketMode` would.
fn peer_daemon(sb: &Sandbox, pod: &Pod, extra: &[&str]) -> Daemon {
    let dirs = [
        ("--peer-state-dir", sb.state_dir()),
        ("--peer-plugin-dir", sb.plugin_dir()),
        ("--peer-cache-dir", sb.cache_dir()),
    ];
    let mut args: Vec<String> = vec!["--allow-uid".into(), "65534".into()];
    for (flag, dir) in dirs {
        args.push(flag.into());
        args.push(dir.to_string_lossy().into_owned());
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let d = Daemon::start(&pod.node.name, &args);
    open_to_nobody(&d.socket);
    // The sandbox's state directory is root's; the peer's records go there
    // through the daemon.
    d
}

fn open_to_nobody(socket: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let set = |p: &Path, mode| std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
    if let Some(dir) = socket.parent() {
        set(dir, 0o711).unwrap();
    }
    set(socket, 0o666).unwrap();
}

/// `conf` as a non-root peer may send it: no paths of its own.
fn peer_conf(d: &Daemon, conf: &Value) -> Value {
    let mut c = d.conf(conf, "require");
    for k in ["pluginDir", "stateDir", "cacheDir"] {
        c.as_object_mut().unwrap().remove(k);
    }
    c
}

/// Let the unprivileged peer read what the test wrote for it.
fn open_to_nobody_file(dir: &TempDir) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for e in std::fs::read_dir(dir.path()).unwrap().flatten() {
        std::fs::set_permissions(e.path(), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
}

/// Write `dir/ID.json`, the ADD of container `id` in `netns` with `conf`,
/// as `hostile-peer.py` sends it.
fn add_request(dir: &Path, id: &str, netns: &str, conf: &Value) -> std::path::PathBuf {
    let file = dir.join(format!("{id}.json"));
    let env = json!([
        ["CNI_COMMAND", "ADD"],
        ["CNI_CONTAINERID", id],
        ["CNI_NETNS", netns],
        ["CNI_IFNAME", "eth0"],
        ["CNI_PATH", "/usr/lib/cni"]
    ]);
    std::fs::write(
        &file,
        json!({"env": env, "stdin": conf.to_string()}).to_string(),
    )
    .unwrap();
    file
}

/// Run `tests/fixtures/hostile-peer.py MODE SOCKET FILE ARGS` behind
/// `wrapper`, returning its stdout.
fn hostile_peer(wrapper: &[&str], socket: &Path, mode: &str, file: &Path, args: &[&str]) -> String {
    let out = peer_command(wrapper, mode)
        .arg(socket)
        .arg(file)
        .args(args)
        .output()
        .expect("run hostile-peer.py");
    assert!(
        out.status.success(),
        "hostile-peer.py {mode}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Debian's python3 (`cargo xtask setup`): a user's own (pyenv) may not be
/// reachable by the unprivileged peer.
const PYTHON: &str = "/usr/bin/python3";

fn peer_command(wrapper: &[&str], mode: &str) -> Command {
    let script = wasm_cni_tests::workspace_root().join("tests/fixtures/hostile-peer.py");
    let mut cmd = match wrapper.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(PYTHON);
            c
        }
        None => Command::new(PYTHON),
    };
    cmd.arg(script).arg(mode);
    cmd
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(19750)
}

#[test]
fn a_non_root_peer_runs_no_program_and_names_no_path() {
    let Some((sb, pod)) = sandbox_with("tb4", &["fx-net"], &[]) else {
        return;
    };
    let d = peer_daemon(&sb, &pod, &[]);
    // A "plugin" of the peer's: a program that leaves a mark when run.
    let bin = TempDir::new("tb4bin");
    let mark = bin.join("ran");
    let evil = bin.join("evil");
    std::fs::write(
        &evil,
        format!(
            "#!/bin/sh\ntouch {}\necho '{{\"cniVersion\":\"1.1.0\"}}'\n",
            mark.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&evil, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cni_path = bin.path().to_string_lossy().into_owned();
    let native = sb.conf("1.1.0", "tbnet4", json!([{"type": "evil"}]));
    let out = Invocation::new("ADD")
        .netns(pod.ctr.path())
        .env("CNI_PATH", &cni_path)
        .run_wrapped(None, NOBODY, &peer_conf(&d, &native));
    assert_eq!(out.error_code(), 7, "{out:?}");
    assert!(
        out.error_msg()
            .contains("not run for a non-root daemon peer (uid 65534)"),
        "{}",
        out.error_msg()
    );
    assert!(!mark.exists(), "the daemon ran the peer's program");
    // Root could run it itself; through the daemon it still may.
    let out = Invocation::new("ADD")
        .id("root1")
        .netns(pod.ctr.path())
        .env("CNI_PATH", &cni_path)
        .run_in(Some(&pod.node.name), &d.conf(&native, "require"));
    out.assert_ok();
    assert!(mark.exists(), "a root peer's native plugin did not run");

    // Paths and servers the daemon would open as root: refused, none made.
    let planted = TempDir::new("tb4paths");
    let p = |name: &str| planted.join(name).to_string_lossy().into_owned();
    let base = json!({"type": "fx-net", "ops": []});
    let mut cases: Vec<(String, Value)> = Vec::new();
    for key in ["stateDir", "pluginDir", "cacheDir", "imageDir"] {
        let mut c = peer_conf(&d, &sb.conf("1.1.0", "tbnet4", json!([base])));
        c[key] = json!(p(key));
        cases.push((key.into(), c));
    }
    let mut c = peer_conf(&d, &sb.conf("1.1.0", "tbnet4", json!([base])));
    c["store"] = json!({"type": "etcd", "endpoints": ["http://127.0.0.1:1"],
                        "tls": {"caFile": "/etc/shadow"}});
    cases.push(("store".into(), c));
    for (key, entry) in [
        (
            "chain[0].dataDir",
            json!({"type": "fx-net", "dataDir": p("data")}),
        ),
        (
            "chain[0].ipam.resolvConf",
            json!({"type": "fx-net", "ipam": {"type": "host-local", "resolvConf": "/etc/shadow"}}),
        ),
        (
            "chain[0].ipam.dataDir",
            json!({"type": "fx-net", "ipam": {"type": "host-local", "dataDir": p("ipam")}}),
        ),
    ] {
        cases.push((
            key.into(),
            peer_conf(&d, &sb.conf("1.1.0", "tbnet4", json!([entry]))),
        ));
    }
    for (key, conf) in cases {
        let out = Invocation::new("ADD")
            .id("p1")
            .netns(pod.ctr.path())
            .run_wrapped(None, NOBODY, &conf);
        assert_eq!(out.error_code(), 7, "{key}: {out:?}");
        assert!(
            out.error_msg()
                .starts_with(&format!("{key}: a non-root daemon peer (uid 65534)")),
            "{key}: {}",
            out.error_msg()
        );
    }
    let made: Vec<_> = std::fs::read_dir(planted.path()).unwrap().collect();
    assert!(made.is_empty(), "{made:?}");
}

#[test]
fn a_non_root_peer_passes_its_namespace_as_a_descriptor() {
    let Some((sb, pod)) = sandbox_with("tb4n", &["fx-net"], &[]) else {
        return;
    };
    let d = peer_daemon(&sb, &pod, &[]);
    let as_root = sb.conf(
        "1.1.0",
        "tbnet4n",
        json!([{"type": "fx-net", "strict": true,
                "ops": [{"op": "create-veth", "name": "eth0", "peer": "tbn{cid}", "peer-ns": "node"}]}]),
    );
    let conf = peer_conf(&d, &as_root);
    // The client opens the namespace itself and passes the descriptor.
    let out = Invocation::new("ADD")
        .id("n1")
        .netns(pod.ctr.path())
        .run_wrapped(None, NOBODY, &conf);
    out.assert_ok();
    assert!(pod.ctr.link("eth0").is_some());
    let rec = sb.state_dir().join("networks/tbnet4n/n1:eth0.json");
    let rec: Value = serde_json::from_slice(&std::fs::read(rec).unwrap()).unwrap();
    assert_eq!(rec["netns"], pod.ctr.path());
    assert_eq!(rec["peerUid"], 65534);
    // GC (by the runtime, as root) does not open a path that peer named:
    // the container side goes with its namespace; the node side goes.
    let mut gc = d.conf(&as_root, "require");
    gc["cni.dev/valid-attachments"] = json!([]);
    Invocation::new("GC")
        .run_in(Some(&pod.node.name), &gc)
        .assert_ok();
    assert!(pod.node.link("tbnn1").is_none(), "the node side stayed");

    // A client that sends the path, not a descriptor (version 1, or one
    // that announces none): refused for a non-root peer.
    let req = TempDir::new("tb4req");
    let file = add_request(req.path(), "n2", &pod.ctr.path(), &conf);
    open_to_nobody_file(&req);
    for (args, why) in [
        (vec!["--v1"], "passes the namespace as a descriptor"),
        (vec![], "passes the namespace as a descriptor"),
        (vec!["--fd", "/etc/hostname"], "is not a network namespace"),
    ] {
        let answer = hostile_peer(NOBODY, &d.socket, "send", &file, &args);
        let answer: Value = serde_json::from_str(answer.trim()).unwrap();
        let stdout: Value = serde_json::from_str(answer["stdout"].as_str().unwrap()).unwrap();
        assert_eq!(stdout["code"], 4, "{args:?}: {stdout}");
        assert!(
            stdout["msg"].as_str().unwrap().contains(why),
            "{args:?}: {stdout}"
        );
    }
    assert!(!sb
        .state_dir()
        .join("networks/tbnet4n/n2:eth0.json")
        .exists());

    // The descriptor, not the name, says where: a request naming the
    // daemon's own namespace by path, with the container's descriptor,
    // works in the container and leaves the node's namespace alone.
    let file = add_request(req.path(), "n3", "/proc/self/ns/net", &conf);
    open_to_nobody_file(&req);
    let answer = hostile_peer(NOBODY, &d.socket, "send", &file, &["--fd", &pod.ctr.path()]);
    let answer: Value = serde_json::from_str(answer.trim()).unwrap();
    let stdout: Value = serde_json::from_str(answer["stdout"].as_str().unwrap()).unwrap();
    assert!(stdout.get("code").is_none(), "{stdout}");
    assert!(pod.ctr.link("eth0").is_some(), "{stdout}");
    assert!(pod.node.link("eth0").is_none());
    assert!(pod.node.link("tbnn3").is_some());
}

#[test]
fn idle_peers_starve_no_one_and_sigterm_is_honoured() {
    let Some((sb, pod)) = sandbox_with("tb5", &["fx-net"], &[]) else {
        return;
    };
    let mut d = peer_daemon(&sb, &pod, &["--drain-timeout-ms", "3000"]);
    // 400 connections from one allowed peer that send nothing.
    let mut idle = peer_command(NOBODY, "idle")
        .arg(&d.socket)
        .args(["400", "20"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    {
        use std::io::BufRead;
        let out = idle.stdout.take().unwrap();
        std::io::BufReader::new(out).read_line(&mut line).unwrap();
    }
    // All but its 16 were refused at once, none holds a request slot.
    assert!(line.starts_with("refused 384 of 400"), "{line}");
    let conf = d.conf(
        &sb.conf(
            "1.1.0",
            "tbnet5",
            json!([{"type": "fx-net", "strict": true, "wasm": {"deadlineMs": 2000},
                    "ops": [{"op": "create-veth", "name": "eth0", "peer": "tb5{cid}", "peer-ns": "node"}]}]),
        ),
        "require",
    );
    // The runtime is served meanwhile, in time.
    for id in ["r1", "r2"] {
        let out = Invocation::new("ADD")
            .id(id)
            .netns(pod.ctr.path())
            .run_in(Some(&pod.node.name), &conf);
        out.assert_ok();
        assert!(out.elapsed < Duration::from_secs(2), "{:?}", out.elapsed);
        Invocation::new("DEL")
            .id(id)
            .netns(pod.ctr.path())
            .run_in(Some(&pod.node.name), &conf)
            .assert_ok();
    }
    // SIGTERM while the idle connections are held: the daemon stops within
    // its drain bound.
    let started = Instant::now();
    let status = d.stop_with("TERM");
    assert!(status.success(), "{status:?}: {}", d.log());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let _ = idle.kill();
    let _ = idle.wait();
}

#[test]
fn a_request_whose_client_left_is_not_started_or_is_undone() {
    let Some((sb, pod)) = sandbox_with("tb5a", &["fx-wasi", "fx-net"], &[]) else {
        return;
    };
    // One slot: a slow request holds it while the others queue.
    let d = peer_daemon(&sb, &pod, &["--max-concurrent", "1"]);
    let slow = |ms: u64| {
        d.conf(
            &sb.conf(
                "1.1.0",
                "tbnet5a",
                json!([{"type": "fx-wasi", "attack": "sleep", "ms": ms,
                        "wasm": {"deadlineMs": 10_000}}]),
            ),
            "require",
        )
    };
    let quick = d.conf(
        &sb.conf(
            "1.1.0",
            "tbnet5a",
            json!([{"type": "fx-net", "ops": [], "wasm": {"deadlineMs": 100}}]),
        ),
        "require",
    );
    // Warm both components so that timings are the plugins'.
    for c in [&slow(0), &quick] {
        Invocation::new("STATUS")
            .run_in(Some(&pod.node.name), c)
            .assert_ok();
    }
    let req = TempDir::new("tb5req");
    let request = |id: &str, conf: &Value| add_request(req.path(), id, &pod.ctr.path(), conf);
    let record = |id: &str| {
        sb.state_dir()
            .join(format!("networks/tbnet5a/{id}:eth0.json"))
    };
    std::thread::scope(|s| {
        let holder = s.spawn(|| {
            Invocation::new("ADD")
                .id("hold")
                .netns(pod.ctr.path())
                .run_in(Some(&pod.node.name), &slow(2000))
        });
        std::thread::sleep(Duration::from_millis(300));
        // Gone after 300 ms, while queued: never started.
        let gone = request("gone", &quick);
        let out = hostile_peer(&[], &d.socket, "send", &gone, &["--close-after-ms", "300"]);
        assert_eq!(out.trim(), "closed");
        // Says it waits 600 ms for a chain that may take 100: it could not
        // start in time, so it is told to try again and nothing runs.
        let late = request("late", &quick);
        let out = hostile_peer(&[], &d.socket, "send", &late, &["--wait-ms", "600"]);
        let answer: Value = serde_json::from_str(out.trim()).unwrap();
        let stdout: Value = serde_json::from_str(answer["stdout"].as_str().unwrap()).unwrap();
        assert_eq!(stdout["code"], 11, "{stdout}");
        assert!(
            stdout["msg"]
                .as_str()
                .unwrap()
                .contains("before its client would give up"),
            "{stdout}"
        );
        holder.join().unwrap().assert_ok();
    });
    assert!(!record("gone").exists(), "an abandoned ADD ran");
    assert!(!record("late").exists(), "a late ADD ran");
    assert!(
        d.log().contains("\"abandoned\"") || d.log().contains("event=\"abandoned\""),
        "{}",
        d.log()
    );
    // Gone while its ADD runs: the ADD is undone once its answer cannot be
    // delivered.
    let undone = request("undone", &slow(1500));
    let out = hostile_peer(
        &[],
        &d.socket,
        "send",
        &undone,
        &["--close-after-ms", "300"],
    );
    assert_eq!(out.trim(), "closed");
    let started = Instant::now();
    while !d.log().contains("the undelivered ADD was deleted") {
        assert!(started.elapsed() < Duration::from_secs(10), "{}", d.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!record("undone").exists(), "an ADD nobody received stayed");
}

#[test]
fn a_gc_returns_only_once_an_abandoned_add_is_undone() {
    // What a peer controls: it can leave while its ADD runs. What it must
    // not gain: an allocation that outlives the runtime's GC, which returns
    // before the daemon has undone that ADD and then finds the store still
    // changing (a CI run saw "leaked after GC" this way).
    let Some((sb, pod)) = sandbox_with("tb5g", &["fx-wasi"], &[]) else {
        return;
    };
    let d = peer_daemon(&sb, &pod, &[]);
    let conf = |net: &str, ms: u64| {
        d.conf(
            &sb.conf(
                "1.1.0",
                net,
                json!([{"type": "fx-wasi", "attack": "sleep", "ms": ms,
                        "wasm": {"deadlineMs": 10_000}}]),
            ),
            "require",
        )
    };
    Invocation::new("STATUS")
        .run_in(Some(&pod.node.name), &conf("tbnet5g", 0))
        .assert_ok();
    let req = TempDir::new("tb5greq");
    let file = add_request(req.path(), "left", &pod.ctr.path(), &conf("tbnet5g", 1500));
    let record = sb.state_dir().join("networks/tbnet5g/left:eth0.json");
    std::thread::scope(|s| {
        // Another network's slow ADD, running all along: the GC does not
        // wait for it.
        let elsewhere = s.spawn(|| {
            Invocation::new("ADD")
                .id("elsewhere")
                .netns(pod.ctr.path())
                .run_in(Some(&pod.node.name), &conf("tbnet5h", 6000))
        });
        let started = Instant::now();
        let out = hostile_peer(&[], &d.socket, "send", &file, &["--close-after-ms", "300"]);
        assert_eq!(out.trim(), "closed");
        // The runtime's GC, with the ADD it never saw succeed not valid.
        let mut gc = conf("tbnet5g", 0);
        gc["cni.dev/valid-attachments"] = json!([]);
        Invocation::new("GC")
            .run_in(Some(&pod.node.name), &gc)
            .assert_ok();
        let took = started.elapsed();
        // Once it has returned, the ADD has ended and been undone.
        assert!(
            d.log().contains("the undelivered ADD was deleted"),
            "the GC returned after {took:?}, before the undo: {}",
            d.log()
        );
        assert!(!record.exists(), "an ADD nobody received stayed");
        assert!(
            !elsewhere.is_finished(),
            "the GC waited for tbnet5h's ADD: {took:?}"
        );
        elsewhere.join().unwrap().assert_ok();
    });
}

#[test]
fn trickling_scrapers_do_not_blind_the_metrics() {
    let Some((sb, pod)) = sandbox_with("tb6", &[], &[]) else {
        return;
    };
    let _ = &sb;
    let port = free_port();
    let addr = format!("tcp:127.0.0.1:{port}");
    let d = Daemon::start(&pod.node.name, &["--metrics", &addr]);
    let scrape = || {
        let started = Instant::now();
        let out = Command::new("ip")
            .args(["netns", "exec", &pod.node.name, "curl", "-sS", "-m", "5"])
            .arg(format!("http://127.0.0.1:{port}/metrics"))
            .output()
            .unwrap();
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            started.elapsed(),
        )
    };
    assert!(scrape().0.contains("# EOF"));
    // An unprivileged local client trickles a byte at a time on 100
    // connections.
    let mut wrapper = vec!["ip", "netns", "exec", pod.node.name.as_str()];
    wrapper.extend_from_slice(NOBODY);
    let mut trickle = peer_command(&wrapper, "trickle")
        .arg(&addr)
        .args(["100", "8"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    for _ in 0..5 {
        let (body, took) = scrape();
        assert!(body.contains("# EOF"), "{body}");
        assert!(took < Duration::from_millis(1000), "a scrape took {took:?}");
        std::thread::sleep(Duration::from_millis(300));
    }
    let _ = trickle.kill();
    let _ = trickle.wait();
    drop(d);

    // A unix metrics path is checked like the daemon socket's: nothing
    // that is not a stale socket is removed, and a directory others may
    // write is refused.
    let dir = TempDir::new("tb6m");
    let file = dir.join("metrics.sock");
    std::fs::write(&file, b"precious").unwrap();
    let wide = TempDir::new("tb6w");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(wide.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    for (path, why) in [
        (file.clone(), "exists and is not a socket"),
        (wide.join("m.sock"), "is writable by others"),
    ] {
        let out = Command::new("ip")
            .args(["netns", "exec", &pod.node.name])
            .arg(wasm_cni_tests::wasm_cni_bin())
            .args(["daemon", "--socket"])
            .arg(dir.join("d.sock"))
            .arg("--metrics")
            .arg(format!("unix:{}", path.display()))
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(why), "{err}");
    }
    assert_eq!(std::fs::read(&file).unwrap(), b"precious");
}
