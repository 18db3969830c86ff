//! The trust boundary, second pass (issue #19): each class of attack an
//! outside red team carried out against the surfaces added since the first
//! hardening, carried out again here with fixtures and clients of our own,
//! against the real binary in throwaway namespaces. Every test asserts a
//! clean refusal or CNI error within its bound and the world (links with
//! their ifindex, addresses, routes in every table, sysctls, the node's
//! nftables rules and qdiscs, the state directory) exactly as before.
//!
//! What an attacker controls, and what they must not gain:
//!
//! 1. a plugin's own result (and so the runtime's prevResult at DEL, and
//!    the recorded result GC reads): no node-side grant from it; DEL, CHECK
//!    and GC add nothing to the node;
//! 2. which address a hairpin rule names: the host's own setting for it
//!    (`route_localnet`) only on a link of the attachment or its config,
//!    and put back when the last attachment relying on it goes;
//! 3. how many links, rules and tc objects an ADD asks for: caps, and a
//!    rollback within the deadline;
//! 4. a daemon peer's request (CNI_PATH, config paths, the namespace):
//!    nothing run or opened with the daemon's privileges for a non-root
//!    peer;
//! 5. a peer's connections (idle, many, abandoned): the runtime still
//!    served in time, SIGTERM honoured, nothing started for a client that
//!    left;
//! 6. a scraper's connections: other scrapes still answered;
//! 7. a component under `plugin test`: the run has a bound;
//! 8. a component's size and what compiling it costs: bounded;
//! 9. a scope's size in etcd: read back, or refused for good, never
//!    "try again later" forever.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wasm_cni_tests::hostile::{world_with, SLACK};
use wasm_cni_tests::{fixture, is_root, plugin, Daemon, Invocation, Netns, Pod, Sandbox, TempDir};

fn setup(tag: &str, fixtures: &[&str], plugins: &[&str]) -> Option<(Sandbox, Pod)> {
    if !is_root(tag) {
        return None;
    }
    let sb = Sandbox::new(tag);
    for f in fixtures {
        sb.install(&fixture(f), f);
    }
    for p in plugins {
        sb.install(&plugin(p), p);
    }
    Some((sb, Pod::new(tag)))
}

/// The node's nftables rules (every table, not just wasm-cni's: the
/// skeleton of wasm-cni's own tables stays once made) and qdiscs, beyond
/// what `world` records.
fn filter_and_tc(ns: &Netns) -> String {
    let rules: String = ns
        .exec(&["nft", "list", "ruleset"])
        .lines()
        .filter(|l| l.contains("comment") || l.contains("masquerade") || l.contains("dnat"))
        .map(|l| format!("{}\n", l.trim()))
        .collect();
    rules + &ns.exec(&["tc", "qdisc", "show"])
}

#[derive(Debug, PartialEq)]
struct Everything {
    world: wasm_cni_tests::hostile::World,
    node_filter: String,
    ctr_filter: String,
}

fn everything(sb: &Sandbox, pod: &Pod, node_keys: &[&str]) -> Everything {
    Everything {
        world: world_with(sb, pod, node_keys),
        node_filter: filter_and_tc(&pod.node),
        ctr_filter: filter_and_tc(&pod.ctr),
    }
}

fn add(id: &str) -> Invocation<'_> {
    Invocation::new("ADD").id(id)
}

fn del(id: &str) -> Invocation<'_> {
    Invocation::new("DEL").id(id)
}

fn sysctl(ns: &Netns, key: &str) -> String {
    ns.exec(&["sysctl", "-n", key]).trim().to_string()
}

// --- 1. Grants come from what the host saw, and DEL/CHECK/GC add nothing --

#[test]
fn a_result_the_plugin_wrote_grants_nothing_on_the_node() {
    let Some((sb, pod)) = setup("tb1", &["fx-net"], &[]) else {
        return;
    };
    // The plugin's result claims the whole IPv4 space and the node's LAN
    // gateway; its DEL, CHECK and GC then go for the node's routing.
    let lie = json!({"ips": [{"address": "0.0.0.0/1"}, {"address": "128.0.0.0/1"},
                              {"address": "192.168.77.1/24"}]});
    let grab = json!([
        {"op": "add-route", "ns": "node", "dst": "0.0.0.0/1", "dev": "tbbr1"},
        {"op": "add-route", "ns": "node", "dst": "128.0.0.0/1", "dev": "tbbr1"},
        {"op": "add-address", "ns": "node", "link": "tbbr1", "cidr": "192.168.77.1/24"}
    ]);
    let entry = json!({"type": "fx-net", "bridge": "tbbr1", "strict": true,
        "ops": [{"op": "ensure-bridge", "ns": "node", "name": "tbbr1"},
                {"op": "up", "ns": "node", "name": "tbbr1"}],
        "result": lie, "delOps": grab, "checkOps": grab, "gcOps": grab,
        "wasm": {"deadlineMs": 2000}});
    let conf = sb.conf("1.1.0", "tbnet1", json!([entry]));
    let out = pod.run(add("c1"), &conf);
    out.assert_ok();
    // The lie is in the record the host keeps (and in what the runtime
    // would pass back as prevResult): it is what DEL and GC read.
    assert_eq!(out.json()["ips"][0]["address"], "0.0.0.0/1");
    let before = everything(&sb, &pod, &[]);
    let mut with_prev = conf.clone();
    with_prev["prevResult"] = out.json();
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([]);
    for (verb, c, why) in [
        ("DEL", &conf, "only ADD changes the node"),
        ("DEL", &with_prev, "only ADD changes the node"),
        ("CHECK", &with_prev, "it only reads"),
        ("GC", &gc, "only ADD changes the node"),
    ] {
        let started = Instant::now();
        let out = pod.run(Invocation::new(verb).id("c1"), c);
        assert_eq!(out.error_code(), 999, "{verb}: {out:?}");
        assert!(out.error_msg().contains(why), "{verb}: {}", out.error_msg());
        assert!(started.elapsed() < Duration::from_millis(2000) + SLACK);
        assert_eq!(
            before,
            everything(&sb, &pod, &[]),
            "{verb} changed the node"
        );
    }
    // The node routes nothing new through the bridge.
    let routes = pod.node.exec(&["ip", "route", "show", "table", "all"]);
    assert!(
        !routes.contains("0.0.0.0/1") && !routes.contains("128.0.0.0/1"),
        "{routes}"
    );
    // A plain DEL still cleans up.
    let mut plain = conf.clone();
    plain["chain"][0]
        .as_object_mut()
        .unwrap()
        .retain(|k, _| !k.ends_with("Ops") || k == "ops");
    pod.run(del("c1"), &plain).assert_ok();
}

#[test]
fn only_ipam_answers_grant_node_addresses_during_add() {
    let Some((sb, pod)) = setup("tb1b", &["fx-net"], &["host-local"]) else {
        return;
    };
    // The host saw host-local hand out 10.71.0.2/24: a gateway inside it on
    // the config's bridge is the attachment's; a /1 is not, whatever the
    // plugin's result will say.
    let entry = json!({"type": "fx-net", "bridge": "tbbr1b",
        "ipam": {"type": "host-local", "subnet": "10.71.0.0/24",
                 "dataDir": sb.dir.join("ipam").to_string_lossy()},
        "ops": [{"op": "ensure-bridge", "ns": "node", "name": "tbbr1b"},
                {"op": "ipam-add"},
                {"op": "add-address", "ns": "node", "link": "tbbr1b", "cidr": "10.71.0.1/24"},
                {"op": "add-route", "ns": "node", "dst": "0.0.0.0/1", "dev": "tbbr1b"}],
        "result": {"ips": [{"address": "0.0.0.0/1"}]}});
    let conf = sb.conf("1.1.0", "tbnet1b", json!([entry]));
    let out = pod.run(add("c1"), &conf);
    let names: Vec<String> = out.json()["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names,
        ["0:ok", "1:ok", "2:ok", "3:refused"],
        "{}",
        out.stderr
    );
    pod.run(del("c1"), &conf).assert_ok();
}

// --- 2. The host's own side effects stay in scope and go with DEL --------

#[test]
fn route_localnet_only_on_the_attachments_links_and_put_back() {
    let Some((sb, pod)) = setup("tb2", &["fx-net"], &["host-local", "bridge", "portmap"]) else {
        return;
    };
    // The node's uplink, with the default route: where an address nobody
    // routes goes.
    pod.node
        .exec(&["ip", "link", "add", "up2", "type", "veth", "peer", "up2p"]);
    pod.node
        .exec(&["ip", "addr", "add", "192.168.72.1/24", "dev", "up2"]);
    pod.node.exec(&["ip", "link", "set", "up2", "up"]);
    pod.node.exec(&["ip", "link", "set", "up2p", "up"]);
    pod.node
        .exec(&["ip", "route", "add", "default", "via", "192.168.72.2"]);
    let uplink_key = "net.ipv4.conf.up2.route_localnet";
    assert_eq!(sysctl(&pod.node, uplink_key), "0");

    // A plugin whose hairpin rule names its own address, which the node
    // routes through the uplink.
    let ipam = |subnet: &str, dir: &str| {
        json!({"type": "host-local", "subnet": subnet,
               "dataDir": sb.dir.join(dir).to_string_lossy()})
    };
    let sneaky = sb.conf(
        "1.1.0",
        "tbnet2",
        json!([{"type": "fx-net", "strict": true, "ipam": ipam("10.72.0.0/24", "ipam-a"),
                "ops": [{"op": "ipam-add"},
                        {"op": "filter-add", "rules": [{"hairpin": "10.72.0.2"}]}]}]),
    );
    let before = everything(&sb, &pod, &[uplink_key]);
    pod.run(add("s1"), &sneaky).assert_ok();
    assert_eq!(sysctl(&pod.node, uplink_key), "0", "the uplink was changed");
    pod.run(del("s1"), &sneaky).assert_ok();
    assert_eq!(before, everything(&sb, &pod, &[uplink_key]));

    // The real thing: bridge + portmap. route_localnet goes on the bridge
    // the config names, stays while any pod relies on it, and goes back
    // with the last.
    let pod2 = Netns::new("tb2c");
    let bridge_key = "net.ipv4.conf.tbbr2.route_localnet";
    let conf = |port: u16| {
        let mut c = sb.conf(
            "1.0.0",
            "tbpm2",
            json!([{"type": "bridge", "bridge": "tbbr2", "isGateway": true,
                    "ipam": ipam("10.73.0.0/24", "ipam-b")},
                   {"type": "portmap", "capabilities": {"portMappings": true}}]),
        );
        c["capabilities"] = json!({"portMappings": true});
        c["runtimeConfig"] =
            json!({"portMappings": [{"hostPort": port, "containerPort": 80, "protocol": "tcp"}]});
        c
    };
    let on_pod2 =
        |inv: Invocation<'_>, c: &Value| inv.netns(pod2.path()).run_in(Some(&pod.node.name), c);
    pod.run(add("p1"), &conf(18081)).assert_ok();
    assert_eq!(sysctl(&pod.node, bridge_key), "1");
    on_pod2(add("p2"), &conf(18082)).assert_ok();
    pod.run(del("p1"), &conf(18081)).assert_ok();
    assert_eq!(sysctl(&pod.node, bridge_key), "1", "p2 still relies on it");
    on_pod2(del("p2"), &conf(18082)).assert_ok();
    assert_eq!(sysctl(&pod.node, bridge_key), "0", "not put back");
    assert_eq!(sysctl(&pod.node, uplink_key), "0");
}

// --- 3. Caps on what one attachment adds to shared kernel state ----------

#[test]
fn an_add_past_its_caps_is_refused_and_rolled_back_within_the_deadline() {
    let Some((sb, pod)) = setup("tb3", &["fx-net"], &["host-local"]) else {
        return;
    };
    let deadline = 3000;
    let flood = |ops: Value| {
        sb.conf(
            "1.1.0",
            "tbnet3",
            json!([{"type": "fx-net", "strict": true,
                    "ipam": {"type": "host-local", "subnet": "10.74.0.0/24",
                             "dataDir": sb.dir.join("ipam").to_string_lossy()},
                    "ops": ops,
                    "wasm": {"deadlineMs": deadline, "hostCallBudget": 100_000}}]),
        )
    };
    let cases = [
        // 3 000 ifbs asked for: the 9th link is refused.
        (
            json!([{"op": "create-ifb", "ns": "node", "name": "tbifb{i}", "repeat": 3000}]),
            "at most 8 links",
        ),
        // 5 000 rules in the node's shared chains: refused past the cap.
        (
            json!([{"op": "ipam-add"},
                   {"op": "filter-add", "repeat": 5000,
                    "rules": [{"masquerade": {"source": "10.74.0.2",
                                              "except": ["10.{i}.0.0/16"]}}]}]),
            "an attachment may add at most 32",
        ),
        // Node routes inside its own /24, one per address.
        (
            json!([{"op": "ipam-add"},
                   {"op": "create-veth", "name": "eth0", "peer": "tbv{cid}", "peer-ns": "node"},
                   {"op": "up", "ns": "node", "name": "tbv{cid}"},
                   {"op": "add-route", "ns": "node", "dst": "10.74.0.{i}/32", "dev": "tbv{cid}",
                    "repeat": 200}]),
            "at most 16 addresses and routes",
        ),
    ];
    for (i, (ops, why)) in cases.into_iter().enumerate() {
        let conf = flood(ops);
        pod.run(Invocation::new("STATUS"), &conf);
        let before = everything(&sb, &pod, &[]);
        let id = format!("c{i}");
        let out = pod.run(add(&id), &conf);
        assert_eq!(out.error_code(), 999, "{out:?}");
        assert!(out.error_msg().contains(why), "{}", out.error_msg());
        assert!(
            out.elapsed < Duration::from_millis(deadline) + SLACK,
            "{why}: {:?}",
            out.elapsed
        );
        assert_eq!(before, everything(&sb, &pod, &[]), "{why}");
        let started = Instant::now();
        pod.run(del(&id), &conf).assert_ok();
        assert!(started.elapsed() < SLACK);
    }
}

// --- 4. A daemon peer gains nothing it could not do itself ----------------

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

#[test]
fn a_non_root_peer_runs_no_program_and_names_no_path() {
    let Some((sb, pod)) = setup("tb4", &["fx-net"], &[]) else {
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
    let Some((sb, pod)) = setup("tb4n", &["fx-net"], &[]) else {
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
    let file = req.join("req.json");
    let env = json!([
        ["CNI_COMMAND", "ADD"],
        ["CNI_CONTAINERID", "n2"],
        ["CNI_NETNS", pod.ctr.path()],
        ["CNI_IFNAME", "eth0"],
        ["CNI_PATH", "/usr/lib/cni"]
    ]);
    std::fs::write(
        &file,
        json!({"env": env, "stdin": conf.to_string()}).to_string(),
    )
    .unwrap();
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
}

/// Let the unprivileged peer read what the test wrote for it.
fn open_to_nobody_file(dir: &TempDir) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for e in std::fs::read_dir(dir.path()).unwrap().flatten() {
        std::fs::set_permissions(e.path(), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
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

// --- 5. Idle peers, SIGTERM, abandoned requests -------------------------

#[test]
fn idle_peers_starve_no_one_and_sigterm_is_honoured() {
    let Some((sb, pod)) = setup("tb5", &["fx-net"], &[]) else {
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
    let Some((sb, pod)) = setup("tb5a", &["fx-wasi", "fx-net"], &[]) else {
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
    let request = |id: &str, conf: &Value| {
        let file = req.join(format!("{id}.json"));
        let env = json!([
            ["CNI_COMMAND", "ADD"],
            ["CNI_CONTAINERID", id],
            ["CNI_NETNS", pod.ctr.path()],
            ["CNI_IFNAME", "eth0"],
            ["CNI_PATH", "/usr/lib/cni"]
        ]);
        std::fs::write(
            &file,
            json!({"env": env, "stdin": conf.to_string()}).to_string(),
        )
        .unwrap();
        file
    };
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

// --- 6. One slow scraper blinds no one -----------------------------------

#[test]
fn trickling_scrapers_do_not_blind_the_metrics() {
    let Some((sb, pod)) = setup("tb6", &[], &[]) else {
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

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(19750)
}

// --- 7. plugin test has a bound the component cannot stretch --------------

#[test]
fn plugin_test_ends_at_its_bound_whatever_the_component_does() {
    if !is_root("plugin_test_ends_at_its_bound_whatever_the_component_does") {
        return;
    }
    // A component that spins into its deadline whenever a host call fails:
    // under --faults every injection point costs a whole deadline.
    let dir = TempDir::new("tb7");
    std::fs::copy(fixture("fx-net"), dir.join("fx-net.wasm")).unwrap();
    let reads: Vec<Value> = (0..40)
        .map(|_| json!({"op": "list-links", "ns": "node"}))
        .collect();
    let conf = dir.join("conf.json");
    std::fs::write(
        &conf,
        json!({"cniVersion": "1.1.0", "name": "tb7", "type": "fx-net",
               "ops": reads, "onFailure": "spin", "wasm": {"deadlineMs": 10_000}})
        .to_string(),
    )
    .unwrap();
    let started = Instant::now();
    let out = Command::new(wasm_cni_tests::wasm_cni_bin())
        .args(["plugin", "test"])
        .arg(dir.join("fx-net.wasm"))
        .arg("--config")
        .arg(&conf)
        .args(["--faults", "--max-seconds", "4"])
        .output()
        .unwrap();
    let took = started.elapsed();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("FAIL time-bound"), "{text}");
    assert!(text.contains("--max-seconds"), "{text}");
    // 40 × 10 s without the bound; the bound plus one tick and the exit.
    assert!(took < Duration::from_secs(4) + SLACK, "{took:?}");
}

// --- 8. Compiling a component is bounded ---------------------------------

#[test]
fn a_component_too_large_or_too_costly_to_compile_is_refused() {
    let Some((sb, pod)) = setup("tb8", &[], &["bridge"]) else {
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

// --- 9. A scope's size in etcd: read back, or refused for good ----------

#[test]
fn a_large_scope_in_etcd_reads_back_and_an_oversized_write_is_no_retry() {
    if !is_root("a_large_scope_in_etcd_reads_back_and_an_oversized_write_is_no_retry") {
        return;
    }
    let etcd = wasm_cni_tests::Etcd::start();
    let node = Netns::new("tb9n");
    etcd.join(&node);
    let ctr = Netns::new("tb9c");
    let sb = Sandbox::new("tb9");
    sb.install(&fixture("fx-hostile"), "fx-hostile");
    let fill = |from: u64, count: u64| {
        let mut c = sb.conf(
            "1.1.0",
            "tbnet9",
            json!([{"type": "fx-hostile", "attack": "store-fill", "from": from,
                    "count": count, "wasm": {"deadlineMs": 10_000}}]),
        );
        c["store"] = etcd.store("tb9n", 5000);
        c
    };
    // Five calls of 20 values of 64 KiB (1.3 MB each, under etcd's 1.5 MiB
    // request limit): the scope grows past 5 MiB, beyond gRPC's default
    // reply size, and every call still reads it.
    for i in 0..5u64 {
        let id = format!("f{i}");
        let out = Invocation::new("ADD")
            .id(&id)
            .netns(ctr.path())
            .run_in(Some(&node.name), &fill(i * 20, 20));
        out.assert_ok();
    }
    // A single call writing 1.9 MB: etcd refuses the request for its size.
    // Trying again cannot help: not code 11, and the message says why.
    let out = Invocation::new("ADD")
        .id("big")
        .netns(ctr.path())
        .run_in(Some(&node.name), &fill(100, 30));
    let code = out.error_code();
    assert_ne!(code, 11, "{out:?}");
    assert!(
        out.error_msg().contains("request is too large"),
        "{}",
        out.error_msg()
    );
    // And the store still serves this scope.
    Invocation::new("ADD")
        .id("after")
        .netns(ctr.path())
        .run_in(Some(&node.name), &fill(0, 1))
        .assert_ok();
}
