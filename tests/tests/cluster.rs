//! The etcd store: nodes (namespaces, each with its own state directory)
//! allocating from one pool in one real etcd, which the tests start, kill,
//! restart and freeze.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wasm_cni_tests::{is_root, plugin, Daemon, Etcd, Invocation, Netns, Output, TempDir};

const PREFIX: &str = "/wasm-cni-test";

/// A node: its namespace on the cluster network, its own plugin and state
/// directories, and its name in the cluster store.
struct Node {
    name: String,
    ns: Netns,
    dir: TempDir,
    store: Value,
    daemon: Option<Daemon>,
}

impl Node {
    fn new(etcd: &Etcd, name: &str, timeout_ms: u64) -> Node {
        let ns = Netns::new(name);
        etcd.join(&ns);
        let dir = TempDir::new(name);
        std::fs::create_dir_all(dir.join("plugins")).unwrap();
        std::fs::copy(plugin("host-local"), dir.join("plugins/host-local.wasm")).unwrap();
        Node {
            name: name.to_string(),
            ns,
            dir,
            store: etcd.store(name, timeout_ms),
            daemon: None,
        }
    }

    /// Serve this node's calls from a daemon in its namespace.
    fn with_daemon(mut self) -> Node {
        self.daemon = Some(Daemon::start(&self.ns.name, &[]));
        self
    }

    fn conf(&self, network: &str, ipam: Value) -> Value {
        let mut ipam = ipam;
        ipam["type"] = json!("host-local");
        let conf = json!({
            "cniVersion": "1.1.0", "name": network, "type": "wasm-cni",
            "pluginDir": self.dir.join("plugins"), "stateDir": self.dir.join("state"),
            "cacheDir": self.dir.join("cache"), "store": self.store,
            "chain": [{"type": "host-local", "ipam": ipam}],
        });
        match &self.daemon {
            Some(d) => d.conf(&conf, "require"),
            None => conf,
        }
    }

    fn run(&self, verb: &str, id: &str, conf: &Value) -> Output {
        Invocation::new(verb)
            .id(id)
            .netns("/run/netns/none")
            .run_in(Some(&self.ns.name), conf)
    }

    fn gc(&self, conf: &Value, valid: &[&str]) -> Output {
        let mut c = conf.clone();
        c["cni.dev/valid-attachments"] = json!(valid
            .iter()
            .map(|id| json!({"containerID": id, "ifname": "eth0"}))
            .collect::<Vec<_>>());
        Invocation::new("GC").run_in(Some(&self.ns.name), &c)
    }

    /// `wasm-cni ipam ls --json --store …` on this node.
    fn ipam_ls(&self, network: &str) -> Value {
        let out = self.ns.exec(&[
            wasm_cni_tests::wasm_cni_bin().to_str().unwrap(),
            "ipam",
            "ls",
            "--json",
            "--all",
            "--network",
            network,
            "--state-dir",
            self.dir.join("state").to_str().unwrap(),
            "--store",
            &self.store.to_string(),
        ]);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
    }
}

fn ip_of(out: &Output) -> String {
    out.json()["ips"][0]["address"]
        .as_str()
        .unwrap_or_else(|| panic!("{out:?}"))
        .to_string()
}

/// The live entries etcd holds for `network`: address → (container, node).
fn live(etcd: &Etcd, network: &str) -> BTreeMap<String, (String, String)> {
    let prefix = format!("{PREFIX}/scopes/{network}/host-local/entries/");
    etcd.dump(&prefix)
        .into_iter()
        .filter_map(|(k, v)| {
            let e: Value = serde_json::from_str(&v).ok()?;
            if !e["releasedAt"].is_null() {
                return None;
            }
            Some((
                k.strip_prefix(&prefix)?.to_string(),
                (
                    e["owner"]["containerId"].as_str()?.to_string(),
                    e["node"].as_str()?.to_string(),
                ),
            ))
        })
        .collect()
}

#[test]
fn three_nodes_of_16_clients_share_one_pool_with_no_address_twice() {
    if !is_root("three_nodes_of_16_clients_share_one_pool_with_no_address_twice") {
        return;
    }
    let etcd = Etcd::start();
    // The third node serves its clients from a daemon: both doors share it.
    let nodes = Arc::new(vec![
        Node::new(&etcd, "cla", 5000),
        Node::new(&etcd, "clb", 5000),
        Node::new(&etcd, "clc", 5000).with_daemon(),
    ]);
    let ipam = json!({"ranges": [[{"subnet": "10.214.0.0/24"}]], "reuseIPWait": 0});
    const CLIENTS: usize = 16;
    const EACH: usize = 3;
    // Every client and the checker, who looks while all wait.
    let barrier = Arc::new(Barrier::new(nodes.len() * CLIENTS + 1));
    let held: Arc<std::sync::Mutex<Vec<(String, String)>>> = Arc::default();
    // A failed call is recorded, not a panic: the others must not be left
    // waiting at a barrier.
    let errors: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let check = |held: &[(String, String)], want: usize, what: &str| {
        assert!(
            errors.lock().unwrap().is_empty(),
            "{what}: {:?}",
            errors.lock().unwrap()
        );
        let ips: BTreeSet<&String> = held.iter().map(|(_, ip)| ip).collect();
        assert_eq!((held.len(), ips.len()), (want, want), "{what}: {held:?}");
        let stored = live(&etcd, "clnet");
        assert_eq!(stored.len(), want, "{what}: etcd holds {stored:?}");
        for (id, ip) in held {
            let addr = ip.split('/').next().unwrap();
            assert_eq!(
                stored.get(addr).map(|(c, _)| c.as_str()),
                Some(id.as_str()),
                "{what}"
            );
        }
    };
    let mut threads = Vec::new();
    for n in 0..nodes.len() {
        for c in 0..CLIENTS {
            let (nodes, barrier, held, ipam, errors) = (
                nodes.clone(),
                barrier.clone(),
                held.clone(),
                ipam.clone(),
                errors.clone(),
            );
            threads.push(std::thread::spawn(move || {
                let node = &nodes[n];
                let conf = node.conf("clnet", ipam);
                let ids: Vec<String> = (0..2 * EACH)
                    .map(|i| format!("{}-{c}-{i}", node.name))
                    .collect();
                let add = |id: &String| {
                    let out = node.run("ADD", id, &conf);
                    match out.json()["ips"][0]["address"].as_str() {
                        Some(ip) if out.code == 0 => {
                            held.lock().unwrap().push((id.clone(), ip.to_string()))
                        }
                        _ => errors.lock().unwrap().push(format!("ADD {id}: {out:?}")),
                    }
                };
                let del = |id: &String| {
                    let out = node.run("DEL", id, &conf);
                    if out.code == 0 {
                        held.lock().unwrap().retain(|(i, _)| i != id);
                    } else {
                        errors.lock().unwrap().push(format!("DEL {id}: {out:?}"));
                    }
                };
                // Round 1: everyone adds; round 2: half is released and as
                // many added (reusing what others just released); round 3:
                // all released.
                ids[..EACH].iter().for_each(add);
                barrier.wait();
                barrier.wait();
                ids[..EACH - 1].iter().for_each(del);
                ids[EACH..2 * EACH - 1].iter().for_each(add);
                barrier.wait();
                barrier.wait();
                ids[EACH - 1..2 * EACH - 1].iter().for_each(del);
            }));
        }
    }
    let everyone = nodes.len() * CLIENTS;
    barrier.wait();
    check(
        &held.lock().unwrap(),
        everyone * EACH,
        "after the first adds",
    );
    // Block affinity: each node took 48 addresses, fewer than a /26 holds,
    // so no node had to borrow, and each /26 holds one node's addresses.
    let mut blocks: BTreeMap<u8, BTreeSet<String>> = BTreeMap::new();
    for (addr, (_, node)) in live(&etcd, "clnet") {
        let last: u8 = addr.rsplit('.').next().unwrap().parse().unwrap();
        blocks.entry(last / 64).or_default().insert(node);
    }
    assert!(
        blocks.values().all(|nodes| nodes.len() == 1),
        "nodes share blocks: {blocks:?}"
    );
    assert_eq!(blocks.len(), 3, "{blocks:?}");
    barrier.wait();
    barrier.wait();
    check(
        &held.lock().unwrap(),
        everyone * EACH,
        "after releases and reuse",
    );
    barrier.wait();
    for t in threads {
        t.join().unwrap();
    }
    assert!(
        errors.lock().unwrap().is_empty(),
        "{:?}",
        errors.lock().unwrap()
    );
    assert!(held.lock().unwrap().is_empty());
    assert!(live(&etcd, "clnet").is_empty(), "a release was lost");
    let view = nodes[0].ipam_ls("clnet");
    assert_eq!(view[0]["network"], "clnet", "{view}");
}

#[test]
fn exhaustion_quarantine_and_gc_hold_across_nodes() {
    if !is_root("exhaustion_quarantine_and_gc_hold_across_nodes") {
        return;
    }
    let etcd = Etcd::start();
    let (a, b) = (Node::new(&etcd, "xa", 3000), Node::new(&etcd, "xb", 3000));
    // Four addresses, a minute of quarantine.
    let ipam = json!({"ranges": [[{"subnet": "10.215.0.0/24",
        "rangeStart": "10.215.0.10", "rangeEnd": "10.215.0.13"}]], "reuseIPWait": 60});
    let (ca, cb) = (a.conf("xnet", ipam.clone()), b.conf("xnet", ipam));
    let a1 = ip_of(&a.run("ADD", "a1", &ca));
    let a2 = ip_of(&a.run("ADD", "a2", &ca));
    let b1 = ip_of(&b.run("ADD", "b1", &cb));
    // A releases a1: quarantined for B as well, so B gets the last free one
    // and then nothing (code 11, saying why), cluster-wide.
    a.run("DEL", "a1", &ca).assert_ok();
    let b2 = ip_of(&b.run("ADD", "b2", &cb));
    let all: BTreeSet<&String> = [&a1, &a2, &b1, &b2].into_iter().collect();
    assert_eq!(all.len(), 4, "{all:?}");
    for (node, conf, id) in [(&b, &cb, "b3"), (&a, &ca, "a3")] {
        let e = node.run("ADD", id, conf);
        assert_eq!(e.error_code(), 11, "{e:?}");
        assert!(e.stdout.contains("quarantined"), "{e:?}");
    }
    let stored = live(&etcd, "xnet");
    assert_eq!(
        stored
            .values()
            .map(|(c, n)| format!("{c}@{n}"))
            .collect::<BTreeSet<_>>(),
        ["a2@xa", "b1@xb", "b2@xb"]
            .map(String::from)
            .into_iter()
            .collect()
    );
    // GC on A knowing none of A's attachments valid: A's go, B's stay.
    a.gc(&ca, &[]).assert_ok();
    let stored = live(&etcd, "xnet");
    assert_eq!(
        stored
            .values()
            .map(|(c, _)| c.as_str())
            .collect::<BTreeSet<_>>(),
        ["b1", "b2"].into_iter().collect(),
        "{stored:?}"
    );
    // The operator view from either node shows every node's entries.
    let view = b.ipam_ls("xnet");
    let entries = view[0]["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 4, "{view}");
    // A late DEL of a1 changes nothing; DEL of B's on B frees them.
    a.run("DEL", "a1", &ca).assert_ok();
    b.run("DEL", "b1", &cb).assert_ok();
    b.run("DEL", "b2", &cb).assert_ok();
    assert!(live(&etcd, "xnet").is_empty());
}

#[test]
fn etcd_down_or_frozen_is_code_11_in_time_and_nothing_leaks() {
    if !is_root("etcd_down_or_frozen_is_code_11_in_time_and_nothing_leaks") {
        return;
    }
    let mut etcd = Etcd::start();
    let a = Node::new(&etcd, "fa", 500);
    let b = Node::new(&etcd, "fb", 500).with_daemon();
    // A /20: faster calls once filled a /24 within the test, and a full
    // range is a code 999, not the outage this test is about.
    let ipam = json!({"ranges": [[{"subnet": "10.216.0.0/20"}]], "reuseIPWait": 0});
    let (ca, cb) = (a.conf("fnet", ipam.clone()), b.conf("fnet", ipam));
    a.run("ADD", "before", &ca).assert_ok();
    // Calls racing a kill and a restart of etcd: each one a result or a
    // clean code 11, within timeoutMs and the call's deadline.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let outcomes: Arc<std::sync::Mutex<Vec<(String, u64, Duration)>>> = Arc::default();
    let mut threads = Vec::new();
    for (node, conf) in [(Arc::new(a), ca.clone()), (Arc::new(b), cb.clone())] {
        for c in 0..3 {
            let (node, conf, stop, outcomes) =
                (node.clone(), conf.clone(), stop.clone(), outcomes.clone());
            threads.push(std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let id = format!("{}-{c}-{i}", node.name);
                    let started = Instant::now();
                    let out = node.run("ADD", &id, &conf);
                    let code = if out.code == 0 { 0 } else { out.error_code() };
                    if code != 0 && code != 11 {
                        // Say what it was: the assertion below only has the code.
                        eprintln!("{id}: code {code}: {}", out.stdout);
                    }
                    outcomes.lock().unwrap().push((id, code, started.elapsed()));
                    i += 1;
                }
                node
            }));
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    etcd.kill();
    std::thread::sleep(Duration::from_millis(1500));
    etcd.restart();
    std::thread::sleep(Duration::from_millis(500));
    etcd.freeze();
    std::thread::sleep(Duration::from_millis(1500));
    etcd.thaw();
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let nodes: Vec<Arc<Node>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let outcomes = outcomes.lock().unwrap().clone();
    let failed: Vec<&(String, u64, Duration)> = outcomes.iter().filter(|o| o.1 != 0).collect();
    eprintln!(
        "{} calls while etcd was killed, restarted and frozen: {} results, {} code 11, slowest {:?}",
        outcomes.len(),
        outcomes.len() - failed.len(),
        failed.len(),
        outcomes.iter().map(|o| o.2).max().unwrap_or_default()
    );
    assert!(!failed.is_empty(), "etcd down never showed: {outcomes:?}");
    assert!(outcomes.iter().any(|o| o.1 == 0), "{outcomes:?}");
    for (id, code, took) in &outcomes {
        assert!(*code == 0 || *code == 11, "{id}: code {code}");
        // timeoutMs 500 bounds each etcd request; a call makes at most a
        // few, plus the process itself.
        assert!(*took < Duration::from_secs(4), "{id} took {took:?}");
    }
    // Afterwards: what succeeded is held once; what failed holds nothing
    // once the runtime's DEL (or GC) has been.
    let (a, b) = (&nodes[0], &nodes[3]);
    for (id, code, _) in &failed {
        let (node, conf) = if id.starts_with("fa") {
            (a, &ca)
        } else {
            (b, &cb)
        };
        let _ = code;
        node.run("DEL", id, conf).assert_ok();
    }
    let ok: BTreeSet<String> = outcomes
        .iter()
        .filter(|o| o.1 == 0)
        .map(|o| o.0.clone())
        .chain(["before".to_string()])
        .collect();
    let stored = live(&etcd, "fnet");
    let held: BTreeSet<String> = stored.values().map(|(c, _)| c.clone()).collect();
    assert_eq!(held, ok, "leaked or lost");
    // GC with nothing valid on each node: the pool is empty again.
    a.gc(&ca, &[]).assert_ok();
    b.gc(&cb, &[]).assert_ok();
    assert!(live(&etcd, "fnet").is_empty());
}

#[test]
fn a_nodes_local_allocations_move_into_etcd_without_losing_one() {
    if !is_root("a_nodes_local_allocations_move_into_etcd_without_losing_one") {
        return;
    }
    let etcd = Etcd::start();
    let node = Node::new(&etcd, "ma", 3000);
    let ipam = json!({"ranges": [[{"subnet": "10.217.0.0/24"}]]});
    // Local first: the same config without a store.
    let mut local = node.conf("mnet", ipam.clone());
    local.as_object_mut().unwrap().remove("store");
    let ips: Vec<String> = ["m1", "m2", "m3"]
        .iter()
        .map(|id| ip_of(&node.run("ADD", id, &local)))
        .collect();
    node.run("DEL", "m3", &local).assert_ok();
    let import = |args: &[&str]| {
        let mut full = vec![
            wasm_cni_tests::wasm_cni_bin().to_str().unwrap().to_string(),
            "ipam".into(),
            "import-local".into(),
            "--from-state-dir".into(),
            node.dir.join("state").to_str().unwrap().to_string(),
            "--state-dir".into(),
            node.dir.join("state").to_str().unwrap().to_string(),
            "--store".into(),
            node.store.to_string(),
        ];
        full.extend(args.iter().map(|s| s.to_string()));
        let refs: Vec<&str> = full.iter().map(String::as_str).collect();
        node.ns.exec(&refs)
    };
    let out = import(&[]);
    assert!(out.contains("mnet/host-local: 3 imported"), "{out}");
    // Again: nothing new.
    let out = import(&[]);
    assert!(out.contains("0 imported, 3 already there"), "{out}");
    let stored = live(&etcd, "mnet");
    assert_eq!(
        stored.keys().cloned().collect::<Vec<_>>(),
        ips[..2]
            .iter()
            .map(|i| i.split('/').next().unwrap().to_string())
            .collect::<Vec<_>>()
    );
    // The cluster store now answers for the node: a new ADD never takes
    // a moved address, and DEL releases a moved one.
    let cluster = node.conf("mnet", ipam);
    let fresh = ip_of(&node.run("ADD", "m4", &cluster));
    assert!(!ips.contains(&fresh), "{fresh} {ips:?}");
    node.run("DEL", "m1", &cluster).assert_ok();
    assert_eq!(live(&etcd, "mnet").len(), 2);
    // A conflicting owner in etcd stops the import of that scope whole.
    let other = Node::new(&etcd, "mb", 3000);
    let mut local_b = other.conf("mnet", json!({"ranges": [[{"subnet": "10.217.0.0/24"}]]}));
    local_b.as_object_mut().unwrap().remove("store");
    // Its .2 is released in etcd (m1's), its .3 held there by m2.
    ip_of(&other.run("ADD", "z1", &local_b));
    let taken = ip_of(&other.run("ADD", "z2", &local_b));
    assert_eq!(taken, ips[1], "held in etcd by m2");
    let e = other.ns.try_exec(&[
        wasm_cni_tests::wasm_cni_bin().to_str().unwrap(),
        "ipam",
        "import-local",
        "--from-state-dir",
        other.dir.join("state").to_str().unwrap(),
        "--state-dir",
        other.dir.join("state").to_str().unwrap(),
        "--store",
        &other.store.to_string(),
    ]);
    assert!(!e, "a conflicting import must fail");
    let stored = live(&etcd, "mnet");
    assert_eq!(
        stored
            .values()
            .map(|(c, _)| c.as_str())
            .collect::<BTreeSet<_>>(),
        ["m2", "m4"].into_iter().collect(),
        "nothing of the scope imported: {stored:?}"
    );
}

#[test]
fn a_bad_store_config_is_code_7() {
    let dir = TempDir::new("badstore");
    std::fs::create_dir_all(dir.join("plugins")).unwrap();
    std::fs::copy(plugin("host-local"), dir.join("plugins/host-local.wasm")).unwrap();
    for (store, msg) in [
        (json!("etcd"), "store: expected an object"),
        (json!({"type": "etcd", "endpoints": []}), "at least one"),
        (
            json!({"type": "etcd", "endpoints": ["10.0.0.1:2379"]}),
            "not an http",
        ),
        (
            json!({"type": "etcd", "endpoints": ["http://10.0.0.1:2379"], "timeout": 5}),
            "unknown field",
        ),
    ] {
        let conf = json!({"cniVersion": "1.1.0", "name": "bad", "type": "wasm-cni",
            "pluginDir": dir.join("plugins"), "stateDir": dir.join("state"), "store": store,
            "chain": [{"type": "host-local", "ipam": {"subnet": "10.218.0.0/24"}}]});
        let out = Invocation::new("ADD").run(&conf);
        assert_eq!(out.error_code(), 7, "{store}: {out:?}");
        assert!(out.error_msg().contains(msg), "{store}: {out:?}");
    }
}
