//! `wasm-cni daemon` and the thin client, against real namespaces and real
//! components: modes and a daemon that is down, the socket's defences, a
//! kill in the middle of concurrent streams, graceful stop, components
//! replaced on disk, ordering per attachment (the kuryr race), metrics, and
//! a daemon and per-invocation processes on one node at once.
//!
//! Every daemon runs inside a node namespace of its test, on a socket in a
//! temporary directory, and is stopped by the test.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wasm_cni_tests::{fixture, is_root, plugin, sh, Daemon, Invocation, Netns, Output, Sandbox};

/// A node with bridge + host-local installed: the network, its node
/// namespace and a daemon in it.
struct Node {
    sb: Sandbox,
    ns: Netns,
    daemon: Daemon,
}

fn node(tag: &str, daemon_args: &[&str]) -> Option<Node> {
    if !is_root(tag) {
        return None;
    }
    let sb = Sandbox::new(tag);
    sb.install(&plugin("bridge"), "bridge")
        .install(&plugin("host-local"), "host-local");
    let ns = Netns::new(&format!("{tag}n"));
    let daemon = Daemon::start(&ns.name, daemon_args);
    Some(Node { sb, ns, daemon })
}

impl Node {
    /// The bridge + host-local network on `/24` `10.<net>.0.0`, through the
    /// daemon in `mode`.
    fn conf(&self, net: u8, mode: &str) -> Value {
        let chain = json!([{
            "type": "bridge", "bridge": format!("br{net}"), "isGateway": true,
            "ipam": {"type": "host-local", "ranges": [[{"subnet": format!("10.{net}.0.0/24")}]],
                     "reuseIPWait": 0}
        }]);
        let mut conf = self.sb.conf("1.1.0", &format!("dnet{net}"), chain);
        conf["daemon"] = json!(mode);
        conf["daemonSocket"] = json!(self.daemon.socket);
        conf
    }

    fn run(&self, inv: Invocation<'_>, ctr: &Netns, conf: &Value) -> Output {
        inv.netns(ctr.path()).run_in(Some(&self.ns.name), conf)
    }

    /// Live allocations of network `net`: (address, owner container id).
    fn allocations(&self, net: u8) -> Vec<(String, String)> {
        let path = self
            .sb
            .state_dir()
            .join(format!("store/dnet{net}/host-local.json"));
        let Ok(bytes) = std::fs::read(path) else {
            return Vec::new();
        };
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        v["entries"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter(|(_, e)| e.get("releasedAt").is_none())
                    .map(|(k, e)| {
                        (
                            k.clone(),
                            e["owner"]["containerId"].as_str().unwrap().into(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// veth links in the node namespace.
    fn veths(&self) -> Vec<String> {
        self.ns
            .exec(&["ip", "-o", "link", "show", "type", "veth"])
            .lines()
            .map(str::to_string)
            .collect()
    }
}

#[test]
fn a_daemon_that_is_down_is_11_at_once_or_in_process_when_preferred() {
    let Some(mut n) = node("ddown", &[]) else {
        return;
    };
    let ctr = Netns::new("ddownc");
    n.daemon.stop_with("TERM");
    assert!(
        !n.daemon.socket.exists(),
        "a stopped daemon removes its socket"
    );
    let mut at_once = n.conf(31, "require");
    at_once["daemonWaitMs"] = json!(0);
    let out = n.run(Invocation::new("ADD"), &ctr, &at_once);
    assert_eq!(out.error_code(), 11, "{out:?}");
    assert!(out.error_msg().contains("not reachable"), "{out:?}");
    assert!(
        out.elapsed < Duration::from_millis(100),
        "{:?}",
        out.elapsed
    );
    // STATUS says the plugin cannot serve ADD now.
    let out = n.run(Invocation::new("STATUS"), &ctr, &n.conf(31, "require"));
    assert_eq!(out.error_code(), 50, "{out:?}");
    // prefer: the chain runs in this process, with a warning.
    let out = n.run(Invocation::new("ADD"), &ctr, &n.conf(31, "prefer"));
    out.assert_ok();
    assert!(out.stderr.contains("running in-process"), "{}", out.stderr);
    assert!(ctr.link("eth0").is_some());
    n.run(Invocation::new("DEL"), &ctr, &n.conf(31, "prefer"))
        .assert_ok();
}

#[test]
fn the_daemon_answers_what_the_process_would() {
    let Some(n) = node("dsame", &[]) else {
        return;
    };
    let (a, b) = (Netns::new("dsamea"), Netns::new("dsameb"));
    let off = n.conf(32, "off");
    let on = n.conf(32, "require");
    let ra = n.run(Invocation::new("ADD").id("a"), &a, &off);
    let rb = n.run(Invocation::new("ADD").id("b"), &b, &on);
    ra.assert_ok();
    rb.assert_ok();
    // The same result shape, one address apart.
    let strip = |o: &Output| {
        let mut v = o.json();
        for i in v["interfaces"].as_array_mut().unwrap() {
            i.as_object_mut().unwrap().remove("mac");
            i.as_object_mut().unwrap().remove("sandbox");
            i["name"] = json!(i["name"].as_str().unwrap().starts_with("veth"));
        }
        v["ips"][0]["address"] = json!(null);
        v
    };
    assert_eq!(strip(&ra), strip(&rb));
    assert!(
        n.daemon
            .log()
            .contains(r#"verb="ADD" network="dnet32" container_id="b" ifname="eth0" outcome="ok""#),
        "{}",
        n.daemon.log()
    );
    // Errors too: the same code and message from either door.
    let e1 = n.run(Invocation::new("ADD").id("a"), &a, &off);
    let e2 = n.run(Invocation::new("ADD").id("a"), &a, &on);
    assert_eq!(e1.stdout, e2.stdout);
    assert_eq!(e1.code, e2.code);
    // Logs reach the client's stderr at its level.
    let out = n.run(
        Invocation::new("CHECK")
            .id("b")
            .env("WASM_CNI_LOG", "debug"),
        &b,
        &on,
    );
    out.assert_ok();
    assert!(
        out.stderr.contains("chain[0] bridge check"),
        "{}",
        out.stderr
    );
    for (id, ns, conf) in [("a", &a, &off), ("b", &b, &on)] {
        n.run(Invocation::new("DEL").id(id), ns, conf).assert_ok();
    }
}

/// Connect to the daemon and send `bytes`; what comes back.
fn raw(socket: &std::path::Path, bytes: &[u8]) -> Vec<u8> {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(bytes);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

#[test]
fn the_socket_serves_only_its_peers_and_cuts_off_bad_ones() {
    let Some(n) = node("dsock", &["--read-timeout-ms", "500"]) else {
        return;
    };
    let dir = n.daemon.socket.parent().unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(dir), 0o700);
    assert_eq!(mode(&n.daemon.socket), 0o600);
    let ctr = Netns::new("dsockc");
    let conf = n.conf(33, "require");
    // A peer that is not root: opened up on purpose here, so that only the
    // credential check stands in its way.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&n.daemon.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let inv = Invocation::new("STATUS");
    let out = inv.run_wrapped(
        Some(&n.ns.name),
        &[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ],
        &conf,
    );
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.error_msg().contains("is not root and not allowed"),
        "{out:?}"
    );
    assert!(
        n.daemon.log().contains("refused a connection: peer pid"),
        "{}",
        n.daemon.log()
    );
    // A client that connects and sends nothing is dropped at the read
    // deadline, while others are served meanwhile (the components are
    // compiled first: that is not what is timed).
    n.run(Invocation::new("STATUS"), &ctr, &conf).assert_ok();
    let silent = UnixStream::connect(&n.daemon.socket).unwrap();
    let started = Instant::now();
    n.run(Invocation::new("STATUS"), &ctr, &conf).assert_ok();
    assert!(started.elapsed() < Duration::from_millis(500));
    let mut silent = silent;
    silent
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut got = Vec::new();
    let _ = silent.read_to_end(&mut got);
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "{:?}",
        started.elapsed()
    );
    assert!(String::from_utf8_lossy(&got).contains("the request took too long"));
    // Garbage and an oversized request: a clean error each.
    let answer = raw(&n.daemon.socket, b"GET / HTTP/1.1\r\n\r\n");
    assert!(String::from_utf8_lossy(&answer).contains("not a wasm-cni message"));
    let mut big = b"WCNQ\x01".to_vec();
    big.extend_from_slice(&2u32.to_be_bytes());
    big.extend_from_slice(b"[]");
    big.extend_from_slice(&(64u32 << 20).to_be_bytes());
    let answer = raw(&n.daemon.socket, &big);
    assert!(
        String::from_utf8_lossy(&answer).contains("over the limit"),
        "{answer:?}"
    );
    // And the daemon is still fine.
    n.run(Invocation::new("STATUS"), &ctr, &conf).assert_ok();
}

/// An upgrade restarts the daemon while the runtime starts pods: a
/// `require` call that finds no one listening waits (bounded by
/// `daemonWaitMs`) and is served by the new daemon; one that waits longer
/// than that is 11, not a hang.
#[test]
fn a_require_call_waits_out_a_daemon_restart() {
    let Some(mut n) = node("drst", &[]) else {
        return;
    };
    let ctr = Netns::new("drstc");
    let conf = n.conf(38, "require");
    n.run(Invocation::new("STATUS"), &ctr, &conf).assert_ok();
    n.daemon.stop_with("TERM");
    let inv = Invocation::new("ADD").netns(ctr.path());
    let node = n.ns.name.clone();
    let add = {
        let conf = conf.clone();
        std::thread::spawn(move || inv.run_in(Some(&node), &conf))
    };
    std::thread::sleep(Duration::from_millis(1_000));
    n.daemon.restart();
    let out = add.join().unwrap();
    out.assert_ok();
    assert!(
        out.elapsed >= Duration::from_millis(900),
        "{:?}",
        out.elapsed
    );
    assert!(ctr.link("eth0").is_some());
    // Down for longer than the wait: CHECK ends with 11 in about the wait;
    // DEL runs in-process (the daemon may be gone for good), so the pod
    // stays deletable.
    n.daemon.stop_with("TERM");
    let mut short = conf.clone();
    short["daemonWaitMs"] = json!(400);
    let out = n.run(Invocation::new("CHECK"), &ctr, &short);
    assert_eq!(out.error_code(), 11, "{out:?}");
    assert!(out.error_msg().contains("waited 400 ms"), "{out:?}");
    assert!(
        out.elapsed >= Duration::from_millis(400) && out.elapsed < Duration::from_secs(3),
        "{:?}",
        out.elapsed
    );
    let out = n.run(Invocation::new("DEL"), &ctr, &short);
    out.assert_ok();
    assert!(
        out.stderr.contains("running DEL in-process"),
        "{}",
        out.stderr
    );
    assert!(ctr.link("eth0").is_none());
    assert_eq!(n.allocations(38), Vec::<(String, String)>::new());
}

#[test]
fn sigterm_lets_calls_in_flight_finish_and_exits_0() {
    let Some(mut n) = node("dterm", &[]) else {
        return;
    };
    n.sb.install(&fixture("fx-wasi"), "fx-wasi");
    let ctr = Netns::new("dtermc");
    let mut conf = n.sb.conf(
        "1.1.0",
        "dterm",
        json!([{"type": "fx-wasi", "attack": "sleep", "ms": 1500}]),
    );
    conf["daemon"] = json!("require");
    conf["daemonSocket"] = json!(n.daemon.socket);
    let inv = Invocation::new("ADD").netns(ctr.path());
    let node = n.ns.name.clone();
    let slow = {
        let conf = conf.clone();
        std::thread::spawn(move || inv.run_in(Some(&node), &conf))
    };
    std::thread::sleep(Duration::from_millis(500));
    let status = n.daemon.stop_with("TERM");
    assert!(status.success(), "{status:?}: {}", n.daemon.log());
    let out = slow.join().unwrap();
    out.assert_ok();
    assert!(out.json()["interfaces"][0]["name"]
        .as_str()
        .unwrap()
        .starts_with("escaped:slept"));
    assert!(n.daemon.log().contains("stopped"), "{}", n.daemon.log());
}

#[test]
fn a_component_replaced_on_disk_is_picked_up_and_pins_still_hold() {
    let Some(n) = node("dswap", &[]) else {
        return;
    };
    let ctr = Netns::new("dswapc");
    n.sb.install(&fixture("fx"), "fx");
    let mut conf =
        n.sb.conf("1.1.0", "dswap", json!([{"type": "fx", "tag": "one"}]));
    conf["daemon"] = json!("require");
    conf["daemonSocket"] = json!(n.daemon.socket);
    let status = |conf: &Value| {
        n.run(
            Invocation::new("STATUS").env("WASM_CNI_LOG", "info"),
            &ctr,
            conf,
        )
    };
    let before = status(&conf);
    before.assert_ok();
    // Another component under the same name: the next call runs it.
    n.sb.install(&fixture("fx-net"), "fx");
    let after = status(&conf);
    after.assert_ok();
    assert!(
        before.stderr.contains("wasm-cni[fx] info: one status"),
        "{}",
        before.stderr
    );
    assert!(!after.stderr.contains("one status"), "{}", after.stderr);
    // A pin that the new file does not match: refused (code 7, which
    // STATUS reports as 50, "cannot serve ADD", keeping the 7).
    conf["chain"][0]["wasm"] = json!({"sha256": "ab".repeat(32)});
    let out = status(&conf);
    assert_eq!(out.error_code(), 50, "{out:?}");
    assert!(out.error_msg().contains("sha256 mismatch"), "{out:?}");
    assert!(
        out.json()["details"]
            .as_str()
            .unwrap()
            .contains("was code 7"),
        "{out:?}"
    );
}

#[test]
fn a_late_del_for_an_old_container_spares_the_new_one() {
    let Some(n) = node("dkury", &[]) else {
        return;
    };
    let pod = Netns::new("dkuryc");
    let conf = n.conf(34, "require");
    n.run(Invocation::new("ADD").id("old"), &pod, &conf)
        .assert_ok();
    // The old container's interface goes (its sandbox was torn down), a
    // new container is added in the same namespace under the same name,
    // and only then does the old container's DEL arrive.
    pod.exec(&["ip", "link", "del", "eth0"]);
    let new = n.run(Invocation::new("ADD").id("new"), &pod, &conf);
    new.assert_ok();
    let theirs = pod.link("eth0").unwrap()["ifindex"].clone();
    n.run(Invocation::new("DEL").id("old"), &pod, &conf)
        .assert_ok();
    assert_eq!(pod.link("eth0").unwrap()["ifindex"], theirs);
    let alloc = n.allocations(34);
    assert_eq!(alloc.len(), 1, "{alloc:?}");
    assert_eq!(alloc[0].1, "new");
    n.run(Invocation::new("CHECK").id("new"), &pod, &conf)
        .assert_ok();
    // The same with the two arriving together: whichever runs first, the
    // new container is intact afterwards.
    n.run(Invocation::new("DEL").id("new"), &pod, &conf)
        .assert_ok();
    n.run(Invocation::new("ADD").id("old2"), &pod, &conf)
        .assert_ok();
    pod.exec(&["ip", "link", "del", "eth0"]);
    std::thread::scope(|s| {
        let add = s.spawn(|| n.run(Invocation::new("ADD").id("new2"), &pod, &conf));
        let del = s.spawn(|| n.run(Invocation::new("DEL").id("old2"), &pod, &conf));
        add.join().unwrap().assert_ok();
        del.join().unwrap().assert_ok();
    });
    n.run(Invocation::new("CHECK").id("new2"), &pod, &conf)
        .assert_ok();
    let alloc = n.allocations(34);
    assert_eq!(alloc.len(), 1, "{alloc:?}");
    assert_eq!(alloc[0].1, "new2");
    n.run(Invocation::new("DEL").id("new2"), &pod, &conf)
        .assert_ok();
}

/// 16 streams of ADD then DEL, each in a container namespace of its own,
/// until `stop`; returns per stream the ids whose ADD succeeded and whose
/// DEL did not, and the slowest call.
fn streams(n: &Node, conf: &Value, pods: &[Netns], rounds: usize) -> (BTreeSet<String>, Duration) {
    let live = std::sync::Mutex::new(BTreeSet::new());
    let slowest = std::sync::Mutex::new(Duration::ZERO);
    std::thread::scope(|s| {
        for (i, pod) in pods.iter().enumerate() {
            let (live, slowest) = (&live, &slowest);
            s.spawn(move || {
                for r in 0..rounds {
                    let id = format!("s{i}r{r}");
                    let add = n.run(Invocation::new("ADD").id(&id), pod, conf);
                    let del = n.run(Invocation::new("DEL").id(&id), pod, conf);
                    let mut sl = slowest.lock().unwrap();
                    *sl = (*sl).max(add.elapsed).max(del.elapsed);
                    if add.code == 0 && del.code != 0 {
                        live.lock().unwrap().insert(id.clone());
                    }
                    if add.code != 0 || del.code != 0 {
                        // The daemon is gone (an ADD fails once the wait
                        // for it is over; a DEL then runs in-process):
                        // this stream is done.
                        return;
                    }
                }
            });
        }
    });
    (live.into_inner().unwrap(), slowest.into_inner().unwrap())
}

#[test]
fn a_daemon_killed_mid_stream_loses_nothing_after_restart_and_gc() {
    let Some(mut n) = node("dkill", &[]) else {
        return;
    };
    let pods: Vec<Netns> = (0..16).map(|i| Netns::new(&format!("dk{i}"))).collect();
    let conf = n.conf(35, "require");
    // Warm up (compile) so that the kill lands in ordinary calls.
    n.run(Invocation::new("STATUS"), &pods[0], &conf)
        .assert_ok();
    let pid = n.daemon.pid();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(700));
        sh(&["kill", "-KILL", &pid.to_string()]);
    });
    let (maybe_live, slowest) = streams(&n, &conf, &pods, 1000);
    killer.join().unwrap();
    // Every client returned: at most a chain's budget (10 s per plugin)
    // plus slack, nowhere near a hang.
    assert!(slowest < Duration::from_secs(30), "{slowest:?}");
    // A new daemon on the same state; the runtime's GC names what it still
    // thinks exists: nothing.
    n.daemon = Daemon::start(&n.ns.name, &[]);
    let conf = n.conf(35, "require");
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([]);
    let out = n.run(Invocation::new("GC"), &pods[0], &gc);
    out.assert_ok();
    eprintln!("{} attachments were live at the kill", maybe_live.len());
    assert_eq!(n.allocations(35), Vec::<(String, String)>::new());
    assert_eq!(n.veths(), Vec::<String>::new());
    let left: Vec<_> = std::fs::read_dir(n.sb.state_dir().join("networks/dnet35"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
    for pod in &pods {
        assert!(pod.link("eth0").is_none(), "{}", pod.name);
    }
    // And the pool works: every address can be had again, once each.
    let ids: Vec<String> = (0..16).map(|i| format!("after{i}")).collect();
    for (id, pod) in ids.iter().zip(&pods) {
        n.run(Invocation::new("ADD").id(id), pod, &conf).assert_ok();
    }
    let alloc = n.allocations(35);
    let unique: BTreeSet<_> = alloc.iter().map(|(ip, _)| ip.clone()).collect();
    assert_eq!((alloc.len(), unique.len()), (16, 16));
    for (id, pod) in ids.iter().zip(&pods) {
        n.run(Invocation::new("DEL").id(id), pod, &conf).assert_ok();
    }
}

#[test]
fn a_daemon_and_per_invocation_processes_share_a_node() {
    let Some(n) = node("dmix", &[]) else {
        return;
    };
    let pods: Vec<Netns> = (0..8).map(|i| Netns::new(&format!("dm{i}"))).collect();
    let on = n.conf(36, "require");
    let off = n.conf(36, "off");
    std::thread::scope(|s| {
        for (i, pod) in pods.iter().enumerate() {
            let conf = if i % 2 == 0 { &on } else { &off };
            let n = &n;
            s.spawn(move || {
                for r in 0..5 {
                    let id = format!("m{i}r{r}");
                    n.run(Invocation::new("ADD").id(&id), pod, conf).assert_ok();
                    if r < 4 {
                        n.run(Invocation::new("DEL").id(&id), pod, conf).assert_ok();
                    }
                }
            });
        }
    });
    let alloc = n.allocations(36);
    let unique: BTreeSet<_> = alloc.iter().map(|(ip, _)| ip.clone()).collect();
    assert_eq!((alloc.len(), unique.len()), (8, 8), "{alloc:?}");
    for (i, pod) in pods.iter().enumerate() {
        let conf = if i % 2 == 0 { &off } else { &on };
        n.run(Invocation::new("DEL").id(&format!("m{i}r4")), pod, conf)
            .assert_ok();
    }
    assert!(n.allocations(36).is_empty());
}

#[test]
fn metrics_count_requests_aborts_and_addresses() {
    let Some(n) = node("dmet", &["--metrics", "tcp:127.0.0.1:19750", "--json-log"]) else {
        return;
    };
    n.sb.install(&fixture("fx-hostile"), "fx-hostile");
    let ctr = Netns::new("dmetc");
    let conf = n.conf(37, "require");
    n.run(Invocation::new("ADD").id("m1"), &ctr, &conf)
        .assert_ok();
    let mut spin = n.sb.conf(
        "1.1.0",
        "dmetspin",
        json!([{"type": "fx-hostile", "attack": "spin", "wasm": {"deadlineMs": 200}}]),
    );
    spin["daemon"] = json!("require");
    spin["daemonSocket"] = json!(n.daemon.socket);
    let out = n.run(Invocation::new("ADD").id("m2"), &ctr, &spin);
    assert_eq!(out.error_code(), 999);
    let page = n.ns.exec(&[
        "bash",
        "-c",
        "exec 3<>/dev/tcp/127.0.0.1/19750 2>/dev/null || exit 1; printf 'GET /metrics HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n' >&3; cat <&3",
    ]);
    for line in [
        r#"wasm_cni_requests_total{verb="ADD",outcome="ok",code="0"} 1"#,
        r#"wasm_cni_requests_total{verb="ADD",outcome="error",code="999"} 1"#,
        r#"wasm_cni_plugin_aborts_total{plugin="fx-hostile",cause="deadline"} 1"#,
        r#"wasm_cni_ipam_addresses{network="dnet37",plugin="host-local",state="allocated"} 1"#,
        "wasm_cni_request_duration_seconds_bucket",
    ] {
        assert!(page.contains(line), "{line} not in\n{page}");
    }
    n.run(Invocation::new("DEL").id("m1"), &ctr, &conf)
        .assert_ok();
    // The log, as a log shipper reads it: every line one JSON object, one
    // event per request with its fields.
    let log = n.daemon.log();
    let events: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    let requests: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "request" && e["verb"] != "STATUS")
        .collect();
    assert_eq!(requests.len(), 3, "{log}");
    let (ok, spin, del) = (requests[0], requests[1], requests[2]);
    assert_eq!(
        (
            &ok["verb"],
            &ok["network"],
            &ok["container_id"],
            &ok["outcome"],
            &ok["code"]
        ),
        (
            &json!("ADD"),
            &json!("dnet37"),
            &json!("m1"),
            &json!("ok"),
            &json!(0)
        ),
        "{ok}"
    );
    assert!(ok["ms"].as_f64().is_some_and(|ms| ms > 0.0), "{ok}");
    assert_eq!(ok["level"], "INFO", "{ok}");
    assert!(ok["timestamp"].is_string(), "{ok}");
    assert_eq!(
        (&spin["outcome"], &spin["code"]),
        (&json!("error"), &json!(999))
    );
    assert!(
        spin["steps"]
            .as_str()
            .unwrap_or_default()
            .contains("deadline"),
        "{spin}"
    );
    assert_eq!(&del["verb"], "DEL");
    assert!(events.iter().any(|e| e["event"] == "start"), "{log}");
    // Only from inside the node: the address is its loopback.
    assert!(!ctr.try_exec(&["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/19750"]));
}

#[test]
fn a_socket_systemd_passes_is_served() {
    if !is_root("a_socket_systemd_passes_is_served") {
        return;
    }
    let sb = Sandbox::new("dsysd");
    sb.install(&fixture("fx"), "fx");
    let ns = Netns::new("dsysdn");
    let socket = sb.dir.join("activated.sock");
    // systemd-socket-activate stands in for wasm-cni.socket: it listens,
    // then runs the daemon with LISTEN_FDS=1 on the first connection.
    let mut activator = std::process::Command::new("ip")
        .args(["netns", "exec", &ns.name, "systemd-socket-activate", "-l"])
        .arg(&socket)
        .arg(wasm_cni_tests::wasm_cni_bin())
        .args(["daemon", "--socket", "/nonexistent/unused.sock"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !socket.exists() && started.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut conf = sb.conf("1.1.0", "dsysd", json!([{"type": "fx", "tag": "a"}]));
    conf["daemon"] = json!("require");
    conf["daemonSocket"] = json!(socket);
    let out = Invocation::new("STATUS")
        .env("WASM_CNI_LOG", "info")
        .run_in(Some(&ns.name), &conf);
    // The socket systemd passed is the daemon's alone: close-on-exec, so
    // no child (the compile child, a native plugin) inherits the runtime's
    // socket. (systemd-socket-activate ran the daemon in its own place.)
    let fdinfo =
        std::fs::read_to_string(format!("/proc/{}/fdinfo/3", activator.id())).unwrap_or_default();
    let flags = fdinfo
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|f| u32::from_str_radix(f.trim(), 8).ok());
    let _ = sh(&["kill", "-TERM", &activator.id().to_string()]);
    let _ = activator.wait();
    out.assert_ok();
    assert!(out.stderr.contains("a status"), "{}", out.stderr);
    const O_CLOEXEC: u32 = 0o2000000;
    assert!(
        flags.is_some_and(|f| f & O_CLOEXEC != 0),
        "fd 3 is inherited by the daemon's children: {fdinfo}"
    );
}

/// A daemon in a mount namespace of its own with private propagation (a pod
/// whose netns directory is not mounted shared) serves network namespaces
/// created after it started: the client passes the namespace as a
/// descriptor, opened with the client's credentials, and the daemon never
/// opens a netns path (a path is resolved in the opener's mount namespace
/// with the opener's rights, which are the daemon's). In a pid namespace of its own too, as in
/// a pod: the kernel then gives it pid 0 for every peer (which once made
/// it refuse them all, found by the DaemonSet test).
#[test]
fn a_daemon_in_private_mount_and_pid_namespaces_serves_namespaces_made_after_it() {
    let tag = "dprivmnt";
    if !is_root(tag) {
        return;
    }
    let sb = Sandbox::new(tag);
    sb.install(&plugin("bridge"), "bridge")
        .install(&plugin("host-local"), "host-local");
    let ns = Netns::new("dpmn");
    let daemon = Daemon::start_wrapped(
        &ns.name,
        &[
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--pid",
            "--fork",
            // SIGTERM to unshare reaches the daemon, which drains and exits.
            "--kill-child=SIGTERM",
        ],
        &[],
    );
    let n = Node { sb, ns, daemon };
    // Made after the daemon: its mount cannot reach the daemon's namespace.
    let pod = Netns::new("dpmp");
    let mnt = |pid: String| std::fs::read_link(format!("/proc/{pid}/ns/mnt")).unwrap();
    assert_ne!(
        mnt(n.daemon.pid().to_string()),
        mnt("self".into()),
        "the daemon shares the test's mount namespace"
    );
    let mountinfo = std::fs::read_to_string(format!("/proc/{}/mountinfo", n.daemon.pid())).unwrap();
    assert!(
        !mountinfo.contains(&pod.name),
        "the pod's netns mount reached the daemon: this test would prove nothing"
    );
    let conf = n.conf(62, "require");
    for verb in ["ADD", "CHECK"] {
        let out = n.run(Invocation::new(verb).id("pm1"), &pod, &conf);
        assert_eq!(out.code, 0, "{verb}: {}\n{}", out.stdout, out.stderr);
    }
    assert!(
        pod.try_exec(&["ip", "link", "show", "eth0"]),
        "no eth0 after ADD"
    );
    let out = n.run(Invocation::new("DEL").id("pm1"), &pod, &conf);
    assert_eq!(out.code, 0, "DEL: {}\n{}", out.stdout, out.stderr);
    // "require": a call the daemon did not serve would have failed (11).
    assert!(
        !pod.try_exec(&["ip", "link", "show", "eth0"]),
        "eth0 left after DEL"
    );
    // unshare --fork does not pass SIGTERM on; its death does (SIGTERM).
    let mut n = n;
    n.daemon.stop_with("KILL");
}
