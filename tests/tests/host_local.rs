//! host-local IPAM through the real binary: quarantine and reuse order,
//! exhaustion and STATUS codes, ownership on DEL, GC, rollback of a failed
//! ADD, import of the reference on-disk format, and the store under
//! concurrency and SIGKILL.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wasm_cni_tests::{fixture, plugin, plugin_logs, wasm_cni_bin, Invocation, Sandbox};

fn sandbox(tag: &str) -> Sandbox {
    let sb = Sandbox::new(tag);
    sb.install(&plugin("host-local"), "host-local");
    sb
}

/// A chain of just host-local: as a chain step it reads its settings from
/// the entry's `ipam` object, like the reference run directly.
fn conf(sb: &Sandbox, name: &str, ipam: Value) -> Value {
    let mut ipam = ipam;
    ipam["type"] = json!("host-local");
    sb.conf("1.1.0", name, json!([{"type":"host-local","ipam":ipam}]))
}

fn add_ip(conf: &Value, id: &str) -> String {
    let out = Invocation::new("ADD").id(id).run(conf);
    out.assert_ok();
    out.json()["ips"][0]["address"]
        .as_str()
        .unwrap_or_else(|| panic!("no address in {}", out.stdout))
        .to_string()
}

fn del(conf: &Value, id: &str) {
    Invocation::new("DEL").id(id).run(conf).assert_ok();
}

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

/// `wasm-cni ipam ls --json --all` for one network: address → entry.
fn ls(sb: &Sandbox, network: &str) -> BTreeMap<String, Value> {
    let state = sb.state_dir();
    let (code, out, err) = cli(&[
        "ipam",
        "ls",
        "--json",
        "--network",
        network,
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let views: Value = serde_json::from_str(&out).unwrap();
    views
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["plugin"] == "host-local")
        .flat_map(|v| v["entries"].as_array().unwrap().clone())
        .map(|e| (e["key"].as_str().unwrap().to_string(), e))
        .collect()
}

/// Live allocations as address → container id.
fn live(sb: &Sandbox, network: &str) -> BTreeMap<String, String> {
    ls(sb, network)
        .into_iter()
        .filter(|(_, e)| e["state"] == "allocated")
        .map(|(k, e)| (k, e["containerId"].as_str().unwrap().to_string()))
        .collect()
}

fn status(conf: &Value) -> wasm_cni_tests::Output {
    Invocation::new("STATUS").run(conf)
}

#[test]
fn quarantine_never_used_first_then_longest_released() {
    let sb = sandbox("quar");
    // A /29: .2 .. .6 are allocatable.
    let c = conf(
        &sb,
        "quarnet",
        json!({"subnet":"10.77.0.0/29","reuseIPWait":1}),
    );
    let start = Instant::now();
    assert_eq!(add_ip(&c, "a"), "10.77.0.2/29");
    let first_add = start.elapsed();
    del(&c, "a");
    // a's address is quarantined: b gets another one.
    assert_eq!(add_ip(&c, "b"), "10.77.0.3/29");
    let q = &ls(&sb, "quarnet")["10.77.0.2"];
    assert_eq!(q["state"], "quarantined");
    assert!(q["quarantineLeftMs"].as_u64().unwrap() <= 1000);
    add_ip(&c, "c");
    del(&c, "b");
    thread::sleep(Duration::from_millis(1100));
    // Both released addresses are free again, yet never-used ones go first.
    assert_eq!(add_ip(&c, "d"), "10.77.0.5/29");
    assert_eq!(add_ip(&c, "e"), "10.77.0.6/29");
    // Then the one released longest ago (a's), then b's.
    assert_eq!(add_ip(&c, "f"), "10.77.0.2/29");
    assert_eq!(add_ip(&c, "g"), "10.77.0.3/29");
    // All held: the reference's exhaustion error, code 999.
    let full = Invocation::new("ADD").id("h").run(&c);
    assert_eq!(full.error_code(), 999);
    assert_eq!(
        full.error_msg(),
        "host-local: failed to allocate for range 0: no IP addresses available in range set: 10.77.0.1-10.77.0.6"
    );
    assert_eq!(status(&c).error_code(), 50);
    // Only a quarantined address left: try again later, code 11.
    del(&c, "d");
    let later = Invocation::new("ADD").id("h").run(&c);
    assert_eq!(later.error_code(), 11, "{}", later.stdout);
    assert!(later.json()["details"]
        .as_str()
        .unwrap()
        .contains("reuseQuarantined"));
    let st = status(&c);
    assert_eq!(st.error_code(), 50);
    assert_eq!(
        st.error_msg(),
        "host-local: no IP addresses available in range set: 10.77.0.1-10.77.0.6"
    );
    thread::sleep(Duration::from_millis(1100));
    status(&c).assert_ok();
    assert_eq!(add_ip(&c, "h"), "10.77.0.5/29");
    eprintln!("first ADD (compiling the component): {first_add:?}");
}

/// The SDK's allocator serves a call from the guest's initial memory
/// (`wasm_cni_sdk::arena`), so an ADD and a DEL grow no memory: a grow is
/// a change of page protections in the host on the way up and another as
/// the reused instance shrinks back, each a TLB shootdown across its
/// threads. Read from the engine's debug line per call; with the standard
/// allocator every call grew its memory once.
#[test]
fn an_add_and_a_del_fit_the_plugins_initial_memory() {
    let sb = sandbox("initmem");
    let conf = conf(
        &sb,
        "initmemn",
        json!({"ranges": [[{"subnet": "10.72.0.0/24"}]]}),
    );
    for verb in ["ADD", "DEL"] {
        let out = Invocation::new(verb)
            .id("c1")
            .env("WASM_CNI_LOG", "debug")
            .run(&conf);
        out.assert_ok();
        let lines: Vec<&str> = out
            .stderr
            .lines()
            .filter(|l| l.contains("KiB of linear memory"))
            .collect();
        assert_eq!(lines.len(), 1, "one call, one line: {}", out.stderr);
        assert!(
            lines[0].contains("host-local") && lines[0].ends_with("grown 0 times in the call"),
            "{verb}: {}",
            lines[0]
        );
    }
}

#[test]
fn reuse_quarantined_takes_the_longest_released_at_once() {
    let sb = sandbox("reuseq");
    let c = conf(
        &sb,
        "reuseqnet",
        json!({"subnet":"10.77.1.0/30","reuseIPWait":600,"reuseQuarantined":true}),
    );
    assert_eq!(add_ip(&c, "a"), "10.77.1.2/30");
    del(&c, "a");
    status(&c).assert_ok();
    assert_eq!(add_ip(&c, "b"), "10.77.1.2/30");
}

#[test]
fn del_releases_only_what_the_attachment_owns() {
    let sb = sandbox("owner");
    let c = conf(&sb, "ownnet", json!({"subnet":"10.77.2.0/24"}));
    let ip = add_ip(&c, "mine");
    del(&c, "other");
    Invocation::new("DEL")
        .id("mine")
        .ifname("net1")
        .run(&c)
        .assert_ok();
    let held = live(&sb, "ownnet");
    assert_eq!(held.len(), 1);
    assert_eq!(held[ip.trim_end_matches("/24")], "mine");
    // CHECK finds the allocation; the runtime's DEL releases it, twice is fine.
    Invocation::new("CHECK").id("mine").run(&c).assert_ok();
    del(&c, "mine");
    del(&c, "mine");
    assert!(live(&sb, "ownnet").is_empty());
}

#[test]
fn requested_addresses_dns_and_routes() {
    let sb = sandbox("req");
    let resolv = sb.dir.join("resolv.conf");
    std::fs::write(
        &resolv,
        "# test\nnameserver 192.0.2.53\ndomain example.com\nsearch a.example b.example\noptions ndots:2\n",
    )
    .unwrap();
    let mut c = conf(
        &sb,
        "reqnet",
        json!({"ranges":[[{"subnet":"10.77.3.0/24"}],[{"subnet":"2001:db8:77::/64"}]],
               "routes":[{"dst":"0.0.0.0/0"},{"dst":"192.168.0.0/16","gw":"10.77.3.1"}],
               "resolvConf": resolv}),
    );
    // `args` is per plugin: it goes in the chain entry.
    c["chain"][0]["args"] = json!({"cni":{"ips":["2001:db8:77::99/64"]}});
    let mut inv = Invocation::new("ADD").id("r");
    inv.args = "IP=10.77.3.40";
    let out = inv.run(&c);
    out.assert_ok();
    let r = out.json();
    assert_eq!(r["ips"][0]["address"], "10.77.3.40/24");
    assert_eq!(r["ips"][0]["gateway"], "10.77.3.1");
    assert_eq!(r["ips"][1]["address"], "2001:db8:77::99/64");
    assert_eq!(
        r["routes"][1],
        json!({"dst":"192.168.0.0/16","gw":"10.77.3.1"})
    );
    assert_eq!(r["dns"]["nameservers"], json!(["192.0.2.53"]));
    assert_eq!(r["dns"]["search"], json!(["a.example", "b.example"]));
    // The host reads only the file the config names.
    std::fs::remove_file(&resolv).unwrap();
    let gone = Invocation::new("ADD").id("s").run(&c);
    assert_eq!(gone.error_code(), 5);
    assert!(gone.error_msg().contains("resolv.conf"), "{}", gone.stdout);
    // Validation texts come through with code 7.
    let bad = conf(&sb, "badnet", json!({"subnet":"10.77.3.1/24"}));
    let out = Invocation::new("ADD").id("x").run(&bad);
    assert_eq!(out.error_code(), 7);
    assert_eq!(
        out.error_msg(),
        "host-local: invalid range set 0: Network has host bits set. For a subnet mask of length 24 the network address is 10.77.3.0"
    );
}

#[test]
fn a_failed_add_leaves_its_address_in_quarantine() {
    let sb = sandbox("rollback");
    sb.install(&fixture("fx"), "fx");
    // host-local as its own step, a later step fails: the host's rollback
    // DELs host-local.
    let ipam = json!({"type":"host-local","subnet":"10.77.4.0/24","reuseIPWait":60});
    let c = sb.conf(
        "1.1.0",
        "rbnet",
        json!([{"type":"host-local","ipam":ipam},{"type":"fx","add":"fail"}]),
    );
    assert_eq!(Invocation::new("ADD").id("a").run(&c).error_code(), 999);
    let e = &ls(&sb, "rbnet")["10.77.4.2"];
    assert_eq!(e["state"], "quarantined");
    assert_eq!(e["containerId"], "a");
    // Delegated: the plugin's IPAM ADD succeeded, then the plugin failed.
    let d = sb.conf(
        "1.1.0",
        "rbnet",
        json!([{"type":"fx","callIpam":true,"add":"fail","ipam":ipam}]),
    );
    assert_eq!(Invocation::new("ADD").id("b").run(&d).error_code(), 999);
    let entries = ls(&sb, "rbnet");
    assert_eq!(entries["10.77.4.3"]["state"], "quarantined");
    assert_eq!(entries["10.77.4.3"]["containerId"], "b");
    // Neither address comes back soon.
    let ok = sb.conf("1.1.0", "rbnet", json!([{"type":"host-local","ipam":ipam}]));
    assert_eq!(add_ip(&ok, "c"), "10.77.4.4/24");
}

fn gc(conf: &Value, key: &str, valid: Value) -> wasm_cni_tests::Output {
    let mut c = conf.clone();
    c[key] = valid;
    Invocation::new("GC")
        .id("")
        .ifname("")
        .env("WASM_CNI_LOG", "info")
        .run(&c)
}

/// A reference host-local data dir with `files` (name, content).
fn reference_dir(root: &Path, network: &str, files: &[(&str, &str)]) {
    let dir = root.join(network);
    std::fs::create_dir_all(&dir).unwrap();
    for (name, content) in files {
        std::fs::write(dir.join(name), content).unwrap();
    }
}

fn import(sb: &Sandbox, dir: &Path) -> String {
    let (code, out, err) = cli(&[
        "ipam",
        "import-host-local",
        dir.to_str().unwrap(),
        "--state-dir",
        sb.state_dir().to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    out
}

#[test]
fn gc_with_a_valid_list_an_empty_list_and_null() {
    let sb = sandbox("gc");
    let c = conf(&sb, "gcnet", json!({"subnet":"10.77.5.0/24"}));
    add_ip(&c, "a");
    add_ip(&c, "b");
    // Allocations the host has no attachment record of (left by the
    // reference plugin): only the plugin's own GC can find them.
    let refd = sb.dir.join("ref");
    reference_dir(
        &refd,
        "gcnet",
        &[("10.77.5.100", "x\r\neth0"), ("10.77.5.101", "y\r\neth0")],
    );
    import(&sb, &refd);
    assert_eq!(live(&sb, "gcnet").len(), 4);

    let valid = json!([{"containerID":"a","ifname":"eth0"},{"containerID":"x","ifname":"eth0"}]);
    let out = gc(&c, "cni.dev/valid-attachments", valid);
    out.assert_ok();
    let mut held: Vec<String> = live(&sb, "gcnet").into_values().collect();
    held.sort();
    assert_eq!(held, ["a", "x"]);
    let logs: Vec<String> = plugin_logs(&out.stderr)
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    assert!(
        logs.iter()
            .any(|l| l == "gc: released 10.77.5.101 of stale y eth0"),
        "{logs:?}"
    );
    // Released by GC means quarantined, like any release.
    assert_eq!(ls(&sb, "gcnet")["10.77.5.101"]["state"], "quarantined");

    gc(&c, "cni.dev/valid-attachments", json!([])).assert_ok();
    assert!(live(&sb, "gcnet").is_empty());

    add_ip(&c, "c");
    // libcni's nil list, under the tagged spec's key.
    gc(&c, "cni.dev/attachments", Value::Null).assert_ok();
    assert!(live(&sb, "gcnet").is_empty());
}

#[test]
fn import_of_a_hand_written_reference_directory() {
    let sb = sandbox("import");
    let refd = sb.dir.join("networks");
    reference_dir(
        &refd,
        "impnet",
        &[
            ("10.77.6.2", "ctr-a\r\neth0"),
            ("10.77.6.3", "ctr-b"),
            ("2001:db8:76::2", "ctr-a\r\neth0"),
            ("last_reserved_ip.0", "10.77.6.3"),
            ("last_reserved_ip.1", "2001:db8:76::2"),
            ("lock", ""),
        ],
    );
    let out = import(&sb, &refd);
    assert!(
        out.contains("impnet: 3 imported, 0 already present, 2 cursor(s)"),
        "{out}"
    );
    let held = live(&sb, "impnet");
    assert_eq!(held.len(), 3);
    assert_eq!(held["10.77.6.3"], "ctr-b");
    let c = sb.conf(
        "1.1.0",
        "impnet",
        json!([{"type":"host-local","ipam":{"type":"host-local",
            "ranges":[[{"subnet":"10.77.6.0/24"}],[{"subnet":"2001:db8:76::/64"}]]}}]),
    );
    // The cursor continues where the reference stopped.
    let out = Invocation::new("ADD").id("new").run(&c);
    out.assert_ok();
    assert_eq!(out.json()["ips"][0]["address"], "10.77.6.4/24");
    assert_eq!(out.json()["ips"][1]["address"], "2001:db8:76::3/64");
    // The legacy id-only file belongs to ctr-b/eth0: its DEL releases it.
    del(&c, "ctr-b");
    assert_eq!(ls(&sb, "impnet")["10.77.6.3"]["state"], "quarantined");
    // Importing again changes nothing.
    assert!(import(&sb, &refd).contains("impnet: 0 imported, 3 already present"));
    assert_eq!(ls(&sb, "impnet")["10.77.6.3"]["state"], "quarantined");
}

/// Run the reference binary for one verb.
fn reference(cmd: &str, id: &str, conf: &Value) -> std::process::Output {
    let mut child = Command::new("/usr/lib/cni/host-local")
        .env_clear()
        .envs([
            ("CNI_COMMAND", cmd),
            ("CNI_CONTAINERID", id),
            ("CNI_NETNS", "/run/netns/none"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/usr/lib/cni"),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the reference host-local");
    if let Some(mut s) = child.stdin.take() {
        s.write_all(conf.to_string().as_bytes()).unwrap();
    }
    child.wait_with_output().unwrap()
}

#[test]
fn import_of_what_the_reference_binary_allocated() {
    if !Path::new("/usr/lib/cni/host-local").is_file() {
        eprintln!("SKIP: no reference host-local in /usr/lib/cni");
        return;
    }
    let sb = sandbox("refbin");
    let data = sb.dir.join("refdata");
    let ref_conf = json!({"cniVersion":"1.0.0","name":"refnet",
        "ipam":{"type":"host-local","subnet":"10.77.7.0/24","dataDir":data}});
    for id in ["r1", "r2", "r3"] {
        let out = reference("ADD", id, &ref_conf);
        assert!(out.status.success(), "{out:?}");
    }
    assert!(reference("DEL", "r2", &ref_conf).status.success());
    import(&sb, &data);
    let held = live(&sb, "refnet");
    let expect: BTreeMap<String, String> = [("10.77.7.2", "r1"), ("10.77.7.4", "r3")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(held, expect);
    // Both continue identically from the reference's cursor.
    let c = conf(&sb, "refnet", json!({"subnet":"10.77.7.0/24"}));
    let ours = add_ip(&c, "n1");
    let out = reference("ADD", "n1", &ref_conf);
    let theirs: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ours, theirs["ips"][0]["address"].as_str().unwrap());
    // And DEL of an imported attachment releases it.
    del(&c, "r1");
    assert_eq!(live(&sb, "refnet").len(), 2);
}

/// One ADD or DEL as seen by a worker: when it ran and what it returned.
#[derive(Clone, Debug)]
struct Op {
    owner: String,
    add: bool,
    start: Duration,
    end: Duration,
    ip: Option<String>,
}

#[test]
fn concurrent_add_del_never_double_allocates() {
    let workers: usize = 64;
    let cycles: usize = std::env::var("HOST_LOCAL_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let sb = sandbox("conc");
    // 253 addresses for at most 64 holders; no wait, so reuse is constant.
    let c = Arc::new(conf(
        &sb,
        "concnet",
        json!({"subnet":"10.78.0.0/24","reuseIPWait":0}),
    ));
    // Compile the component once, outside the measurement.
    add_ip(&c, "warmup");
    del(&c, "warmup");
    let base = Instant::now();
    let log = Arc::new(Mutex::new(Vec::<Op>::with_capacity(workers * cycles * 2)));
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let (c, log) = (c.clone(), log.clone());
            thread::spawn(move || {
                let owner = format!("w{w}");
                let mut mine = Vec::with_capacity(cycles * 2);
                for _ in 0..cycles {
                    let start = base.elapsed();
                    let out = Invocation::new("ADD").id(&owner).run(&c);
                    let end = base.elapsed();
                    out.assert_ok();
                    let ip = out.json()["ips"][0]["address"].as_str().map(str::to_string);
                    mine.push(Op {
                        owner: owner.clone(),
                        add: true,
                        start,
                        end,
                        ip,
                    });
                    let start = base.elapsed();
                    Invocation::new("DEL").id(&owner).run(&c).assert_ok();
                    let end = base.elapsed();
                    mine.push(Op {
                        owner: owner.clone(),
                        add: false,
                        start,
                        end,
                        ip: None,
                    });
                }
                log.lock().unwrap().extend(mine);
            })
        })
        .collect();
    for h in handles {
        h.join().expect("worker");
    }
    let elapsed = base.elapsed();
    let log = log.lock().unwrap().clone();
    assert_eq!(log.len(), workers * cycles * 2);

    // An address is surely held from the end of its ADD to the start of the
    // owner's next DEL; two such intervals on one address must not overlap.
    let mut by_owner: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in &log {
        by_owner.entry(&op.owner).or_default().push(op);
    }
    let mut held: BTreeMap<String, Vec<(Duration, Duration, &str)>> = BTreeMap::new();
    for ops in by_owner.values_mut() {
        ops.sort_by_key(|o| o.start);
        for pair in ops.chunks(2) {
            let [add, del] = pair else {
                panic!("unpaired op")
            };
            assert!(add.add && !del.add);
            let ip = add.ip.clone().expect("ADD without an address");
            held.entry(ip)
                .or_default()
                .push((add.end, del.start, add.owner.as_str()));
        }
    }
    for (ip, spans) in &mut held {
        spans.sort();
        for w in spans.windows(2) {
            assert!(
                w[1].0 >= w[0].1,
                "{ip} held by {} and {} at once: {:?} / {:?}",
                w[0].2,
                w[1].2,
                w[0],
                w[1]
            );
        }
    }
    // Every release happened: nothing is left allocated.
    let entries = ls(&sb, "concnet");
    let live: Vec<_> = entries
        .iter()
        .filter(|(_, e)| e["state"] == "allocated")
        .collect();
    assert!(live.is_empty(), "left allocated: {live:?}");
    let adds: Vec<&Op> = log.iter().filter(|o| o.add).collect();
    let mean_add = adds.iter().map(|o| o.end - o.start).sum::<Duration>() / adds.len() as u32;
    eprintln!(
        "concurrency: {workers} workers x {cycles} cycles = {} ADD/DEL in {elapsed:.1?}, \
         {} addresses used, mean ADD {mean_add:.1?} under contention",
        log.len(),
        held.len()
    );
}

/// xorshift: enough randomness for kill timing without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn spawn_cni(cmd: &str, id: &str, conf: &[u8]) -> Child {
    let mut child = Command::new(wasm_cni_bin())
        .env_clear()
        .envs([
            ("CNI_COMMAND", cmd),
            ("CNI_CONTAINERID", id),
            ("CNI_NETNS", "/run/netns/none"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_ARGS", ""),
            ("CNI_PATH", "/usr/lib/cni"),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn wasm-cni");
    if let Some(mut s) = child.stdin.take() {
        let _ = s.write_all(conf);
    }
    child
}

/// Where an attachment stands from the runtime's point of view.
#[derive(Clone, Debug, PartialEq)]
enum Att {
    /// Nothing held (never added, or DEL succeeded).
    Clean,
    /// ADD succeeded with this address.
    Added(String),
    /// An ADD or DEL was killed: the runtime must DEL it (or GC will).
    Dirty,
}

#[test]
fn sigkill_during_add_and_del_leaks_and_duplicates_nothing() {
    const WORKERS: u64 = 6;
    const ATTACHMENTS: u64 = 6;
    const KILLS_WANTED: usize = 240;
    let sb = sandbox("crash");
    let c = conf(
        &sb,
        "crashnet",
        json!({"subnet":"10.79.0.0/23","reuseIPWait":0.2}),
    );
    add_ip(&c, "warmup");
    del(&c, "warmup");
    let bytes = Arc::new(serde_json::to_vec(&c).unwrap());
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("crash test seed {seed}");
    let kills = Arc::new(Mutex::new(0usize));
    let started = Instant::now();
    let handles: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (bytes, kills) = (bytes.clone(), kills.clone());
            thread::spawn(move || {
                let mut rng = Rng(seed ^ (w + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
                // Each worker owns its attachments: the runtime never runs
                // two operations on one container at once.
                let mut atts: BTreeMap<String, Att> = (0..ATTACHMENTS)
                    .map(|i| (format!("k{w}x{i}"), Att::Clean))
                    .collect();
                let ids: Vec<String> = atts.keys().cloned().collect();
                while *kills.lock().unwrap() < KILLS_WANTED {
                    let id = &ids[rng.below(ATTACHMENTS) as usize];
                    let state = atts[id].clone();
                    let cmd = if state == Att::Clean { "ADD" } else { "DEL" };
                    let mut child = spawn_cni(cmd, id, &bytes);
                    // Kill at a random point of the process's ~10 ms life,
                    // or (every other time) let it finish.
                    let delay = rng.below(16);
                    let kill = rng.below(2) != 0;
                    thread::sleep(Duration::from_millis(delay));
                    let killed =
                        kill && matches!(child.try_wait(), Ok(None)) && child.kill().is_ok();
                    let out = child.wait_with_output().expect("wait");
                    let next = if killed && out.status.code().is_none() {
                        *kills.lock().unwrap() += 1;
                        Att::Dirty
                    } else if !out.status.success() {
                        panic!(
                            "{cmd} {id} failed: {}",
                            String::from_utf8_lossy(&out.stdout)
                        );
                    } else if cmd == "ADD" {
                        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
                        Att::Added(r["ips"][0]["address"].as_str().unwrap().to_string())
                    } else {
                        Att::Clean
                    };
                    atts.insert(id.clone(), next);
                }
                atts
            })
        })
        .collect();
    let mut all: BTreeMap<String, Att> = BTreeMap::new();
    for h in handles {
        all.extend(h.join().expect("worker"));
    }
    let kills = *kills.lock().unwrap();
    let valid: BTreeMap<&str, &str> = all
        .iter()
        .filter_map(|(id, a)| match a {
            Att::Added(ip) => Some((id.as_str(), ip.trim_end_matches("/23"))),
            _ => None,
        })
        .collect();
    let list: Vec<Value> = valid
        .keys()
        .map(|id| json!({"containerID": id, "ifname": "eth0"}))
        .collect();
    let swept = gc(&c, "cni.dev/valid-attachments", json!(list));
    swept.assert_ok();
    // Evidence of where the kills landed: a kill between the store's commit
    // and the attachment record leaves an allocation only the plugin's GC
    // finds; one between the record and the reply leaves a record the host
    // DELs; one inside a commit leaves a temporary file behind.
    let plugin_gc = plugin_logs(&swept.stderr)
        .iter()
        .filter(|(_, m)| m.starts_with("gc: released"))
        .count();
    let record_gc = swept
        .stderr
        .matches("gc: deleting stale attachment")
        .count();
    let torn = std::fs::read_dir(sb.state_dir().join("store/crashnet"))
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().ends_with(".tmp")
        })
        .count();

    // The store is readable and holds exactly one address per valid
    // attachment: the one its ADD reported.
    let raw = std::fs::read(sb.state_dir().join("store/crashnet/host-local.json")).unwrap();
    let store: Value = serde_json::from_slice(&raw).expect("store readable");
    let mut owners: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (ip, e) in store["entries"].as_object().unwrap() {
        if e.get("releasedAt").is_none() {
            let id = e["owner"]["containerId"].as_str().unwrap().to_string();
            owners.entry(id).or_default().push(ip.clone());
        }
    }
    let leaked: Vec<_> = owners
        .keys()
        .filter(|o| !valid.contains_key(o.as_str()))
        .collect();
    assert!(leaked.is_empty(), "leaked after GC: {leaked:?}");
    for (id, ip) in &valid {
        assert_eq!(owners.get(*id), Some(&vec![ip.to_string()]), "{id}");
    }
    let distinct: BTreeSet<&&str> = valid.values().collect();
    assert_eq!(distinct.len(), valid.len(), "an address given twice");
    // The rest of the machinery still works: DEL everything, nothing left.
    for id in valid.keys() {
        del(&c, id);
    }
    assert!(live(&sb, "crashnet").is_empty());
    eprintln!(
        "crash test: {kills} SIGKILLs in {:.1?}; at GC {} attachments valid, {record_gc} stale \
         records DELed, {plugin_gc} orphan allocations released by the plugin, {torn} commits \
         cut short",
        started.elapsed(),
        valid.len()
    );
}
